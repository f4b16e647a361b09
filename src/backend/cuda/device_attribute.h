// Attributes of the current CUDA device (SM count, shared-memory limits, ...), read once per device
// and cached: launchers size their grids from them on every call, inside graph captures too.
#pragma once

#include <cuda_runtime.h>

namespace cera::cuda {

int current_device_attribute(cudaDeviceAttr attr);

}  // namespace cera::cuda
