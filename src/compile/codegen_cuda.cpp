// The CUDA back end (codegen_cuda.h): a schedule -> one CUDA C source and its launch plan.
//
// Layout of the generated source: a header comment (graph, kernels), the device helpers
// (mg_max, mg_gelu, the warp reductions), one section per scheduled kernel (its comment and
// its extern "C" __global__ function(s), or for a kernel identical to an earlier one its comment
// and the name it is launched under), and the host's launch sequence as a closing comment. The
// megakernel form puts every kernel's function in as a stage of one cluster launch instead
// (codegen_cuda_mega.cpp). The MLP kernel (fuse_mlp) is generated in codegen_cuda_mlp.cpp, with
// the helpers declared in codegen_cuda_parts.h.
//
// Row-wise kernels (gathers, pointwise ops, reductions over the last axis), for R rows of C
// columns: TPR threads per row (a warp up to C = 1024, else a block of up to 1024), RPB rows per
// block; the thread with lane l of its row handles the columns c = l + j * TPR, j < J =
// ceil(C / TPR), with the mask c < C when TPR does not divide C. In the kernel's node order:
//   an element node (pointwise, gather) is computed in the first column loop that needs it; in
//     a persistent row (J <= kPersistentSteps) its J values stay in a register array that later
//     loops read, and every full-width input is loaded into registers once at the top;
//     otherwise later loops recompute it from the loads (as the C++ back end does);
//   a reduction accumulates its input per thread (in double with acc_f64), then combines the
//     row's threads: a butterfly over the warp with __shfl_xor_sync (every lane ends with the
//     same value: each step adds the same two operands on both sides), and when TPR > 32 the
//     warps' partials through shared memory, combined by every thread in warp order;
//   a per-row value (mean, rstd) is a scalar every thread of the row computes;
//   a last column loop stores every element output.
// Sums thus run in another order than eager's: results differ by rounding only.
#include "compile/codegen_cuda.h"

#include "compile/codegen_cuda_mega.h"
#include "compile/codegen_cuda_parts.h"
#include "compile/codegen_text.h"

#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace minigpt::compile {

namespace cuda_gen {

std::string flit(float v) { return float_literal(v, "MG_INF"); }

const char* kPrelude = R"(// ---- device helpers ---------------------------------------------------------------------
typedef long long i64;
#define MG_INF __int_as_float(0x7f800000)

// max that keeps a NaN (a NaN row stays NaN through a max reduction)
__device__ __forceinline__ float mg_max(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ __forceinline__ double mg_maxd(double a, double b) { return (b > a || b != b) ? b : a; }
// 1 / sqrt(x) in double, as the engine's layernorm computes rstd
__device__ __forceinline__ float mg_rsqrt(float x) { return (float)(1.0 / sqrt((double)x)); }
// GELU, exact erf form as nn.GELU()
__device__ __forceinline__ float mg_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.707106781f)); }
// exp: CUDA's expf (2 ulp, not the fast-math intrinsic): the attention's sums over keys
__device__ __forceinline__ float mg_exp(float x) { return expf(x); }
// exp as the hand-written softmax computes it: exp2 (the SFU's, 2 ulp) of x log2(e). Rounding
// x log2(e) adds a relative error of about |x| 6e-8: for a softmax's x - max <= 0 an absolute
// error below 1e-7 on every probability. exp2(-inf) = 0, NaN stays NaN.
__device__ __forceinline__ float mg_exp2e(float x) { return exp2f(x * 1.44269504f); }
// Thread-block clusters (the MLP kernel's cluster form): a barrier over the cluster's threads
// (release: this CTA's shared writes before it; acquire: the others' after it), and a float of
// CTA `rank`'s shared memory at the address p has in this CTA (distributed shared memory).
__device__ __forceinline__ void mg_cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
// The barrier in two halves, for a kernel that writes other CTAs' shared memory: arrive
// (relaxed: orders nothing) when the CTA starts, wait before the first remote write (every CTA of
// the cluster has started, so its shared memory exists); then a full barrier after the writes.
__device__ __forceinline__ void mg_cluster_arrive() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ void mg_cluster_wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }
// v stored to the float of CTA `rank`'s shared memory at the address p has in this CTA
__device__ __forceinline__ void mg_cluster_st(float* p, unsigned rank, float v) {
  unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}
// mlp_async: an mbarrier in this CTA's shared memory expecting `bytes` of st.async stores (one
// arrival, this thread's, with the bytes expected), its init made visible to the cluster
__device__ __forceinline__ void mg_mbar_init_tx(unsigned long long* bar, unsigned bytes) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// v stored to CTA `rank`'s float at p's address asynchronously, its 4 bytes counted on that
// CTA's mbarrier at bar's address
__device__ __forceinline__ void mg_cluster_st_async(float* p, unsigned long long* bar, unsigned rank, float v) {
  const unsigned lp = (unsigned)__cvta_generic_to_shared(p), lb = (unsigned)__cvta_generic_to_shared(bar);
  unsigned rp, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rp) : "r"(lp), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(lb), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(rp), "r"(__float_as_uint(v)), "r"(rb)
               : "memory");
}
// until the mbarrier's phase `parity` has completed: acquire at cluster scope (the stores it
// counted, other CTAs' st.async, are visible); kCluster false (CudaCodegenOptions::mlp_mbar_cta,
// a measuring aid) at CTA scope, which the PTX memory model does not promise that for
template <bool kCluster = true>
__device__ __forceinline__ void mg_mbar_wait(unsigned long long* bar, unsigned parity) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  unsigned done = 0;
  do {
    if (kCluster)
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                   : "=r"(done) : "r"(a), "r"(parity) : "memory");
    else
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                   : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ float mg_cluster_ld(const float* p, unsigned rank) {
  unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
// component i (a constant after unrolling) of a float4
__device__ __forceinline__ float mg_f4(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Warp butterflies: after log2(32) steps every lane holds the reduction of the 32 values.
__device__ __forceinline__ float mg_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = mg_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double mg_warp_maxd(double v) {
  for (int o = 16; o > 0; o >>= 1) v = mg_maxd(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float mg_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double mg_warp_sumd(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
)";

std::string describe(const Graph& g, int id) { return describe_tensor(g, id); }

// The comment every kernel starts with, and its launch.
std::string kernel_comment(const Graph& g, const Kernel& k, const std::vector<std::string>& params, const std::string& launch) {
  return kernel_comment_text(g, k, params, "kept on chip") + fmt::format("//   launch: {}\n", launch);
}

// ---- row-wise kernels -------------------------------------------------------------------

class RowwiseCuda {
 public:
  // in_prefix: the inputs' parameter names (in_ptr0, ..; a second group in one kernel takes another)
  RowwiseCuda(const Graph& g, const Kernel& k, const char* in_prefix = "in_ptr") : g_(g), k_(k), R_(k.rows), C_(k.cols) {
    for (size_t i = 0; i < k.reads.size(); ++i) ptr_[k.reads[i]] = fmt::format("{}{}", in_prefix, i);
    for (size_t i = 0; i < k.writes.size(); ++i) out_[k.writes[i]] = fmt::format("out_ptr{}", i);
    for (int i : k.nodes) in_group_.insert(g_.nodes[static_cast<size_t>(i)].output);
    // threads per row: a warp while each thread has at most kPersistentSteps columns, else the
    // fewest threads (a power of two up to 1024) that give each at most 16
    tpr_ = 32;
    if (C_ > 32 * kPersistentSteps) {
      tpr_ = 64;
      while (tpr_ < 1024 && (C_ + tpr_ - 1) / tpr_ > 16) tpr_ *= 2;
    }
    steps_ = (C_ + tpr_ - 1) / tpr_;
    persistent_ = steps_ <= kPersistentSteps;
    masked_ = C_ % tpr_ != 0;
    // a warp per row: 4 rows per block of 128 threads once there are rows enough to fill the
    // GPU's SMs that way, else a block per row (more blocks, more SMs for a small R)
    rpb_ = tpr_ == 32 && R_ >= 4 * 132 ? 4 : 1;
  }

  std::string generate(CudaLaunch& launch);

  // As a GEMM's prologue (generate_prologue_gemm): the row's tensor `x` (the matmul's input) is
  // stored to the shared-memory row `smem_row` (`smem_row[c]`), and the stores of the other
  // outputs (read by later kernels) happen only where `store_guard` holds (one column tile).
  void as_prologue(int x, std::string smem_row, std::string store_guard) {
    smem_x_ = x;
    smem_row_ = std::move(smem_row);
    store_guard_ = std::move(store_guard);
  }
  // The row of full-width input `t` read from the shared-memory row `smem_row` (`smem_row[c]`),
  // not from global memory (an MLP kernel's projection, computed in the same block).
  void read_from_shared(int t, std::string smem_row) { smem_in_[t] = std::move(smem_row); }
  // The row's per-column weight vectors (a layernorm's gain and bias: graph weights of shape
  // (C,)) loaded into registers by the statements returned, which the caller places at the
  // kernel's top (before PDL's wait: no kernel writes a weight); body() then reads them there
  // (wreg{t}[j]) instead of global memory in the middle of the row's chain. Persistent rows only
  // (their loops run j over the thread's columns); otherwise nothing is hoisted.
  std::string hoist_vector_weights() {
    std::string b;
    if (!persistent_) return b;
    for (int t : k_.reads) {
      const TensorInfo& ti = g_.tensor(t);
      if (ti.kind != TensorKind::Weight || ti.dtype != DType::F32 || ti.shape.size() != 1 || ti.shape[0] != C_ || smem_in_.count(t)) continue;
      early_[t] = fmt::format("wreg{}", t);
      b += fmt::format("float wreg{}[{}];  // {}: the thread's columns, loaded first (a weight)\n", t, steps_, ti.name);
      b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) ", steps_);
      b += masked_ ? fmt::format("wreg{0}[j] = lane + j * {1} < {2} ? {3}[lane + j * {1}] : 0.0f;\n", t, tpr_, C_, ptr_.at(t))
                   : fmt::format("wreg{}[j] = {}[lane + j * {}];\n", t, ptr_.at(t), tpr_);
    }
    return b;
  }
  // The statements of one row: `lane` (its place in the row) and `r` (the row) defined before.
  std::string body();
  // The kernel's pointer parameters (reads, then writes other than a prologue's x), their
  // comment lines, and the tensors bound to them (the launch's args).
  void parameters(std::vector<std::string>& sig, std::vector<std::string>& params, std::vector<int>& args) const;
  int threads_per_row() const { return tpr_; }

 private:
  bool is_row(int node) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    return kReduction.contains(n.op) || (g_.tensor(n.output).cols() == 1 && C_ > 1);
  }
  bool full_width(const TensorInfo& ti) const { return ti.cols() == C_ && ti.rows() == R_; }
  // The value of tensor t in a column loop (at column c, step j) or (row) for the row.
  std::string operand(int t, bool row) const {
    if (in_group_.count(t)) {
      const int p = g_.tensor(t).producer;
      if (is_row(p)) return fmt::format("row{}", t);
      return persistent_ ? fmt::format("v{}[j]", t) : fmt::format("tmp{}", t);
    }
    const TensorInfo& ti = g_.tensor(t);
    const std::string& p = ptr_.at(t);
    if (full_width(ti) && !(C_ == 1 && row)) {
      if (persistent_) return fmt::format("x{}[j]", t);
      return smem_in_.count(t) ? fmt::format("{}[c]", smem_in_.at(t)) : fmt::format("{}[r * {} + c]", p, C_);
    }
    if (ti.cols() == 1 && ti.rows() == R_) return fmt::format("{}[r]", p);
    if (ti.shape.size() == 1 && ti.shape[0] == C_ && !row) return early_.count(t) ? early_.at(t) + "[j]" : fmt::format("{}[c]", p);
    MINIGPT_FAIL("codegen_cuda: {} cannot index {} {} in a ({}, {}) loop", k_.name, ti.name, shape_text(ti.shape), R_, C_);
  }
  std::string expr(int node, bool row) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    auto a = [&](size_t i) { return operand(n.inputs[i], row); };
    switch (n.op) {
      case Op::Embedding:  // row ids[r] of the table
        return fmt::format("{}[(i64){}[r] * {} + c]", ptr_.at(n.inputs[1]), ptr_.at(n.inputs[0]), C_);
      case Op::PosEmbedding:  // row offset + r % period of the table
        if (n.runtime_offset) return fmt::format("{}[(i64){}[0] * {} + c]", ptr_.at(n.inputs[0]), ptr_.at(n.inputs[1]), C_);
        return n.period == 1 ? fmt::format("{}[{} + c]", ptr_.at(n.inputs[0]), n.offset * C_)
                             : fmt::format("{}[({} + r % {}) * {} + c]", ptr_.at(n.inputs[0]), n.offset, n.period, C_);
      case Op::Add:
      case Op::BiasAdd: return a(0) + " + " + a(1);
      case Op::Sub: return a(0) + " - " + a(1);
      case Op::Mul: return a(0) + " * " + a(1);
      case Op::Div:
        // by a per-row value: times its reciprocal, computed once per row (rcp{t} below)
        if (divides_row(n)) return fmt::format("{} * rcp{}", a(0), n.inputs[1]);
        return a(0) + " / " + a(1);
      case Op::AddScalar: return a(0) + " + " + flit(n.alpha);
      case Op::MulScalar: return a(0) + " * " + flit(n.alpha);
      case Op::Exp: return fmt::format("mg_exp2e({})", a(0));
      case Op::Rsqrt: return fmt::format("mg_rsqrt({})", a(0));
      case Op::Gelu: return fmt::format("mg_gelu({})", a(0));
      default: MINIGPT_FAIL("codegen_cuda: {} is not a row-wise op", op_name(n.op));
    }
  }
  // A Div of an element by a per-row value of this kernel (softmax's sum).
  bool divides_row(const Node& n) const {
    if (n.op != Op::Div || !in_group_.count(n.inputs[1])) return false;
    const int p = g_.tensor(n.inputs[1]).producer;
    return is_row(p) && !is_row(static_cast<int>(&n - g_.nodes.data()));
  }
  // Whether some element Div of the kernel divides by row value t.
  bool needs_reciprocal(int t) const {
    for (int i : k_.nodes) {
      const Node& n = g_.nodes[static_cast<size_t>(i)];
      if (divides_row(n) && n.inputs[1] == t) return true;
    }
    return false;
  }
  // Element nodes (in kernel order) that computing `targets` needs and no earlier loop kept.
  std::vector<int> closure(const std::vector<int>& targets) const {
    std::set<int> need;
    std::vector<int> stack = targets;
    while (!stack.empty()) {
      const int node = stack.back();
      stack.pop_back();
      if (is_row(node) || computed_.count(node) || !need.insert(node).second) continue;
      for (int in : g_.nodes[static_cast<size_t>(node)].inputs)
        if (in_group_.count(in)) stack.push_back(g_.tensor(in).producer);
    }
    return {need.begin(), need.end()};  // node ids ascend in kernel (topological) order
  }
  // One column loop computing `nodes`, then `tail` (statements at column c, step j).
  std::string column_loop(const std::vector<int>& nodes, const std::string& tail) {
    std::string decl, body;
    for (int node : nodes) {
      const int t = g_.nodes[static_cast<size_t>(node)].output;
      if (persistent_) {
        decl += fmt::format("float v{}[{}];  // {}, kept in registers\n", t, steps_, g_.tensor(t).name);
        body += fmt::format("v{}[j] = {};\n", t, expr(node, false));
      } else {
        body += fmt::format("const float tmp{} = {};  // {}\n", t, expr(node, false), g_.tensor(t).name);
      }
    }
    body += tail;
    std::string s = decl;
    if (persistent_) {
      s += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", steps_);
      s += fmt::format("  const int c = lane + j * {};\n", tpr_);
      if (masked_) s += fmt::format("  if (c < {}) {{  // mask: the row's last step is partial\n", C_) + indent_text(body, "    ") + "  }\n";
      else s += indent_text(body, "  ");
      s += "}\n";
    } else {
      s += fmt::format("for (int c = lane; c < {}; c += {}) {{\n", C_, tpr_) + indent_text(body, "  ") + "}\n";
    }
    if (persistent_)
      for (int node : nodes) computed_.insert(node);
    return s;
  }

  const Graph& g_;
  const Kernel& k_;
  int64_t R_, C_;
  int tpr_ = 32, rpb_ = 1;
  int64_t steps_ = 1;
  bool persistent_ = true, masked_ = false;
  std::map<int, std::string> ptr_, out_;
  std::set<int> in_group_;
  std::set<int> computed_;  // element nodes whose values are in registers
  int smem_x_ = -1;          // as_prologue: the tensor stored to shared memory
  std::string smem_row_, store_guard_;
  std::map<int, std::string> smem_in_;  // read_from_shared: input tensor -> its shared row
  std::map<int, std::string> early_;    // hoist_vector_weights: weight -> its registers
};

void RowwiseCuda::parameters(std::vector<std::string>& sig, std::vector<std::string>& params, std::vector<int>& args) const {
  for (int t : k_.reads) {
    if (smem_in_.count(t)) continue;
    const TensorInfo& ti = g_.tensor(t);
    sig.push_back(fmt::format("const {}* __restrict__ {}", ti.dtype == DType::I32 ? "int" : "float", ptr_.at(t)));
    params.push_back(fmt::format("{} = {}", ptr_.at(t), describe(g_, t)));
    args.push_back(t);
  }
  for (int t : k_.writes) {
    if (t == smem_x_) continue;
    sig.push_back(fmt::format("float* __restrict__ {}", out_.at(t)));
    params.push_back(fmt::format("{} = {}", out_.at(t), describe(g_, t)));
    args.push_back(t);
  }
}

std::string RowwiseCuda::generate(CudaLaunch& launch) {
  std::vector<std::string> params, sig;
  parameters(sig, params, launch.args);
  const int block = tpr_ * rpb_;
  launch.function = k_.name;
  launch.block = block;
  launch.grid = static_cast<int>((R_ + rpb_ - 1) / rpb_);
  std::string code = kernel_comment(g_, k_, params,
                                    fmt::format("grid {}, block {} ({} rows of {} columns; {} threads per row, {} row{} per block)",
                                                launch.grid, block, R_, C_, tpr_, rpb_, rpb_ > 1 ? "s" : ""));
  code += fmt::format("//   each thread: columns lane + j * {}, j < {}{}{}\n", tpr_, steps_, masked_ ? " (masked: c < C)" : "",
                      persistent_ ? "; the row stays in registers between loops (persistent)" : "; loops re-read the row");
  std::string sigs;
  for (size_t i = 0; i < sig.size(); ++i) sigs += fmt::format("{}    {}", i ? ",\n" : "", sig[i]);
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n{}) {{\n", block, k_.name, sigs);
  std::string b;
  b += fmt::format("const int lane = threadIdx.x % {};  // this thread's place in its row\n", tpr_);
  b += fmt::format("const i64 r = (i64)blockIdx.x * {} + threadIdx.x / {};  // the row\n", rpb_, tpr_);
  if (R_ % rpb_ != 0) b += fmt::format("if (r >= {}) return;  // the last block's spare rows (whole warps)\n", R_);
  code += indent_text(b + body(), "  ") + "}\n";
  return code;
}

std::string RowwiseCuda::body() {
  std::string b;
  if (persistent_) {
    // every full-width input in registers, read once
    for (int t : k_.reads) {
      const TensorInfo& ti = g_.tensor(t);
      if (ti.dtype != DType::F32 || !full_width(ti) || C_ == 1) continue;
      b += fmt::format("float x{}[{}];  // {}: row r in registers\n", t, steps_, ti.name);
      b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", steps_);
      b += fmt::format("  const int c = lane + j * {};\n", tpr_);
      // (a weight hoisted by hoist_vector_weights is a full-width input when the kernel has one row: r = 0)
      const std::string load = early_.count(t)     ? early_[t] + "[j]"
                               : smem_in_.count(t) ? fmt::format("{}[c]", smem_in_[t])
                                                   : fmt::format("{}[r * {} + c]", ptr_[t], C_);
      b += fmt::format("  x{}[j] = {}{}{};\n", t, masked_ ? fmt::format("c < {} ? ", C_) : "", load, masked_ ? " : 0.0f" : "");
      b += "}\n";
    }
  }
  std::vector<int> stores;
  for (int t : k_.writes)
    if (!is_row(g_.tensor(t).producer)) stores.push_back(g_.tensor(t).producer);
  for (int node : k_.nodes) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const int t = n.output;
    if (!is_row(node)) continue;
    if (kReduction.contains(n.op)) {
      const bool dbl = n.acc_f64, mx = n.op == Op::ReduceMax;
      const int src = n.inputs[0];
      const char* type = dbl ? "double" : "float";
      b += fmt::format("// {} of {} over the row{}: per thread, then across the row's threads\n", mx ? "max" : "sum", g_.tensor(src).name,
                       dbl ? ", in double" : "");
      b += fmt::format("{} acc{} = {};\n", type, t, mx ? "-MG_INF" : "0");
      std::vector<int> targets;
      if (in_group_.count(src)) targets.push_back(g_.tensor(src).producer);
      std::string val = operand(src, false);
      if (dbl) val = "(double)" + val;
      const std::string acc = mx ? fmt::format("acc{} = {}(acc{}, {});\n", t, dbl ? "mg_maxd" : "mg_max", t, val)
                                 : fmt::format("acc{} += {};\n", t, val);
      b += column_loop(closure(targets), acc);
      b += fmt::format("acc{} = mg_warp_{}{}(acc{});\n", t, mx ? "max" : "sum", dbl ? "d" : "", t);
      if (tpr_ > 32) {
        const int warps = tpr_ / 32;
        b += fmt::format("__shared__ {} red{}[{}];  // one partial per warp\n", type, t, warps);
        b += fmt::format("if (lane % 32 == 0) red{}[lane / 32] = acc{};\n__syncthreads();\n", t, t);
        b += fmt::format("acc{} = red{}[0];\n", t, t);
        b += fmt::format("for (int w = 1; w < {}; ++w) acc{} = {};  // warps in order: every thread the same\n", warps, t,
                         mx ? fmt::format("{}(acc{}, red{}[w])", dbl ? "mg_maxd" : "mg_max", t, t) : fmt::format("acc{} + red{}[w]", t, t));
      }
      b += fmt::format("const float row{} = (float)acc{};  // {}\n", t, t, g_.tensor(t).name);
    } else {
      b += fmt::format("const float row{} = {};  // {}\n", t, expr(node, true), g_.tensor(t).name);
    }
    if (needs_reciprocal(t)) b += fmt::format("const float rcp{} = 1.0f / row{};  // divisions by it become products\n", t, t);
    if (out_.count(t)) b += fmt::format("if ({}lane == 0) {}[r] = row{};\n", store_guard_.empty() ? "" : store_guard_ + " && ", out_[t], t);
  }
  if (!stores.empty()) {
    std::string names, tail;
    for (int node : stores) {
      const int t = g_.nodes[static_cast<size_t>(node)].output;
      names += (names.empty() ? "" : ", ") + g_.tensor(t).name;
      const std::string v = persistent_ ? fmt::format("v{}[j]", t) : fmt::format("tmp{}", t);
      if (t == smem_x_) tail += fmt::format("{}[c] = {};  // the GEMM's x, in shared memory\n", smem_row_, v);
      else if (!store_guard_.empty()) tail += fmt::format("if ({}) {}[r * {} + c] = {};\n", store_guard_, out_[t], C_, v);
      else tail += fmt::format("{}[r * {} + c] = {};\n", out_[t], C_, v);
    }
    b += fmt::format("// outputs: {}\n", names);
    // stored values already in registers are stored from there; the rest computed here
    b += column_loop(closure(stores), tail);
  }
  return b;
}

// ---- attention --------------------------------------------------------------------------

// An attention's pass 1 for one query, a warp, lane = key s = lane + 32 j (j < J): its score
// q.k (q[d] in registers, `key` the expression of k[s][d]; a sum over d in order, then the
// scale) for the keys s <= `last` (causal), the max across the lanes (mg_warp_max: a max has no
// order), then pk[j] = exp(score - max), 0 past `last`. The standalone kernel and the GEMM
// prologue share it, so that both compute the same values.
std::string attention_pass1(int64_t J, int64_t dh, float scale, const std::string& last, const std::string& key) {
  std::string q = fmt::format("float pk[{}];  // pass 1, lane = key s = lane + 32 j: scores, then exp(score - max)\n", J);
  q += "float m = -MG_INF;\n";
  q += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", J);
  q += fmt::format("  const i64 s = lane + 32 * j;\n  float sc = -MG_INF;\n  if (s <= {}) {{  // causal: keys up to the query's position\n", last);
  q += fmt::format("    sc = 0.0f;\n#pragma unroll\n    for (int d = 0; d < {}; ++d) sc += q[d] * {};\n", dh, key);
  q += fmt::format("    sc = sc * {};  // scale 1/sqrt({})\n    m = mg_max(m, sc);\n  }}\n  pk[j] = sc;\n}}\n", flit(scale), dh);
  q += "m = mg_warp_max(m);  // every lane: the max score\n";
  q += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) pk[j] = lane + 32 * j <= {} ? mg_exp(pk[j] - m) : 0.0f;\n", J, last);
  return q;
}

// An attention's pass 2 for one query, a warp, lane = dimension d = lane + 32 i (i < D; lanes
// past dh read column 0 again, never stored): over the keys s < S in order, p_s broadcast from
// lane s % 32 (__shfl_sync), for s <= last: l += p_s, o[i] += p_s v (`value` the expression of
// v[s][dd[i]]). The standalone kernel and the MLP kernel's attention stage share it, so that both
// compute the same values.
std::string attention_pass2(int64_t J, int64_t D, int64_t dh, int64_t S, const std::string& value) {
  std::string b = "// pass 2, lane = dimension d = lane + 32 i: over the keys in order, p_s from lane s % 32\n";
  b += fmt::format("float l = 0.0f, o[{}];\n", D);
  b += fmt::format("int dd[{}];  // lanes past dh read column 0 again, never stored\n", D);
  b += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i) {{\n  o[i] = 0.0f;\n  dd[i] = lane + 32 * i < {} ? lane + 32 * i : 0;\n}}\n", D, dh);
  b += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", J);
  b += fmt::format("#pragma unroll\n  for (int u = 0; u < {}; ++u) {{\n", std::min<int64_t>(32, S));
  b += "    const i64 s = 32 * j + u;\n";
  b += "    const float ps = __shfl_sync(0xffffffffu, pk[j], u);\n";
  b += "    if (s <= last) {  // the same for every lane\n      l += ps;\n";
  b += fmt::format("#pragma unroll\n      for (int i = 0; i < {}; ++i) o[i] += ps * {};\n    }}\n  }}\n}}\n", D, value);
  return b;
}

// Queries per block of the attention kernel: a warp per query, so 4 warps. At (B=2, T=16, 4
// heads) 32 blocks; each stages only the keys its queries may see.
constexpr int64_t kAttnQueries = 4;

// A block per (sequence, head, tile of kAttnQueries queries), a warp per query. The block first
// copies the keys and values its queries may see into shared memory, the whole block at once
// (consecutive threads, consecutive float4s of a head's row: coalesced); each warp loads its q
// meanwhile (the same address for every lane: a broadcast). Then, per warp: pass 1, lane = key
// (s = lane + 32 j), its score q.k (a sum over d in order, then the scale), the max across the
// lanes (mg_warp_max: a max has no order); p = exp(score - max) per key; pass 2, lane = dimension
// d (d = lane + 32 i): over the keys in order, p_s broadcast from its lane (__shfl_sync),
// l += p_s and o += p_s v[s][d]; out = o / l. This is the arithmetic of eager's and of the old
// thread-per-query kernel in the same order (so the same values); only the layout changed: the
// longest dependent chain is a score's dh FMAs and the t + 1 steps of pass 2, not 2 x (t + 1) x dh.
std::string generate_attention(const Graph& g, const Kernel& k, CudaLaunch& launch) {
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const auto& qs = g.tensor(n.inputs[0]).shape;  // (B, T, 3C)
  const int64_t B = qs[0], T = qs[1], C = qs[2] / 3, NH = n.heads, dh = C / NH;
  const bool decode = data_inputs(n) == 3;
  // keys the last query sees at most: T + offset, or (runtime offset) the caches' rows
  const int64_t S = n.runtime_offset ? g.tensor(n.inputs[1]).shape[0] : T + n.offset;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t smem = S * (2 * dh + 1) * 4;  // keys padded by a column, values
  MINIGPT_CHECK(smem <= 48 * 1024, "codegen_cuda: {}: {} keys of {} floats do not fit in 48 KiB of shared memory", k.name, S, dh);
  const int64_t W = std::min(kAttnQueries, T), tiles = (T + W - 1) / W;
  const int block = static_cast<int>(32 * W);
  const int64_t J = (S + 31) / 32, D = (dh + 31) / 32;  // key chunks of a warp's lanes; dimensions per lane
  const bool vec4 = dh % 4 == 0 && C % 4 == 0;  // a head's row as float4s (arena slots are 64-byte aligned)
  const int64_t L = vec4 ? dh / 4 : dh;         // loads per key row
  launch.function = k.name;
  launch.grid = static_cast<int>(B * NH * tiles);
  launch.block = block;
  launch.args = {n.inputs[0], decode ? n.inputs[1] : -1, decode ? n.inputs[2] : -1, n.runtime_offset ? n.inputs.back() : -1, n.output};
  std::vector<std::string> params{fmt::format("in_ptr0 = {} (q | k | v per row)", describe(g, n.inputs[0]))};
  if (decode) {
    params.push_back(fmt::format("in_ptr1 = {} (keys)", describe(g, n.inputs[1])));
    params.push_back(fmt::format("in_ptr2 = {} (values)", describe(g, n.inputs[2])));
  }
  if (n.runtime_offset) params.push_back(fmt::format("in_ptr3 = {} (the position, read at run time)", describe(g, n.inputs.back())));
  params.push_back(fmt::format("out_ptr0 = {} (heads merged)", describe(g, n.output)));
  std::string code = kernel_comment(
      g, k, params,
      fmt::format("grid {} (batch x head x {} query tiles), block {} (a warp per query, {} queries), {} B of shared memory", launch.grid,
                  tiles, block, W, smem));
  code += "//   the keys and values the block's queries may see staged in shared memory by the whole block; per\n"
          "//   query a warp: pass 1 lane = key (the causal mask: keys up to the query's position), the max score\n"
          "//   across the lanes, p = exp(score - max); pass 2 lane = dimension, over the keys in order: l += p,\n"
          "//   o += p v; out = o / l (as eager's softmax: no running rescale). No (T, S) matrix exists.\n";
  const std::string off = n.runtime_offset ? "(i64)in_ptr3[0]" : fmt::format("{}", n.offset);
  code += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(\n    const float* __restrict__ in_ptr0, const float* __restrict__ in_ptr1,\n"
      "    const float* __restrict__ in_ptr2, const int* __restrict__ in_ptr3, float* __restrict__ out_ptr0) {{\n",
      block, k.name);
  std::string b;
  b += fmt::format("__shared__ float ks[{}][{}], vs[{}][{}];  // keys (a column of padding: lane s reads row s, no bank conflict), values\n",
                   S, dh + 1, S, dh);
  b += "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  b += fmt::format("const i64 bh = blockIdx.x / {}, t0 = (i64)(blockIdx.x % {}) * {};  // (batch, head), the tile's first query\n", tiles,
                   tiles, W);
  b += fmt::format("const i64 bb = bh / {}, h = bh % {};\n", NH, NH);
  b += fmt::format("const i64 off = {};  // the first query's position{}\n", off, n.runtime_offset ? " (read at run time)" : "");
  b += fmt::format("const i64 S = min((i64){}, t0 + {}) + off;  // keys the tile's last query sees\n", T, W);
  b += "const i64 t = t0 + warp;  // this warp's query\n";
  b += fmt::format("float q[{}];  // the same for every lane\n", dh);
  b += fmt::format("if (t < {}) {{\n#pragma unroll\n  for (int d = 0; d < {}; ++d) q[d] = in_ptr0[(bb * {} + t) * {} + h * {} + d];\n}}\n", T, dh, T,
                   3 * C, dh);
  // the staging loop: key row s, its L loads
  const std::string krow = decode ? fmt::format("in_ptr1 + s * {} + h * {}", C, dh) : fmt::format("in_ptr0 + (bb * {} + s) * {} + {} + h * {}", T, 3 * C, C, dh);
  const std::string vrow = decode ? fmt::format("in_ptr2 + s * {} + h * {}", C, dh) : fmt::format("in_ptr0 + (bb * {} + s) * {} + {} + h * {}", T, 3 * C, 2 * C, dh);
  b += fmt::format("for (i64 e = threadIdx.x; e < S * {}; e += {}) {{\n", L, block);
  b += fmt::format("  const i64 s = e / {}, d = e % {}{};\n", L, L, vec4 ? " * 4" : "");
  if (vec4) {
    b += fmt::format("  const float4 kv = *(const float4*)({} + d), vv = *(const float4*)({} + d);\n", krow, vrow);
    b += "  ks[s][d] = kv.x; ks[s][d + 1] = kv.y; ks[s][d + 2] = kv.z; ks[s][d + 3] = kv.w;\n";
    b += "  vs[s][d] = vv.x; vs[s][d + 1] = vv.y; vs[s][d + 2] = vv.z; vs[s][d + 3] = vv.w;\n";
  } else {
    b += fmt::format("  ks[s][d] = ({})[d];\n  vs[s][d] = ({})[d];\n", krow, vrow);
  }
  b += "}\n__syncthreads();\n";
  b += fmt::format("if (t >= {}) return;  // a warp past the last query\n", T);
  b += "const i64 last = t + off;  // causal: keys 0 .. last\n";
  b += attention_pass1(J, dh, scale, "last", "ks[s][d]");
  b += attention_pass2(J, D, dh, S, "vs[s][dd[i]]");
  b += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i)\n", D);
  b += fmt::format("  if (lane + 32 * i < {}) out_ptr0[(bb * {} + t) * {} + h * {} + lane + 32 * i] = o[i] / l;\n", dh, T, C, dh);
  code += indent_text(b, "  ") + "}\n";
  return code;
}

std::string generate_kv_write(const Graph& g, const Kernel& k, CudaLaunch& launch) {
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const int64_t C = g.tensor(n.inputs[1]).cols();
  const int block = static_cast<int>(std::min<int64_t>(1024, (C + 31) / 32 * 32));
  launch.function = k.name;
  launch.grid = static_cast<int>((C + block - 1) / block);
  launch.block = block;
  launch.args = {n.inputs[0], n.runtime_offset ? n.inputs.back() : -1, n.inputs[1]};
  std::vector<std::string> params{fmt::format("in_ptr0 = {}", describe(g, n.inputs[0]))};
  if (n.runtime_offset) params.push_back(fmt::format("in_ptr1 = {} (the row, read at run time)", describe(g, n.inputs.back())));
  params.push_back(fmt::format("out_ptr0 = {} (one row written in place)", describe(g, n.inputs[1])));
  std::string code = kernel_comment(g, k, params, fmt::format("grid {}, block {} (a thread per column)", launch.grid, block));
  const std::string row = n.runtime_offset ? "(i64)in_ptr1[0]" : fmt::format("{}", n.offset);
  code += fmt::format(
      "extern \"C\" __global__ void {}(const float* __restrict__ in_ptr0, const int* __restrict__ in_ptr1, float* __restrict__ out_ptr0) {{\n",
      k.name);
  code += fmt::format("  const i64 c = (i64)blockIdx.x * {} + threadIdx.x;\n", block);
  code += fmt::format("  if (c < {}) out_ptr0[{} * {} + c] = in_ptr0[{} + c];  // row t = {}, part {}\n}}\n", C, row, C, n.part * C,
                      row, "qkv"[n.part]);
  return code;
}

// ---- matmuls ----------------------------------------------------------------------------

std::string epilogue_text(const Node& n) {
  return n.gelu ? "GELU(x W^T + b)" : n.has_residual ? (n.has_bias ? "x W^T + b + residual" : "x W^T + residual")
                                                     : (n.has_bias ? "x W^T + b" : "x W^T");
}

std::vector<std::string> matmul_params(const Graph& g, const Node& n) {
  std::vector<std::string> p{fmt::format("x = {}", describe(g, n.inputs[0])), fmt::format("W = {}", describe(g, n.inputs[1]))};
  if (n.has_bias) p.push_back(fmt::format("bias = {}", describe(g, n.inputs[2])));
  if (n.has_residual) p.push_back(fmt::format("residual = {}", describe(g, n.inputs.back())));
  p.push_back(fmt::format("y = {} = {}", describe(g, n.output), epilogue_text(n)));
  return p;
}

// The epilogue statements on `v` at (row n, column m): bias, then GELU or the residual. `bias_at`:
// the bias's value when it was loaded earlier (a register), else bias[col] is read here; `res_at`
// the same for the residual.
std::string epilogue_code(const Node& n, const std::string& index, const std::string& col, const std::string& bias_at,
                          const std::string& res_at) {
  std::string s;
  if (n.has_bias) s += fmt::format("v = v + {};\n", bias_at.empty() ? fmt::format("bias[{}]", col) : bias_at);
  if (n.gelu) s += "v = mg_gelu(v);\n";
  if (n.has_residual) s += fmt::format("v = v + {};\n", res_at.empty() ? fmt::format("res[{}]", index) : res_at);
  return s;
}

// cuBLAS SGEMM then, when the matmul has one, a generated epilogue kernel in place on y.
std::string generate_cublas(const Graph& g, const Kernel& k, std::vector<CudaLaunch>& launches) {
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const int64_t N = g.tensor(n.inputs[0]).rows(), K = g.tensor(n.inputs[0]).cols(), M = g.tensor(n.inputs[1]).shape[0];
  CudaLaunch mm;
  mm.kind = CudaLaunch::Kind::Sgemm;
  mm.name = k.name;
  mm.N = N;
  mm.K = K;
  mm.M = M;
  mm.x = n.inputs[0];
  mm.w = n.inputs[1];
  mm.y = n.output;
  launches.push_back(mm);
  const bool epi = n.has_bias || n.gelu || n.has_residual;
  const int block = 256;
  const int64_t total = N * M;
  std::string launch = fmt::format("cublasSgemm (FP32, no TF32): y^T ({}, {}) = W ({}, {}) x^T", M, N, M, K);
  if (epi) launch += fmt::format("; then {}_epilogue grid {}, block {} (a thread per element)", k.name, (total + block - 1) / block, block);
  std::string code = kernel_comment(g, k, matmul_params(g, n), launch);
  if (!epi) return code + "//   no epilogue: cuBLAS alone\n";
  CudaLaunch e;
  e.name = k.name;
  e.function = k.name + "_epilogue";
  e.grid = static_cast<int>((total + block - 1) / block);
  e.block = block;
  e.args = {n.has_bias ? n.inputs[2] : -1, n.has_residual ? n.inputs.back() : -1, n.output};
  launches.push_back(e);
  code += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const float* __restrict__ bias, const float* __restrict__ res,\n"
      "    float* __restrict__ y) {{\n",
      block, e.function);
  code += fmt::format("  const i64 i = (i64)blockIdx.x * {} + threadIdx.x;  // y's element (i / {}, i % {})\n", block, M, M);
  if (total % block != 0) code += fmt::format("  if (i >= {}) return;\n", total);
  code += "  float v = y[i];  // x W^T from cuBLAS\n";
  code += indent_text(epilogue_code(n, "i", fmt::format("i % {}", M)), "  ");
  code += "  y[i] = v;\n}\n";
  return code;
}

// An attention as a GEMM's prologue (the output projection's x): warp w takes the (row, head)
// pairs w, w + 8, ... of the tile (row n0 + pair / NH, head pair % NH), the loop unrolled so that
// the pairs' loads overlap, with generate_attention's warp arithmetic in the same order (so the
// same values): pass 1, lane = key (s = lane + 32 j): its score q.k (a sum over d in order, then
// the scale), the max across the lanes (mg_warp_max; a max has no order); then
// p = exp(score - max) per key; pass 2, lane = dimension d < dh: over the keys in order, p_s
// broadcast from its lane (__shfl_sync), l += p_s and o += p_s v[s][d]; out = o / l into
// xs[row][h dh + d]. q, k and v are read straight from the batch's qkv rows (a few KB, through
// L1); pass 2's loop has a fixed trip count (T keys) and loads v[s] for every s < T before the
// causal test, so the loads need not wait on the sums. Rows past N get zeros.
std::string attention_prologue(const Graph& g, const Node& a, int rows, std::vector<std::string>& sig, std::vector<std::string>& params,
                               std::vector<int>& args) {
  const auto& qs = g.tensor(a.inputs[0]).shape;  // (B, T, 3C)
  const int64_t B = qs[0], T = qs[1], C = qs[2] / 3, NH = a.heads, dh = C / NH, N = B * T;
  const int64_t J = (T + 31) / 32;  // key chunks of a warp's lanes
  MINIGPT_CHECK(dh <= 32, "codegen_cuda: an attention prologue's heads of {} floats exceed a warp", dh);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  sig.push_back("const float* __restrict__ in_ptr0");
  params.push_back(fmt::format("in_ptr0 = {} (q | k | v per row)", describe(g, a.inputs[0])));
  args.push_back(a.inputs[0]);
  std::string b = fmt::format("// prologue: the attention of the tile's {} rows x {} heads into xs, a warp per (row, head) pair\n", rows, NH);
  b += fmt::format("__shared__ float xs[{}][{}];  // the tile's rows of x: the heads merged\n", rows, C);
  b += fmt::format("#pragma unroll\nfor (int pair = warp; pair < {}; pair += 8) {{\n", rows * NH);
  std::string t;
  t += fmt::format("const int p = pair / {};\nconst i64 h = pair % {}, r = n0 + p;  // the query row, the head\n", NH, NH);
  std::string q;
  q += fmt::format("const i64 bb = r / {}, t = r % {};  // batch, query position: keys 0 .. t\n", T, T);
  q += fmt::format("const float* kv = in_ptr0 + bb * {};  // the batch's qkv rows\n", T * 3 * C);
  q += fmt::format("float q[{}];  // the same for every lane\n#pragma unroll\nfor (int d = 0; d < {}; ++d) q[d] = in_ptr0[r * {} + h * {} + d];\n",
                   dh, dh, 3 * C, dh);
  q += attention_pass1(J, dh, scale, "t", fmt::format("kv[s * {} + {} + h * {} + d]", 3 * C, C, dh));
  q += "// pass 2, lane = dimension d: over the keys in order, p_s from lane s % 32\n";
  q += fmt::format("const int d = lane < {} ? lane : 0;  // lanes past dh compute column 0 again, never stored\n", dh);
  q += "float l = 0.0f, o = 0.0f;\n";
  q += fmt::format("#pragma unroll\nfor (int j = 0; j < {}; ++j) {{\n", J);
  q += fmt::format("#pragma unroll\n  for (int u = 0; u < {}; ++u) {{\n", std::min<int64_t>(32, T));
  q += fmt::format("    const i64 s = min(32 * j + u, {});  // a row of the batch (the causal test below)\n", T - 1);
  q += fmt::format("    const float ps = __shfl_sync(0xffffffffu, pk[j], u), vv = kv[s * {} + {} + h * {} + d];\n", 3 * C, 2 * C, dh);
  q += "    if (32 * j + u <= t) {  // the same for every lane\n      l += ps;\n      o += ps * vv;\n    }\n  }\n}\n";
  q += fmt::format("if (lane < {}) xs[p][h * {} + lane] = o / l;\n", dh, dh);
  if (N % rows) {
    t += fmt::format("if (r < {}) {{\n", N) + indent_text(q, "  ");
    t += fmt::format("}} else if (lane < {}) {{  // past the last row: zeros, never stored\n  xs[p][h * {} + lane] = 0.0f;\n}}\n", dh, dh);
  } else {
    t += q;
  }
  return b + indent_text(t, "  ") + "}\n__syncthreads();\n";
}

// The MLP kernel's attention stage (fuse_mlp_attention; generate_mlp): the tile's R rows
// [n0, n0 + R) of a prefill's attention (qkv (B, T, 3C) -> (N = B T, C), heads merged) into the
// shared array `out` (R, C), zeros past N. The block (`threads` threads, 8 warps) first stages the
// k and v rows its queries may see, rows [kv0, kv1) of qkv with kv0 the first row of the tile's
// first sequence and kv1 = min(n0 + R, N) (at most `SW`, counted over the tiles at code generation; a
// tile may span two sequences), in shared memory (float4 loads, consecutive threads on consecutive
// floats; keys padded by a column so that lane s reading row s has no bank conflict); when they
// would not fit (more than kAttnStageBytes) the warps read k and v from global memory instead. Then
// warp w takes the (row, head) pairs w, w + 8, ... (row n0 + pair / NH, head pair % NH), unrolled
// so that the pairs overlap, with generate_attention's warp arithmetic in the same order (q from
// global memory; pass 1 attention_pass1, lane = key; pass 2 lane = dimension d = lane + 32 i, over
// the keys in order, l += p_s, o += p_s v[s][d]; out = o / l): the values of the attention
// kernel, bitwise.
constexpr int64_t kAttnStageBytes = 24 * 1024;
std::string attention_stage(const Graph& g, const Node& a, int R, int threads, const std::string& out, std::vector<std::string>& sig,
                            std::vector<std::string>& params, std::vector<int>& args) {
  const auto& qs = g.tensor(a.inputs[0]).shape;  // (B, T, 3C)
  const int64_t B = qs[0], T = qs[1], C = qs[2] / 3, NH = a.heads, dh = C / NH, N = B * T;
  const int64_t J = (T + 31) / 32, D = (dh + 31) / 32;  // key chunks of a warp's lanes; dimensions per lane
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  int64_t SW = 0;  // the most k and v rows a tile stages
  for (int64_t n0 = 0; n0 < N; n0 += R) SW = std::max(SW, std::min(n0 + R, N) - n0 / T * T);
  const bool staged = SW * (2 * C + 1) * 4 <= kAttnStageBytes;
  const bool vec4 = C % 4 == 0;  // the rows as float4s (arena slots are 64-byte aligned)
  const int64_t L = vec4 ? C / 4 : C;
  sig.push_back("const float* __restrict__ qkv");
  params.push_back(fmt::format("qkv = {} (q | k | v per row; the attention's input)", describe(g, a.inputs[0])));
  args.push_back(a.inputs[0]);
  params.push_back(fmt::format("att = {} (the attention, kept in shared memory)", describe(g, a.output)));
  std::string b = fmt::format("// the attention of the tile's {} rows x {} heads into {}, a warp per (row, head) pair: pass 1 lane = key,\n"
                              "// the causal mask, the max score, p = exp(score - max); pass 2 lane = dimension, over the keys in\n"
                              "// order: l += p, o += p v; out = o / l. No (T, S) matrix exists.\n",
                              R, NH, out);
  b += fmt::format("__shared__ __align__(16) float {}[{}][{}];  // the tile's rows of the attention: the heads merged\n", out, R, C);
  std::string key, val;
  if (staged) {
    b += fmt::format("__shared__ float ks[{}][{}], vs[{}][{}];  // k (a column of padding) and v of qkv's rows [kv0, kv1)\n", SW, C + 1, SW, C);
    b += fmt::format("const i64 kv0 = n0 / {} * {}, kv1 = min(n0 + {}, (i64){});  // the tile's sequences' rows up to its last\n", T, T, R, N);
    b += fmt::format("for (i64 e = threadIdx.x; e < (kv1 - kv0) * {}; e += {}) {{\n", L, threads);
    b += fmt::format("  const i64 s = e / {}, d = e % {}{};\n", L, L, vec4 ? " * 4" : "");
    b += fmt::format("  const float* row = qkv + (kv0 + s) * {};\n", 3 * C);
    if (vec4) {
      b += fmt::format("  const float4 kv = *(const float4*)(row + {} + d), vv = *(const float4*)(row + {} + d);\n", C, 2 * C);
      b += "  ks[s][d] = kv.x; ks[s][d + 1] = kv.y; ks[s][d + 2] = kv.z; ks[s][d + 3] = kv.w;\n";
      b += "  vs[s][d] = vv.x; vs[s][d + 1] = vv.y; vs[s][d + 2] = vv.z; vs[s][d + 3] = vv.w;\n";
    } else {
      b += fmt::format("  ks[s][d] = row[{} + d];\n  vs[s][d] = row[{} + d];\n", C, 2 * C);
    }
    b += "}\n__syncthreads();\n";
    key = fmt::format("ks[base + s][h * {} + d]", dh);
    val = fmt::format("vs[base + s][h * {} + dd[i]]", dh);
  } else {
    b += fmt::format("// (k and v of {} rows exceed {} B of shared memory: read from global memory)\n", SW, kAttnStageBytes);
    key = fmt::format("qkv[(base + s) * {} + {} + h * {} + d]", 3 * C, C, dh);
    val = fmt::format("qkv[(base + s) * {} + {} + h * {} + dd[i]]", 3 * C, 2 * C, dh);
  }
  b += fmt::format("#pragma unroll\nfor (int pair = warp; pair < {}; pair += 8) {{\n", R * NH);
  std::string t = fmt::format("const int p = pair / {};\nconst i64 h = pair % {}, r = n0 + p;  // the query row, the head\n", NH, NH);
  std::string q = fmt::format("const i64 bb = r / {}, last = r % {};  // batch, query position: keys 0 .. last\n", T, T);
  q += staged ? fmt::format("const i64 base = bb * {} - kv0;  // key s is staged row base + s\n", T)
              : fmt::format("const i64 base = bb * {};  // key s is qkv's row base + s\n", T);
  q += fmt::format("float q[{}];  // the same for every lane\n#pragma unroll\nfor (int d = 0; d < {}; ++d) q[d] = qkv[r * {} + h * {} + d];\n",
                   dh, dh, 3 * C, dh);
  q += attention_pass1(J, dh, scale, "last", key);
  q += attention_pass2(J, D, dh, T, val);
  q += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i)\n", D);
  q += fmt::format("  if (lane + 32 * i < {}) {}[p][h * {} + lane + 32 * i] = o[i] / l;\n", dh, out, dh);
  if (N % R) {
    t += fmt::format("if (r < {}) {{\n", N) + indent_text(q, "  ");
    t += fmt::format("}} else {{  // past the last row: zeros, never stored\n  for (int d = lane; d < {}; d += 32) {}[p][h * {} + d] = 0.0f;\n}}\n",
                     dh, out, dh);
  } else {
    t += q;
  }
  return b + indent_text(t, "  ") + "}\n__syncthreads();\n";
}

// A row-wise group (a layernorm) as a GEMM's prologue: warp w < rows computes row n0 + w of the
// tile as the row-wise kernel of the group's own nodes would (RowwiseCuda, a warp per row),
// storing the matmul's x row into xs[w] and, in the first of the `tiles_m` column tiles only, the
// group's other outputs (read by later kernels). Rows past N get zeros. `rows` at most the
// block's 8 warps.
// `smem_in` (a tensor id, or -1): an input of the group read from the shared array ms (the
// tile's rows), not from global memory.
std::string rowwise_prologue(const Graph& g, const Kernel& k, int rows, int64_t tiles_m, std::vector<std::string>& sig,
                             std::vector<std::string>& params, std::vector<int>& args, int smem_in, std::string* early,
                             const char* in_prefix) {
  const Node& mm = g.nodes[static_cast<size_t>(k.nodes.back())];
  const int x = mm.inputs[0];
  const int64_t N = g.tensor(x).rows(), K = g.tensor(x).cols();
  Kernel pk;  // the prologue as a kernel of its own: its nodes, what they read, what they store
  pk.name = k.name;
  pk.group = k.group;
  pk.nodes.assign(k.nodes.begin(), k.nodes.end() - 1);
  pk.rows = k.rows;
  pk.cols = k.cols;
  for (int t : k.reads)
    for (int node : pk.nodes)
      if (std::count(g.nodes[static_cast<size_t>(node)].inputs.begin(), g.nodes[static_cast<size_t>(node)].inputs.end(), t)) {
        pk.reads.push_back(t);
        break;
      }
  for (int t : k.writes)
    if (t != mm.output) pk.writes.push_back(t);
  pk.writes.push_back(x);
  RowwiseCuda pro(g, pk, in_prefix);
  MINIGPT_CHECK(pro.threads_per_row() == 32, "codegen_cuda: {}: a prologue row of {} columns needs more than a warp", k.name, K);
  pro.as_prologue(x, "xs[warp]", tiles_m > 1 ? fmt::format("blockIdx.x % {} == 0", tiles_m) : "");
  if (smem_in >= 0) pro.read_from_shared(smem_in, "ms[warp]");
  pro.parameters(sig, params, args);
  if (early) *early = pro.hoist_vector_weights();
  std::string b = fmt::format("// prologue: warp w computes row n0 + w of {} into xs[w]\n", g.tensor(x).name);
  b += fmt::format("__shared__ float xs[{}][{}];  // the tile's rows of x\n", rows, K);
  b += rows < 8 ? fmt::format("if (warp < {}) {{  // a warp per row of the tile\n", rows) : "{\n";
  std::string row = "const i64 r = n0 + warp;  // the row\n";
  const std::string body = pro.body();
  if (N % rows) {
    row += fmt::format("if (r < {}) {{\n", N) + indent_text(body, "  ");
    row += fmt::format("}} else {{  // past the last row: zeros, never stored\n  for (int c = lane; c < {}; c += 32) xs[warp][c] = 0.0f;\n}}\n", K);
  } else {
    row += body;
  }
  return b + indent_text(row, "  ") + "}\n__syncthreads();\n";
}

// A GEMM's x (N, K) without a prologue (the pointer `x`): the tile's rows copied into the
// shared array `xs` by the whole block (consecutive threads, consecutive floats: coalesced),
// zeros past N.
std::string staged_x(int64_t N, int64_t K, int rows, int threads, const std::string& x, const std::string& xs) {
  std::string b = fmt::format("// {}'s {} rows of the tile staged in shared memory: coalesced loads by the whole block\n", x, rows);
  b += fmt::format("__shared__ float {}[{}][{}];\n", xs, rows, K);
  b += fmt::format("for (int e = threadIdx.x; e < {}; e += {}) {{\n", rows * K, threads);
  b += fmt::format("  const int i = e / {}, c = e % {};\n", K, K);
  b += N % rows ? fmt::format("  {}[i][c] = n0 + i < {} ? {}[(n0 + i) * {} + c] : 0.0f;  // zeros past the last row\n", xs, N, x, K)
                : fmt::format("  {}[i][c] = {}[(n0 + i) * {} + c];\n", xs, x, K);
  return b + "}\n__syncthreads();\n";
}

// Every `__shared__ float NAME[` declaration in code becomes 16-byte aligned (rows of a multiple
// of 4 floats read as float4s).
void align_shared(std::string& code, const std::string& name) {
  const std::string from = "__shared__ float " + name + "[", to = "__shared__ __align__(16) float " + name + "[";
  for (size_t at = code.find(from); at != std::string::npos; at = code.find(from, at + to.size())) code.replace(at, from.size(), to);
}

// A generated fixed-shape GEMM, epilogue fused, shaped for the small products of this model
// (launch- and latency-bound: few rows, K <= a few hundred): a block of 8 warps computes a tile
// of 8 rows x 32 columns of y; lane l owns column m0 + l, warp w the K slice [w KC, (w+1) KC)
// (split K, so that each thread's chain of FMAs is K / 8 long); W's row for the lane is read
// along k (float4 when the slice allows), x's 8 rows are the same address for every lane (a
// broadcast). The 8 warps' partial sums meet in shared memory and every (row, column) adds
// them in warp order (deterministic), then the epilogue and a coalesced store.
// With a prologue (KernelKind::PrologueMatmul, passes.h's matmul_prologue): first warp w
// computes row n0 + w of the row-wise group (a layernorm) as a row-wise kernel would, a warp per
// row, and stores the matmul's x row into shared memory (xs), or the block computes an
// attention's rows there (attention_prologue); the K loop then reads x from there. Every column
// tile of a row tile recomputes those rows (K columns each: cheaper than a launch); only the
// first column tile stores the prologue's other outputs. Without a prologue (stage_x) the block
// copies its rows of x into xs first, coalesced.
// weights_early (W and the bias graph weights, W's slice of the lane at most 32 floats as float4s):
// the lane's slice of W and its bias are loaded into registers at the kernel's top, before
// anything that reads what an earlier kernel writes, and under PDL before its wait (kPdlWaitPoint:
// the graph never writes a weight), so their L2 latency overlaps the previous kernel (PDL) or the
// staging of x; the epilogue's residual is loaded right after the wait, before the prologue. The
// sums are the same, in the same order.
// smem_vec4 (x in shared memory, K % 4 == 0): the rows' arrays declared __align__(16) and read as
// float4s in the K loop.
std::string generate_gemm(const Graph& g, const Kernel& k, CudaLaunch& launch, bool stage_x, bool weights_early, bool smem_vec4,
                          bool ln_early) {
  const bool fused = k.kind == KernelKind::PrologueMatmul;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes.back())];
  const int64_t N = g.tensor(n.inputs[0]).rows(), K = g.tensor(n.inputs[0]).cols(), M = g.tensor(n.inputs[1]).shape[0];
  constexpr int kCols = 32, kRows = 8, kWarps = 8, kThreads = 32 * kWarps;
  const int64_t KC = (K + kWarps - 1) / kWarps;  // the K slice of a warp
  const bool vec4 = K % 4 == 0 && KC % 4 == 0;
  const int64_t tiles_m = (M + kCols - 1) / kCols, tiles_n = (N + kRows - 1) / kRows;
  const bool w_early = weights_early && vec4 && KC <= 32 && g.tensor(n.inputs[1]).kind == TensorKind::Weight;
  const bool bias_early = weights_early && n.has_bias && g.tensor(n.inputs[2]).kind == TensorKind::Weight;
  launch.function = k.name;
  launch.grid = static_cast<int>(tiles_m * tiles_n);
  launch.block = kThreads;
  std::vector<std::string> sig, params;
  std::string prologue;
  std::string ln_w;  // ln_early: the prologue's layernorm gain and bias into registers, before PDL's wait
  const bool attention = fused && g.nodes[static_cast<size_t>(k.nodes[0])].op == Op::Attention;
  if (attention) {
    prologue = attention_prologue(g, g.nodes[static_cast<size_t>(k.nodes[0])], kRows, sig, params, launch.args);
  } else if (fused) {
    prologue = rowwise_prologue(g, k, kRows, tiles_m, sig, params, launch.args, -1, ln_early ? &ln_w : nullptr);
  } else {
    sig.push_back("const float* __restrict__ x");
    launch.args.push_back(n.inputs[0]);
    if (stage_x && K <= kPrologueMaxCols) prologue = staged_x(N, K, kRows, kThreads);
  }
  const bool x_smem = !prologue.empty();
  const bool xv4 = smem_vec4 && x_smem && vec4;  // (vec4: K % 4 == 0, every k below a multiple of 4)
  if (xv4) {  // the arrays the K loop reads: 16-byte aligned, so that a row's float4 at k is too
    align_shared(prologue, "xs");
  }
  for (const char* p : {"const float* __restrict__ w", "const float* __restrict__ bias", "const float* __restrict__ res",
                        "float* __restrict__ y"})
    sig.push_back(p);
  launch.args.insert(launch.args.end(), {n.inputs[1], n.has_bias ? n.inputs[2] : -1, n.has_residual ? n.inputs.back() : -1, n.output});
  std::vector<std::string> all_params = params;
  for (const std::string& p : matmul_params(g, n)) all_params.push_back(fused && p.starts_with("x = ") ? p + " (the prologue's, in shared memory)" : p);
  std::string code = kernel_comment(g, k, all_params,
                                    fmt::format("grid {} ({} column tiles of 32 x {} row tiles of 8), block {} (8 warps splitting K = {} "
                                                "into slices of {})",
                                                launch.grid, tiles_m, tiles_n, kThreads, K, KC));
  code += "//   generated fixed-shape GEMM (max-autotune), epilogue fused: 8 rows x 32 columns per block, lane = column,\n"
          "//   warp = K slice; partial sums combined in shared memory in warp order\n";
  if (attention) code += "//   attention fused before: each block computes its 8 rows of x (a warp per row and head) into shared memory first\n";
  else if (fused) code += "//   prologue fused: each block computes its 8 rows of x (a warp per row) into shared memory first\n";
  else if (x_smem) code += "//   x's rows staged in shared memory first (coalesced), the K loop reads them there\n";
  std::string sigs;
  for (size_t i = 0; i < sig.size(); ++i) sigs += fmt::format("{}    {}", i ? ",\n" : "", sig[i]);
  code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n{}) {{\n", kThreads, k.name, sigs);
  // x's row i at column k: from global memory, or the prologue's rows in shared memory
  const std::string xs = "xs";  // the shared rows the K loop reads
  auto x_at = [&](const std::string& kk) {
    return x_smem ? fmt::format("{}[i][{}]", xs, kk) : fmt::format("x[(n0 + i) * {} + {}]", K, kk);
  };
  std::string b;
  b += fmt::format("__shared__ float part[{}][{}][{}];  // [warp][row][column], padded\n", kWarps, kRows, kCols + 1);
  b += fmt::format("const i64 m0 = (i64)(blockIdx.x % {}) * {}, n0 = (i64)(blockIdx.x / {}) * {};\n", tiles_m, kCols, tiles_m, kRows);
  b += "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  b += "const i64 m = m0 + lane;  // this lane's column\n";
  b += fmt::format("const i64 k0 = (i64)warp * {};\n", KC);
  if (w_early) {
    b += fmt::format("float4 wr[{}];  // the lane's W slice, loaded first (a weight: no earlier kernel writes it)\n", KC / 4);
    b += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u)\n", KC / 4);
    std::string mask;
    if (M % kCols) mask = fmt::format("m < {}", M);
    if (K % kWarps) mask += (mask.empty() ? "" : " && ") + fmt::format("k0 + 4 * u < {}", K);
    const std::string load = fmt::format("*(const float4*)(w + m * {} + k0 + 4 * u)", K);
    b += mask.empty() ? fmt::format("  wr[u] = {};\n", load) : fmt::format("  wr[u] = {} ? {} : make_float4(0.0f, 0.0f, 0.0f, 0.0f);\n", mask, load);
  }
  if (bias_early) b += M % kCols ? fmt::format("const float bias_m = m < {} ? bias[m] : 0.0f;  // loaded first (a weight)\n", M)
                                 : "const float bias_m = bias[m];  // loaded first (a weight)\n";
  b += ln_w;
  if (w_early || bias_early || !ln_w.empty()) b += kPdlWaitPoint;
  if (weights_early && n.has_residual) {  // the thread's residual for the epilogue (row n0 + warp), loaded before the K loop
    std::string mask;
    if (N % kRows) mask = fmt::format("n0 + warp < {}", N);
    if (M % kCols) mask += (mask.empty() ? "" : " && ") + fmt::format("m < {}", M);
    const std::string load = fmt::format("res[(n0 + warp) * {} + m]", M);
    b += mask.empty() ? fmt::format("const float res_nm = {};  // loaded early\n", load)
                      : fmt::format("const float res_nm = {} ? {} : 0.0f;  // loaded early\n", mask, load);
  }
  b += prologue;
  b += fmt::format("float acc[{}];\n#pragma unroll\nfor (int i = 0; i < {}; ++i) acc[i] = 0.0f;\n", kRows, kRows);
  // rows past N and columns past M: masked (their products never stored); a K slice past K: empty
  const std::string kend = fmt::format("k0 + {}", KC);
  const bool kmask = K % kWarps != 0;
  if (M % kCols) b += fmt::format("if (m < {}) {{  // mask: the last column tile\n", M);
  std::string loop;
  if (w_early) {  // the same loop over the slice, W from the registers
    loop += fmt::format("#pragma unroll\nfor (int u = 0; u < {}; ++u) {{\n", KC / 4);
    loop += "  const i64 k = k0 + 4 * u;\n";
    if (kmask) loop += fmt::format("  if (k >= {}) break;  // the last warp's slice ends at K\n", K);
    loop += "  const float4 wv = wr[u];\n";
    loop += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) {{\n", kRows);
    if (N % kRows) loop += fmt::format("    if (n0 + i >= {}) break;  // mask: the last row tile\n", N);
    loop += xv4      ? fmt::format("    const float4 xv = *(const float4*)&{}[i][k];  // one 16-byte shared read, the same for every lane\n", xs)
            : x_smem ? fmt::format("    const float4 xv = make_float4({0}[i][k], {0}[i][k + 1], {0}[i][k + 2], {0}[i][k + 3]);  // the same for every lane\n", xs)
                     : fmt::format("    const float4 xv = *(const float4*)&{};  // the same for every lane\n", x_at("k"));
    loop += "    acc[i] += xv.x * wv.x;\n    acc[i] += xv.y * wv.y;\n    acc[i] += xv.z * wv.z;\n    acc[i] += xv.w * wv.w;\n  }\n}\n";
  } else if (vec4) {
    loop += fmt::format("#pragma unroll\nfor (i64 k = k0; k < {}; k += 4) {{\n", kmask ? fmt::format("min((i64){}, {})", K, kend) : kend);
    loop += fmt::format("  const float4 wv = *(const float4*)(w + m * {} + k);\n", K);
    loop += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) {{\n", kRows);
    if (N % kRows) loop += fmt::format("    if (n0 + i >= {}) break;  // mask: the last row tile\n", N);
    if (xv4)
      loop += fmt::format("    const float4 xv = *(const float4*)&{}[i][k];  // one 16-byte shared read, the same for every lane\n", xs);
    else if (x_smem)  // shared memory: four scalar reads (a static shared array's alignment is the float's)
      loop += fmt::format("    const float4 xv = make_float4({0}[i][k], {0}[i][k + 1], {0}[i][k + 2], {0}[i][k + 3]);  // the same for every lane\n", xs);
    else
      loop += fmt::format("    const float4 xv = *(const float4*)&{};  // the same for every lane\n", x_at("k"));
    loop += "    acc[i] += xv.x * wv.x;\n    acc[i] += xv.y * wv.y;\n    acc[i] += xv.z * wv.z;\n    acc[i] += xv.w * wv.w;\n  }\n}\n";
  } else {
    loop += fmt::format("for (i64 k = k0; k < {}; ++k) {{\n", kmask ? fmt::format("min((i64){}, {})", K, kend) : kend);
    loop += fmt::format("  const float wv = w[m * {} + k];\n", K);
    loop += fmt::format("#pragma unroll\n  for (int i = 0; i < {}; ++i) {{\n", kRows);
    if (N % kRows) loop += fmt::format("    if (n0 + i >= {}) break;  // mask: the last row tile\n", N);
    loop += fmt::format("    acc[i] += {} * wv;\n  }}\n}}\n", x_at("k"));
  }
  b += M % kCols ? indent_text(loop, "  ") + "}\n" : loop;
  b += fmt::format("#pragma unroll\nfor (int i = 0; i < {}; ++i) part[warp][i][lane] = acc[i];\n__syncthreads();\n", kRows);
  b += "// thread (row warp, column lane): the warps' partial sums in order, the epilogue, the store\n";
  b += "const i64 nn = n0 + warp;\n";
  std::string mask;
  if (N % kRows) mask = fmt::format("nn < {}", N);
  if (M % kCols) mask += (mask.empty() ? "" : " && ") + fmt::format("m < {}", M);
  std::string store = "float v = part[0][warp][lane];\n";
  store += fmt::format("#pragma unroll\nfor (int s = 1; s < {}; ++s) v += part[s][warp][lane];\n", kWarps);
  store += epilogue_code(n, fmt::format("nn * {} + m", M), "m", bias_early ? "bias_m" : "", weights_early && n.has_residual ? "res_nm" : "") + fmt::format("y[nn * {} + m] = v;\n", M);
  if (!mask.empty()) b += fmt::format("if ({}) {{  // mask: the edge tiles\n", mask) + indent_text(store, "  ") + "}\n";
  else b += store;
  code += indent_text(b, "  ") + "}\n";
  return code;
}

std::string rename_kernel(const std::string& name, const Kernel& k, bool generated_gemm) {
  if (k.kind == KernelKind::Matmul) return fmt::format("{}_{}", generated_gemm ? "cuda_gemm" : "cublas_linear", k.group);
  if (name.rfind("cpp_", 0) == 0) return "cuda_" + name.substr(4);
  return name;
}

// With PDL, a kernel's reads of what earlier kernels write must stay after griddepcontrol.wait. A
// `const T* __restrict__` parameter lets the compiler read it through the non-coherent path
// (ld.global.nc: data read-only for the kernel's whole life), and ptxas schedules those loads
// freely across the wait: for sm_90a (NVRTC / nvcc 13.0) it hoisted the MLP kernel's residual load
// above it (SASS: an LDG.E.CONSTANT of rp before ACQBULK), so a CTA launched early read the
// residual before the kernel two launches back had written it: wrong logits at (2, 16)
// (experiments/25-compile/REPORT.md 7j). So every pointer parameter of a __global__ function in
// `code` whose tensor (args, in parameter order) is not a graph weight loses `__restrict__`: its
// loads are coherent and stay after the wait. Weights keep it unless `weights_too`
// (CudaCodegenOptions::weights_plain, the default): the graph never writes them, and with
// __restrict__ ptxas issued their loads AFTER the wait as well (REPORT.md 7m: every weight load of
// the MLP and layernorm + GEMM kernels behind ACQBULK), while plain ones stay where the source puts
// them, before it, which is the point of weights_early.
std::string coherent_reads(std::string code, const Graph& g, const std::vector<int>& args, bool weights_too) {
  const size_t fn = code.find("__global__");
  if (fn == std::string::npos) return code;
  MINIGPT_CHECK(code.find("__global__", fn + 1) == std::string::npos, "codegen_cuda: coherent_reads takes one __global__ function");
  const size_t close = code.find(") {", fn), open = close == std::string::npos ? close : code.rfind('(', close);  // (no parens inside)
  MINIGPT_CHECK(open != std::string::npos && close != std::string::npos && open < close, "codegen_cuda: a kernel's parameter list not found");
  std::vector<std::string> params;
  for (size_t at = open + 1; at <= close;) {
    const size_t end = std::min(code.find(',', at), close);
    params.push_back(code.substr(at, end - at));
    at = end + 1;
  }
  MINIGPT_CHECK(params.size() == args.size(), "codegen_cuda: a kernel has {} parameters but {} launch arguments", params.size(), args.size());
  std::string list;
  for (size_t i = 0; i < params.size(); ++i) {
    std::string p = params[i];
    const size_t r = p.find("__restrict__ ");
    if (r != std::string::npos && p.find("const ") != std::string::npos && args[i] >= 0 &&
        (weights_too || g.tensor(args[i]).kind != TensorKind::Weight))
      p.erase(r, std::string("__restrict__ ").size());
    list += (i ? "," : "") + p;
  }
  return code.replace(open + 1, close - open - 1, list);
}

// After the opening brace of every __global__ function in code: PDL's trigger, and its wait
// there too, or where the kernel marked the point (kPdlWaitPoint: what comes before reads
// weights only).
std::string with_pdl_prologue(std::string code) {
  const std::string wait =
      "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");  // PDL: the previous kernel has finished, its writes visible\n";
  const std::string trigger = "  asm volatile(\"griddepcontrol.launch_dependents;\");  // PDL: the next kernel may launch now\n";
  for (size_t at = code.find("__global__"); at != std::string::npos; at = code.find("__global__", at + 1)) {
    const size_t brace = code.find("{\n", at);
    if (brace == std::string::npos) break;
    const size_t next = code.find("__global__", brace);
    const size_t point = code.find(kPdlWaitPoint, brace);
    if (point != std::string::npos && point < next) {
      code.replace(point, std::string(kPdlWaitPoint).size(), wait);
      code.insert(brace + 2, trigger);
    } else {
      code.insert(brace + 2, "  " + wait + trigger);
    }
  }
  return code;
}

}  // namespace cuda_gen

using namespace cuda_gen;

Schedule cuda_schedule(const Schedule& s, bool generated_gemm) {
  Schedule out = s;
  for (Kernel& k : out.kernels) k.name = rename_kernel(k.name, k, generated_gemm);
  return out;
}

CudaCode generate_cuda(const Schedule& s, const CudaCodegenOptions& opt) {
  MINIGPT_CHECK(!opt.pdl || opt.generated_gemm, "generate_cuda: PDL needs generated GEMMs (cuBLAS kernels do not wait on it)");
  MINIGPT_CHECK(!opt.megakernel || (opt.generated_gemm && !opt.pdl),
                "generate_cuda: the megakernel needs generated GEMMs (a cuBLAS call cannot be a stage) and no PDL (one launch)");
  const Graph& g = s.graph;
  std::vector<MegaStage> stages;
  CudaCode out;
  out.pdl = opt.pdl;
  out.graph_hash = graph_hash(g);  // (the cache key's too: the runner reads it here, not again)
  std::string src = fmt::format(
      "// Generated by minigpt compile (codegen_cuda v{}) for graph {} (hash {}).\n"
      "// {} kernels; arena {} bytes of intermediates. Compiled at run time by NVRTC; the host runs\n"
      "// the launch sequence at the end of this file (captured once as one CUDA graph).\n\n",
      kCodegenCudaVersion, g.name, out.graph_hash, s.kernels.size(), g.arena_bytes);
  src += kPrelude;
  std::map<std::string, std::string> emitted;  // loops_key -> the kernel emitted with that code
  for (const Kernel& k : s.kernels) {
    std::string code;
    CudaLaunch launch;
    launch.name = k.name;
    const size_t launches_before = out.launches.size();
    switch (k.kind) {
      case KernelKind::Rowwise: {
        RowwiseCuda gen(g, k);
        code = gen.generate(launch);
        out.launches.push_back(launch);
        break;
      }
      case KernelKind::Attention:
        code = generate_attention(g, k, launch);
        out.launches.push_back(launch);
        break;
      case KernelKind::KvWrite:
        code = generate_kv_write(g, k, launch);
        out.launches.push_back(launch);
        break;
      case KernelKind::PrologueMatmul:
        MINIGPT_CHECK(opt.generated_gemm, "generate_cuda: {} has a prologue, which only a generated GEMM takes (cuBLAS cannot)", k.name);
        // an MLP (fuse_mlp: the nodes end in two matmuls) is a kernel of its own form
        code = mlp_parts(g, k).mlp
                   ? generate_mlp(g, k, launch, opt.weights_early, opt.mlp_rows, opt.mlp_cluster && !opt.megakernel, opt.mlp_push,
                                  opt.ln_weights_early, opt.mlp_async, opt.mlp_mbar_cta, opt.mlp_next_split)
                   : generate_gemm(g, k, launch, opt.stage_x, opt.weights_early, opt.smem_vec4, opt.ln_weights_early);
        out.launches.push_back(launch);
        break;
      case KernelKind::Matmul:
        if (opt.generated_gemm) {
          code = generate_gemm(g, k, launch, opt.stage_x, opt.weights_early, opt.smem_vec4, opt.ln_weights_early);
          out.launches.push_back(launch);
        } else {
          code = generate_cublas(g, k, out.launches);
        }
        break;
    }
    if (opt.pdl) code = with_pdl_prologue(coherent_reads(std::move(code), g, launch.args, opt.weights_plain));
    if (!opt.megakernel) {
      // A kernel whose code is an earlier one's (the same op in another block: only the buffers
      // differ) is emitted once and launched under that name, as the C++ back end and Inductor
      // reuse identical kernels; its comment stays, for the reader (NVRTC compiles 5 GEMMs of
      // the model, not 17).
      auto [comment, body] = split_leading_comment(code);
      const std::string key = loops_key(body, k.name, kCudaTempPrefixes);
      if (const auto seen = emitted.find(key); seen != emitted.end()) {
        for (size_t i = launches_before; i < out.launches.size(); ++i)
          if (out.launches[i].kind == CudaLaunch::Kind::Kernel) out.launches[i].function.replace(0, k.name.size(), seen->second);
        code = comment + fmt::format("//   the same code as {}: launched as {}, with this kernel's buffers\n", seen->second, seen->second);
      } else {
        emitted.emplace(key, k.name);
      }
    }
    if (opt.megakernel) {
      // the kernel becomes a stage: its device function goes into the source with the megakernel
      int64_t smem = 0;
      out.kernels.push_back({k.name, device_function(code, launch.block, smem)});
      stages.push_back({code, out.launches.back(), k.reads, k.writes});
      continue;
    }
    out.kernels.push_back({k.name, code});
    src += "\n" + code;
    if (opt.pad_launches && &k != &s.kernels.back()) {  // (a measuring aid: one more launch boundary, under the kernel's name)
      CudaLaunch pad;
      pad.name = k.name;
      pad.function = "cuda_pad_launch";
      pad.block = 32;
      out.launches.push_back(pad);
    }
  }
  if (opt.pad_launches && !opt.megakernel) {
    // (under PDL the trigger BEFORE the wait, unlike with_pdl_prologue's kernels: the next kernel
    // launches, and loads its weights, while the previous one still runs, as without the pad; its
    // wait then holds it until this kernel has finished, which is after the previous one has)
    src += "\n// pad_launches (a measuring aid, MINIGPT_CUDA_VARIANT=pad-launches): launched after every kernel but the last, it\n"
           "// does nothing but, under PDL, let the next kernel launch and wait for the previous one: one more launch boundary\n"
           "extern \"C\" __global__ void __launch_bounds__(32) cuda_pad_launch() {\n";
    if (opt.pdl)
      src += "  asm volatile(\"griddepcontrol.launch_dependents;\");  // PDL: the next kernel may launch now\n"
             "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");  // PDL: the previous kernel has finished, its writes visible\n";
    src += "}\n";
  }
  if (opt.megakernel) {
    CudaLaunch mega;
    src += assemble_megakernel(g, stages, "cuda_megakernel", opt.megakernel_threads, mega);
    out.launches = {mega};
  }
  // the host's launch sequence, for the reader (runner_cuda executes out.launches)
  auto arg_text = [&](int t) -> std::string {
    if (t < 0) return "NULL";
    const TensorInfo& ti = g.tensor(t);
    return ti.alias_of >= 0 ? g.tensor(ti.alias_of).name : ti.name;
  };
  src += "\n// ---- the launch sequence (host; one CUDA graph, arena slots bound once) ----------------\n";
  for (const CudaLaunch& l : out.launches) {
    if (l.kind == CudaLaunch::Kind::Sgemm) {
      src += fmt::format("//   cublasSgemm(T, N, {}, {}, {}, 1, {}, {}, {}, {}, 0, {}, {})  // {}\n", l.M, l.N, l.K, arg_text(l.w), l.K,
                         arg_text(l.x), l.K, arg_text(l.y), l.M, l.name);
      continue;
    }
    std::string args;
    for (int a : l.args) args += (args.empty() ? "" : ", ") + arg_text(a);
    if (l.cluster > 0) {
      src += fmt::format("//   {}<<<one cluster of up to {} CTAs, {}, {} B dynamic shared>>>({})\n", l.function, l.cluster, l.block, l.smem,
                         args);
      continue;
    }
    src += fmt::format("//   {}<<<{}, {}>>>({})\n", l.function, l.grid, l.block, args);
  }
  out.source = std::move(src);
  return out;
}

}  // namespace minigpt::compile
