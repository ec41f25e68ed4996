// bench_model_cuda() (bench_model_cuda.h). GPU times are CUDA events around graph replays on the
// model's stream (median of --runs after --warmup, each waited for: launch latency included, as
// the PyTorch peer's reduce-overhead row is timed); the host-API rows are wall clock. Weights and
// activations stay in L2 between calls (2.4 MB of weights in a 60 MB L2): the launch-bound
// case the goal is about, not flushed.
#include "cli/bench_model_cuda.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#if MINIGPT_WITH_CUDA
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_pair.h"
#include "model/cuda/cuda_gpt.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#endif

namespace minigpt::cli {

#if MINIGPT_WITH_CUDA
namespace {

// Median us of `runs` calls of enqueue(stream) (each `per` graph launches), each between two
// events and waited for, after `warmup` untimed ones; per launch.
double time_events(const std::function<void()>& enqueue, cudaStream_t stream, int runs, int warmup, int per = 1) {
  for (int i = 0; i < warmup; ++i) enqueue();
  MINIGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cuda::EventPair ev;
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    enqueue();
    MINIGPT_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    MINIGPT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    MINIGPT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    us.push_back(static_cast<double>(ms) * 1e3 / per);
  }
  return median(us);
}

double forward_graph_us(const GrammarMiniGPT& model, CudaGPTOptions options, const std::vector<int32_t>& ids,
                        int64_t B, int64_t T, int runs, int warmup, double* b2b_us) {
  CudaGPT gpu(model, options);
  const CudaGPT::DeviceForward dev = gpu.prepare(B, T);
  MINIGPT_CUDA_CHECK(cudaMemcpy(dev.ids, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  const double us = time_events([&] { gpu.replay(B, T); }, gpu.stream(), runs, warmup);
  if (b2b_us) {
    constexpr int kBackToBack = 100;
    *b2b_us = time_events([&] { for (int i = 0; i < kBackToBack; ++i) gpu.replay(B, T); }, gpu.stream(),
                          std::max(5, runs / 50), 2, kBackToBack);
  }
  return us;
}

}  // namespace

CudaModelTimes bench_model_cuda(const GrammarMiniGPT& model, const std::vector<int32_t>& ids, int64_t B,
                                int64_t T, const std::vector<int32_t>& ctx, int runs, int warmup) {
  CudaModelTimes r;
  int dev = 0;
  cudaDeviceProp prop{};
  MINIGPT_CHECK(cuda_model_available(), "bench model --device cuda: {}", cuda_model_unavailable_reason());
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  MINIGPT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  r.gpu = prop.name;

  r.forward_us = forward_graph_us(model, {}, ids, B, T, runs, warmup, &r.forward_b2b_us);
  r.forward_perop_us = forward_graph_us(model, {.path = CudaGPTOptions::Path::PerOp}, ids, B, T, runs,
                                        warmup, nullptr);
  r.forward_cublas_us = forward_graph_us(model, {.path = CudaGPTOptions::Path::Cublas}, ids, B, T, runs,
                                         warmup, nullptr);

  // the host API, and its logits against the CPU engine's
  CudaGPT gpu(model);
  Tensor logits, probs, cpu_logits, cpu_probs;
  for (int i = 0; i < warmup; ++i) gpu.forward(ids.data(), B, T, logits, probs);
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    Timer timer;
    gpu.forward(ids.data(), B, T, logits, probs);
    us.push_back(timer.elapsed_us());
  }
  r.forward_host_us = median(us);
  ThreadPool pool(1);
  model.forward(ids.data(), B, T, cpu_logits, cpu_probs, pool);
  for (int64_t i = 0; i < logits.numel(); ++i)
    r.max_logit_diff = std::max(r.max_logit_diff, static_cast<double>(std::fabs(logits.data()[i] - cpu_logits.data()[i])));

  // decode: whole contexts through step() (wall clock), then the graph alone (events)
  CudaDecoder decoder(gpu);
  auto decode_all = [&] {
    decoder.reset();
    for (int32_t id : ctx) decoder.step(id);
  };
  r.decode_runs = std::max(5, runs / 10);
  for (int i = 0; i < std::max(2, warmup / 10); ++i) decode_all();
  us.clear();
  for (int i = 0; i < r.decode_runs; ++i) {
    Timer timer;
    decode_all();
    us.push_back(timer.elapsed_us() / static_cast<double>(ctx.size()));
  }
  r.decode_step_us = median(us);
  decoder.reset();
  decoder.step(ctx[0]);  // the replays below repeat position 0's step with this token
  r.decode_graph_us = time_events([&] { decoder.replay(); }, decoder.stream(), runs, warmup);
  return r;
}

#else

CudaModelTimes bench_model_cuda(const GrammarMiniGPT&, const std::vector<int32_t>&, int64_t, int64_t,
                                const std::vector<int32_t>&, int, int) {
  MINIGPT_FAIL("bench model --device cuda: this minigpt was built without CUDA (configure with -DMINIGPT_CUDA=ON)");
}

#endif

}  // namespace minigpt::cli
