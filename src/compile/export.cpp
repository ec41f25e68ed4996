// Export and the hardened reader of exported graphs (export.h).
#include "compile/export.h"

#include "core/error.h"
#include "io/json_strict.h"
#include "io/safetensors.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <set>

namespace minigpt::compile {

using nlohmann::json;

namespace {

const char* kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Input: return "input";
    case TensorKind::Weight: return "weight";
    case TensorKind::Intermediate: return "intermediate";
    case TensorKind::Output: return "output";
  }
  return "?";
}

// Typed access to one JSON field; every failure names the file and where in the graph.
struct Reader {
  const std::string& source;
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    MINIGPT_FAIL("{}: exported graph: {}: {}", source, where, what);
  }
  const json& field(const json& o, const char* key, const std::string& where) const {
    if (!o.is_object()) fail(where, "is not a JSON object");
    const auto it = o.find(key);
    if (it == o.end()) fail(where, fmt::format("has no '{}'", key));
    return *it;
  }
  int64_t integer(const json& o, const char* key, const std::string& where, int64_t lo, int64_t hi) const {
    const json& v = field(o, key, where);
    if (!v.is_number_integer()) fail(where, fmt::format("'{}' is not an integer", key));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(where, fmt::format("'{}' = {} outside [{}, {}]", key, x, lo, hi));
    return x;
  }
  bool boolean(const json& o, const char* key, const std::string& where) const {
    const json& v = field(o, key, where);
    if (!v.is_boolean()) fail(where, fmt::format("'{}' is not a boolean", key));
    return v.get<bool>();
  }
  std::string string(const json& o, const char* key, const std::string& where) const {
    const json& v = field(o, key, where);
    if (!v.is_string()) fail(where, fmt::format("'{}' is not a string", key));
    return v.get<std::string>();
  }
  // An array of tensor ids in [0, n).
  std::vector<int> ids(const json& o, const char* key, const std::string& where, int64_t n) const {
    const json& v = field(o, key, where);
    if (!v.is_array()) fail(where, fmt::format("'{}' is not an array", key));
    std::vector<int> out;
    for (const json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= n)
        fail(where, fmt::format("'{}' holds {}, not a tensor id in [0, {})", key, e.dump(), n));
      out.push_back(static_cast<int>(e.get<int64_t>()));
    }
    return out;
  }
};

Op op_from_name(const std::string& name, const Reader& r, const std::string& where) {
  for (int i = 0; i < kOpCount; ++i)
    if (op_name(static_cast<Op>(i)) == name) return static_cast<Op>(i);
  r.fail(where, fmt::format("unknown op '{}'", name));
}

}  // namespace

json graph_to_json(const Graph& g) {
  json j;
  j["name"] = g.name;
  json tensors = json::array();
  for (const TensorInfo& t : g.tensors) {
    MINIGPT_CHECK(t.strides == contiguous_strides(t.shape) && t.arena_offset < 0 && t.materialized,
                  "export: tensor '{}' is not as capture leaves it (strided, planned or fused): export the captured graph", t.name);
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype == DType::I32 ? "i32" : "f32"}, {"shape", t.shape},
                       {"kind", kind_name(t.kind)}, {"alias_of", t.alias_of}});
  }
  j["tensors"] = std::move(tensors);
  json nodes = json::array();
  for (const Node& n : g.nodes) {
    MINIGPT_CHECK(n.group < 0, "export: node '{}' belongs to a fused kernel: export the captured graph", n.source);
    nodes.push_back({{"op", op_name(n.op)}, {"inputs", n.inputs}, {"output", n.output}, {"source", n.source},
                     {"origin", n.origin}, {"alpha", n.alpha}, {"period", n.period}, {"offset", n.offset},
                     {"runtime_offset", n.runtime_offset}, {"part", n.part}, {"heads", n.heads},
                     {"acc_f64", n.acc_f64}, {"has_bias", n.has_bias}, {"has_residual", n.has_residual},
                     {"gelu", n.gelu}});
  }
  j["nodes"] = std::move(nodes);
  j["inputs"] = g.inputs;
  j["weights"] = g.weights;
  j["outputs"] = g.outputs;
  return j;
}

Graph graph_from_json(const json& j, const std::string& source) {
  const Reader r{source};
  constexpr int64_t kMaxDim = int64_t{1} << 31, kMaxCount = 1 << 20;
  Graph g;
  g.name = r.string(j, "name", "graph");
  const json& tensors = r.field(j, "tensors", "graph");
  const json& nodes = r.field(j, "nodes", "graph");
  if (!tensors.is_array() || tensors.size() > kMaxCount) r.fail("graph", "'tensors' is not an array of at most 2^20");
  if (!nodes.is_array() || nodes.size() > kMaxCount) r.fail("graph", "'nodes' is not an array of at most 2^20");
  const int64_t nt = static_cast<int64_t>(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    const std::string where = fmt::format("tensor {}", i);
    TensorInfo ti;
    ti.name = r.string(t, "name", where);
    const std::string dtype = r.string(t, "dtype", where);
    if (dtype != "f32" && dtype != "i32") r.fail(where, fmt::format("unknown dtype '{}'", dtype));
    ti.dtype = dtype == "i32" ? DType::I32 : DType::F32;
    const json& shape = r.field(t, "shape", where);
    if (!shape.is_array() || shape.empty() || shape.size() > 8) r.fail(where, "'shape' is not an array of 1 to 8 sizes");
    int64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxDim)
        r.fail(where, fmt::format("shape size {} is not an integer in [1, 2^31]", d.dump()));
      ti.shape.push_back(d.get<int64_t>());
      if (numel > (int64_t{1} << 40) / ti.shape.back()) r.fail(where, "shape too large");
      numel *= ti.shape.back();
    }
    const std::string kind = r.string(t, "kind", where);
    if (kind == "input") ti.kind = TensorKind::Input;
    else if (kind == "weight") ti.kind = TensorKind::Weight;
    else if (kind == "intermediate") ti.kind = TensorKind::Intermediate;
    else if (kind == "output") ti.kind = TensorKind::Output;
    else r.fail(where, fmt::format("unknown tensor kind '{}'", kind));
    ti.alias_of = static_cast<int>(r.integer(t, "alias_of", where, -1, nt - 1));
    g.add_tensor(std::move(ti));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& o = nodes[i];
    const std::string where = fmt::format("node {}", i);
    Node n;
    n.op = op_from_name(r.string(o, "op", where), r, where);
    n.inputs = r.ids(o, "inputs", where, nt);
    n.output = static_cast<int>(r.integer(o, "output", where, 0, nt - 1));
    n.source = r.string(o, "source", where);
    n.origin = r.string(o, "origin", where);
    const json& alpha = r.field(o, "alpha", where);
    if (!alpha.is_number()) r.fail(where, "'alpha' is not a number");
    n.alpha = alpha.get<float>();
    n.period = r.integer(o, "period", where, 0, kMaxDim);
    n.offset = r.integer(o, "offset", where, 0, kMaxDim);
    n.runtime_offset = r.boolean(o, "runtime_offset", where);
    n.part = static_cast<int>(r.integer(o, "part", where, 0, 2));
    n.heads = static_cast<int>(r.integer(o, "heads", where, 0, 1 << 16));
    n.acc_f64 = r.boolean(o, "acc_f64", where);
    n.has_bias = r.boolean(o, "has_bias", where);
    n.has_residual = r.boolean(o, "has_residual", where);
    n.gelu = r.boolean(o, "gelu", where);
    if (n.op == Op::Attention || n.op == Op::SplitHeads)
      if (n.heads < 1 || g.tensor(n.inputs.empty() ? n.output : n.inputs[0]).shape.back() % (3 * n.heads) != 0)
        r.fail(where, fmt::format("{} heads do not divide its qkv", n.heads));
    TensorInfo& out = g.tensor(n.output);
    if (out.producer >= 0) r.fail(where, fmt::format("tensor {} has two producers", n.output));
    out.producer = static_cast<int>(i);
    g.nodes.push_back(std::move(n));
  }
  g.inputs = r.ids(j, "inputs", "graph", nt);
  g.weights = r.ids(j, "weights", "graph", nt);
  g.outputs = r.ids(j, "outputs", "graph", nt);
  for (int w : g.weights)
    if (g.tensor(w).kind != TensorKind::Weight) r.fail("graph", fmt::format("weight {} is not a weight tensor", w));
  try {
    verify(g, "export reader");
  } catch (const Error& e) {
    MINIGPT_FAIL("{}: exported graph: {}", source, e.what());
  }
  return g;
}

void export_graph(const std::string& path, const Graph& g, const std::map<std::string, const float*>& weights) {
  verify(g, "export");
  std::vector<Tensor> copies;
  copies.reserve(g.weights.size());
  std::vector<io::SafetensorsItem> items;
  for (int w : g.weights) {
    const TensorInfo& t = g.tensor(w);
    const auto it = weights.find(t.name);
    MINIGPT_CHECK(it != weights.end(), "export: graph {} needs weight '{}', which was not given", g.name, t.name);
    copies.push_back(Tensor::empty(Shape(t.shape.begin(), t.shape.end())));
    std::memcpy(copies.back().data(), it->second, static_cast<size_t>(t.bytes()));
  }
  for (size_t i = 0; i < g.weights.size(); ++i) items.push_back(io::f32_item(g.tensor(g.weights[i]).name, copies[i]));
  const std::map<std::string, std::string> meta{{"format", kGraphFormatTag},
                                                {"format_version", std::to_string(kGraphFormatVersion)},
                                                {"graph", graph_to_json(g).dump()}};
  io::write_safetensors(path, items, meta);
}

namespace {

ExportedGraph read_exported(const io::SafetensorsFile& f) {
  const std::string& path = f.path;
  const auto& meta = f.index.metadata;
  auto get = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    MINIGPT_CHECK(it != meta.end(), "{}: __metadata__ has no '{}' (not an exported minigpt graph?)", path, key);
    return it->second;
  };
  MINIGPT_CHECK(get("format") == kGraphFormatTag, "{}: __metadata__ format is '{}', expected '{}'", path, get("format"), kGraphFormatTag);
  const std::string& version = get("format_version");
  int v = 0;
  MINIGPT_CHECK(version.size() <= 6 && !version.empty() && version.find_first_not_of("0123456789") == std::string::npos &&
                    (v = std::stoi(version)) >= 1,
                "{}: format_version '{}' is not a positive integer", path, version);
  MINIGPT_CHECK(v <= kGraphFormatVersion, "{}: format_version {} is newer than this reader's {}: update minigpt", path, v,
                kGraphFormatVersion);
  for (const auto& [key, value] : meta)
    MINIGPT_CHECK(key == "format" || key == "format_version" || key == "graph", "{}: __metadata__ has unknown key '{}'", path, key);
  ExportedGraph out;
  out.graph = graph_from_json(io::parse_json_strict(get("graph"), path, "metadata graph"), path);
  std::set<std::string> wanted;
  for (int w : out.graph.weights) {
    const TensorInfo& t = out.graph.tensor(w);
    MINIGPT_CHECK(wanted.insert(t.name).second, "{}: the graph names weight '{}' twice", path, t.name);
    const io::SafetensorsEntry* e = f.index.find(t.name);
    MINIGPT_CHECK(e != nullptr, "{}: the graph's weight '{}' is missing from the file", path, t.name);
    MINIGPT_CHECK(e->shape == Shape(t.shape.begin(), t.shape.end()), "{}: weight '{}' has shape {} in the file but {} in the graph",
                  path, t.name, shape_text(std::vector<int64_t>(e->shape.begin(), e->shape.end())), shape_text(t.shape));
    out.weights.emplace(t.name, f.tensor_f32(t.name));  // Error if not F32
  }
  for (const io::SafetensorsEntry& e : f.index.entries)
    MINIGPT_CHECK(wanted.count(e.name), "{}: tensor '{}' is not a weight of the graph", path, e.name);
  return out;
}

}  // namespace

ExportedGraph load_exported_graph(const std::string& path) { return read_exported(io::read_safetensors(path)); }

bool is_exported_graph(const std::string& path) {
  if (!path.ends_with(".safetensors")) return false;
  const io::SafetensorsFile f = io::read_safetensors(path);
  const auto it = f.index.metadata.find("format");
  return it != f.index.metadata.end() && it->second == kGraphFormatTag;
}

}  // namespace minigpt::compile
