// Row-wise and elementwise kernels: RMSNorm (+ residual add), adds, SwiGLU, row gathers and the
// 16-bit activation copies the GEMM path needs. Arithmetic mirrors backend/cpu/elementwise.cpp
// (sums of squares in double, separate multiply and divide) so the two backends agree closely.
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/store_as.cuh"

namespace cera::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kRowThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < kRowThreads / 32; ++i) total += warp_sums[i];
  return total;
}

// src_rows (gather_rms_norm): block i normalises row src_rows[i] of x into row i of out.
template <bool kAdd>
__global__ void rms_norm_kernel(float* x, int64_t xs, const float* delta, int64_t ds, const float* w, float eps,
                                float* out, int64_t os, int32_t cols, const int32_t* src_rows) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  float* xr = x + int64_t(src_rows ? src_rows[blockIdx.x] : blockIdx.x) * xs;
  double sum = 0;
  for (int32_t c = threadIdx.x; c < cols; c += kRowThreads) {
    float v = xr[c];
    if constexpr (kAdd) {
      v = __fadd_rn(v, delta[int64_t(blockIdx.x) * ds + c]);
      xr[c] = v;
    }
    sum += double(v) * double(v);
  }
  const double total = block_sum(sum);
  const float inv = float(1.0 / sqrt(total / double(cols) + double(eps)));
  float* orow = out + int64_t(blockIdx.x) * os;
  for (int32_t c = threadIdx.x; c < cols; c += kRowThreads) orow[c] = __fmul_rn(w[c], __fmul_rn(xr[c], inv));
}

// The same for rows of at most kRowThreads * 16 columns, a multiple of 4, 16-byte aligned (every
// hidden size in practice): each thread keeps its 16 values in registers between the sum and the
// scaling, so the row is read once instead of twice — it is one block on one SM, and at batch 1 this
// op runs twice per layer, so its latency is what counts.
template <bool kAdd>
__global__ void rms_norm_reg_kernel(float* x, int64_t xs, const float* delta, int64_t ds, const float* w, float eps,
                                    float* out, int64_t os, int32_t cols, const int32_t* src_rows) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  constexpr int kVec = 4;  // float4 per thread, at most
  float4* xr = reinterpret_cast<float4*>(x + int64_t(src_rows ? src_rows[blockIdx.x] : blockIdx.x) * xs);
  const float4* dr = reinterpret_cast<const float4*>(delta + int64_t(blockIdx.x) * ds);
  const int32_t n4 = cols / 4;
  float4 v[kVec];
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int32_t c = threadIdx.x + i * kRowThreads;
    if (c < n4) {
      v[i] = xr[c];
      if constexpr (kAdd) {
        const float4 d = dr[c];
        v[i] = make_float4(__fadd_rn(v[i].x, d.x), __fadd_rn(v[i].y, d.y), __fadd_rn(v[i].z, d.z),
                           __fadd_rn(v[i].w, d.w));
        xr[c] = v[i];
      }
      sum += double(v[i].x) * double(v[i].x) + double(v[i].y) * double(v[i].y) + double(v[i].z) * double(v[i].z) +
             double(v[i].w) * double(v[i].w);
    }
  }
  const double total = block_sum(sum);
  const float inv = float(1.0 / sqrt(total / double(cols) + double(eps)));
  float4* orow = reinterpret_cast<float4*>(out + int64_t(blockIdx.x) * os);
  const float4* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int32_t c = threadIdx.x + i * kRowThreads;
    if (c < n4) {
      const float4 g = w4[c];
      orow[c] = make_float4(__fmul_rn(g.x, __fmul_rn(v[i].x, inv)), __fmul_rn(g.y, __fmul_rn(v[i].y, inv)),
                            __fmul_rn(g.z, __fmul_rn(v[i].z, inv)), __fmul_rn(g.w, __fmul_rn(v[i].w, inv)));
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// 2-D launches: blockIdx.y walks rows (grid-stride), x-threads walk columns.
dim3 grid_2d(int32_t rows, int32_t cols) {
  const unsigned bx = unsigned((cols + 255) / 256);
  return dim3(bx, unsigned(rows < 65535 ? rows : 65535));
}

__global__ void add_kernel(float* x, int64_t xs, const float* d, int64_t ds, int32_t rows, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int32_t r = blockIdx.y; r < rows; r += gridDim.y) x[int64_t(r) * xs + c] += d[int64_t(r) * ds + c];
}

__global__ void scale_kernel(float* x, int64_t xs, float f, int32_t rows, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int32_t r = blockIdx.y; r < rows; r += gridDim.y) x[int64_t(r) * xs + c] *= f;
}

__global__ void add_bias_kernel(float* x, int64_t xs, const float* b, int32_t rows, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int32_t r = blockIdx.y; r < rows; r += gridDim.y) x[int64_t(r) * xs + c] += b[c];
}

template <typename T>
__global__ void swiglu_kernel(const float* g, int64_t gs, const float* u, int64_t us, T* o, int64_t os,
                              int32_t rows, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int32_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float gv = g[int64_t(r) * gs + c];
    const float silu = __fdiv_rn(gv, __fadd_rn(1.f, expf(-gv)));
    o[int64_t(r) * os + c] = store_as<T>(__fmul_rn(silu, u[int64_t(r) * us + c]));
  }
}

// rms_norm (no residual) with a 16-bit dense output: the activation input of the tensor-core GEMM,
// without the f32 copy in between. The arithmetic is rms_norm_kernel's.
template <typename T>
__global__ void rms_norm_16_kernel(const float* x, int64_t xs, const float* w, float eps, T* out, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const float* xr = x + int64_t(blockIdx.x) * xs;
  double sum = 0;
  for (int32_t c = threadIdx.x; c < cols; c += kRowThreads) sum += double(xr[c]) * double(xr[c]);
  const double total = block_sum(sum);
  const float inv = float(1.0 / sqrt(total / double(cols) + double(eps)));
  T* orow = out + int64_t(blockIdx.x) * cols;
  for (int32_t c = threadIdx.x; c < cols; c += kRowThreads) orow[c] = store_as<T>(__fmul_rn(w[c], __fmul_rn(xr[c], inv)));
}

__global__ void gather_kernel(const float* x, int64_t xs, const int32_t* rows, float* out, int64_t os, int32_t cols) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const float* src = x + int64_t(rows[blockIdx.x]) * xs;
  float* dst = out + int64_t(blockIdx.x) * os;
  for (int32_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// argmax over many SMs, so that a row of a large vocabulary is not one block's latency-bound loop
// (that left batch-1 decode waiting ~40 µs on one SM). Block (chunk, row) finds its chunk's best —
// the first non-NaN value, then strictly larger ones; -1 when the chunk is all NaN — and the last
// block of a row to finish (a per-row counter: the threadfence-reduction pattern) merges the row's
// chunks, the smaller column winning ties, so the result is the first maximum of the row whatever
// the split. (One launch: the merge was a second kernel, a step's last, before.)
constexpr int32_t kArgmaxChunk = 4096, kArgmaxThreads = 256;

__device__ __forceinline__ bool argmax_better(float v, int32_t i, float bv, int32_t bi) {
  return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// (bv, bi) becomes the best over the warp (argmax_better is a total order: any order of merging
// gives the same winner).
__device__ __forceinline__ void argmax_warp(float& bv, int32_t& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
  }
}

// With values: also the winning value, and id -1 / value NaN for a row with no non-NaN value (the
// top_k_rows contract for k = 1); without: id 0 for such a row (argmax_rows'). counters: one per
// row, zero before the launch and after it.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* x, int64_t xs, int32_t cols, float* part_v, int32_t* part_i, unsigned* counters,
                  int32_t* out, float* values) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int32_t warp_i[kArgmaxThreads / 32];
  __shared__ bool last;
  const int32_t row = blockIdx.y, n_chunks = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* xr = x + int64_t(row) * xs;
  const int32_t c0 = blockIdx.x * kArgmaxChunk, c1 = min(cols, c0 + kArgmaxChunk);
  float bv = -INFINITY;
  int32_t bi = -1;
#pragma unroll 16
  for (int32_t c = c0 + threadIdx.x; c < c1; c += kArgmaxThreads) {
    const float v = xr[c];
    if (bi < 0 ? v == v : v > bv) {  // ascending c per thread: the first of equal values stays
      bv = v;
      bi = c;
    }
  }
  argmax_warp(bv, bi);
  if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (argmax_better(warp_v[w], warp_i[w], bv, bi)) bv = warp_v[w], bi = warp_i[w];
    part_v[int64_t(row) * n_chunks + blockIdx.x] = bv;
    part_i[int64_t(row) * n_chunks + blockIdx.x] = bi;
    __threadfence();  // this chunk's part is visible device-wide before it is counted
    last = atomicAdd(counters + row, 1u) == unsigned(n_chunks - 1);
    if (last) counters[row] = 0;  // every chunk has counted: ready for the next launch
  }
  __syncthreads();
  if (!last || warp != 0) return;
  __threadfence();
  bv = -INFINITY, bi = -1;
  for (int32_t k = lane; k < n_chunks; k += 32) {
    const float v = __ldcg(part_v + int64_t(row) * n_chunks + k);  // written by other blocks: through L2
    const int32_t i = __ldcg(part_i + int64_t(row) * n_chunks + k);
    if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
  }
  argmax_warp(bv, bi);
  if (lane == 0) {
    if (values) {
      out[row] = bi;
      values[row] = bi < 0 ? __int_as_float(0x7fc00000) : bv;
    } else {
      out[row] = bi < 0 ? 0 : bi;
    }
  }
}

__global__ void sleep_kernel(int64_t ns) {
  const int64_t start = clock64();
  // clock64 counts SM cycles; ~2 GHz on an H200 is close enough for a profiling hold.
  while (clock64() - start < ns * 2) __nanosleep(1000);
}

template <typename T>
__global__ void convert_kernel(const float* x, int64_t xs, int32_t rows, int32_t cols, T* out) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int32_t r = blockIdx.y; r < rows; r += gridDim.y) {
    out[int64_t(r) * cols + c] = store_as<T>(x[int64_t(r) * xs + c]);
  }
}

}  // namespace

namespace {

// rms_norm and gather_rms_norm: one block per output row, x's row src_rows[i] (or i).
void launch_rms_norm(float* x, int64_t xs, const float* delta, int64_t ds, const float* w, float eps, float* out,
                     int64_t os, int32_t rows, int32_t cols, const int32_t* src_rows, cudaStream_t s) {
  if (rows <= 0) return;
  const bool reg = cols % 4 == 0 && cols <= kRowThreads * 16 && xs % 4 == 0 && os % 4 == 0 && aligned16(x) &&
                   aligned16(out) && aligned16(w) && (!delta || (ds % 4 == 0 && aligned16(delta)));
  if (reg && delta)
    launch_pdl(rms_norm_reg_kernel<true>, dim3(rows), dim3(kRowThreads), 0, s, x, xs, delta, ds, w, eps, out, os, cols,
               src_rows);
  else if (reg)
    launch_pdl(rms_norm_reg_kernel<false>, dim3(rows), dim3(kRowThreads), 0, s, x, xs, nullptr, 0, w, eps, out, os,
               cols, src_rows);
  else if (delta)
    launch_pdl(rms_norm_kernel<true>, dim3(rows), dim3(kRowThreads), 0, s, x, xs, delta, ds, w, eps, out, os, cols,
               src_rows);
  else
    launch_pdl(rms_norm_kernel<false>, dim3(rows), dim3(kRowThreads), 0, s, x, xs, nullptr, 0, w, eps, out, os, cols,
               src_rows);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(float* x, int64_t xs, const float* delta, int64_t ds, const float* w, float eps, float* out,
              int64_t os, int32_t rows, int32_t cols, cudaStream_t s) {
  launch_rms_norm(x, xs, delta, ds, w, eps, out, os, rows, cols, nullptr, s);
}

void gather_rms_norm(const float* x, int64_t xs, const int32_t* rows, int32_t n, const float* w, float eps,
                     float* out, int64_t os, int32_t cols, cudaStream_t s) {
  // x is only read without delta (the kernels take it writable for add_rms_norm's write-back).
  launch_rms_norm(const_cast<float*>(x), xs, nullptr, 0, w, eps, out, os, n, cols, rows, s);
}

void add(float* x, int64_t xs, const float* d, int64_t ds, int32_t rows, int32_t cols, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(add_kernel, dim3(grid_2d(rows, cols)), dim3(256), 0, s, x, xs, d, ds, rows, cols);
  CERA_CUDA_CHECK_LAUNCH();
}

void scale(float* x, int64_t xs, float f, int32_t rows, int32_t cols, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(scale_kernel, dim3(grid_2d(rows, cols)), dim3(256), 0, s, x, xs, f, rows, cols);
  CERA_CUDA_CHECK_LAUNCH();
}

void add_bias(float* x, int64_t xs, const float* b, int32_t rows, int32_t cols, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(add_bias_kernel, dim3(grid_2d(rows, cols)), dim3(256), 0, s, x, xs, b, rows, cols);
  CERA_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* g, int64_t gs, const float* u, int64_t us, float* o, int64_t os, int32_t rows,
            int32_t cols, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(swiglu_kernel<float>, dim3(grid_2d(rows, cols)), dim3(256), 0, s, g, gs, u, us, o, os, rows, cols);
  CERA_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, int64_t xs, const int32_t* rows, int32_t n, float* out, int64_t os, int32_t cols,
                 cudaStream_t s) {
  if (n <= 0) return;
  launch_pdl(gather_kernel, dim3(n), dim3(256), 0, s, x, xs, rows, out, os, cols);
  CERA_CUDA_CHECK_LAUNCH();
}

size_t argmax_scratch_bytes(int32_t rows, int32_t cols) {
  return size_t(rows) * size_t((cols + kArgmaxChunk - 1) / kArgmaxChunk) * 8;
}

void argmax_rows(const float* x, int64_t xs, int32_t rows, int32_t cols, int32_t* out, void* scratch,
                 unsigned* counters, cudaStream_t s, float* values) {
  if (rows <= 0) return;
  const int32_t chunks = (cols + kArgmaxChunk - 1) / kArgmaxChunk;
  float* part_v = static_cast<float*>(scratch);
  int32_t* part_i = reinterpret_cast<int32_t*>(part_v + int64_t(rows) * chunks);
  launch_pdl(argmax_kernel, dim3(unsigned(chunks), unsigned(rows)), dim3(kArgmaxThreads), 0, s, x, xs, cols, part_v,
             part_i, counters, out, values);
  CERA_CUDA_CHECK_LAUNCH();
}

void gpu_sleep(int64_t ns, cudaStream_t s) {
  sleep_kernel<<<1, 1, 0, s>>>(ns);
  CERA_CUDA_CHECK_LAUNCH();
}

void to_f16(const float* x, int64_t xs, int32_t rows, int32_t cols, __half* out, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(convert_kernel<__half>, dim3(grid_2d(rows, cols)), dim3(256), 0, s, x, xs, rows, cols, out);
  CERA_CUDA_CHECK_LAUNCH();
}

void to_bf16(const float* x, int64_t xs, int32_t rows, int32_t cols, __nv_bfloat16* out, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(convert_kernel<__nv_bfloat16>, dim3(grid_2d(rows, cols)), dim3(256), 0, s, x, xs, rows, cols, out);
  CERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rms_norm_16(const float* x, int64_t xs, const float* w, float eps, T* out, int32_t rows, int32_t cols,
                 cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(rms_norm_16_kernel<T>, dim3(rows), dim3(kRowThreads), 0, s, x, xs, w, eps, out, cols);
  CERA_CUDA_CHECK_LAUNCH();
}
void rms_norm_to_f16(const float* x, int64_t xs, const float* w, float eps, __half* out, int32_t rows, int32_t cols,
                     cudaStream_t s) {
  rms_norm_16(x, xs, w, eps, out, rows, cols, s);
}
void rms_norm_to_bf16(const float* x, int64_t xs, const float* w, float eps, __nv_bfloat16* out, int32_t rows,
                      int32_t cols, cudaStream_t s) {
  rms_norm_16(x, xs, w, eps, out, rows, cols, s);
}

template <typename T>
void swiglu_16(const float* g, int64_t gs, const float* u, int64_t us, T* out, int32_t rows, int32_t cols,
               cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(swiglu_kernel<T>, dim3(grid_2d(rows, cols)), dim3(256), 0, s, g, gs, u, us, out, int64_t(cols), rows,
             cols);
  CERA_CUDA_CHECK_LAUNCH();
}
void swiglu_to_f16(const float* g, int64_t gs, const float* u, int64_t us, __half* out, int32_t rows, int32_t cols,
                   cudaStream_t s) {
  swiglu_16(g, gs, u, us, out, rows, cols, s);
}
void swiglu_to_bf16(const float* g, int64_t gs, const float* u, int64_t us, __nv_bfloat16* out, int32_t rows,
                    int32_t cols, cudaStream_t s) {
  swiglu_16(g, gs, u, us, out, rows, cols, s);
}

}  // namespace cera::cuda
