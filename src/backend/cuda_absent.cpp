// Stands in for the CUDA backend in a build without nvcc: the factory explains how to get one.
#include "backend/cuda/cuda_backend.h"
#include "cera/error.h"

namespace cera {

std::string cuda_unavailable_reason() {
  return "this cera was built without CUDA (nvcc was not found; install the CUDA toolkit and rebuild)";
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions&) {
  throw Error(ErrorCode::Unsupported, cuda_unavailable_reason());
}

}  // namespace cera
