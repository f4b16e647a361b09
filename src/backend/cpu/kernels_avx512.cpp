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
#include "format/quant_blocks.h"

namespace cera::cpu {

#if defined(__x86_64__) && defined(__AVX512F__)
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
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
  __m512 acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= a.n; k += 16) {
    __m512 wv[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) wv[i] = load_w16<K>(a.w + size_t(i) * a.wrb, k);
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
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = _mm512_reduce_add_ps(acc[i][j]);
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
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step_q8_0<P, NW, NX, true>(a, b, acc);
  if (b < nb) step_q8_0<P, NW, NX, false>(a, b, acc);
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = _mm512_reduce_add_ps(acc[i][j]);
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

template <int NW, int NX>
void tile_q4_k(const Args& a) {
  const int64_t nb = a.n / 256;
  __m512 acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i nib_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i scv[NW][4];
    __m512i mins[NW];
    float dw[NW], dmw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(a.w + size_t(i) * a.wrb) + b;
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
        const auto* blk = reinterpret_cast<const BlockQ4_K*>(a.w + size_t(i) * a.wrb) + b;
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * c)));
        wq[i] = _mm512_and_si512(_mm512_srlv_epi64(q, nib_shift), m4);
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
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = _mm512_reduce_add_ps(acc[i][j]);
}

// Q6_K: levels 0..63 (stored value, i.e. level + 32) in Q8_K element order, 64 per zmm.
template <int NW, int NX>
void tile_q6_k(const Args& a) {
  const int64_t nb = a.n / 256;
  __m512 acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i shl_lo = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);  // qh bits 0-1 | 2-3 -> bits 4-5
  const __m512i shr_hi = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);  // qh bits 4-5 | 6-7 -> bits 4-5
  for (int64_t b = 0; b < nb; ++b) {
    __m512i scv[NW][4];
    __m512i corr[NW];
    float dw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(i) * a.wrb) + b;
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
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = _mm512_reduce_add_ps(acc[i][j]);
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
  static void f(const Args& a) { tile_q4_k<NW, NX>(a); }
};
template <int NW, int NX>
struct Q6KK {
  static void f(const Args& a) { tile_q6_k<NW, NX>(a); }
};

template <FloatKind FK>
void dot_float(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(Table4x4<FloatK<FK>::template K>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
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
void dot_q6_k(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
              size_t os) {
  run_tiles(Table2x4<Q6KK>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}

}  // namespace

int detail::avx512_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      {GgmlType::F32, GgmlType::F32, Isa::Avx512, 4, 4, nullptr, dot_float<FloatKind::F32>, nullptr},
      {GgmlType::F16, GgmlType::F32, Isa::Avx512, 4, 4, nullptr, dot_float<FloatKind::F16>, nullptr},
      {GgmlType::BF16, GgmlType::F32, Isa::Avx512, 4, 4, nullptr, dot_float<FloatKind::BF16>, nullptr},
      {GgmlType::Q8_0, GgmlType::Q8_0, Isa::Avx512, 4, 4, nullptr, dot_q8act<PolicyQ8_0>, nullptr},
      {GgmlType::Q4_0, GgmlType::Q8_0, Isa::Avx512, 4, 4, nullptr, dot_q8act<PolicyQ4_0>, nullptr},
      {GgmlType::Q5_0, GgmlType::Q8_0, Isa::Avx512, 4, 4, nullptr, dot_q8act<PolicyQ5_0>, nullptr},
      {GgmlType::Q4_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, nullptr, dot_q4_k, nullptr},
      {GgmlType::Q6_K, GgmlType::Q8_K, Isa::Avx512, 4, 4, nullptr, dot_q6_k, nullptr},
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
