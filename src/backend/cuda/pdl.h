// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl() may start while the
// kernel before it on the stream is still finishing, so its launch latency and its weight fetches
// overlap the previous kernel's tail. The contract every such kernel keeps:
//   * before pdl_wait() it reads only data no earlier kernel of the step writes (weights; the step's
//     metadata, copied before its first kernel; state that only this launch writes) and writes
//     nothing; after pdl_wait() the previous kernel has finished and its writes are visible;
//   * it calls pdl_wait() on every path, even when it reads no input, so "finished" is transitive
//     down the chain of kernels. The one exception: a block that reads and writes nothing may leave
//     without waiting if another block of the same grid always waits (the fused decode attention's
//     idle splits: split 0 waits), since the grid then still ends after the kernel before it;
//   * pdl_launch_dependents() lets the next kernel start launching (safe anywhere: the next kernel
//     still waits in its own pdl_wait() for this one to finish).
// On devices before sm_90 both calls compile to nothing and launch_pdl() is a plain launch.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/check.h"
#include "backend/cuda/trace.cuh"

namespace cera::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  trace::trace_block_waited();
}

// The trigger alone, for a kernel that lets the next one launch later than its start (it must
// still call trace::trace_block_started() first, as pdl_launch_dependents does).
__device__ __forceinline__ void pdl_trigger_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
  trace::trace_block_started();
  pdl_trigger_dependents();
}

#endif

// Whether launches use PDL: on sm_90+ unless CERA_CUDA_PDL=0 (set once per process).
bool pdl_enabled();

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialization attribute
// and, when `cluster` is given, blocks grouped into thread block clusters of that shape (sm_90+).
template <typename... KernelArgs, typename... Args>
void launch_pdl_in(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, const dim3* cluster, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster->x;
    attr[n].val.clusterDim.y = cluster->y;
    attr[n].val.clusterDim.z = cluster->z;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  CERA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...));
}

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_in(kernel, grid, block, nullptr, smem, stream, std::forward<Args>(args)...);
}

template <typename... KernelArgs, typename... Args>
void launch_pdl_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, dim3 cluster, size_t smem,
                        cudaStream_t stream, Args&&... args) {
  launch_pdl_in(kernel, grid, block, &cluster, smem, stream, std::forward<Args>(args)...);
}

}  // namespace cera::cuda
