// One head's RMSNorm (when the weight is given) then RoPE, in place, by one warp: shared by the
// qk_norm_rope kernel and the fused decode attention. Angles in double as in backend/cpu/rope.cpp:
// float angles at positions in the thousands lose the digits parity needs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace cera::cuda {

// The rotation of the pairs a lane owns (pair i = lane + 32·j, j < kPairs) at `position`: they depend
// on no activation, so the fused decode attention computes them before its PDL wait.
template <int kPairs>
struct RopeLane {
  float c[kPairs], s[kPairs];
};

template <int kPairs>
__device__ inline RopeLane<kPairs> rope_lane(const RopeArgs& r, int32_t position) {
  const int lane = threadIdx.x & 31;
  RopeLane<kPairs> out;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int32_t i = lane + 32 * j;
    out.c[j] = 1.f, out.s[j] = 0.f;
    if (i < r.n_rot / 2) {
      const double theta = double(position) * r.inv_freq[i];
      out.c[j] = float(cos(theta)), out.s[j] = float(sin(theta));
    }
  }
  return out;
}

// head: head_dim floats (global or shared memory); every lane of the calling warp takes part.
// rot: rope_lane<kPairs>(r, position) with 32·kPairs ≥ r.n_rot / 2.
template <int kPairs>
__device__ inline void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                                      const RopeLane<kPairs>& rot) {
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
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int32_t i = lane + 32 * j;
    if (i >= half) break;
    const float c = rot.c[j], s = rot.s[j];
    const int32_t ia = r.neox ? i : 2 * i;
    const int32_t ib = r.neox ? i + half : 2 * i + 1;
    const float a = head[ia], b = head[ib];
    head[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    head[ib] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  }
  __syncwarp();
}

// The same with the angles computed here (any n_rot ≤ 256).
__device__ inline void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                                      int32_t position) {
  norm_rope_head(head, norm, eps, head_dim, r, rope_lane<4>(r, position));
}

}  // namespace cera::cuda
