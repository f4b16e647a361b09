// Asynchronous global -> shared memory copies (sm_80+ cp.async): a kernel requests a tile and
// computes on the previous one while it lands. 16-byte copies bypass L1 and need both addresses
// 16-byte aligned. Groups: every copy a thread issued since its last commit belongs to the group it
// commits; wait<N> returns once at most N of its newest groups are still in flight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cera::cuda::detail {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(__cvta_generic_to_global(gmem))
               : "memory");
}
// 8 bytes (both addresses 8-byte aligned), through L1: for rows whose pieces are only 8-byte aligned.
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(__cvta_generic_to_global(gmem))
               : "memory");
}
// Writes 16 zero bytes (src-size 0: nothing is read from gmem, which only has to be a global address).
__device__ __forceinline__ void cp_async16_zero(void* smem, const void* gmem) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 0;" ::"r"(s), "l"(__cvta_generic_to_global(gmem))
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace cera::cuda::detail
