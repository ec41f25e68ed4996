#include "train/trainer.h"

#include "core/error.h"
#include "core/timer.h"

#include <algorithm>
#include <cmath>

namespace minigpt {

namespace {

ModelConfig checked_model(const TrainOptions& options, size_t vocab_size) {
  options.validate();
  MINIGPT_CHECK(options.model.vocab_size == static_cast<int>(vocab_size),
                "train: the config's vocab_size {} differs from the vocabulary's {} tokens",
                options.model.vocab_size, vocab_size);
  return options.model;
}

dist::SingleProcess& single_process() {
  static dist::SingleProcess single;
  return single;
}

}  // namespace

Trainer::Trainer(TrainOptions options, std::vector<std::string> vocab, TokenStream train, TokenStream val,
                 dist::Communicator* comm, Device device)
    : options_(std::move(options)), vocab_(std::move(vocab)), train_(std::move(train)),
      val_(std::move(val)), train_fingerprint_(train_ ? stream_fingerprint(*train_) : 0),
      model_(checked_model(options_, vocab_.size()),
             ModelWeights::init_random(options_.model, options_.seed)),
      adamw_(options_.model, options_.adamw),
      sampler_(train_, options_.batch, options_.seq, options_.sampler_seed()),
      grads_(ModelWeights::zeros_like(options_.model)),
      ids_(static_cast<size_t>(options_.batch * options_.seq)),
      targets_(static_cast<size_t>(options_.batch * options_.seq)),
      comm_(comm ? comm : &single_process()), local_batch_(options_.batch / comm_->size()) {
  MINIGPT_CHECK(options_.batch % comm_->size() == 0,
                "train: the batch of {} sequences does not split evenly over {} ranks", options_.batch,
                comm_->size());
  for (const int32_t id : *train_)
    MINIGPT_CHECK(id >= 0 && id < options_.model.vocab_size,
                  "train: token id {} in the training stream is outside the vocabulary", id);
  MINIGPT_CHECK(device == Device::CUDA || comm_->name() != "nccl",
                "train --dist nccl reduces GPU buffers: the CPU trainer's ranks use --dist mpi");
  if (device == Device::CUDA) {
    // This rank's step: its local batch; with --dist nccl (any world size, 1 included) the
    // graph averages the gradients over the ranks before the clipping (cuda_data_parallel.h).
    cuda_ = std::make_unique<CudaTrainStep>(options_.model, options_.adamw, options_.grad_clip,
                                            local_batch_, options_.seq);
    if (comm_->size() > 1 || comm_->name() == "nccl")
      data_parallel_ = std::make_unique<CudaDataParallel>(*cuda_, *comm_);
  } else if (comm_->size() > 1) {
    buckets_ = std::make_unique<dist::GradBuckets>(options_.model, grads_, *comm_);
  }
  if (comm_->size() > 1) broadcast_weights();  // host weights; a CUDA step uploads them first
}

Trainer::~Trainer() = default;

Trainer::Trainer(TrainCheckpoint c, TokenStream train, TokenStream val, dist::Communicator* comm, Device device)
    : Trainer(c.options, c.vocab, std::move(train), std::move(val), comm, device) {
  MINIGPT_CHECK(c.world_size == comm_->size(),
                "resume: the checkpoint was written by a run of {} rank(s) and this run has {}; "
                "resume it with the same world size (mpirun -np {}), since the batch split and the "
                "summation order depend on it",
                c.world_size, comm_->size(), c.world_size);
  MINIGPT_CHECK(train_fingerprint_ == c.train_fingerprint,
                "resume: the training corpus differs from the checkpoint's (fingerprint {:016x} vs {:016x})",
                train_fingerprint_, c.train_fingerprint);
  model_.weights() = std::move(c.weights);
  adamw_.restore(c.step, std::move(c.adam_m), std::move(c.adam_v));
  sampler_.restore(c.rng_state, c.windows_drawn);
  step_ = c.step;
  if (comm_->size() > 1) broadcast_weights();  // every rank read the same file; rank 0's wins
}

void Trainer::broadcast_weights() {
  // Rank 0's weights everywhere (and its moments, which equal the others' at a fresh start).
  for (ModelWeights* w : {&model_.weights(), &adamw_.m(), &adamw_.v()})
    for (auto& [name, t] : w->named()) comm_->broadcast(t->data(), t->nbytes(), 0);
}

const GrammarMiniGPT& Trainer::model() const {
  sync_host();
  return model_;
}

void Trainer::sync_host() const {
  if (!cuda_ || host_current_) return;
  ModelWeights m, v;
  cuda_->download(model_.weights(), m, v);
  adamw_.restore(step_, std::move(m), std::move(v));
  host_current_ = true;
}

StepStats Trainer::cuda_step(const int32_t* ids, const int32_t* targets) {
  Timer timer;
  if (!device_current_) {
    cuda_->upload(model_.weights(), adamw_.m(), adamw_.v());
    device_current_ = true;
  }
  StepStats s;
  s.step = step_;
  s.lr = options_.schedule().at(step_);
  const CudaStepResult r = cuda_->step(ids, targets, s.lr, step_ + 1);
  host_current_ = false;
  s.loss = r.loss;
  s.grad_norm = r.grad_norm;
  s.backward_s = r.gpu_ms / 1e3;
  ++step_;
  s.seconds = timer.elapsed_s();
  return s;
}

StepStats Trainer::train_step(ThreadPool& pool) {
  MINIGPT_CHECK(!done(), "train: all {} steps are done", options_.steps);
  if (cuda_) {
    sampler_.next(ids_.data(), targets_.data());  // the global batch; this rank keeps its rows
    const int64_t offset = comm_->rank() * local_batch_ * options_.seq;
    StepStats s = cuda_step(ids_.data() + offset, targets_.data() + offset);
    if (data_parallel_) {
      s.comm_bytes = 4 * options_.model.parameter_count();
      s.comm_wait_s = data_parallel_->exposed_ms() / 1e3;
    }
    if (comm_->size() > 1) {
      comm_->all_reduce_sum(&s.loss, 1);  // the whole batch's mean loss, for the log
      s.loss /= static_cast<float>(comm_->size());
    }
    return s;
  }
  Timer timer;
  const int64_t T = options_.seq;
  for (auto& [name, g] : grads_.named()) g->fill(0.0f);
  sampler_.next(ids_.data(), targets_.data());  // the global batch; this rank keeps its rows
  const int64_t b = local_batch_, offset = comm_->rank() * b * T;
  StepStats s;
  s.step = step_;
  s.loss = model_.forward_train(ids_.data() + offset, targets_.data() + offset, b, T, pool);
  MINIGPT_CHECK(std::isfinite(s.loss), "train: loss is {} at step {} on rank {}: training diverged",
                s.loss, step_, comm_->rank());
  Timer backward_timer;
  if (buckets_) {
    model_.backward(grads_, pool, [this](int stage) { buckets_->on_ready(stage); });
    s.backward_s = backward_timer.elapsed_s();
    buckets_->finish();
    s.comm_wait_s = buckets_->stats().exposed_s;
    s.comm_bytes = buckets_->stats().bytes;
    comm_->all_reduce_sum(&s.loss, 1);  // the whole batch's mean loss, for the log
    s.loss /= static_cast<float>(comm_->size());
  } else {
    model_.backward(grads_, pool);
    s.backward_s = backward_timer.elapsed_s();
  }
  s.grad_norm = clip_grad_norm(grads_, options_.grad_clip);
  s.lr = options_.schedule().at(step_);
  adamw_.step(model_.weights(), grads_, s.lr, pool);
  ++step_;
  s.seconds = timer.elapsed_s();
  return s;
}

std::optional<float> Trainer::evaluate(ThreadPool& pool) {
  if (!val_) return std::nullopt;
  sync_host();  // CUDA: evaluated on the CPU with the device's current weights
  const int64_t B = options_.batch, T = options_.seq;
  const int64_t n = std::min(options_.eval_batches, eval_batch_count(*val_, B, T));
  if (n <= 0) return std::nullopt;
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), targets(ids.size());
  // In pieces of the local batch: forward_train with the training shapes reuses the
  // saved-activation buffers (the gradient it also computes is discarded). Every piece has
  // b*T targets, so the mean of the pieces' means is the batch's mean.
  const int64_t b = local_batch_, pieces = B / b;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    eval_batch(*val_, B, T, i, ids.data(), targets.data());
    for (int64_t p = 0; p < pieces; ++p)
      sum += model_.forward_train(ids.data() + p * b * T, targets.data() + p * b * T, b, T, pool);
  }
  return static_cast<float>(sum / static_cast<double>(n * pieces));
}

TrainCheckpoint Trainer::checkpoint() const {
  sync_host();
  TrainCheckpoint c;
  c.options = options_;
  c.vocab = vocab_;
  c.weights = model_.weights().clone();
  c.adam_m = adamw_.m().clone();
  c.adam_v = adamw_.v().clone();
  c.step = step_;
  c.rng_state = sampler_.rng_state();
  c.windows_drawn = sampler_.windows_drawn();
  c.train_fingerprint = train_fingerprint_;
  c.world_size = comm_->size();
  return c;
}

void Trainer::save_checkpoint(const std::string& path) const {
  // No copy needed: the writer only reads. Built field by field to avoid 3 weight copies.
  sync_host();
  TrainCheckpoint c;
  c.options = options_;
  c.vocab = vocab_;
  c.weights = model_.weights();  // Tensor copies share storage: cheap views
  c.adam_m = adamw_.m();
  c.adam_v = adamw_.v();
  c.step = step_;
  c.rng_state = sampler_.rng_state();
  c.windows_drawn = sampler_.windows_drawn();
  c.train_fingerprint = train_fingerprint_;
  c.world_size = comm_->size();
  minigpt::save_checkpoint(path, c);
}

ModelFile Trainer::model_file() const {
  sync_host();
  return ModelFile{options_.model, vocab_, model_.weights().clone()};
}

void run_training(Trainer& trainer, const LoopOptions& loop, const LoopHooks& hooks, ThreadPool& pool) {
  const int64_t until = loop.until_step < 0 ? trainer.options().steps
                                            : std::min(loop.until_step, trainer.options().steps);
  MINIGPT_CHECK(loop.checkpoint_every <= 0 || !loop.checkpoint_path.empty(),
                "train: checkpoints every {} steps need a checkpoint path", loop.checkpoint_every);
  auto evaluate = [&] {
    if (const auto v = trainer.evaluate(pool); v && hooks.on_eval) hooks.on_eval(trainer.step(), *v);
  };
  auto checkpoint = [&] {
    trainer.save_checkpoint(loop.checkpoint_path);
    if (hooks.on_checkpoint) hooks.on_checkpoint(trainer.step(), loop.checkpoint_path);
  };
  // Only rank 0 evaluates and writes checkpoints; the others go straight on to the next
  // step's all-reduce, where they wait for it (bounded by the communicator's timeout).
  const bool root = trainer.comm().is_root();
  while (trainer.step() < until) {
    const StepStats s = trainer.train_step(pool);
    if (hooks.on_step) hooks.on_step(s);
    const bool last = trainer.step() == until;
    if (root && loop.eval_every > 0 && (trainer.step() % loop.eval_every == 0 || last)) evaluate();
    if (root && !loop.checkpoint_path.empty() &&
        ((loop.checkpoint_every > 0 && trainer.step() % loop.checkpoint_every == 0) || last))
      checkpoint();
  }
}

}  // namespace minigpt
