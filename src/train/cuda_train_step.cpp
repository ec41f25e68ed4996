// CudaTrainStep (cuda_train_step.h): the arena layout, the step's launches in order, the graph.
// Host code over the CUDA runtime and the launchers of kernels/cuda; without CUDA in the build
// every entry point throws the "built without CUDA" Error.
#include "train/cuda_train_step.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#if MINIGPT_WITH_CUDA
#include "core/cuda_arena.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/optimizer.h"
#include "model/cuda/cuda_gpt.h"
#include "model/cuda/cuda_weights.h"
#include "model/gpt.h"  // the backward's stages (kHeadStage, kEmbeddingStage) for the stage hook

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#endif

namespace minigpt {

#if MINIGPT_WITH_CUDA

namespace {

void check(cudaError_t status, const char* what) {
  MINIGPT_CHECK(status == cudaSuccess, "CUDA training step: {} failed: {}", what,
                cudaGetErrorString(status));
}

// One block's saved activations, N = B*T rows.
struct LayerActs {
  float* ln1;        // (N, d) ln1(in): qkv's input
  float* qkv;        // (N, 3d)
  float* att;        // (N, d) heads concatenated: proj's input
  float* mid;        // (N, d) residual after the attention half
  float* ln2;        // (N, d)
  float* gelu;       // (N, 4d) GELU(fc1(ln2)): fc2's input
  float* gelu_grad;  // (N, 4d) GELU' at fc1's output (the fused Linear saves it)
  float* out;        // (N, d) residual after the block
};

// The batch as the graph's first copy takes it: one block of bytes, the same layout in pinned
// host memory and on the device.
struct BatchLayout {
  size_t ids = 0, targets = 0, scalars = 0, bytes = 0;  // byte offsets
  explicit BatchLayout(int64_t N) {
    targets = static_cast<size_t>(N) * sizeof(int32_t);
    scalars = (2 * targets + 15) / 16 * 16;
    bytes = scalars + sizeof(cuda::AdamWScalars);
  }
};

struct StepResults {  // on the device, then copied whole into pinned host memory
  cuda::GradNorm norm;
  float loss;
};

constexpr size_t kCublasWorkspace = cuda::Cublas::kWorkspaceBytes;

}  // namespace

struct CudaTrainStep::Impl {
  ModelConfig c;
  AdamWConfig adam;
  float clip;
  int64_t B, T, N;
  BatchLayout batch;
  CudaArena arena;
  cudaStream_t stream = nullptr;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  // Work off the chain of data gradients runs on side streams beside it: the backward's weight
  // gradients (dW, db), the LayerNorms' parameter gradients (their sums of the partials the
  // data kernel leaves), the loss's mean and the results' copy. Each is forked from stream
  // after its inputs are written (the side streams taken in turn). A weight gradient's launch
  // gives a Ticket (an event after it) that stream awaits just before it writes that
  // gradient's input again (backward() says which); join_all() waits for everything, at the end
  // of the backward, and at each stage's end when a stage hook is set. Every side launch has
  // its own scratch (grad_scratch, ln_partials), so side streams never share one. Same
  // kernels, same bits; only the overlap differs. MINIGPT_TRAIN_OVERLAP=0 in the environment
  // keeps everything on one stream (to measure); MINIGPT_TRAIN_SIDE_STREAMS=n (1..kMaxSide,
  // default 2) sets how many side streams.
  static constexpr int kMaxSide = 4, kTickets = 64;
  bool overlap = true;
  int n_side = 2;
  cudaStream_t side[kMaxSide] = {};
  cudaEvent_t ev_fork = nullptr, ev_join[kMaxSide] = {};
  bool side_busy[kMaxSide] = {};  // work enqueued since the last join
  int next_side = 0;
  cudaEvent_t tickets[kTickets] = {};  // recorded in turn: fewer side launches per step than these
  int next_ticket = 0;
  struct Ticket {
    cudaEvent_t done = nullptr;  // null: nothing to wait for (the launch was on stream)
  };
  std::unique_ptr<cuda::Cublas> blas;
  CudaWeights w, g, m, v;  // each one flat run of slots: flat_* below
  float *flat_p = nullptr, *flat_g = nullptr, *flat_m = nullptr, *flat_v = nullptr;
  int64_t flat = 0;
  unsigned char* dev_batch = nullptr;
  unsigned char* host_batch = nullptr;  // pinned
  StepResults* host_results = nullptr;  // pinned
  StepResults* results = nullptr;       // device: the graph copies it to host_results beside AdamW
  float* x0 = nullptr;                  // (N, d) embedding output
  std::vector<LayerActs> layers;
  float *lnf = nullptr, *logits = nullptr;  // (N, d), (N, V); logits become dlogits in place
  double* row_loss = nullptr;
  float* loss = nullptr;
  cuda::GradNorm* norm = nullptr;
  double* partials = nullptr;
  float *dresid = nullptr, *dln = nullptr, *dqkv = nullptr, *dfc = nullptr;  // backward scratch
  float* dresid_b = nullptr;  // the residual stream's gradient alternates between dresid and dresid_b
  std::vector<double*> ln_partials;       // one per LayerNorm backward of a step, in backward order
  size_t next_ln = 0;
  cuda::AdamWChunk* chunks = nullptr;
  int64_t n_chunks = 0;
  std::vector<cuda::LinearGradScratch> grad_scratch;  // one per Linear, in backward order
  size_t next_grad = 0;
  GradHook hook;
  StageHook stage_hook;
  bool hooks_on = false;  // only while the step's graph is captured (not in the eager or phase paths)
  bool copy_results = false;  // likewise: optimizer() copies the results to host_results
  StepWait wait;  // null: cudaStreamSynchronize
  cudaGraphExec_t exec = nullptr;
  size_t graph_nodes = 0;

  Impl(const ModelConfig& config, const AdamWConfig& a, float grad_clip, int64_t b, int64_t t);
  ~Impl();
  const int32_t* ids() const { return reinterpret_cast<const int32_t*>(dev_batch + batch.ids); }
  const int32_t* targets() const { return reinterpret_cast<const int32_t*>(dev_batch + batch.targets); }
  const cuda::AdamWScalars* scalars() const {
    return reinterpret_cast<const cuda::AdamWScalars*>(dev_batch + batch.scalars);
  }
  void stage(const int32_t* host_ids, const int32_t* host_targets);
  void forward_backward() {  // enqueues on stream
    forward();
    backward();
  }
  void forward();   // embedding .. cross-entropy (loss and dlogits)
  void backward();  // every gradient
  void optimizer();         // enqueues the hook, the norm and AdamW
  void stage_done(int stage) {  // the backward's groups of gradients (data parallel's buckets)
    if (!(hooks_on && stage_hook)) return;
    join_all();  // the group's side work is on stream too
    stage_hook(stage, stream);
  }
  // The next side stream, made to wait for stream's work so far (stream itself without overlap).
  cudaStream_t fork();
  // Weight gradients of y = x W^T + b from dy, on a side stream (after stream's work so far):
  // await() the ticket before x or dy is written again.
  Ticket weight_grads(const float* x, const float* dy, float* dW, float* db, int64_t in, int64_t out);
  void await(Ticket t);
  // dx = add + LN'(dy) on stream (add null: LN'(dy)); dweight, dbias on a side stream, from
  // partials of their own (nothing there to wait for but the optimizer's join).
  void layernorm_grads(const float* dy, const float* x, const float* weight, float* dx, const float* add,
                       float* dweight, float* dbias);
  void join_all();  // stream waits for every side stream's work enqueued so far
  void capture();
};

namespace {

// Activation slots (name, floats) of a (B, T) step, in allocation order; sizes the arena and
// carves it, so the two never disagree.
std::vector<std::pair<std::string, int64_t>> activation_slots(const ModelConfig& c, int64_t N) {
  const int64_t d = c.d_model, F = c.d_ff(), V = c.vocab_size;
  std::vector<std::pair<std::string, int64_t>> s = {{"x0", N * d}};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    for (const auto& [name, n] : std::vector<std::pair<const char*, int64_t>>{
             {"ln1", N * d}, {"qkv", N * 3 * d}, {"att", N * d}, {"mid", N * d}, {"ln2", N * d},
             {"gelu", N * F}, {"gelu_grad", N * F}, {"out", N * d}})
      s.emplace_back(p + name, n);
  }
  for (const auto& [name, n] : std::vector<std::pair<const char*, int64_t>>{
           {"lnf", N * d}, {"logits", N * V}, {"dresid", N * d}, {"dresid_b", N * d}, {"dln", N * d},
           {"dqkv", N * 3 * d}, {"dfc", N * F}})
    s.emplace_back(name, n);
  return s;
}

// (in, out) of every Linear in the backward's order (the head, then per block from the last:
// fc2, fc1, proj, qkv): each gets its own weight-gradient scratch (linear.h).
std::vector<std::pair<int64_t, int64_t>> backward_linears(const ModelConfig& c) {
  const int64_t d = c.d_model, F = c.d_ff(), V = c.vocab_size;
  std::vector<std::pair<int64_t, int64_t>> out = {{d, V}};
  for (int l = 0; l < c.n_layer; ++l)
    for (const auto& io : {std::pair{F, d}, {d, F}, {d, d}, {d, 3 * d}}) out.push_back(io);
  return out;
}
int64_t backward_layernorms(const ModelConfig& c) { return 2 * c.n_layer + 1; }

size_t required_bytes(const ModelConfig& c, int64_t N, size_t batch_bytes, int64_t n_chunks) {
  size_t bytes = 4 * CudaWeights::arena_bytes(c) + CudaArena::aligned(kCublasWorkspace) +
                 CudaArena::aligned(batch_bytes) +
                 CudaArena::aligned(static_cast<size_t>(N) * sizeof(double)) +
                 CudaArena::aligned(sizeof(StepResults)) +
                 CudaArena::aligned(cuda::kNormScratch * sizeof(double)) +
                 CudaArena::aligned(static_cast<size_t>(n_chunks) * sizeof(cuda::AdamWChunk)) +
                 backward_layernorms(c) *
                     CudaArena::aligned(static_cast<size_t>(cuda::layernorm_backward_scratch(N, c.d_model)) *
                                        sizeof(double));
  for (const auto& [in, out] : backward_linears(c)) {
    const cuda::LinearGradScratchSize g = cuda::linear_backward_scratch(N, in, out);
    bytes += CudaArena::aligned(static_cast<size_t>(g.partial) * sizeof(float)) +
             CudaArena::aligned(static_cast<size_t>(g.partial_db) * sizeof(double)) +
             CudaArena::aligned(static_cast<size_t>(g.counters) * sizeof(int));
  }
  for (const auto& [name, n] : activation_slots(c, N))
    bytes += CudaArena::aligned(static_cast<size_t>(n) * sizeof(float));
  return bytes;
}

// AdamW's chunks over the flat buffer: each tensor in pieces of at most kAdamWChunk floats,
// decaying or not by AdamW::decays (the padding between tensors is in no chunk).
std::vector<cuda::AdamWChunk> adamw_chunks(const ModelConfig& c,
                                           const std::vector<std::pair<std::string, int64_t>>& offsets) {
  std::vector<cuda::AdamWChunk> out;
  const auto expected = expected_parameters(c);
  for (size_t i = 0; i < expected.size(); ++i) {
    const int64_t begin = offsets[i].second, n = shape_numel(expected[i].second);
    const int decays = AdamW::decays(expected[i].second) ? 1 : 0;
    for (int64_t o = 0; o < n; o += cuda::kAdamWChunk)
      out.push_back({begin + o, begin + std::min(n, o + cuda::kAdamWChunk), decays});
  }
  return out;
}

// (name, float offset from the flat buffer's start) of every tensor of w; Error unless the
// slots are in increasing order (one flat run).
std::vector<std::pair<std::string, int64_t>> offsets_of(const CudaWeights& w, const ModelConfig& c) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, p] : w.named(c)) {
    out.emplace_back(name, p - w.wte);
    MINIGPT_CHECK(out.back().second >= 0 && (out.size() == 1 || out.back().second > out[out.size() - 2].second),
                  "CUDA training step: parameter '{}' is not laid out in order", name);
  }
  return out;
}

int64_t flat_extent(const CudaWeights& w, const ModelConfig& c) {
  return (w.lm_head_bias + c.vocab_size) - w.wte;
}

void check_batch(const ModelConfig& c, const int32_t* ids, const int32_t* targets, int64_t N, int64_t T) {
  MINIGPT_CHECK(ids != nullptr && targets != nullptr, "CUDA training step: ids or targets are null");
  for (int64_t i = 0; i < N; ++i) {
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size,
                  "token id {} at (batch {}, position {}) is outside the vocabulary [0, {})", ids[i],
                  i / T, i % T, c.vocab_size);
    MINIGPT_CHECK(targets[i] == -1 || (targets[i] >= 0 && targets[i] < c.vocab_size),
                  "target {} at (batch {}, position {}) is neither -1 (ignore) nor in [0, {})",
                  targets[i], i / T, i % T, c.vocab_size);
  }
}

size_t checked_arena_bytes(const ModelConfig& c, int64_t B, int64_t T) {
  MINIGPT_CHECK(cuda_model_available(), "cannot train on CUDA: {}", cuda_model_unavailable_reason());
  c.validate();
  MINIGPT_CHECK(B >= 1 && T >= 1 && T <= c.block_size,
                "CUDA training step: batch {} x {} tokens must have B >= 1 and 1 <= T <= block_size {}",
                B, T, c.block_size);
  int64_t chunks = 0;
  for (const auto& [name, shape] : expected_parameters(c))
    chunks += (shape_numel(shape) + cuda::kAdamWChunk - 1) / cuda::kAdamWChunk;
  return required_bytes(c, B * T, BatchLayout(B * T).bytes, chunks);
}

}  // namespace

CudaTrainStep::Impl::Impl(const ModelConfig& config, const AdamWConfig& a, float grad_clip,
                          int64_t b, int64_t t)
    : c(config), adam(a), clip(grad_clip), B(b), T(t), N(b * t), batch(b * t),
      arena(checked_arena_bytes(config, b, t)) {
  adam.validate();
  MINIGPT_CHECK(std::isfinite(clip) && clip >= 0.0f, "CUDA training step: clip must be >= 0, got {}", clip);
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&ev_start), "cudaEventCreate");
  check(cudaEventCreate(&ev_stop), "cudaEventCreate");
  if (const char* e = std::getenv("MINIGPT_TRAIN_OVERLAP")) overlap = std::strcmp(e, "0") != 0;
  if (const char* e = std::getenv("MINIGPT_TRAIN_SIDE_STREAMS")) n_side = std::clamp(std::atoi(e), 1, kMaxSide);
  check(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming), "cudaEventCreate");
  for (cudaEvent_t& e : tickets) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  for (int i = 0; i < n_side; ++i) {
    check(cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&ev_join[i], cudaEventDisableTiming), "cudaEventCreate");
  }
  // Parameters, gradients, moments: four flat runs of slots, each zeroed once (padding too).
  w = CudaWeights::allocate(c, arena);
  g = CudaWeights::allocate(c, arena, "grad.");
  m = CudaWeights::allocate(c, arena, "adamw.m.");
  v = CudaWeights::allocate(c, arena, "adamw.v.");
  flat_p = w.wte;
  flat_g = g.wte;
  flat_m = m.wte;
  flat_v = v.wte;
  flat = flat_extent(w, c);
  const auto offsets = offsets_of(w, c);
  MINIGPT_CHECK(offsets == offsets_of(g, c) && offsets == offsets_of(m, c) && offsets == offsets_of(v, c) &&
                    flat_extent(g, c) == flat,
                "CUDA training step: the gradient and moment buffers differ from the parameters' layout");
  for (float* p : {flat_p, flat_g, flat_m, flat_v})
    check(cudaMemsetAsync(p, 0, static_cast<size_t>(flat) * sizeof(float), stream), "cudaMemset");

  blas = std::make_unique<cuda::Cublas>(arena.allocate(kCublasWorkspace, "cublas workspace"), kCublasWorkspace);
  dev_batch = static_cast<unsigned char*>(arena.allocate(batch.bytes, "batch"));
  check(cudaMallocHost(reinterpret_cast<void**>(&host_batch), batch.bytes), "cudaMallocHost (batch)");
  check(cudaMallocHost(reinterpret_cast<void**>(&host_results), sizeof(StepResults)), "cudaMallocHost (results)");
  row_loss = arena.allocate_array<double>(N, "row_loss");
  results = arena.allocate_array<StepResults>(1, "step results");
  norm = &results->norm;
  loss = &results->loss;
  partials = arena.allocate_array<double>(cuda::kNormScratch, "grad_norm partials");
  check(cudaMemsetAsync(partials, 0, cuda::kNormScratch * sizeof(double), stream), "cudaMemset");
  const std::vector<cuda::AdamWChunk> host_chunks = adamw_chunks(c, offsets);
  n_chunks = static_cast<int64_t>(host_chunks.size());
  chunks = arena.allocate_array<cuda::AdamWChunk>(n_chunks, "adamw chunks");
  check(cudaMemcpyAsync(chunks, host_chunks.data(), host_chunks.size() * sizeof(cuda::AdamWChunk),
                        cudaMemcpyHostToDevice, stream),
        "copy of the AdamW chunks");

  for (const auto& [in, out] : backward_linears(c)) {
    cuda::LinearGradScratch gs;
    gs.size = cuda::linear_backward_scratch(N, in, out);
    gs.partial = arena.floats(gs.size.partial, "weight-gradient partials");
    gs.partial_db = arena.allocate_array<double>(gs.size.partial_db, "bias-gradient partials");
    gs.counters = arena.allocate_array<int>(gs.size.counters, "weight-gradient counters");
    check(cudaMemsetAsync(gs.counters, 0, static_cast<size_t>(gs.size.counters) * sizeof(int), stream), "cudaMemset");
    grad_scratch.push_back(gs);
  }
  for (int64_t i = 0; i < backward_layernorms(c); ++i)
    ln_partials.push_back(arena.allocate_array<double>(cuda::layernorm_backward_scratch(N, c.d_model),
                                                       "layernorm-gradient partials"));


  std::vector<float*> acts;
  for (const auto& [name, n] : activation_slots(c, N)) acts.push_back(arena.floats(n, name));
  size_t i = 0;
  x0 = acts[i++];
  for (int l = 0; l < c.n_layer; ++l) {
    LayerActs L;
    for (float** p : {&L.ln1, &L.qkv, &L.att, &L.mid, &L.ln2, &L.gelu, &L.gelu_grad, &L.out}) *p = acts[i++];
    layers.push_back(L);
  }
  for (float** p : {&lnf, &logits, &dresid, &dresid_b, &dln, &dqkv, &dfc}) *p = acts[i++];
  check(cudaStreamSynchronize(stream), "initialising the training arena");
}

CudaTrainStep::Impl::~Impl() {
  if (stream) cudaStreamSynchronize(stream);
  if (exec) cudaGraphExecDestroy(exec);
  blas.reset();
  if (host_batch) cudaFreeHost(host_batch);
  if (host_results) cudaFreeHost(host_results);
  if (ev_start) cudaEventDestroy(ev_start);
  if (ev_stop) cudaEventDestroy(ev_stop);
  if (ev_fork) cudaEventDestroy(ev_fork);
  for (cudaEvent_t e : tickets)
    if (e) cudaEventDestroy(e);
  for (int i = 0; i < kMaxSide; ++i) {
    if (ev_join[i]) cudaEventDestroy(ev_join[i]);
    if (side[i]) {
      cudaStreamSynchronize(side[i]);
      cudaStreamDestroy(side[i]);
    }
  }
  if (stream) cudaStreamDestroy(stream);
}

void CudaTrainStep::Impl::stage(const int32_t* host_ids, const int32_t* host_targets) {
  check_batch(c, host_ids, host_targets, N, T);
  std::memcpy(host_batch + batch.ids, host_ids, static_cast<size_t>(N) * sizeof(int32_t));
  std::memcpy(host_batch + batch.targets, host_targets, static_cast<size_t>(N) * sizeof(int32_t));
}

void CudaTrainStep::Impl::forward() {
  using namespace cuda;
  const int64_t d = c.d_model, F = c.d_ff(), V = c.vocab_size, P = c.block_size, NH = c.n_head;
  const float eps = c.layernorm_eps;
  cudaStream_t s = stream;
  // forward: x0 = wte[ids] + wpe[t]; per block the CPU's order of ops (model/gpt.cpp)
  embedding_forward(ids(), w.wte, w.wpe, x0, B, T, d, V, P, s);
  const float* in = x0;
  for (int l = 0; l < c.n_layer; ++l) {
    const CudaBlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    const LayerActs& L = layers[static_cast<size_t>(l)];
    layernorm_forward(in, bw.ln1_weight, bw.ln1_bias, L.ln1, nullptr, nullptr, N, d, eps, s);
    linear_forward(L.ln1, bw.qkv_weight, bw.qkv_bias, L.qkv, N, d, 3 * d, {}, s);
    attention_forward(L.qkv, L.att, nullptr, B, T, d, NH, s);
    linear_forward(L.att, bw.proj_weight, bw.proj_bias, L.mid, N, d, d, {.residual = in}, s);
    layernorm_forward(L.mid, bw.ln2_weight, bw.ln2_bias, L.ln2, nullptr, nullptr, N, d, eps, s);
    linear_forward(L.ln2, bw.fc1_weight, bw.fc1_bias, L.gelu, N, d, F,
                   {.gelu = true, .gelu_grad = L.gelu_grad}, s);
    linear_forward(L.gelu, bw.fc2_weight, bw.fc2_bias, L.out, N, F, d, {.residual = L.mid}, s);
    in = L.out;
  }
  layernorm_forward(in, w.ln_f_weight, w.ln_f_bias, lnf, nullptr, nullptr, N, d, eps, s);
  linear_forward(lnf, w.lm_head_weight, w.lm_head_bias, logits, N, d, V, {}, s);
  // d(loss)/d(logits) in place; the loss's mean off the backward's path
  cross_entropy_rows_grad(logits, targets(), logits, row_loss, N, V, s);
  cross_entropy_mean_loss(row_loss, targets(), loss, N, fork());
}

cudaStream_t CudaTrainStep::Impl::fork() {
  if (!overlap) return stream;
  const int i = next_side;
  next_side = (next_side + 1) % n_side;
  check(cudaEventRecord(ev_fork, stream), "cudaEventRecord (fork)");
  check(cudaStreamWaitEvent(side[i], ev_fork, 0), "cudaStreamWaitEvent (fork)");
  side_busy[i] = true;
  return side[i];
}

void CudaTrainStep::Impl::join_all() {
  for (int i = 0; i < n_side; ++i) {
    if (!side_busy[i]) continue;  // nothing captured there since the last join
    check(cudaEventRecord(ev_join[i], side[i]), "cudaEventRecord (join)");
    check(cudaStreamWaitEvent(stream, ev_join[i], 0), "cudaStreamWaitEvent (join)");
    side_busy[i] = false;
  }
}

CudaTrainStep::Impl::Ticket CudaTrainStep::Impl::weight_grads(const float* x, const float* dy, float* dW, float* db,
                                                              int64_t in, int64_t out) {
  MINIGPT_CHECK(next_grad < grad_scratch.size(), "CUDA training step: more weight gradients than scratches");
  const cuda::LinearGradScratch& scratch = grad_scratch[next_grad++];
  const cudaStream_t on = fork();
  cuda::linear_backward_weights(x, dy, dW, db, N, in, out, scratch, on);
  if (on == stream) return {};
  const cudaEvent_t done = tickets[next_ticket];
  next_ticket = (next_ticket + 1) % kTickets;
  check(cudaEventRecord(done, on), "cudaEventRecord (ticket)");
  return {done};
}

void CudaTrainStep::Impl::await(Ticket t) {
  if (t.done) check(cudaStreamWaitEvent(stream, t.done, 0), "cudaStreamWaitEvent (ticket)");
}

void CudaTrainStep::Impl::layernorm_grads(const float* dy, const float* x, const float* weight, float* dx,
                                          const float* add, float* dweight, float* dbias) {
  const int64_t d = c.d_model;
  MINIGPT_CHECK(next_ln < ln_partials.size(), "CUDA training step: more LayerNorms than partial buffers");
  double* partial = ln_partials[next_ln++];
  cuda::layernorm_backward_data(dy, x, weight, dx, add, partial, N, d, c.layernorm_eps, stream);
  cuda::layernorm_backward_params(partial, dweight, dbias, N, d, fork());
}

// GrammarMiniGPT::backward's order of the data gradients; every gradient written once. The
// weight gradients and the LayerNorms' parameter gradients go to the side streams; stream
// waits for a weight gradient's ticket just before it overwrites that launch's input. The
// residual stream's gradient alternates between two buffers (A = dresid, B = dresid_b: each
// LayerNorm backward reads one and writes the other), so a weight gradient still reading A
// holds up only the write of A after the next one. Per block (the previous block's tickets
// from the one after it in the model, run before it here):
//   fc2's dW reads A                 -> waited for before ln1's backward writes A
//   fc2's dx writes dfc              <- after the previous block's fc1 dW (reads dfc)
//   ln2's backward writes B          <- after the previous block's proj dW (reads B)
//   attention's backward writes dqkv <- after the previous block's qkv dW (reads dqkv)
// dln is read only on stream. backward() ends with join_all(): every gradient is final.
void CudaTrainStep::Impl::backward() {
  using namespace cuda;
  const int64_t d = c.d_model, F = c.d_ff(), V = c.vocab_size, P = c.block_size, NH = c.n_head;
  cudaStream_t s = stream;
  next_grad = next_ln = 0;
  float *A = dresid, *Bgrad = dresid_b;
  const float* in = layers.back().out;  // the last block's output: ln_f's input
  weight_grads(lnf, logits, g.lm_head_weight, g.lm_head_bias, d, V);  // logits are not written again
  linear_backward_data(*blas, w.lm_head_weight, logits, dln, N, d, V, s);
  layernorm_grads(dln, in, w.ln_f_weight, A, nullptr, g.ln_f_weight, g.ln_f_bias);
  stage_done(GrammarMiniGPT::kHeadStage);
  Ticket fc1_prev, proj_prev, qkv_prev;
  for (int l = c.n_layer - 1; l >= 0; --l) {
    const CudaBlockWeights& bw = w.blocks[static_cast<size_t>(l)];
    const CudaBlockWeights& bg = g.blocks[static_cast<size_t>(l)];
    const LayerActs& L = layers[static_cast<size_t>(l)];
    const float* block_in = l == 0 ? x0 : layers[static_cast<size_t>(l) - 1].out;
    // out = mid + fc2(gelu(fc1(ln2(mid)))): the gradient at out is in A
    const Ticket fc2 = weight_grads(L.gelu, A, bg.fc2_weight, bg.fc2_bias, F, d);
    await(fc1_prev);
    linear_backward_data(*blas, bw.fc2_weight, A, dfc, N, F, d, s);
    gelu_backward_saved(L.gelu_grad, dfc, dfc, N * F, s);
    fc1_prev = weight_grads(L.ln2, dfc, bg.fc1_weight, bg.fc1_bias, d, F);
    linear_backward_data(*blas, bw.fc1_weight, dfc, dln, N, d, F, s);
    await(proj_prev);
    layernorm_grads(dln, L.mid, bw.ln2_weight, Bgrad, A, bg.ln2_weight, bg.ln2_bias);
    // mid = in + proj(attention(ln1(in))): the gradient at mid is in B
    proj_prev = weight_grads(L.att, Bgrad, bg.proj_weight, bg.proj_bias, d, d);
    linear_backward_data(*blas, bw.proj_weight, Bgrad, dln, N, d, d, s);
    await(qkv_prev);
    attention_backward(dln, L.qkv, dqkv, B, T, d, NH, s);
    qkv_prev = weight_grads(L.ln1, dqkv, bg.qkv_weight, bg.qkv_bias, d, 3 * d);
    linear_backward_data(*blas, bw.qkv_weight, dqkv, dln, N, d, 3 * d, s);
    await(fc2);
    layernorm_grads(dln, block_in, bw.ln1_weight, A, Bgrad, bg.ln1_weight, bg.ln1_bias);  // the gradient at in: A
    stage_done(l);
  }
  embedding_backward(A, ids(), g.wte, g.wpe, B, T, d, V, P, s);
  join_all();  // every gradient final before the hooks and the optimizer
  stage_done(GrammarMiniGPT::kEmbeddingStage);
}

void CudaTrainStep::Impl::optimizer() {
  if (hooks_on && hook) hook(flat_g, flat, stream);
  cuda::grad_norm(flat_g, flat, partials, clip, norm, stream);
  if (copy_results)  // the loss and the norm to the host beside AdamW (which changes neither)
    check(cudaMemcpyAsync(host_results, results, sizeof(StepResults), cudaMemcpyDeviceToHost, fork()),
          "results copy");
  cuda::adamw(flat_p, flat_g, flat_m, flat_v, chunks, n_chunks, scalars(), norm, stream);
  join_all();
}

void CudaTrainStep::Impl::capture() {
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    check(cudaMemcpyAsync(dev_batch, host_batch, batch.bytes, cudaMemcpyHostToDevice, stream), "batch copy");
    hooks_on = copy_results = true;
    forward_backward();
    optimizer();
    hooks_on = copy_results = false;
  } catch (...) {
    hooks_on = copy_results = false;
    std::fill(std::begin(side_busy), std::end(side_busy), false);
    cudaStreamEndCapture(stream, &graph);  // abandon the capture, then report the first error
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphGetNodes(graph, nullptr, &graph_nodes);
  cudaGraphDestroy(graph);
  check(status, "cudaGraphInstantiate");
}

#else  // built without CUDA

struct CudaTrainStep::Impl {};

#endif

#if MINIGPT_WITH_CUDA

CudaTrainStep::CudaTrainStep(const ModelConfig& config, const AdamWConfig& adamw, float grad_clip,
                             int64_t B, int64_t T)
    : impl_(std::make_unique<Impl>(config, adamw, grad_clip, B, T)) {}
CudaTrainStep::~CudaTrainStep() = default;

int64_t CudaTrainStep::batch() const { return impl_->B; }
int64_t CudaTrainStep::seq() const { return impl_->T; }

void CudaTrainStep::upload(const ModelWeights& weights, const ModelWeights& m, const ModelWeights& v) {
  Impl& s = *impl_;
  check(cudaStreamSynchronize(s.stream), "waiting for the last step");
  upload_weights(weights, s.c, s.w);
  upload_weights(m, s.c, s.m);
  upload_weights(v, s.c, s.v);
  // upload_weights copies on the legacy default stream, which the step's non-blocking stream
  // does not wait for: finish them before anything reads the weights
  check(cudaDeviceSynchronize(), "uploading the weights");
}

void CudaTrainStep::download(ModelWeights& weights, ModelWeights& m, ModelWeights& v) const {
  Impl& s = *impl_;
  check(cudaStreamSynchronize(s.stream), "waiting for the last step");
  download_weights(s.w, s.c, weights);
  download_weights(s.m, s.c, m);
  download_weights(s.v, s.c, v);
}

void CudaTrainStep::download_grads(ModelWeights& grads) const {
  check(cudaStreamSynchronize(impl_->stream), "waiting for the last step");
  download_weights(impl_->g, impl_->c, grads);
}

float CudaTrainStep::forward_backward(const int32_t* ids, const int32_t* targets) {
  Impl& s = *impl_;
  check(cudaStreamSynchronize(s.stream), "waiting for the last step");
  s.stage(ids, targets);
  check(cudaMemcpyAsync(s.dev_batch, s.host_batch, s.batch.bytes, cudaMemcpyHostToDevice, s.stream),
        "batch copy");
  s.forward_backward();
  float loss = 0.0f;
  check(cudaMemcpyAsync(&loss, s.loss, sizeof(float), cudaMemcpyDeviceToHost, s.stream), "loss copy");
  check(cudaStreamSynchronize(s.stream), "the forward and backward");
  return loss;
}

CudaStepResult CudaTrainStep::step(const int32_t* ids, const int32_t* targets, float lr, int64_t t) {
  Impl& s = *impl_;
  MINIGPT_CHECK(std::isfinite(lr) && lr >= 0.0f, "AdamW: learning rate must be >= 0, got {}", lr);
  MINIGPT_CHECK(t >= 1, "AdamW: the step count must be >= 1, got {}", t);
  check(cudaStreamSynchronize(s.stream), "waiting for the last step");  // the pinned batch is free
  s.stage(ids, targets);
  // adamw_update's constants (train/adamw.cpp), the same roundings
  const AdamWConfig& a = s.adam;
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(t));
  const cuda::AdamWScalars sc{static_cast<float>(lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
                              1.0f - lr * a.weight_decay, a.beta1, a.beta2, 1.0f - a.beta1, 1.0f - a.beta2,
                              a.eps};
  std::memcpy(s.host_batch + s.batch.scalars, &sc, sizeof(sc));
  if (!s.exec) s.capture();
  check(cudaEventRecord(s.ev_start, s.stream), "cudaEventRecord");
  check(cudaGraphLaunch(s.exec, s.stream), "cudaGraphLaunch (training step)");
  check(cudaEventRecord(s.ev_stop, s.stream), "cudaEventRecord");
  if (s.wait)
    s.wait(s.stream);  // data parallel: bounded, since the graph's all-reduce waits on the peers
  else
    check(cudaStreamSynchronize(s.stream), "the training step");
  CudaStepResult r;
  r.loss = s.host_results->loss;
  r.grad_norm = s.host_results->norm.norm;
  check(cudaEventElapsedTime(&r.gpu_ms, s.ev_start, s.ev_stop), "cudaEventElapsedTime");
  MINIGPT_CHECK(std::isfinite(r.loss) && std::isfinite(r.grad_norm),
                "train: loss {} and gradient norm {} on the GPU: training diverged (the weights are "
                "those before this step)",
                r.loss, r.grad_norm);
  return r;
}

void CudaTrainStep::set_grad_hook(GradHook hook) {
  MINIGPT_CHECK(!impl_->exec, "CUDA training step: the gradient hook must be set before the first step");
  impl_->hook = std::move(hook);
}
void CudaTrainStep::set_stage_hook(StageHook hook) {
  MINIGPT_CHECK(!impl_->exec, "CUDA training step: the stage hook must be set before the first step");
  impl_->stage_hook = std::move(hook);
}
void CudaTrainStep::set_step_wait(StepWait wait) { impl_->wait = std::move(wait); }
int64_t CudaTrainStep::flat_floats() const { return impl_->flat; }
float* CudaTrainStep::grad_buffer() { return impl_->flat_g; }
const ModelConfig& CudaTrainStep::config() const { return impl_->c; }
std::vector<std::pair<std::string, int64_t>> CudaTrainStep::parameter_offsets() const {
  return offsets_of(impl_->w, impl_->c);
}
size_t CudaTrainStep::arena_bytes() const { return impl_->arena.capacity(); }
int CudaTrainStep::graph_nodes() const { return static_cast<int>(impl_->graph_nodes); }

std::vector<CudaTrainStep::PhaseTime> CudaTrainStep::profile_phases(int reps) {
  Impl& s = *impl_;
  MINIGPT_CHECK(s.exec && reps >= 1, "profile_phases: needs a step() first and reps >= 1");
  check(cudaStreamSynchronize(s.stream), "waiting for the last step");
  std::vector<PhaseTime> out;
  const std::pair<const char*, void (Impl::*)()> phases[] = {
      {"forward + loss", &Impl::forward}, {"backward", &Impl::backward}, {"clip + AdamW", &Impl::optimizer}};
  for (const auto& [name, run] : phases) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      (s.*run)();
      s.join_all();  // the forward's loss mean is on a side stream
    } catch (...) {
      std::fill(std::begin(s.side_busy), std::end(s.side_busy), false);
      cudaStreamEndCapture(s.stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    check(cudaStreamEndCapture(s.stream, &graph), "cudaStreamEndCapture");
    size_t nodes = 0;
    cudaGraphGetNodes(graph, nullptr, &nodes);
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "cudaGraphInstantiate");
    float ms = 0.0f;
    cudaError_t err = cudaGraphLaunch(exec, s.stream);  // warm-up
    if (err == cudaSuccess) err = cudaEventRecord(s.ev_start, s.stream);
    for (int i = 0; i < reps && err == cudaSuccess; ++i) err = cudaGraphLaunch(exec, s.stream);
    if (err == cudaSuccess) err = cudaEventRecord(s.ev_stop, s.stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s.stream);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, s.ev_start, s.ev_stop);
    cudaGraphExecDestroy(exec);
    check(err, "timing a phase");
    out.push_back({name, static_cast<int>(nodes), 1e3 * ms / reps});
  }
  return out;
}

#else  // built without CUDA: every entry point is the same clear Error

[[noreturn]] static void no_cuda() {
  MINIGPT_FAIL("cannot train on CUDA: this minigpt was built without CUDA (configure with -DMINIGPT_CUDA=ON)");
}
CudaTrainStep::CudaTrainStep(const ModelConfig&, const AdamWConfig&, float, int64_t, int64_t) { no_cuda(); }
CudaTrainStep::~CudaTrainStep() = default;
int64_t CudaTrainStep::batch() const { no_cuda(); }
int64_t CudaTrainStep::seq() const { no_cuda(); }
void CudaTrainStep::upload(const ModelWeights&, const ModelWeights&, const ModelWeights&) { no_cuda(); }
void CudaTrainStep::download(ModelWeights&, ModelWeights&, ModelWeights&) const { no_cuda(); }
void CudaTrainStep::download_grads(ModelWeights&) const { no_cuda(); }
float CudaTrainStep::forward_backward(const int32_t*, const int32_t*) { no_cuda(); }
CudaStepResult CudaTrainStep::step(const int32_t*, const int32_t*, float, int64_t) { no_cuda(); }
void CudaTrainStep::set_grad_hook(GradHook) { no_cuda(); }
void CudaTrainStep::set_stage_hook(StageHook) { no_cuda(); }
void CudaTrainStep::set_step_wait(StepWait) { no_cuda(); }
int64_t CudaTrainStep::flat_floats() const { no_cuda(); }
float* CudaTrainStep::grad_buffer() { no_cuda(); }
const ModelConfig& CudaTrainStep::config() const { no_cuda(); }
std::vector<std::pair<std::string, int64_t>> CudaTrainStep::parameter_offsets() const { no_cuda(); }
size_t CudaTrainStep::arena_bytes() const { no_cuda(); }
int CudaTrainStep::graph_nodes() const { no_cuda(); }
std::vector<CudaTrainStep::PhaseTime> CudaTrainStep::profile_phases(int) { no_cuda(); }

#endif

}  // namespace minigpt
