#include "dist/parallel_plan.h"

#include "core/error.h"
#include "model/config.h"

#include <fmt/format.h>

namespace minigpt::dist {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t block_parameters(const PlanInput& in) {
  const int64_t d = in.d_model, F = 4 * d;
  return 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + F * d + F + d * F + d;
}

// Saved activations (floats) of `layers` blocks for `seqs` sequences, the per-block part
// divided by `split` (tensor parallel shards 12 of the 16 d per token, and the attention).
double block_act_floats(const PlanInput& in, double seqs, double layers, double split) {
  const double T = static_cast<double>(in.seq), d = static_cast<double>(in.d_model);
  const double per_token = 4 * d + 12 * d / split;
  const double att = static_cast<double>(in.heads) / split * T * T;
  return seqs * layers * (T * per_token + att);
}

double head_act_floats(const PlanInput& in, double seqs) {
  return seqs * static_cast<double>(in.seq) * 2.0 * static_cast<double>(in.vocab);
}

// gathered: floats of full weights held besides the shards (FSDP's one gathered layer).
void memory(PatternPlan& p, double gathered, double weights_per_gpu, double act_floats) {
  p.params_gib = 4 * weights_per_gpu / kGiB;
  p.grads_gib = 4 * weights_per_gpu / kGiB;
  p.optimizer_gib = 8 * weights_per_gpu / kGiB;
  p.activations_gib = 4 * act_floats / kGiB;
  p.total_gib = p.params_gib + p.grads_gib + p.optimizer_gib + p.activations_gib + 4 * gathered / kGiB;
}

}  // namespace

int64_t plan_parameters(const PlanInput& in) {
  ModelConfig c;  // parameter_count() only: no validate(), so 70B-sized configs are fine
  c.n_layer = static_cast<int>(in.layers);
  c.n_head = static_cast<int>(in.heads);
  c.d_model = static_cast<int>(in.d_model);
  c.block_size = static_cast<int>(in.context > 0 ? in.context : in.seq);
  c.vocab_size = static_cast<int>(in.vocab);
  return c.parameter_count();
}

std::vector<PatternPlan> plan_parallelism(const PlanInput& in) {
  for (const auto& [name, v] : {std::pair{"--layers", in.layers}, {"--d-model", in.d_model}, {"--heads", in.heads},
                                {"--vocab", in.vocab}, {"--seq", in.seq}, {"--batch", in.batch}, {"--gpus", in.gpus}})
    MINIGPT_CHECK(v >= 1, "parallel-plan: {} must be positive, got {}", name, v);
  MINIGPT_CHECK(in.d_model % in.heads == 0, "parallel-plan: --heads {} must divide --d-model {}", in.heads, in.d_model);
  MINIGPT_CHECK(in.gpu_mem_gib > 0 && in.link_gbps > 0, "parallel-plan: --gpu-mem-gib and --link-gbps must be positive");

  const double N = static_cast<double>(in.gpus), L = static_cast<double>(in.layers);
  const double B = static_cast<double>(in.batch), T = static_cast<double>(in.seq), d = static_cast<double>(in.d_model);
  const int64_t P = plan_parameters(in);
  const double Pd = static_cast<double>(P), Pb = static_cast<double>(block_parameters(in)) * L;
  const double link_Bps = in.link_gbps * 1e9 / 8.0;
  const double ring_ar = 2.0 * (N - 1) / N, ring_half = (N - 1) / N;
  auto finish = [&](PatternPlan& p) {
    p.comm_s = p.wire_bytes / link_Bps;
    p.fits = p.valid && p.total_gib <= in.gpu_mem_gib;
  };
  std::vector<PatternPlan> plans(4);

  PatternPlan& ddp = plans[0];
  ddp.pattern = "DDP";
  ddp.valid = in.batch % in.gpus == 0;
  if (!ddp.valid) ddp.why_not = fmt::format("batch {} does not split over {} GPUs", in.batch, in.gpus);
  memory(ddp, 0, Pd, block_act_floats(in, B / N, L, 1) + head_act_floats(in, B / N));
  ddp.collective = "all-reduce (gradients)";
  ddp.payload_bytes = 4 * P;
  ddp.wire_bytes = ring_ar * 4 * Pd;
  ddp.calls = in.layers + 2;
  finish(ddp);

  PatternPlan& fsdp = plans[1];
  fsdp.pattern = "FSDP";
  fsdp.valid = ddp.valid;
  fsdp.why_not = ddp.why_not;
  memory(fsdp, Pb / L, Pd / N, block_act_floats(in, B / N, L, 1) + head_act_floats(in, B / N));
  fsdp.collective = "all-gather x2 + reduce-scatter";
  fsdp.payload_bytes = 3 * 4 * P;
  fsdp.wire_bytes = 3 * ring_half * 4 * Pd;
  fsdp.calls = 3 * (in.layers + 2);
  fsdp.note = "1.5x DDP's traffic for 1/N of the state";
  finish(fsdp);

  PatternPlan& tp = plans[2];
  tp.pattern = "TP";
  tp.valid = in.heads % in.gpus == 0;
  if (!tp.valid) tp.why_not = fmt::format("{} heads do not split over {} GPUs", in.heads, in.gpus);
  memory(tp, 0, Pb / N + (Pd - Pb), block_act_floats(in, B, L, N) + head_act_floats(in, B));
  tp.collective = "all-reduce (activations)";
  const double act_bytes = 4 * B * T * d;
  tp.payload_bytes = static_cast<int64_t>(4 * L * act_bytes);
  tp.wire_bytes = 4 * L * ring_ar * act_bytes;
  tp.calls = 4 * in.layers;
  tp.note = "every layer waits on its all-reduces: NVLink within one node only";
  finish(tp);

  PatternPlan& pp = plans[3];
  pp.pattern = "PP";
  pp.valid = in.layers % in.gpus == 0;
  if (!pp.valid) pp.why_not = fmt::format("{} layers do not split into {} stages", in.layers, in.gpus);
  const double m = 4 * N;  // micro-batches per step
  const double ctx = static_cast<double>(in.context > 0 ? in.context : in.seq);
  const double ends = std::max((static_cast<double>(in.vocab) + ctx) * d, static_cast<double>(in.vocab) * (d + 1) + 2 * d);
  // In flight on the first stage: N micro-batches of B/m sequences through L/N layers.
  memory(pp, 0, Pb / N + ends, block_act_floats(in, N * B / m, L / N, 1) + head_act_floats(in, B / m));
  pp.collective = "send/recv (activations between stages)";
  pp.payload_bytes = static_cast<int64_t>(2 * act_bytes);
  pp.wire_bytes = in.gpus > 1 ? 2 * act_bytes : 0;
  pp.calls = in.gpus > 1 ? static_cast<int64_t>(2 * m) : 0;
  pp.note = fmt::format("1F1B, {} micro-batches: bubble {:.0f}% of the step idle", static_cast<int64_t>(m),
                        100.0 * (N - 1) / (m + N - 1));
  if (pp.valid && B < m) pp.note += fmt::format("; batch {} < {} micro-batches", in.batch, static_cast<int64_t>(m));
  finish(pp);
  return plans;
}

int cheapest_fitting(const std::vector<PatternPlan>& plans) {
  int best = -1;
  for (size_t i = 0; i < plans.size(); ++i)
    if (plans[i].fits && (best < 0 || plans[i].comm_s < plans[static_cast<size_t>(best)].comm_s))
      best = static_cast<int>(i);
  return best;
}

}  // namespace minigpt::dist
