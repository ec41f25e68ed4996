// The CUDA back end's generators, shared between its source files: codegen_cuda.cpp (row-wise
// kernels, the attention, the GEMMs, the whole source and its launch plan) and
// codegen_cuda_mlp.cpp (the MLP kernel: the projection, layernorm, fc1 and fc2 of a block as
// one kernel, in a block per tile or in thread-block clusters). Internal to src/compile: the
// public interface is codegen_cuda.h.
#pragma once

#include "compile/codegen_cuda.h"
#include "compile/ir.h"
#include "compile/schedule.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile::cuda_gen {

// A line a kernel may put where PDL's griddepcontrol.wait is to go (everything above it reads
// only weights, which no kernel of the graph writes); with_pdl_prologue replaces it, and without
// PDL it stays a comment.
inline constexpr const char* kPdlWaitPoint =
    "// (the reads above are of weights only: PDL's wait, when launched with it, goes here)\n";

// Tensor `id` as the kernel comments name it.
std::string describe(const Graph& g, int id);
// The comment every kernel starts with, and its launch.
std::string kernel_comment(const Graph& g, const Kernel& k, const std::vector<std::string>& params, const std::string& launch);

// A matmul node's epilogue, in words ("GELU(x W^T + b)") and as code on v at output `index`,
// column `col` (the bias read at bias_at, the residual at res_at, when given).
std::string epilogue_text(const Node& n);
std::string epilogue_code(const Node& n, const std::string& index, const std::string& col, const std::string& bias_at = "",
                          const std::string& res_at = "");

// A GEMM's row-wise prologue (a layernorm, with what fuse_reductions put before it) computing
// the tile's `rows` rows of x into shared memory, a warp per row; its parameters appended.
// `early` (CudaCodegenOptions::ln_weights_early): the row's per-column weights (the layernorm's
// gain and bias) are read from registers that the statements put into *early load; the caller
// places those at the kernel's top, before PDL's wait. `in_prefix`: its inputs' parameter names
// (a second prologue in one kernel takes another, e.g. the MLP kernel's next-layer tail).
std::string rowwise_prologue(const Graph& g, const Kernel& k, int rows, int64_t tiles_m, std::vector<std::string>& sig,
                             std::vector<std::string>& params, std::vector<int>& args, int smem_in = -1, std::string* early = nullptr,
                             const char* in_prefix = "in_ptr");
// The prefill attention as a kernel's first stage (fuse_mlp_attention): the tile's rows of its
// output into the shared array `out`; its parameters appended.
std::string attention_stage(const Graph& g, const Node& a, int R, int threads, const std::string& out, std::vector<std::string>& sig,
                            std::vector<std::string>& params, std::vector<int>& args);
// x's `rows` rows of the tile copied into the shared array xs by the whole block (coalesced).
std::string staged_x(int64_t N, int64_t K, int rows, int threads, const std::string& x = "x", const std::string& xs = "xs");
// The shared array `name`'s declarations in code made __align__(16) (float4 reads).
void align_shared(std::string& code, const std::string& name);

// Whether MLP kernel k (mlp_parts) fits the cluster form at tiles of R rows (with the next
// block's layernorm and qkv too when k has them): lower_cuda asks it to drop fuse_mlp_next where not.
bool mlp_cluster_fits(const Graph& g, const Kernel& k, int R);
// The MLP kernel (codegen_cuda_mlp.cpp): kernel k, an MLP group of fuse_mlp, on tiles of R rows,
// in 8-CTA clusters when cluster_asked and the shapes fit (else a block per tile), fc2's partial
// sums pushed to the CTAs that finish them (push) or pulled by them; its launch.
// ln_early: the layernorm prologue's gain and bias loaded at the top (rowwise_prologue's `early`);
// async: the pushed partials with st.async and an mbarrier (CudaCodegenOptions::mlp_async);
// mbar_cta: that mbarrier waited on at CTA scope (mlp_mbar_cta, a measuring aid). next_split
// (with the next block's layernorm and qkv in the kernel, fuse_mlp_next): qkv's columns split
// across the cluster (mlp_next_split), else every CTA computes all of them.
std::string generate_mlp(const Graph& g, const Kernel& k, CudaLaunch& launch, bool weights_early, int R, bool cluster_asked, bool push,
                         bool ln_early = false, bool async = false, bool mbar_cta = false, bool next_split = true);

}  // namespace minigpt::compile::cuda_gen
