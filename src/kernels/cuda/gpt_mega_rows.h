// The grammar MiniGPT's forward as one launch split by ROWS (issue 14): a variant of the
// megakernel (gpt_mega.h) for the forward only. gpt_mega splits the WEIGHTS over one cluster
// (each CTA a slice of every layer's columns), so every GEMM ends in an all-to-all hand-over of
// all rows (~7 dependent stages per layer). Here each sequence b gets its own cluster of
// R = ceil(T / rp) CTAs (grid B x R) and CTA r owns the rows t in [r rp, r rp + rp) of its
// sequence; every stage but attention's keys and values is local to those rows:
//
//   start      one bulk copy of the small vectors (LayerNorms, biases); the first ring pieces;
//              x = wte[id] + wpe[t] for the CTA's rows
//   per layer  ln1 -> q, k, v (own rows, all heads) -> own k, v rows pushed to the LATER CTAs
//              of the cluster (causal: CTA r's rows are keys of rows >= r rp only; st.async
//              completing on the receiver's mbarrier, the one hand-over per layer) -> wait for
//              the earlier CTAs' rows -> causal attention of own rows, a warp per (row, head) ->
//              proj + residual -> ln2 -> fc1 + GELU -> fc2 + residual
//   head       ln_f -> lm_head -> softmax over the vocabulary over the CTA: all local.
//
// Every CTA needs ALL the weights (196 KB per layer, lm_head 156 KB for V 611): they stream
// through a ring of ns slots of shared memory (~190 KB) as 1-D bulk copies (cp.async.bulk,
// the copy engine) in consumption order, 17 KB pieces (q, k, v, proj, fc1 x 4: 64 weight rows
// of k = 64, rows padded to 68 floats; fc2 x 4: 16 rows of k = 256 as 4 slices of 64, each
// padded to 68; lm_head in 64-row pieces), from a global image built once per model
// (gpt_mega_rows_pack: it does not depend on B or T). A slot is refilled with the piece ns
// later as soon as its stage's CTA barrier says it has been read: weights never wait for
// activations. A stage's threads wait only for the pieces they read; a sum runs as one chain of
// 64 FMAs per thread (proj and fc2: 4 lanes per output, shuffles add their sums). The head keeps
// the logits in registers (a thread per vocabulary column, two for V > 512) and reduces the
// softmax's max and sum over the whole CTA. A cluster barrier per
// layer (arrived after attention, waited on before the next layer's k, v pushes) keeps a fast
// CTA from writing keys into a slower one's buffer before it has read the previous layer's.
//
// Numerics (the megakernel's forward, and the CPU engine's, where the summation order allows):
// every sum over k in float in k order from 0 (q, k, v, fc1, lm_head: one FMA chain per output;
// proj: each head's 16 k, the heads' sums added in head order, as gpt_mega's proj by heads;
// fc2: four slices of 64 added in slice order, as the whole-layer kernels; then + b, then + x),
// LayerNorm statistics in double in one pass with a float rsqrtf
// (gpt_mega_parts.cuh's layernorm_rows, as gpt_mega), exact-erf GELU, scores q.k (e in order)
// times 1/sqrt(dh), warp softmax, att in key order; residuals (sum + b) + x. Logits within ~1e-5
// of the CPU engine (H200: 7.15e-6 on the probes, 9.54e-6 at the bench's ids, 1.19e-5 at (3, 12):
// proj's order is not the CPU's, so tests/cuda/model_cuda_test.cpp holds random ids to 1e-4); logits and
// probs bitwise the same for every rp (a row's arithmetic does not depend on which CTA computes it).
//
// Limits (gpt_mega_rows_cluster says whether a shape runs): the forward only (no KV cache: the
// decode step and loop stay gpt_mega's), the shipped architecture (C 64, H 4, F 256),
// rp in {1, 2, 4}, R = ceil(T / rp) <= 16, lm_head's pieces (ceil(V / 64)) no more than the
// ring's slots (the shipped V 611: 10 pieces; the ring holds 9-12 by T and rp, 11 at (2, 16)),
// at least 8 slots (the last warp's prewaits reach that far ahead), T <= block size. Launchers check and never
// synchronise.
//
// Measured (H200, `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`, the
// shipped model, per graph launch with its latency; experiments/25-compile/gpu_rows14/call2):
// forward (2, 16) 25.4-25.9 us at 1 row per CTA (clusters of 16), 29.7-30.1 at 2, 39.8-40.3 at 4,
// against gpt_mega's 38.5-38.9 us in the same runs (100 back to back: 23.9-24.1 against 36.9-37.1).
// Stage trace (1 row per CTA, the last CTA, ~44.4k cycles, 22.5 us inside the kernel): start
// 1.6k; per layer ~9.3k: ln1 0.7k, q k v + push 1.15k, wait for k, v 0.6k, attention 1.5k, proj
// 1.0k, ln2 0.63k, fc1 1.9k, fc2 1.8k; head 5.1k (lm_head + softmax + stores 4.4k). Its thread 0
// waited 1.5k cycles in all for weight pieces (each stage's first piece only: a lower bound).
// More rows per CTA measured slower (2: 53k cycles, 4: 73k): the stages' chains grow with them
// (docs/MEGAKERNEL.md "rows").
// With w15 (the default then; later the A/B baseline, removed by head14b): 24.10 us, 22.33 back
// to back (the lead's gpu-check of 606c2d9, experiments/25-compile/REPORT.md 7p; the
// weight-split megakernel 39.1 in that run).
// Now (lm1, the default; experiments/25-compile/gpu_head14/call1, the same bench command,
// medians of 3 alternated rounds at (2, 16)): 21.02 us (20.83-21.12), 19.03-19.04 back to back,
// against bitw's 21.54 (21.50-21.57), 19.53-19.65 back to back, in the same run; bitwise bitw's
// logits and probs. lm1 is bitw with its head's lm_head in one chain where a warp has no second
// vocabulary column (bitw ran two in every thread) and the logits stored before the softmax.
// The lead's gpu-check of d9ccdf6 (experiments/25-compile/gpu_check_d9ccdf6, bench_model_cuda.md):
// lm1 20.64 us per call, 18.92 back to back.
// bitw (the default before, rows14e call 1): 21.57 us (21.41-21.57), 19.50-19.53 back to back,
// bitwise the logits of pwkeys (rows14d's default: 24.35 us in that run; w15 24.03 in
// gpu_rows14d/call1). Its trace (the last CTA): 35.8k cycles, 18.1-18.2 us inside the kernel
// (pwkeys 41.6k); per layer ln1 0.63k, q k v + push 0.9-1.06k, wait for k, v 0.43-0.7k,
// attention 1.5-1.68k, proj 0.455k, ln2 0.51k, fc1 1.13-1.2k, fc2 1.27k; ln_f 0.63k; lm_head +
// softmax + stores 4.6k (head14's split: the chains 3.2k, max 0.25k, sum 0.56k, probs + stores
// 0.58k); start 1.6k. Removed with pwkeys (rows14f; the same arithmetic as bitw):
// lnpart (24.67 us: the LayerNorms after proj and fc2 from per-warp partials, their partials
// cost more than they saved) and bwlp (lnpart on bitw: 22.21).
// What bounds it (rows14c, experiments/25-compile/gpu_rows14c, two H200 calls, the same bench
// command): NOT the weights' delivery. The forward is flat in B (B 1, 2, 4: 24.83, 25.09, 25.15
// us; B 8 49.9: 8 clusters of 16 are not co-resident, two waves), so no L2 limit; ringbench (a
// ring of bulk copies of the image per CTA run by one thread, no arithmetic) streams 17 KB pieces
// at ~39 bytes per cycle per SM whatever the CTAs (1-128, 13 TB/s together) or copies in flight
// (its loop's ~450 cycles a piece), 34 KB at ~75, 52-102 KB at ~95-99 (the SM's port), while the
// forward draws ~22 on average (~1 MB in ~44k cycles); copies issued at once by lanes land
// ~250-300 cycles apart (17 KB); 15 warps spinning on an mbarrier or reading shared memory
// meanwhile do not slow them. pair (half the copies) took
// the same time as w15, and multicast copies (one L2 read per cluster) 31.6 us. Stage trace
// (w15, the last CTA, 44-46k cycles, MINIGPT_MEGA_TRACE=1 whose brackets time each GEMM stage
// until its LAST piece): start 3.3k; per layer ~9.2k: ln1 0.73k, q k v + push 1.33k, wait for k,
// v 0.2k, attention 1.6k, proj 0.89k, ln2 0.64k, fc1 1.54k, fc2 1.68k; head 5.0-7.1k, of which
// 2.4-3.9k waiting for lm_head's last pieces (issued after the last fc2). With pair: 42k cycles,
// start 1.3k, head 4.6k (0.66k waits), the GEMM stages as before, each still with a ~0.43k
// bracket: the cost of thread 0's two mbarrier try_waits per stage (~0.2k each though the copy
// landed long before; the head's three: 0.66k), which every GEMM thread also pays once, on the
// stage's path (~17 per forward). The ~9 dependent stages per layer (CTA barriers, ~0.2k waits,
// 64-FMA chains, LayerNorms' ~0.65k latency on one row) bound it; next leads: the idle last warp
// waiting for the next stage's copies before the CTA barrier that precedes it (the GEMM threads
// then not waiting: rows14d's prewait, measured no gain alone, now part of bitw), fewer stages per
// layer.
#pragma once

#include "kernels/cuda/gpt_mega.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iterator>

namespace minigpt::cuda {

// Rows per CTA the row-split forward is built for.
constexpr int kMegaRowsChoices[] = {1, 2, 4};
// Variants of the 1-row-per-CTA kernel (issue 14's leads), by MINIGPT_MEGA_ROWS_VARIANT=name,
// read whenever a launch is prepared (a CudaGPT captures each shape's graph once, so a shape keeps
// the variant it was captured with). lm1 (the default: unset, empty or `lm1`): the ring's
// refills issued by the last warp, idle in the GEMM stages; the ring's mbarriers waited on by the
// last warp's lanes before the CTA barrier preceding each GEMM stage, never by the GEMM threads
// (prewait), each stage's ring slot kept without an integer division; attention's key loop fully
// unrolled, the softmax's butterflies over 16 lanes for n <= 16 and its max by one redux.sync;
// each one-row LayerNorm's gain and bias loaded with the row; the 64-k dot loops fully unrolled;
// the head's lm_head one chain per thread in the warps with no second vocabulary column, the
// logits stored before the softmax (gpt_mega_rows.cu's kVar comments). bitw: lm1 without the
// head's two changes (the default until head14b: two lm_head chains in every thread), kept as the
// A/B baseline (head14 call 1: 21.54 us against lm1's 21.02). bitw computes bitwise the
// default's logits and probs, as do the other rp (the refills by warp 0, single pieces, the plain
// key loop; the same arithmetic): model_cuda_test holds them to it (kMegaRowsVariantBitwise).
// Measured and removed (gpt_mega_rows.cu's kVar comments, docs/MEGAKERNEL.md "rows"): pair (the
// ring's copies two pieces each: w15's time, rows14c call 2), prewait alone (24.03: w15's time),
// pwsplit (q, k, v, fc1, fc2 over two lanes per output, not bitwise: 25.5, slower), pwkeys,
// lnpart and bwlp (rows14e call 1, Measured above).
// fold, foldw, foldw1 (issue 14, fold14: the LayerNorms folded into the following matmuls,
// 24.61-25.28 us against bitw's 21.41; fold1 tested, not benched; gpt_mega_rows.cu's kVar
// comments say why).
// w15 (the refills by the last warp only; the A/B baseline until head14b: 24.10 us in 606c2d9's
// gpu-check, 24.03 in rows14d call 1; its bit stays in the default).
// The head's variants (issue 14, head14 call 1, medians of 3 alternated rounds at (2, 16)): lm1s,
// lm1 + soft1 (the softmax with one CTA barrier; the probs not bitwise) 21.06 us, lm1's time;
// lmqs (the columns past 512 a quarter of k to each of 4 lanes, + soft1; not bitwise) 21.57,
// bitw's time; soft1 (bitw + soft1), lmq (lmqs without soft1) and lm1u8 (lm1 with lm_head's k
// loop unrolled by 8) tested, not benched.
// rb2, rb4 (issue 14, rb14; bitwise): lm1 with register blocking: each GEMM thread computes
// several output columns side by side (one k-order chain each), so each activation float4 it
// loads serves them all and fewer warps read the activation (shared memory delivers one 32-lane
// register per cycle, broadcasts included). q, k, v: 3 columns per thread (64 threads); lm_head:
// 5 (128 threads); fc1 and fc2: 2 per thread (rb2) or 4 (rb4). SLOWER (gpu_rb14/call1, the same
// bench command, 2 alternated rounds): rb2 21.73 / 21.86 us (19.95 back to back), rb4 23.87 /
// 23.94 (21.98), against lm1's 20.96 / 21.12; rb2's trace: fc2 1.07-1.1k cycles per layer against
// ~1.27k, fc1 unchanged, but q, k, v + push 1.08-1.22k and the wait for k, v 0.8-1.0k (bitw's
// 0.9-1.06k and 0.43-0.7k). All 7.15e-6 from the CPU on the probes.
inline constexpr const char* kMegaRowsVariants[] = {"lm1", "bitw"};
// Whether each variant computes bitwise the default's logits and probs (model_cuda_test asserts it).
inline constexpr bool kMegaRowsVariantBitwise[] = {true, true};
static_assert(std::size(kMegaRowsVariantBitwise) == std::size(kMegaRowsVariants), "a flag per variant");
// The variant MINIGPT_MEGA_ROWS_VARIANT names (kMegaRowsVariants' index; unset or empty: 0,
// lm1); an unknown name is an Error. Read at each call (tests switch it between models).
int gpt_mega_rows_variant();

// The cluster size (ceil(T / rp)) the row-split forward runs dims with rp rows per CTA on the
// current device, or 0 if it does not take the shape (see Limits) or cannot be resident.
int gpt_mega_rows_cluster(const MegaDims& d, int rp);
// Dynamic shared memory per CTA (bytes) for dims at rp rows per CTA (0: not taken).
size_t gpt_mega_rows_smem(const MegaDims& d, int rp);
// Floats of the weight image for dims' model (L, C, H, F, V; B and T do not matter), 0 if the
// architecture is not the one it takes: ~0.26 M floats (1.0 MB) for the shipped model.
size_t gpt_mega_rows_image_floats(const MegaDims& d);
// Enqueues the writing of p's weights into `image` (gpt_mega_rows_image_floats floats, 16-byte
// aligned): once per model, before the launches that read it.
void gpt_mega_rows_pack(const MegaParams& p, float* image, cudaStream_t stream);
// Enqueues the forward: p.ids (B, T) -> p.logits (and p.probs, if set), (B*T, V); p.image from
// gpt_mega_rows_pack; p.dims a forward (no cache) from position 0. Error if the shape is not
// taken at rp (gpt_mega_rows_cluster). An id outside [0, V) gives NaN rows (the host checks).
void gpt_mega_rows(const MegaParams& p, int rp, cudaStream_t stream);

}  // namespace minigpt::cuda
