// CudaGPT and CudaDecoder in a build without CUDA (cuda_gpt.h): nothing is available, and
// constructing either throws Error saying so, so callers (the CLI, the Python module) compile
// and fail cleanly at run time.
#include "core/error.h"
#include "model/cuda/cuda_gpt.h"

namespace minigpt {

namespace {
[[noreturn]] void no_cuda() { MINIGPT_FAIL("cannot run the model on CUDA: {}", cuda_model_unavailable_reason()); }
}  // namespace

bool cuda_model_available() { return false; }

std::string cuda_model_unavailable_reason() {
  return "this minigpt was built without CUDA (configure with -DMINIGPT_CUDA=ON)";
}

struct CudaGPT::Impl {};
struct CudaDecoder::Impl {};

CudaGPT::CudaGPT(const GrammarMiniGPT&, CudaGPTOptions) { no_cuda(); }
CudaGPT::~CudaGPT() = default;
const ModelConfig& CudaGPT::config() const { no_cuda(); }
const CudaGPTOptions& CudaGPT::options() const { no_cuda(); }
CudaGPTOptions::Path CudaGPT::path() const { no_cuda(); }
CudaGPTOptions::Path CudaGPT::path_for(int64_t, int64_t) const { no_cuda(); }
int CudaGPT::mega_cluster_for(int64_t, int64_t) const { no_cuda(); }
int CudaGPT::mega_rows_for(int64_t, int64_t) const { no_cuda(); }
bool CudaGPT::mega_head_proj_for(int64_t, int64_t) const { no_cuda(); }
void CudaGPT::forward(const int32_t*, int64_t, int64_t, Tensor&, Tensor&) { no_cuda(); }
CudaGPT::DeviceForward CudaGPT::prepare(int64_t, int64_t) { no_cuda(); }
void CudaGPT::replay(int64_t, int64_t) { no_cuda(); }
cudaStream_t CudaGPT::stream() const { no_cuda(); }

CudaDecoder::CudaDecoder(const CudaGPT&) { no_cuda(); }
CudaDecoder::~CudaDecoder() = default;
void CudaDecoder::reset() { no_cuda(); }
int64_t CudaDecoder::position() const { no_cuda(); }
int64_t CudaDecoder::capacity() const { no_cuda(); }
std::span<const float> CudaDecoder::step(int32_t) { no_cuda(); }
std::span<const float> CudaDecoder::prefill(std::span<const int32_t>) { no_cuda(); }
CudaDecoder::Generated CudaDecoder::generate(std::span<const int32_t>, int, const SamplingParams&, uint64_t, int32_t,
                                             std::vector<float>*) {
  no_cuda();
}
bool CudaDecoder::device_loop(const SamplingParams&) const { no_cuda(); }
void CudaDecoder::replay() { no_cuda(); }
CudaGPTOptions::Path CudaDecoder::path() const { no_cuda(); }
int CudaDecoder::mega_cluster() const { no_cuda(); }
bool CudaDecoder::mega_head_proj() const { no_cuda(); }
cudaStream_t CudaDecoder::stream() const { no_cuda(); }

}  // namespace minigpt
