// Per-head q/k RMSNorm followed by RoPE, one warp per (token, head), in place (rope_head.cuh).
#include "backend/cuda/check.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/rope_head.cuh"
#include "cera/error.h"

#include <string>

namespace cera::cuda {
namespace {

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
  if (rope.n_rot > 256)
    throw Error(ErrorCode::Unsupported, "cuda qk_norm_rope: RoPE over " + std::to_string(rope.n_rot) +
                                            " dimensions (at most 256)");
  launch_pdl(qk_norm_rope_kernel, dim3(unsigned(rows), unsigned(n_head + n_head_kv)), dim3(32), 0, s, 
      q, qs, k, ks, q_norm, k_norm, eps, n_head, head_dim, rope, positions);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
