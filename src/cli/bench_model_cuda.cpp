// bench_model_cuda() (bench_model_cuda.h). GPU times are CUDA events around graph replays on the
// model's stream (median of --runs after --warmup, each waited for: launch latency included, as
// the PyTorch peer's reduce-overhead row is timed); the host-API rows are wall clock. Weights and
// activations stay in L2 between calls (2.4 MB of weights in a 60 MB L2): the launch-bound
// case the goal is about, not flushed. Rows: the default path (the megakernel where it takes the
// shape), the megakernel at smaller clusters where they fit, the forward split by rows at 1, 2
// and 4 rows per CTA, and every other path.
#include "cli/bench_model_cuda.h"

#include "core/error.h"
#include "minigpt/build_info.h"

#if MINIGPT_WITH_CUDA
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_pair.h"
#include "model/cuda/cuda_gpt.h"
#include "model/sampling.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

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

// "megakernel, cluster 16" / "fused" ...: what a forward of (B, T) runs on gpu (short: the
// gpu-check summary shows 55 characters of a row's name)
std::string forward_label(const CudaGPT& gpu, int64_t B, int64_t T) {
  const int R = gpu.mega_cluster_for(B, T);
  if (const int rp = gpu.mega_rows_for(B, T)) return fmt::format("megakernel by rows, cluster {} ({} per CTA)", R, rp);
  if (R) return fmt::format("megakernel, cluster {}{}", R, gpu.mega_head_proj_for(B, T) ? ", proj by heads" : "");
  return path_name(gpu.path_for(B, T));
}

struct DecodeTimes {
  double step_us, graph_us;
  int runs;
  std::string label;
};

// Whole contexts through step() (wall clock per token), then the step's graph alone (events).
DecodeTimes decode_times(const GrammarMiniGPT& model, CudaGPTOptions options, const std::vector<int32_t>& ctx,
                         int runs, int warmup) {
  CudaGPT gpu(model, options);
  CudaDecoder decoder(gpu);
  DecodeTimes r;
  r.label = decoder.mega_cluster() ? fmt::format("mega {} {}", decoder.mega_cluster(),
                                                 decoder.mega_head_proj() ? "heads" : "columns")
                                   : std::string(path_name(decoder.path()));
  auto decode_all = [&] {
    decoder.reset();
    for (int32_t id : ctx) decoder.step(id);
  };
  r.runs = std::max(5, runs / 10);
  for (int i = 0; i < std::max(2, warmup / 10); ++i) decode_all();
  std::vector<double> us;
  for (int i = 0; i < r.runs; ++i) {
    Timer timer;
    decode_all();
    us.push_back(timer.elapsed_us() / static_cast<double>(ctx.size()));
  }
  r.step_us = median(us);
  decoder.reset();
  decoder.step(ctx[0]);  // the replays below repeat position 0's step with this token
  r.graph_us = time_events([&] { decoder.replay(); }, decoder.stream(), runs, warmup);
  return r;
}

}  // namespace

CudaModelTimes bench_model_cuda(const GrammarMiniGPT& model, const std::vector<int32_t>& ids, int64_t B,
                                int64_t T, const std::vector<int32_t>& ctx, int runs, int warmup) {
  using Path = CudaGPTOptions::Path;
  CudaModelTimes r;
  int dev = 0;
  cudaDeviceProp prop{};
  MINIGPT_CHECK(cuda_model_available(), "bench model --device cuda: {}", cuda_model_unavailable_reason());
  MINIGPT_CUDA_CHECK(cudaGetDevice(&dev));
  MINIGPT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  r.gpu = prop.name;
  CudaGPT gpu(model);  // the default path: the host-API row and the equality note
  const int64_t ctx_len = static_cast<int64_t>(ctx.size());
  auto forward_row = [&](const std::string& name, double us, int n) { r.rows.push_back({name, B, T, us, n, false}); };

  double b2b = 0;
  r.forward_us = forward_graph_us(model, {}, ids, B, T, runs, warmup, &b2b);
  forward_row("forward graph (logits+probs), " + forward_label(gpu, B, T), r.forward_us, runs);
  forward_row("forward graph, 100 replays back to back, per replay", b2b, std::max(5, runs / 50));
  for (int R : {8, 4}) {  // the megakernel at smaller clusters, where its shared memory allows
    CudaGPT small(model, {.path = Path::Mega, .mega_cluster = R});
    if (small.mega_cluster_for(B, T) == R)
      forward_row(fmt::format("forward graph, megakernel, cluster {}", R),
                  forward_graph_us(model, small.options(), ids, B, T, runs, warmup, nullptr), runs);
  }
  for (int rp : {1, 2, 4}) {  // the forward split by rows (gpt_mega_rows.h), where it takes the shape
    CudaGPT rows(model, {.path = Path::Mega, .mega_rows = rp});
    if (rows.mega_rows_for(B, T) == rp)
      forward_row(fmt::format("forward graph, megakernel by rows, cluster {} ({} per CTA)", rows.mega_cluster_for(B, T), rp),
                  forward_graph_us(model, rows.options(), ids, B, T, runs, warmup, nullptr), runs);
  }
  {  // the other proj (by heads, or by columns where the default takes heads), where it fits
    using Proj = CudaGPTOptions::MegaProj;
    const bool heads = !gpu.mega_head_proj_for(B, T);
    CudaGPT other(model, {.path = Path::Mega, .mega_proj = heads ? Proj::Heads : Proj::Columns});
    if (const int R = other.mega_cluster_for(B, T))
      forward_row(fmt::format("forward graph, megakernel, cluster {}, proj by {}", R, heads ? "heads" : "columns"),
                  forward_graph_us(model, other.options(), ids, B, T, runs, warmup, nullptr), runs);
  }
  forward_row("forward graph, whole-layer kernels (fused)",
              forward_graph_us(model, {.path = Path::Fused}, ids, B, T, runs, warmup, nullptr), runs);
  forward_row("forward graph, a kernel per op (fused Linears)",
              forward_graph_us(model, {.path = Path::PerOp}, ids, B, T, runs, warmup, nullptr), runs);
  forward_row("forward graph, cuBLAS Linears (pedantic fp32)",
              forward_graph_us(model, {.path = Path::Cublas}, ids, B, T, runs, warmup, nullptr), runs);

  // the host API, and its logits against the CPU engine's
  Tensor logits, probs, cpu_logits, cpu_probs;
  for (int i = 0; i < warmup; ++i) gpu.forward(ids.data(), B, T, logits, probs);
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    Timer timer;
    gpu.forward(ids.data(), B, T, logits, probs);
    us.push_back(timer.elapsed_us());
  }
  forward_row("forward host API (ids in, logits+probs out, wait)", median(us), runs);
  ThreadPool pool(1);
  model.forward(ids.data(), B, T, cpu_logits, cpu_probs, pool);
  for (int64_t i = 0; i < logits.numel(); ++i)
    r.max_logit_diff = std::max(r.max_logit_diff, static_cast<double>(std::fabs(logits.data()[i] - cpu_logits.data()[i])));

  // decode: the default path, the megakernel at smaller clusters, the whole-layer kernels
  auto decode_rows = [&](const DecodeTimes& d, bool with_step) {
    if (with_step)
      r.rows.push_back({"kv decode step() (graph + wait), " + d.label, 1, ctx_len, d.step_us, d.runs, true});
    r.rows.push_back({"kv decode graph alone (events), " + d.label, 1, 1, d.graph_us, runs, true});
  };
  decode_rows(decode_times(model, {}, ctx, runs, warmup), true);
  {  // the device decode loop (CudaDecoder::generate): one launch for a whole context, the token
     // chosen on the GPU; wall clock per call (launch, the loop, the wait) over the tokens it made
    CudaGPT g(model);
    CudaDecoder dec(g);
    const int n = static_cast<int>(dec.capacity());  // from ctx[0] at position 0 to a full context
    const std::vector<int32_t> prompt = {ctx[0]};
    for (const SamplingParams params : {SamplingParams{0.0f, 0}, SamplingParams{0.8f, 40}}) {
      if (!dec.device_loop(params)) continue;
      auto run = [&] {
        dec.reset();
        return dec.generate(prompt, n, params, 42, -1).tokens.size();  // no stop token: a whole context
      };
      for (int i = 0; i < std::max(2, warmup / 10); ++i) run();
      std::vector<double> per_token;
      size_t tokens = 0;
      for (int i = 0; i < runs; ++i) {
        Timer timer;
        tokens = run();
        per_token.push_back(timer.elapsed_us() / static_cast<double>(tokens));
      }
      r.rows.push_back({fmt::format("kv decode, {} tokens per launch on the device, {}, mega {}", tokens,
                                    params.temperature == 0.0f ? "greedy" : "top-k 40", dec.mega_cluster()),
                        1, ctx_len, median(per_token), runs, true});
    }
  }
  for (auto proj : {CudaGPTOptions::MegaProj::Heads, CudaGPTOptions::MegaProj::Columns}) {
    for (int R : {16, 8, 4}) {  // every cluster size and proj the decode step fits
      const CudaGPTOptions o{.path = Path::Mega, .mega_cluster = R, .mega_proj = proj};
      CudaGPT small(model, o);
      CudaDecoder dec(small);
      if (dec.mega_cluster() == R && dec.mega_head_proj() == (proj == CudaGPTOptions::MegaProj::Heads))
        decode_rows(decode_times(model, o, ctx, runs, warmup), true);
    }
  }
  decode_rows(decode_times(model, {.path = Path::Fused}, ctx, runs, warmup), true);
  return r;
}

#else

CudaModelTimes bench_model_cuda(const GrammarMiniGPT&, const std::vector<int32_t>&, int64_t, int64_t,
                                const std::vector<int32_t>&, int, int) {
  MINIGPT_FAIL("bench model --device cuda: this minigpt was built without CUDA (configure with -DMINIGPT_CUDA=ON)");
}

#endif

}  // namespace minigpt::cli
