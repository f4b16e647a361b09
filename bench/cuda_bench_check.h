// What the CUDA benchmarks share: CHECK(cuda call) prints what failed and exits(1) (a benchmark has
// no error path worth more than that), and the device probe.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(expr)                                                           \
  do {                                                                        \
    const cudaError_t e_ = (expr);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// Device 0's properties, or nothing (after saying so) when there is no CUDA device: the caller
// then exits 0, as a benchmark run on a machine without a GPU has nothing to measure.
inline bool first_cuda_device(cudaDeviceProp& prop) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return false;
  }
  CHECK(cudaGetDeviceProperties(&prop, 0));
  return true;
}
