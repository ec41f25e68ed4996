// CudaArena (cuda_arena.h): bump allocation over one cuda_memory::allocate.
#include "core/cuda_arena.h"

#include "core/cuda_memory.h"
#include "core/error.h"

#include <limits>
#include <utility>

namespace minigpt {

CudaArena::CudaArena(size_t bytes) {
  MINIGPT_CHECK(bytes <= std::numeric_limits<size_t>::max() - kAlignment,
                "CUDA arena: {} bytes is too large", bytes);
  capacity_ = aligned(bytes > 0 ? bytes : 1);
  try {
    base_ = cuda_memory::allocate(capacity_);
  } catch (const Error& e) {
    MINIGPT_FAIL("CUDA arena: could not allocate {} bytes ({:.1f} MiB) on the GPU: {}", capacity_,
                 static_cast<double>(capacity_) / (1 << 20), e.what());
  }
}

CudaArena::~CudaArena() { release(); }

void CudaArena::release() noexcept {
  cuda_memory::release(base_);
  base_ = nullptr;
  capacity_ = used_ = 0;
  slots_.clear();
}

CudaArena::CudaArena(CudaArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      used_(std::exchange(other.used_, 0)),
      slots_(std::move(other.slots_)) {}

CudaArena& CudaArena::operator=(CudaArena&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
    slots_ = std::move(other.slots_);
  }
  return *this;
}

size_t CudaArena::checked_bytes(int64_t count, size_t elem, const std::string& name) {
  MINIGPT_CHECK(count >= 0, "CUDA arena: slot '{}' asks for {} elements", name, count);
  MINIGPT_CHECK(static_cast<uint64_t>(count) <= std::numeric_limits<size_t>::max() / elem / 2,
                "CUDA arena: slot '{}' of {} elements of {} bytes overflows", name, count, elem);
  return static_cast<size_t>(count) * elem;
}

void* CudaArena::allocate(size_t bytes, const std::string& name) {
  MINIGPT_CHECK(base_ != nullptr, "CUDA arena: slot '{}' asked of an arena that was moved from", name);
  const size_t need = aligned(bytes > 0 ? bytes : 1);
  MINIGPT_CHECK(need <= remaining(),
                "CUDA arena out of memory: slot '{}' asks for {} bytes ({} aligned) but only {} of "
                "{} bytes are left",
                name, bytes, need, remaining(), capacity_);
  const size_t offset = used_;
  used_ += need;
  slots_.push_back({name, offset, bytes});
  return static_cast<char*>(base_) + offset;
}

void CudaArena::reset() {
  used_ = 0;
  slots_.clear();
}

std::string CudaArena::dump() const {
  std::string out;
  for (const Slot& s : slots_) out += fmt::format("{:>10} {:>10} {}\n", s.offset, s.bytes, s.name);
  out += fmt::format("used {} of {} bytes\n", used_, capacity_);
  return out;
}

}  // namespace minigpt
