// One head's RMSNorm (when the weight is given) then RoPE, in place, by one warp: shared by the
// qk_norm_rope kernel and the fused decode attention. Angles in double as in backend/cpu/rope.cpp:
// float angles at positions in the thousands lose the digits parity needs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace cera::cuda {

// The rotation of the pairs a lane owns (pair i = lane + 32·j, j < kPairs) at `position`: they depend
// on no activation, so the fused decode attention computes them before its PDL wait (a single
// block) or requests their inputs then (a cluster block: rope_lane_inputs).
template <int kPairs>
struct RopeLane {
  float c[kPairs], s[kPairs];
};

// What those rotations are computed from, loaded apart from computing them: a fused attention
// block that starts after its PDL wait requests these first and computes the angles while the
// token's q, k and v load (rope_lane_angles). A lane's frequency is 0 past n_rot / 2 (no rotation).
template <int kPairs>
struct RopeLaneInputs {
  double inv_freq[kPairs];
  int32_t position;
};

template <int kPairs>
__device__ inline RopeLaneInputs<kPairs> rope_lane_inputs(const RopeArgs& r, int32_t position) {
  const int lane = threadIdx.x & 31;
  RopeLaneInputs<kPairs> in;
  in.position = position;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int32_t i = lane + 32 * j;
    in.inv_freq[j] = i < r.n_rot / 2 ? r.inv_freq[i] : 0.0;
  }
  return in;
}

template <int kPairs>
__device__ inline RopeLane<kPairs> rope_lane_angles(const RopeLaneInputs<kPairs>& in) {
  RopeLane<kPairs> out;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    // cos(0) = 1 and sin(0) = 0 exactly: a lane past n_rot / 2 is the identity, as it was.
    const double theta = double(in.position) * in.inv_freq[j];
    out.c[j] = float(cos(theta)), out.s[j] = float(sin(theta));
  }
  return out;
}

// Both at once, the lanes past n_rot / 2 skipping the sines (the same values).
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

// A lane's elements i = lane + 32·e (e < 2·kPairs) of a head's RMSNorm weight (zero past head_dim or
// without a norm): weights, so the fused decode attention loads them before its PDL wait.
template <int kPairs>
struct NormLane {
  float w[2 * kPairs];
};

template <int kPairs>
__device__ inline NormLane<kPairs> norm_lane(const float* norm, int32_t head_dim) {
  const int lane = threadIdx.x & 31;
  NormLane<kPairs> out;
#pragma unroll
  for (int e = 0; e < 2 * kPairs; ++e) {
    const int32_t i = lane + 32 * e;
    out.w[e] = norm && i < head_dim ? norm[i] : 0.f;
  }
  return out;
}

// head: head_dim ≤ 64·kPairs floats (global or shared memory); every lane of the calling warp
// takes part. rot: rope_lane<kPairs>(r, position); nw: norm_lane<kPairs>(weight), used when
// has_norm.
template <int kPairs>
__device__ inline void norm_rope_head(float* head, bool has_norm, const NormLane<kPairs>& nw, float eps,
                                      int32_t head_dim, const RopeArgs& r, const RopeLane<kPairs>& rot) {
  const int lane = threadIdx.x & 31;
  if (has_norm) {
    double sum = 0;
#pragma unroll
    for (int e = 0; e < 2 * kPairs; ++e) {
      const int32_t i = lane + 32 * e;
      if (i < head_dim) sum += double(head[i]) * double(head[i]);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = float(1.0 / sqrt(sum / double(head_dim) + double(eps)));
#pragma unroll
    for (int e = 0; e < 2 * kPairs; ++e) {
      const int32_t i = lane + 32 * e;
      if (i < head_dim) head[i] = __fmul_rn(nw.w[e], __fmul_rn(head[i], inv));
    }
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

// The same with the weight read here (norm: null for none).
template <int kPairs>
__device__ inline void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                                      const RopeLane<kPairs>& rot) {
  norm_rope_head(head, norm != nullptr, norm_lane<kPairs>(norm, head_dim), eps, head_dim, r, rot);
}

// The same with the angles computed here (any n_rot ≤ 256).
__device__ inline void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                                      int32_t position) {
  norm_rope_head(head, norm, eps, head_dim, r, rope_lane<4>(r, position));
}

}  // namespace cera::cuda
