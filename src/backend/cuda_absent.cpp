// Stands in for the CUDA backend in a build without nvcc: the factory explains how to get one.
#include <cstdlib>
#include <new>

#include "backend/cuda/cuda_backend.h"
#include "backend/host_memory.h"
#include "cera/error.h"

namespace cera {

std::string cuda_unavailable_reason() {
  return "this cera was built without CUDA (nvcc was not found; install the CUDA toolkit and rebuild)";
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions&) {
  throw Error(ErrorCode::Unsupported, cuda_unavailable_reason());
}

// No CUDA, no page-locked memory: host buffers are heap memory.
void host_memory_pin(bool) {}
void* host_memory_alloc(size_t bytes) {  // 64-byte aligned, as with CUDA
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) throw std::bad_alloc();
  return p;
}
void host_memory_free(void* p) noexcept { std::free(p); }

}  // namespace cera
