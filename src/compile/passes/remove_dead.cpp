// remove_dead: drops nodes whose result reaches no graph output (passes.h). (A KvWrite stays
// because the step's attention reads the cache it writes.)
#include "compile/passes/passes.h"

namespace minigpt::compile {

Graph remove_dead(Graph g) {
  std::vector<char> live(g.tensors.size(), 0);
  for (int id : g.outputs) live[static_cast<size_t>(id)] = 1;
  std::vector<char> keep(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (!live[static_cast<size_t>(n.output)]) continue;
    keep[i] = 1;
    for (int in : n.inputs) live[static_cast<size_t>(in)] = 1;
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  reindex(g);
  return g;
}

}  // namespace minigpt::compile
