// Export: a captured graph and its weights as one standalone file, and the hardened reader.
//
// The file is a safetensors file (io/safetensors.h: the same reader, and so the same rules, as
// model files): one F32 tensor per graph weight, named as the graph names it, and in
// __metadata__ the keys
//   "format"         = "minigpt-graph"  (model files say "minigpt": the kind is told by this)
//   "format_version" = "1"              (a reader refuses a newer version)
//   "graph"          = the captured graph as JSON (graph_to_json below)
// The graph is the one capture made, before any pass: the reader runs the whole pipeline on it
// (passes, codegen, JIT), so a file outlives changes to fusion and code generation.
// docs/ARCHITECTURE.md ("Exported graphs") documents the format.
//
// The reader trusts no byte: beyond the safetensors checks, every JSON field is typed and
// range-checked, every op name known, every tensor id in range, every graph weight present in
// the file with its shape (and nothing else there), the graph verified (ir.h) before use. Each
// failure is an Error naming the file and the problem.
//
// What it does not do: export a graph after passes (groups, arena offsets), other dtypes than
// f32 weights, or anything but fixed shapes (a graph runs at the shapes it was captured at).
#pragma once

#include "compile/ir.h"
#include "core/tensor.h"

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace minigpt::compile {

inline constexpr const char* kGraphFormatTag = "minigpt-graph";
inline constexpr int kGraphFormatVersion = 1;

nlohmann::json graph_to_json(const Graph& g);
// `source` names the file in errors. Verifies the graph ("export reader").
Graph graph_from_json(const nlohmann::json& j, const std::string& source);

struct ExportedGraph {
  Graph graph;
  std::map<std::string, Tensor> weights;  // by the graph's weight names
};

// Writes g (a captured graph: contiguous tensors, no pass applied) and the values of its weights
// (by name; each of the graph's shape) atomically to path. Error if a weight is missing.
void export_graph(const std::string& path, const Graph& g, const std::map<std::string, const float*>& weights);
ExportedGraph load_exported_graph(const std::string& path);
// Whether path is a safetensors file whose metadata says "format": "minigpt-graph" (reads the
// header only after the whole file validated; false for a model file; Error if unreadable).
bool is_exported_graph(const std::string& path);

}  // namespace minigpt::compile
