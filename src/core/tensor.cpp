// Tensor and Storage: shapes, strides, views and device copies.
#include "core/tensor.h"

#include "core/cuda_memory.h"
#include "core/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace minigpt {

const char* device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

int64_t shape_numel(const Shape& shape) {
  // The product of the non-zero dimensions must fit too: strides are computed from it even
  // when another dimension is 0 (a (0, 2^32, 2^32) shape has 0 elements but overflowing strides).
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    MINIGPT_CHECK(d >= 0, "negative dimension {} in shape {}", d, shape_str(shape));
    if (d == 0) {
      empty = true;
      continue;
    }
    MINIGPT_CHECK(nonzero <= std::numeric_limits<int64_t>::max() / d,
                  "shape {} overflows a 64-bit element count", shape_str(shape));
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

Storage::Storage(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  if (device == Device::CPU) {
    constexpr size_t kAlign = 64;
    data_ = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    MINIGPT_CHECK(data_ != nullptr, "out of host memory allocating {} bytes", bytes);
  } else {
    data_ = cuda_memory::allocate(bytes);
  }
}

Storage::~Storage() {
  if (device_ == Device::CPU) std::free(data_);
  else cuda_memory::release(data_);
}

static std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::empty(const Shape& shape, Device device) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  MINIGPT_CHECK(static_cast<uint64_t>(t.numel_) <= std::numeric_limits<size_t>::max() / sizeof(float),
                "tensor of shape {} is too large", shape_str(shape));
  t.storage_ = std::make_shared<Storage>(device, static_cast<size_t>(t.numel_) * sizeof(float));
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::zeros(const Shape& shape) { return full(shape, 0.0f); }

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_data(const Shape& shape, std::span<const float> values) {
  Tensor t = empty(shape);
  MINIGPT_CHECK(static_cast<int64_t>(values.size()) == t.numel_,
                "from_data: {} values for shape {}", values.size(), shape_str(shape));
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  if (d < 0) d += n;
  MINIGPT_CHECK(d >= 0 && d < n, "dimension {} out of range for a {}-d tensor", d, n);
  return shape_[static_cast<size_t>(d)];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

float* Tensor::device_data() const {
  if (!storage_) return nullptr;
  return static_cast<float*>(storage_->data()) + offset_;
}

float* Tensor::data() {
  MINIGPT_CHECK(device_ == Device::CPU, "data() on a {} tensor; use device_data()", device_name(device_));
  return device_data();
}

const float* Tensor::data() const {
  MINIGPT_CHECK(device_ == Device::CPU, "data() on a {} tensor; use device_data()", device_name(device_));
  return device_data();
}

std::span<float> Tensor::span() {
  MINIGPT_CHECK(is_contiguous(), "span() needs a contiguous tensor, got {}", str());
  return {data(), static_cast<size_t>(numel_)};
}

std::span<const float> Tensor::span() const {
  MINIGPT_CHECK(is_contiguous(), "span() needs a contiguous tensor, got {}", str());
  return {data(), static_cast<size_t>(numel_)};
}

float& Tensor::at(std::initializer_list<int64_t> index) {
  MINIGPT_CHECK(static_cast<int64_t>(index.size()) == dim(), "at(): {} indices for a {}-d tensor",
                index.size(), dim());
  int64_t off = 0;
  size_t d = 0;
  for (int64_t i : index) {
    MINIGPT_CHECK(i >= 0 && i < shape_[d], "at(): index {} out of range for dimension {} of {}", i,
                  d, shape_str(shape_));
    off += i * strides_[d++];
  }
  return data()[off];
}

float Tensor::at(std::initializer_list<int64_t> index) const {
  return const_cast<Tensor*>(this)->at(index);
}

Tensor Tensor::view(const Shape& shape) const {
  MINIGPT_CHECK(is_contiguous(), "view() needs a contiguous tensor, got {}", str());
  MINIGPT_CHECK(shape_numel(shape) == numel_, "cannot view {} as {}", shape_str(shape_),
                shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::narrow0(int64_t begin, int64_t end) const {
  MINIGPT_CHECK(dim() >= 1, "narrow0() on a 0-d tensor");
  MINIGPT_CHECK(0 <= begin && begin <= end && end <= shape_[0], "narrow0({}, {}) out of range for {}",
                begin, end, shape_str(shape_));
  Tensor t = *this;
  t.offset_ += begin * strides_[0];
  t.shape_[0] = end - begin;
  t.numel_ = shape_numel(t.shape_);
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::fill(float value) {
  MINIGPT_CHECK(is_contiguous(), "fill() needs a contiguous tensor");
  std::fill_n(data(), numel_, value);
}

void Tensor::copy_from(const Tensor& src) {
  MINIGPT_CHECK(src.shape_ == shape_, "copy_from: shape {} into {}", shape_str(src.shape_),
                shape_str(shape_));
  MINIGPT_CHECK(src.is_contiguous() && is_contiguous(), "copy_from needs contiguous tensors");
  const size_t bytes = nbytes();
  if (bytes == 0) return;
  if (device_ == Device::CPU && src.device_ == Device::CPU) std::memcpy(device_data(), src.device_data(), bytes);
  else if (device_ == Device::CUDA && src.device_ == Device::CPU) cuda_memory::copy_to_device(device_data(), src.device_data(), bytes);
  else if (device_ == Device::CPU && src.device_ == Device::CUDA) cuda_memory::copy_to_host(device_data(), src.device_data(), bytes);
  else cuda_memory::copy_device_to_device(device_data(), src.device_data(), bytes);
}

std::string Tensor::str() const {
  return "Tensor" + shape_str(shape_) + " " + device_name(device_);
}

void check_shape(const Tensor& t, const Shape& expected, const std::string& what) {
  MINIGPT_CHECK(t.defined(), "{}: tensor is missing (expected shape {})", what, shape_str(expected));
  MINIGPT_CHECK(t.shape() == expected, "{}: expected shape {}, got {}", what, shape_str(expected),
                shape_str(t.shape()));
}

}  // namespace minigpt
