// CudaGPT and CudaDecoder (cuda_gpt.h) over the CUDA runtime: the arenas, the enqueue order of
// the kernels and the graph capture. Compiled only in CUDA builds (cuda_gpt_stub.cpp otherwise).
#include "model/cuda/cuda_gpt.h"

#include "core/cuda_arena.h"
#include "core/cuda_memory.h"
#include "core/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/captured_launches.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/event_pair.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpt_layer.h"
#include "kernels/cuda/gpt_mega.h"
#include "kernels/cuda/gpt_mega_rows.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/softmax.h"
#include "model/cuda/cuda_weights.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <utility>

namespace minigpt {

bool cuda_model_available() { return cuda_memory::available(); }

std::string cuda_model_unavailable_reason() {
  if (cuda_memory::available()) return "";
  return "no CUDA device is visible (is there a GPU, and is CUDA_VISIBLE_DEVICES set?)";
}

namespace {

constexpr size_t kMaxShapes = 8;  // forward graphs kept (oldest dropped first)

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MINIGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { if (s) cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Host memory the GPU copies to and from inside a graph (page-locked: a captured copy needs
// it), mapped: a kernel may also read and write it directly through `device`.
struct PinnedBuffer {
  void* ptr = nullptr;
  void* device = nullptr;
  explicit PinnedBuffer(size_t bytes) {
    MINIGPT_CUDA_CHECK(cudaHostAlloc(&ptr, std::max<size_t>(bytes, 4), cudaHostAllocMapped));
    const cudaError_t status = cudaHostGetDevicePointer(&device, ptr, 0);
    if (status != cudaSuccess) {
      cudaFreeHost(ptr);
      MINIGPT_CUDA_CHECK(status);
    }
  }
  ~PinnedBuffer() { if (ptr) cudaFreeHost(ptr); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// True when environment variable `name` is set to `value` (the megakernel's switches, below).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

// MINIGPT_MEGA_PROJ=heads|columns: the megakernel's proj for an Auto plan, so that the two
// summation orders can be set against each other from any caller (the CLI, Python) without a
// rebuild (bench/forward_accuracy.py); unset: Auto.
CudaGPTOptions::MegaProj mega_proj_from_env() {
  using Proj = CudaGPTOptions::MegaProj;
  const char* v = std::getenv("MINIGPT_MEGA_PROJ");
  if (!v || !*v) return Proj::Auto;
  if (std::strcmp(v, "heads") == 0) return Proj::Heads;
  if (std::strcmp(v, "columns") == 0) return Proj::Columns;
  MINIGPT_FAIL("MINIGPT_MEGA_PROJ={}: expected heads or columns", v);
}

// MINIGPT_MEGA_ROWS=0|1|2|4: the row-split forward's rows per CTA for a CudaGPTOptions::mega_rows
// of -1 (0: off, the weight-split megakernel), so that the two can be set against each other
// from any caller without a rebuild; unset: -1 (automatic).
int mega_rows_from_env() {
  const char* v = std::getenv("MINIGPT_MEGA_ROWS");
  if (!v || !*v) return -1;
  for (int rp : {0, 1, 2, 4})
    if (std::strcmp(v, std::to_string(rp).c_str()) == 0) return rp;
  MINIGPT_FAIL("MINIGPT_MEGA_ROWS={}: expected 0, 1, 2 or 4 (rows per CTA)", v);
}

void check_config(const ModelConfig& c) {
  const int dh = c.head_dim();
  MINIGPT_CHECK(dh == 8 || dh == 16 || dh == 32 || dh == 64,
                "the CUDA model supports head dims 8, 16, 32 and 64; this model's is {} "
                "(d_model {} / n_head {})", dh, c.d_model, c.n_head);
}

// Activations of one forward or decode step, N rows. The residual stream lives in x (or, on the
// cuBLAS path, alternates between x and x2: its epilogue adds in place into the GEMM's output).
struct Scratch {
  float *x, *x2, *ln, *qkv, *att, *h, *logits;
};

Scratch carve(CudaArena& arena, int64_t N, const ModelConfig& c, bool cublas) {
  const int64_t d = c.d_model;
  Scratch s{};
  s.x = arena.floats(N * d, "x");
  s.x2 = cublas ? arena.floats(N * d, "x2") : nullptr;
  s.ln = cublas ? arena.floats(N * d, "ln") : nullptr;
  s.qkv = arena.floats(N * 3 * d, "qkv");
  s.att = arena.floats(N * d, "att");
  s.h = arena.floats(N * c.d_ff(), "h");
  s.logits = arena.floats(N * c.vocab_size, "logits");
  return s;
}

size_t scratch_bytes(int64_t N, const ModelConfig& c) {
  const int64_t d = c.d_model;
  size_t b = 0;
  for (int64_t n : {N * d, N * d, N * d, N * 3 * d, N * d, N * c.d_ff(), N * c.vocab_size})
    b += CudaArena::aligned(static_cast<size_t>(n) * sizeof(float));
  return b;
}

// y (M, N) = residual + act(ln(x) W^T + b) on either path. On the cuBLAS path ln (if any) is
// written to s.ln first; y must then not alias the residual (the caller swaps buffers).
struct Linears {
  const ModelConfig* c;
  const cuda::Cublas* blas;  // null: the fused kernels
  float* ln_scratch;

  void run(const float* x, const float* W, const float* b, float* y, int64_t M, int64_t K,
           int64_t N, const cuda::LinearFusion& f, cudaStream_t stream) const {
    if (!blas) return cuda::linear_forward(x, W, b, y, M, K, N, f, stream);
    const float* in = x;
    if (f.ln_weight) {
      cuda::layernorm_forward(x, f.ln_weight, f.ln_bias, ln_scratch, nullptr, nullptr, M, K,
                              f.ln_eps, stream);
      in = ln_scratch;
    }
    cuda::linear_gemm(*blas, in, W, y, M, K, N, stream);
    cuda::LinearFusion epi = f;
    epi.ln_weight = epi.ln_bias = nullptr;
    cuda::linear_epilogue(y, b, M, N, epi, stream);
  }
};

// The blocks and the head, from s.x (N, d) holding the embedding to s.logits (N, V).
// attention(layer, qkv, att) is the attention core: the full causal one (forward) or the
// cached one-row step (decoder).
template <class Attention>
void enqueue_blocks(const ModelConfig& c, const CudaWeights& w, const Linears& lin, Scratch& s,
                    int64_t N, const Attention& attention, cudaStream_t stream) {
  const int64_t d = c.d_model, F = c.d_ff();
  const float eps = c.layernorm_eps;
  float* x = s.x;
  float* other = s.x2;  // cuBLAS path only
  auto residual_into = [&](const float* in, const float* W, const float* b, int64_t K) {
    // x = x + (in W^T + b): fused in place, or into the other buffer on the cuBLAS path
    float* y = lin.blas ? other : x;
    lin.run(in, W, b, y, N, K, d, {.residual = x}, stream);
    if (lin.blas) std::swap(x, other);
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const CudaBlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    lin.run(x, bw.qkv_weight, bw.qkv_bias, s.qkv, N, d, 3 * d,
            {.ln_weight = bw.ln1_weight, .ln_bias = bw.ln1_bias, .ln_eps = eps}, stream);
    attention(l, s.qkv, s.att);
    residual_into(s.att, bw.proj_weight, bw.proj_bias, d);
    lin.run(x, bw.fc1_weight, bw.fc1_bias, s.h, N, d, F,
            {.ln_weight = bw.ln2_weight, .ln_bias = bw.ln2_bias, .ln_eps = eps, .gelu = true},
            stream);
    residual_into(s.h, bw.fc2_weight, bw.fc2_bias, F);
  }
  lin.run(x, w.lm_head_weight, w.lm_head_bias, s.logits, N, d, c.vocab_size,
          {.ln_weight = w.ln_f_weight, .ln_bias = w.ln_f_bias, .ln_eps = eps}, stream);
}

void check_ids(const int32_t* ids, int64_t B, int64_t T, const ModelConfig& c) {
  MINIGPT_CHECK(B >= 0, "batch size must be >= 0, got {}", B);
  MINIGPT_CHECK(T >= 1 && T <= c.block_size,
                "sequence length must be in [1, block_size = {}], got {}", c.block_size, T);
  MINIGPT_CHECK(B == 0 || ids != nullptr, "token ids are null");
  for (int64_t i = 0; i < B * T; ++i)
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size,
                  "token id {} at (batch {}, position {}) is outside the vocabulary [0, {})",
                  ids[i], i / T, i % T, c.vocab_size);
}

// The megakernel's weights laid out as each CTA's shared memory (kernels/cuda/gpt_mega.h), so a
// launch brings them in with one bulk copy per layer and CTA: written once per (dims, cluster
// size) plan, on the plan's stream, before its graph is captured; the weights never change after
// the upload (CudaGPT holds a snapshot).
struct MegaImage {
  CudaArena arena;
  float* data;
  MegaImage(const cuda::MegaParams& p, int R, cudaStream_t st)
      : arena(CudaArena::aligned(cuda::gpt_mega_image_floats(p.dims, R) * sizeof(float))),
        data(arena.floats(static_cast<int64_t>(cuda::gpt_mega_image_floats(p.dims, R)), "megakernel weight image")) {
    cuda::gpt_mega_pack(p, R, data, st);
  }
  // The row-split forward's image (gpt_mega_rows.h): one per model, every shape and rows per CTA.
  MegaImage(const cuda::MegaParams& p, cudaStream_t st)
      : arena(CudaArena::aligned(cuda::gpt_mega_rows_image_floats(p.dims) * sizeof(float))),
        data(arena.floats(static_cast<int64_t>(cuda::gpt_mega_rows_image_floats(p.dims)), "row-split weight image")) {
    cuda::gpt_mega_rows_pack(p, data, st);
  }
};

// One forward shape: its arena (inputs, activations, outputs) and its graph.
struct ForwardShape {
  int64_t B, T;
  CudaArena arena;
  int32_t* ids;
  Scratch s;
  float* probs;
  int mega = 0;  // the megakernel's cluster size; 0: the fallback path's kernels
  int rows = 0;  // with mega: the row-split forward's rows per CTA (gpt_mega_rows); 0: gpt_mega
  cuda::MegaDims mega_dims;
  std::unique_ptr<MegaImage> mega_image;  // with mega
  std::unique_ptr<cuda::CapturedLaunches> graph;

  ForwardShape(int64_t b, int64_t t, const ModelConfig& c, bool cublas)
      : B(b), T(t),
        arena(CudaArena::aligned(static_cast<size_t>(b * t) * sizeof(int32_t)) +
              scratch_bytes(b * t, c) +
              CudaArena::aligned(static_cast<size_t>(b * t * c.vocab_size) * sizeof(float))) {
    ids = arena.allocate_array<int32_t>(B * T, "ids");
    s = carve(arena, B * T, c, cublas);
    probs = arena.floats(B * T * c.vocab_size, "probs");
  }
};

// The Linear weights the whole-layer kernels read transposed, (in, out) row-major.
struct TransposedLinears {
  std::vector<float*> proj, fc1, fc2;  // per block
  float* lm_head = nullptr;
};

size_t transposed_bytes(const ModelConfig& c) {
  const int64_t d = c.d_model, F = c.d_ff();
  return static_cast<size_t>(c.n_layer) * (CudaArena::aligned(static_cast<size_t>(d * d) * 4) +
                                           2 * CudaArena::aligned(static_cast<size_t>(d * F) * 4)) +
         CudaArena::aligned(static_cast<size_t>(d * c.vocab_size) * 4);
}

// W (out, in) on the host -> W^T (in, out) in a new arena slot.
float* upload_transposed(const Tensor& W, CudaArena& arena, const std::string& name) {
  const int64_t out = W.shape()[0], in = W.shape()[1];
  std::vector<float> t(static_cast<size_t>(out * in));
  const float* w = W.data();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t[static_cast<size_t>(i * out + o)] = w[o * in + i];
  float* dev = arena.floats(out * in, name);
  cuda_memory::copy_to_device(dev, t.data(), t.size() * sizeof(float));
  return dev;
}

bool fused_fits(const ModelConfig& c) {
  return cuda::gpt_layer_fits(c.block_size, c.d_model, c.n_head, c.d_ff(), c.block_size);
}

CudaGPTOptions::Path resolve_path(CudaGPTOptions::Path p, const ModelConfig& c) {
  return p == CudaGPTOptions::Path::Fused && !fused_fits(c) ? CudaGPTOptions::Path::PerOp : p;
}

// Mega's fallback for the shapes the megakernel does not take; any other path is its own.
CudaGPTOptions::Path fallback_path(CudaGPTOptions::Path p, const ModelConfig& c) {
  if (p != CudaGPTOptions::Path::Mega) return p;
  return fused_fits(c) ? CudaGPTOptions::Path::Fused : CudaGPTOptions::Path::PerOp;
}

}  // namespace

struct CudaGPT::Impl {
  ModelConfig config;
  CudaGPTOptions options;
  CudaGPTOptions::Path path;      // options.path, or PerOp where Fused does not fit
  CudaGPTOptions::Path fallback;  // the path of the shapes Mega does not take (else = path)
  Stream stream;
  CudaArena arena;  // weights (+ the cuBLAS workspace, + the transposed Linears)
  CudaWeights weights;
  TransposedLinears wt;
  std::unique_ptr<cuda::Cublas> blas;
  cuda::FusedConfig softmax_config;
  std::list<ForwardShape> shapes;  // most recently used first
  std::unique_ptr<MegaImage> rows_image;  // the row-split forward's weights, with its first shape
  int rows = 0;  // the row-split forward's rows per CTA (options.mega_rows resolved); 0: off, -1: automatic

  Impl(const GrammarMiniGPT& model, CudaGPTOptions opts)
      : config(model.config()), options(opts), path(resolve_path(opts.path, model.config())),
        fallback(fallback_path(path, model.config())),
        arena(CudaWeights::arena_bytes(model.config()) +
              (path == CudaGPTOptions::Path::Cublas ? cuda::Cublas::kWorkspaceBytes : 0) +
              (fallback == CudaGPTOptions::Path::Fused ? transposed_bytes(model.config()) : 0)) {
    MINIGPT_CHECK(opts.mega_cluster >= 0 && opts.mega_cluster <= 16,
                  "the megakernel's cluster size must be in [1, 16] (0: automatic), got {}", opts.mega_cluster);
    MINIGPT_CHECK(opts.mega_rows == -1 || opts.mega_rows == 0 || opts.mega_rows == 1 || opts.mega_rows == 2 ||
                      opts.mega_rows == 4,
                  "the row-split megakernel's rows per CTA must be 1, 2 or 4 (0: off, -1: automatic), got {}",
                  opts.mega_rows);
    // automatic only while the weight-split plan's choices are (options and MINIGPT_MEGA_PROJ)
    const bool automatic = opts.mega_cluster == 0 && opts.mega_proj == CudaGPTOptions::MegaProj::Auto &&
                           mega_proj_from_env() == CudaGPTOptions::MegaProj::Auto;
    rows = opts.mega_rows >= 0 ? opts.mega_rows : automatic ? mega_rows_from_env() : 0;
    if (rows != 0) cuda::gpt_mega_rows_variant();  // an unknown MINIGPT_MEGA_ROWS_VARIANT fails here
    weights = CudaWeights::allocate(config, arena);
    upload_weights(model.weights(), config, weights);
    if (path == CudaGPTOptions::Path::Cublas)
      blas = std::make_unique<cuda::Cublas>(arena.allocate(cuda::Cublas::kWorkspaceBytes, "cublas workspace"));
    if (fallback == CudaGPTOptions::Path::Fused) {
      for (const BlockWeights& bw : model.weights().blocks) {
        wt.proj.push_back(upload_transposed(bw.proj_weight, arena, "proj^T"));
        wt.fc1.push_back(upload_transposed(bw.fc1_weight, arena, "fc1^T"));
        wt.fc2.push_back(upload_transposed(bw.fc2_weight, arena, "fc2^T"));
      }
      wt.lm_head = upload_transposed(model.weights().lm_head_weight, arena, "lm_head^T");
    }
    softmax_config = cuda::fused_default_config(config.vocab_size, cuda::fused_limits());
  }

  bool fused() const { return fallback == CudaGPTOptions::Path::Fused; }

  cuda::MegaDims mega_dims(int64_t B, int64_t T, bool cache) const {
    cuda::MegaDims d;
    d.L = config.n_layer;
    d.B = static_cast<int>(B);
    d.T = static_cast<int>(T);
    d.C = config.d_model;
    d.H = config.n_head;
    d.F = static_cast<int>(config.d_ff());
    d.V = config.vocab_size;
    d.P = config.block_size;
    d.capacity = cache ? config.block_size : d.T;
    d.cache = cache;
    d.split_k = cache && !env_is("MINIGPT_MEGA_SPLITK", "0");  // the decode step (gpt_mega.h); =0: k in order
    return d;
  }

  // The megakernel's plan for a forward of (B, T) (cache: the decode step): its dims, proj by
  // heads or by columns as options.mega_proj says (Auto: by heads where that fits for the
  // decode step and for the forwards whose stages hand over point to point, gpt_mega_p2p: each
  // attention item's proj partial goes to the columns' owner only; by columns otherwise), and
  // its cluster size `requested` (0: automatic). Cluster size 0: the path is not Mega or the
  // megakernel does not take the shape.
  struct MegaPlan {
    cuda::MegaDims dims;
    int cluster = 0;
  };
  MegaPlan mega_plan(int64_t B, int64_t T, bool cache, int requested) const {
    MegaPlan plan;
    if (path != CudaGPTOptions::Path::Mega || B < 1 || T < 1 || B * T > 4096) return plan;
    using Proj = CudaGPTOptions::MegaProj;
    plan.dims = mega_dims(B, T, cache);
    const Proj proj = options.mega_proj == Proj::Auto ? mega_proj_from_env() : options.mega_proj;
    if (proj == Proj::Heads || (proj == Proj::Auto && (cache || cuda::gpt_mega_p2p(plan.dims)))) {
      plan.dims.head_proj = true;
      plan.cluster = cuda::gpt_mega_cluster(plan.dims, requested);
      if (plan.cluster || proj == Proj::Heads) return plan;
    }
    plan.dims.head_proj = false;
    plan.cluster = cuda::gpt_mega_cluster(plan.dims, requested);
    return plan;
  }
  int mega_cluster(int64_t B, int64_t T, bool cache) const {
    return mega_plan(B, T, cache, options.mega_cluster).cluster;
  }

  // The row-split forward's plan for (B, T): `rows` per CTA (automatic: the fewest of 1, 2, 4
  // that take the shape: the most CTAs, measured fastest, docs/MEGAKERNEL.md "rows") and its
  // cluster size; {0, 0} where it is off or does not take the shape (mega_plan's kernel runs it).
  struct RowsPlan {
    int rows = 0, cluster = 0;
  };
  RowsPlan rows_plan(int64_t B, int64_t T) const {
    if (path != CudaGPTOptions::Path::Mega || rows == 0 || B < 1 || T < 1 || B * T > 4096) return {};
    for (int rp : cuda::kMegaRowsChoices) {
      if (rows > 0 && rp != rows) continue;
      if (const int R = cuda::gpt_mega_rows_cluster(mega_dims(B, T, false), rp)) return {rp, R};
    }
    return {};
  }

  // The megakernel's arguments: ids (B, T) at positions *pos + t (pos null: 0), k/v caches per
  // layer (empty: a forward), logits and probs (null: none), the weight image (null while
  // packing it) as in MegaParams.
  cuda::MegaParams mega_params(const cuda::MegaDims& d, const int32_t* ids, const int32_t* pos,
                               const std::vector<float*>& k_cache, const std::vector<float*>& v_cache, float* logits,
                               float* probs, const MegaImage* image) const {
    MINIGPT_CHECK(config.n_layer <= cuda::kMegaMaxLayers, "the megakernel takes at most {} layers",
                  cuda::kMegaMaxLayers);
    cuda::MegaParams p;
    p.dims = d;
    p.eps = config.layernorm_eps;
    p.ids = ids;
    p.pos = pos;
    p.wte = weights.wte;
    p.wpe = weights.wpe;
    for (int l = 0; l < config.n_layer; ++l) {
      const CudaBlockWeights& bw = weights.blocks[static_cast<size_t>(l)];
      p.layers[l] = {bw.ln1_weight, bw.ln1_bias, bw.qkv_weight, bw.qkv_bias, bw.proj_weight, bw.proj_bias,
                     bw.ln2_weight, bw.ln2_bias, bw.fc1_weight, bw.fc1_bias, bw.fc2_weight, bw.fc2_bias,
                     k_cache.empty() ? nullptr : k_cache[static_cast<size_t>(l)],
                     v_cache.empty() ? nullptr : v_cache[static_cast<size_t>(l)]};
    }
    p.ln_f_weight = weights.ln_f_weight;
    p.ln_f_bias = weights.ln_f_bias;
    p.lm_head_weight = weights.lm_head_weight;
    p.lm_head_bias = weights.lm_head_bias;
    p.logits = logits;
    p.probs = probs;
    p.image = image ? image->data : nullptr;
    return p;
  }

  // The whole-layer kernels' forward: the new rows of ids (B, T) at positions *pos + t (pos
  // null: 0), k/v into the caches (per layer, (B, capacity, d)), logits (and probs, if set).
  void enqueue_fused(const int32_t* ids, const int32_t* pos, int64_t B, int64_t T, int64_t capacity,
                     const std::vector<float*>& k_cache, const std::vector<float*>& v_cache, Scratch& s,
                     float* probs, cudaStream_t st) const {
    const ModelConfig& c = config;
    const int64_t N = B * T, d = c.d_model;
    for (int l = 0; l < c.n_layer; ++l) {
      const CudaBlockWeights& bw = weights.blocks[static_cast<size_t>(l)];
      cuda::AttentionFront a;
      a.x = s.x;
      a.ids = l == 0 ? ids : nullptr;
      a.wte = weights.wte;
      a.wpe = weights.wpe;
      a.x_out = s.x;
      a.ln_weight = bw.ln1_weight;
      a.ln_bias = bw.ln1_bias;
      a.ln_eps = c.layernorm_eps;
      a.qkv_weight = bw.qkv_weight;
      a.qkv_bias = bw.qkv_bias;
      a.k_cache = k_cache[static_cast<size_t>(l)];
      a.v_cache = v_cache[static_cast<size_t>(l)];
      a.pos = pos;
      a.att = s.att;
      cuda::attention_front(a, B, T, d, c.n_head, capacity, c.vocab_size, c.block_size, st);
      cuda::ProjMlp p;
      p.att = s.att;
      p.x = s.x;
      p.proj_wt = wt.proj[static_cast<size_t>(l)];
      p.proj_bias = bw.proj_bias;
      p.ln_weight = bw.ln2_weight;
      p.ln_bias = bw.ln2_bias;
      p.ln_eps = c.layernorm_eps;
      p.fc1_wt = wt.fc1[static_cast<size_t>(l)];
      p.fc1_bias = bw.fc1_bias;
      p.fc2_wt = wt.fc2[static_cast<size_t>(l)];
      p.fc2_bias = bw.fc2_bias;
      cuda::proj_mlp(p, N, d, c.d_ff(), st);
    }
    cuda::lm_head_softmax(s.x, weights.ln_f_weight, weights.ln_f_bias, c.layernorm_eps, wt.lm_head,
                          weights.lm_head_bias, s.logits, probs, N, d, c.vocab_size, st);
  }

  Linears linears(float* ln_scratch) const { return {&config, blas.get(), ln_scratch}; }

  ForwardShape& shape(int64_t B, int64_t T) {
    for (auto it = shapes.begin(); it != shapes.end(); ++it) {
      if (it->B == B && it->T == T) {
        shapes.splice(shapes.begin(), shapes, it);
        return shapes.front();
      }
    }
    if (shapes.size() >= kMaxShapes) {
      MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream.s));  // its graph may still be running
      shapes.pop_back();
    }
    shapes.emplace_front(B, T, config, blas != nullptr);
    ForwardShape& f = shapes.front();
    try {
      const RowsPlan by_rows = rows_plan(B, T);
      if (by_rows.rows) {  // by rows: one image for every shape, packed with the first
        f.mega = by_rows.cluster;
        f.rows = by_rows.rows;
        f.mega_dims = mega_dims(B, T, false);
        if (!rows_image)
          rows_image = std::make_unique<MegaImage>(
              mega_params(f.mega_dims, f.ids, nullptr, {}, {}, f.s.logits, f.probs, nullptr), stream.s);
      } else {
        const MegaPlan plan = mega_plan(B, T, false, options.mega_cluster);
        f.mega = plan.cluster;
        f.mega_dims = plan.dims;
        if (f.mega)
          f.mega_image = std::make_unique<MegaImage>(
              mega_params(f.mega_dims, f.ids, nullptr, {}, {}, f.s.logits, f.probs, nullptr), f.mega, stream.s);
      }
      f.graph = std::make_unique<cuda::CapturedLaunches>(
          [&](cudaStream_t st) { enqueue_forward(f, st); }, 1, stream.s);
    } catch (...) {
      shapes.pop_front();
      throw;
    }
    return f;
  }

  void enqueue_forward(ForwardShape& f, cudaStream_t st) {
    const int64_t N = f.B * f.T, V = config.vocab_size;
    if (f.rows)
      return cuda::gpt_mega_rows(
          mega_params(f.mega_dims, f.ids, nullptr, {}, {}, f.s.logits, f.probs, rows_image.get()), f.rows, st);
    if (f.mega)
      return cuda::gpt_mega(
          mega_params(f.mega_dims, f.ids, nullptr, {}, {}, f.s.logits, f.probs, f.mega_image.get()), f.mega, st);
    if (fused()) {  // k and v of every position into qkv's (N, 3d) slot, used as two (B, T, d) caches
      const std::vector<float*> k = {static_cast<size_t>(config.n_layer), f.s.qkv};
      const std::vector<float*> v = {static_cast<size_t>(config.n_layer), f.s.qkv + N * config.d_model};
      return enqueue_fused(f.ids, nullptr, f.B, f.T, f.T, k, v, f.s, f.probs, st);
    }
    cuda::embedding_forward(f.ids, weights.wte, weights.wpe, f.s.x, f.B, f.T, config.d_model, V,
                            config.block_size, st);
    const Linears lin = linears(f.s.ln);
    enqueue_blocks(config, weights, lin, f.s, N,
                   [&](int, const float* qkv, float* att) {
                     cuda::attention_forward(qkv, att, nullptr, f.B, f.T, config.d_model,
                                             config.n_head, st);
                   },
                   st);
    cuda::softmax_fused(f.s.logits, f.probs, N, V, softmax_config, st);
  }
};

CudaGPT::CudaGPT(const GrammarMiniGPT& model, CudaGPTOptions options) {
  MINIGPT_CHECK(cuda_model_available(), "cannot run the model on CUDA: {}",
                cuda_model_unavailable_reason());
  check_config(model.config());
  impl_ = std::make_unique<Impl>(model, options);
}

CudaGPT::~CudaGPT() {
  if (impl_) cudaStreamSynchronize(impl_->stream.s);  // graphs may still read the arenas
}

const ModelConfig& CudaGPT::config() const { return impl_->config; }
const CudaGPTOptions& CudaGPT::options() const { return impl_->options; }
CudaGPTOptions::Path CudaGPT::path() const { return impl_->path; }
CudaGPTOptions::Path CudaGPT::path_for(int64_t B, int64_t T) const {
  return mega_cluster_for(B, T) ? CudaGPTOptions::Path::Mega : impl_->fallback;
}
int CudaGPT::mega_cluster_for(int64_t B, int64_t T) const {
  if (const Impl::RowsPlan rows = impl_->rows_plan(B, T); rows.rows) return rows.cluster;
  return impl_->mega_cluster(B, T, false);
}
int CudaGPT::mega_rows_for(int64_t B, int64_t T) const { return impl_->rows_plan(B, T).rows; }
bool CudaGPT::mega_head_proj_for(int64_t B, int64_t T) const {
  if (impl_->rows_plan(B, T).rows) return false;
  const Impl::MegaPlan plan = impl_->mega_plan(B, T, false, impl_->options.mega_cluster);
  return plan.cluster && plan.dims.head_proj;
}
cudaStream_t CudaGPT::stream() const { return impl_->stream.s; }

CudaGPT::DeviceForward CudaGPT::prepare(int64_t B, int64_t T) {
  MINIGPT_CHECK(B >= 1 && T >= 1 && T <= impl_->config.block_size,
                "CUDA forward: bad shape B={} T={} (block_size {})", B, T, impl_->config.block_size);
  ForwardShape& f = impl_->shape(B, T);
  return {f.ids, f.s.logits, f.probs};
}

void CudaGPT::replay(int64_t B, int64_t T) { impl_->shape(B, T).graph->replay(impl_->stream.s); }

void CudaGPT::forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs) {
  const ModelConfig& c = impl_->config;
  check_ids(ids, B, T, c);
  const Shape shape = {B, T, static_cast<int64_t>(c.vocab_size)};
  for (Tensor* t : {&logits, &probs})
    if (!t->defined() || t->shape() != shape || !t->is_contiguous() || t->device() != Device::CPU)
      *t = Tensor::empty(shape);
  if (B == 0) return;
  ForwardShape& f = impl_->shape(B, T);
  cudaStream_t st = impl_->stream.s;
  const size_t out_bytes = static_cast<size_t>(B * T * c.vocab_size) * sizeof(float);
  MINIGPT_CUDA_CHECK(cudaMemcpyAsync(f.ids, ids, static_cast<size_t>(B * T) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, st));
  f.graph->replay(st);
  MINIGPT_CUDA_CHECK(cudaMemcpyAsync(logits.data(), f.s.logits, out_bytes, cudaMemcpyDeviceToHost, st));
  MINIGPT_CUDA_CHECK(cudaMemcpyAsync(probs.data(), f.probs, out_bytes, cudaMemcpyDeviceToHost, st));
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(st));
}

// ---- decoder ----

// How the megakernel's decode step gets its state, selectable (environment, read per decoder)
// so that the variant can be measured against the other (and MINIGPT_MEGA_SPLITK=0: the decode step's sums in k order, as the forward; see mega_dims):
//   MINIGPT_MEGA_STATE=params (default): token and position as the kernel's arguments, written
//     into the graph's kernel node per step (gpt_mega_set_node_params); =mapped: read by the
//     kernel from mapped host memory (one PCIe round trip at the kernel's start). Measured (H200,
//     same run): graph alone 30.0 us against 32.0 mapped; step() 33.7 / 35.0 against 34.8 (the
//     node update's host cost takes back most of the gain).
//   step() waits with cudaStreamSynchronize. (Per-CTA done flags in mapped host memory that
//     step() spun on measured no faster: the kernel's system-scope fence before the flag cost
//     about what the wait saved; docs/MEGAKERNEL.md "now" has the figures.)

struct CudaDecoder::Impl {
  const CudaGPT::Impl* model;
  int64_t capacity;
  int64_t pos = 0;
  Stream stream;
  CudaArena arena;
  int32_t* state;  // device: {id, position}
  Scratch s;
  std::vector<float*> k_cache, v_cache;  // per layer (capacity, d)
  PinnedBuffer host_state, host_logits;
  PinnedBuffer host_uniforms, gen_out;  // generate(): the sampler's uniforms; the loop's outputs (below)
  int mega;              // the megakernel's cluster size; 0: the fallback path's kernels
  bool state_in_params;  // MINIGPT_MEGA_STATE (above): the token and position as kernel arguments
  int32_t id = 0;        // the step's token and position, as the graph's kernel node has them
  int32_t node_pos = 0;
  cuda::MegaDims dims;   // the megakernel's (with mega)
  std::map<int, std::unique_ptr<MegaImage>> images;  // the megakernel's weight image per cluster size
  bool pending = false;  // a replay() may still be running (and reading host_state)
  std::unique_ptr<cuda::CapturedLaunches> graph;
  // the device decode loop (generate()): whether it takes the step's plan; the sampler's
  // uniforms (capacity doubles: host_uniforms, copied here), its outputs in gen_out (4 results,
  // then capacity tokens; mapped)
  bool gen_fits = false;
  double* gen_uniforms;
  // MINIGPT_MEGA_TRACE=1: the loop's phase cycles (MegaGenerate::trace), printed every 100th call
  PinnedBuffer gen_trace{16 * sizeof(long long)};
  bool gen_tracing = std::getenv("MINIGPT_MEGA_TRACE") != nullptr;
  unsigned gen_calls = 0;

  explicit Impl(const CudaGPT::Impl& m)
      : model(&m), capacity(m.config.block_size),
        arena(CudaArena::aligned(2 * sizeof(int32_t)) + scratch_bytes(1, m.config) +
              2 * static_cast<size_t>(m.config.n_layer) *
                  CudaArena::aligned(static_cast<size_t>(capacity * m.config.d_model) * sizeof(float)) +
              CudaArena::aligned(static_cast<size_t>(capacity) * sizeof(double))),
        host_state(2 * sizeof(int32_t)),
        host_logits(static_cast<size_t>(m.config.vocab_size) * sizeof(float)),
        host_uniforms(static_cast<size_t>(capacity) * sizeof(double)),
        gen_out(static_cast<size_t>(capacity + 4) * sizeof(int32_t)),
        mega(0),
        state_in_params(!env_is("MINIGPT_MEGA_STATE", "mapped")) {
    const CudaGPT::Impl::MegaPlan plan = m.mega_plan(1, 1, true, m.options.mega_cluster);
    mega = plan.cluster;
    dims = plan.dims;
    const ModelConfig& c = m.config;
    state = arena.allocate_array<int32_t>(2, "decode state");
    s = carve(arena, 1, c, m.blas != nullptr);
    for (int l = 0; l < c.n_layer; ++l) {
      k_cache.push_back(arena.floats(capacity * c.d_model, "k cache"));
      v_cache.push_back(arena.floats(capacity * c.d_model, "v cache"));
    }
    gen_uniforms = arena.allocate_array<double>(capacity, "sampler uniforms");
    std::memset(host_state.ptr, 0, 2 * sizeof(int32_t));
    graph = capture_step();
    if (mega && m.options.mega_cluster == 0) pick_fastest_cluster();
    gen_fits = mega && cuda::gpt_mega_generate_fits(dims, mega);
  }

  std::unique_ptr<cuda::CapturedLaunches> capture_step() {
    if (mega && !images.count(mega))  // packed before the capture, on this stream
      images[mega] = std::make_unique<MegaImage>(step_params(nullptr), mega, stream.s);
    return std::make_unique<cuda::CapturedLaunches>([&](cudaStream_t st) { enqueue_step(st); }, 1, stream.s);
  }

  // Automatic cluster size: the step at every size the megakernel fits, each timed over 20
  // replays (CUDA events, at position 0 with token 0: the cache row they write is rewritten by
  // the first real step); the fastest is kept. Every size gives bitwise the same logits; which
  // is fastest depends on the device (a barrier's latency against the weights each CTA loads).
  void pick_fastest_cluster() {
    std::vector<int> sizes;
    for (int R : {16, 8, 4, 2, 1})
      if (cuda::gpt_mega_cluster(dims, R) == R) sizes.push_back(R);
    if (sizes.size() < 2) return;
    cuda::EventPair ev;
    float best_ms = 0.0f;
    int best = 0;
    for (int R : sizes) {
      mega = R;
      std::unique_ptr<cuda::CapturedLaunches> g = R == sizes.front() && graph ? std::move(graph) : capture_step();
      for (int i = 0; i < 3; ++i) g->replay(stream.s);
      MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start, stream.s));
      for (int i = 0; i < 20; ++i) g->replay(stream.s);
      MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop, stream.s));
      MINIGPT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0.0f;
      MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      if (best == 0 || ms < best_ms) {
        best_ms = ms;
        best = R;
        graph = std::move(g);
      }
    }
    mega = best;
    std::erase_if(images, [&](const auto& kv) { return kv.first != best; });  // their graphs are gone
  }

  // The megakernel's arguments for the step: the logits to mapped host memory, the state by value
  // (state_in_params) or from mapped host memory.
  cuda::MegaParams step_params(const MegaImage* image) const {
    const auto* hs = static_cast<const int32_t*>(host_state.device);
    cuda::MegaParams p = model->mega_params(dims, state_in_params ? nullptr : hs, state_in_params ? nullptr : hs + 1,
                                            k_cache, v_cache, static_cast<float*>(host_logits.device), nullptr, image);
    p.id = id;
    p.position = node_pos;
    return p;
  }

  // Runs one step of token new_id at position `at` and waits for its logits in host_logits.
  void run_step(int32_t new_id, int32_t at) {
    if (mega && state_in_params) {
      id = new_id;
      node_pos = at;
      cuda::gpt_mega_set_node_params(graph->exec(), graph->kernel_node(), step_params(images.at(mega).get()), mega);
    } else {
      int32_t* hs = static_cast<int32_t*>(host_state.ptr);
      hs[0] = new_id;
      hs[1] = at;
    }
    graph->replay(stream.s);
    MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  }

  // host state -> device, one step, device logits -> host: all inside the graph. The megakernel
  // reads the state from and writes the logits to the mapped host buffers itself: one kernel
  // node, no copy nodes (each costs a copy-engine round trip).
  void enqueue_step(cudaStream_t st) {
    const ModelConfig& c = model->config;
    if (mega) return cuda::gpt_mega(step_params(images.at(mega).get()), mega, st);
    MINIGPT_CUDA_CHECK(cudaMemcpyAsync(state, host_state.ptr, 2 * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, st));
    if (model->fused()) {
      model->enqueue_fused(state, state + 1, 1, 1, capacity, k_cache, v_cache, s, nullptr, st);
      MINIGPT_CUDA_CHECK(cudaMemcpyAsync(host_logits.ptr, s.logits,
                                         static_cast<size_t>(c.vocab_size) * sizeof(float),
                                         cudaMemcpyDeviceToHost, st));
      return;
    }
    cuda::embedding_decode(state, state + 1, model->weights.wte, model->weights.wpe, s.x,
                           c.d_model, c.vocab_size, c.block_size, st);
    const Linears lin = model->linears(s.ln);
    enqueue_blocks(c, model->weights, lin, s, 1,
                   [&](int l, const float* qkv, float* att) {
                     cuda::attention_decode(qkv, k_cache[static_cast<size_t>(l)],
                                            v_cache[static_cast<size_t>(l)], state + 1, att,
                                            c.d_model, c.n_head, capacity, st);
                   },
                   st);
    MINIGPT_CUDA_CHECK(cudaMemcpyAsync(host_logits.ptr, s.logits,
                                       static_cast<size_t>(c.vocab_size) * sizeof(float),
                                       cudaMemcpyDeviceToHost, st));
  }
};

CudaDecoder::CudaDecoder(const CudaGPT& model) : impl_(std::make_unique<Impl>(*model.impl_)) {}
CudaDecoder::~CudaDecoder() {
  if (impl_) cudaStreamSynchronize(impl_->stream.s);
}

void CudaDecoder::reset() { impl_->pos = 0; }
int64_t CudaDecoder::position() const { return impl_->pos; }
int64_t CudaDecoder::capacity() const { return impl_->capacity; }
cudaStream_t CudaDecoder::stream() const { return impl_->stream.s; }
void CudaDecoder::replay() {
  impl_->graph->replay(impl_->stream.s);
  impl_->pending = true;
}
CudaGPTOptions::Path CudaDecoder::path() const {
  return impl_->mega ? CudaGPTOptions::Path::Mega : impl_->model->fallback;
}
int CudaDecoder::mega_cluster() const { return impl_->mega; }
bool CudaDecoder::mega_head_proj() const { return impl_->mega && impl_->dims.head_proj; }

std::span<const float> CudaDecoder::step(int32_t id) {
  Impl& d = *impl_;
  const int64_t V = d.model->config.vocab_size;
  MINIGPT_CHECK(id >= 0 && id < V, "token id {} is outside the vocabulary [0, {})", id, V);
  MINIGPT_CHECK(d.pos < d.capacity,
                "the context is full: the model's block_size is {} tokens and {} were fed",
                d.capacity, d.pos);
  // a replay() may still read host_state
  if (d.pending) MINIGPT_CUDA_CHECK(cudaStreamSynchronize(d.stream.s));
  d.pending = false;
  d.run_step(id, static_cast<int32_t>(d.pos));
  ++d.pos;
  return {static_cast<const float*>(d.host_logits.ptr), static_cast<size_t>(V)};
}

namespace {
// Error unless ids fit the context after position pos and every id is in the vocabulary:
// checked before anything is fed (prefill, and generate's device loop).
void check_prompt(std::span<const int32_t> ids, int64_t pos, int64_t capacity, int64_t V) {
  MINIGPT_CHECK(pos + static_cast<int64_t>(ids.size()) <= capacity,
                "the prompt of {} tokens does not fit: {} of the model's {} context positions are left", ids.size(),
                capacity - pos, capacity);
  for (size_t i = 0; i < ids.size(); ++i)
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < V, "token id {} at prompt position {} is outside the vocabulary [0, {})",
                  ids[i], i, V);
}
}  // namespace

std::span<const float> CudaDecoder::prefill(std::span<const int32_t> ids) {
  Impl& d = *impl_;
  const int64_t V = d.model->config.vocab_size;
  MINIGPT_CHECK(!ids.empty(), "prefill needs at least one token");
  check_prompt(ids, d.pos, d.capacity, V);
  std::span<const float> logits;
  for (int32_t id : ids) logits = step(id);
  return logits;
}

bool CudaDecoder::device_loop(const SamplingParams& params) const {
  const int64_t V = impl_->model->config.vocab_size;
  return impl_->gen_fits && !env_is("MINIGPT_MEGA_GENERATE", "0") &&
         (params.temperature == 0.0f || params.candidates(V) <= cuda::kMegaGenMaxTopK);
}

CudaDecoder::Generated CudaDecoder::generate(std::span<const int32_t> prompt, int n, const SamplingParams& params,
                                             uint64_t seed, int32_t eos, std::vector<float>* step_logits) {
  Impl& d = *impl_;
  const int64_t V = d.model->config.vocab_size;
  params.validate();
  MINIGPT_CHECK(n >= 0, "the number of tokens to generate must be >= 0, got {}", n);
  MINIGPT_CHECK(!prompt.empty(), "generate needs at least one prompt token");
  Generated out;
  if (!device_loop(params)) {  // the host loop (cmd_generate.cpp's), over step()
    const auto record = [&](std::span<const float> logits) {
      if (step_logits) step_logits->insert(step_logits->end(), logits.begin(), logits.end());
      return logits;
    };
    const auto full = [&] { return d.pos == d.capacity; };
    static_cast<Generation&>(out) =
        sample_loop(record(prefill(prompt)), [&](int32_t id) { return record(step(id)); }, full, params, seed, n, eos);
    return out;
  }
  // the device loop: the prompt but its last token through step() (prefill's checks first),
  // then one launch
  check_prompt(prompt, d.pos, d.capacity, V);
  if (prompt.size() > 1) prefill(prompt.first(prompt.size() - 1));
  if (d.pending) MINIGPT_CUDA_CHECK(cudaStreamSynchronize(d.stream.s));
  d.pending = false;
  // at most the positions left after the prompt's last: more would stop at a full context anyway
  const int left = static_cast<int>(d.capacity - d.pos);
  const int n_dev = std::min(n, left);
  cuda::MegaGenerate g;
  g.first_id = prompt.back();
  g.n = n_dev;
  g.eos = eos;
  g.temperature = params.temperature;
  g.top_k = static_cast<int>(std::min<int64_t>(params.candidates(V), cuda::kMegaGenMaxTopK));
  if (params.temperature != 0.0f && n_dev > 0) {
    // the draws Sampler(seed) would make (Sampler::uniform); the device uses them in order, one
    // per token where the CPU draws one
    Sampler sampler(seed);
    double* u = static_cast<double*>(d.host_uniforms.ptr);
    for (int i = 0; i < n_dev; ++i) u[i] = sampler.uniform();
    MINIGPT_CUDA_CHECK(cudaMemcpyAsync(d.gen_uniforms, u, static_cast<size_t>(n_dev) * sizeof(double),
                                       cudaMemcpyHostToDevice, d.stream.s));
  }
  g.uniforms = d.gen_uniforms;
  auto* host_out = static_cast<int32_t*>(d.gen_out.ptr);
  auto* dev_out = static_cast<int32_t*>(d.gen_out.device);
  g.tokens = dev_out + 4;
  g.result = dev_out;
  std::unique_ptr<CudaArena> logits_arena;
  if (step_logits) {
    logits_arena = std::make_unique<CudaArena>(CudaArena::aligned(static_cast<size_t>((n_dev + 1) * V) * sizeof(float)));
    g.step_logits = logits_arena->floats((n_dev + 1) * V, "generate step logits");
  }
  std::memset(host_out, 0, 4 * sizeof(int32_t));
  cuda::MegaParams p = d.step_params(d.images.at(d.mega).get());
  p.position = static_cast<int>(d.pos);
  p.id = g.first_id;
  if (d.gen_tracing) g.trace = static_cast<long long*>(d.gen_trace.device);
  cuda::gpt_mega_generate(p, g, d.mega, d.stream.s);
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(d.stream.s));
  if (d.gen_tracing && d.gen_calls++ % 100 == 50) {
    const auto* t = static_cast<const long long*>(d.gen_trace.ptr);
    const double fed = static_cast<double>(std::max(1LL, t[15]));
    std::fprintf(stderr,
                 "TRACE generate: %lld tokens fed; start %lld cycles; per token: embedding %.0f | layers: ln1 %.0f, "
                 "qkv %.0f, scores + softmax %.0f, att + proj + push %.0f, barrier %.0f, proj sum + ln2 %.0f, fc1 + "
                 "push %.0f, barrier %.0f, fc2 + barrier %.0f | head %.0f, top-k + barrier %.0f, choice %.0f, tail "
                 "%.0f\n",
                 t[15], t[0], t[1] / fed, t[12] / fed, t[13] / fed, t[14] / fed, t[2] / fed, t[3] / fed, t[4] / fed,
                 t[5] / fed, t[6] / fed, t[7] / fed, t[8] / fed, t[9] / fed, t[10] / fed, t[11] / fed);
  }
  const int count = host_out[0], stop = host_out[1], status = host_out[2], fed_to = host_out[3];
  if (step_logits) {
    const size_t fed = static_cast<size_t>(fed_to - d.pos);
    const size_t at = step_logits->size();
    step_logits->resize(at + fed * static_cast<size_t>(V));
    MINIGPT_CUDA_CHECK(cudaMemcpy(step_logits->data() + at, g.step_logits, fed * static_cast<size_t>(V) * sizeof(float),
                                  cudaMemcpyDeviceToHost));
  }
  d.pos = fed_to;  // the cache holds every fed row
  MINIGPT_CHECK(status != 1, "a logit is NaN at generated token {}", count);
  MINIGPT_CHECK(status != 2, "cannot sample: every logit is -inf");
  out.tokens.assign(host_out + 4, host_out + 4 + count);
  out.stop = stop == 1 ? Generated::Stop::Eos : stop == 2 ? Generated::Stop::ContextFull : Generated::Stop::Count;
  out.on_device = true;
  return out;
}

}  // namespace minigpt
