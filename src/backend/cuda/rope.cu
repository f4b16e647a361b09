// Per-head q/k RMSNorm followed by RoPE, one warp per (token, head), in place. Angles in double as in
// backend/cpu/rope.cpp: float angles at positions in the thousands lose the digits parity needs.
#include "backend/cuda/check.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"

namespace cera::cuda {
namespace {

__device__ void norm_rope_head(float* head, const float* norm, float eps, int32_t head_dim, const RopeArgs& r,
                               int32_t position) {
  const int lane = threadIdx.x;
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
}

// grid: (rows, n_head + n_head_kv), block: one warp.
__global__ void qk_norm_rope_kernel(float* q, int64_t qs, float* k, int64_t ks, const float* q_norm,
                                    const float* k_norm, float eps, int32_t n_head, int32_t head_dim, RopeArgs r,
                                    const int32_t* positions) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t row = blockIdx.x, h = blockIdx.y;
  const int32_t pos = positions[row];
  if (h < n_head)
    norm_rope_head(q + int64_t(row) * qs + int64_t(h) * head_dim, q_norm, eps, head_dim, r, pos);
  else
    norm_rope_head(k + int64_t(row) * ks + int64_t(h - n_head) * head_dim, k_norm, eps, head_dim, r, pos);
}

}  // namespace

void qk_norm_rope(float* q, int64_t qs, float* k, int64_t ks, const float* q_norm, const float* k_norm, float eps,
                  int32_t n_head, int32_t n_head_kv, int32_t head_dim, const RopeArgs& rope,
                  const int32_t* positions, int32_t rows, cudaStream_t s) {
  if (rows <= 0) return;
  launch_pdl(qk_norm_rope_kernel, dim3(unsigned(rows), unsigned(n_head + n_head_kv)), dim3(32), 0, s, 
      q, qs, k, ks, q_norm, k_norm, eps, n_head, head_dim, rope, positions);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
