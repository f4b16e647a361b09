// The CPU implementations of the backend ops, as plain functions over host memory. They are also
// the reference the GPU backends are tested against, so they favour clarity; the hot one (matmul)
// dispatches to SIMD kernels, the rest are simple loops the compiler vectorises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "common/fp16.h"
#include "backend/cpu/thread_pool.h"

namespace cera::cpu {

// Paged KV memory of one attention layer: blocks of `block_size` tokens, each holding K then V, each
// as [n_kv_heads][block_size][head_dim] f32: one KV head's keys in a block are one run, which a
// decode step's attention streams (a block of [block_size][kv_dim] put a head's consecutive keys
// kv_dim floats apart: tg32 after 4,096 tokens 21.7 -> 26.4-27.6 t/s on LFM2-1.2B Q4_0, 2 threads;
// docs/BENCHMARKS.md).
struct KvLayerView {
  float* base = nullptr;
  int32_t block_size = 0;
  int32_t kv_dim = 0;    // n_kv_heads × head_dim
  int32_t head_dim = 0;
  bool round_to_f16 = false;  // stored K and V are rounded to f16 values (CpuBackendOptions::round_kv_to_f16)
  int32_t n_kv_heads() const { return kv_dim / head_dim; }
  // KV head h's head_dim floats of K (V) at a slot of a block.
  float* k(int32_t block, int32_t slot, int32_t h) const {
    return base + size_t(block) * 2 * block_size * kv_dim + (size_t(h) * block_size + slot) * head_dim;
  }
  float* v(int32_t block, int32_t slot, int32_t h) const { return k(block, slot, h) + size_t(block_size) * kv_dim; }
};

void rms_norm_row(const float* x, const float* w, float eps, float* out, int64_t n);
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// RoPE (MODELS.md §5) in three steps so the trigonometry is done once per token, not per head:
// inverse frequencies once per call, cos/sin once per position, then a rotation per head.
void rope_inv_freq(const RopeParams& rope, double* inv_freq);  // [n_rot/2]
void rope_cos_sin(const double* inv_freq, int32_t n_rot, int32_t position, float* cos_out, float* sin_out);
void rope_apply(float* head, const float* cos_t, const float* sin_t, int32_t n_rot, bool neox);
// Each x[i] replaced by the nearest f16 value (round to nearest even), as an f16 KV cache stores it.
inline void round_to_f16(float* x, int32_t n) {
  for (int32_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

// Context shift of one attention layer (see Backend::shift_kv); rope == nullptr: K moves unrotated.
// The heads' shape is the view's.
void shift_kv(const KvLayerView& kv, std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta,
              const RopeParams* rope);

// Writes the step's k, v into the paged cache and computes attention for every token of every
// sequence (causal, GQA). Parallel over (token, KV head, a run of its q heads).
void attention(ThreadPool& pool, const KvLayerView& kv, std::span<const StepSequence> seqs,
               const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, const AttentionParams& p);

// LFM2 short conv over every sequence; `state` holds n_slots × (L-1) × D floats for this layer,
// laid out [slot][L-1][D] (oldest first).
void short_conv(ThreadPool& pool, std::span<const StepSequence> seqs, const Tensor& bcx, const Tensor& w,
                float* state, Tensor out);

// ys[i] = x · ws[i]ᵀ, quantizing x to the activation format once per distinct format.
void matmul(ThreadPool& pool, const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys);

}  // namespace cera::cpu
