// CudaWeights (cuda_weights.h): slots in the canonical order, copies through core/cuda_memory.h
// (host code; without CUDA the copies throw the build's "built without CUDA" Error).
#include "model/cuda/cuda_weights.h"

#include "core/cuda_memory.h"
#include "core/error.h"

namespace minigpt {
namespace {

// Every parameter pointer of w, in the order of expected_parameters(config).
std::vector<float**> pointers(CudaWeights& w) {
  std::vector<float**> p = {&w.wte, &w.wpe};
  for (CudaBlockWeights& b : w.blocks) {
    for (float** q : {&b.ln1_weight, &b.ln1_bias, &b.qkv_weight, &b.qkv_bias, &b.proj_weight,
                      &b.proj_bias, &b.ln2_weight, &b.ln2_bias, &b.fc1_weight, &b.fc1_bias,
                      &b.fc2_weight, &b.fc2_bias})
      p.push_back(q);
  }
  for (float** q : {&w.ln_f_weight, &w.ln_f_bias, &w.lm_head_weight, &w.lm_head_bias}) p.push_back(q);
  return p;
}

}  // namespace

CudaWeights CudaWeights::allocate(const ModelConfig& config, CudaArena& arena,
                                  const std::string& prefix) {
  CudaWeights w;
  w.blocks.resize(static_cast<size_t>(config.n_layer));
  const auto expected = expected_parameters(config);
  const std::vector<float**> ptrs = pointers(w);
  MINIGPT_CHECK(expected.size() == ptrs.size(), "CudaWeights: {} parameters expected, {} slots",
                expected.size(), ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i)
    *ptrs[i] = arena.floats(shape_numel(expected[i].second), prefix + expected[i].first);
  return w;
}

size_t CudaWeights::arena_bytes(const ModelConfig& config) {
  size_t bytes = 0;
  for (const auto& [name, shape] : expected_parameters(config))
    bytes += CudaArena::aligned(static_cast<size_t>(shape_numel(shape)) * sizeof(float));
  return bytes;
}

std::vector<std::pair<std::string, float*>> CudaWeights::named(const ModelConfig& config) const {
  CudaWeights copy = *this;  // pointers() takes the addresses of a mutable object's fields
  const auto expected = expected_parameters(config);
  const std::vector<float**> ptrs = pointers(copy);
  MINIGPT_CHECK(expected.size() == ptrs.size(), "CudaWeights: {} parameters expected, {} slots",
                expected.size(), ptrs.size());
  std::vector<std::pair<std::string, float*>> out;
  for (size_t i = 0; i < ptrs.size(); ++i) out.emplace_back(expected[i].first, *ptrs[i]);
  return out;
}

void upload_weights(const ModelWeights& host, const ModelConfig& config, const CudaWeights& device) {
  check_weights(host, config);
  CudaWeights d = device;
  const auto named = host.named();
  const std::vector<float**> ptrs = pointers(d);
  MINIGPT_CHECK(named.size() == ptrs.size(), "upload_weights: {} host tensors, {} device slots",
                named.size(), ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) {
    const Tensor& t = *named[i].second;
    MINIGPT_CHECK(t.device() == Device::CPU && t.is_contiguous(),
                  "upload_weights: '{}' must be a contiguous CPU tensor", named[i].first);
    cuda_memory::copy_to_device(*ptrs[i], t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
  }
}

void download_weights(const CudaWeights& device, const ModelConfig& config, ModelWeights& host) {
  host = ModelWeights::allocate(config);
  CudaWeights d = device;
  auto named = host.named();
  const std::vector<float**> ptrs = pointers(d);
  MINIGPT_CHECK(named.size() == ptrs.size(), "download_weights: {} host tensors, {} device slots",
                named.size(), ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) {
    Tensor& t = *named[i].second;
    cuda_memory::copy_to_host(t.data(), *ptrs[i], static_cast<size_t>(t.numel()) * sizeof(float));
  }
}

}  // namespace minigpt
