// Decode matvec throughput on the GPU: for each weight type, the LFM2-1.2B FFN shapes and a
// vocabulary-sized head, weight bytes streamed per second (the kernel's job is to run at HBM speed).
// Several copies of each matrix are cycled so that the 60 MB L2 does not serve repeats.
//   cera_bench_cuda_matvec [n_x_rows (default 1)] [reps (default 200)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "format/ggml_type.h"
#include "format/quant.h"

namespace {

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_));                    \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr double kPeakBytesPerSec = 4.0e12;

}  // namespace

int main(int argc, char** argv) {
  using cera::GgmlType;
  const int nx = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB; n_x_rows=%d, %d reps; GB/s = weight bytes / time\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, nx, reps);
  std::printf("%-6s %-13s %10s %10s %8s %7s\n", "type", "shape", "MB", "us", "GB/s", "of 4TB/s");

  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q6_K,
                            GgmlType::Q5_K, GgmlType::Q5_1, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q4_1,
                            GgmlType::Q4_0, GgmlType::Q3_K, GgmlType::Q2_K};
  const struct { int64_t n_rows, k; } shapes[] = {{8192, 2048}, {2048, 8192}, {65536, 2048}};

  // One random row pattern, quantized per type and tiled over the matrix (content does not matter
  // for speed; quantizing every row on the host would dominate the run time).
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> row(8192);
  for (auto& v : row) v = nd(rng);

  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, sizeof(float) * 8192 * 8));
  CHECK(cudaMalloc(&dy, sizeof(float) * 65536 * 8));
  CHECK(cudaMemset(dx, 0, sizeof(float) * 8192 * 8));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  for (GgmlType t : types) {
    for (const auto& s : shapes) {
      const size_t row_bytes = cera::ggml_row_bytes(t, s.k);
      const size_t bytes = row_bytes * size_t(s.n_rows);
      std::vector<uint8_t> qrow(row_bytes), host(bytes);
      cera::quant::quantize_row_ref(t, row.data(), qrow.data(), s.k);
      for (int64_t r = 0; r < s.n_rows; ++r) std::copy(qrow.begin(), qrow.end(), host.begin() + r * row_bytes);
      // Enough copies to exceed the L2 several times over.
      const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / bytes + 1));
      std::vector<void*> bufs(static_cast<size_t>(copies));
      for (auto& b : bufs) {
        CHECK(cudaMalloc(&b, bytes));
        if (&b == &bufs[0]) CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
        else CHECK(cudaMemcpy(b, bufs[0], bytes, cudaMemcpyDeviceToDevice));
      }
      for (int i = 0; i < copies; ++i)  // warm-up
        cera::cuda::matvec(t, bufs[size_t(i)], s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, s.n_rows, nullptr);
      CHECK(cudaEventRecord(e0));
      for (int i = 0; i < reps; ++i)
        cera::cuda::matvec(t, bufs[size_t(i % copies)], s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, s.n_rows, nullptr);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const double sec = double(ms) / 1e3 / reps;
      const double gbs = double(bytes) / sec / 1e9;
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.n_rows, (long long)s.k);
      std::printf("%-6s %-13s %10.2f %10.2f %8.0f %7.1f%%\n", std::string(cera::ggml_type_name(t)).c_str(), shape,
                  double(bytes) / 1e6, sec * 1e6, gbs, 100.0 * gbs * 1e9 / kPeakBytesPerSec);
      for (auto b : bufs) CHECK(cudaFree(b));
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
