#include "backend/cuda/device_attribute.h"

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/check.h"

namespace cera::cuda {

int current_device_attribute(cudaDeviceAttr attr) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> cache;  // (device, attribute) -> value
  int dev = 0;
  CERA_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = cache.try_emplace({dev, int(attr)}, 0);
  if (inserted) CERA_CUDA_CHECK(cudaDeviceGetAttribute(&it->second, attr, dev));
  return it->second;
}

}  // namespace cera::cuda
