// CudaArena: one device allocation made up front, handed out as aligned, named slots by a bump
// pointer; reset() forgets every slot at once. What a CUDA step needs (activations, the KV
// cache, a captured graph's inputs and outputs) is carved from it before the step is captured,
// so nothing is allocated inside a step and a graph's pointers stay valid while the arena lives.
//
// What it does not do: free single slots, grow, or synchronise. reset() does not wait for
// kernels still reading old slots: the caller synchronises its stream first. Host code over
// core/cuda_memory.h, so it compiles without CUDA (constructing one then throws the build's
// "built without CUDA" Error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace minigpt {

class CudaArena {
 public:
  static constexpr size_t kAlignment = 256;  // cudaMalloc's own alignment: any vector load fits

  // One cudaMalloc of `bytes` (rounded up to kAlignment); Error naming the size on failure.
  explicit CudaArena(size_t bytes);
  ~CudaArena();
  CudaArena(const CudaArena&) = delete;
  CudaArena& operator=(const CudaArena&) = delete;
  CudaArena(CudaArena&& other) noexcept;
  CudaArena& operator=(CudaArena&& other) noexcept;

  // The next `bytes` (rounded up to kAlignment; 0 gives a valid, unique, 1-alignment slot),
  // named for error messages and dump(). Error naming the slot, the bytes asked for and the
  // bytes left when the arena is full.
  void* allocate(size_t bytes, const std::string& name);
  template <class T>
  T* allocate_array(int64_t count, const std::string& name) {
    return static_cast<T*>(allocate(checked_bytes(count, sizeof(T), name), name));
  }
  float* floats(int64_t count, const std::string& name) { return allocate_array<float>(count, name); }

  void reset();  // every slot forgotten; the device memory is kept

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t remaining() const { return capacity_ - used_; }
  void* base() const { return base_; }

  struct Slot {
    std::string name;
    size_t offset, bytes;
  };
  const std::vector<Slot>& slots() const { return slots_; }
  std::string dump() const;  // one line per slot: offset, bytes, name

  // Bytes a slot of `bytes` takes in an arena (with its alignment): for sizing an arena from a
  // list of slots before constructing it.
  static size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  static size_t checked_bytes(int64_t count, size_t elem, const std::string& name);
  void release() noexcept;

  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::vector<Slot> slots_;
};

}  // namespace minigpt
