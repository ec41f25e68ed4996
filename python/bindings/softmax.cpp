// Bindings of the softmax kernels: softmax(x, kernel=..., device=...) over the last dimension
// of a float32 C-contiguous array of any rank, returning a new array of the same shape.
//
// CPU kernels (src/kernels/cpu/softmax.h): reference (double, the oracle), naive, fused, simd
// (the production kernel, on the module's thread pool). The CUDA kernels are bound in
// softmax_cuda.cpp when the module is built with CUDA; here device="cuda" without them is a
// clear error. softmax_cuda_into runs a CUDA kernel on arrays that are already on the GPU.
#include "common.h"

#include "core/error.h"
#include "kernels/cpu/softmax.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace minigpt::py {

// Defined in softmax_cuda.cpp (CUDA builds) or below (CPU-only builds).
std::vector<std::string> cuda_softmax_kernels();
void cuda_softmax(const float* x, float* y, int64_t rows, int64_t cols, const std::string& kernel);
void cuda_softmax_device(const float* x, float* y, int64_t rows, int64_t cols, int device,
                         const std::string& kernel, uintptr_t stream);

namespace {

const std::vector<std::string> kCpuKernels = {"reference", "naive", "fused", "simd"};

void cpu_softmax(const float* x, float* y, int64_t rows, int64_t cols, const std::string& kernel,
                 ThreadPool& pool) {
  if (kernel == "reference") cpu::softmax_reference(x, y, rows, cols);
  else if (kernel == "naive") cpu::softmax_naive(x, y, rows, cols);
  else if (kernel == "fused") cpu::softmax_fused(x, y, rows, cols);
  else if (kernel == "simd") cpu::softmax_simd(x, y, rows, cols, pool);
  else MINIGPT_FAIL("softmax: unknown CPU kernel '{}' (known: reference, naive, fused, simd)", kernel);
}

}  // namespace

void bind_softmax(nb::module_& m) {
  m.def("softmax", [](const AnyArray& x, std::string kernel, const std::string& device) {
    if (kernel.empty()) kernel = device == "cuda" ? "fused" : "simd";  // each device's production kernel
    check_f32(x, "x");
    if (x.ndim() < 1) throw nb::value_error("x: expected at least 1 dimension (rows..., cols)");
    const int64_t cols = static_cast<int64_t>(x.shape(x.ndim() - 1));
    if (cols < 1) throw nb::value_error(("x: the last dimension must be >= 1, got shape " + shape_of(x)).c_str());
    Shape shape;
    for (size_t i = 0; i < x.ndim(); ++i) shape.push_back(static_cast<int64_t>(x.shape(i)));
    const int64_t rows = shape_numel(shape) / cols;
    Tensor y = Tensor::empty(shape);
    const float* xp = static_cast<const float*>(x.data());
    if (device == "cpu") {
      auto pool = current_pool();
      nb::gil_scoped_release release;
      if (rows) cpu_softmax(xp, y.data(), rows, cols, kernel, *pool);
    } else if (device == "cuda") {
      nb::gil_scoped_release release;
      cuda_softmax(xp, y.data(), rows, cols, kernel);
    } else {
      throw nb::value_error(("softmax: unknown device '" + device + "' (cpu or cuda)").c_str());
    }
    return to_numpy(y);
  }, nb::arg("x"), nb::arg("kernel") = "", nb::arg("device") = "cpu",
  "Softmax over the last dimension of a float32 C-contiguous array; returns a new array. "
  "kernel: one of softmax_kernels(device); empty = the production kernel (simd on cpu, fused "
  "on cuda). device='cuda' copies x to the GPU and the result back.");

  // (B, V) float32 C-contiguous arrays on a CUDA device: PyTorch CUDA tensors (DLPack) or any
  // array exporting DLPack. nanobind rejects other dtypes, layouts and devices with a TypeError.
  using CudaIn = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cuda>;
  using CudaOut = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cuda>;
  m.def("softmax_cuda_into", [](const CudaIn& x, const CudaOut& y, const std::string& kernel, uintptr_t stream) {
    if (x.shape(0) != y.shape(0) || x.shape(1) != y.shape(1))
      throw nb::value_error(("softmax_cuda_into: x is (" + std::to_string(x.shape(0)) + ", " +
                             std::to_string(x.shape(1)) + ") but y is (" + std::to_string(y.shape(0)) +
                             ", " + std::to_string(y.shape(1)) + ")").c_str());
    if (x.shape(1) < 1) throw nb::value_error("softmax_cuda_into: rows must have at least 1 element");
    if (x.device_id() != y.device_id()) throw nb::value_error("softmax_cuda_into: x and y are on different GPUs");
    nb::gil_scoped_release release;
    cuda_softmax_device(x.data(), y.data(), static_cast<int64_t>(x.shape(0)), static_cast<int64_t>(x.shape(1)),
                        x.device_id(), kernel, stream);
  }, nb::arg("x").noconvert(), nb::arg("y").noconvert(),  // never a silent copy (y would be lost)
  nb::arg("kernel") = "fused_tuned", nb::arg("stream") = 0,
  "y = softmax(x) over rows for (B, V) float32 C-contiguous arrays already on the current CUDA "
  "device (e.g. torch tensors). Enqueued on `stream` (a cudaStream_t as an int, e.g. "
  "torch.cuda.current_stream().cuda_stream; 0 = the legacy default stream): no copy, no "
  "allocation, no synchronisation, so calls can be captured into a CUDA graph. fused_tuned "
  "tunes (and synchronises) on its first call per shape bucket: make that call before a capture.");

  m.def("softmax_kernels", [](const std::string& device) {
    if (device == "cpu") return kCpuKernels;
    if (device == "cuda") return cuda_softmax_kernels();
    throw nb::value_error(("softmax_kernels: unknown device '" + device + "' (cpu or cuda)").c_str());
  }, nb::arg("device") = "cpu", "Kernel names softmax() accepts on a device (empty for cuda "
  "when the module is built without CUDA or no GPU is visible).");

  m.def("softmax_simd_isa", [] { return std::string(isa_name(active_isa())); },
        "Instruction set the CPU kernels run here (MINIGPT_ISA, else the best the CPU has): "
        "avx512, avx2 or scalar.");
}

}  // namespace minigpt::py
