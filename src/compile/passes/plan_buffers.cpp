// plan_buffers: one arena for every materialised intermediate (passes.h).
//
// A tensor is live from the kernel that writes it to the last kernel that reads it (groups are
// in execution order after normalize_groups), both ends included, so a kernel never writes
// over its own input. Tensors are placed largest first at the lowest 64-byte aligned offset
// that overlaps no placed tensor whose lifetime intersects its own (first fit), as Inductor's
// memory planner reuses buffers. Graph inputs, weights and outputs live outside the arena.
#include "compile/passes/passes.h"

#include <algorithm>

namespace minigpt::compile {

namespace {

constexpr int64_t kAlign = 64;

struct Slot {
  int tensor;
  int64_t first, last, bytes, offset = -1;
};

}  // namespace

Graph plan_buffers(Graph g) {
  normalize_groups(g);
  std::vector<Slot> slots;
  for (const Node& n : g.nodes) {
    TensorInfo& t = g.tensor(n.output);
    t.arena_offset = -1;
    if (!t.materialized || t.kind != TensorKind::Intermediate || t.alias_of >= 0) continue;
    int64_t last = n.group;
    for (int c : g.consumers(n.output)) last = std::max<int64_t>(last, g.nodes[static_cast<size_t>(c)].group);
    slots.push_back({n.output, n.group, last, (t.bytes() + kAlign - 1) / kAlign * kAlign});
  }
  std::vector<size_t> order(slots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots[a].bytes > slots[b].bytes; });
  int64_t arena = 0;
  std::vector<size_t> placed;
  for (size_t i : order) {
    Slot& s = slots[i];
    // candidate offsets: 0 and the end of every placed, lifetime-overlapping slot
    std::vector<const Slot*> busy;
    for (size_t j : placed)
      if (slots[j].first <= s.last && s.first <= slots[j].last) busy.push_back(&slots[j]);
    std::vector<int64_t> candidates{0};
    for (const Slot* b : busy) candidates.push_back(b->offset + b->bytes);
    std::sort(candidates.begin(), candidates.end());
    for (int64_t off : candidates) {
      bool ok = true;
      for (const Slot* b : busy) ok &= off + s.bytes <= b->offset || b->offset + b->bytes <= off;
      if (ok) {
        s.offset = off;
        break;
      }
    }
    placed.push_back(i);
    arena = std::max(arena, s.offset + s.bytes);
    g.tensor(s.tensor).arena_offset = s.offset;
  }
  g.arena_bytes = arena;
  return g;
}

}  // namespace minigpt::compile
