// Host buffers that a backend's device-to-host copies can fill directly. While a CUDA backend
// exists they are page-locked (cudaHostAlloc): a copy into pageable memory goes through a staging
// buffer and a second, host-side copy, which a synchronous decode step waits for (a 256 KB logits
// row a token on LFM2). Otherwise they are plain heap memory. Either way 64-byte aligned.
#pragma once

#include <cstddef>
#include <vector>

namespace cera {

void* host_memory_alloc(size_t bytes);  // throws std::bad_alloc
void host_memory_free(void* p) noexcept;
// Whether later allocations are page-locked: the CUDA backend turns it on when it is created.
void host_memory_pin(bool on);

template <class T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <class U>
  HostAllocator(const HostAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(host_memory_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t) noexcept { host_memory_free(p); }
  friend bool operator==(const HostAllocator&, const HostAllocator&) { return true; }
};

// What the engine reads logits into.
template <class T>
using HostVector = std::vector<T, HostAllocator<T>>;

}  // namespace cera
