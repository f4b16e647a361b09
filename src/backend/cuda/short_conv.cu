// LFM2's gated short convolution (MODELS.md §3.5) for all sequences and tokens of a step at once:
// out[t][c] = C[t][c] · Σ_k w[c][k] · (B⊙X)[t-L+1+k][c], where inputs before the step come from the
// sequence's conv state. Every (token, channel) is independent, so one launch covers the whole
// batch; a second launch then rolls each sequence's state forward (it must run after every read of
// the old state). Arithmetic in the order of backend/cpu/short_conv.cpp, without FMA contraction.
#include "backend/cuda/check.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"

namespace cera::cuda {
namespace {

// B⊙X of the sequence's history index h: [0, S) the state (oldest first), [S, S+n) the step's tokens.
__device__ inline float history(const DeviceSeq& sq, int32_t h, int32_t S, const float* bcx, int64_t bs,
                                const float* st, int32_t c, int32_t D) {
  if (h < S) return st[int64_t(h) * D + c];
  const float* row = bcx + int64_t(sq.first_token + h - S) * bs;
  return __fmul_rn(row[c], row[2 * D + c]);
}

// grid: (col blocks, T).
__global__ void conv_kernel(StepView step, const float* bcx, int64_t bs, const float* w, int32_t L, const float* state,
                            float* out, int64_t os, int32_t D) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= D) return;
  const int32_t t = blockIdx.y;
  const DeviceSeq sq = step.seqs[step.token_seq[t]];
  const int32_t S = L - 1;
  const int32_t local = t - sq.first_token;
  const float* st = state + int64_t(sq.conv_slot) * S * D;
  float acc = 0.f;
  for (int32_t k = 0; k < L; ++k)
    acc = __fadd_rn(acc, __fmul_rn(w[int64_t(c) * L + k], history(sq, local + k, S, bcx, bs, st, c, D)));
  out[int64_t(t) * os + c] = __fmul_rn(bcx[int64_t(t) * bs + D + c], acc);
}

// grid: (col blocks, n_seqs). New state j = history index n + j; ascending j never overwrites an
// old-state entry still to be read (n ≥ 1, so n + j' > j for every later j').
__global__ void conv_state_kernel(StepView step, const float* bcx, int64_t bs, int32_t L, float* state, int32_t D) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= D) return;
  const DeviceSeq sq = step.seqs[blockIdx.y];
  if (sq.conv_slot < 0 || sq.n_tokens <= 0) return;
  const int32_t S = L - 1;
  float* st = state + int64_t(sq.conv_slot) * S * D;
  for (int32_t j = 0; j < S; ++j) st[int64_t(j) * D + c] = history(sq, sq.n_tokens + j, S, bcx, bs, st, c, D);
}

// Decode (every sequence has one token): thread (t, c) is the only reader of its sequence's old state
// for channel c, so it can compute the output and roll the state in one launch.
__global__ void conv_decode_kernel(StepView step, const float* bcx, int64_t bs, const float* w, int32_t L,
                                   float* state, float* out, int64_t os, int32_t D) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= D) return;
  const int32_t t = blockIdx.y;
  const DeviceSeq sq = step.seqs[step.token_seq[t]];
  const int32_t S = L - 1;
  float* st = state + int64_t(sq.conv_slot) * S * D;
  const float* row = bcx + int64_t(t) * bs;
  const float bx = __fmul_rn(row[c], row[2 * D + c]);
  float acc = 0.f;
  for (int32_t k = 0; k < L; ++k)
    acc = __fadd_rn(acc, __fmul_rn(w[int64_t(c) * L + k], k < S ? st[int64_t(k) * D + c] : bx));
  out[int64_t(t) * os + c] = __fmul_rn(row[D + c], acc);
  for (int32_t j = 0; j + 1 < S; ++j) st[int64_t(j) * D + c] = st[int64_t(j + 1) * D + c];
  if (S > 0) st[int64_t(S - 1) * D + c] = bx;
}

}  // namespace

void short_conv_decode(const StepView& step, const float* bcx, int64_t bs, const float* w, int32_t L, float* state,
                       float* out, int64_t os, int32_t n_tokens, int32_t D, cudaStream_t s) {
  if (n_tokens <= 0) return;
  launch_pdl(conv_decode_kernel, dim3(unsigned((D + 127) / 128), unsigned(n_tokens)), dim3(128), 0, s, step, bcx, bs, w, L, state,
                                                                                          out, os, D);
  CERA_CUDA_CHECK_LAUNCH();
}

void short_conv(const StepView& step, int32_t n_seqs, const float* bcx, int64_t bs, const float* w, int32_t L,
                float* state, float* out, int64_t os, int32_t n_tokens, int32_t D, cudaStream_t s) {
  if (n_tokens <= 0) return;
  const unsigned col_blocks = unsigned((D + 127) / 128);
  launch_pdl(conv_kernel, dim3(col_blocks, unsigned(n_tokens)), dim3(128), 0, s, step, bcx, bs, w, L, state, out, os, D);
  CERA_CUDA_CHECK_LAUNCH();
  launch_pdl(conv_state_kernel, dim3(col_blocks, unsigned(n_seqs)), dim3(128), 0, s, step, bcx, bs, L, state, D);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
