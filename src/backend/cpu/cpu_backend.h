// The CPU backend: weights used in place from the file's map, activations and state in host
// memory, work spread over a thread pool.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace cera {

struct CpuBackendOptions {
  int n_threads = 0;  // 0: all hardware threads
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace cera
