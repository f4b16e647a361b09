// Host buffers that a backend's device-to-host copies can fill directly. While a CUDA backend
// exists they are page-locked (cudaHostAlloc): a copy into pageable memory goes through a staging
// buffer and a second, host-side copy, which a synchronous decode step waits for (a 256 KB logits
// row a token on LFM2). Otherwise they are plain heap memory. Either way 64-byte aligned.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
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
  // resize() default-initialises what it adds (floats: left unset) instead of zeroing it: these
  // buffers are filled by a device copy right after they grow, and zeroing a 513 KB logits row
  // first cost a memset per token on the host.
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  friend bool operator==(const HostAllocator&, const HostAllocator&) { return true; }
};

// What the engine reads logits into.
template <class T>
using HostVector = std::vector<T, HostAllocator<T>>;

}  // namespace cera
