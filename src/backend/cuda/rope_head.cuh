// One head's RMSNorm (when the weight is given) then RoPE, in place, by one warp: shared by the
// qk_norm_rope kernel and the fused decode attention. Angles in double as in backend/cpu/rope.cpp:
// float angles at positions in the thousands lose the digits parity needs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace cera::cuda {

// head: head_dim floats (global or shared memory); every lane of the calling warp takes part.
__device__ inline void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                                      int32_t position) {
  const int lane = threadIdx.x & 31;
  if (norm) {
    double sum = 0;
    for (int32_t i = lane; i < head_dim; i += 32) sum += double(head[i]) * double(head[i]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = float(1.0 / sqrt(sum / double(head_dim) + double(eps)));
    for (int32_t i = lane; i < head_dim; i += 32) head[i] = __fmul_rn(norm[i], __fmul_rn(head[i], inv));
    __syncwarp();
  }
  const int32_t half = r.n_rot / 2;
  for (int32_t i = lane; i < half; i += 32) {
    const double theta = double(position) * r.inv_freq[i];
    const float c = float(cos(theta)), s = float(sin(theta));
    const int32_t ia = r.neox ? i : 2 * i;
    const int32_t ib = r.neox ? i + half : 2 * i + 1;
    const float a = head[ia], b = head[ib];
    head[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    head[ib] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  }
  __syncwarp();
}

}  // namespace cera::cuda
