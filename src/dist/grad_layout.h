// Gradient buckets as data: which parameters GrammarMiniGPT::backward finalises together, in
// the backward's order, and where each bucket lies in a flat gradient buffer. Shared by the CPU
// reducer (dist/grad_buckets.h, which packs a bucket's tensors) and the GPU one
// (dist/device_grad_reducer.h, which all-reduces spans of one flat device buffer in place).
//
// Buckets, in backward order (the reverse of the forward; L + 2 of them):
//   0        head:       ln_f.*, lm_head.*            (backward's kHeadStage)
//   1 .. L   block L-1 .. block 0: that block's 12 tensors
//   L + 1    embeddings: wte, wpe                     (backward's kEmbeddingStage)
// In the canonical parameter order (expected_parameters: wte, wpe, blocks.0.*, ..., ln_f.*,
// lm_head.*) every bucket is one contiguous run, so a flat buffer in that order needs no packing.
//
// What it does not do: any communication.
#pragma once

#include "model/config.h"

#include <cstddef>
#include <vector>

namespace minigpt::dist {

// Index (backward order) of the bucket that backward's on_ready(stage) makes final.
// stage: GrammarMiniGPT::kHeadStage, a block index in [0, n_layer), or kEmbeddingStage.
size_t grad_bucket_index(int stage, int n_layer);

// For each bucket in backward order, the indices of its tensors in expected_parameters(config).
std::vector<std::vector<size_t>> grad_bucket_members(const ModelConfig& config);

// One bucket of a flat fp32 gradient buffer: floats [offset, offset + count).
struct FlatSpan {
  size_t offset = 0;
  size_t count = 0;
};

// The buckets' spans (backward order) in a flat buffer holding every gradient in the canonical
// order, packed: parameter_count() floats in all.
std::vector<FlatSpan> flat_grad_buckets(const ModelConfig& config);

// The same for a buffer whose tensors sit, in the canonical order, at the given float offsets
// with gaps allowed between them (arena slots rounded up to an alignment: CudaWeights). The
// first tensor must be at 0; each bucket runs from its first tensor to the next bucket's first
// (the last to the end of the last tensor), so the spans tile the buffer, the gaps travelling
// with the buckets. Error naming the tensor if the offsets are not increasing or overlap.
std::vector<FlatSpan> grad_buckets_at(const ModelConfig& config, const std::vector<size_t>& tensor_offsets);

// Checks spans against a buffer of `total` floats: every span non-empty and inside it, no two
// overlapping, together covering every float once. Error naming the first bad span otherwise.
void check_flat_spans(const std::vector<FlatSpan>& spans, size_t total);

}  // namespace minigpt::dist
