// `minigpt bench train --dist mpi` (under mpirun) or `--dist single`: the data-parallel step.
//
// Reports (rank 0 prints; every rank runs the same steps): the step's median time and
// tokens/s of the global batch; the gradient all-reduce's payload bytes per step (4 x
// parameters, what `minigpt parallel-plan` predicts for DDP) and the ring's bytes on the wire
// per rank (2 (N-1)/N x payload); the all-reduce time alone (the same buckets reduced with no
// compute, median of --steps runs after a barrier); the exposed time (waiting after the
// backward, median); hidden = 1 - exposed / alone (the fraction of communication that ran
// under the backward). `--dist single` gives the 1-rank baseline of the same global batch, so
// speedup = its median / the N-rank median (compare two runs; docs/PARALLELISM.md).
//
// --device cuda (with --dist nccl, or single for the 1-GPU baseline): the CUDA step, its bucket
// all-reduces inside the step's graph, each on a communication stream as soon as the backward
// has finished its group (train/cuda_data_parallel.h). Measured the CPU's way in GPU time (CUDA
// events): exposed = from the backward's end to the last all-reduce's end (median of the steps),
// alone = the same buckets' all-reduces with no compute (median), hidden = 1 - exposed / alone;
// backward_ms is the graph's GPU time (the whole step).
#include "cli/bench_train_dist.h"

#include "cli/bench_conditions.h"
#include "core/error.h"
#include "core/report.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "data/corpus.h"
#include "dist/communicator.h"
#include "train/corpus_streams.h"
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace minigpt::cli {

namespace {

// Median seconds of reducing the buckets with nothing else running (all started, then waited).
double time_all_reduce_alone(dist::Communicator& comm, const std::vector<size_t>& sizes, int64_t runs) {
  std::vector<std::vector<float>> buffers;
  for (size_t n : sizes) buffers.emplace_back(n, 1.0f);
  std::vector<double> s;
  for (int64_t r = 0; r < runs; ++r) {
    comm.barrier();
    Timer t;
    std::vector<std::unique_ptr<dist::PendingReduce>> pending;
    for (auto& b : buffers) pending.push_back(comm.start_all_reduce_sum(b.data(), b.size()));
    for (auto& p : pending) p->wait();
    s.push_back(t.elapsed_s());
  }
  return median(s);
}

}  // namespace

TrainOptions bench_train_options(uint64_t seed, int64_t batch, int64_t seq, int64_t steps, int64_t warmup,
                                 int64_t corpus_tokens, int vocab_size) {
  TrainOptions o;
  o.seed = seed;
  o.batch = batch;
  o.seq = seq;
  o.steps = warmup + steps;
  o.warmup = std::min<int64_t>(o.warmup, o.steps);
  o.corpus_tokens = corpus_tokens;
  o.val_tokens = 1;  // no evaluation here
  o.model.vocab_size = vocab_size;
  return o;
}

void run_bench_train_dist(const DistBenchArgs& a, const GlobalOptions& global) {
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(a.dist, a.timeout_s);
  const ReportFormat format = parse_report_format(a.format);
  const int threads = global.resolved_threads();
  ThreadPool pool(threads);

  std::vector<std::string> vocab = data::corpus_vocabulary();
  TrainOptions o = bench_train_options(a.seed, a.batch, a.seq, a.steps, a.warmup, a.corpus_tokens,
                                       static_cast<int>(vocab.size()));
  o.model.n_layer = a.layers;
  o.model.d_model = a.d_model;
  o.model.n_head = a.heads;
  o.model.block_size = std::max<int>(o.model.block_size, static_cast<int>(a.seq));
  o.validate();
  const Tokenizer tokenizer(vocab);
  CorpusStreams streams = make_corpus_streams(o, tokenizer);
  const bool cuda = a.device == "cuda";
  MINIGPT_CHECK(cuda == (comm->name() == "nccl") || (cuda && comm->name() == "single"),
                "bench train --dist {} --device {}: GPUs reduce over nccl, CPU ranks over mpi", comm->name(),
                a.device);
  Trainer trainer(o, std::move(vocab), streams.train, nullptr, comm.get(), cuda ? Device::CUDA : Device::CPU);

  const std::string load_at_start = loadavg();
  for (int64_t i = 0; i < a.warmup; ++i) trainer.train_step(pool);
  comm->barrier();
  const CpuShare share(threads);
  std::vector<double> step_ms, exposed_ms, backward_ms;
  int64_t bytes = 0;
  for (int64_t i = 0; i < a.steps; ++i) {
    const StepStats s = trainer.train_step(pool);
    step_ms.push_back(s.seconds * 1e3);
    exposed_ms.push_back(s.comm_wait_s * 1e3);
    backward_ms.push_back(s.backward_s * 1e3);
    bytes = s.comm_bytes;
  }
  const double step_share = share.share();
  const int N = comm->size();
  CudaDataParallel* gpu_dp = trainer.cuda_data_parallel();  // null on the CPU and for --dist single
  const double alone_ms =
      gpu_dp ? gpu_dp->alone_ms(a.steps)
      : trainer.grad_buckets() ? time_all_reduce_alone(*comm, trainer.grad_buckets()->bucket_floats(), a.steps) * 1e3
                               : 0.0;
  const double med = median(step_ms), exposed = median(exposed_ms);
  const double hidden = alone_ms > 0 ? std::clamp(1.0 - exposed / alone_ms, 0.0, 1.0) : 0.0;
  const double wire = bytes * 2.0 * (N - 1) / N;
  comm->barrier();
  if (!comm->is_root()) return;

  Report report(cuda ? fmt::format("Data-parallel training step ({}, {} GPU rank(s))", comm->name(), N)
                     : fmt::format("Data-parallel training step ({}, {} rank(s) x {} thread(s))", comm->name(), N,
                                   threads),
                {"impl", "ranks", "B_global", "T", "median_ms", "tokens_per_s", "backward_ms", "allreduce_bytes",
                 "wire_bytes_per_rank", "allreduce_alone_ms", "exposed_ms", "hidden"},
                threads);
  report.set_meta("config", fmt::format("L={} d={} heads={} T={} vocab={}", a.layers, a.d_model, a.heads, a.seq,
                                        o.model.vocab_size));
  report.set_meta("parameters", o.model.parameter_count());
  report.set_meta("buckets", gpu_dp ? static_cast<int>(gpu_dp->buckets())
                             : trainer.grad_buckets() ? trainer.grad_buckets()->stats().buckets : 0);
  report.set_meta("device", a.device);
  report.add_row({fmt::format("minigpt DDP ({})", comm->name()), N, a.batch, a.seq, med,
                  static_cast<double>(a.batch * a.seq) / (med / 1e3), median(backward_ms), bytes, wire, alone_ms,
                  exposed, hidden});
  report.add_note("allreduce_bytes = fp32 gradient payload per step (4 x parameters); wire_bytes_per_rank = "
                  "2 (N-1)/N x payload (ring all-reduce); allreduce_alone_ms = the same buckets reduced with no "
                  "compute; exposed_ms = waiting after the backward; hidden = 1 - exposed / alone.");
  if (cuda)
    report.add_note("device cuda: one ncclAllReduce (average) per bucket inside the step's CUDA graph, on a "
                    "communication stream as soon as the backward has finished the bucket's gradients; GPU time "
                    "(CUDA events): exposed_ms = from the backward's end to the last all-reduce's end, "
                    "allreduce_alone_ms = the same buckets with no compute; backward_ms = the graph's GPU time "
                    "(the whole step).");
  report_conditions(report, load_at_start, step_share, "the timed steps (rank 0)");
  fmt::print("{}", report.render(format));
  std::fflush(stdout);
}

}  // namespace minigpt::cli
