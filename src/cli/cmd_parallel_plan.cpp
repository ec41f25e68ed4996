// `minigpt parallel-plan`: memory per GPU and communication per step of DDP, FSDP, tensor and
// pipeline parallelism for a GPT of this architecture (formulas in dist/parallel_plan.h), as a
// Report (md | json | csv); marks which patterns fit in --gpu-mem-gib and which fitting one
// communicates least. Worked examples: docs/PARALLELISM.md.
#include "cli/commands.h"
#include "core/report.h"
#include "dist/parallel_plan.h"

#include <fmt/format.h>

#include <memory>

namespace minigpt::cli {

namespace {

struct PlanArgs {
  dist::PlanInput in;
  std::string format = "md";
};

void run_plan(const PlanArgs& a) {
  const auto plans = dist::plan_parallelism(a.in);
  const int best = dist::cheapest_fitting(plans);
  const dist::PlanInput& in = a.in;
  Report report(fmt::format("Parallelism plan: L={} d={} H={} V={} T={} B={} on {} GPUs of {:g} GiB, {:g} Gbit/s links",
                            in.layers, in.d_model, in.heads, in.vocab, in.seq, in.batch, in.gpus, in.gpu_mem_gib,
                            in.link_gbps),
                {"pattern", "params_gib", "grads_gib", "optimizer_gib", "activations_gib", "total_gib", "fits",
                 "collective", "payload_bytes", "wire_bytes_per_gpu", "calls", "comm_ms", "cheapest"},
                1);
  report.set_meta("parameters", dist::plan_parameters(in));
  for (size_t i = 0; i < plans.size(); ++i) {
    const auto& p = plans[i];
    report.add_row({p.pattern, p.params_gib, p.grads_gib, p.optimizer_gib, p.activations_gib, p.total_gib,
                    p.valid ? (p.fits ? "yes" : "no") : "n/a", p.collective, p.payload_bytes, p.wire_bytes, p.calls,
                    p.comm_s * 1e3, static_cast<int>(i) == best ? "yes" : ""});
    if (!p.valid) report.add_note(fmt::format("{}: not applicable: {}", p.pattern, p.why_not));
    if (!p.note.empty()) report.add_note(fmt::format("{}: {}", p.pattern, p.note));
  }
  report.add_note("fp32 weights, gradients and AdamW moments (16 bytes per parameter); ring collectives: "
                  "all-reduce 2(N-1)/N x payload per GPU, all-gather and reduce-scatter (N-1)/N; time = wire bytes "
                  "/ link rate, latency ignored (dist/parallel_plan.h). cheapest = the least communication time "
                  "among those that fit (PP's bubble is not in it).");
  if (best < 0) report.add_note("no pattern fits alone: combine them (FSDP x TP x PP) or use more GPUs");
  fmt::print("{}", report.render(parse_report_format(a.format)));
}

}  // namespace

void add_parallel_plan_command(CLI::App& app, GlobalOptions&) {
  auto a = std::make_shared<PlanArgs>();
  dist::PlanInput& in = a->in;
  CLI::App* cmd = app.add_subcommand("parallel-plan", "Memory and communication of DDP, FSDP, TP and PP for a GPT");
  cmd->add_option("--layers", in.layers, "Transformer blocks")->capture_default_str();
  cmd->add_option("--d-model", in.d_model, "Width")->capture_default_str();
  cmd->add_option("--heads", in.heads, "Attention heads")->capture_default_str();
  cmd->add_option("--vocab", in.vocab, "Vocabulary size")->capture_default_str();
  cmd->add_option("--seq", in.seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--context", in.context, "Position embeddings (block size; default: --seq)");
  cmd->add_option("--batch", in.batch, "Global batch, sequences per step")->capture_default_str();
  cmd->add_option("--gpus", in.gpus, "GPUs (the parallel degree)")->capture_default_str();
  cmd->add_option("--gpu-mem-gib", in.gpu_mem_gib, "Memory per GPU, GiB")->capture_default_str();
  cmd->add_option("--link-gbps", in.link_gbps, "Link rate per GPU and direction, Gbit/s")->capture_default_str();
  cmd->add_option("-o,--output", a->format, "md | json | csv")->capture_default_str();
  cmd->callback([a] { run_plan(*a); });
}

}  // namespace minigpt::cli
