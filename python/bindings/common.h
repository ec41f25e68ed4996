// Shared helpers of the nanobind module _minigpt_core: NumPy <-> Tensor conversion with clear
// errors, and the module's thread pool.
//
// Inputs are checked here, before any C++ runs: float arrays must be float32, C-contiguous,
// on the CPU, with the expected number of dimensions; token ids int32 or int64. A wrong input
// is a TypeError or ValueError naming the argument and what was expected, never a crash.
// Outputs are NumPy arrays that share a Tensor's storage (no copy): the capsule owning the
// array holds a reference to the Tensor.
//
// Not here: the bindings themselves (model.cpp, tokenizer.cpp, softmax.cpp, module.cpp).
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace minigpt::py {

namespace nb = nanobind;

// A read-only view of any array-like argument (any dtype, any strides), checked by the helpers.
using AnyArray = nb::ndarray<nb::ro>;
using NumpyF32 = nb::ndarray<nb::numpy, float>;

// The pool every binding runs on. set_num_threads replaces it; a computation in flight keeps
// the pool it started with (shared_ptr), so resizing from another Python thread is safe.
std::shared_ptr<ThreadPool> current_pool();
void set_num_threads(int threads);
int get_num_threads();

// Throws nb::type_error / nb::value_error naming `what` unless a is float32, C-contiguous,
// on the CPU, and (when ndim >= 0) has exactly ndim dimensions.
void check_f32(const AnyArray& a, const std::string& what, int ndim = -1);

// A contiguous copy of a checked float32 array as a Tensor of the same shape.
Tensor to_tensor(const AnyArray& a, const std::string& what);

// Token ids (B, T) as int32 row-major. Accepts int32 or int64 (any strides); int64 values
// outside the int32 range are a ValueError. B and T are returned through the references.
std::vector<int32_t> to_ids(const AnyArray& a, const std::string& what, int64_t& B, int64_t& T);

// A NumPy array sharing t's storage (t must be a contiguous CPU tensor).
NumpyF32 to_numpy(const Tensor& t);

// "(2, 16)" for an array argument, for error messages.
std::string shape_of(const AnyArray& a);

}  // namespace minigpt::py
