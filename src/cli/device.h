// `--device cpu|cuda` for the commands that run the model (forward, predict, generate,
// eval-probes, bench model): the option, and the two things those commands do with it: a
// forward and a KV-cache decoder on the chosen device (the CPU engine, or model/cuda/cuda_gpt.h).
// `--device cuda` without a GPU, or in a build without CUDA, is an Error saying which (exit 1).
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/cuda/cuda_gpt.h"
#include "model/decoder.h"
#include "model/gpt.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <span>
#include <string>

namespace minigpt::cli {

CLI::Option* add_device_option(CLI::App* cmd, std::string& device);  // default "cpu"
bool is_cuda(const std::string& device);

// GrammarMiniGPT::forward on the CPU (the pool's threads) or on the GPU (a CudaGPT made once).
class DeviceForward {
 public:
  DeviceForward(const GrammarMiniGPT& model, const std::string& device);
  void forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs, ThreadPool& pool);
  CudaGPT* cuda() { return gpu_.get(); }

 private:
  const GrammarMiniGPT* model_;
  std::unique_ptr<CudaGPT> gpu_;
};

// Decoder (CPU) or CudaDecoder with one interface.
class DeviceDecoder {
 public:
  DeviceDecoder(const GrammarMiniGPT& model, const std::string& device);
  std::span<const float> step(int32_t id, ThreadPool& pool);
  std::span<const float> prefill(std::span<const int32_t> ids, ThreadPool& pool);
  int64_t position() const;
  int64_t capacity() const;
  void reset();

 private:
  std::unique_ptr<Decoder> cpu_;
  std::unique_ptr<CudaGPT> gpu_model_;
  std::unique_ptr<CudaDecoder> gpu_;
};

}  // namespace minigpt::cli
