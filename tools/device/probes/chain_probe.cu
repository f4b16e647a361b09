// What the H200 can do at all, for the decode step's two costs (a probe, not part of the build:
// `nvcc -O3 -arch=sm_90a -o chain_probe chain_probe.cu && ./chain_probe` on the GPU machine):
//  1. streaming S bytes in one kernel among a graph of such kernels (PDL on and off): the best time
//     a decode product of S bytes can take, against which matvec's traced times are read;
//  2. a chain of dependent tiny kernels (each reads the 8 KB vector the previous one wrote): what a
//     kernel boundary costs under a graph with PDL, against the same chain as one persistent kernel
//     whose phases meet at a grid barrier (a counter in global memory) — the question behind a
//     persistent decode kernel.
//  3. the [gate; up] of the 1B shapes read in matvec.cu's patterns;
//  4. the same kind of chain, each link streaming S bytes before its wait, where consecutive
//     kernels need different shared-memory configurations (a boundary that makes SMs switch).
// Standalone on purpose (plain nvcc, no project headers), so a few helpers repeat matvec.cu's;
// what the probes share is in probe_common.cuh.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "probe_common.cuh"

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Streams n16 16-byte vectors: thread i takes vectors i, i + stride, ... U at a time in flight.
template <int U>
__global__ void stream_kernel(const uint4* __restrict__ src, size_t n16, unsigned* sink, bool pdl) {
  if (pdl) pdl_trigger();
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u * stride < n16) v[u] = ld_stream(src + i + u * stride);
      else v[u] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (pdl) pdl_wait();
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // keeps the loads; never true in practice
}

// What one link does: every block sums x (read whole, as a product reads x) and writes its share of
// y. kL2: read x through the L2 only (the persistent kernel reads what other blocks of the same
// launch wrote).
template <bool kL2>
__device__ void link_step(const float* x, float* y, int n) {
  auto load = [&](int i) { return kL2 ? __ldcg(x + i) : x[i]; };
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += load(i);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __shared__ float red[32];
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float tot = 0.f;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) tot += red[w];
  const int per = (n + gridDim.x - 1) / gridDim.x;
  for (int i = blockIdx.x * per + threadIdx.x; i < min(n, (blockIdx.x + 1) * per); i += blockDim.x)
    y[i] = load(i) * 0.5f + tot * 1e-6f;
}

// One link of a dependent chain: y[i] = x[i] * 0.5 + sum of x over the block's warp (a read of the
// whole 2048-float vector by every block, as a decode product reads x).
__global__ void link_kernel(const float* __restrict__ x, float* __restrict__ y, int n, bool pdl) {
  if (pdl) {
    pdl_trigger();
    pdl_wait();
  }
  link_step<false>(x, y, n);
}

// The same chain, `links` phases in one launch; phases meet at a grid barrier (probe_common.cuh).
__global__ void persistent_chain_kernel(float* a, float* b, int n, int links, unsigned* count, unsigned* gen) {
  for (int l = 0; l < links; ++l) {
    const float* x = (l & 1) ? b : a;
    float* y = (l & 1) ? a : b;
    link_step<true>(x, y, n);
    grid_barrier(count, gen);
  }
}


// ---- 3. the [gate; up] of the 1B shapes (16,384 rows of 2048 bf16 = 4 KB) read in matvec's ways.
// rows: a warp streams R whole rows, U 512-byte chunks of each in flight (matvec_warp_rows_kernel's
// pattern), one wave. fma: the same with x (f32, through L1) and the 8 products of each element.
// tile: blocks of 8 warps own 8 rows, warp w reads 512-byte tile w of each (matvec_kernel's pattern).
template <int R, int U, bool kFma>
__global__ void rows_kernel(const uint8_t* __restrict__ w, int n_rows, const float* __restrict__ x, float* sink, bool pdl) {
  if (pdl) pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int row0 = warp * R;
  float acc[R] = {};
  unsigned xr = 0;
  if (row0 < n_rows) {
    for (int c0 = 0; c0 < 8; c0 += U) {
      uint4 v[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
          v[u][r] = ld_stream(reinterpret_cast<const uint4*>(w + size_t(row0 + r) * 4096 + (c0 + u) * 512) + lane);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if constexpr (kFma) {
          const float4 a = __ldg(reinterpret_cast<const float4*>(x + 8 * (lane + 32 * (c0 + u))));
          const float4 b = __ldg(reinterpret_cast<const float4*>(x + 8 * (lane + 32 * (c0 + u))) + 1);
          const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const unsigned q[4] = {v[u][r].x, v[u][r].y, v[u][r].z, v[u][r].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              acc[r] = fmaf(__uint_as_float(q[j] << 16), xv[2 * j], acc[r]);
              acc[r] = fmaf(__uint_as_float(q[j] & 0xffff0000u), xv[2 * j + 1], acc[r]);
            }
          }
        } else {
#pragma unroll
          for (int r = 0; r < R; ++r) xr ^= v[u][r].x ^ v[u][r].y ^ v[u][r].z ^ v[u][r].w;
        }
      }
    }
  }
  if (pdl) pdl_wait();
  float t = float(xr);
#pragma unroll
  for (int r = 0; r < R; ++r) t += acc[r];
  if (t == 1234.5f) sink[blockIdx.x] = t;
}

__global__ void tile_kernel(const uint8_t* __restrict__ w, const float* __restrict__ x, float* sink, bool pdl) {
  if (pdl) pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = blockIdx.x * 8;
  uint4 v[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) v[r] = ld_stream(reinterpret_cast<const uint4*>(w + size_t(row0 + r) * 4096 + warp * 512) + lane);
  const float4 a = __ldg(reinterpret_cast<const float4*>(x + 8 * (lane + 32 * warp)));
  const float4 b = __ldg(reinterpret_cast<const float4*>(x + 8 * (lane + 32 * warp)) + 1);
  const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float acc[8] = {};
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const unsigned q[4] = {v[r].x, v[r].y, v[r].z, v[r].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[r] = fmaf(__uint_as_float(q[j] << 16), xv[2 * j], acc[r]);
      acc[r] = fmaf(__uint_as_float(q[j] & 0xffff0000u), xv[2 * j + 1], acc[r]);
    }
  }
  __shared__ float red[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp][r] = s;
  }
  __syncthreads();
  if (pdl) pdl_wait();
  if (threadIdx.x < 8) {
    float t = 0;
    for (int i = 0; i < 8; ++i) t += red[i][threadIdx.x];
    if (t == 1234.5f) sink[blockIdx.x] = t;
  }
}

template <class K, class... A>
void launch_smem(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, A... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// ---- 4. a link that streams its share of S bytes before its PDL wait (a product's weights), then
// reads x and writes y; its dynamic shared memory (unused) only sets which shared-memory
// configuration its SMs need.
__global__ void stream_link_kernel(const uint4* __restrict__ w, size_t n16, const float* __restrict__ x,
                                   float* __restrict__ y, int n, unsigned* sink) {
  extern __shared__ unsigned pad[];
  pdl_trigger();
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += stride * 4) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n16 ? ld_stream(w + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  pdl_wait();
  link_step<false>(x, y, n);
  if (acc == 0x12345678u) sink[blockIdx.x] = acc + pad[threadIdx.x];  // keeps the loads; never true
}

template <class K, class... A>
void launch(K kernel, dim3 grid, dim3 block, cudaStream_t s, bool pdl, A... args) {
  launch_smem(kernel, grid, block, 0, s, pdl, args...);
}

// n floats of device memory, zeroed (the chains' x and y vectors).
float* zeroed_floats(size_t n) {
  float* p;
  CHECK(cudaMalloc(&p, n * sizeof(float)));
  CHECK(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

// Median of `reps` replays of the graph that `record` captures, in µs.
template <class F>
float time_graph(cudaStream_t s, F record, int reps = 15) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  record();
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int r = 0; r < reps + 2; ++r) {
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 2) ts.push_back(ms * 1000.f);
  }
  std::sort(ts.begin(), ts.end());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return ts[ts.size() / 2];
}

// `chain_probe 3` / `chain_probe 4`: that section only.
int main(int argc, char** argv) {
  const bool all = argc < 2;
  const int only = argc < 2 ? 0 : std::atoi(argv[1]);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t pool = size_t(3) << 30;  // 3 GB: rotating through it keeps every read out of the L2
  uint8_t* buf;
  CHECK(cudaMalloc(&buf, pool));
  CHECK(cudaMemset(buf, 1, pool));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 1 << 20));

  if (all) {
  std::printf("# 1. streaming S bytes per kernel, 32 kernels a graph (distinct regions), µs per kernel and TB/s\n");
  std::printf("%10s %6s %4s %4s %10s %8s %10s %8s\n", "MB", "thr", "b/SM", "U", "µs(pdl)", "TB/s", "µs(plain)", "TB/s");
  const double sizes_mb[] = {2.36, 8.4, 18.9, 33.5, 67.1, 525.0};
  struct Cfg { int threads, per_sm, u; };
  const Cfg cfgs[] = {{256, 4, 4}, {256, 8, 4}, {512, 4, 4}, {1024, 2, 4}, {256, 4, 8}};
  for (double mb : sizes_mb) {
    const size_t bytes = size_t(mb * 1e6) & ~size_t(15);
    const int kernels = mb > 100 ? 4 : 32;
    for (const Cfg& c : cfgs) {
      float t[2];
      for (int p = 0; p < 2; ++p) {
        const bool pdl = p == 0;
        t[p] = time_graph(s, [&] {
                 size_t off = 0;
                 for (int i = 0; i < kernels; ++i) {
                   if (off + bytes > pool) off = 0;
                   auto k = c.u == 8 ? stream_kernel<8> : stream_kernel<4>;
                   launch(k, dim3(sms * c.per_sm), dim3(c.threads), s, pdl,
                          reinterpret_cast<const uint4*>(buf + off), bytes / 16, sink, pdl);
                   off += (bytes + 4095) & ~size_t(4095);
                 }
               }) / kernels;
      }
      std::printf("%10.2f %6d %4d %4d %10.2f %8.2f %10.2f %8.2f\n", mb, c.threads, c.per_sm, c.u, t[0],
                  bytes / (t[0] * 1e6), t[1], bytes / (t[1] * 1e6));
    }
  }

  std::printf("\n# 2. a chain of 64 dependent links (2048 floats), µs per link\n");
  float* a = zeroed_floats(8192);
  float* b = zeroed_floats(8192);
  unsigned* bar;
  CHECK(cudaMalloc(&bar, 256));
  CHECK(cudaMemset(bar, 0, 256));
  const int links = 64, n = 2048;
  for (int blocks : {132, 264, 528}) {
    for (int threads : {128, 256}) {
      const float t_pdl = time_graph(s, [&] {
                            for (int l = 0; l < links; ++l)
                              launch(link_kernel, dim3(blocks), dim3(threads), s, true, (const float*)((l & 1) ? b : a),
                                     (l & 1) ? a : b, n, true);
                          }) / links;
      const float t_plain = time_graph(s, [&] {
                              for (int l = 0; l < links; ++l)
                                launch(link_kernel, dim3(blocks), dim3(threads), s, false,
                                       (const float*)((l & 1) ? b : a), (l & 1) ? a : b, n, false);
                            }) / links;
      int per_sm = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_chain_kernel, threads, 0));
      float t_pers = -1.f;
      if (blocks <= per_sm * sms)
        t_pers = time_graph(s, [&] {
                   launch(persistent_chain_kernel, dim3(blocks), dim3(threads), s, false, a, b, n, links, bar, bar + 32);
                 }) / links;
      std::printf("blocks %4d threads %4d: graph+PDL %.2f  graph %.2f  persistent+barrier %.2f\n", blocks, threads, t_pdl,
                  t_plain, t_pers);
    }
  }

  }  // sections 1-2
  if (all || only == 3) {
  std::printf("\n# 3. 16,384 rows x 4 KB (67 MB) in matvec's patterns, 32 kernels a graph, µs per kernel (PDL / plain)\n");
  {
    const int n_rows = 16384;
    const size_t bytes = size_t(n_rows) * 4096;
    float* xg = zeroed_floats(2048);
    auto run = [&](const char* name, auto body) {
      float t[2];
      for (int p = 0; p < 2; ++p) {
        const bool pdl = p == 0;
        t[p] = time_graph(s, [&] {
                 size_t off = 0;
                 for (int i = 0; i < 32; ++i) {
                   if (off + bytes > pool) off = 0;
                   body(buf + off, pdl);
                   off += bytes;
                 }
               }) / 32;
      }
      std::printf("%-34s %7.2f %7.2f  (%.2f / %.2f TB/s)\n", name, t[0], t[1], bytes / (t[0] * 1e6), bytes / (t[1] * 1e6));
    };
    auto rows = [&](auto kernel, int r, const char* name) {
      run(name, [&](const uint8_t* w, bool pdl) {
        const int warps = n_rows / r;
        launch(kernel, dim3((warps + 7) / 8), dim3(256), s, pdl, w, n_rows, (const float*)xg, (float*)sink, pdl);
      });
    };
    rows(rows_kernel<4, 1, false>, 4, "rows R4 U1 load only");
    rows(rows_kernel<4, 2, false>, 4, "rows R4 U2 load only");
    rows(rows_kernel<4, 8, false>, 4, "rows R4 U8 load only");
    rows(rows_kernel<4, 1, true>, 4, "rows R4 U1 fma");
    rows(rows_kernel<4, 2, true>, 4, "rows R4 U2 fma");
    rows(rows_kernel<2, 4, true>, 2, "rows R2 U4 fma (2 waves)");
    rows(rows_kernel<8, 1, true>, 8, "rows R8 U1 fma (half wave)");
    run("tile 8 rows x 8 warps fma", [&](const uint8_t* w, bool pdl) {
      launch(tile_kernel, dim3(n_rows / 8), dim3(256), s, pdl, w, (const float*)xg, (float*)sink, pdl);
    });
  }
  }  // section 3
  if (all || only == 4) {
    // Does a kernel whose blocks need another shared-memory configuration than the kernel before
    // it start later (its SMs would have to drain first, undoing PDL's early start)? A chain of 64
    // links (section 4's kernel, 2 blocks an SM of 256 threads), each streaming S bytes before its
    // wait; dynamic shared memory per block: all 0, all D, or alternating 0 / D.
    std::printf("\n# 4. 64 links streaming S bytes each before the wait, µs per link: smem 0 | all D | 0,D alternating\n");
    float* a = zeroed_floats(8192);
    float* b = zeroed_floats(8192);
    const int links = 64, n = 2048;
    for (double mb : {0.0, 2.36, 8.4}) {
      const size_t bytes = size_t(mb * 1e6) & ~size_t(15);
      for (size_t d : {size_t(3) << 10, size_t(20) << 10, size_t(40) << 10}) {
        auto chain = [&](int pattern) {  // 0: all 0, 1: all d, 2: alternating
          return time_graph(s, [&] {
                   size_t off = 0;
                   for (int l = 0; l < links; ++l) {
                     if (off + bytes > pool) off = 0;
                     const size_t smem = pattern == 0 ? 0 : pattern == 1 ? d : (l & 1) * d;
                     launch_smem(stream_link_kernel, dim3(2 * sms), dim3(256), smem, s, true,
                                 reinterpret_cast<const uint4*>(buf + off), bytes / 16,
                                 (const float*)((l & 1) ? b : a), (l & 1) ? a : b, n, sink);
                     off += (bytes + 4095) & ~size_t(4095);
                   }
                 }) / links;
        };
        std::printf("S %6.2f MB D %3zu KB: %7.2f %7.2f %7.2f\n", mb, d >> 10, chain(0), chain(1), chain(2));
      }
    }
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
