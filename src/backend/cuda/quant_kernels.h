// Kernels that read weights in their stored GGML formats (MODELS.md §2) on the GPU: the decode
// matrix-vector product, dequantization for the prefill GEMM path, and embedding lookup.
// Host-callable launchers; every pointer is device memory; every launch goes on `stream` and is
// graph-capturable (no allocation, no synchronisation).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/step_meta.h"
#include "format/ggml_type.h"

namespace cera::cuda {

// The weight types these kernels read: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K.
bool supports_weight_type(GgmlType type);

// Float weights live on the GPU as stored; quantized ones in their GGML formats' bytes, arranged so
// that a lane loads what it needs with aligned 8- or 16-byte loads:
// * the 32-element formats Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, whose rows are repacked into super-blocks
//   of 8 blocks (the same bytes; a row's last super-block zero-padded) with each field of the 8
//   blocks in a plane of its own: the 8 f16 scales at 0, then Q4_1's / Q5_1's 8 f16 minimums at 16,
//   Q5_0's / Q5_1's 8 words of fifth bits, then the levels (16 nibble bytes a block, 32 for Q8_0),
//   every plane 16-byte aligned (144, 160, 176, 192 and 272 bytes; dequant_block.cuh's Planes), so
//   that a lane loads a block's levels with one aligned load (docs/BENCHMARKS.md, "A GPU layout for
//   Q4_0"; GGML's 18/20/22/24/34-byte blocks are only 2-byte aligned);
// * Q4_K, whose 144-byte super-blocks keep their size and bytes in another order, so that a lane
//   gets its sub-block's scale and minimum with shifts of one 16-byte header load and its levels as
//   a Q4_0 lane does:
//   bytes 0-3: f16 d, f16 dmin; then three little-endian words: bits 4s..4s+3 of the first hold
//   the low 4 bits of sub-block s's 6-bit scale, of the second those of its minimum, and bits
//   4s..4s+1 / 4s+2..4s+3 of the third their top 2 bits; then at 16 + 16s sub-block s's 32 levels,
//   byte j holding element j (low nibble) and 16 + j (high) — Q4_0's order within a block; Q5_K
//   the same in its first 144 bytes (the low 4 bits of each level) and then, at 144 + 4s, one
//   little-endian word per sub-block whose bit j is its element j's fifth bit (176 bytes, as GGML's);
// * Q2_K, whose 84-byte super-blocks get 4 zero bytes each (88), so that its lanes load their bytes
//   with 8-byte loads too;
// * Q6_K, 210 -> 216 bytes, its levels in the order a lane reads them (a lane takes half h of a
//   32-element sub-block s: elements 8h..8h+7 and 16+8h..16+8h+7): at 16s + 8h the half's 8 nibble
//   bytes (byte j: the low 4 bits of element 8h + j's 6-bit level in its low nibble, of 16 + 8h + j's
//   in its high one — Q4_0's order), at 128 + 8s + 4h one word of the half's top bit pairs (bits
//   2w..2w+1 of byte j: element 8h + j for w = 0, 8h + 4 + j for 1, 16 + 8h + j for 2, 16 + 8h + 4 + j
//   for 3), then GGML's 16 int8 scales (elements 16i.. take scale i) at 192, f16 d at 208, 6 zero
//   bytes. A lane's half is one 8-byte and one 4-byte load, its levels put together with fixed
//   shifts (GGML's order spreads them over 32 bytes, shifted by the sub-block's quarter);
// * Q3_K, 110 -> 112 bytes: hmask[32] and qs[64] as stored, then its 16 six-bit scales as three
//   little-endian words (the low 4 bits of scale i at bits 4i.. of the first for i < 8, at 4(i − 8)..
//   of the second otherwise; its top 2 bits at bits 2i.. of the third), f16 d, 2 zero bytes.
// Every kernel here reads that layout; device_row_bytes / to_device_layout make it from GGML rows
// (the backend's upload, tests).
size_t device_row_bytes(GgmlType type, int64_t k);
// Whether `type` keeps its stored GGML layout on the GPU (F32, F16, BF16): its rows upload as is.
bool keeps_stored_layout(GgmlType type);
// n_rows GGML rows of k elements (src_row_bytes apart) into device-layout rows dst_row_bytes apart
// (≥ device_row_bytes); bytes of a dst row past device_row_bytes are left as they are.
void to_device_layout(GgmlType type, const uint8_t* src, size_t src_row_bytes, int64_t n_rows, int64_t k,
                      uint8_t* dst, size_t dst_row_bytes);

// Rows of x one matvec launch handles; larger batches go through dequantize + GEMM.
inline constexpr int kMaxMatvecRows = 8;
// Rows of x a matvec with the short-conv epilogue handles (decode steps of the matvec path).
inline constexpr int kMaxShortConvMatvecRows = 2;

// What a matvec does around the product v[t][n] = Σ_k W[n][k] · x'[t][k] (the fusions that remove a
// decode step's small kernels; each has a plain-op reference in backend.h's fused ops).
struct MatvecFusion {
  // The norm: with norm_w, x' = norm_w ⊙ x / sqrt(mean(x²) + norm_eps) per row (k elements),
  // computed as (W·(norm_w ⊙ x)) / rms(x) inside the one kernel; otherwise x' = x.
  const float* norm_w = nullptr;
  float norm_eps = 0.f;
  enum class Out {
    Store,       // y[t][n] = v[t][n]
    Accumulate,  // y[t][n] += scale · v[t][n]   (a residual add)
    SwiGLU,      // W is [gate; up] (n_rows = 2F, gate rows first): y[t][j] = silu(v[t][j]) · v[t][F + j], j < F
    ShortConv,   // W is LFM2's in_proj [B; C; X] (n_rows = 3D): y[t][c] = C·conv(B⊙X) (see `conv`)
  } out = Out::Store;
  float scale = 1.f;
  // Out::ShortConv: x row t is the step's token t, the only token of its sequence (decode). Channel c
  // of y[t] is C[c] · Σ_j w[c][j] · h_j over the sequence's history h = (conv state, B[c]⊙X[c]),
  // in short_conv.cu's order of operations, and the state is rolled forward by one input.
  struct ShortConv {
    const int32_t* token_seq = nullptr;  // StepView::token_seq
    const DeviceSeq* seqs = nullptr;     // StepView::seqs (conv_slot)
    const float* w = nullptr;            // [D, len]
    int32_t len = 0;                     // kernel length L (the state holds L - 1 inputs)
    float* state = nullptr;              // the layer's slots, (L - 1) · D floats each
  } conv;
  // One x row handed from a product's epilogue to the next product as int8, so that the next
  // product's blocks do not each round x again (the decode FFN: the SwiGLU output into the down
  // product). Groups of 8 elements, each with its own f32 scale d = max|v| / 127 and levels
  // v·(1/d) rounded once to nearest even (int8_dot.cuh's rounding, per 8 elements where a product
  // rounds its own x per 32: a producer block owns 8 outputs). A 32-element block's four groups are
  // stored in lane order g0, g2, g1, g3 (32 bytes; scales likewise, 4 floats), so that the half a
  // lane takes (elements 8h..8h+7 and 16+8h..16+8h+7, int8_dot.cuh) is 16 contiguous bytes and
  // its two scales one float2. A row that a norm will precede holds norm_w ⊙ v in the groups and
  // each group's Σv² in `ssq` (same order), from which the reader takes rms(v). Where
  // matvec_int8_handoff says it applies:
  struct Int8X {
    int8_t* q = nullptr;   // n elements (n a multiple of 32)
    float* d = nullptr;    // n / 8 scales
    float* ssq = nullptr;  // n / 8 sums of squares, for a row that a norm will precede
  };
  // Out::SwiGLU, one x row: y is also written this way. Out::Accumulate, one x row, with
  // write_norm_w: the updated row v (the residual stream) is written for a next product that
  // folds the norm of weights write_norm_w (ssq required).
  Int8X write_int8;
  const float* write_norm_w = nullptr;
  // One x row, read from here instead of x (which is then unused). With norm_w, the row was
  // written with write_norm_w = norm_w (ssq required); without, by a SwiGLU product.
  Int8X read_int8;
  // Whether blocks issue their first weight loads before waiting for the previous kernel (PDL):
  // weights never depend on it, so their latency overlaps its tail. (An earlier variant that
  // prefetched whole rows into L2 instead cost ~10 % of LFM2-1.2B BF16 decode on the H200.)
  bool early_weights = true;
};

// y[t][n] = Σ_k W[n][k] · x[t][k] for t < n_x_rows (1 ≤ n_x_rows ≤ kMaxMatvecRows), n < n_rows.
// W: n_rows rows of k elements in `type`, row_bytes apart. x: F32, row stride x_stride elements.
// y: F32, row stride y_stride elements. Accumulates in F32; reads W exactly once (memory-bound).
// `fusion` adds a norm prologue and/or another output mode (see MatvecFusion); launched with PDL.
void matvec(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x,
            int64_t x_stride, int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream,
            const MatvecFusion& fusion = {});

// Products of quantized weights (every type above) round each 32-element block
// of x' (x, times norm_w with the norm; the 1/rms(x) factor is applied to the sum) to int8 and take
// integer dot products (int8_dot.cuh), as
// llama.cpp and cera's CPU path do with quantized weights: fewer instructions per weight and 8 rows
// per block, where decoding to f32 is limited to 4 (docs/BENCHMARKS.md has the measurements). On
// unless the environment has CERA_MATVEC_INT8=0; matvec_int8_enable switches it process-wide (tests
// that want exact weights, A/B benchmarks), together with the batched int8 products (mmq.h).
void matvec_int8_enable(bool on);
bool matvec_int8_enabled();
// Whether matvec of `type` takes int8 activations now (enabled, and one of the types above).
bool matvec_int8_activations(GgmlType type);

// Whether a product of `producer` weights (SwiGLU or Accumulate) can hand its output row to a
// product of `consumer` weights as MatvecFusion::Int8X (one x row; n_out, the handed row's
// elements, a multiple of 32): both Q4_0 with int8 activations on. CERA_CUDA_INT8_HANDOFF=0:
// never (read per call, for A/B runs); =all: matvec_int8_writer_keeps_launch says yes to every
// launch (how the tests reach the hand-off on small models).
bool matvec_int8_handoff(GgmlType producer, GgmlType consumer, int64_t n_out);
// Whether a one-row product of these weights (n_rows × k) with output `out` takes the same launch
// when it writes Int8X as when it does not: an accumulating Q4_0 product with blocks of 8 rows or
// more, a SwiGLU one (its norm folded) with 16-row blocks. matvec writes Int8X in other launches
// too (the tests use it), but there the hand-off changes the block shape, which has not been
// measured to pay (docs/BENCHMARKS.md); the backend asks this first.
bool matvec_int8_writer_keeps_launch(GgmlType type, int64_t n_rows, int64_t k, MatvecFusion::Out out);

// Whether matvec can take Out::ShortConv for these weights (float rows must be 16-byte aligned) and
// a conv kernel of conv_len taps (at most 4).
bool matvec_short_conv_supported(GgmlType type, const void* w, size_t row_bytes, int64_t k, int32_t conv_len);

// out[n][k] = W[n][k] as f16 / bf16 / f32, densely packed (row stride k).
void dequantize_f16(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, __half* out,
                    cudaStream_t stream);
void dequantize_bf16(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes,
                     __nv_bfloat16* out, cudaStream_t stream);
void dequantize_f32(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, float* out,
                    cudaStream_t stream);

// out[t] = dequantized table row tokens[t], for t < n_tokens (ids already validated by the caller).
// out: F32, row stride out_stride elements.
void embed_rows(GgmlType type, const void* table, int64_t k, size_t row_bytes, const int32_t* tokens,
                int32_t n_tokens, float* out, int64_t out_stride, cudaStream_t stream);

}  // namespace cera::cuda
