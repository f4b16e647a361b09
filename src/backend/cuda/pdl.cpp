#include "backend/cuda/pdl.h"

#include <cstdlib>
#include <string>

namespace cera::cuda {

bool pdl_enabled() {
  static const bool on = [] {
    if (const char* v = std::getenv("CERA_CUDA_PDL"); v && std::string(v) == "0") return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return on;
}

}  // namespace cera::cuda
