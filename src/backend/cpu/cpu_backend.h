// The CPU backend: weights used in place from the file's map, activations and state in host
// memory, work spread over a thread pool.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace cera {

struct CpuBackendOptions {
  int n_threads = 0;  // 0: all hardware threads
  // K and V stored rounded to f16 values (still as f32): what a backend with an f16 KV cache
  // computes, so that tests can hold it to the CPU's results at fp32 tolerances.
  bool round_kv_to_f16 = false;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace cera
