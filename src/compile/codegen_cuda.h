// The CUDA back end: a schedule (the same fused graph the C++ back end reads) -> ONE CUDA C
// source with a __global__ kernel per fused group, plus the launch plan that runs them.
//
// Every non-matmul kernel's body is generated here from the IR for the shapes at hand: the
// row loops (threads of a row stride over its columns: c = lane + j * TPR), the loads with
// their index expressions, the fused arithmetic, the reductions (per-thread partials, then a
// warp butterfly with __shfl_xor_sync and, for rows wider than a warp, a fixed-order pass over
// the warps' partials in shared memory), the masks (c < C on the last step when C is not a
// multiple of the row's threads) and the stores. A row of at most kPersistentSteps steps per
// thread is "persistent" (Inductor's word): the kernel loads it into registers once and every
// later loop reads the registers. Attention is one kernel per (batch, head): the head's keys
// and values staged in shared memory, a thread per query, a two-pass softmax (the max, then
// exp and the sums; scores recomputed from shared memory), no score matrix.
// Matmuls: cuBLAS SGEMM (FP32, no TF32) then a generated epilogue kernel (bias [+ GELU |
// + residual]), as Inductor calls an external mm; with generated_gemm a fixed-shape
// shared-memory tiled GEMM with the epilogue fused (runner_cuda.h says which variant each mode
// runs), which may take a prologue (passes.h's matmul_prologue): a layernorm, or an attention,
// computing the GEMM tile's rows of x in shared memory, so that x is never stored; or (fuse_mlp)
// a whole MLP, with the attention's projection and (fuse_mlp_attention) the prefill attention
// before it, as one kernel (the attention's rows, h and the projection's rows in shared memory; a
// block per row tile, or a cluster of 8 CTAs each owning an eighth of h and of fc2's K). A kernel whose code is an earlier one's (the same op of another block) is emitted once
// and launched under that name. With megakernel, every kernel becomes a stage of one launch
// (codegen_cuda_mega.h).
//
// The source includes nothing (NVRTC compiles it alone); kernels are extern "C" so their
// names are the ones in the plan. Each kernel's comment gives its source ops, shapes, bytes
// read and written, FLOPs and launch parameters; the source ends with the launch sequence as
// a comment (the host wrapper, which runner_cuda executes).
//
// What it does not do: compile (cuda/jit_cuda.h), allocate or launch (cuda/runner_cuda.h).
// Needs no CUDA toolkit: it is text.
#pragma once

#include "compile/schedule.h"

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::compile {

inline constexpr int kCodegenCudaVersion = 6;  // bump on any change to the generated text's meaning
// Column steps per thread up to which a row is kept in registers between its loops.
inline constexpr int kPersistentSteps = 32;

struct CudaCodegenOptions {
  // Matmuls: false = cuBLAS SGEMM + a generated epilogue kernel; true = generated fixed-shape
  // GEMMs with the epilogue fused (cuda_gemm_N).
  bool generated_gemm = false;
  // With generated_gemm: each layernorm (with what fuse_reductions put before it) becomes the
  // prologue of the GEMM that reads it (PassOptions::matmul_prologue, turned on by lower_cuda):
  // 9 fewer launches in the 4-block model. Off: the layernorm is a row-wise kernel of its own.
  // H200, (2, 16), PDL: a layernorm kernel took 1.26 us, the GEMM 1.78-1.80, the fused one
  // 1.86-1.94.
  bool matmul_prologue = true;
  // With generated_gemm: each prefill attention becomes the prologue of its output projection's
  // GEMM (PassOptions::attention_prologue): 4 fewer launches, a warp per (row, head). Off by
  // default: measured slower on the H200 (the fused kernel 8.5 us against 4.1 + 1.8 us for the
  // attention and the GEMM apart; whole forward 68.7 against 56.2 us): 8 blocks whose warps take
  // 4 (row, head) pairs one after the other, each reading k and v from L2 in a loop of dependent
  // steps. Still slower with the attention kernel's warp-per-query form (1.33 us a kernel): 65.5
  // against 45.5 us (2026-12-01 19:15). max-autotune still times it ("attn-prologue").
  bool attention_prologue = false;
  // With generated_gemm: each MLP (fc1 with its layernorm prologue, GELU, then fc2) one kernel
  // (PassOptions::fuse_mlp; codegen_cuda_mlp.cpp's generate_mlp): a tile of mlp_rows rows per
  // cluster of 8 CTAs (mlp_cluster) or per block, h kept in shared memory, the weights loaded
  // before PDL's wait; fc1's and fc2's sums in the order of their own GEMM kernels (the same
  // values, bitwise); h is never stored, 4 fewer launches in the 4-block model, 8 with the
  // projection (fuse_mlp_proj). H200, 2026-12-01 22:00 (experiments/25-compile/REPORT.md 7e), the
  // whole forward at (2, 16): 35.1-35.9 us in clusters of 4-row tiles against 40.1-40.4 us apart;
  // the decode step 32.2 against 38.6 us. The block form (a block owning every column of h and y)
  // loses: 41.3-45.4 us, every block streaming all of W1 and W2 (128 KB) through one SM. The form
  // before it (8-row tiles, fc1 computed in both of fc2's column tiles) took 6.26 us against
  // 1.70 + 3.10 apart; it is gone. default_cuda_variant turns it off below sm_90 (no clusters).
  bool fuse_mlp = true;
  // fuse_mlp's rows per tile (1 to 8; at most the matmul's rows): (2, 16) has 32 rows, so 8
  // clusters of 8 CTAs. Measured (clusters, with the projection): 4 rows 35.1-35.9 us, 2 rows
  // 40.8-41.4, 1 row 47.2-47.4 (more clusters than fit at once beside the other kernels' blocks);
  // with 7m's defaults (REPORT 7m): 4 rows 27.5-27.8, 2 rows 32.9-33.3, 1 row 38.2-38.7 (fewer
  // clusters, faster). 8 rows (4 clusters; at d = 64 two of fc2's outputs per thread) are in
  // clusters since 7m too: slower (REPORT 7o: 29.65 / 29.66 us against 27.54 / 27.73; the MLP
  // kernel alone faster, 2.80-2.85 against 3.13). MINIGPT_CUDA_VARIANT=rows8 measures them.
  int mlp_rows = 4;
  // With fuse_mlp: the attention's output projection (bias, residual) too, as the MLP kernel's
  // first stage (PassOptions::fuse_mlp_proj): its rows computed into shared memory, where the
  // layernorm and fc2's residual read them; everything after the attention one kernel per block,
  // 4 fewer launches again (14 in all). Same sums, same order. H200: 35.1-35.9 us against
  // 38.6-39.1 us without it (2-row tiles).
  bool fuse_mlp_proj = true;
  // With fuse_mlp_proj (not in the megakernel): the prefill attention before that projection too,
  // as the MLP kernel's first stage (PassOptions::fuse_mlp_attention; codegen_cuda.cpp's
  // attention_stage): each CTA stages the k and v rows of its tile's sequences in shared memory
  // and computes the tile's rows of the attention there, a warp per (row, head), in the attention
  // kernel's arithmetic and order (the same values, bitwise); the attention's result is never
  // stored. A transformer block is two kernels: 4 fewer launches again (10 in all). Off by
  // default: measured slower on the H200 (experiments/25-compile/REPORT.md 7f, 2026-12-01 22:42):
  // the whole forward at (2, 16) 39.4-39.6 us against 35.4-35.6 us with the attention apart; the
  // fused kernel 7.6-7.7 us against 1.33 + 6.0 us for the attention and the MLP kernel apart (every
  // CTA of a cluster computes the tile's 16 (row, head) pairs, 2 per warp, after two dependent L2
  // round trips: k and v staged, then q). max-autotune still times it ("attn-mlp").
  bool fuse_mlp_attention = false;
  // With fuse_mlp (sm_90+, not in the megakernel): the MLP kernel as a grid of 8-CTA thread-block
  // clusters, one per tile of mlp_rows rows: CTA c computes h's columns [c H/8, (c + 1) H/8) and
  // fc2's K slice c of every output, and the cluster adds the 8 slices' partial sums in order
  // through distributed shared memory; each CTA loads 1/8 of W1 and W2 (16 KB at d = 64, against
  // 128 KB for a block owning every column). Same sums, same order. Shapes it does not fit (a
  // slice of h wider than a warp, more outputs per tile than threads unless each thread's share
  // are outputs of one column) get the block form.
  bool mlp_cluster = true;
  // With mlp_cluster: fc2's partial sums pushed into the CTA that finishes each output
  // (st.shared::cluster) instead of pulled from the 8 CTAs by it (ld.shared::cluster): one cluster
  // barrier instead of two (no CTA then reads another's shared memory, so none waits for the
  // others before it exits; the first half of the barrier that makes remote writes safe, the
  // arrive, is at the kernel's top), and the partials read from the CTA's own shared memory. Same
  // sums, same order. H200, 2026-12-02 (experiments/25-compile/REPORT.md 7j, one run, PDL): the
  // whole forward at (2, 16) 32.6 us against 34.0 us pulled (max-autotune's candidates), the decode
  // step 30.9 against 32.2 us. 7h's wrong logits at (2, 16) (this form after the attention stage;
  // the LM head's softmax in its GEMM) were not the pushing but PDL: ptxas had hoisted a `const
  // __restrict__` (non-coherent) load of the residual above griddepcontrol.wait, so a CTA launched
  // early could read it before the kernel two back had written it; under PDL no parameter but a
  // weight is __restrict__ now (codegen_cuda.cpp's coherent_reads). Off: 7e's pulled form
  // (max-autotune's "mlp-pull").
  bool mlp_push = true;
  // With mlp_push: the partials written with st.async (each store's bytes counted on the
  // receiving CTA's mbarrier) and each CTA's finishing threads waiting on their own mbarrier,
  // instead of a whole cluster barrier (barrier.cluster.arrive.release: a MEMBAR.ALL.GPU in
  // SASS, then every CTA waits for the slowest). Same sums in the same order. H200 (REPORT 7m):
  // the MLP kernel alone 3.5 -> 3.16 us, the whole forward 29.1 -> 27.5 us (with weights_plain
  // and ln_weights_early; alone 32.4 -> 31.5). Off: max-autotune's "mlp-sync".
  bool mlp_async = true;
  // With mlp_async: the finishing threads' wait on their mbarrier with acquire at CTA scope
  // instead of cluster scope (mbarrier.try_wait.parity.acquire.cta: no L1 invalidate). A
  // MEASURING AID ONLY ("mbar-cta"), never a max-autotune candidate nor a default: the PTX
  // memory model does not promise the data. st.async's stores are weak and its complete_tx on the
  // receiving mbarrier has release semantics at cluster scope; a release synchronizes with an
  // acquire only when the two are morally strong, i.e. each one's scope includes the other's
  // thread, and a CTA-scope acquire does not include the pushing thread of another CTA. It
  // measures what the cluster-scope acquire costs (REPORT 7o): nothing measurable, 27.54 / 27.57
  // us against 27.73 / 27.54.
  bool mlp_mbar_cta = false;
  // With mlp_async (the cluster form, fuse_mlp_proj): the NEXT block's layernorm (ln1) and qkv
  // matmul as the MLP kernel's tail (PassOptions::fuse_mlp_next; "mlp-next"): after fc2 each CTA
  // pushes its y values (its columns of the tile's rows, also stored: the next block's residual)
  // into every CTA of the cluster (st.async, a second mbarrier), then every CTA computes the
  // layernorm of the tile's rows (a warp per row, as its kernel) and, with mlp_next_split, CTA c
  // qkv's columns [c MQ/8, (c + 1) MQ/8) (lane = column, warp = K slice: generate_gemm's order);
  // without it ("next-all") every CTA all of qkv's columns (mlp_gemm_stage), storing c % 8 == rank.
  // Same sums in the same order; 3 fewer launches in the 4-block model (14 -> 11). H200
  // (REPORT 7o, one run, two alternations): 27.51 / 27.38 us against 27.73 / 27.54 for the default
  // (the fused kernel 4.22 us alone against 3.14 + 1.43 apart); next-all 32.6-32.7. Off: its
  // bitwise test (FusedMlpWithTheNextLayerNormChangeNoBit) had not finished on a GPU; not a
  // max-autotune candidate until it has.
  bool fuse_mlp_next = false;
  bool mlp_next_split = true;
  // With generated_gemm: a GEMM without a prologue first copies its tile's rows of x into shared
  // memory (coalesced, the whole block), and its K loop reads them there, as the prologue GEMMs
  // do; off: every lane reads x from global memory in the K loop (a broadcast per warp). H200:
  // fc2 (K = 256) 3.87 -> 3.22 us.
  bool stage_x = true;
  // With generated_gemm: each GEMM loads its lane's slice of W (at most 32 floats, as float4s) and
  // its bias into registers at its top, before anything an earlier kernel writes, and with PDL
  // before griddepcontrol.wait (the graph never writes a weight): their L2 latency overlaps the
  // previous kernel. Same sums in the same order. Off ("weights-late"): W read in the K loop.
  // H200, (2, 16), PDL: the whole forward 44.5 -> 40.5 us. (The MLP kernel's cluster form loads
  // its weights first either way.)
  bool weights_early = true;
  // With generated_gemm: the K loop reads x's rows from shared memory as float4s (the arrays
  // declared __align__(16), rows of K % 4 == 0 floats) instead of four scalar reads: fc2's loop
  // (K = 256) does 64 shared-memory reads per thread instead of 256. Same sums in the same order.
  // Off by default: not yet measured (max-autotune's "smem-vec4" times it).
  bool smem_vec4 = false;
  // Under PDL, the graph weights' pointers plain (not `const __restrict__`) too, so that their
  // loads are coherent ones, which ptxas keeps where the source puts them: before
  // griddepcontrol.wait. With __restrict__ (non-coherent loads) NVRTC 13.0's ptxas issues every
  // weight load of the MLP kernel and of the layernorm + GEMM kernels AFTER the wait (SASS: the
  // LDG.E.128.CONSTANTs follow ACQBULK), so weights_early's loads did not overlap the previous
  // kernel; plain, all 17 of the MLP kernel's come before it (nvcc 13.0 sm_90a, cuobjdump).
  // Same loads of the same values (a weight is never written). H200, 2026-12-02 (REPORT 7m): the
  // MLP kernel alone 5.2 -> 3.5 us with ln_weights_early, the layernorm + GEMM kernels 1.65 ->
  // 1.43; the whole forward at (2, 16) 32.4 -> 29.1 us (both), 29.4 alone. Off: max-autotune's
  // "weights-restrict".
  bool weights_plain = true;
  // With generated_gemm: a layernorm prologue's gain and bias (graph weights of the row's width)
  // loaded into registers at the kernel's top, before PDL's wait, instead of in the middle of the
  // row's chain (after the row's sums: an L2 round trip on the kernel's critical path, in every
  // layernorm + GEMM kernel and MLP kernel). Same values. H200 (REPORT 7m): 32.4 -> 32.4 us alone
  // (ptxas issues the loads after the wait with __restrict__ anyway), 29.4 -> 29.1 with
  // weights_plain. Off: max-autotune's "ln-late".
  bool ln_weights_early = true;
  // Programmatic dependent launch (Hopper, sm_90+; with generated_gemm only, so that every
  // kernel of the graph is generated): each kernel starts with griddepcontrol.wait (the previous
  // kernel's writes are visible after it) then griddepcontrol.launch_dependents, and the runner
  // launches with programmatic stream serialization: the next kernel's launch overlaps this one.
  // Its pointers to anything but graph weights are not __restrict__ (codegen_cuda.cpp's
  // coherent_reads: ptxas may move a non-coherent load above the wait).
  bool pdl = false;
  // A MEASURING AID ("pad-launches"; never a candidate nor a default): an empty kernel (one block
  // of 32 threads, no parameters) launched after every kernel but the last, under PDL with
  // griddepcontrol.launch_dependents then griddepcontrol.wait (so the next kernel still launches
  // and loads its weights while the previous one runs), so the graph has one more launch
  // boundary per kernel and nothing else (the values are untouched). The whole forward's
  // time against the default's, divided by the pads, is what one launch boundary costs in the
  // graph: what fusing two kernels into one can save at most, beside the work itself. H200
  // (REPORT 7o): 30.82 / 30.89 us against 27.73 / 27.54, ~0.25 us a boundary.
  bool pad_launches = false;
  // Megakernel (sm_90+; with generated_gemm, without pdl): every kernel becomes a __device__
  // function of a virtual block and ONE __global__ kernel runs them in order as stages of one
  // thread-block cluster, a cluster barrier between stages: the whole graph is one launch
  // (codegen_cuda_mega.h).
  bool megakernel = false;
  // The megakernel's threads per CTA: 0 = its widest stage's block; more lets a CTA run several
  // virtual blocks of a stage side by side (fewer rounds over a stage's virtual blocks).
  int megakernel_threads = 0;
  // The rows form (codegen_cuda_rows.h; MINIGPT_CUDA_VARIANT=rows, max-autotune's "rows"): a
  // forward whose ops are row-local but for the causal attention as ONE kernel, a cluster of T CTAs
  // per sequence, one row per CTA, the weights streamed through a shared-memory ring. A graph the
  // analysis refuses falls back to the options below (lower_cuda's CudaLowered::note says why).
  bool rows = false;
  // With rows: the rows form's text before the ports of the hand-written kernel's variants
  // (codegen_cuda_rows.h: hoisted LayerNorm loads, redux max, unrolled key and k loops, prewait
  // where the pieces' copies are in flight, division-free slots) and before the head's changes
  // (lm_head's chains split by warp, the softmax fused into lm_head's stage), for A/B on the GPU
  // ("rows-plain"; its (2, 16) text pinned by a test); the same values, bitwise.
  bool rows_plain = false;
  // With rows: the stage trace (a measuring aid, never the timed text; CudaCompiledGraph::
  // trace_rows builds it apart, --explain prints it): thread 0 of the last CTA of cluster 0 (the
  // row with the most keys) stamps clock64() into the module's __device__ rw_trace[] at the
  // start, after the start's barrier and at the end of every stage (after its closing barrier),
  // and %globaltimer at the first and last stamps into rw_trace_ns[2]; CudaCode::trace_stages
  // names the intervals. Off: the text byte-identical to the untraced one.
  bool rows_trace = false;
};

// A launch argument that is not a graph tensor: the rows form's packed weight image (the runner
// places it in the arena after everything else).
inline constexpr int kCudaImageArg = -2;

// One piece of a packed weight image (the rows form): rows x cols floats of weight tensor
// `tensor` from (src_row0, src_col0) (row stride: its columns) to dst (row stride dst_ld), floats.
struct CudaImageCopy {
  int tensor = -1;
  int64_t src_row0 = 0, src_col0 = 0, rows = 0, cols = 0, dst = 0, dst_ld = 0;
};

// One step of the host's call sequence.
struct CudaLaunch {
  enum class Kind : uint8_t { Kernel, Sgemm } kind = Kind::Kernel;
  std::string name;      // the scheduled kernel it belongs to ("cuda_fused_softmax_12")
  std::string function;  // Kernel: the __global__ function to launch
  int grid = 1, block = 1, smem = 0;
  // > 0: launched as ONE thread-block cluster of at most this many CTAs (the megakernel; the
  // runner picks the largest size the GPU co-schedules, and grid = that size)
  int cluster = 0;
  // > 0: the grid in thread-block clusters of this many CTAs (the MLP kernel's mlp_cluster form)
  int cluster_dim = 0;
  // Kernel: its pointer parameters in order, as graph tensor ids (-1: a null pointer).
  std::vector<int> args;
  // Sgemm: y (N, M) = x (N, K) W (M, K)^T, tensor ids of x, W, y.
  int64_t N = 0, K = 0, M = 0;
  int x = -1, w = -1, y = -1;
};

struct CudaKernelText {
  std::string name;  // the scheduled kernel
  std::string text;  // its __global__ function(s), as in the source
};

struct CudaCode {
  std::string source;                   // the whole CUDA C source (output_code.cu)
  std::vector<CudaKernelText> kernels;  // one per scheduled kernel, for the debug files
  std::vector<CudaLaunch> launches;     // in order; scheduled kernel k's launches share its name
  bool pdl = false;                     // launch with programmatic stream serialization
  std::string graph_hash;               // graph_hash(s.graph), as the source's first line names it
  // the rows form: the weight image the kernel streams (kCudaImageArg), packed once by the runner
  std::vector<CudaImageCopy> image;
  int64_t image_floats = 0;
  // the rows form with rows_trace: the names of the intervals between the stamps (rw_trace[i + 1]
  // - rw_trace[i] is interval i's cycles): "start", then each stage as its plan comment names it
  std::vector<std::string> trace_stages;
};

// The schedule's kernel names start "cpp_" (schedule.cpp names them for the C++ back end);
// cuda_schedule renames them "cuda_..." (cuda_fused_softmax_3, cuda_fused_attention_1,
// cuda_gemm_2 / cublas_linear_2, cuda_kv_write_0): same groups, same order.
Schedule cuda_schedule(const Schedule& s, bool generated_gemm);

CudaCode generate_cuda(const Schedule& s, const CudaCodegenOptions& opt);

}  // namespace minigpt::compile
