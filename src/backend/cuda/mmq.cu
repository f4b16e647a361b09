// Quantized-weight products for small batches on the int8 tensor cores (mmq.h says why).
//
// Two launches:
//  1. quantize_x_kernel rounds x to int8 per 32 elements (int8_dot.cuh's rounding) and stores it in
//     the order the MMA reads it: per 8 rows of x ("a token group") and 256 elements (a Q4_0 GPU
//     super-block) one 2,560-byte chunk, [8 blocks][32 lanes][8 bytes] of int8 values, each lane's
//     8 bytes the B fragment of m16n8k32 (PTX ISA: lane 4g + i holds elements 4i..4i+3 and
//     16+4i..16+4i+3 of row g), then [8 blocks][8 rows] f32 scales d, then as many d·Σq. A warp
//     copies (the part its weight type reads of) a chunk with 16-byte cp.async and reads its
//     fragments with one conflict-free 8-byte load per lane.
//  2. mmq_kernel: a block owns 16·MF weight rows and BT rows of x; its 4 warps split the
//     super-blocks of k (warp w takes w, w + 4, ...), each streaming its weights' super-blocks
//     (GPU layout: Q4_0 and Q4_K 144 bytes, Q4_1 160, Q5_0 and Q5_K 176, Q5_1 192, Q6_K 216, Q8_0 272)
//     and its x chunks through a
//     private cp.async pipeline
//     of shared-memory stages, then the warps' sums are added in shared memory in a fixed order
//     (results do not depend on timing). The MMA's accumulator starts at the bits of 1.5·2^23, so
//     its int32 result read as a float is 1.5·2^23 + sum exactly (|sum| < 2^22) and one
//     subtraction replaces the int-to-float conversion; the sum is scaled by the weight block's
//     scale times d_x and added into f32 accumulators.
//     * Q4_0, per 32-element block: one m16n8k32 MMA per 16 rows and 8 rows of x. Its A fragment
//       (lane 4g + i: elements 4i..4i+3 and 16+4i.. of rows g and g + 8) is exactly one 32-bit word
//       of a row's nibbles, low nibbles for elements 4i.., high for 16+4i.. (GGML's nibble order),
//       centred to level - 8 in int8 with two integer ops. Q5_0 the same with each level's fifth bit
//       (from its block's word of them) moved to bit 4 of its byte, centred to level - 16. Q8_0 the
//       same, its fragment words the stored int8 levels 4i.. and 16+4i.. of a block.
//     * Q4_K, per 32-element sub-block: one m16n8k32 MMA of its unsigned nibbles (in its GPU layout a
//       sub-block's levels are ordered as a Q4_0 block's, so the A fragment is read the same way),
//       scaled by d · scale, minus dmin · min times the x block's d·Σq. Q5_K the same with each
//       level's fifth bit (from its sub-block's word of them) moved to bit 4 of its byte. Q4_1 and Q5_1
//       as Q4_K and Q5_K, with their block's d and m for scale and minimum.
//     * Q6_K, whose scales cover 16 elements: one m16n8k16 MMA per 16-element sub-block (lane
//       4g + i: elements 4i..4i+3), its 6-bit levels assembled from one word of ql and one of qh,
//       the B fragment the matching half of the x block's (the chunk's first word for elements
//       0..15 of a block, the second for 16..31), scaled by d · scale.
#include "backend/cuda/mmq.h"

#include <cuda_fp16.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/int8_dot.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/quant_kernels.h"
#include "cera/error.h"

namespace cera::cuda {
namespace {

using detail::cp_async16;
using detail::cp_async8;
using detail::cp_async_commit;
using detail::cp_async_wait;

constexpr int kSuperElems = 256;     // a GPU super-block of either type: 8 blocks of 32
constexpr int kChunkQBytes = 2048;   // one token group's int8 x of a super-block,
constexpr int kChunkSumsAt = 2304;   // then its 64 f32 scales d, then its 64 d·Σq (for Q4_K's minimums)
constexpr int kChunkBytes = 2560;
constexpr int kMmqWarps = 4;
constexpr float kMmaBias = 12582912.0f;  // 1.5·2^23
constexpr int kMmaBiasBits = 0x4B400000;

int64_t n_groups(int64_t rows) { return (rows + 7) / 8; }
int64_t n_supers(int64_t k) { return (k + kSuperElems - 1) / kSuperElems; }

// ---- 1. x to int8 in MMA order. Thread (row t, block b, i) takes elements 4i..4i+3 and 16+4i..
// of block b of row t (zeros past the rows or k); the 4 threads of a block share its max|x|.
template <class X>
__global__ void quantize_x_kernel(const X* __restrict__ x, int64_t x_stride, int64_t n_rows, int64_t k, int32_t n_sb,
                                  int64_t n_threads, uint8_t* __restrict__ out) {
  pdl_launch_dependents();
  pdl_wait();  // x is the previous kernel's output
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int i = int(idx & 3);
  const int64_t blocks_per_row = int64_t(n_sb) * 8;
  const int64_t t = (idx >> 2) / blocks_per_row, b = (idx >> 2) % blocks_per_row;
  const bool valid = idx < n_threads && t < n_rows && 32 * b < k;  // k is a multiple of 32
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t e = 32 * b + (j < 4 ? 4 * i + j : 16 + 4 * i + (j - 4));
    v[j] = valid ? float(x[t * x_stride + e]) : 0.0f;
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // n_threads and blocks are multiples of 4:
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));  // a quad is always whole
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint32_t q[2];
  int sum = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t b0 = detail::round_to_i8_bits(v[4 * h], id), b1 = detail::round_to_i8_bits(v[4 * h + 1], id);
    const uint32_t b2 = detail::round_to_i8_bits(v[4 * h + 2], id), b3 = detail::round_to_i8_bits(v[4 * h + 3], id);
    q[h] = __byte_perm(__byte_perm(b0, b1, 0x0040), __byte_perm(b2, b3, 0x0040), 0x5410);
    sum = __dp4a(int(q[h]), 0x01010101, sum);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (idx >= n_threads) return;
  const int64_t tg = t / 8, sb = b / 8;
  const int g = int(t % 8), s = int(b % 8);
  uint8_t* chunk = out + (tg * n_sb + sb) * kChunkBytes;
  reinterpret_cast<uint2*>(chunk)[s * 32 + 4 * g + i] = make_uint2(q[0], q[1]);
  if (i == 0) {
    reinterpret_cast<float*>(chunk + kChunkQBytes)[s * 8 + g] = d;
    reinterpret_cast<float*>(chunk + kChunkSumsAt)[s * 8 + g] = d * float(sum);
  }
}

// ---- 2. the product.
// A weight type's super-block as it travels: its GPU-layout bytes (dequant_block.cuh's Block), the
// piece cp.async copies (16 bytes; Q6_K's 216-byte super-blocks are only 8-byte aligned), and its
// row stride in a stage: the smallest one from kBytes on whose word count is 4 mod 8 (Q4_0 and Q4_K
// 144, Q8_0 272, Q4_1, Q5_0 and Q5_K 176, Q5_1 208, Q6_K 240), so that the 8 rows a warp's fragment
// loads start 4·(r·odd mod 8) banks apart and touch 8 different groups of 4 banks.
template <GgmlType T>
struct MmqWeights {
  static constexpr int kBytes = detail::Block<T>::kBytes;
  static constexpr int kCopy = kBytes % 16 == 0 ? 16 : 8;
  static constexpr int kStride = kBytes + (48 - kBytes % 32) % 32;
  static_assert(kStride % 32 == 16 && kStride % kCopy == 0);
};

template <GgmlType T, int BT, int MF>
struct MmqTile {
  using Wt = MmqWeights<T>;
  static constexpr int kRows = 16 * MF;  // weight rows per block
  static constexpr int kGroups = BT / 8;  // token groups per block (one MMA n-fragment each)
  static constexpr int kWBytes = kRows * Wt::kStride;
  // Of a chunk, what T reads (the d·Σq only the minimums of Q4_1, Q5_1, Q4_K and Q5_K need).
  static constexpr bool kHasBias =
      T == GgmlType::Q4_1 || T == GgmlType::Q5_1 || T == GgmlType::Q4_K || T == GgmlType::Q5_K;
  static constexpr int kXBytes = kHasBias ? kChunkBytes : kChunkSumsAt;
  static constexpr int kStageBytes = kWBytes + kGroups * kXBytes;
  // Super-blocks in flight per warp: enough to cover load latency, few enough for 2-4 blocks an SM.
  static constexpr int kStages = BT <= 16 ? 3 : 2;
  static constexpr int kSmem = kMmqWarps * kStages * kStageBytes;
  static constexpr int kAcc = MF * kGroups * 4;  // f32 accumulators per lane
  static_assert(kMmqWarps * kAcc * 32 * 4 <= kSmem, "the warps' sums reuse the stages");
  static_assert(kWBytes % 16 == 0 && kStageBytes % 16 == 0, "stages stay 16-byte aligned");
};

// Four nibble levels (0..15, one a byte) as int8 level - 8: (n + 0x78) ^ 0x80 per byte, no carries.
__device__ __forceinline__ uint32_t centre_nibbles(uint32_t n) { return (n + 0x78787878u) ^ 0x80808080u; }
// Four 5-bit levels (0..31) as int8 level - 16, and 6-bit ones (0..63) as level - 32, the same way.
__device__ __forceinline__ uint32_t centre_5bit(uint32_t n) { return (n + 0x70707070u) ^ 0x80808080u; }
__device__ __forceinline__ uint32_t centre_6bit(uint32_t n) { return (n + 0x60606060u) ^ 0x80808080u; }

// c = 1.5·2^23 + a·b (int bits; see the top): one m16n8k32 int8 MMA ...
__device__ __forceinline__ void mma_k32_biased(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMmaBiasBits));
}
// ... or m16n8k16 (A: rows g and g + 8, elements 4i..4i+3; B: elements 4i..4i+3 of x row g).
__device__ __forceinline__ void mma_k16_biased(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
               : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0), "r"(kMmaBiasBits));
}

// acc[c] += (sum c) · scale of its (weight row, x row): rows g (c < 2) and g + 8, x rows 2i and 2i + 1.
__device__ __forceinline__ void add_scaled(float (&acc)[4], const int (&c)[4], float w0, float w1, float2 dx) {
  acc[0] = fmaf(__int_as_float(c[0]) - kMmaBias, w0 * dx.x, acc[0]);
  acc[1] = fmaf(__int_as_float(c[1]) - kMmaBias, w0 * dx.y, acc[1]);
  acc[2] = fmaf(__int_as_float(c[2]) - kMmaBias, w1 * dx.x, acc[2]);
  acc[3] = fmaf(__int_as_float(c[3]) - kMmaBias, w1 * dx.y, acc[3]);
}

// The A fragment's two words of a nibble format's row for block (or sub-block) s: lane 4g + i takes
// elements 4i..4i+3 (low nibbles of the block's level word i) and 16+4i..16+4i+3 (its high nibbles),
// as unsigned levels, with bit 4 of each byte from the block's word of fifth bits (Q5_0, Q5_1, Q5_K).
template <GgmlType T>
__device__ __forceinline__ void nibble_levels(const uint8_t* row, int s, int i4, uint32_t& lo, uint32_t& hi) {
  constexpr bool kK = T == GgmlType::Q4_K || T == GgmlType::Q5_K;
  constexpr int kLevels = kK ? 16 : detail::Planes<T>::kLevels;
  const uint32_t q = *reinterpret_cast<const uint32_t*>(row + kLevels + 16 * s + 4 * i4);
  lo = q & 0x0F0F0F0Fu;
  hi = (q >> 4) & 0x0F0F0F0Fu;
  if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1 || T == GgmlType::Q5_K) {
    const int at = T == GgmlType::Q5_K ? 144 : detail::Planes<T>::kQh;
    const uint32_t high = *reinterpret_cast<const uint32_t*>(row + at + 4 * s);
    lo |= detail::spread4(high >> (4 * i4)) << 4;
    hi |= detail::spread4(high >> (16 + 4 * i4)) << 4;
  }
}

// The products of 32-element block s of one staged super-block into acc (see the top).
template <GgmlType T, int BT, int MF>
__device__ __forceinline__ void mmq_block(const uint8_t* st, int s, int groups, int g, int i4, int lane,
                                          float (&acc)[MF][BT / 8][4]) {
  using S = MmqTile<T, BT, MF>;
  constexpr int kStride = S::Wt::kStride;
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q8_0 || T == GgmlType::Q5_0) {
    uint32_t a[MF][4];
    float dw[MF][2];
#pragma unroll
    for (int m = 0; m < MF; ++m) {
      const uint8_t* r0 = st + (16 * m + g) * kStride;
      const uint8_t* r1 = r0 + 8 * kStride;
      if constexpr (T == GgmlType::Q4_0) {
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(r0 + 16 + 16 * s + 4 * i4);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(r1 + 16 + 16 * s + 4 * i4);
        a[m][0] = centre_nibbles(w0 & 0x0F0F0F0Fu);
        a[m][1] = centre_nibbles(w1 & 0x0F0F0F0Fu);
        a[m][2] = centre_nibbles((w0 >> 4) & 0x0F0F0F0Fu);
        a[m][3] = centre_nibbles((w1 >> 4) & 0x0F0F0F0Fu);
      } else if constexpr (T == GgmlType::Q5_0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          uint32_t lo, hi;
          nibble_levels<T>(r ? r1 : r0, s, i4, lo, hi);
          a[m][r] = centre_5bit(lo);
          a[m][2 + r] = centre_5bit(hi);
        }
      } else {  // Q8_0: the fragment's words are the levels as stored
        const uint8_t* q0 = r0 + 16 + 32 * s + 4 * i4;
        const uint8_t* q1 = r1 + 16 + 32 * s + 4 * i4;
        a[m][0] = *reinterpret_cast<const uint32_t*>(q0);
        a[m][1] = *reinterpret_cast<const uint32_t*>(q1);
        a[m][2] = *reinterpret_cast<const uint32_t*>(q0 + 16);
        a[m][3] = *reinterpret_cast<const uint32_t*>(q1 + 16);
      }
      dw[m][0] = __half2float(*reinterpret_cast<const __half*>(r0 + 2 * s));
      dw[m][1] = __half2float(*reinterpret_cast<const __half*>(r1 + 2 * s));
    }
#pragma unroll
    for (int j = 0; j < S::kGroups; ++j) {
      if (j >= groups) break;  // warp-uniform
      const uint8_t* chunk = st + S::kWBytes + j * S::kXBytes;
      const uint2 b = reinterpret_cast<const uint2*>(chunk)[s * 32 + lane];
      const float2 dx = reinterpret_cast<const float2*>(chunk + kChunkQBytes)[s * 4 + i4];  // x rows 2i, 2i + 1
#pragma unroll
      for (int m = 0; m < MF; ++m) {
        int c[4];
        mma_k32_biased(c, a[m], b.x, b.y);
        add_scaled(acc[m][j], c, dw[m][0], dw[m][1], dx);
      }
    }
  } else if constexpr (S::kHasBias) {
    // Unsigned levels with a scale and a bias per 32 elements: Q4_1 / Q5_1 (d and m of block s) and
    // Q4_K / Q5_K (sub-block s: d·scale and −dmin·minimum from the header words; in their GPU layout
    // a sub-block's levels are ordered as a Q4_0 block's, so the A fragment is read the same way).
    uint32_t a[MF][4];
    float sc[MF][2], bias[MF][2];  // of rows g and g + 8 (exact in f32)
#pragma unroll
    for (int m = 0; m < MF; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint8_t* row = st + (16 * m + g + 8 * r) * kStride;
        if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
          const uint32_t* head = reinterpret_cast<const uint32_t*>(row);
          uint32_t scale, mn;
          detail::k_header_scale_min(head[1], head[2], head[3], s, scale, mn);
          sc[m][r] = __half2float(*reinterpret_cast<const __half*>(row)) * float(scale);
          bias[m][r] = -(__half2float(*reinterpret_cast<const __half*>(row + 2)) * float(mn));
        } else {
          sc[m][r] = __half2float(*reinterpret_cast<const __half*>(row + 2 * s));
          bias[m][r] = __half2float(*reinterpret_cast<const __half*>(row + detail::Planes<T>::kM + 2 * s));
        }
        nibble_levels<T>(row, s, i4, a[m][r], a[m][2 + r]);
      }
#pragma unroll
    for (int j = 0; j < S::kGroups; ++j) {
      if (j >= groups) break;  // warp-uniform
      const uint8_t* chunk = st + S::kWBytes + j * S::kXBytes;
      const uint2 b = reinterpret_cast<const uint2*>(chunk)[s * 32 + lane];
      const float2 dx = reinterpret_cast<const float2*>(chunk + kChunkQBytes)[s * 4 + i4];
      const float2 xs = reinterpret_cast<const float2*>(chunk + kChunkSumsAt)[s * 4 + i4];  // d·Σq
#pragma unroll
      for (int m = 0; m < MF; ++m) {
        int c[4];
        mma_k32_biased(c, a[m], b.x, b.y);
        add_scaled(acc[m][j], c, sc[m][0], sc[m][1], dx);
        acc[m][j][0] = fmaf(bias[m][0], xs.x, acc[m][j][0]);
        acc[m][j][1] = fmaf(bias[m][0], xs.y, acc[m][j][1]);
        acc[m][j][2] = fmaf(bias[m][1], xs.x, acc[m][j][2]);
        acc[m][j][3] = fmaf(bias[m][1], xs.y, acc[m][j][3]);
      }
    }
  } else {
    // Block s is sub-block s of the super-block in its GPU layout (quant_kernels.h): lane 4g + i4's
    // elements 16h + 4i4.. are in half hh = i4 / 2 of it, word i4 % 2 of that half's nibble bytes
    // (low nibbles for h = 0, high for 1) and bit pairs 2w, w = 2h + i4 % 2, of its top-bit word;
    // run h takes scale 2s + h.
    const int hh = i4 >> 1, w0 = i4 & 1;
    uint32_t a[MF][2][2];
    float ws[MF][2][2];  // [m][h][row g, g + 8]
#pragma unroll
    for (int m = 0; m < MF; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint8_t* row = st + (16 * m + g + 8 * r) * kStride;
        const float d = __half2float(*reinterpret_cast<const __half*>(row + 208));
        const uint32_t ql = *reinterpret_cast<const uint32_t*>(row + 16 * s + 8 * hh + 4 * w0);
        const uint32_t qh = *reinterpret_cast<const uint32_t*>(row + 128 + 8 * s + 4 * hh);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t lo = (ql >> (4 * h)) & 0x0F0F0F0Fu;
          a[m][h][r] = centre_6bit(lo | ((qh >> (2 * (2 * h + w0))) & 0x03030303u) << 4);
          ws[m][h][r] = d * float(reinterpret_cast<const int8_t*>(row + 192)[2 * s + h]);
        }
      }
#pragma unroll
    for (int j = 0; j < S::kGroups; ++j) {
      if (j >= groups) break;  // warp-uniform
      const uint8_t* chunk = st + S::kWBytes + j * S::kXBytes;
      const uint2 b = reinterpret_cast<const uint2*>(chunk)[s * 32 + lane];
      const float2 dx = reinterpret_cast<const float2*>(chunk + kChunkQBytes)[s * 4 + i4];
#pragma unroll
      for (int m = 0; m < MF; ++m) {
        int c[4];
        mma_k16_biased(c, a[m][0][0], a[m][0][1], b.x);
        add_scaled(acc[m][j], c, ws[m][0][0], ws[m][0][1], dx);
        mma_k16_biased(c, a[m][1][0], a[m][1][1], b.y);
        add_scaled(acc[m][j], c, ws[m][1][0], ws[m][1][1], dx);
      }
    }
  }
}

// grid (⌈n_rows / 16·MF⌉, ⌈n_x_rows / BT⌉), kMmqWarps warps, MmqTile::kSmem bytes of shared memory.
template <GgmlType T, int BT, int MF>
__global__ void __launch_bounds__(kMmqWarps * 32)
    mmq_kernel(const uint8_t* __restrict__ w, int64_t n_rows, int32_t n_sb, size_t row_bytes,
               const uint8_t* __restrict__ xq, int32_t n_tg, int64_t n_x_rows, float* __restrict__ y,
               int64_t y_stride, float alpha, float beta) {
  using S = MmqTile<T, BT, MF>;
  using Wt = typename S::Wt;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, i4 = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * S::kRows;
  const int tg0 = int(blockIdx.y) * S::kGroups;
  const int groups = min(S::kGroups, n_tg - tg0);  // token groups with rows of x (≥ 1)
  uint8_t* const stages = smem + warp * S::kStages * S::kStageBytes;
  const int n_mine = warp < n_sb ? (n_sb - warp + kMmqWarps - 1) / kMmqWarps : 0;  // this warp's super-blocks

  // This warp's i-th super-block into stage i % kStages: the block's rows (a tail block repeats the
  // last row; its results are not stored), then the token groups' x chunks.
  auto issue_w = [&](int i) {
    const int64_t sb = warp + int64_t(i) * kMmqWarps;
    uint8_t* st = stages + (i % S::kStages) * S::kStageBytes;
    constexpr int kPieces = Wt::kBytes / Wt::kCopy;
    for (int c = lane; c < S::kRows * kPieces; c += 32) {
      const int r = c / kPieces, p = c % kPieces;
      const uint8_t* src = w + min(row0 + r, n_rows - 1) * row_bytes + sb * Wt::kBytes + p * Wt::kCopy;
      if constexpr (Wt::kCopy == 16) cp_async16(st + r * Wt::kStride + p * 16, src);
      else cp_async8(st + r * Wt::kStride + p * 8, src);
    }
  };
  auto issue_x = [&](int i) {
    const int64_t sb = warp + int64_t(i) * kMmqWarps;
    uint8_t* st = stages + (i % S::kStages) * S::kStageBytes + S::kWBytes;
    for (int c = lane; c < groups * (S::kXBytes / 16); c += 32) {
      const int gi = c / (S::kXBytes / 16), q = c % (S::kXBytes / 16);
      cp_async16(st + gi * S::kXBytes + q * 16, xq + (int64_t(tg0 + gi) * n_sb + sb) * kChunkBytes + q * 16);
    }
  };
  // Weights are no earlier kernel's output (pdl.h): the first stages' are requested before the wait.
#pragma unroll
  for (int i = 0; i < S::kStages - 1; ++i)
    if (i < n_mine) issue_w(i);
  pdl_wait();
#pragma unroll
  for (int i = 0; i < S::kStages - 1; ++i) {
    if (i < n_mine) issue_x(i);
    cp_async_commit();  // possibly empty: group i is always super-block i
  }

  float acc[MF][S::kGroups][4];
#pragma unroll
  for (int m = 0; m < MF; ++m)
#pragma unroll
    for (int j = 0; j < S::kGroups; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[m][j][c] = 0.0f;

  for (int i = 0; i < n_mine; ++i) {
    cp_async_wait<S::kStages - 2>();  // super-block i has landed
    __syncwarp();
    const uint8_t* st = stages + (i % S::kStages) * S::kStageBytes;
#pragma unroll 2
    for (int s = 0; s < 8; ++s) mmq_block<T, BT, MF>(st, s, groups, g, i4, lane, acc);
    __syncwarp();  // the stage is refilled below
    const int next = i + S::kStages - 1;
    if (next < n_mine) issue_w(next), issue_x(next);
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its stages: they hold the warps' sums now

  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int m = 0; m < MF; ++m)
#pragma unroll
    for (int j = 0; j < S::kGroups; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) red[(warp * S::kAcc + (m * S::kGroups + j) * 4 + c) * 32 + lane] = acc[m][j][c];
  __syncthreads();
  // Accumulator c of lane (g, i) in fragment (m, j) is y[row 16m + g + 8·(c ≥ 2)][x row 8j + 2i + c % 2].
  for (int e = threadIdx.x; e < S::kAcc * 32; e += kMmqWarps * 32) {
    float v = red[e];
#pragma unroll
    for (int w2 = 1; w2 < kMmqWarps; ++w2) v += red[w2 * S::kAcc * 32 + e];
    const int idx = e / 32, ln = e % 32, c = idx % 4, j = (idx / 4) % S::kGroups, m = idx / (4 * S::kGroups);
    const int64_t row = row0 + 16 * m + (ln >> 2) + (c >= 2 ? 8 : 0);
    const int64_t t = int64_t(tg0 + j) * 8 + 2 * (ln & 3) + (c & 1);
    if (row < n_rows && t < n_x_rows) {
      float* out = y + t * y_stride + row;
      *out = beta == 0.0f ? alpha * v : fmaf(alpha, v, beta * *out);
    }
  }
}

template <GgmlType T, int BT, int MF>
void launch_product(const uint8_t* w, int64_t n_rows, int32_t n_sb, size_t row_bytes, const uint8_t* xq,
                    int64_t n_x_rows, float* y, int64_t y_stride, float alpha, float beta, cudaStream_t stream) {
  using S = MmqTile<T, BT, MF>;
  {  // more than the default 48 KB of dynamic shared memory: once per device, on its first (eager) use
    static std::mutex mutex;
    static std::set<int> devices;
    int dev = 0;
    CERA_CUDA_CHECK(cudaGetDevice(&dev));
    const std::lock_guard<std::mutex> lock(mutex);
    if (!devices.count(dev)) {
      CERA_CUDA_CHECK(
          cudaFuncSetAttribute(mmq_kernel<T, BT, MF>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
      devices.insert(dev);
    }
  }
  const int32_t n_tg = int32_t(n_groups(n_x_rows));
  const dim3 grid(unsigned((n_rows + S::kRows - 1) / S::kRows), unsigned((n_tg + S::kGroups - 1) / S::kGroups));
  launch_pdl(mmq_kernel<T, BT, MF>, grid, dim3(kMmqWarps * 32), size_t(S::kSmem), stream, w, n_rows, n_sb, row_bytes,
             xq, n_tg, n_x_rows, y, y_stride, alpha, beta);
}

// The block shape by rows of x: one token group up to 8, two up to 16, else groups of 32 rows over
// 32 weight rows (CERA_CUDA_MMQ_TILE=8|16|32 forces one, for measuring).
template <GgmlType T>
void launch_for_rows(const uint8_t* w, int64_t n_rows, int32_t n_sb, size_t row_bytes, const uint8_t* xq,
                     int64_t n_x_rows, float* y, int64_t y_stride, float alpha, float beta, cudaStream_t stream) {
  int tile = n_x_rows <= 8 ? 8 : n_x_rows <= 16 ? 16 : 32;
  if (const char* e = std::getenv("CERA_CUDA_MMQ_TILE")) {
    const int forced = std::atoi(e);
    if (forced == 8 || forced == 16 || forced == 32) tile = forced;
  }
  if (tile == 8) launch_product<T, 8, 1>(w, n_rows, n_sb, row_bytes, xq, n_x_rows, y, y_stride, alpha, beta, stream);
  else if (tile == 16) launch_product<T, 16, 1>(w, n_rows, n_sb, row_bytes, xq, n_x_rows, y, y_stride, alpha, beta, stream);
  else launch_product<T, 32, 2>(w, n_rows, n_sb, row_bytes, xq, n_x_rows, y, y_stride, alpha, beta, stream);
}

}  // namespace

bool mmq_supported(GgmlType type, const void* w, size_t row_bytes) {
  size_t align = 0;  // kCopy
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K:
      align = 16;
      break;
    case GgmlType::Q6_K: align = 8; break;
    default: break;
  }
  return align != 0 && reinterpret_cast<uintptr_t>(w) % align == 0 && row_bytes % align == 0;
}

int64_t mmq_max_rows() {
  const char* e = std::getenv("CERA_CUDA_MMQ_ROWS");
  if (!e) return kMmqDefaultRows;
  const long v = std::strtol(e, nullptr, 10);
  return v < 0 ? 0 : v > kMmqMaxRows ? kMmqMaxRows : int64_t(v);
}

size_t mmq_scratch_bytes(int64_t rows, int64_t k) {
  return size_t(n_groups(rows)) * size_t(n_supers(k)) * kChunkBytes;
}

void mmq(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const void* x, bool x_f16,
         int64_t x_stride, int64_t n_x_rows, float* y, int64_t y_stride, float alpha, float beta, void* scratch,
         cudaStream_t stream) {
  if (!mmq_supported(type, w, row_bytes))
    throw Error(ErrorCode::Unsupported, "cuda mmq: weights must be Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K or Q5_K "
                                        "(16-byte aligned rows) or Q6_K (8-byte aligned rows), not " +
                                            std::string(ggml_type_name(type)));
  if (n_x_rows < 1 || n_x_rows > kMmqMaxRows)
    throw Error(ErrorCode::InvalidArgument, "cuda mmq: n_x_rows must be 1.." + std::to_string(kMmqMaxRows));
  const int64_t k_unit = ggml_traits(type).block_elems;  // the K-quants' rows are whole super-blocks
  if (k <= 0 || k % k_unit != 0)
    throw Error(ErrorCode::InvalidArgument, "cuda mmq: k must be a positive multiple of " + std::to_string(k_unit));
  if (row_bytes < device_row_bytes(type, k))
    throw Error(ErrorCode::InvalidArgument, "cuda mmq: rows are shorter than their k elements");
  if (n_rows <= 0) return;
  const int32_t n_sb = int32_t(n_supers(k));
  auto* xq = static_cast<uint8_t*>(scratch);
  const int64_t n_threads = n_groups(n_x_rows) * 8 * int64_t(n_sb) * 8 * 4;
  const unsigned blocks = unsigned((n_threads + 255) / 256);
  if (x_f16)
    launch_pdl(quantize_x_kernel<__half>, dim3(blocks), dim3(256), 0, stream, static_cast<const __half*>(x), x_stride,
               n_x_rows, k, n_sb, n_threads, xq);
  else
    launch_pdl(quantize_x_kernel<float>, dim3(blocks), dim3(256), 0, stream, static_cast<const float*>(x), x_stride,
               n_x_rows, k, n_sb, n_threads, xq);
  CERA_CUDA_CHECK_LAUNCH();
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
#define CERA_MMQ_CASE(T) \
  case GgmlType::T:      \
    launch_for_rows<GgmlType::T>(wb, n_rows, n_sb, row_bytes, xq, n_x_rows, y, y_stride, alpha, beta, stream); break;
    CERA_MMQ_CASE(Q4_0)
    CERA_MMQ_CASE(Q4_1)
    CERA_MMQ_CASE(Q5_0)
    CERA_MMQ_CASE(Q5_1)
    CERA_MMQ_CASE(Q8_0)
    CERA_MMQ_CASE(Q4_K)
    CERA_MMQ_CASE(Q5_K)
    CERA_MMQ_CASE(Q6_K)
#undef CERA_MMQ_CASE
    default: break;  // mmq_supported said no above
  }
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
