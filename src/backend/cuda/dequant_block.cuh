// Device-side decoding of the GGML quant blocks (MODELS.md §2, layouts in format/quant_blocks.h) in
// their GPU layouts (quant_kernels.h), shared by the matvec, dequantize and embedding kernels.
//
// The unit is a chunk of 8 consecutive elements of one block, written as
//     w_j = scale * q_j (+ bias)        (q_j a small integer, held exactly in a float)
// because every format is "per-group scale (and offset) times a small integer": the matvec can then
// sum q_j * x_j and apply scale/bias once per chunk, and dequantization can redo the reference's
// arithmetic step for step (quant_dequant.cpp: scale = d or d*sc, then scale*q, then + m or
// - dmin*mn) with the same f32 roundings, so dequantize_f32 is bit-exact.
//
// Blocks need only be 2-byte aligned (Q2_K's 84 and Q3_K's 110 bytes follow each other in a row; the
// f32 fallback of the matvec decodes rows at any even address), so every multi-byte read here is a
// 16-bit load. The pointer may be global or shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "format/ggml_type.h"

namespace cera::cuda::detail {

struct Chunk8 {
  float q[8];
  float scale;
  float bias;  // 0 for the formats without an offset (kHasBias false)
};

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) { return ld16(p) | ld16(p + 2) << 16; }
__device__ __forceinline__ float h2f(uint32_t bits) { return __half2float(__ushort_as_half(uint16_t(bits))); }

// Byte j of v (an unsigned value < 256) minus `off`, exactly, without the slow int->float convert:
// 0x4B0000bb is the float 2^23 + bb, and subtracting 2^23 + off is exact for such small integers.
__device__ __forceinline__ float byte_minus(uint32_t v, int j, float off) {
  const float f = __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | uint32_t(j)));
  return __fsub_rn(f, 8388608.0f + off);
}

__device__ __forceinline__ void bytes_to_q(uint32_t lo, uint32_t hi, float off, float q[8]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q[j] = byte_minus(lo, j, off);
    q[j + 4] = byte_minus(hi, j, off);
  }
}

// Bits 0..3 of b spread to bit 0 of bytes 0..3 (the shifted copies never overlap, so no carries).
__device__ __forceinline__ uint32_t spread4(uint32_t b) { return ((b & 0xFu) * 0x00204081u) & 0x01010101u; }

// Q3_K on the GPU (quant_kernels.h): signed six-bit scale i (0..15) from the three scale words at
// 96 (w0: low 4 bits of scales 0-7, w1: of 8-15, w2: the top 2 bits of each).
__device__ __forceinline__ int q3_k_scale(uint32_t w0, uint32_t w1, uint32_t w2, int i) {
  const uint32_t low4 = ((i < 8 ? w0 : w1) >> (4 * (i & 7))) & 15u;
  return int(low4 | ((w2 >> (2 * i)) & 3u) << 4) - 32;
}

template <GgmlType T>
struct Block;  // kElems, kBytes, kHasBias, decode(block, part, chunk): elements [8*part, 8*part+8)

// The 32-element formats on the GPU (quant_kernels.h): super-blocks of 8 GGML blocks whose fields
// each form a plane — the 8 f16 scales d at 0, then (Q4_1, Q5_1) the 8 f16 minimums m, (Q5_0, Q5_1)
// the 8 words of fifth bits qh, then the levels, block s's at kLevels + kLevelBytes·s (nibbles: byte j
// holds element j low and 16 + j high, GGML's order within a block). Offsets of the planes:
template <GgmlType T>
struct Planes {
  static constexpr bool kHasMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
  static constexpr bool kHasQh = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  static constexpr int kLevelBytes = T == GgmlType::Q8_0 ? 32 : 16;
  static constexpr int kM = 16;                           // f16 m of block s at kM + 2s
  static constexpr int kQh = kHasMin ? 32 : 16;           // the fifth bits of block s at kQh + 4s
  static constexpr int kLevels = kQh + (kHasQh ? 32 : 0);
  static constexpr int kBytes = kLevels + 8 * kLevelBytes;  // 144, 160, 176, 192, 272
};

// Chunk part (0..31) of a nibble format's super-block b: block s = part / 4, elements 8p..8p+7 of
// it (p = part % 4: chunks 0, 1 the low nibbles of bytes 0-15, chunks 2, 3 the high ones), with the
// fifth bits of Q5_0 / Q5_1 and the block's scale and minimum.
template <GgmlType T>
__device__ __forceinline__ void decode_planes_nibbles(const uint8_t* b, int part, float off, Chunk8& c) {
  using P = Planes<T>;
  const int s = part >> 2, p = part & 3;
  const uint8_t* qs = b + P::kLevels + 16 * s + 8 * (p & 1);
  const int sh = 4 * (p >> 1);
  uint32_t lo = (ld32_a2(qs) >> sh) & 0x0F0F0F0Fu, hi = (ld32_a2(qs + 4) >> sh) & 0x0F0F0F0Fu;
  if constexpr (P::kHasQh) {
    const uint32_t qh = ld32_a2(b + P::kQh + 4 * s) >> (8 * p);  // bits of elements 8p..8p+7
    lo |= spread4(qh) << 4;
    hi |= spread4(qh >> 4) << 4;
  }
  bytes_to_q(lo, hi, off, c.q);
  c.scale = h2f(ld16(b + 2 * s));
  c.bias = P::kHasMin ? h2f(ld16(b + P::kM + 2 * s)) : 0.0f;
}

template <>
struct Block<GgmlType::Q4_0> {
  static constexpr int kElems = 256, kBytes = Planes<GgmlType::Q4_0>::kBytes;
  static constexpr bool kHasBias = false;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    decode_planes_nibbles<GgmlType::Q4_0>(b, part, 8.0f, c);
  }
};

template <>
struct Block<GgmlType::Q4_1> {
  static constexpr int kElems = 256, kBytes = Planes<GgmlType::Q4_1>::kBytes;
  static constexpr bool kHasBias = true;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    decode_planes_nibbles<GgmlType::Q4_1>(b, part, 0.0f, c);
  }
};

template <>
struct Block<GgmlType::Q5_0> {
  static constexpr int kElems = 256, kBytes = Planes<GgmlType::Q5_0>::kBytes;
  static constexpr bool kHasBias = false;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    decode_planes_nibbles<GgmlType::Q5_0>(b, part, 16.0f, c);
  }
};

template <>
struct Block<GgmlType::Q5_1> {
  static constexpr int kElems = 256, kBytes = Planes<GgmlType::Q5_1>::kBytes;
  static constexpr bool kHasBias = true;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    decode_planes_nibbles<GgmlType::Q5_1>(b, part, 0.0f, c);
  }
};

template <>
struct Block<GgmlType::Q8_0> {  // int8 levels, block s's at 16 + 32s
  static constexpr int kElems = 256, kBytes = Planes<GgmlType::Q8_0>::kBytes;
  static constexpr bool kHasBias = false;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    const int s = part >> 2;  // block s, its chunk part % 4
    const uint8_t* qs = b + Planes<GgmlType::Q8_0>::kLevels + 32 * s + 8 * (part & 3);
    // int8 -> (byte ^ 0x80) - 128
    bytes_to_q(ld32_a2(qs) ^ 0x80808080u, ld32_a2(qs + 4) ^ 0x80808080u, 128.0f, c.q);
    c.scale = h2f(ld16(b + 2 * s));
    c.bias = 0.0f;
  }
};

// K-quants: element e = 8*part of the 256; n = e/128 (half), j = (e%128)/32 (2-bit plane), l = e%32.
// Q2_K on the GPU: GGML's 84 bytes and 4 zero bytes (quant_kernels.h).
template <>
struct Block<GgmlType::Q2_K> {
  static constexpr int kElems = 256, kBytes = 88;
  static constexpr bool kHasBias = true;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    const int n = part >> 4, j = (part >> 2) & 3, l = 8 * (part & 3);
    const uint8_t* qs = b + 16 + 32 * n + l;
    const int sh = 2 * j;
    bytes_to_q((ld32_a2(qs) >> sh) & 0x03030303u, (ld32_a2(qs + 4) >> sh) & 0x03030303u, 0.0f, c.q);
    const uint32_t sc = b[8 * n + 2 * j + (l >> 4)];
    const float d = h2f(ld16(b + 80)), dmin = h2f(ld16(b + 82));
    c.scale = __fmul_rn(d, float(sc & 15));
    c.bias = -__fmul_rn(dmin, float(sc >> 4));
  }
};

template <>
struct Block<GgmlType::Q3_K> {  // GPU layout: hmask[32], qs[64], three scale words, f16 d, 2 zero bytes
  static constexpr int kElems = 256, kBytes = 112;
  static constexpr bool kHasBias = false;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    const int n = part >> 4, j = (part >> 2) & 3, l = 8 * (part & 3);
    const uint8_t* qs = b + 32 + 32 * n + l;
    const uint8_t* hm = b + l;
    const int sh = 2 * j, hsh = 4 * n + j;
    // value = low2 - (hmask bit ? 0 : 4) = (low2 | hbit << 2) - 4
    const uint32_t lo = ((ld32_a2(qs) >> sh) & 0x03030303u) | ((ld32_a2(hm) >> hsh) & 0x01010101u) << 2;
    const uint32_t hi = ((ld32_a2(qs + 4) >> sh) & 0x03030303u) | ((ld32_a2(hm + 4) >> hsh) & 0x01010101u) << 2;
    bytes_to_q(lo, hi, 4.0f, c.q);
    const int scale = q3_k_scale(ld32_a2(b + 96), ld32_a2(b + 100), ld32_a2(b + 104), 8 * n + 2 * j + (l >> 4));
    c.scale = __fmul_rn(h2f(ld16(b + 108)), float(scale));
    c.bias = 0.0f;
  }
};

// Q4_K and Q5_K in their GPU layouts (quant_kernels.h): sub-block s's 6-bit scale and minimum from
// the header's words 1-3 (w1: low scale nibbles, w2: low minimum nibbles, w3: the top bits).
__device__ __forceinline__ void k_header_scale_min(uint32_t w1, uint32_t w2, uint32_t w3, int s, uint32_t& sc,
                                                   uint32_t& mn) {
  sc = ((w1 >> (4 * s)) & 15u) | ((w3 >> (4 * s)) & 3u) << 4;
  mn = ((w2 >> (4 * s)) & 15u) | ((w3 >> (4 * s + 2)) & 3u) << 4;
}

// Q4_K and Q5_K (kFifthBit) in their GPU layouts: element e = 8*part of sub-block s = e/32, whose 16
// level bytes hold elements l (low nibble) and 16 + l (high) as Q4_0's blocks do; Q5_K's fifth bit of
// element j is bit j of the word at 144 + 4s.
template <bool kFifthBit>
__device__ __forceinline__ void decode_k_chunk(const uint8_t* b, int part, Chunk8& c) {
  const int s = part >> 2, p = part & 3;  // chunks 0, 1: low nibbles of bytes 0-15; 2, 3: high
  const uint8_t* qs = b + 16 + 16 * s + 8 * (p & 1);
  const int sh = 4 * (p >> 1);
  uint32_t lo = (ld32_a2(qs) >> sh) & 0x0F0F0F0Fu, hi = (ld32_a2(qs + 4) >> sh) & 0x0F0F0F0Fu;
  if constexpr (kFifthBit) {
    const uint32_t high = ld32_a2(b + 144 + 4 * s) >> (8 * p);  // bits of elements 8p..8p+7
    lo |= spread4(high) << 4;
    hi |= spread4(high >> 4) << 4;
  }
  bytes_to_q(lo, hi, 0.0f, c.q);
  uint32_t sc, mn;
  k_header_scale_min(ld32_a2(b + 4), ld32_a2(b + 8), ld32_a2(b + 12), s, sc, mn);
  c.scale = __fmul_rn(h2f(ld16(b)), float(sc));
  c.bias = -__fmul_rn(h2f(ld16(b + 2)), float(mn));
}

template <>
struct Block<GgmlType::Q4_K> {
  static constexpr int kElems = 256, kBytes = 144;
  static constexpr bool kHasBias = true;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) { decode_k_chunk<false>(b, part, c); }
};

template <>
struct Block<GgmlType::Q5_K> {
  static constexpr int kElems = 256, kBytes = 176;
  static constexpr bool kHasBias = true;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) { decode_k_chunk<true>(b, part, c); }
};

// Q6_K in its GPU layout (quant_kernels.h): part = 4s + p is elements 8p..8p+7 of 32-element
// sub-block s, i.e. run r = p >> 1 (elements 16r..16r+15, scale 2s + r) of half h = p & 1: nibble r
// of the half's 8 bytes at 16s + 8h, top bits from its word at 128 + 8s + 4h (bit pairs 2(2r) for
// the first 4 elements, 2(2r + 1) for the last 4), minus 32.
template <>
struct Block<GgmlType::Q6_K> {
  static constexpr int kElems = 256, kBytes = 216;
  static constexpr bool kHasBias = false;
  __device__ static void decode(const uint8_t* b, int part, Chunk8& c) {
    const int s = part >> 2, r = (part >> 1) & 1, h = part & 1;
    const uint8_t* ql = b + 16 * s + 8 * h;
    const uint32_t qh = ld32_a2(b + 128 + 8 * s + 4 * h);
    const int sh = 4 * r;  // run r's nibble, and its first bit pair (words 2r, 2r + 1)
    const uint32_t lo = ((ld32_a2(ql) >> sh) & 0x0F0F0F0Fu) | ((qh >> sh) & 0x03030303u) << 4;
    const uint32_t hi = ((ld32_a2(ql + 4) >> sh) & 0x0F0F0F0Fu) | ((qh >> (sh + 2)) & 0x03030303u) << 4;
    bytes_to_q(lo, hi, 32.0f, c.q);
    const int8_t sc = static_cast<int8_t>(b[192 + 2 * s + r]);
    c.scale = __fmul_rn(h2f(ld16(b + 208)), float(sc));
    c.bias = 0.0f;
  }
};

// Element j of a decoded chunk with the reference's roundings (scale*q, then + bias).
template <bool kHasBias>
__device__ __forceinline__ float chunk_value(const Chunk8& c, int j) {
  const float v = __fmul_rn(c.scale, c.q[j]);
  return kHasBias ? __fadd_rn(v, c.bias) : v;
}

// Plain float formats, one element.
template <GgmlType T>
__device__ __forceinline__ float float_elem(const uint8_t* row, int64_t i) {
  if constexpr (T == GgmlType::F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (T == GgmlType::F16) {
    return h2f(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
  }
}

template <GgmlType T>
inline constexpr bool kIsFloat = T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16;

}  // namespace cera::cuda::detail
