// The nanobind module _minigpt_core: module definition, minigpt::Error -> Python, the thread
// count, the array helpers of common.h and build information.
//
// Each area binds itself from its own file (model.cpp, tokenizer.cpp, softmax.cpp); this file
// only calls them. The Python-facing package is python/minigpt/core.py.
#include "common.h"

#include "core/device_info.h"
#include "core/error.h"
#include "minigpt/build_info.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <mutex>

namespace minigpt::py {

void bind_model(nb::module_& m);
void bind_tokenizer(nb::module_& m);
void bind_softmax(nb::module_& m);

// ---------------------------------------------------------------------------- thread pool

namespace {
std::mutex pool_mutex;
std::shared_ptr<ThreadPool> pool = nullptr;  // created on first use, 1 thread
}  // namespace

std::shared_ptr<ThreadPool> current_pool() {
  std::lock_guard<std::mutex> lock(pool_mutex);
  if (!pool) pool = std::make_shared<ThreadPool>(1);
  return pool;
}

void set_num_threads(int threads) {
  if (threads < 1) throw nb::value_error(("threads must be >= 1, got " + std::to_string(threads)).c_str());
  auto fresh = std::make_shared<ThreadPool>(threads);
  std::lock_guard<std::mutex> lock(pool_mutex);
  pool = std::move(fresh);
}

int get_num_threads() { return current_pool()->size(); }

// ---------------------------------------------------------------------------- arrays

std::string shape_of(const AnyArray& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

static bool c_contiguous(const AnyArray& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;  // no elements: strides are meaningless
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

void check_f32(const AnyArray& a, const std::string& what, int ndim) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error((what + ": expected a CPU (NumPy) array").c_str());
  if (a.dtype() != nb::dtype<float>())
    throw nb::type_error((what + ": expected dtype float32 (np.float32); convert with "
                          "np.asarray(x, dtype=np.float32)").c_str());
  if (ndim >= 0 && static_cast<int>(a.ndim()) != ndim)
    throw nb::value_error((what + ": expected " + std::to_string(ndim) + " dimensions, got shape " +
                           shape_of(a)).c_str());
  if (!c_contiguous(a))
    throw nb::value_error((what + ": expected a C-contiguous array; use np.ascontiguousarray(x)").c_str());
}

Tensor to_tensor(const AnyArray& a, const std::string& what) {
  check_f32(a, what);
  Shape shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
  Tensor t = Tensor::empty(shape);
  if (t.numel()) std::memcpy(t.data(), a.data(), t.nbytes());
  return t;
}

std::vector<int32_t> to_ids(const AnyArray& a, const std::string& what, int64_t& B, int64_t& T) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error((what + ": expected a CPU (NumPy) array").c_str());
  if (a.ndim() != 2)
    throw nb::value_error((what + ": expected shape (B, T), got " + shape_of(a)).c_str());
  const bool i32 = a.dtype() == nb::dtype<int32_t>(), i64 = a.dtype() == nb::dtype<int64_t>();
  if (!i32 && !i64) throw nb::type_error((what + ": expected dtype int32 or int64").c_str());
  B = static_cast<int64_t>(a.shape(0));
  T = static_cast<int64_t>(a.shape(1));
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  const int64_t s0 = a.stride(0), s1 = a.stride(1);  // in elements
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = b * s0 + t * s1;
      int64_t v = i32 ? static_cast<const int32_t*>(a.data())[at] : static_cast<const int64_t*>(a.data())[at];
      if (v < INT32_MIN || v > INT32_MAX)
        throw nb::value_error((what + ": token id " + std::to_string(v) + " is out of range").c_str());
      ids[static_cast<size_t>(b * T + t)] = static_cast<int32_t>(v);
    }
  }
  return ids;
}

NumpyF32 to_numpy(const Tensor& t) {
  MINIGPT_CHECK(t.defined() && t.device() == Device::CPU && t.is_contiguous(),
                "to_numpy: expected a contiguous CPU tensor, got {}", t.defined() ? t.str() : "undefined");
  auto* holder = new Tensor(t);
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  return NumpyF32(holder->data(), shape.size(), shape.data(), owner);
}

}  // namespace minigpt::py

NB_MODULE(_minigpt_core, m) {
  using namespace minigpt::py;
  m.doc() = "minigpt.cpp engine: model files, forward/backward, tokenizer, softmax kernels";

  nb::exception<minigpt::Error>(m, "Error", PyExc_RuntimeError);

  m.def("set_num_threads", &set_num_threads, nb::arg("threads"),
        "Number of CPU threads every call of this module uses (default 1).");
  m.def("get_num_threads", &get_num_threads);

  m.def("build_info", []() {
    nb::dict d;
    d["version"] = minigpt::build::kVersion;
    d["git_revision"] = minigpt::build::kGitRevision;
    d["build_type"] = minigpt::build::kBuildType;
    d["compiler"] = minigpt::build::kCompiler;
    d["cuda"] = static_cast<bool>(MINIGPT_WITH_CUDA);
    d["cuda_version"] = minigpt::build::kCudaVersion;
    d["cpu"] = minigpt::cpu_info().brand;
    d["cpu_features"] = minigpt::cpu_info().features();
    d["gpus"] = static_cast<int>(minigpt::gpu_info().size());
    return d;
  }, "Which build this module is: version, git revision, compiler, CUDA, CPU features, GPUs seen.");

  bind_model(m);
  bind_tokenizer(m);
  bind_softmax(m);
}
