// (The forward of the shipped architecture runs split by rows where that takes the shape:
// gpt_mega_rows.h, 25.6 us at (2, 16) against this kernel's 38.7; CudaGPTOptions::mega_rows.)
// The grammar MiniGPT's whole forward (or KV-cache decode step) as ONE kernel launch: a
// "megakernel" run by one thread-block cluster of R CTAs (Hopper; R up to 16 with the
// non-portable cluster size). For the launch-bound sizes (a decode step, a forward of a few dozen
// rows) the 9 whole-layer kernels of gpt_layer.h spend most of their time in launch gaps and in
// serial L2 round trips; here each CTA's slices of the weights come into its shared memory at the
// start, as ONE bulk copy per layer (the copy engine) from an image of that shared memory built
// once per plan (gpt_mega_pack), so layer 0 starts while the later layers still arrive, and the
// activations move between CTAs through distributed shared memory, with a cluster barrier
// between stages ("| barrier" below; the forward of the shipped architecture hands each stage
// over point to point instead: every remote store an st.async completing on the receiver's
// mbarrier for the stage, the receiver waiting for its own mbarrier only, gpt_mega_parts.cuh's
// Net; gpt_mega_p2p):
//
//   start      every CTA: x = wte[ids] + wpe[pos] for all N = B*T rows (a replica per CTA);
//              decode: the earlier positions' k, v of its head, every layer, into shared memory
//   per layer  A  per (sequence b, head h) item: ln1 + the head's q, k, v + causal attention;
//                 att (b's rows, h's columns) pushed to every CTA                      | barrier
//              B  proj, CTA r's C/R columns: x += att proj^T + b, pushed to every CTA  | barrier
//                 (head_proj: A pushes each head's partial of proj instead, and every CTA adds
//                 them up locally: no barrier; point to point: each partial's 4 columns to the
//                 CTA owning them only, which adds the heads' partials in head order and pushes
//                 x to every CTA as B does; the default for those forwards)
//              C  ln2 (all rows, locally) + fc1 + GELU, r's F/R columns of h, kept locally;
//                 fc2 by k: r's h columns times fc2.weight's, a partial of every output per
//                 16-k slice, each pushed to the CTA owning the output's column         | barrier
//              D  r's C/R columns: x += (the F/16 partials in slice order) + b, pushed    | barrier
//                 (the decode step, split_k: h pushed to every CTA in C, and D computes r's
//                 columns over all of k, k in slices of 64 summed in order)
//   head       ln_f (locally) + lm_head, r's vocabulary columns -> logits; with probs: a
//              half-warp per row, each CTA's per-row (max, sum of exp), lane q pushing it to CTA
//              q | barrier, lane q reading CTA q's pair, combined by butterflies, probs written.
//
// Numerics: sums over k in float in k order (fc2: by k, sixteen k-slices of 16 added in slice
// order; the whole-layer kernels add four slices of 64; proj by heads: each head's 16 k in order,
// the heads' partials added in head order), LayerNorm statistics in double in one pass (sum and
// sum of squares; layernorm.cuh's are two-pass: double's last bits differ; 1/sigma a float
// rsqrtf), exact-erf GELU: logits within ~1e-5 of the CPU engine; the work split (R) changes who
// computes a value, never how (fc2's slices are 16 wide at every R), so logits are
// the same bitwise for every cluster size. The probs' row total is a 16-lane butterfly of the
// CTAs' terms, itself of the lanes' sums (a fixed order for each R; not bitwise across R, as
// the CTAs' column ranges change with R). The decode step (MegaDims::split_k) splits
// each sum over k across 8 or 32 lanes (partials added by a shuffle butterfly: one row has too
// few outputs to keep the CTA busy, and a 64-long chain of dependent FMAs per thread was most of
// a layer's time): within 1e-6 of the forward's row, not bitwise; without split_k
// (MINIGPT_MEGA_SPLITK=0 in cuda_gpt.cpp) a decode step is the forward's row bitwise
// (tests/cuda/model_cuda_test.cpp checks both).
//
// Limits (gpt_mega_cluster says whether a shape runs): C, F, d_head multiples of 4; R a multiple
// of H with C and F multiples of 4R; every CTA's weight slices and the activations of all N rows
// in its shared memory (the shipped model: N <= ~40 at R = 16); decode (a KV cache) at most one
// (sequence, head) item per CTA (B*H <= R). Launchers check and never synchronise.
//
// Measured (H200, `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`, the
// shipped model, per call with its launch; experiments/25-compile/REPORT.md 7k): forward graph
// (2, 16) 39.0 us (100 back to back 37.0; an empty kernel of the same cluster 3.2), decode graph
// (R = 8) 26.1 us, step() 32.8 us. Inside the forward ~70k cycles, ~15k per layer: every stage
// costs ~0.7-1k cycles of dependent latency and idle warps besides its arithmetic (ncu: warps
// waiting at the mbarriers for other CTAs and at CTA barriers for the few busy warps; not
// instruction fetch). docs/MEGAKERNEL.md has how each figure came to be (stage traces, ncu), what
// was tried and reverted, what is open, and what issue 14's 20 us would ask.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace minigpt::cuda {

constexpr int kMegaMaxLayers = 8;

struct MegaLayer {  // weights as nn.Linear (out, in)
  const float *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *proj_weight, *proj_bias;
  const float *ln2_weight, *ln2_bias, *fc1_weight, *fc1_bias, *fc2_weight, *fc2_bias;
  float* k_cache;  // (B, capacity, C) (decode), or null: a forward from position 0
  float* v_cache;
};

struct MegaDims {
  int L = 0, B = 0, T = 0, C = 0, H = 0, F = 0, V = 0;
  int P = 0;         // wpe rows (block_size)
  int capacity = 0;  // KV-cache rows per sequence (decode); a forward: T
  bool cache = false;
  // proj by heads: each attention item multiplies its head's att by its C x dh block of
  // proj.weight and pushes that partial to every CTA, which sum the H partials in head order
  // (the whole-layer kernels' order): one cluster barrier and one stage less per layer, for
  // H x N x C floats pushed by each... item. Else proj by columns (stage B above).
  bool head_proj = false;
  // Sums over k split across lanes (the decode step; cuda_gpt.cpp sets it there): each output's
  // k = 64 (or 256) terms as W = 8 (or 32) lanes' partial sums of 8 terms, added by a shuffle
  // butterfly, instead of one thread's 64-long chain of dependent FMAs. Another summation order
  // than the forward's (k in order), so a decode step is no longer its forward row bitwise
  // (within ~1e-6; tests/cuda/model_cuda_test.cpp prints and bounds it).
  bool split_k = false;
};

struct MegaParams {
  MegaDims dims;
  float eps = 1e-5f;
  const int32_t* ids = nullptr;  // (B, T): device or mapped host memory; null: `id` (B*T == 1)
  const int32_t* pos = nullptr;  // scalar, device or mapped host: rows are positions *pos + t; null: `position`
  // The decode state by value, for a launch whose arguments change per step (a graph's kernel node
  // updated by gpt_mega_set_node_params): read from the kernel's parameter space, no memory round
  // trip (from mapped host memory the position and token cost ~5k cycles, one PCIe round trip).
  int id = 0;
  int position = 0;
  const float *wte = nullptr, *wpe = nullptr;
  MegaLayer layers[kMegaMaxLayers] = {};
  const float *ln_f_weight = nullptr, *ln_f_bias = nullptr, *lm_head_weight = nullptr, *lm_head_bias = nullptr;
  float* logits = nullptr;  // (B*T, V): device or mapped host memory
  float* probs = nullptr;   // (B*T, V) or null
  // The weights above as every CTA's shared memory holds them (gpt_mega_pack), for the dims and
  // cluster size of the launch: each launch brings them in with a bulk copy per layer.
  const float* image = nullptr;
};

// Whether dims' stages hand over point to point (st.async + mbarriers, no cluster barriers): the
// forward (no cache, no split_k) of the shipped architecture (C 64, H 4, F 256).
bool gpt_mega_p2p(const MegaDims& d);
// Dynamic shared memory per CTA (bytes) for dims at cluster size R (0 if the split does not apply).
size_t gpt_mega_smem(const MegaDims& d, int R);
// The cluster size the megakernel runs dims with on the current device: `requested` (1..16) if
// it fits and can be resident, else 0; requested == 0: the largest of 16, 8, 4, 2, 1 that does.
int gpt_mega_cluster(const MegaDims& d, int requested = 0);
// Floats of the weight image for dims at cluster size R (0 if the split does not apply): R
// copies of the weight part of a CTA's shared memory, ~1.9 MB for the shipped model at R = 16.
size_t gpt_mega_image_floats(const MegaDims& d, int R);
// Enqueues the writing of p's weights (p.image unused) into `image` (gpt_mega_image_floats
// floats, 16-byte aligned) as the CTAs of a launch with p.dims and R find them: once per plan,
// before the launches that read it; the weights must not change while the image is in use.
void gpt_mega_pack(const MegaParams& p, int R, float* image, cudaStream_t stream);
// Enqueues the kernel with cluster size R (from gpt_mega_cluster), p.image packed for (p.dims,
// R). A position past capacity (or past P), or an id outside [0, V), gives NaN outputs (the host
// checks first).
void gpt_mega(const MegaParams& p, int R, cudaStream_t stream);
// Replaces the arguments of `node`, a kernel node of `exec` captured from gpt_mega(p0, R), with
// (p, R) for the following launches of exec (cudaGraphExecKernelNodeSetParams: launches already
// enqueued keep theirs). p must have p0's dims, image and cluster size: only values such as id,
// position or the output pointers may change. Checks nothing on the device; does not wait.
void gpt_mega_set_node_params(cudaGraphExec_t exec, cudaGraphNode_t node, const MegaParams& p, int R);

// ---- the device-resident decode loop: one launch generates up to n tokens ----
//
// Measured (H200, rows "kv decode, 64 tokens per launch on the device" of `minigpt bench model
// --device cuda`: one launch from a 1-token prompt to a full context, launch and wait included;
// REPORT.md 7k): greedy 18.1 us per token = 55.1k tokens/s, top-k 40 24.6 us (step() 32.8 us).
// Its history and open leads: docs/MEGAKERNEL.md.
//
// The decode step's cluster (dims of a decode step: B = T = 1, cache, split_k; the shipped
// architecture C 64, H 4, F 256) loaded ONCE, then a loop on the device: feed a token at the
// next position, choose the next token from its logits exactly as model/sampling.cpp's
// Sampler::sample does (greedy: the largest logit, the lower id on ties; else the top-k by
// (logit descending, id ascending), weights exp((l - lmax) / temperature) in double summed in
// that order, the first whose running sum exceeds u * total, u the host's pre-drawn uniform:
// drawn only where the CPU draws one), and stop as `minigpt generate`'s host loop: at n tokens
// (after feeding the n-th, as the loop does), at the eos token (not fed, not kept), or when
// the context is full. No host round trip between tokens.
constexpr int kMegaGenMaxTopK = 64;  // the device loop's largest top-k (the host loop takes the rest)
struct MegaGenerate {
  int first_id = 0;             // the token fed first, at MegaParams::position (the prompt's last)
  int n = 0;                    // the most tokens to generate
  int eos = -1;                 // the stop token (-1: none)
  float temperature = 0.0f;     // 0: greedy
  int top_k = 1;                // with temperature > 0: k in [1, kMegaGenMaxTopK], <= V
  const double* uniforms = nullptr;  // (n) device memory: the sampler's uniform draws, in order
  int32_t* tokens = nullptr;    // (n) out (device or mapped host memory): the generated ids
  // out: {count, stop (0: n tokens, 1: eos, 2: context full), status (0 ok, 1: a NaN logit,
  // 2: every logit -inf), the position after the launch (positions fed)}
  int32_t* result = nullptr;
  float* step_logits = nullptr;  // ((n + 1), V) or null: the logits of every fed token, in order
  // Diagnostics, or null: 16 long longs (device or mapped host memory): the cycles of each phase
  // of the loop summed over the launch (CTA 0; slots as gpt_mega_generate.cu's mark(k) calls), the last
  // one the number of tokens fed.
  long long* trace = nullptr;
};
// Dynamic shared memory of the loop's kernel at cluster size R (0: it does not take d).
size_t gpt_mega_generate_smem(const MegaDims& d, int R);
// Whether the loop runs d at cluster size R on the current device (shared memory, residency).
bool gpt_mega_generate_fits(const MegaDims& d, int R);
// Enqueues the loop: p as for a decode step (its weight image for (p.dims, R); p.position the
// first position, the k, v cache rows before it filled). Does not wait; the host checks the
// token ids and positions first (Error here if out of range).
void gpt_mega_generate(const MegaParams& p, const MegaGenerate& g, int R, cudaStream_t stream);

}  // namespace minigpt::cuda
