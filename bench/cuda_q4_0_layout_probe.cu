// A candidate GPU layout for Q4_0 weights, measured before the backend adopts it (the backend keeps
// GGML's layout today). Batch-1 decode of Q4_0 runs at ~25-35 % of HBM bandwidth: the int8 kernel
// (int8_dot.cuh) stages each tile of 18-byte blocks through shared memory and rebuilds each lane's
// 2-byte-aligned nibble words with funnel shifts. The probe repacks each row into super-blocks of 8
// blocks, [8 f16 scales][8 × 16 bytes of nibbles] (the same 144 bytes), so a lane loads its 8 bytes
// of nibbles straight from global memory into registers with one aligned 8-byte load and its scale
// with one 2-byte load, as the BF16 path does: no stage, no shifts. Same int8 rounding of x
// (quantize_x16), so the outputs agree with cuda::matvec up to summation order; the table checks it.
//   cera_bench_cuda_q4_0_layout [reps (default 200)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cuda/int8_dot.cuh"
#include "backend/cuda/quant_kernels.h"
#include "cuda_bench_check.h"
#include "format/ggml_type.h"
#include "format/quant.h"

namespace {

using cera::cuda::detail::h2f;
using cera::cuda::detail::quantize_x16;
using cera::cuda::detail::XHalfI8;

constexpr double kPeakBytesPerSec = 4.0e12;
constexpr int kRows = 8;      // weight rows per block, as the production int8 kernel
constexpr int kMaxWarps = 8;  // each warp takes every n_warps-th tile of 512 elements (16 blocks)
constexpr int kTile = 512;
constexpr int kSuperBytes = 144;  // 8 blocks: 16 bytes of scales, 128 of nibbles

__device__ __forceinline__ uint2 ld_stream_u2(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// y[n] = Σ_k W[n][k] x[k] over repacked rows (k a multiple of 512).
__global__ void __launch_bounds__(kMaxWarps * 32)
    matvec_q4_0_super(const uint8_t* __restrict__ w, int64_t n_rows, int64_t k, size_t row_bytes,
                      const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float red[kMaxWarps][kRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  const int half = lane & 1, blk = lane >> 1;
  for (int64_t tile = warp; tile < k / kTile; tile += n_warps) {
    const int64_t b = tile * 16 + blk;  // this lane pair's block of the row
    const int64_t off = (b >> 3) * kSuperBytes;
    const int s = int(b & 7);
    uint2 q[kRows];
    uint32_t d[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* row = w + size_t(min(row0 + r, n_rows - 1)) * row_bytes + off;
      q[r] = ld_stream_u2(row + 16 + 16 * s + 8 * half);
      d[r] = __ldg(reinterpret_cast<const unsigned short*>(row) + s);
    }
    float v[16];
    const float4* xp = reinterpret_cast<const float4*>(x + 32 * b);
    const float4 a0 = xp[2 * half], a1 = xp[2 * half + 1], b0 = xp[4 + 2 * half], b1 = xp[4 + 2 * half + 1];
    const float4 parts[4] = {a0, a1, b0, b1};
#pragma unroll
    for (int i = 0; i < 4; ++i) v[4 * i] = parts[i].x, v[4 * i + 1] = parts[i].y, v[4 * i + 2] = parts[i].z, v[4 * i + 3] = parts[i].w;
    XHalfI8 xq;
    quantize_x16(v, xq);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      int dot = -8 * xq.sum;
      dot = __dp4a(int(q[r].x & 0x0F0F0F0Fu), int(xq.q[0]), dot);
      dot = __dp4a(int(q[r].y & 0x0F0F0F0Fu), int(xq.q[1]), dot);
      dot = __dp4a(int((q[r].x >> 4) & 0x0F0F0F0Fu), int(xq.q[2]), dot);
      dot = __dp4a(int((q[r].y >> 4) & 0x0F0F0F0Fu), int(xq.q[3]), dot);
      acc[r] = fmaf(float(dot), __fmul_rn(h2f(d[r]), xq.d), acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < kRows && row0 + threadIdx.x < n_rows) {
    float sum = 0.f;
    for (int i = 0; i < n_warps; ++i) sum += red[i][threadIdx.x];
    y[row0 + threadIdx.x] = sum;
  }
}

// One GGML Q4_0 row → super-blocks: block 8g+s's scale at 144g + 2s, its 16 nibble bytes at
// 144g + 16 + 16s.
void repack_row(const uint8_t* src, uint8_t* dst, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = src + 18 * b;
    uint8_t* sb = dst + (b / 8) * kSuperBytes;
    const int s = int(b % 8);
    std::copy(blk, blk + 2, sb + 2 * s);
    std::copy(blk + 2, blk + 18, sb + 16 + 16 * s);
  }
}

template <class Fn>
double time_calls(const std::vector<void*>& bufs, int reps, cudaEvent_t e0, cudaEvent_t e1, Fn&& fn) {
  for (void* b : bufs) fn(b);
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) fn(bufs[size_t(i) % bufs.size()]);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return double(ms) / 1e3 / reps;
}

// Copies of `host` exceeding the L2 several times over.
std::vector<void*> device_copies(const std::vector<uint8_t>& host) {
  const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / host.size() + 1));
  std::vector<void*> bufs(static_cast<size_t>(copies));
  for (auto& b : bufs) {
    CHECK(cudaMalloc(&b, host.size()));
    CHECK(cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  return bufs;
}

}  // namespace

int main(int argc, char** argv) {
  using cera::GgmlType;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  cudaDeviceProp prop{};
  if (!first_cuda_device(prop)) return 0;
  const struct {
    const char* name;
    int64_t n_rows, k;
  } shapes[] = {{"attn/out 2048", 2048, 2048}, {"in_proj 3x2048", 6144, 2048}, {"gate+up 2x8192", 16384, 2048},
                {"down", 2048, 8192},          {"head 65536", 65536, 2048}};
  std::printf("%s: Q4_0 decode matvec, GGML layout (cuda::matvec, int8) vs repacked super-blocks (probe)\n",
              prop.name);
  std::printf("%-16s %-12s %7s | %8s %6s | %8s %6s | %6s %9s\n", "shape", "n x k", "MB", "ggml us", "of 4TB",
              "probe us", "of 4TB", "speed", "max rel");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  float *dx = nullptr, *dy = nullptr, *dy2 = nullptr;
  CHECK(cudaMalloc(&dx, sizeof(float) * 8192));
  CHECK(cudaMalloc(&dy, sizeof(float) * 65536));
  CHECK(cudaMalloc(&dy2, sizeof(float) * 65536));
  std::vector<float> hx(8192);
  for (auto& v : hx) v = nd(rng);
  CHECK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const bool int8_was_on = cera::cuda::matvec_int8_enabled();
  cera::cuda::matvec_int8_enable(true);
  for (const auto& s : shapes) {
    // 64 distinct random rows, tiled, so the check sees varied rows without a slow host quantize.
    const size_t row_bytes = cera::ggml_row_bytes(GgmlType::Q4_0, s.k);
    std::vector<uint8_t> ggml(row_bytes * size_t(s.n_rows)), super(ggml.size());
    std::vector<float> row(size_t(s.k));
    for (int64_t r = 0; r < std::min<int64_t>(64, s.n_rows); ++r) {
      for (auto& v : row) v = nd(rng);
      cera::quant::quantize_row_ref(GgmlType::Q4_0, row.data(), ggml.data() + size_t(r) * row_bytes, s.k);
    }
    for (int64_t r = 64; r < s.n_rows; ++r)
      std::copy_n(ggml.begin() + (r % 64) * int64_t(row_bytes), row_bytes, ggml.begin() + r * int64_t(row_bytes));
    for (int64_t r = 0; r < s.n_rows; ++r) repack_row(&ggml[size_t(r) * row_bytes], &super[size_t(r) * row_bytes], s.k);
    const std::vector<void*> g = device_copies(ggml), p = device_copies(super);
    const int64_t n_tiles = s.k / kTile;
    const int warps = int(std::min<int64_t>(n_tiles, kMaxWarps));
    const unsigned blocks = unsigned((s.n_rows + kRows - 1) / kRows);
    const double tg = time_calls(g, reps, e0, e1, [&](void* w) {
      cera::cuda::matvec(GgmlType::Q4_0, w, s.n_rows, s.k, row_bytes, dx, s.k, 1, dy, s.n_rows, nullptr);
    });
    const double tp = time_calls(p, reps, e0, e1, [&](void* w) {
      matvec_q4_0_super<<<blocks, warps * 32>>>(static_cast<const uint8_t*>(w), s.n_rows, s.k, row_bytes, dx, dy2);
    });
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> a(size_t(s.n_rows)), b(size_t(s.n_rows));
    CHECK(cudaMemcpy(a.data(), dy, a.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(b.data(), dy2, b.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0, scale = 0;
    for (float v : a) scale = std::max(scale, double(std::fabs(v)));
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / scale);
    const double bytes = double(ggml.size());
    char shape[48];
    std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.n_rows, (long long)s.k);
    std::printf("%-16s %-12s %7.2f | %8.2f %5.1f%% | %8.2f %5.1f%% | %5.2fx %9.1e\n", s.name, shape, bytes / 1e6,
                tg * 1e6, 100.0 * bytes / tg / kPeakBytesPerSec, tp * 1e6, 100.0 * bytes / tp / kPeakBytesPerSec,
                tg / tp, worst);
    for (void* v : g) CHECK(cudaFree(v));
    for (void* v : p) CHECK(cudaFree(v));
  }
  cera::cuda::matvec_int8_enable(int8_was_on);
  return 0;
}
