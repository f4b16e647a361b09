// Device side of trace.h: pdl.h calls trace_block_started() and trace_block_waited(), which compile
// to nothing unless CERA_CUDA_TRACE is defined.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/trace.h"

namespace cera::cuda::trace {

#if defined(CERA_CUDA_TRACE) && defined(__CUDACC__)
// One copy per translation unit (no relocatable device code), each bound by its own binder.
static __device__ Sink* g_sink = nullptr;
static void bind_this_unit(Sink* s) { cudaMemcpyToSymbol(g_sink, &s, sizeof(s)); }
[[maybe_unused]] static const bool g_registered = register_binder(&bind_this_unit);

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long& block_start_ns() {
  __shared__ unsigned long long t;
  return t;
}
__device__ __forceinline__ void trace_block_started() {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) block_start_ns() = global_ns();
}
// Thread 0 of the block records now, with `threads` as the record's Record::threads.
__device__ __forceinline__ void record_now(uint32_t threads) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || !g_sink) return;
  Record r;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(r.grid));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r.sm));
  r.t_start = block_start_ns();
  r.t_wait = global_ns();
  r.blocks = gridDim.x * gridDim.y * gridDim.z;
  r.threads = threads;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned long long i = atomicAdd(&g_sink->n, 1ull);
  g_sink->records[i % g_sink->cap] = r;
}
__device__ __forceinline__ void trace_block_waited() { record_now(blockDim.x * blockDim.y * blockDim.z); }
// A point inside a kernel (thread 0 of each block that reaches it): a record whose `threads` is
// kMark | tag and whose t_wait is the time it was reached.
__device__ __forceinline__ void trace_mark(uint32_t tag) { record_now(kMark | tag); }
#elif defined(__CUDACC__)
__device__ __forceinline__ void trace_block_started() {}
__device__ __forceinline__ void trace_block_waited() {}
__device__ __forceinline__ void trace_mark(uint32_t) {}
#endif

}  // namespace cera::cuda::trace
