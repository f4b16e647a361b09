// Int8-activation dot products for the decode matvec of quantized weights (every GGML type the GPU
// reads: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K; matvec.cu).
//
// Why: decoded to f32, a 4-bit weight costs ~4.5 instructions, and those products ran at ~30 % of
// HBM bandwidth on the H200. With x rounded to int8 per 32 elements (as llama.cpp and cera's CPU
// do) a 32-element block is 8 dp4a and a few integer ops, and a block can afford 8 rows instead of
// 4 (docs/BENCHMARKS.md: LFM2-1.2B Q4_0 decode +14 %).
//
// The rounding (the host reference in tests/backend_cuda/matvec_int8_test.cpp repeats it):
//   per 32 consecutive elements v of x':  d = max|v| / 127 (f32),  id = d != 0 ? 1/d : 0 (f32),
//   q = v · id rounded once, to nearest even (one fma with 1.5·2^23, no f32 product in between).
// Two lanes share a 32-element block (so a warp's x slice and its registers stay as small as the
// f32 path's); each adds float(Σ q_w q over its half) · (f16 d_w · d), the integer sum exact.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant_block.cuh"
#include "format/ggml_type.h"

namespace cera::cuda::detail {

// A lane's half of a 32-element block of x as int8. Two lanes share a block: half h holds elements
// 8h..8h+7 (q[0..1]) and 16+8h..16+8h+7 (q[2..3]), element 4i + j of a run in byte j of its word,
// so a Q4_0 lane reads 8 contiguous bytes (both nibbles of elements 8h+j and 16+8h+j).
struct XHalfI8 {
  uint32_t q[4];
  float d;  // the block's scale, the same in both halves
  int sum;  // Σq of this half: for the offsets (Q4_0's levels stand for level - 8; Q4_K's minimum)
};

// The low byte of fma(v, id, 1.5·2^23)'s bits is round-to-nearest-even(v·id) as an int8, for
// |v·id| ≤ 127.5 (the float's units place is 2^0 there).
__device__ __forceinline__ uint32_t round_to_i8_bits(float v, float id) {
  return __float_as_uint(__fmaf_rn(v, id, 12582912.0f));
}

// v: this lane's 16 elements (8h..8h+7, then 16+8h..16+8h+7). The lane pair (lane ^ 1) shares the
// block's max|v|, so all 32 lanes of the warp must call this together.
__device__ __forceinline__ void quantize_x16(const float v[16], XHalfI8& out) {
  float m[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) m[j] = fmaxf(fabsf(v[j]), fabsf(v[j + 8]));
#pragma unroll
  for (int j = 0; j < 4; ++j) m[j] = fmaxf(m[j], m[j + 4]);
  float amax = fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t b0 = round_to_i8_bits(v[4 * i], id), b1 = round_to_i8_bits(v[4 * i + 1], id);
    const uint32_t b2 = round_to_i8_bits(v[4 * i + 2], id), b3 = round_to_i8_bits(v[4 * i + 3], id);
    out.q[i] = __byte_perm(__byte_perm(b0, b1, 0x0040), __byte_perm(b2, b3, 0x0040), 0x5410);
    sum = __dp4a(int(out.q[i]), 0x01010101, sum);
  }
  out.d = d;
  out.sum = sum;
}

// The formats with an int8 path (one list for host and device code).
__host__ __device__ constexpr bool has_int8_dot(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K ||
         t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}
template <GgmlType T>
inline constexpr bool kHasInt8Dot = has_int8_dot(T);

// init + Σ level · q over this lane's half of a block of 4-bit levels, from its 8 nibble bytes
// 8h..8h+7 (low nibbles: elements 8h+j, high: 16+8h+j; Q4_0's order, which Q4_1, Q5_0, Q5_1, Q4_K
// and Q5_K keep on the GPU), exact.
__device__ __forceinline__ int nibble_dot(uint2 w, const XHalfI8& x, int init) {
  int s = init;
  s = __dp4a(int(w.x & 0x0F0F0F0Fu), int(x.q[0]), s);
  s = __dp4a(int(w.y & 0x0F0F0F0Fu), int(x.q[1]), s);
  s = __dp4a(int((w.x >> 4) & 0x0F0F0F0Fu), int(x.q[2]), s);
  s = __dp4a(int((w.y >> 4) & 0x0F0F0F0Fu), int(x.q[3]), s);
  return s;
}

// The same for 5-bit levels (Q5_0, Q5_1, Q5_K): the nibbles as nibble_dot's and each element's
// fifth bit from `high`, which holds this half's at bits 0-7 (elements 8h..) and 16-23 (16+8h..).
__device__ __forceinline__ int fifth_bit_dot(uint2 w, uint32_t high, const XHalfI8& x, int init) {
  const uint32_t l0 = (w.x & 0x0F0F0F0Fu) | spread4(high) << 4;
  const uint32_t l1 = (w.y & 0x0F0F0F0Fu) | spread4(high >> 4) << 4;
  const uint32_t l2 = ((w.x >> 4) & 0x0F0F0F0Fu) | spread4(high >> 16) << 4;
  const uint32_t l3 = ((w.y >> 4) & 0x0F0F0F0Fu) | spread4(high >> 20) << 4;
  int s = init;
  s = __dp4a(int(l0), int(x.q[0]), s);
  s = __dp4a(int(l1), int(x.q[1]), s);
  s = __dp4a(int(l2), int(x.q[2]), s);
  s = __dp4a(int(l3), int(x.q[3]), s);
  return s;
}

// Σ (level - 8) · q over this lane's half of a Q4_0 block, exact. Q4_0 lanes load their bytes
// straight from the super-block layout (matvec.cu's own Q4_0 path).
__device__ __forceinline__ int q4_0_half_dot(uint2 w, const XHalfI8& x) { return nibble_dot(w, x, -8 * x.sum); }

// A half block with a minimum adds two terms, (scale·d_x)·Σ level·q + (bias·d_x)·Σq (Q4_1, Q5_1:
// scale d, bias m; Q4_K, Q5_K: from the super-block header).
// In general (scale·d_x)·isc + (bias·d_x)·imn, isc and imn exact integer sums (Q2_K has its per-run
// integer scales and minimums in them).
__device__ __forceinline__ void add_scale_bias_ints(int isc, int imn, float scale, float bias, const XHalfI8& x,
                                                    float& acc) {
  acc = fmaf(float(isc), __fmul_rn(scale, x.d), acc);
  acc = fmaf(float(imn), __fmul_rn(bias, x.d), acc);
}
__device__ __forceinline__ void add_scale_bias(int dot, float scale, float bias, const XHalfI8& x, float& acc) {
  add_scale_bias_ints(dot, x.sum, scale, bias, x, acc);
}

// Weights read straight into registers (matvec.cu; for rows whose super-blocks are 8-byte
// aligned on the GPU; every int8 type but Q4_0, which has its own path): DirectHalf<T>::load(sb, s,
// half) fetches this lane's bytes of 32-element block s of the super-block at sb, add(w, s, x, acc) adds its half block times x. Streamed once, so the loads
// skip L1 (x stays there).
__device__ __forceinline__ uint2 ld_stream_u2(const uint8_t* p) {  // p 8-byte aligned
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream_u32(const uint8_t* p) {  // p 4-byte aligned
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Q4_1, Q5_0 and Q5_1 in their GPU layouts (quant_kernels.h, dequant_block.cuh's Planes): block s
// of a super-block of 8. A lane's half holds its 8 nibble bytes (as Q4_0's), its block's f16 scale,
// and Q4_1's / Q5_1's f16 minimum or Q5_0's / Q5_1's fifth bits (this half's at bits 0-7 and 16-23).
template <GgmlType T>
struct DirectHalf {
  static_assert(T == GgmlType::Q4_1 || T == GgmlType::Q5_0 || T == GgmlType::Q5_1);
  using P = Planes<T>;
  uint2 q;
  uint32_t d;     // f16 bits
  uint32_t m;     // f16 bits (P::kHasMin)
  uint32_t high;  // P::kHasQh
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    w.q = ld_stream_u2(sb + P::kLevels + 16 * s + 8 * half);
    w.d = __ldg(reinterpret_cast<const unsigned short*>(sb) + s);
    if constexpr (P::kHasMin) w.m = __ldg(reinterpret_cast<const unsigned short*>(sb + P::kM) + s);
    if constexpr (P::kHasQh) w.high = __ldg(reinterpret_cast<const uint32_t*>(sb + P::kQh) + s) >> (8 * half);
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int, const XHalfI8& x, float& acc) {
    if constexpr (T == GgmlType::Q5_0) {  // levels 0..31 stand for level - 16
      acc = fmaf(float(fifth_bit_dot(w.q, w.high, x, -16 * x.sum)), __fmul_rn(h2f(w.d), x.d), acc);
    } else {
      const int dot = P::kHasQh ? fifth_bit_dot(w.q, w.high, x, 0) : nibble_dot(w.q, x, 0);
      add_scale_bias(dot, h2f(w.d), h2f(w.m), x, acc);
    }
  }
};

// Q8_0 in its GPU layout (quant_kernels.h): block s of a 272-byte super-block of 8. A lane's half
// holds its int8 levels 8h..8h+7 and 16+8h..16+8h+7 and the block's f16 scale; the half adds
// float(Σ level·q) · (d_w · d_x), the integer sum exact.
template <>
struct DirectHalf<GgmlType::Q8_0> {
  uint2 lo, hi;
  uint32_t d;  // f16 bits
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    const uint8_t* qs = sb + 16 + 32 * s + 8 * half;
    w.lo = ld_stream_u2(qs), w.hi = ld_stream_u2(qs + 16);
    w.d = __ldg(reinterpret_cast<const unsigned short*>(sb) + s);
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int, const XHalfI8& x, float& acc) {
    int dot = 0;
    dot = __dp4a(int(w.lo.x), int(x.q[0]), dot);
    dot = __dp4a(int(w.lo.y), int(x.q[1]), dot);
    dot = __dp4a(int(w.hi.x), int(x.q[2]), dot);
    dot = __dp4a(int(w.hi.y), int(x.q[3]), dot);
    acc = fmaf(float(dot), __fmul_rn(h2f(w.d), x.d), acc);
  }
};

// A Q4_K / Q5_K half block's two terms with scale = d·sc_s and bias = −dmin·m_s from the
// super-block's header (dequant_block.cuh's arithmetic).
__device__ __forceinline__ void add_k_half(const uint4& head, int s, int dot, const XHalfI8& x, float& acc) {
  uint32_t sc, mn;
  k_header_scale_min(head.y, head.z, head.w, s, sc, mn);
  const float scale = __fmul_rn(h2f(head.x & 0xFFFFu), float(sc));
  const float bias = -__fmul_rn(h2f(head.x >> 16), float(mn));
  add_scale_bias(dot, scale, bias, x, acc);
}

// Q4_K in its GPU layout (quant_kernels.h): 32-element sub-block s of a 144-byte super-block. A
// lane's half holds its 8 level bytes 8h..8h+7 (low nibbles: elements 8h+j, high: 16+8h+j, as Q4_0's)
// and the super-block's 16-byte header (every lane of the super-block loads the same, through L1),
// and adds add_k_half's two terms.
template <>
struct DirectHalf<GgmlType::Q4_K> {
  uint2 q;
  uint4 head;  // d | dmin << 16, then the scale words (dequant_block.cuh: k_header_scale_min)
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    w.q = ld_stream_u2(sb + 16 + 16 * s + 8 * half);
    w.head = __ldg(reinterpret_cast<const uint4*>(sb));
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int s, const XHalfI8& x, float& acc) {
    add_k_half(w.head, s, nibble_dot(w.q, x, 0), x, acc);
  }
};

// Q5_K in its GPU layout (quant_kernels.h): Q4_K's half block plus the fifth bits of its 16
// elements, bits 8h.. and 16+8h.. of the sub-block's word at 144 + 4s: levels 0..31, the same two
// terms.
template <>
struct DirectHalf<GgmlType::Q5_K> {
  uint2 q;
  uint4 head;
  uint32_t high;  // the sub-block's fifth bits, shifted so that this half's are bits 0-7 and 16-23
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    w.q = ld_stream_u2(sb + 16 + 16 * s + 8 * half);
    w.head = __ldg(reinterpret_cast<const uint4*>(sb));
    w.high = __ldg(reinterpret_cast<const uint32_t*>(sb + 144) + s) >> (8 * half);
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int s, const XHalfI8& x, float& acc) {
    add_k_half(w.head, s, fifth_bit_dot(w.q, w.high, x, 0), x, acc);
  }
};

// Q2_K, Q3_K and Q6_K scale every 16 elements: a lane's half of 32-element sub-block s holds
// elements 8h..8h+7 (run 0, scale 2s) and 16+8h..16+8h+7 (run 1, scale 2s + 1). In Q2_K and Q3_K,
// with s = 4n + j, their low 2 bits are bits 2j.. of qs bytes 32n + l (l the element in the
// sub-block). The 2-bit levels of one run from its 8 qs bytes, a level a byte.
__device__ __forceinline__ void two_bit_levels(uint2 qs, int j, uint32_t& l0, uint32_t& l1) {
  l0 = (qs.x >> (2 * j)) & 0x03030303u;
  l1 = (qs.y >> (2 * j)) & 0x03030303u;
}
// Σq over run 0 of this lane's half (run 1's is x.sum minus it).
__device__ __forceinline__ int run0_sum(const XHalfI8& x) {
  return __dp4a(int(x.q[0]), 0x01010101, __dp4a(int(x.q[1]), 0x01010101, 0));
}
// Σ level·q over each run of this lane's half, from the runs' level words l[0..1] and l[2..3].
__device__ __forceinline__ void run_dots(const uint32_t (&l)[4], const XHalfI8& x, int& dot0, int& dot1) {
  dot0 = __dp4a(int(l[1]), int(x.q[1]), __dp4a(int(l[0]), int(x.q[0]), 0));
  dot1 = __dp4a(int(l[3]), int(x.q[3]), __dp4a(int(l[2]), int(x.q[2]), 0));
}

// Q6_K in its GPU layout (quant_kernels.h): a lane's half h of 32-element sub-block s is its 8 nibble
// bytes at 16s + 8h (Q4_0's order: low nibbles elements 8h.., high ones 16 + 8h..) and one word of
// top bit pairs at 128 + 8s + 4h, whose pairs 2w.. go to bits 4..5 of level word w by a fixed shift;
// its two runs (elements 8h..8h+7 and 16+8h..16+8h+7) take scales 2s and 2s + 1. The integer sum
// sc0·(Σ level·q − 32·Σq) over the first run plus the same with sc1 over the second is exact
// (|·| < 2^23), and the half adds it times d·d_x.
template <>
struct DirectHalf<GgmlType::Q6_K> {
  uint2 ql;         // the half's nibble bytes
  uint32_t qh;      // its top bit pairs
  uint32_t scales;  // the sub-block's two int8 scales (bytes 0 and 1)
  uint32_t d;       // f16 bits
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    w.ql = ld_stream_u2(sb + 16 * s + 8 * half);
    w.qh = ld_stream_u32(sb + 128 + 8 * s + 4 * half);
    w.scales = __ldg(reinterpret_cast<const unsigned short*>(sb + 192 + 2 * s));
    w.d = __ldg(reinterpret_cast<const unsigned short*>(sb + 208));
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int /*s*/, const XHalfI8& x, float& acc) {
    constexpr uint32_t kLow = 0x0F0F0F0Fu, kTop = 0x30303030u;  // levels 0..63: positive as signed bytes
    const uint32_t l[4] = {(w.ql.x & kLow) | ((w.qh << 4) & kTop), (w.ql.y & kLow) | ((w.qh << 2) & kTop),
                           ((w.ql.x >> 4) & kLow) | (w.qh & kTop), ((w.ql.y >> 4) & kLow) | ((w.qh >> 2) & kTop)};
    int dot0, dot1;
    run_dots(l, x, dot0, dot1);
    const int sum0 = run0_sum(x);
    const int sc0 = int(static_cast<int8_t>(w.scales & 0xFFu)), sc1 = int(static_cast<int8_t>((w.scales >> 8) & 0xFFu));
    const int isum = sc0 * (dot0 - 32 * sum0) + sc1 * (dot1 - 32 * (x.sum - sum0));
    acc = fmaf(float(isum), __fmul_rn(h2f(w.d), x.d), acc);
  }
};

// Q2_K (GPU layout: GGML's 84 bytes, then 4 zero bytes): element value d·sc·level − dmin·mn with the
// 4-bit sc and mn of its run's scale byte (scales[2s + run]: sc low nibble, mn high). The half adds
// float(Σ_run sc·Σ level·q)·(d·d_x) + float(Σ_run mn·Σq)·(−dmin·d_x), both integer sums exact.
template <>
struct DirectHalf<GgmlType::Q2_K> {
  uint2 qs[2];     // [run]: qs bytes 32n + 8h.. and 32n + 16 + 8h..
  uint32_t sc;     // scale bytes 2s (run 0) and 2s + 1 (run 1)
  uint32_t dmin2;  // f16 d | f16 dmin << 16
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    const uint8_t* qs = sb + 16 + 32 * (s >> 2) + 8 * half;
    w.qs[0] = ld_stream_u2(qs), w.qs[1] = ld_stream_u2(qs + 16);
    w.sc = __ldg(reinterpret_cast<const unsigned short*>(sb) + s);
    w.dmin2 = __ldg(reinterpret_cast<const uint32_t*>(sb + 80));
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int s, const XHalfI8& x, float& acc) {
    uint32_t l[4];
    two_bit_levels(w.qs[0], s & 3, l[0], l[1]);
    two_bit_levels(w.qs[1], s & 3, l[2], l[3]);
    int dot0, dot1;
    run_dots(l, x, dot0, dot1);
    const int sum0 = run0_sum(x);
    const int sc0 = int(w.sc & 15u), mn0 = int((w.sc >> 4) & 15u);
    const int sc1 = int((w.sc >> 8) & 15u), mn1 = int((w.sc >> 12) & 15u);
    add_scale_bias_ints(sc0 * dot0 + sc1 * dot1, mn0 * sum0 + mn1 * (x.sum - sum0), h2f(w.dmin2 & 0xFFFFu),
                        -h2f(w.dmin2 >> 16), x, acc);
  }
};

// Q3_K (GPU layout, quant_kernels.h: hmask[32], qs[64], three scale words, f16 d): element value
// d·sc·(level − 4), level = low 2 bits | bit 4n + j of hmask[l] << 2, sc the run's signed 6-bit
// scale. The half adds float(sc0·(Σ level·q − 4Σq) + sc1·(…))·(d·d_x), the integer sum exact.
template <>
struct DirectHalf<GgmlType::Q3_K> {
  uint2 qs[2], hm[2];  // [run]: qs bytes 32n + 8h.. / + 16, hmask bytes 8h.. / 16 + 8h..
  uint32_t lo4;        // the scale word holding the low 4 bits of scales 2s, 2s + 1
  uint32_t hi2;        // the word of top bits
  uint32_t d;          // f16 bits
  __device__ static __forceinline__ DirectHalf load(const uint8_t* sb, int s, int half) {
    DirectHalf w;
    const uint8_t* qs = sb + 32 + 32 * (s >> 2) + 8 * half;
    w.qs[0] = ld_stream_u2(qs), w.qs[1] = ld_stream_u2(qs + 16);
    w.hm[0] = ld_stream_u2(sb + 8 * half), w.hm[1] = ld_stream_u2(sb + 16 + 8 * half);
    w.lo4 = __ldg(reinterpret_cast<const uint32_t*>(sb + 96) + (s >> 2));
    w.hi2 = __ldg(reinterpret_cast<const uint32_t*>(sb + 104));
    w.d = __ldg(reinterpret_cast<const unsigned short*>(sb + 108));
    return w;
  }
  __device__ static __forceinline__ void add(const DirectHalf& w, int s, const XHalfI8& x, float& acc) {
    const int j = s & 3, hsh = 4 * (s >> 2) + j;
    uint32_t l[4];
    two_bit_levels(w.qs[0], j, l[0], l[1]);
    two_bit_levels(w.qs[1], j, l[2], l[3]);
    l[0] |= ((w.hm[0].x >> hsh) & 0x01010101u) << 2;
    l[1] |= ((w.hm[0].y >> hsh) & 0x01010101u) << 2;
    l[2] |= ((w.hm[1].x >> hsh) & 0x01010101u) << 2;
    l[3] |= ((w.hm[1].y >> hsh) & 0x01010101u) << 2;
    int dot0, dot1;
    run_dots(l, x, dot0, dot1);
    const int sum0 = run0_sum(x);
    // Scales 2s and 2s + 1 (dequant_block.cuh's q3_k_scale, both shifted out of the pair's byte at
    // once: calling it twice took 6-8 more registers in the batch-1 kernels)
    const uint32_t low = w.lo4 >> (8 * (s & 3)), high = w.hi2 >> (4 * s);
    const int sc0 = int((low & 15u) | (high & 3u) << 4) - 32;
    const int sc1 = int(((low >> 4) & 15u) | ((high >> 2) & 3u) << 4) - 32;
    const int isum = sc0 * (dot0 - 4 * sum0) + sc1 * (dot1 - 4 * (x.sum - sum0));
    acc = fmaf(float(isum), __fmul_rn(h2f(w.d), x.d), acc);
  }
};

}  // namespace cera::cuda::detail
