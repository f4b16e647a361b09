// Launchers for the CUDA backend's kernels other than the weight readers (quant_kernels.h). All
// pointers are device memory; every launch goes on `stream` and is graph-capturable. Strides are in
// elements. The CPU ops (backend/cpu/ops.h) are their reference: tests/backend_cuda compares them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/step_meta.h"

namespace cera::cuda {

// ---- elementwise.cu
// out = w ⊙ x / sqrt(mean(x²) + eps) per row; with delta, first x += delta (written back).
void rms_norm(float* x, int64_t x_stride, const float* delta, int64_t delta_stride, const float* w, float eps,
              float* out, int64_t out_stride, int32_t rows, int32_t cols, cudaStream_t s);
void add(float* x, int64_t x_stride, const float* delta, int64_t delta_stride, int32_t rows, int32_t cols,
         cudaStream_t s);
void scale(float* x, int64_t x_stride, float factor, int32_t rows, int32_t cols, cudaStream_t s);
void add_bias(float* x, int64_t x_stride, const float* bias, int32_t rows, int32_t cols, cudaStream_t s);
void swiglu(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, float* out,
            int64_t out_stride, int32_t rows, int32_t cols, cudaStream_t s);
// out[i] = rms_norm(x[rows[i]]) for i < n (w, eps as rms_norm), in one launch: bit for bit
// gather_rows followed by rms_norm.
void gather_rms_norm(const float* x, int64_t x_stride, const int32_t* rows, int32_t n, const float* w, float eps,
                     float* out, int64_t out_stride, int32_t cols, cudaStream_t s);
// out[i] = x[rows[i]] for i < n.
void gather_rows(const float* x, int64_t x_stride, const int32_t* rows, int32_t n, float* out, int64_t out_stride,
                 int32_t cols, cudaStream_t s);
// out[r] = index of the largest value of row r (the first on ties; NaN never wins).
// One launch (chunks of the row on many SMs; the last chunk of a row to finish merges them).
// scratch: argmax_scratch_bytes(rows, cols); counters: `rows` counters that are zero before the
// launch and left zero after it (zero them once, when allocated).
size_t argmax_scratch_bytes(int32_t rows, int32_t cols);
// With values, also each row's maximum, and (id -1, NaN) for an all-NaN row: top_k_rows for k = 1.
void argmax_rows(const float* x, int64_t x_stride, int32_t rows, int32_t cols, int32_t* out, void* scratch,
                 unsigned* counters, cudaStream_t s, float* values = nullptr);
// rms_norm and SwiGLU writing the tensor-core GEMM's 16-bit activation input directly (dense
// [rows, cols]): bit for bit the f32 op followed by to_f16 / to_bf16.
void rms_norm_to_f16(const float* x, int64_t x_stride, const float* w, float eps, __half* out, int32_t rows,
                     int32_t cols, cudaStream_t s);
void rms_norm_to_bf16(const float* x, int64_t x_stride, const float* w, float eps, __nv_bfloat16* out, int32_t rows,
                      int32_t cols, cudaStream_t s);
void swiglu_to_f16(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, __half* out,
                   int32_t rows, int32_t cols, cudaStream_t s);
void swiglu_to_bf16(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, __nv_bfloat16* out,
                    int32_t rows, int32_t cols, cudaStream_t s);
// Dense 16-bit copies of an F32 activation matrix, for the tensor-core GEMM.
void to_f16(const float* x, int64_t x_stride, int32_t rows, int32_t cols, __half* out, cudaStream_t s);
void to_bf16(const float* x, int64_t x_stride, int32_t rows, int32_t cols, __nv_bfloat16* out, cudaStream_t s);

// ---- rope.cu
struct RopeArgs {
  const double* inv_freq;  // [n_rot/2], device
  int32_t n_rot;
  bool neox;
};
// Per-head RMSNorm (when the weight is given) then RoPE at the step positions, in place.
void qk_norm_rope(float* q, int64_t q_stride, float* k, int64_t k_stride, const float* q_norm, const float* k_norm,
                  float eps, int32_t n_head, int32_t n_head_kv, int32_t head_dim, const RopeArgs& rope,
                  const int32_t* positions, int32_t rows, cudaStream_t s);

// ---- attention.cu
// One attention layer's paged KV cache: [n_blocks][2][block_size][kv_dim], K then V per block, in
// f32 or f16 (CudaBackendOptions::kv_cache; kv_cache.cuh: every kernel reads either). f16 halves
// the cache's memory, as llama.cpp's default cache type does.
struct KvLayer {
  void* base;
  int32_t block_size;
  int32_t kv_dim;
  bool f16;
};
struct AttentionShape {
  int32_t n_head, n_head_kv, head_dim;
  float scale;
};
// Writes the step's k, v rows into the cache at each token's position.
void store_kv(const KvLayer& kv, const StepView& step, const float* k, int64_t k_stride, const float* v,
              int64_t v_stride, int32_t n_tokens, cudaStream_t s);
// The arithmetic of prefill attention's tensor-core kernels: F32 = 3xTF32 (fp32 accuracy, for F32
// models), F16 = f16 inputs with f32 accumulation (for 16-bit and quantized models).
enum class AttentionPrecision { F32, F16 };
// How a prefill attention launch divides each row's keys (a plan, then the run: FlashInfer's split).
// A step of few query tiles over a long context — a chat turn after a long history — gives one
// block per (tile, KV head) thousands of keys while most SMs idle; splitting the keys into ranges
// fills the GPU, and a second launch merges each row's ranges.
struct PrefillSplit {
  int32_t splits = 1;      // key ranges per row; 1: one launch, no scratch
  int32_t split_keys = 0;  // keys per range (a multiple of kPrefillSplitAlign); range z is [z·split_keys, ...)
};
inline constexpr int32_t kPrefillSplitAlign = 64;   // a whole number of every kernel variant's key tiles
inline constexpr int32_t kPrefillSplitMax = 32;     // the merge takes one range per lane
inline constexpr int32_t kPrefillMinSplitKeys = 256;  // below this a range's merge costs more than it gains
inline constexpr int32_t kPrefillPartialStride = 4;   // floats after a range's head_dim outputs: max, sum, pad
// attention_prefill_plan.cpp (pure, no device): the split for a launch of `blocks` blocks whose rows
// see at most max_keys keys, on a device that holds wave_blocks of them at once; `forced` > 0 asks
// for that many ranges.
PrefillSplit plan_prefill_key_splits(int64_t blocks, int32_t max_keys, int64_t wave_blocks, int32_t forced = 0);
// The plan for this launch: a split where the kernel the shape, precision and cache type pick can
// split its keys (the f16 kernel), else none. CERA_CUDA_ATTENTION_SPLITS=N forces N ranges (tests,
// experiments).
PrefillSplit attention_prefill_plan(int32_t n_tiles, int32_t max_keys, const AttentionShape& shape,
                                    AttentionPrecision precision, bool kv_f16);
// Scratch floats a split launch needs: every (range, token, q head) row's outputs, max and sum.
inline size_t attention_prefill_partials(int32_t n_tokens, const AttentionShape& shape, const PrefillSplit& split) {
  if (split.splits <= 1) return 0;
  return size_t(split.splits) * size_t(n_tokens) * size_t(shape.n_head) *
         size_t(shape.head_dim + kPrefillPartialStride);
}
// Causal attention for every token of the step, over the step's tiles (StepView::tiles). Head dims
// 64 and 128 take a tensor-core kernel of the given precision (f16 for an f16 cache, which the
// 3xTF32 kernel does not read), others the SIMT kernel (fp32 arithmetic). The environment
// overrides the choice: CERA_CUDA_ATTENTION=simt | tf32 | f16 (read per call). A split
// from attention_prefill_plan (same arguments) needs `partial` of attention_prefill_partials floats
// and n_tokens, the step's token count.
void attention_prefill(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t q_stride,
                       float* out, int64_t out_stride, const AttentionShape& shape, cudaStream_t s,
                       AttentionPrecision precision = AttentionPrecision::F32, const PrefillSplit& split = {},
                       float* partial = nullptr, int32_t n_tokens = 0);
// attention_prefill_tc.cu: the same prefill attention on tensor cores (mma.sync 3xTF32, fp32
// accuracy) for the head dims it supports.
bool attention_prefill_tc_supported(int32_t head_dim);
void attention_prefill_tc(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t q_stride,
                          float* out, int64_t out_stride, const AttentionShape& shape, cudaStream_t s);
// attention_prefill_f16.cu: the same on tensor cores with f16 inputs (Q·scale, K, V, P rounded to
// f16; scores, softmax and accumulation in f32), for head dims 64 and 128.
bool attention_prefill_f16_supported(int32_t head_dim);
// A split (splits > 1) writes each row's ranges to `partial` and merges them into `out`.
void attention_prefill_f16(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t q_stride,
                           float* out, int64_t out_stride, const AttentionShape& shape, cudaStream_t s,
                           const PrefillSplit& split = {}, float* partial = nullptr, int32_t n_tokens = 0);
// Blocks of one (unsplit) f16 launch over n_tiles tiles, and how many of them the device holds at once.
int64_t attention_prefill_f16_blocks(int32_t n_tiles, const AttentionShape& shape);
int64_t attention_prefill_f16_wave(const AttentionShape& shape, bool kv_f16);
// Attention for steps where every sequence has one token (T == n_seqs): splits each sequence's keys
// into kDecodeSplits ranges; `partial` holds attention_decode_partials(T, shape) floats.
inline constexpr int32_t kDecodeSplits = 16;
inline size_t attention_decode_partials(int32_t n_tokens, const AttentionShape& shape) {
  return size_t(n_tokens) * size_t(shape.n_head) * kDecodeSplits * size_t(shape.head_dim + 2);
}
void attention_decode(const KvLayer& kv, const StepView& step, int32_t n_tokens, const float* q, int64_t q_stride,
                      float* out, int64_t out_stride, const AttentionShape& shape, float* partial, cudaStream_t s);
// The decode step's attention layer in one launch: per-head q/k RMSNorm (where the weights are
// given) and RoPE (n_rot > 0) of the raw q, k rows, the token's k, v into the cache, the split-K
// attention, and the merge of the splits (qk_norm_rope + store_kv + attention_decode, without
// writing the rotated q, k back). `counters` (attention_decode_counters(...) unsigneds) must be zero
// before the first launch; every launch leaves them zero.
struct DecodeQkv {
  const float* q;
  int64_t q_stride;
  const float* k;
  int64_t k_stride;
  const float* v;
  int64_t v_stride;
  const float* q_norm;  // null: none
  const float* k_norm;
  float eps;
  RopeArgs rope;
};
bool attention_decode_fused_supported(int32_t head_dim);
size_t attention_decode_counters(int32_t n_tokens, const AttentionShape& shape);
// context_span: decode_context_span(the step's longest context), which picks the launch shape. Up
// to kClusterMinKeys keys one split covers a token's keys and nothing merges; past it a token's
// splits merge, and then (sm_90) they run as thread block clusters of as many blocks as the span
// needs (2-8), which merge faster but start later than single blocks; past kLongContextSpan a
// one-token step's splits are single blocks again, kDecodeSplits of them, each over every q head of
// its KV head (attention.cu). A step's graph is captured with one span; any span is correct at any
// context length.
inline constexpr int32_t kClusterMinKeys = 128;
inline constexpr int32_t kLongContextSpan = 4096;
// 0 up to kClusterMinKeys keys, else max_keys rounded up to kClusterMinKeys times a power of two,
// at most kLongContextSpan: few distinct values, so few graphs per batch shape.
constexpr int32_t decode_context_span(int32_t max_keys) {
  if (max_keys <= kClusterMinKeys) return 0;
  int32_t span = 2 * kClusterMinKeys;
  while (span < max_keys && span < kLongContextSpan) span *= 2;
  return span;
}
void attention_decode_fused(const KvLayer& kv, const StepView& step, int32_t n_tokens, const DecodeQkv& qkv,
                            float* out, int64_t out_stride, const AttentionShape& shape, float* partial,
                            unsigned* counters, int32_t context_span, cudaStream_t s);
// Context shift (Backend::shift_kv): scratch holds count × 2 × kv_dim floats.
void shift_kv(const KvLayer& kv, const int32_t* blocks, int32_t first, int32_t count, int32_t delta,
              int32_t n_head_kv, int32_t head_dim, const float* rot_cos, const float* rot_sin, int32_t n_rot,
              bool neox, float* scratch, cudaStream_t s);

// ---- short_conv.cu
// LFM2 gated short conv for every sequence of the step; state: [n_slots][L-1][D] of this layer.
void short_conv(const StepView& step, int32_t n_seqs, const float* bcx, int64_t bcx_stride, const float* w,
                int32_t kernel_len, float* state, float* out, int64_t out_stride, int32_t n_tokens, int32_t d,
                cudaStream_t s);
// The same when every sequence has exactly one token (sequence i = token i): one launch.
void short_conv_decode(const StepView& step, const float* bcx, int64_t bcx_stride, const float* w, int32_t kernel_len,
                       float* state, float* out, int64_t out_stride, int32_t n_tokens, int32_t d, cudaStream_t s);

// ---- top_k.cu
// Device scratch bytes top_k_rows needs for these shapes.
size_t top_k_scratch_bytes(int32_t rows, int32_t cols, int32_t k);
// Backend::top_k_rows: for every row, its k (1 ≤ k ≤ min(cols, 1024)) largest values by value
// descending, then the smaller column; NaN never selected; values[r·k + i], ids[r·k + i], with id -1
// and value NaN past the row's non-NaN count. Two launches; scratch: top_k_scratch_bytes(...) bytes.
void top_k_rows(const float* x, int64_t x_stride, int32_t rows, int32_t cols, int32_t k, void* scratch,
                float* values, int32_t* ids, cudaStream_t s);

// ---- profiling: keeps the stream busy for `ns` nanoseconds (a step's launches queue up behind it,
// so event times measure the GPU's execution, not the host's launch rate).
void gpu_sleep(int64_t ns, cudaStream_t s);

}  // namespace cera::cuda
