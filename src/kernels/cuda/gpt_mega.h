// The grammar MiniGPT's whole forward (or KV-cache decode step) as ONE kernel launch: a
// "megakernel" run by one thread-block cluster of R CTAs (Hopper; R up to 16 with the
// non-portable cluster size). For the launch-bound sizes (a decode step, a forward of a few dozen
// rows) the 9 whole-layer kernels of gpt_layer.h spend most of their time in launch gaps and in
// serial L2 round trips; here the weights are copied once into the CTAs' shared memory at the
// start (cp.async, one group per layer, so layer 0 starts while the rest still arrive) and the
// activations move between CTAs through distributed shared memory, with a cluster barrier
// between stages:
//
//   start      every CTA: x = wte[ids] + wpe[pos] for all N = B*T rows (a replica per CTA);
//              decode: the earlier positions' k, v of its head, every layer, into shared memory
//   per layer  A  per (sequence b, head h) item: ln1 + the head's q, k, v + causal attention;
//                 att (b's rows, h's columns) pushed to every CTA                      | barrier
//              B  proj, CTA r's C/R columns: x += att proj^T + b, pushed to every CTA  | barrier
//                 (head_proj: A pushes each head's partial of proj instead, and every CTA adds
//                 them up locally: no barrier)
//              C  ln2 (all rows, locally) + fc1 + GELU, r's F/R columns, pushed          | barrier
//              D  fc2, r's C/R columns (k in slices of 64 summed in order): x += ..., pushed
//                                                                                      | barrier
//   head       ln_f (locally) + lm_head, r's vocabulary columns -> logits; with probs: each
//              CTA's per-row (max, sum of exp) pushed to every CTA | barrier, combined in rank
//              order, probs written.
//
// Numerics: sums over k in float in k order (fc2: four k-slices of 64 added in order, as the
// whole-layer kernels), LayerNorm statistics in double (layernorm.cuh), exact-erf GELU: logits
// within ~1e-5 of the CPU engine; the work split (R) changes who computes a value, never how, so
// logits are the same bitwise for every cluster size, and a decode step does a forward row's
// arithmetic (tests/cuda/model_cuda_test.cpp checks the first and prints the second).
//
// Limits (gpt_mega_cluster says whether a shape runs): C, F, d_head multiples of 4; R a multiple
// of H with C and F multiples of 4R; every CTA's weight slices and the activations of all N rows
// in its shared memory (the shipped model: N <= ~40 at R = 16); decode (a KV cache) at most one
// (sequence, head) item per CTA (B*H <= R). Launchers check and never synchronise.
//
// Measured (H200, 2026-12-01, `minigpt bench model --device cuda --runs 1000 --warmup 100`, the
// shipped model; weights L2-resident). First version (generic dims, copies out of line): the
// forward at (B=2, T=16) 120.7 us per graph replay, the decode graph 64.5 us (step() 70.5 us:
// 14.2k tokens/s), against 140 us for the whole-layer kernels and 296 us for torch.compile
// reduce-overhead in the same run. Its ncu profile: 16 CTAs x 512 threads, 128 registers, 0.18
// instructions issued per scheduler-cycle, 54% of the stall at CTA barriers (warps waiting for
// siblings), ~11.6k instructions per warp against ~1k FMAs of work. A cluster of 8 (twice the
// weight bytes per CTA) ran as fast as 16 and proj by heads (4 barriers fewer) saved only 3 us:
// the time is the stages' own dependent latency and idle warps, not barriers or weight loads.
// This version: specialised on the shipped dims (gpt_mega_kernel<Fixed<64, 4, 256>>: offsets
// and indices fold to constants; other dims run the same code generically, tested at C 32,
// H 2), weight copies inlined with compile-time column counts, layer 0's copies first, the
// attention a warp per query row (T = 16 keeps all 16 warps busy, two CTA barriers fewer per
// item), the LayerNorms a half-warp per row (the double sums over 16 lanes instead of 32). Same
// run's figures: forward 100.1 us (98.0 back to back), decode graph 50.2 us, step() 55.0 us:
// 18.2k tokens/s; logits 8.58e-6 from the CPU. ncu still shows 0.15 issued per scheduler-cycle
// and ~14 of 27 stall cycles at CTA barriers. Still far from the goals (20 us, 50k tokens/s).
// Open: register tiling of the GEMV stages, the stages with one to four busy warps (proj,
// fc2's slice sums), the specialised kernel's 248-byte register spill (128 registers at 512
// threads).
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
};

struct MegaParams {
  MegaDims dims;
  float eps = 1e-5f;
  const int32_t* ids = nullptr;  // (B, T): device or mapped host memory
  const int32_t* pos = nullptr;  // scalar, device or mapped host: rows are positions *pos + t; null: 0
  const float *wte = nullptr, *wpe = nullptr;
  MegaLayer layers[kMegaMaxLayers] = {};
  const float *ln_f_weight = nullptr, *ln_f_bias = nullptr, *lm_head_weight = nullptr, *lm_head_bias = nullptr;
  float* logits = nullptr;  // (B*T, V): device or mapped host memory
  float* probs = nullptr;   // (B*T, V) or null
  // The weights above as every CTA's shared memory holds them (gpt_mega_pack), for the dims and
  // cluster size of the launch: each launch brings them in with a bulk copy per layer.
  const float* image = nullptr;
};

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

}  // namespace minigpt::cuda
