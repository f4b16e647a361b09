// host_memory.h with CUDA: page-locked while pinning is on, else (or if the driver refuses) the heap.
#include "backend/host_memory.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace cera {
namespace {

std::atomic<bool> g_pin{false};

// Each block starts with a header saying how it was allocated; the caller's memory follows it,
// 64-byte aligned (a cache line: cudaHostAlloc returns pages, the heap path asks for 64).
constexpr size_t kHeader = 64;
enum : uint32_t { kHeap = 0x68656170u, kPinned = 0x70696e64u };

}  // namespace

void host_memory_pin(bool on) { g_pin.store(on); }

void* host_memory_alloc(size_t bytes) {
  void* base = nullptr;
  uint32_t kind = kHeap;
  if (g_pin.load() && cudaHostAlloc(&base, bytes + kHeader, cudaHostAllocPortable) == cudaSuccess) {
    kind = kPinned;
  } else {
    cudaGetLastError();  // a refused pinning is not an error of the next CUDA call
    base = std::aligned_alloc(kHeader, (bytes + 2 * kHeader - 1) / kHeader * kHeader);
    if (!base) throw std::bad_alloc();
  }
  *static_cast<uint32_t*>(base) = kind;
  return static_cast<char*>(base) + kHeader;
}

void host_memory_free(void* p) noexcept {
  if (!p) return;
  void* base = static_cast<char*>(p) - kHeader;
  if (*static_cast<const uint32_t*>(base) == kPinned) {
    cudaFreeHost(base);  // at process exit the context may be gone: nothing to report then
    cudaGetLastError();
  } else {
    std::free(base);
  }
}

}  // namespace cera
