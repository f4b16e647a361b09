// Owning handles for device and pinned host memory (freed on destruction; growth reallocates, so
// whoever captured a graph over the old address must drop it — see CudaBackend::invalidate_graphs).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/check.h"

namespace cera::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { reset(bytes); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  void reset(size_t bytes) {
    release();
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      throw Error(ErrorCode::OutOfRange, "out of GPU memory allocating " + std::to_string(bytes >> 20) +
                                             " MiB (try a smaller context -c, batch -b or fewer sequences)");
    }
    CERA_CUDA_CHECK(e);
    bytes_ = bytes;
  }
  // Grows to at least `bytes` (contents are not kept); returns whether it reallocated.
  bool ensure(size_t bytes) {
    if (bytes <= bytes_) return false;
    reset(bytes);
    return true;
  }
  // The same for counters that kernels leave at zero when they finish: a new buffer is zeroed on
  // `stream` before any kernel reads it.
  bool ensure_zeroed(size_t bytes, cudaStream_t stream) {
    if (!ensure(bytes)) return false;
    CERA_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes_, stream));
    return true;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  bool ensure(size_t bytes) {
    if (bytes <= bytes_) return false;
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    CERA_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
    bytes_ = bytes;
    return true;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t capacity() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace cera::cuda
