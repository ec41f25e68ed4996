// Exported graphs (compile/export.h): the shipped model's forward exported, read back and run
// through the compiler gives eager's logits (within 1e-5); the reader refuses, with an Error
// naming the problem, a truncated file, a newer format version, a graph naming a weight the
// file lacks, a weight of the wrong shape, an extra tensor, an unknown op, a tensor id out of
// range and a graph that does not verify.
#include "compile/capture.h"
#include "compile/export.h"
#include "compile/runner.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include "io_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <stdexcept>

using namespace minigpt;
using namespace minigpt::compile;
using minigpt::testing::ScratchDir;
using nlohmann::json;

namespace {

const std::string kModel = std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors";

CompileOptions test_options() {
  CompileOptions o;
  o.cache_dir = std::filesystem::path(MINIGPT_BINARY_DIR) / "compile_test_cache";
  o.quiet = true;
  return o;
}

// A one-layer model's forward at (1, 4), and its weights: the files the reader tests corrupt.
struct Small {
  ModelConfig c;
  ModelWeights w;
  Graph g;
  Small() {
    c.n_layer = 1;
    c.vocab_size = 30;
    c.block_size = 8;
    w = ModelWeights::init_random(c, 3);
    g = capture_gpt(c, 1, 4);
  }
  const Tensor& weight(const std::string& name) const {
    for (const auto& [n, t] : w.named())
      if (n == name) return *t;
    throw std::runtime_error("no weight " + name);
  }
  // The file export_graph writes, with `edit` applied to the graph JSON and the metadata.
  void write(const std::string& path, const std::function<void(json&, std::map<std::string, std::string>&,
                                                                std::vector<io::SafetensorsItem>&)>& edit) const {
    json j = graph_to_json(g);
    std::map<std::string, std::string> meta{{"format", kGraphFormatTag}, {"format_version", "1"}};
    std::vector<io::SafetensorsItem> items;
    for (int id : g.weights) items.push_back(io::f32_item(g.tensor(id).name, weight(g.tensor(id).name)));
    edit(j, meta, items);
    if (!meta.count("graph")) meta["graph"] = j.dump();
    io::write_safetensors(path, items, meta);
  }
};

}  // namespace

TEST(CompileExport, ShippedModelRoundTripsToEagerLogits) {
  ModelFile f = load_model(kModel);
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  ScratchDir dir;
  const std::string path = dir.file("gpt.safetensors");
  const int64_t B = 2, T = 9;
  const Graph captured = capture_gpt(model.config(), B, T);
  WeightBinding bound = bind_weights(model.weights());
  export_graph(path, captured, bound.values);
  EXPECT_TRUE(is_exported_graph(path));
  EXPECT_FALSE(is_exported_graph(kModel));

  ExportedGraph ex = load_exported_graph(path);
  EXPECT_EQ(graph_hash(ex.graph), graph_hash(captured));
  EXPECT_EQ(graph_to_json(ex.graph), graph_to_json(captured));
  EXPECT_EQ(ex.weights.size(), captured.weights.size());
  WeightBinding w;
  for (auto& [name, t] : ex.weights) {
    w.values[name] = t.data();
    if (t.dim() == 2) w.shapes[name] = {t.shape()[0], t.shape()[1]};
  }
  CompiledGraph cg(ex.graph, w, test_options());
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 2) % static_cast<size_t>(model.config().vocab_size));
  const int64_t V = model.config().vocab_size;
  Tensor logits = Tensor::empty({B, T, V}), probs = Tensor::empty({B, T, V}), el, ep;
  const void* in[] = {ids.data()};
  float* out[] = {logits.data(), probs.data()};
  ThreadPool pool(1);
  cg.run(in, out, pool);
  model.forward(ids.data(), B, T, el, ep, pool);
  float diff = 0;
  for (int64_t i = 0; i < el.numel(); ++i) diff = std::max(diff, std::fabs(el.data()[i] - logits.data()[i]));
  EXPECT_LT(diff, 1e-5f);
}

TEST(CompileExport, ReaderRefusesBadFiles) {
  const Small s;
  ScratchDir dir;
  const std::string good = dir.file("good.safetensors");
  s.write(good, [](auto&, auto&, auto&) {});
  ASSERT_NO_THROW(load_exported_graph(good));

  {  // truncated: the safetensors reader's checks
    std::vector<uint8_t> bytes = minigpt::testing::slurp(good);
    bytes.resize(bytes.size() - 5);
    minigpt::testing::spit(dir.file("cut.safetensors"), bytes);
    EXPECT_ERROR_CONTAINS(load_exported_graph(dir.file("cut.safetensors")), "cut.safetensors");
  }
  const auto bad = [&](const std::string& name, const auto& edit, const std::string& message) {
    const std::string path = dir.file(name + ".safetensors");
    s.write(path, edit);
    EXPECT_ERROR_CONTAINS(load_exported_graph(path), message);
  };
  bad("newer", [](json&, auto& meta, auto&) { meta["format_version"] = "2"; }, "format_version 2 is newer");
  bad("version", [](json&, auto& meta, auto&) { meta["format_version"] = "one"; }, "not a positive integer");
  bad("format", [](json&, auto& meta, auto&) { meta["format"] = "minigpt"; }, "expected 'minigpt-graph'");
  bad("nograph", [](json&, auto& meta, auto&) { meta["graph"] = "{\"name\": "; }, "metadata graph");
  bad("missing", [](json&, auto&, auto& items) { items.erase(items.begin()); }, "is missing from the file");
  bad("extra", [&](json&, auto&, auto& items) { items.push_back(io::f32_item("stowaway", s.weight("wte.weight"))); },
      "'stowaway' is not a weight of the graph");
  const Tensor square = Tensor::zeros({8, 8});  // ln_f.weight's 64 floats as (8, 8)
  bad("shape", [&](json&, auto&, auto& items) {
        for (io::SafetensorsItem& it : items)
          if (it.name == "ln_f.weight") it = io::f32_item("ln_f.weight", square);
      },
      "weight 'ln_f.weight' has shape (8, 8) in the file but");
  bad("op", [](json& j, auto&, auto&) { j["nodes"][0]["op"] = "conv2d"; }, "node 0: unknown op 'conv2d'");
  bad("id", [](json& j, auto&, auto&) { j["nodes"][1]["inputs"][0] = 100000; }, "not a tensor id");
  bad("type", [](json& j, auto&, auto&) { j["nodes"][1]["alpha"] = "big"; }, "'alpha' is not a number");
  bad("field", [](json& j, auto&, auto&) { j["tensors"][0].erase("kind"); }, "tensor 0: has no 'kind'");
  bad("verify", [](json& j, auto&, auto&) { j["nodes"][2]["inputs"] = json::array(); }, "export reader");
}
