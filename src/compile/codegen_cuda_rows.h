// The CUDA back end's "rows" form (CudaCodegenOptions::rows; MINIGPT_CUDA_VARIANT=rows): a forward
// whose every op is ROW-LOCAL (a row of its output depends only on the same row of its inputs,
// and on whole weights) except the causal attention over the sequence, generated as ONE
// __global__ kernel launched as a grid of thread-block clusters: one cluster of T CTAs per
// sequence, CTA t owning row t. This is the design of the hand-written row-split megakernel
// (src/kernels/cuda/gpt_mega_rows.h, issue 14), generated from the graph:
//
//   plan_rows (the analysis): the captured graph through fuse_attention and matmul_epilogue (the
//     composite ops: LayerNorm, Softmax, Matmul with its fused bias / GELU / residual, the fused
//     Attention), then a pass over every node deciding, from its op, its operands' kinds (a row
//     tensor of N = B T rows, a whole weight, the token ids) and its attributes, whether its output
//     row n depends only on row n of its inputs (gathers by id and by position n % T, pointwise ops
//     with column or row broadcasts, row reductions and composites, matmuls of a row by a weight),
//     or is the causal prefill attention (row t of a sequence reads rows 0..t: the one exchange
//     between CTAs). Anything else (a KV cache, a runtime position, an attention piece the fusion
//     did not take) is refused with the node named; so are shapes and uses the generator does not
//     take (T > 16 CTAs per cluster, widths not multiples of 32, heads wider than 128, attentions
//     of different widths, a layernorm or attention output only a graph output), and a stage
//     reading more weight pieces than the ring's slots that fit beside the activations (the
//     shared-memory layout computed as generate_rows lays it out: d_model 128's fc1, a
//     vocabulary above ~700 at d_model 64). A refused graph keeps the other forms (lower_cuda
//     falls back, saying why); generate_rows never refuses a plan plan_rows took.
//   generate_rows (the generator): a stage per graph op in schedule order (pointwise chains inlined
//     into one stage, as the embedding's gather + gather + add), the weights as a packed image
//     (every 1-D weight in a "small" block copied once at the start; every matmul's weight rows in
//     17 KB pieces, padded to K + 4 floats, in consumption order) streamed through a ring of
//     shared-memory slots with cp.async.bulk on an mbarrier per slot (a slot refilled with the piece
//     ns later as soon as the stage reading it has passed its CTA barrier, by the last warp), the
//     k, v hand-over of every attention (each CTA's k and v rows pushed by st.async to the later
//     CTAs of its cluster, completing on their mbarrier; a cluster barrier per layer so that the
//     next layer's pushes never overwrite rows still being read), and the shared-memory layout
//     (activation rows reused by liveness). Each stage's comment names its source ops, shapes,
//     weight bytes and FLOPs.
//
// Numerics as the hand-written kernel's (gpt_mega_rows.h): sums in k order from 0 in one FMA chain
// per output; a matmul of few outputs split into S = 2, 4 or 8 k-slices of the chain (slices_for:
// the most with M S within the slice threads, 256 or 512, and slices of >= 16 k), the slices' sums
// added in slice order (proj by heads, fc2 by 64-slices), then + bias, then GELU or + residual; LayerNorm statistics in double in one pass, float rsqrtf; exact-erf GELU;
// scores q.k in e order times 1/sqrt(dh), the softmax in registers, att in key order; the
// vocabulary softmax's max and sum over the warps in warp order.
//
// The device helpers (mbarrier, bulk copy, st.async, cluster barriers, the one-pass LayerNorm)
// are a string prelude (kRowsPrelude in the .cpp): NVRTC compiles the generated source alone and
// cannot include the project's kernels/cuda/*.cuh, so the ideas of bulk_copy.cuh and
// gpt_mega_parts.cuh are written again there, in the same arithmetic.
//
// Measured (H200, experiments/25-compile/gpu_rows15, `minigpt compile --device cuda --graph gpt
// --explain`): the whole forward at (2, 16) 21.6-22.6 us per replay alone, 20.2-20.4 per replay 100
// back to back (the kernel alone ~19.5 us), against 29.1-29.5 / 27.6-27.7 for the 14-kernel form in
// the same runs: the default mode's choice on sm_90 since (runner_cuda.h's default_cuda_variant).
// The probes' logits 7.15e-6 from the CPU engine, the same top-1 on every probe.
//
// The default text carries the hand-written kernel's measured variants (gpt_mega_rows.cu's kVar
// comments; its `bitw` instance, 24.35 -> 21.57 us per forward there, rows14e), each bitwise the
// plain text's values (rows-plain: the text before them, for A/B):
//   - LayerNorm (rw_layernorm): the gain and bias loaded with the row, before the statistics
//     (kVarLnHoist; the plain text's constant offsets already let the compiler do so: sm_90a
//     SASS of the shipped model's text has no shared load after the rsqrt in either text);
//   - attention: the max of the scores by one redux.sync on the floats mapped to ordered ints
//     (kVarRedux; also each warp's max in the vocabulary softmax), the sum of exp over the lanes
//     that can hold keys only (T <= 16: the butterfly from offset 8), the key loop unrolled to T keys
//     with its v loads unconditional (row min(k, nk - 1)) and the FMAs under k < nk (kVarKeys); since
//     att15 as attention2_text writes it (the paragraph on the default text's attention below);
//   - rw_dot's k loop fully unrolled for K <= 64 (dot64's kFull): the later float4 loads issue
//     while the FMA chain runs;
//   - prewait and slots (kVarPrewait, kVarSlots): before the CTA barrier preceding a matmul stage,
//     lane j of the last warp waits for the stage's piece j (rw_prewait) where the stage's pieces'
//     copies are all in flight by then (else the stage's threads wait themselves, rw_piece_at: the
//     d_model 96 head); the GEMM threads then read their slots without an mbarrier wait and
//     without a division (rw_slot: the stage's first piece is a compile-time constant); the
//     refills likewise (rw_refill<A, B>);
//   - the head (issue 15, gen15c): a one-chain-per-output matmul of more outputs than threads
//     (lm_head at V 611: two chains) runs, per warp, as many chains as its first lane has columns
//     (warp-uniform branches: warps 0..3 two, 4..15 one; gpt_mega_rows.cu's kVarLmOne, measured
//     there 21.02 against 21.54 us per forward, gpu_head14); and such a matmul whose one reader is
//     a softmax over its row (lm_head -> probs) is one stage with it: the logits in registers,
//     stored to global at once, the max and sum over the CTA as the softmax stage's, without the
//     logits' shared-memory round trip and its CTA barrier (generate_rows' fuses_softmax).
// Measured (H200, experiments/25-compile/gpu_gen15/call1, medians of 3 alternated rounds; before the head's change): the
// default text 20.93 us per replay alone, 19.35 back to back, the kernel 18.55, against rows-plain's
// 21.98 / 20.20 / 19.47, bitwise the same logits. Tried and removed: rows-fold (each LayerNorm read
// only by a matmul folded into it, W' = W g, s = sum_k W', c = W beta + b packed into the image; no
// LayerNorm stage): 21.02 / 19.33 / 18.46, no gain over the default, and not bitwise: the probes'
// logits 1.81e-5 from the CPU, over issue 15's 1e-5 (the hand-written kernel's fold variants were
// slower too: gpu_fold14/call1, docs/MEGAKERNEL.md).
//
// The stage trace (CudaCodegenOptions::rows_trace; CudaCompiledGraph::trace_rows, printed by
// `minigpt compile --device cuda --explain`): the same text plus one line per stamp, thread 0 of
// cluster 0's last CTA (the row with the most keys) writing clock64() into a __device__ rw_trace[]
// of the module at the kernel's start, after the start's barrier and at the end of every stage
// (after its closing barrier and refill), and %globaltimer at both ends; the runner reads them by
// name (cuModuleGetGlobal). A text and cubin of their own: the timed text is the untraced one,
// byte for byte (gpt_mega_rows.cu's MINIGPT_MEGA_TRACE is the hand-written kernel's counterpart).
// The intervals' names say where the work is ("stage s: .."): stage 0's "(in the start)" (warps 1.. compute it
// during the start), the fused head's "matmul softmax -> logits, probs" and the softmax stage after
// it "(fused into stage s)" (its interval two adjacent stamps). Finer stamps (issue 15, att15): a
// qkv stage's k, v wait is its own interval ("..: the k, v wait (rw_kv_wait)"); an attention stage
// is split after head 0's scores, max, exp + sum + 1/sum, probabilities x v and store (thread 0,
// inside warp 0's branch), then, where its closing barrier has a prewait (not before a deferred proj,
// whose pieces were prewaited with the attention's), the last warp's lane 0 after its
// prewait (another thread's stamp on the same SM clock: < 0 when it was done before the store, i.e.
// off the barrier's path), then the stage's own stamp after the barrier and the cluster arrive
// (before a deferred proj its name says the interval holds the proj's k-slice by heads too). A
// deferred matmul's interval is two adjacent stamps ("(deferred: in stages s - 1 and s + 1)").
//
// The default text's attention (issue 15, att15; the .cpp's attention2_text says what the previous
// default body's sm_90a SASS showed and why each change keeps the bits): the attention's k and v
// rows loaded by rw_lds4 (volatile asm) before the scores, no branch before the rcp, the exps
// gathered by W shuffles and summed in the butterfly's tree written out. Measured as the variant
// word rows-attn2 against the previous default body (H200, experiments/25-compile/gpu_att15/call1):
// the kernel 16.91 us against 18.12, 19.26 against 20.45 per replay alone, bitwise the same; the
// previous body and the word removed since.
//
// The default text's LayerNorm statistics (issue 15, ln15; the .cpp's kPreludeLds1 comment says what
// the previous text's sm_90a SASS showed and why each change keeps the bits): the 16-lane double sums
// in 2 rounds of 3 gathered lanes (the butterfly's tree written out), 1/sigma by rsqrt.approx.ftz (its
// argument >= eps is normal), every lane storing, so the gain and bias load with the row. Measured as
// the word rows-ln2 (H200, experiments/25-compile/gpu_final15, medians of 3 alternated rounds): kernel
// 16.62 against 16.90 us, 19.14 against 19.52 per replay alone, bitwise the same; the word removed
// since. rows-qkv2 (qkv15: the qkv stages' bias before the dot, the cluster wait after the local
// stores, the sends from the last CTA down; bitwise) measured slower there (17.09) and was removed.
//
// The deferred matmuls (issue 15, fuse15; the default text's, none in the plain one): a k-sliced
// matmul stage s (S slices, not a qkv, no
// GELU, not a graph output) whose input is stage s - 1's output and whose next stage is a LayerNorm of
// its output gets no stage of its own: stage s - 1 computes its S partials (slice j's chain: the same
// FMAs in the same order as the sliced stage's lane of slice j) into a block of S M floats, and the
// LayerNorm forms its row from them while loading it (rw_layernorm_parts: the partials added in slice
// order, + bias, + residual, exactly the stage's epilogue; stored where a later stage reads it), then
// its statistics as rw_layernorm: bitwise the default's values, one stage and CTA barrier fewer.
//   proj by heads (kRowsFuseProjHeads): stage s - 1 is the attention, a warp per head, S = heads and K / S = dh (proj): the
//     warp of head h, after storing its att columns and a __syncwarp, runs slice h for the M outputs
//     (M a multiple of 32, <= 128: M / 32 chains per lane, rw_dot<dh, M / 32>).
//   fc2 by slices (kRowsFuseMlpSlices): stage s - 1 is a one-chain matmul of K <= 512 outputs (fc1; K the matmul's input
//     width), slice j's K / S columns whole warps (K / S a multiple of 32, S <= 15): those threads meet
//     at named barrier 1 + j (bar.sync 1 + j, K / S) after their stores, then compute slice j's
//     partial of the M <= K / S outputs, one per thread (fc2).
//   Where it does not line up (d_model 96: proj by 2 slices over 4 heads; d_model 32 at 4 heads: dh 8
//   against slices of 16; fc2 by 8 slices of 16) the stage is kept. Stage s - 1 reads its own pieces
//   and stage s's (prewaited together by the last warp where they are in flight; refilled together
//   after its barrier); where they do not fit the ring's slots no matmul is deferred (the text as
//   before them). The partials' block and the deferred matmul's reads live to stage s + 1 in the
//   layout (rows_layout), so the layout (not the values) differs from the plain text's.
//   Measured as the variant words rows-projh + rows-mlpk against the default without them (H200,
//   experiments/25-compile/gpu_fuse15/call1): the kernel 17.99 us against 18.16, 20.58 against 20.93
//   per replay alone, bitwise the same; the words removed since (always on where they line up).
//
// The head's waits (issue 15, head15; the default text's, not the plain one's): at the shipped (2, 16) lm_head
// reads pieces [48, 58) and the last layer's fc1 + deferred fc2 stage [40, 48), so only 48..50 are
// issued before that stage's closing barrier and 51..57 by its refill<40, 48>, one LayerNorm (ln_f)
// before the head; the default's prewait<48, 58> before ln_f's barrier holds every warp until the last
// of them lands. rows-headw drops that prewait: each thread waits (rw_piece_at) for its chain's piece
// right before the chain, and warps 0..3 (two chains: columns 0..127 in pieces 48, 49 and 512..610 in
// 56, 57, the last issued) run chain 0 before waiting for chain 1's piece. Reordering which warps run
// two chains (issue 15's option b) would change the softmax sum's order (the columns per thread), so
// it is not done; the same FMAs per chain in the same order: bitwise the plain text. Measured as the
// word rows-headw (H200, experiments/25-compile/gpu_head15/call1, medians of 3 alternated rounds): the
// kernel 16.15 us against 16.65, 18.85 against 19.26 per replay alone, the head's stage 3.51k cycles
// against 4.43k; the word removed since.
//
// Tried and removed (issue 15): rows-tc, the matmul stages as tensor-core GEMVs (H200,
// experiments/25-compile/gpu_tc15/call1): the kernel 43.51 us against 18.23, and the probes' logits
// 2.05e-5 from the CPU, over issue 15's 1e-5 (another summation order).
//
// What it does not do: the decode step (a KV cache is not row-local: refused), more than one row
// per CTA, compile or launch (cuda/runner_cuda.cpp packs the image into the arena once and
// launches B T CTAs in clusters of T).
#pragma once

#include "compile/codegen_cuda.h"
#include "compile/schedule.h"

#include <functional>
#include <string>
#include <vector>

namespace minigpt::compile {

inline constexpr int kRowsThreads = 512;       // per CTA (16 warps; the last one refills the ring)
inline constexpr int kRowsMaxCluster = 16;     // CTAs per sequence: the non-portable cluster limit
inline constexpr int kRowsSlotFloats = 64 * 68;  // a ring slot: 17 KB (64 weight rows of k = 64, padded)
inline constexpr int kRowsMaxSlots = 12;
inline constexpr int kRowsSmemBudget = 232448;  // bytes: sm_90's opt-in shared memory per block
inline constexpr int kRowsFuseProjHeads = 1;    // a deferred matmul: by heads in the attention stage
inline constexpr int kRowsFuseMlpSlices = 2;    // a deferred matmul: by slices in its producer's stage

// One stage of the row-split kernel.
struct RowsStage {
  enum class Kind : uint8_t { Pointwise, LayerNorm, Matmul, Attention, Softmax };
  Kind kind = Kind::Pointwise;
  int node = -1;           // the node whose output it writes
  std::vector<int> nodes;  // every node it computes, in graph order (the root last)
  // Matmul: y (1, M) = x (1, K) W (M, K)^T; its weight rows in pieces [first_piece, first_piece +
  // pieces) of rows_per_piece rows, ld floats apart; S k-slices per output; kv: its output is the
  // attention's qkv (q kept, k and v pushed to the later CTAs)
  int64_t K = 0, M = 0;
  int slices = 1, ld = 0, rows_per_piece = 0, first_piece = 0, pieces = 0;
  bool kv = false;
  int attention = -1;  // Attention (and a kv matmul): which attention of the forward (0..)
};

// The analysis' result: refused (why) or the stages.
struct RowsPlan {
  std::string refused;  // empty: the graph is taken
  Graph graph;          // after fuse_attention, matmul_epilogue, remove_dead (composite ops)
  int64_t B = 0, T = 0, N = 0;
  std::vector<RowsStage> stages;
  int attentions = 0;
};

// Whether every node of g (composite ops: after fuse_attention and matmul_epilogue) is row-local
// over N = B T rows or the causal prefill attention: "" if so, else the first node that is not
// and why. B and T are read off the attention (or the position embedding's period). A real pass:
// no name is looked at.
std::string row_local_refusal(const Graph& g, int64_t& B, int64_t& T);

// The analysis: the passes above, row_local_refusal, then the generator's shape limits.
RowsPlan plan_rows(const Graph& captured);

// The kernel text, its launch (grid B T, cluster T, block kRowsThreads), the weight image's
// layout (code.image) and the one-kernel schedule (kernel "cuda_rows_forward"). p must be taken.
// plain (CudaCodegenOptions::rows_plain, MINIGPT_CUDA_VARIANT=rows-plain): the text before the
// ports listed at the top (kept for A/B on the GPU: the same layout, pieces and sums).
// trace (CudaCodegenOptions::rows_trace): the stage trace's stamps, one line each after the start's
// barrier and every stage (code.trace_stages names the intervals); off: no trace text at all.
// The default text (not plain) has its attention stages as attention2_text generates them (the v
// rows loaded up front, the sum of exp and the probabilities from one gather of the exps) and defers
// every matmul that lines up (kRowsFuseProjHeads, kRowsFuseMlpSlices: the paragraph above), its
// partials computed in the previous stage and its epilogue in the LayerNorm's: bitwise the plain
// text's values.
// Its LayerNorms' statistics (not plain) are the .cpp's kLnGather's (kPreludeLds1's comment says what
// the SASS showed): the same values bitwise.
// Its head (lm_head) is not prewaited: each thread waits for its own chains' pieces ("The head's
// waits" above).
CudaCode generate_rows(const RowsPlan& p, Schedule& schedule_out, bool plain = false, bool trace = false);

// The weight image of code (code.image_floats floats, padding zero) from the graph's weights:
// weight(tensor id) gives a weight's values (row-major, its shape).
std::vector<float> pack_rows_image(const CudaCode& code, const std::function<const float*(int)>& weight);

}  // namespace minigpt::compile
