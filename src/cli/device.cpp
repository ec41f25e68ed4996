// --device (device.h): the option and the CPU/GPU forward and decoder behind it.
#include "cli/device.h"

namespace minigpt::cli {

CLI::Option* add_device_option(CLI::App* cmd, std::string& device) {
  return cmd->add_option("--device", device, "where the model runs: cpu or cuda (one GPU, CUDA graphs)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

bool is_cuda(const std::string& device) { return device == "cuda"; }

DeviceForward::DeviceForward(const GrammarMiniGPT& model, const std::string& device) : model_(&model) {
  if (is_cuda(device)) gpu_ = std::make_unique<CudaGPT>(model);  // Error without a GPU / CUDA
}

void DeviceForward::forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs,
                            ThreadPool& pool) {
  if (gpu_) return gpu_->forward(ids, B, T, logits, probs);
  model_->forward(ids, B, T, logits, probs, pool);
}

DeviceDecoder::DeviceDecoder(const GrammarMiniGPT& model, const std::string& device) {
  if (is_cuda(device)) {
    gpu_model_ = std::make_unique<CudaGPT>(model);
    gpu_ = std::make_unique<CudaDecoder>(*gpu_model_);
  } else {
    cpu_ = std::make_unique<Decoder>(model);
  }
}

std::span<const float> DeviceDecoder::step(int32_t id, ThreadPool& pool) {
  return gpu_ ? gpu_->step(id) : cpu_->step(id, pool);
}
std::span<const float> DeviceDecoder::prefill(std::span<const int32_t> ids, ThreadPool& pool) {
  return gpu_ ? gpu_->prefill(ids) : cpu_->prefill(ids, pool);
}
int64_t DeviceDecoder::position() const { return gpu_ ? gpu_->position() : cpu_->position(); }
int64_t DeviceDecoder::capacity() const { return gpu_ ? gpu_->capacity() : cpu_->capacity(); }
void DeviceDecoder::reset() { gpu_ ? gpu_->reset() : cpu_->reset(); }

}  // namespace minigpt::cli
