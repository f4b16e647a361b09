// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels.
//
// ODR safety: this file is compiled with -mavx512*, so nothing here may be emitted as a symbol the
// rest of the program could bind to. Everything is in an anonymous namespace, only intrinsics and
// compiler builtins are called (no std templates, no inline library functions), and the one export
// is avx512_kernels(), which only fills a table.
//
// Int8 paths use vpdpbusd (u8 × s8): weight levels are made unsigned (level + offset), activations
// stay signed, and the offset·Σx term is subtracted by starting the accumulator at -offset·Σx.
// Two 32-element blocks share one zmm; K-quants use vpmaddubsw + vpdpwssd so the per-sub-block
// scales are applied in the integer domain. Float weights are widened to f32 and FMA'd in f32.
#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/prefetch.h"
#include "format/quant_blocks.h"

namespace cera::cpu {

#if defined(__x86_64__) && defined(__AVX512F__)
namespace {

using detail::prefetch_lead;
using detail::prefetch_lines;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_K;

struct Args {
  int64_t n;
  const uint8_t* w;
  size_t wrb;
  const uint8_t* x;
  size_t xrb;
  float* out;
  size_t os;
};

// A tile's accumulators: NW weight rows × NX tokens, each a vector whose lanes are summed at the end.
template <int NW, int NX>
inline void zero_tile(__m512 (&acc)[NW][NX]) {
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
}
template <int NW, int NX>
inline void store_tile(const Args& a, const __m512 (&acc)[NW][NX]) {
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = _mm512_reduce_add_ps(acc[i][j]);
}

using TileFn = void (*)(const Args&);

// Splits an nw × nx request into register tiles of at most MW × MX.
template <int MW, int MX>
void run_tiles(const TileFn (&fns)[MW][MX], int64_t n, const void* w, size_t wrb, int nw, const void* x,
               size_t xrb, int nx, float* out, size_t os) {
  for (int j0 = 0; j0 < nx; j0 += MX) {
    const int cx = nx - j0 < MX ? nx - j0 : MX;
    for (int i0 = 0; i0 < nw; i0 += MW) {
      const int cw = nw - i0 < MW ? nw - i0 : MW;
      const Args a{n, static_cast<const uint8_t*>(w) + size_t(i0) * wrb, wrb,
                   static_cast<const uint8_t*>(x) + size_t(j0) * xrb, xrb, out + size_t(j0) * os + size_t(i0), os};
      fns[cw - 1][cx - 1](a);
    }
  }
}

// ------------------------------------------------------------------------------------ float

enum class FloatKind { F32, F16, BF16 };

template <FloatKind K>
inline __m512 load_w16(const uint8_t* row, int64_t k) {
  if constexpr (K == FloatKind::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (K == FloatKind::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <FloatKind K>
inline __m512 load_w16_masked(const uint8_t* row, int64_t k, __mmask16 m) {
  if constexpr (K == FloatKind::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (K == FloatKind::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <FloatKind K, int NW, int NX>
void tile_float(const Args& a) {
  constexpr size_t kElem = K == FloatKind::F32 ? 4 : 2;  // a step reads 16 elements, at most a line
  constexpr bool kPrefetch = NX <= detail::kPrefetchMaxTokens;
  const size_t lead = prefetch_lead(NW * a.wrb);
  __m512 acc[NW][NX];
  zero_tile(acc);
  int64_t k = 0;
  for (; k + 16 <= a.n; k += 16) {
    __m512 wv[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      if constexpr (kPrefetch) __builtin_prefetch(a.w + size_t(i) * a.wrb + size_t(k) * kElem + lead);
      wv[i] = load_w16<K>(a.w + size_t(i) * a.wrb, k);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const __m512 xv = _mm512_loadu_ps(reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb) + k);
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (k < a.n) {
    const __mmask16 m = __mmask16((1u << (a.n - k)) - 1u);
    __m512 wv[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) wv[i] = load_w16_masked<K>(a.w + size_t(i) * a.wrb, k, m);
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb) + k);
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  store_tile(a, acc);
}

// ------------------------------------------------------------------ 32-element blocks × Q8_0

// [d0 ×8, d1 ×8] as f32 from two raw f16 scales.
inline __m512 scale_pair(uint16_t d0, uint16_t d1) {
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(short(d1)), _mm_set1_epi16(short(d0))));
}

inline __m512i load_pair_32(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// 16 bytes of packed nibbles per block -> 32 levels (low nibbles first, then high), two blocks.
inline __m512i nibbles_pair(const uint8_t* a, const uint8_t* b, bool two) {
  const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i qb = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)) : _mm_setzero_si128();
  const __m512i z = _mm512_castsi256_si512(_mm256_set_m128i(qb, qa));
  const __m512i dup = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
  const __m512i shifted = _mm512_srlv_epi64(dup, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

struct PolicyQ8_0 {
  static constexpr int kOffset = 128;
  static __m512i levels(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m512i q = two ? load_pair_32(blk[0].qs, blk[1].qs)
                          : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs)));
    return _mm512_xor_si512(q, _mm512_set1_epi8(char(0x80)));  // q + 128 as u8
  }
  static __m512 scale(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    return scale_pair(blk[0].d, two ? blk[1].d : uint16_t(0));
  }
};

struct PolicyQ4_0 {
  static constexpr int kOffset = 8;
  static __m512i levels(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    return nibbles_pair(blk[0].qs, two ? blk[1].qs : blk[0].qs, two);
  }
  static __m512 scale(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    return scale_pair(blk[0].d, two ? blk[1].d : uint16_t(0));
  }
};

struct PolicyQ5_0 {
  static constexpr int kOffset = 16;
  static __m512i levels(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
    const __m512i lo = nibbles_pair(blk[0].qs, two ? blk[1].qs : blk[0].qs, two);
    uint32_t h0, h1 = 0;
    __builtin_memcpy(&h0, blk[0].qh, 4);
    if (two) __builtin_memcpy(&h1, blk[1].qh, 4);
    const __mmask64 hm = __mmask64(h0) | (__mmask64(h1) << 32);  // bit k = 5th bit of element k
    return _mm512_mask_or_epi64(lo, 0xFF, lo, _mm512_maskz_mov_epi8(hm, _mm512_set1_epi8(0x10)));
  }
  static __m512 scale(const uint8_t* row, int64_t b, bool two) {
    const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
    return scale_pair(blk[0].d, two ? blk[1].d : uint16_t(0));
  }
};

template <class P, int NW, int NX, bool Two>
inline void step_q8_0(const Args& a, int64_t b, __m512 (&acc)[NW][NX]) {
  __m512i wq[NW];
  __m512 wd[NW];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i) {
    wq[i] = P::levels(a.w + size_t(i) * a.wrb, b, Two);
    wd[i] = P::scale(a.w + size_t(i) * a.wrb, b, Two);
  }
  const __m512i off = _mm512_set1_epi8(char(P::kOffset));
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j) {
    const auto* xb = reinterpret_cast<const BlockQ8_0*>(a.x + size_t(j) * a.xrb) + b;
    const __m512i xq = Two ? load_pair_32(xb[0].qs, xb[1].qs)
                           : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[0].qs)));
    const __m512 xd = scale_pair(xb[0].d, Two ? xb[1].d : uint16_t(0));
    const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xq));
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const __m512i dot = _mm512_dpbusd_epi32(neg, wq[i], xq);
      acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[i], xd), acc[i][j]);
    }
  }
}

template <class P, int NW, int NX>
void tile_q8_0(const Args& a) {
  const int64_t nb = a.n / 32;
  __m512 acc[NW][NX];
  zero_tile(acc);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step_q8_0<P, NW, NX, true>(a, b, acc);
  if (b < nb) step_q8_0<P, NW, NX, false>(a, b, acc);
  store_tile(a, acc);
}

// ------------------------------------------- 32-element blocks × Q8_0, row-lane formulation
//
// One arithmetic for every tile shape, so a prompt gives bit-identical results batched or token by
// token (the parity tests require it): per (row, token), isum_b = the exact integer dot of block b,
// and acc = fma(float(isum_b), wd_b·xd_b, acc) in block order. Vectors hold 16 weight rows.
//  * T = 1 (decode): vpdpbusd per row on the stored blocks, then a transpose-reduce turns 16 rows ×
//    (2 blocks × 8 partial lanes) into 2 vectors of 16 per-row block sums.
//  * T > 1 (prefill): 16 rows' blocks are transposed once per call into s8 dwords (lane = row), and
//    each token's 4 activation bytes are broadcast: 8 vpdpbusd per block and 16 rows × token, then
//    3 float ops — against 4 per vpdpbusd for the per-(row, token) tile kernel above, whose float
//    work capped prefill at ~100 GFLOP/s/core.

// Signed levels of block b of a row, natural element order.
template <class P>
inline __m256i block_s8(const uint8_t* row, int64_t b);
template <>
inline __m256i block_s8<PolicyQ8_0>(const uint8_t* row, int64_t b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>((reinterpret_cast<const BlockQ8_0*>(row) + b)->qs));
}
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
template <>
inline __m256i block_s8<PolicyQ4_0>(const uint8_t* row, int64_t b) {
  return _mm256_sub_epi8(nibbles32((reinterpret_cast<const BlockQ4_0*>(row) + b)->qs), _mm256_set1_epi8(8));
}
template <>
inline __m256i block_s8<PolicyQ5_0>(const uint8_t* row, int64_t b) {
  const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
  uint32_t h;
  __builtin_memcpy(&h, blk->qh, 4);
  const __m256i lo = nibbles32(blk->qs);
  return _mm256_sub_epi8(_mm256_mask_add_epi8(lo, __mmask32(h), lo, _mm256_set1_epi8(0x10)), _mm256_set1_epi8(16));
}

// f32 scales of block b of 16 rows (lanes >= nrows read nothing and are 0). d is the first field.
template <class P>
inline __m512 row_scales(const uint8_t* w, size_t wrb, int64_t b, int nrows, size_t block_bytes) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(int(wrb)));
  const __mmask16 m = nrows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nrows) - 1u);
  const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, w + size_t(b) * block_bytes, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

// Σ over each group of 8 lanes of d[r] (r < 16) -> lanes = rows: lo gets lanes 0-7, hi lanes 8-15.
inline void transpose_reduce16(const __m512i (&d)[16], __m512i& lo, __m512i& hi) {
  __m512i l1[8], l2[4], l3[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    l1[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]), _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    l2[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(l1[2 * i], l1[2 * i + 1]),
                             _mm512_unpackhi_epi64(l1[2 * i], l1[2 * i + 1]));
  // l2[i]: 128-bit chunk c holds rows 4i..4i+3 of (block c/2, lanes 4(c%2)..+3)
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    l3[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_i32x4(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // l3[i]: chunks = rows 8i..8i+3 blk0, 8i..+3 blk1, 8i+4..+7 blk0, 8i+4..+7 blk1
  lo = _mm512_shuffle_i32x4(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0));
  hi = _mm512_shuffle_i32x4(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// Up to 16 rows × one token.
template <class P, size_t BB>
void rows16_x1(const Args& a, int nrows, const uint8_t* xrow, float* out) {
  const int64_t nb = a.n / 32;
  const size_t lead = prefetch_lead(16 * a.wrb);  // the next group of 16 rows starts 16 rows on
  __m512 acc = _mm512_setzero_ps();
  const __m512i off = _mm512_set1_epi8(char(P::kOffset));
  const auto* xb = reinterpret_cast<const BlockQ8_0*>(xrow);
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const __m512i xq = two ? load_pair_32(xb[b].qs, xb[b + 1].qs)
                           : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[b].qs)));
    const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xq));
    __m512i d[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      if (r < nrows) {
        const uint8_t* row = a.w + size_t(r) * a.wrb;
        prefetch_lines<2 * BB>(row + size_t(b) * BB + lead);
        d[r] = _mm512_dpbusd_epi32(neg, P::levels(row, b, two), xq);
      } else {
        d[r] = _mm512_setzero_si512();
      }
    }
    __m512i s0, s1;
    transpose_reduce16(d, s0, s1);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                          _mm512_mul_ps(row_scales<P>(a.w, a.wrb, b, nrows, BB), _mm512_set1_ps(_cvtsh_ss(xb[b].d))),
                          acc);
    if (two)
      acc = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(s1),
          _mm512_mul_ps(row_scales<P>(a.w, a.wrb, b + 1, nrows, BB), _mm512_set1_ps(_cvtsh_ss(xb[b + 1].d))), acc);
  }
  const __mmask16 m = nrows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nrows) - 1u);
  _mm512_mask_storeu_ps(out, m, acc);
}

// Packed 16-row group, per block: 8 vectors of s8 dwords (lane r = row r's elements 4g..4g+3),
// -128·Σw per row (x is fed as x+128 to the u8 operand), and the 16 row scales.
struct PackedBlock {
  __m512i lev[8];
  __m512i corr;
  __m512 scale;
};

template <class P, size_t BB>
void pack_rows16(const Args& a, int nrows, int64_t nb, PackedBlock* dst) {
  const __m512i qlo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i qhi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i z[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const __m256i r0 = p < nrows ? block_s8<P>(a.w + size_t(p) * a.wrb, b) : _mm256_setzero_si256();
      const __m256i r1 = p + 8 < nrows ? block_s8<P>(a.w + size_t(p + 8) * a.wrb, b) : _mm256_setzero_si256();
      z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(r0), r1, 1);
    }
    __m512i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
    }
    // rows 0-3 (+8): u[0..3] = dwords {0,4}, {1,5}, {2,6}, {3,7}; rows 4-7 (+8): u[4..7]
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
      u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
      u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
      u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    PackedBlock& pb = dst[b];
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      pb.lev[g] = _mm512_permutex2var_epi64(u[g], qlo, u[g + 4]);
      pb.lev[g + 4] = _mm512_permutex2var_epi64(u[g], qhi, u[g + 4]);
      sum = _mm512_dpbusd_epi32(sum, ones, pb.lev[g]);
      sum = _mm512_dpbusd_epi32(sum, ones, pb.lev[g + 4]);
    }
    pb.corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
    pb.scale = row_scales<P>(a.w, a.wrb, b, nrows, BB);
  }
}

// RG packed row groups × TJ tokens over all blocks. xu: tokens' x+128 bytes (row stride xus),
// xd: their block scales (stride nb).
template <int RG, int TJ>
void packed_tile(const PackedBlock* const (&pk)[RG], int64_t nb, const uint8_t* xu, size_t xus, const float* xd,
                 float* out, size_t os, const int (&nrows)[RG]) {
  __m512 facc[RG][TJ];
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < TJ; ++j) facc[r][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i iacc[RG][TJ];
#pragma GCC unroll 4
    for (int r = 0; r < RG; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < TJ; ++j) iacc[r][j] = pk[r][b].corr;
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i xv[TJ];
#pragma GCC unroll 4
      for (int j = 0; j < TJ; ++j) {
        int32_t v;
        __builtin_memcpy(&v, xu + size_t(j) * xus + size_t(b) * 32 + 4 * g, 4);
        xv[j] = _mm512_set1_epi32(v);
      }
#pragma GCC unroll 4
      for (int r = 0; r < RG; ++r) {
        const __m512i wv = pk[r][b].lev[g];
#pragma GCC unroll 4
        for (int j = 0; j < TJ; ++j) iacc[r][j] = _mm512_dpbusd_epi32(iacc[r][j], xv[j], wv);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < TJ; ++j) {
      const __m512 xs = _mm512_set1_ps(xd[size_t(j) * size_t(nb) + size_t(b)]);
#pragma GCC unroll 4
      for (int r = 0; r < RG; ++r)
        facc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][j]), _mm512_mul_ps(pk[r][b].scale, xs), facc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RG; ++r) {
    const __mmask16 m = nrows[r] >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nrows[r]) - 1u);
#pragma GCC unroll 4
    for (int j = 0; j < TJ; ++j) _mm512_mask_storeu_ps(out + size_t(j) * os + size_t(16 * r), m, facc[r][j]);
  }
}

template <int RG>
void packed_tokens(const PackedBlock* const (&pk)[RG], int64_t nb, const uint8_t* xu, size_t xus, const float* xd,
                   int nx, float* out, size_t os, const int (&nrows)[RG]) {
  int j = 0;
  for (; j + 4 <= nx; j += 4)
    packed_tile<RG, 4>(pk, nb, xu + size_t(j) * xus, xus, xd + size_t(j) * nb, out + size_t(j) * os, os, nrows);
  const int rest = nx - j;
  const uint8_t* xr = xu + size_t(j) * xus;
  const float* dr = xd + size_t(j) * nb;
  float* o = out + size_t(j) * os;
  if (rest == 3) packed_tile<RG, 3>(pk, nb, xr, xus, dr, o, os, nrows);
  if (rest == 2) packed_tile<RG, 2>(pk, nb, xr, xus, dr, o, os, nrows);
  if (rest == 1) packed_tile<RG, 1>(pk, nb, xr, xus, dr, o, os, nrows);
}

// A call packs up to 128 rows once and stages 64 tokens' x+128 bytes at a time for all of them;
// with 32 rows per call the x staging alone was 13% of a Q4_0 prefill.
constexpr int kRowLaneMaxNw = 128;
constexpr int kRowLaneMaxNx = 512;  // the weight pack is reused by every token of a prefill chunk
constexpr int kXChunk = 64;

template <class P, size_t BB>
void dot_rowlane(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
                 size_t os) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (nx < 4) {  // decode: packing would not pay for itself
    for (int j = 0; j < nx; ++j)
      for (int i0 = 0; i0 < nw; i0 += 16) {
        const Args a{n, wb + size_t(i0) * wrb, wrb, nullptr, 0, nullptr, 0};
        rows16_x1<P, BB>(a, nw - i0 < 16 ? nw - i0 : 16, xb + size_t(j) * xrb, out + size_t(j) * os + size_t(i0));
      }
    return;
  }
  const int64_t nb = n / 32;
  for (int i0 = 0; i0 < nw; i0 += kRowLaneMaxNw) {
    const int cw = nw - i0 < kRowLaneMaxNw ? nw - i0 : kRowLaneMaxNw;
    const int groups = (cw + 15) / 16;
    // Stack scratch (~1 MB at n = 4608, L2-resident); ISA files may not use std containers.
    auto* pack = static_cast<PackedBlock*>(__builtin_alloca(sizeof(PackedBlock) * size_t(groups) * size_t(nb) + 64));
    pack = reinterpret_cast<PackedBlock*>((reinterpret_cast<uintptr_t>(pack) + 63) & ~uintptr_t(63));
    const size_t xus = size_t(n) + 64;  // odd multiple of 64: staggers the tokens' rows across cache sets
    auto* xu = static_cast<uint8_t*>(__builtin_alloca(xus * kXChunk));
    auto* xd = static_cast<float*>(__builtin_alloca(sizeof(float) * size_t(nb) * kXChunk));
    int nrows[8];
    for (int g = 0; g < groups; ++g) {
      nrows[g] = cw - 16 * g < 16 ? cw - 16 * g : 16;
      const Args a{n, wb + size_t(i0 + 16 * g) * wrb, wrb, nullptr, 0, nullptr, 0};
      pack_rows16<P, BB>(a, nrows[g], nb, pack + size_t(g) * size_t(nb));
    }
    for (int j0 = 0; j0 < nx; j0 += kXChunk) {
      const int cx = nx - j0 < kXChunk ? nx - j0 : kXChunk;
      for (int j = 0; j < cx; ++j) {
        const auto* xr = reinterpret_cast<const BlockQ8_0*>(xb + size_t(j0 + j) * xrb);
        for (int64_t b = 0; b < nb; ++b) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[b].qs));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(xu + size_t(j) * xus + size_t(b) * 32),
                              _mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))));
          xd[size_t(j) * size_t(nb) + size_t(b)] = _cvtsh_ss(xr[b].d);
        }
      }
      for (int g = 0; g < groups; g += 2) {
        float* o = out + size_t(j0) * os + size_t(i0 + 16 * g);
        if (g + 1 < groups) {
          const PackedBlock* const pk[2] = {pack + size_t(g) * size_t(nb), pack + size_t(g + 1) * size_t(nb)};
          const int nr[2] = {nrows[g], nrows[g + 1]};
          packed_tokens<2>(pk, nb, xu, xus, xd, cx, o, os, nr);
        } else {
          const PackedBlock* const pk[1] = {pack + size_t(g) * size_t(nb)};
          const int nr[1] = {nrows[g]};
          packed_tokens<1>(pk, nb, xu, xus, xd, cx, o, os, nr);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------- K-quants × Q8_K

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Q4_K: unpacks 8 scales and 8 mins (6 bits each) to 16 × u16 [sc0..sc7, mn0..mn7].
inline __m256i q4k_scales_mins(const uint8_t* s) {
  uint32_t a, b, c;
  __builtin_memcpy(&a, s, 4);
  __builtin_memcpy(&b, s + 4, 4);
  __builtin_memcpy(&c, s + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, mn_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  const __m128i bytes = _mm_set_epi32(int(mn_hi), int(mn_lo), int(sc_hi), int(sc_lo));
  return _mm256_cvtepu8_epi16(bytes);
}

// Q4_K and Q5_K (kFifthBit: level bit 4 of element 64c + l from bit 2c of qh[l], of 64c + 32 + l from
// bit 2c + 1; levels 0..31 keep maddubs' pair sums within int16).
template <bool kFifthBit, class Block, int NW, int NX>
void tile_q45_k(const Args& a) {
  const int64_t nb = a.n / 256;
  __m512 acc[NW][NX];
  zero_tile(acc);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i nib_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i qh_shift = _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0);  // high half: the odd sub-block's bit
  const __m512i one = _mm512_set1_epi8(1);
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i scv[NW][4];
    __m512i mins[NW];
    float dw[NW], dmw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
      if constexpr (NX <= detail::kPrefetchMaxTokens)
        prefetch_lines<sizeof(Block)>(reinterpret_cast<const uint8_t*>(blk) + lead);
      const __m512i sm = _mm512_zextsi256_si512(q4k_scales_mins(blk->scales));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        // int16 lanes 0..15 -> sub-block 2c, 16..31 -> 2c+1
        const __m512i idx = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(short(2 * c)),
                                                    _mm512_set1_epi16(short(2 * c + 1)));
        scv[i][c] = _mm512_permutexvar_epi16(idx, sm);
      }
      // per bsum lane g (16 elements): min of sub-block g/2
      const __m512i midx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 14, 14, 13,
                                            13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
      mins[i] = _mm512_maskz_permutexvar_epi16(0x0000FFFFu, midx, sm);
      dw[i] = _cvtsh_ss(blk->d);
      dmw[i] = _cvtsh_ss(blk->dmin);
    }
    __m512i isum[NW][NX];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) isum[i][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i wq[NW];
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const auto* blk = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * c)));
        wq[i] = _mm512_and_si512(_mm512_srlv_epi64(q, nib_shift), m4);
        if constexpr (kFifthBit) {
          const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh)));
          const __m512i bit = _mm512_and_si512(_mm512_srlv_epi64(qh, _mm512_add_epi64(qh_shift, _mm512_set1_epi64(2 * c))),
                                               one);  // each byte 0 or 1: shifting 64-bit lanes by < 8 leaks nothing
          wq[i] = _mm512_or_si512(wq[i], _mm512_slli_epi64(bit, 4));
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
        const __m512i xq = load512(xb->qs + 64 * c);
#pragma GCC unroll 8
        for (int i = 0; i < NW; ++i)
          isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wq[i], xq), scv[i][c]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums)));
      const float dx = xb->d;
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const __m512i msum = _mm512_madd_epi16(bs, mins[i]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_set1_ps(dw[i] * dx), acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_set1_ps(-dmw[i] * dx), acc[i][j]);
      }
    }
  }
  store_tile(a, acc);
}

// Q6_K: levels 0..63 (stored value, i.e. level + 32) in Q8_K element order, 64 per zmm.
template <int NW, int NX>
void tile_q6_k(const Args& a) {
  const int64_t nb = a.n / 256;
  __m512 acc[NW][NX];
  zero_tile(acc);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i shl_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);  // qh bits 0-1 | 2-3 -> bits 4-5
  const __m512i shr_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);  // qh bits 4-5 | 6-7 -> bits 4-5
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i scv[NW][4];
    __m512i corr[NW];
    float dw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(i) * a.wrb) + b;
      if constexpr (NX <= detail::kPrefetchMaxTokens)
        prefetch_lines<sizeof(BlockQ6_K)>(reinterpret_cast<const uint8_t*>(blk) + lead);
      const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
      const __m512i s = _mm512_zextsi256_si512(s16);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        // int16 lane l of chunk c covers sub-block 4c + l/8
        const __m512i idx = _mm512_set_epi16(
            short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3),
            short(4 * c + 3), short(4 * c + 3), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2),
            short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 1), short(4 * c + 1),
            short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1),
            short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c),
            short(4 * c));
        scv[i][c] = _mm512_permutexvar_epi16(idx, s);
      }
      corr[i] = _mm512_zextsi256_si512(_mm256_mullo_epi16(s16, _mm256_set1_epi16(-32)));  // -32·sc per bsum
      dw[i] = _cvtsh_ss(blk->d);
    }
    __m512i isum[NW][NX];
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums)));
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) isum[i][j] = _mm512_madd_epi16(bs, corr[i]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i w0[NW], w1[NW];
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(i) * a.wrb) + b;
        const __m512i ql = load512(blk->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h)));
        const __m512i hb0 = _mm512_and_si512(_mm512_sllv_epi64(qh, shl_lo), m30);
        const __m512i hb1 = _mm512_and_si512(_mm512_srlv_epi64(qh, shr_hi), m30);
        w0[i] = _mm512_ternarylogic_epi32(ql, m4, hb0, 0xEA);                          // (ql & 15) | hb0
        w1[i] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, hb1, 0xEA);  // (ql >> 4) | hb1
      }
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
        const __m512i x0 = load512(xb->qs + 128 * h);
        const __m512i x1 = load512(xb->qs + 128 * h + 64);
#pragma GCC unroll 8
        for (int i = 0; i < NW; ++i) {
          isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(w0[i], x0), scv[i][2 * h]);
          isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(w1[i], x1), scv[i][2 * h + 1]);
        }
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const float dx = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb)[b].d;
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_set1_ps(dw[i] * dx), acc[i][j]);
    }
  }
  store_tile(a, acc);
}

// Q3_K's 16 signed six-bit scales (12 bytes: low nibbles in bytes 0-7, two high bits each in bytes
// 8-11; MODELS.md §2.4) as 16 × i16.
inline __m256i q3k_scales(const uint8_t* s) {
  uint64_t lo;
  uint32_t c;
  __builtin_memcpy(&lo, s, 8);
  __builtin_memcpy(&c, s + 8, 4);
  const uint64_t h01 = uint64_t(c & 0x03030303u) | uint64_t((c >> 2) & 0x03030303u) << 32;        // scales 0-7
  const uint64_t h23 = uint64_t((c >> 4) & 0x03030303u) | uint64_t((c >> 6) & 0x03030303u) << 32;  // 8-15
  const uint64_t s07 = (lo & 0x0F0F0F0F0F0F0F0Full) | h01 << 4;
  const uint64_t s8f = ((lo >> 4) & 0x0F0F0F0F0F0F0F0Full) | h23 << 4;
  const __m256i u = _mm256_cvtepu8_epi16(_mm_set_epi64x(int64_t(s8f), int64_t(s07)));
  return _mm256_sub_epi16(u, _mm256_set1_epi16(32));
}

// Q2_K and Q3_K (kQ3): element 128h + 32j + l is bits 2j, 2j+1 of qs[32h + l] (Q3_K: minus 4 where
// bit 4h + j of hmask[l] is clear), with a scale per 16 elements. Q2_K's levels are unsigned, with a
// minimum per 16 elements (dmin · mn · bsum, as Q4_K's); Q3_K's are fed as level + 4 (0..7) and
// -4 · scale · bsum joins the integer sum (as Q6_K's +32). A 64-element chunk c is two such 32-element
// groups (j = 2(c % 2), +1) of half h = c / 2, and its int16 lane L covers sub-block 4c + L/8.
template <bool kQ3, class Block, int NW, int NX>
void tile_q23_k(const Args& a) {
  const int64_t nb = a.n / 256;
  __m512 acc[NW][NX];
  zero_tile(acc);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i m1 = _mm512_set1_epi8(1);
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i scv[NW][4];
    __m512i extra[NW];  // Q3_K: -4·scale per bsum; Q2_K: the minimums per bsum
    float dw[NW], dmw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
      if constexpr (NX <= detail::kPrefetchMaxTokens)
        prefetch_lines<sizeof(Block)>(reinterpret_cast<const uint8_t*>(blk) + lead);
      __m256i s16;
      if constexpr (kQ3) {
        s16 = q3k_scales(blk->scales);
        extra[i] = _mm512_zextsi256_si512(_mm256_mullo_epi16(s16, _mm256_set1_epi16(-4)));
        dmw[i] = 0.0f;
      } else {
        const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
        s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));
        extra[i] = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F))));
        dmw[i] = _cvtsh_ss(blk->dmin);
      }
      const __m512i sv = _mm512_zextsi256_si512(s16);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16(short(4 * c)),
                                             _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                                                                                21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                                                                11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                               3));
        scv[i][c] = _mm512_permutexvar_epi16(idx, sv);
      }
      dw[i] = _cvtsh_ss(blk->d);
    }
    __m512i isum[NW][NX];
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums)));
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) isum[i][j] = kQ3 ? _mm512_madd_epi16(bs, extra[i]) : _mm512_setzero_si512();
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const int h = c >> 1, j0 = 2 * (c & 1);
      const __m512i shift = _mm512_set_epi64(2 * j0 + 2, 2 * j0 + 2, 2 * j0 + 2, 2 * j0 + 2, 2 * j0, 2 * j0, 2 * j0, 2 * j0);
      __m512i wq[NW];
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const auto* blk = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * h)));
        wq[i] = _mm512_and_si512(_mm512_srlv_epi64(q, shift), m3);  // shifts < 8 leak nothing past the mask
        if constexpr (kQ3) {
          const int hb = 4 * h + j0;
          const __m512i hshift = _mm512_set_epi64(hb + 1, hb + 1, hb + 1, hb + 1, hb, hb, hb, hb);
          const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->hmask)));
          wq[i] = _mm512_or_si512(wq[i], _mm512_slli_epi64(_mm512_and_si512(_mm512_srlv_epi64(hm, hshift), m1), 2));
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
        const __m512i xq = load512(xb->qs + 64 * c);
#pragma GCC unroll 8
        for (int i = 0; i < NW; ++i)
          isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wq[i], xq), scv[i][c]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const float dx = xb->d;
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_set1_ps(dw[i] * dx), acc[i][j]);
        if constexpr (!kQ3) {
          const __m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums)));
          acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(bs, extra[i])), _mm512_set1_ps(-dmw[i] * dx),
                                      acc[i][j]);
        }
      }
    }
  }
  store_tile(a, acc);
}

// ------------------------------------------------------------------- activation quantizers
//
// Byte-exact with quant::quantize_row_ref: same f32 operations in the same order per element; only
// the max reductions are reordered, and max is exact. The scalar loop cost ~6% of a Q4_0 prefill.

// roundf (half away from zero), exactly: t = trunc(v); v - t is exact; step away from 0 at |.|>=0.5.
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));  // ±1
  return _mm512_mask_add_ps(t, up, t, one);
}

inline uint16_t f16_bits(float f) {
  return uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f16_bits(d);
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v0, vid)));
    const __m512i q1 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v1, vid)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtepi32_epi8(q1));
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    __m512 am = _mm512_setzero_ps();
    for (int c = 0; c < 16; ++c) am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)));
    const float amax = _mm512_reduce_max_ps(am);
    if (amax == 0.0f) {
      __builtin_memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the first element with the largest |x| (strict >), sign included.
    float max = 0.0f;
    for (int c = 0; c < 16; ++c) {
      const __mmask16 m =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (m) {
        max = x[16 * c + __builtin_ctz(unsigned(m))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int c = 0; c < 16; ++c) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * c)));  // lrintf: RNE
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16 * c), _mm512_cvtepi32_epi8(q));
      y[b].bsums[c] = int16_t(_mm512_reduce_add_epi32(q));
    }
    y[b].d = 1.0f / iscale;
  }
}

// ------------------------------------------------------------------------------ registration

template <template <int, int> class K>
struct Table4x4 {
  static constexpr TileFn fns[4][4] = {{K<1, 1>::f, K<1, 2>::f, K<1, 3>::f, K<1, 4>::f},
                                       {K<2, 1>::f, K<2, 2>::f, K<2, 3>::f, K<2, 4>::f},
                                       {K<3, 1>::f, K<3, 2>::f, K<3, 3>::f, K<3, 4>::f},
                                       {K<4, 1>::f, K<4, 2>::f, K<4, 3>::f, K<4, 4>::f}};
};
template <template <int, int> class K>
struct Table2x4 {
  static constexpr TileFn fns[2][4] = {{K<1, 1>::f, K<1, 2>::f, K<1, 3>::f, K<1, 4>::f},
                                       {K<2, 1>::f, K<2, 2>::f, K<2, 3>::f, K<2, 4>::f}};
};

template <FloatKind FK>
struct FloatK {
  template <int NW, int NX>
  struct K {
    static void f(const Args& a) { tile_float<FK, NW, NX>(a); }
  };
};
template <class P>
struct Q8K {
  template <int NW, int NX>
  struct K {
    static void f(const Args& a) { tile_q8_0<P, NW, NX>(a); }
  };
};
template <int NW, int NX>
struct Q4KK {
  static void f(const Args& a) { tile_q45_k<false, BlockQ4_K, NW, NX>(a); }
};
template <int NW, int NX>
struct Q5KK {
  static void f(const Args& a) { tile_q45_k<true, BlockQ5_K, NW, NX>(a); }
};
template <int NW, int NX>
struct Q2KK {
  static void f(const Args& a) { tile_q23_k<false, BlockQ2_K, NW, NX>(a); }
};
template <int NW, int NX>
struct Q3KK {
  static void f(const Args& a) { tile_q23_k<true, BlockQ3_K, NW, NX>(a); }
};
template <int NW, int NX>
struct Q6KK {
  static void f(const Args& a) { tile_q6_k<NW, NX>(a); }
};

// 4 rows × 6 tokens: 24 accumulators, so the 4 weight conversions per k-step feed 24 FMAs (4×4: 16).
// Each (row, token) keeps its own accumulator and k order, so any tile shape gives identical bits.
template <template <int, int> class K>
struct Table4x6 {
  static constexpr TileFn fns[4][6] = {{K<1, 1>::f, K<1, 2>::f, K<1, 3>::f, K<1, 4>::f, K<1, 5>::f, K<1, 6>::f},
                                       {K<2, 1>::f, K<2, 2>::f, K<2, 3>::f, K<2, 4>::f, K<2, 5>::f, K<2, 6>::f},
                                       {K<3, 1>::f, K<3, 2>::f, K<3, 3>::f, K<3, 4>::f, K<3, 5>::f, K<3, 6>::f},
                                       {K<4, 1>::f, K<4, 2>::f, K<4, 3>::f, K<4, 4>::f, K<4, 5>::f, K<4, 6>::f}};
};

template <FloatKind FK>
void dot_float(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(Table4x6<FloatK<FK>::template K>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
template <class P>
void dot_q8act(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(Table4x4<Q8K<P>::template K>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
void dot_q4_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q4KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
void dot_q2_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q2KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
void dot_q3_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q3KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
void dot_q5_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q5KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
void dot_q6_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q6KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}

}  // namespace

int detail::avx512_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      {GgmlType::F32, GgmlType::F32, Isa::Avx512, 4, 6, nullptr, dot_float<FloatKind::F32>, nullptr},
      {GgmlType::F16, GgmlType::F32, Isa::Avx512, 4, 6, nullptr, dot_float<FloatKind::F16>, nullptr},
      {GgmlType::BF16, GgmlType::F32, Isa::Avx512, 4, 6, nullptr, dot_float<FloatKind::BF16>, nullptr},
      {GgmlType::Q8_0, GgmlType::Q8_0, Isa::Avx512, kRowLaneMaxNw, kRowLaneMaxNx, quantize_q8_0,
       dot_rowlane<PolicyQ8_0, sizeof(BlockQ8_0)>, nullptr},
      {GgmlType::Q4_0, GgmlType::Q8_0, Isa::Avx512, kRowLaneMaxNw, kRowLaneMaxNx, quantize_q8_0,
       dot_rowlane<PolicyQ4_0, sizeof(BlockQ4_0)>, nullptr},
      {GgmlType::Q5_0, GgmlType::Q8_0, Isa::Avx512, kRowLaneMaxNw, kRowLaneMaxNx, quantize_q8_0,
       dot_rowlane<PolicyQ5_0, sizeof(BlockQ5_0)>, nullptr},
      {GgmlType::Q2_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, quantize_q8_k, dot_q2_k, nullptr},
      {GgmlType::Q3_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, quantize_q8_k, dot_q3_k, nullptr},
      {GgmlType::Q4_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, quantize_q8_k, dot_q4_k, nullptr},
      {GgmlType::Q5_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, quantize_q8_k, dot_q5_k, nullptr},
      {GgmlType::Q6_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, quantize_q8_k, dot_q6_k, nullptr},
  };
  int count = 0;
  for (const auto& k : all)
    if (count < cap) out[count++] = k;
  return count;
}

#else
int detail::avx512_kernels(MatmulKernels* out, int cap) { return 0; }
#endif

}  // namespace cera::cpu
