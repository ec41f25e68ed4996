// run_passes: the pass pipeline in order, the verifier after every pass (passes.h).
#include "compile/passes/passes.h"

#include <utility>

namespace minigpt::compile {

Graph run_passes(const Graph& captured, const PassOptions& opt) {
  verify(captured, "capture");
  Graph g = captured;
  auto step = [&](Graph (*pass)(Graph), const char* name) {
    g = pass(std::move(g));
    verify(g, name);
  };
  if (opt.attention) step(fuse_attention, "fuse_attention");
  step(decompose, "decompose");
  if (opt.epilogue) step(matmul_epilogue, "matmul_epilogue");
  step(remove_dead, "remove_dead");
  if (opt.fusion) {
    step(fuse_pointwise, "fuse_pointwise");
    step(fuse_reductions, "fuse_reductions");
    if (opt.matmul_prologue || opt.attention_prologue) {
      const bool rowwise = opt.matmul_prologue, attention = opt.attention_prologue;
      g = matmul_prologue(std::move(g), rowwise, attention);
      verify(g, "matmul_prologue");
    }
    if (opt.fuse_mlp) {
      g = fuse_mlp(std::move(g), opt.fuse_mlp_proj, opt.fuse_mlp_proj && opt.fuse_mlp_attention, opt.fuse_mlp_proj && opt.fuse_mlp_next);
      verify(g, "fuse_mlp");
    }
  } else {
    normalize_groups(g);  // one kernel per op
    verify(g, "normalize_groups");
  }
  step(plan_buffers, "plan_buffers");
  return g;
}

}  // namespace minigpt::compile
