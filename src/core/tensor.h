// minigpt::Tensor: an fp32 n-dimensional array with shape, strides and shared storage.
//
// What it is: the value type every layer passes around. Storage lives on the CPU or on a CUDA
// device and is reference counted, so copies of a Tensor are cheap views of the same bytes.
// What it is not: an autograd tensor or an expression graph. Kernels take raw pointers from
// data() and shapes from shape(); the compiler (compile/) has its own IR.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minigpt {

enum class Device { CPU, CUDA };
const char* device_name(Device device);

using Shape = std::vector<int64_t>;

// Product of the dimensions, with an overflow check (throws Error on overflow or a negative
// dimension). Every size computed from untrusted input goes through this.
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2, 16, 600)"

// Bytes on one device. CPU storage is 64-byte aligned (one cache line, one AVX-512 vector).
class Storage {
 public:
  Storage(Device device, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }
  void* data() const { return data_; }

 private:
  Device device_;
  size_t bytes_;
  void* data_ = nullptr;
};

class Tensor {
 public:
  Tensor() = default;  // an empty handle: defined() is false

  // Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape);                   // CPU
  static Tensor full(const Shape& shape, float value);       // CPU
  static Tensor from_data(const Shape& shape, std::span<const float> values);  // CPU copy

  bool defined() const { return storage_ != nullptr; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end, as in PyTorch
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * sizeof(float); }
  bool is_contiguous() const;

  // Raw element pointers (offset applied). data() throws on a CUDA tensor: use device_data().
  float* data();
  const float* data() const;
  float* device_data() const;  // any device, no check
  std::span<float> span();     // CPU, contiguous
  std::span<const float> span() const;

  // Element access for tests and small tools (bounds checked, slow).
  float at(std::initializer_list<int64_t> index) const;
  float& at(std::initializer_list<int64_t> index);

  // Same storage, new shape; the tensor must be contiguous and numel must match.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor narrow0(int64_t begin, int64_t end) const;
  // Deep copy (contiguous) on the same device, or onto another device.
  Tensor clone() const;
  Tensor to(Device device) const;
  void fill(float value);  // CPU
  void copy_from(const Tensor& src);  // same shape, any devices

  std::string str() const;  // "Tensor(2, 16, 64) cpu"

 private:
  std::shared_ptr<Storage> storage_;
  Device device_ = Device::CPU;
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
};

// Throws Error naming `what` unless t has exactly `expected` as its shape.
void check_shape(const Tensor& t, const Shape& expected, const std::string& what);

}  // namespace minigpt
