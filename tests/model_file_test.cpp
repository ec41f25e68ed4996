// model/model_file: safetensors and .npz model files round-trip bit-exactly (and byte-exactly
// on re-save), and every malformed model file is an Error naming the file and the problem.
#include "io/npy.h"
#include "io/npz.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "model/model_file.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace minigpt;
using minigpt::testing::ScratchDir;
using minigpt::testing::slurp;

namespace {

ModelFile small_model(uint64_t seed = 42) {
  ModelFile m;
  m.config.n_layer = 2;
  m.config.n_head = 2;
  m.config.d_model = 8;
  m.config.block_size = 6;
  m.config.vocab_size = 5;
  m.vocab = {"<pad>", "the", "cat", "sat", "."};
  m.weights = ModelWeights::init_random(m.config, seed);
  // init_random leaves biases at zero; give every tensor distinct bits so a swap would show.
  float v = 0.001f;
  for (auto& [name, t] : m.weights.named())
    if (name.ends_with(".bias"))
      for (float& x : t->span()) x = (v *= -1.01f);
  return m;
}

void expect_same_model(const ModelFile& a, const ModelFile& b) {
  EXPECT_EQ(a.config.to_json(), b.config.to_json());
  EXPECT_EQ(a.config.layernorm_eps, b.config.layernorm_eps);
  EXPECT_EQ(a.vocab, b.vocab);
  const auto na = a.weights.named(), nb = b.weights.named();
  ASSERT_EQ(na.size(), nb.size());
  for (size_t i = 0; i < na.size(); ++i) {
    EXPECT_EQ(na[i].first, nb[i].first);
    ASSERT_EQ(na[i].second->shape(), nb[i].second->shape()) << na[i].first;
    EXPECT_EQ(std::memcmp(na[i].second->data(), nb[i].second->data(), na[i].second->nbytes()), 0) << na[i].first;
  }
}

// The model's tensors as safetensors items, for building altered files.
std::vector<io::SafetensorsItem> items_of(const ModelFile& m) {
  std::vector<io::SafetensorsItem> items;
  for (const auto& [name, t] : m.weights.named()) items.push_back(io::f32_item(name, *t));
  return items;
}

std::map<std::string, std::string> meta_of(const ModelFile& m) {
  return {{"format", "minigpt"}, {"config", m.config.to_json().dump()}, {"vocab", nlohmann::json(m.vocab).dump()}};
}

}  // namespace

TEST(ModelFile, SafetensorsRoundTripIsBitExact) {
  ScratchDir dir;
  const ModelFile m = small_model();
  save_model(dir.file("m.safetensors"), m);
  const ModelFile back = load_model(dir.file("m.safetensors"));
  expect_same_model(m, back);
  save_model(dir.file("m2.safetensors"), back);  // load -> save -> same bytes
  EXPECT_EQ(slurp(dir.file("m.safetensors")), slurp(dir.file("m2.safetensors")));
  expect_same_model(m, load_model(dir.file("m2.safetensors")));
}

TEST(ModelFile, NpzRoundTripIsBitExact) {
  ScratchDir dir;
  const ModelFile m = small_model(7);
  save_model(dir.file("m.npz"), m);
  const ModelFile back = load_model(dir.file("m.npz"));
  expect_same_model(m, back);
  save_model(dir.file("m2.npz"), back);
  EXPECT_EQ(slurp(dir.file("m.npz")), slurp(dir.file("m2.npz")));
  // Across formats: safetensors -> npz -> safetensors gives the original bytes back.
  save_model(dir.file("a.safetensors"), m);
  save_model(dir.file("b.npz"), load_model(dir.file("a.safetensors")));
  save_model(dir.file("c.safetensors"), load_model(dir.file("b.npz")));
  EXPECT_EQ(slurp(dir.file("a.safetensors")), slurp(dir.file("c.safetensors")));
}

TEST(ModelFile, PythonReadsBothFormats) {
  if (std::system("python3 -c 'import numpy, safetensors.numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with numpy and safetensors not available";
  ScratchDir dir;
  const ModelFile m = small_model();
  save_model(dir.file("m.safetensors"), m);
  save_model(dir.file("m.npz"), m);
  const std::string script =
      "import json, sys, numpy as np\n"
      "from safetensors import safe_open\n"
      "d = sys.argv[1]\n"
      "with safe_open(d + '/m.safetensors', 'np') as f:\n"
      "    meta = f.metadata(); st = {k: f.get_tensor(k) for k in f.keys()}\n"
      "assert meta['format'] == 'minigpt'\n"
      "z = np.load(d + '/m.npz', allow_pickle=False)\n"
      "zm = json.loads(bytes(z['__metadata__']).decode())\n"
      "assert zm['config'] == json.loads(meta['config']) and zm['vocab'] == json.loads(meta['vocab'])\n"
      "assert zm['vocab'] == ['<pad>', 'the', 'cat', 'sat', '.']\n"
      "assert set(st) == set(z.files) - {'__metadata__'}, (sorted(st), z.files)\n"
      "for k in st: assert st[k].dtype == np.float32 and np.array_equal(st[k], z[k]), k\n"
      "assert st['blocks.1.mlp.fc1.weight'].shape == (32, 8)\n"
      // numpy's own writer (zip64 local extras) and compressed members load too.
      "np.savez_compressed(d + '/py.npz', **{k: z[k] for k in z.files})\n";
  minigpt::testing::spit(dir.file("s.py"), std::vector<uint8_t>(script.begin(), script.end()));
  ASSERT_EQ(std::system(("python3 " + dir.file("s.py") + " " + dir.path()).c_str()), 0);
  expect_same_model(m, load_model(dir.file("py.npz")));
}

// The Python side (python/minigpt/model_io.py) and this loader read each other's files.
TEST(ModelFile, PythonModelIoInterop) {
  const std::string pkg = std::string(MINIGPT_SOURCE_DIR) + "/python";
  if (std::system(("PYTHONPATH=" + pkg + " python3 -c 'import minigpt.model_io, safetensors' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "python3 cannot import minigpt.model_io (numpy, safetensors)";
  ScratchDir dir;
  const ModelFile m = small_model(3);
  save_model(dir.file("cpp.safetensors"), m);
  save_model(dir.file("cpp.npz"), m);
  const std::string script =
      "import sys, numpy as np\n"
      "from minigpt import model_io as mio\n"
      "d = sys.argv[1]\n"
      "a, b = mio.load_model(d + '/cpp.safetensors'), mio.load_model(d + '/cpp.npz')\n"
      "assert a.vocab == b.vocab == ['<pad>', 'the', 'cat', 'sat', '.'] and a.config == b.config\n"
      "for k in a.weights: assert np.array_equal(a.weights[k], b.weights[k]), k\n"
      "mio.save_model(d + '/py.safetensors', a)\n"
      "mio.save_model(d + '/py.npz', b)\n";
  minigpt::testing::spit(dir.file("s.py"), std::vector<uint8_t>(script.begin(), script.end()));
  ASSERT_EQ(std::system(("PYTHONPATH=" + pkg + " python3 " + dir.file("s.py") + " " + dir.path()).c_str()), 0);
  expect_same_model(m, load_model(dir.file("py.safetensors")));
  expect_same_model(m, load_model(dir.file("py.npz")));
}

TEST(ModelFile, SaveRejectsInconsistentModels) {
  ScratchDir dir;
  ModelFile m = small_model();
  m.vocab.pop_back();
  EXPECT_ERROR_CONTAINS(save_model(dir.file("m.safetensors"), m), "vocab has 4 tokens");
  m = small_model();
  m.vocab[2] = "the";
  EXPECT_ERROR_CONTAINS(save_model(dir.file("m.safetensors"), m), "duplicates 'the'");
  m = small_model();
  m.weights.blocks[1].fc2_bias = Tensor::zeros({3});
  EXPECT_ERROR_CONTAINS(save_model(dir.file("m.safetensors"), m), "blocks.1.mlp.fc2.bias");
  EXPECT_ERROR_CONTAINS(save_model(dir.file("m.bin"), small_model()), "unknown model file extension");
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.safetensors")));
}

// ---------------------------------------------------------------------------------------------
// Malformed safetensors model files: the container is valid, the contents are not.

class ModelFileMalformed : public ::testing::Test {
 protected:
  // Writes items + metadata as a safetensors file and returns load_model's error message.
  std::string load_error(const std::vector<io::SafetensorsItem>& items, const std::map<std::string, std::string>& meta) {
    const std::string path = dir.file("bad.safetensors");
    io::write_safetensors(path, items, meta);
    return minigpt::testing::error_of([&] { load_model(path); });
  }
  void expect_error(const std::vector<io::SafetensorsItem>& items, const std::map<std::string, std::string>& meta,
                    const std::string& sub) {
    const std::string msg = load_error(items, meta);
    EXPECT_NE(msg.find(sub), std::string::npos) << "expected '" << sub << "' in: " << msg;
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  }
  ScratchDir dir;
  ModelFile m = small_model();
};

TEST_F(ModelFileMalformed, MissingExtraAndMisshapenTensors) {
  auto items = items_of(m);
  items.erase(items.begin() + 5);  // blocks.0.attn.qkv.weight... whichever: the message names it
  const std::string missing = std::string("missing tensor '") + items_of(m)[5].name + "'";
  expect_error(items, meta_of(m), missing);

  items = items_of(m);
  const Tensor extra = Tensor::zeros({2});
  items.push_back(io::f32_item("blocks.2.ln1.weight", extra));
  expect_error(items, meta_of(m), "unexpected tensor 'blocks.2.ln1.weight'");

  items = items_of(m);
  const Tensor wrong = Tensor::zeros({8, 9});
  items[0] = io::f32_item("wte.weight", wrong);
  expect_error(items, meta_of(m), "tensor 'wte.weight' has shape (8, 9), the config needs (5, 8)");

  items = items_of(m);
  const std::vector<uint8_t> half(2 * 8, 0);
  items.back() = {"lm_head.bias", io::DType::F16, {8}, half};
  expect_error(items, meta_of(m), "tensor 'lm_head.bias' has dtype F16, expected F32");
}

TEST_F(ModelFileMalformed, BadMetadata) {
  auto meta = meta_of(m);
  meta.erase("format");
  expect_error(items_of(m), meta, "__metadata__ has no 'format'");
  meta = meta_of(m);
  meta["format"] = "gguf";
  expect_error(items_of(m), meta, "format is 'gguf'");
  meta = meta_of(m);
  meta["config"] = "{\"n_layer\": 2,";
  expect_error(items_of(m), meta, "metadata config: invalid JSON");
  meta = meta_of(m);
  auto cfg = m.config.to_json();
  cfg["n_head"] = 3;
  meta["config"] = cfg.dump();
  expect_error(items_of(m), meta, "not divisible by n_head");
  cfg = m.config.to_json();
  cfg["colour"] = 1;
  meta["config"] = cfg.dump();
  expect_error(items_of(m), meta, "unknown key 'colour'");
  meta = meta_of(m);
  meta["vocab"] = "[\"a\", \"b\"]";
  expect_error(items_of(m), meta, "vocab has 2 tokens, config vocab_size is 5");
  meta["vocab"] = "[\"a\", \"b\", \"a\", \"c\", \"d\"]";
  expect_error(items_of(m), meta, "vocab entry 2 duplicates token 'a'");
  meta["vocab"] = "[\"a\", \"b\", \"\", \"c\", \"d\"]";
  expect_error(items_of(m), meta, "vocab entry 2 is empty");
  meta["vocab"] = "[\"a\", \"b\", 3, \"c\", \"d\"]";
  expect_error(items_of(m), meta, "vocab entry 2 is not a string");
  meta["vocab"] = "{\"a\": 1}";
  expect_error(items_of(m), meta, "vocab must be a JSON array");
}

TEST_F(ModelFileMalformed, ContainerErrorsNameTheFile) {
  const std::string path = dir.file("m.safetensors");
  save_model(path, m);
  auto bytes = slurp(path);
  bytes.resize(bytes.size() - 3);
  minigpt::testing::spit(path, bytes);
  EXPECT_ERROR_CONTAINS(load_model(path), path + ": tensor 'lm_head.bias': data_offsets");
  EXPECT_ERROR_CONTAINS(load_model(dir.file("absent.npz")), "absent.npz: cannot open");
}

// Malformed .npz model files.
TEST_F(ModelFileMalformed, Npz) {
  const std::string path = dir.file("bad.npz");
  auto members_of = [&](const ModelFile& model) {
    save_model(path, model);
    return io::read_npz(path);
  };
  auto npz_error = [&](const std::vector<io::NpzMember>& members) {
    io::write_npz(path, members);
    return minigpt::testing::error_of([&] { load_model(path); });
  };
  auto members = members_of(m);
  ASSERT_EQ(members.back().name, "__metadata__.npy");
  auto no_meta = members;
  no_meta.pop_back();
  EXPECT_NE(npz_error(no_meta).find("no __metadata__.npy member"), std::string::npos);

  auto bad_meta = members;
  bad_meta.back().bytes = io::encode_npy_u8(std::vector<uint8_t>{'[', '1', ']'});
  EXPECT_NE(npz_error(bad_meta).find("metadata must be a JSON object with 'config' and 'vocab'"), std::string::npos);

  auto f32_meta = members;
  f32_meta.back().bytes = io::encode_npy_f32(Tensor::zeros({3}));
  EXPECT_NE(npz_error(f32_meta).find("expected uint8"), std::string::npos);

  auto f64 = members;
  const std::vector<uint8_t> zeros(5 * 8 * 8, 0);
  f64[0].bytes = io::encode_npy(io::DType::F64, {5, 8}, zeros);
  const std::string f64_msg = npz_error(f64);
  EXPECT_NE(f64_msg.find("tensor 'wte.weight': npy dtype is F64, expected float32"), std::string::npos) << f64_msg;

  auto extra = members;
  extra.insert(extra.begin(), {"optimizer.step.npy", io::encode_npy_f32(Tensor::zeros({1}))});
  EXPECT_NE(npz_error(extra).find("unexpected tensor 'optimizer.step'"), std::string::npos);

  auto missing = members;
  missing.erase(missing.begin() + 1);
  EXPECT_NE(npz_error(missing).find("missing tensor 'wpe.weight'"), std::string::npos);

  auto not_npy = members;
  not_npy[0].name = "wte.weight.txt";
  EXPECT_NE(npz_error(not_npy).find("member 'wte.weight.txt' is not a .npy array"), std::string::npos);

  // A corrupted member (bad CRC) in an otherwise valid model archive.
  save_model(path, m);
  auto bytes = slurp(path);
  bytes[200] ^= 0x40;
  minigpt::testing::spit(path, bytes);
  EXPECT_ERROR_CONTAINS(load_model(path), "CRC-32 mismatch");
}
