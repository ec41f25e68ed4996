// Softmax cross-entropy over the vocabulary, fused with its gradient.
//
// logits (N, V); targets (N) with -1 meaning "ignore this position" (padding).
// Returns the mean loss over the non-ignored positions (0 if none). If dlogits is non-null it
// is overwritten with d(mean loss)/d(logits) = (softmax(logits) - onehot) / count, zero rows
// for ignored positions. Probabilities use the max-subtracted softmax; loss is
// logsumexp(logits) - logits[target], accumulated in double.
#pragma once

#include "core/thread_pool.h"

#include <cstdint>

namespace minigpt::cpu {

float cross_entropy_forward_backward(const float* logits, const int32_t* targets, float* dlogits,
                                     int64_t N, int64_t V, ThreadPool& pool);

}  // namespace minigpt::cpu
