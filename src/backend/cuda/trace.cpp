#include "backend/cuda/trace.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

namespace cera::cuda::trace {
namespace {
std::vector<Binder>& binders() {
  static std::vector<Binder> b;
  return b;
}
Sink* g_device_sink = nullptr;  // the Sink struct on the device
Record* g_records = nullptr;
}  // namespace

bool register_binder(Binder b) {
  binders().push_back(b);
  return true;
}

bool compiled_in() {
#ifdef CERA_CUDA_TRACE
  return true;
#else
  return false;
#endif
}

void start(size_t capacity) {
  if (!compiled_in() || g_device_sink) return;
  if (cudaMalloc(&g_records, capacity * sizeof(Record)) != cudaSuccess ||
      cudaMalloc(&g_device_sink, sizeof(Sink)) != cudaSuccess) {
    std::fprintf(stderr, "cera: CUDA trace: could not allocate %zu records\n", capacity);
    return;
  }
  const Sink s{0, capacity, g_records};
  cudaMemcpy(g_device_sink, &s, sizeof s, cudaMemcpyHostToDevice);
  for (Binder b : binders()) b(g_device_sink);
  std::fprintf(stderr, "cera: CUDA trace: recording %zu blocks' start and wait times (%zu units)\n", capacity,
               binders().size());
}

void stop_and_write(const std::string& path) {
  if (!g_device_sink) return;
  cudaDeviceSynchronize();
  for (Binder b : binders()) b(nullptr);
  Sink s{};
  cudaMemcpy(&s, g_device_sink, sizeof s, cudaMemcpyDeviceToHost);
  const size_t n = size_t(s.n < s.cap ? s.n : s.cap);
  std::vector<Record> r(s.cap);
  cudaMemcpy(r.data(), g_records, s.cap * sizeof(Record), cudaMemcpyDeviceToHost);
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "grid,block,blocks,threads,sm,t_start,t_wait\n");
    for (size_t k = 0; k < n; ++k) {
      const Record& x = r[size_t((s.n - n + k) % s.cap)];
      std::fprintf(f, "%llu,%u,%u,%u,%u,%llu,%llu\n", x.grid, x.block, x.blocks, x.threads, x.sm, x.t_start,
                   x.t_wait);
    }
    std::fclose(f);
    std::fprintf(stderr, "cera: CUDA trace: %zu records (of %llu) written to %s\n", n, s.n, path.c_str());
  } else {
    std::fprintf(stderr, "cera: CUDA trace: cannot write %s\n", path.c_str());
  }
  cudaFree(g_records);
  cudaFree(g_device_sink);
  g_records = nullptr;
  g_device_sink = nullptr;
}

}  // namespace cera::cuda::trace
