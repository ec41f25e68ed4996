// The parallelism planner: memory per GPU and communication per training step of the four
// patterns (DDP, FSDP, tensor parallel, pipeline parallel) for a GPT of this architecture,
// from the standard formulas. Costed, not built: only DDP is implemented (dist/grad_buckets.h),
// and its payload here equals what GradBuckets reduces (tests/dist_test.cpp).
//
// Assumptions (the project's training): fp32 weights and gradients (4 bytes each), AdamW's two
// fp32 moments (8 bytes), so 16 bytes per parameter; activations are what forward_train saves,
// per sequence: T (16 d L + 2 V) floats + H T^2 L attention probabilities (model/gpt.h).
// Links: one number, link_gbps gigabits per second per GPU and direction; collectives are ring
// algorithms, whose per-GPU traffic for a payload of S bytes over N GPUs is
//   all-reduce      2 (N-1)/N S   (reduce-scatter + all-gather)
//   all-gather      (N-1)/N S
//   reduce-scatter  (N-1)/N S
// and time = traffic / (link_gbps 1e9 / 8), latency ignored. Formulas per pattern (P
// parameters, P_b = those in blocks, B global batch in sequences, T tokens, d width):
//   DDP   memory 16 P + act(B/N); all-reduce of 4 P bytes per step, one per bucket (L + 2)
//   FSDP  memory 16 P / N + 4 P_layer (one gathered layer) + act(B/N); all-gather 4P (forward),
//         all-gather 4P (backward), reduce-scatter 4P: 3 (N-1)/N 4P per step, 3 (L + 2) calls
//   TP    (Megatron: qkv/fc1 by columns, proj/fc2 by rows) memory 16 (P_b / N + P - P_b) +
//         act_tp(B); 4 all-reduces per layer (2 forward, 2 backward) of 4 B T d bytes
//   PP    (1F1B, N stages, m = 4 N micro-batches) memory 16 (P_b / N + the larger end) +
//         N micro-batches of L/N layers in flight; point to point 2 x 4 B T d bytes per
//         stage boundary per step (activations forward, their gradients back), 2 m messages;
//         the bubble (N-1)/(m+N-1) of the step is idle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minigpt::dist {

struct PlanInput {
  int64_t layers = 4, d_model = 64, heads = 4, vocab = 611, seq = 64;
  int64_t context = 0; // position embeddings (block_size); 0: seq
  int64_t batch = 64;  // global, sequences per step
  int64_t gpus = 8;
  double gpu_mem_gib = 141.0;
  double link_gbps = 3600.0;  // H200 NVLink: 450 GB/s per direction = 3600 Gbit/s
};

struct PatternPlan {
  std::string pattern;      // "DDP", "FSDP", "TP", "PP"
  bool valid = true;        // the pattern applies (degree divides heads, batch, layers...)
  std::string why_not;      // when !valid
  double params_gib = 0, grads_gib = 0, optimizer_gib = 0, activations_gib = 0, total_gib = 0;
  std::string collective;   // "all-reduce", ...
  int64_t payload_bytes = 0;   // what the collectives carry per step (sum of the buffers)
  double wire_bytes = 0;       // per GPU, sent, by the ring formulas
  int64_t calls = 0;           // collectives (or messages) per step
  double comm_s = 0;           // wire_bytes at the link rate
  bool fits = false;           // valid and total_gib <= gpu_mem_gib
  std::string note;
};

// Parameters of the model (the same count as ModelConfig::parameter_count; no size caps).
int64_t plan_parameters(const PlanInput& in);
// The four plans, in the order DDP, FSDP, TP, PP. Error for non-positive inputs.
std::vector<PatternPlan> plan_parallelism(const PlanInput& in);
// Index of the cheapest plan that fits (least comm_s; PP's bubble is not counted, its note
// gives it), or -1 when none fits.
int cheapest_fitting(const std::vector<PatternPlan>& plans);

}  // namespace minigpt::dist
