// AVX2 + FMA + F16C matmul kernels (no VNNI here: int8 dots use llama.cpp's idea of |w| × sign(x, w)
// through vpmaddubsw, then vpmaddwd against ones; K-quants feed unsigned levels to vpmaddubsw and
// apply their sub-block scales with vpmaddwd). Same ODR rules as kernels_avx512.cpp: internal
// linkage only, intrinsics and builtins only, one exported registration function.
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels_internal.h"
#include "backend/cpu/prefetch.h"
#include "format/quant_blocks.h"

namespace cera::cpu {

#if defined(__x86_64__) && defined(__AVX2__)
namespace {

using detail::kPrefetchMaxTokens;
using detail::prefetch_lead;
using detail::prefetch_lines;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

// Tile shapes (weight rows × activation rows per kernel call): float weights 4 × 2; integer ones
// up to 4 × 4, taken as 4 rows × 1-2 tokens (decode keeps 4 rows' worth of independent work) or
// 2 rows × 3-4 tokens, whose unpacked levels then serve more tokens while 16 ymm registers still
// hold the accumulators (cera_bench_matmul T512 under avx2, against 4 × 2 tiles: Q4_K 83 → 103
// GFLOP/s, Q6_K 70 → 86, Q4_0 61 → 73, T1 unchanged; F16 in 2 × 4 tiles fell 88 → 57, so floats keep 4 × 2).
constexpr int kFloatMW = 4, kFloatMX = 2;
constexpr int kIntMW = 4, kIntMX = 4;

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

// rows_wide: weight rows a call takes when it has more than 2 tokens (MW otherwise).
template <int MW, int MX>
void run_tiles(const TileFn (&fns)[MW][MX], int rows_wide, int64_t n, const void* w, size_t wrb, int nw,
               const void* x, size_t xrb, int nx, float* out, size_t os) {
  for (int j0 = 0; j0 < nx; j0 += MX) {
    const int cx = nx - j0 < MX ? nx - j0 : MX;
    const int mw = cx > 2 ? rows_wide : MW;
    for (int i0 = 0; i0 < nw; i0 += mw) {
      const int cw = nw - i0 < mw ? nw - i0 : mw;
      const Args a{n, static_cast<const uint8_t*>(w) + size_t(i0) * wrb, wrb,
                   static_cast<const uint8_t*>(x) + size_t(j0) * xrb, xrb, out + size_t(j0) * os + size_t(i0), os};
      fns[cw - 1][cx - 1](a);
    }
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A tile's accumulators: NW weight rows × NX tokens, each a vector whose lanes are summed at the end.
template <int NW, int NX>
inline void zero_tile(__m256 (&acc)[NW][NX]) {
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm256_setzero_ps();
}
template <int NW, int NX>
inline void store_tile(const Args& a, const __m256 (&acc)[NW][NX]) {
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = hsum(acc[i][j]);
}

enum class FloatKind { F32, F16, BF16 };

template <FloatKind K>
inline __m256 load_w8(const uint8_t* row, int64_t k) {
  if constexpr (K == FloatKind::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (K == FloatKind::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <FloatKind K>
inline float load_w1(const uint8_t* row, int64_t k) {
  if constexpr (K == FloatKind::F32) {
    return reinterpret_cast<const float*>(row)[k];
  } else if constexpr (K == FloatKind::F16) {
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[k]);
  } else {
    const uint32_t bits = uint32_t(reinterpret_cast<const uint16_t*>(row)[k]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
}

template <FloatKind K, int NW, int NX>
void tile_float(const Args& a) {
  constexpr size_t kElem = K == FloatKind::F32 ? 4 : 2;
  const size_t lead = prefetch_lead(NW * a.wrb);
  __m256 acc[NW][NX];
  zero_tile(acc);
  int64_t k = 0;
  for (; k + 8 <= a.n; k += 8) {
    __m256 wv[NW];
    const bool new_line = ((size_t(k) * kElem) & 63) == 0;  // a step reads 16 or 32 bytes
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      if (NX <= kPrefetchMaxTokens && new_line) __builtin_prefetch(a.w + size_t(i) * a.wrb + size_t(k) * kElem + lead);
      wv[i] = load_w8<K>(a.w + size_t(i) * a.wrb, k);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const __m256 xv = _mm256_loadu_ps(reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb) + k);
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j) {
    const float* xr = reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb);
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      float s = hsum(acc[i][j]);
      for (int64_t t = k; t < a.n; ++t) s += load_w1<K>(a.w + size_t(i) * a.wrb, t) * xr[t];
      a.out[size_t(j) * a.os + size_t(i)] = s;
    }
  }
}

// Signed weight levels of one 32-element block.
struct PolicyQ8_0 {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static __m256i levels(const uint8_t* row, int64_t b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>((reinterpret_cast<const BlockQ8_0*>(row) + b)->qs));
  }
  static uint16_t d(const uint8_t* row, int64_t b) { return (reinterpret_cast<const BlockQ8_0*>(row) + b)->d; }
};

struct PolicyQ4_0 {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static __m256i levels(const uint8_t* row, int64_t b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>((reinterpret_cast<const BlockQ4_0*>(row) + b)->qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
  }
  static uint16_t d(const uint8_t* row, int64_t b) { return (reinterpret_cast<const BlockQ4_0*>(row) + b)->d; }
};

// The 32 bits of a Q5_0 / Q5_1 block's qh as 32 bytes, 0x10 where bit k (the fifth bit of element
// k) is set: byte k takes byte k / 8 of qh, then its own bit.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t h;
  __builtin_memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(h)), _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                   0x0101010101010101ll, 0x0000000000000000ll));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Nibbles of a 32-element block in element order: bytes 0-15 the low nibbles, 16-31 the high ones.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

struct PolicyQ5_0 {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static __m256i levels(const uint8_t* row, int64_t b) {
    const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
    return _mm256_sub_epi8(_mm256_or_si256(nibbles(blk->qs), fifth_bits(blk->qh)), _mm256_set1_epi8(16));
  }
  static uint16_t d(const uint8_t* row, int64_t b) { return (reinterpret_cast<const BlockQ5_0*>(row) + b)->d; }
};

// Q4_1 / Q5_1 against Q8_1: Σ (d·q + m)·x = d·dx·Σ q·xq + m·s (s = dx·Σ xq, stored in the x block);
// the levels are unsigned, so they go to vpmaddubsw as they are.
template <class Block, bool kFifthBit, int NW, int NX>
void tile_q8_1(const Args& a) {
  const int64_t nb = a.n / 32;
  __m256 acc[NW][NX];
  zero_tile(acc);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[NW];
    float dw[NW], mw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      const auto* blk = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
      if constexpr (NX <= kPrefetchMaxTokens) prefetch_lines<sizeof(Block)>(reinterpret_cast<const uint8_t*>(blk) + lead);
      wq[i] = nibbles(blk->qs);
      if constexpr (kFifthBit) wq[i] = _mm256_or_si256(wq[i], fifth_bits(blk->qh));
      dw[i] = _cvtsh_ss(blk->d);
      mw[i] = _cvtsh_ss(blk->m);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_1*>(a.x + size_t(j) * a.xrb) + b;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->qs));
      const float dx = _cvtsh_ss(xb->d), sx = _cvtsh_ss(xb->s);
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[i], xq), ones);  // levels ≤ 31: no saturation
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
        // The offset term once per block, in lane 0 (the lanes are summed at the end).
        acc[i][j] = _mm256_add_ps(acc[i][j], _mm256_castps128_ps256(_mm_set_ss(mw[i] * sx)));
      }
    }
  }
  store_tile(a, acc);
}

template <class P, int NW, int NX>
void tile_q8_0(const Args& a) {
  const int64_t nb = a.n / 32;
  __m256 acc[NW][NX];
  zero_tile(acc);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i aw[NW], wq[NW];
    float dw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      if constexpr (NX <= kPrefetchMaxTokens) prefetch_lines<P::kBytes>(a.w + size_t(i) * a.wrb + size_t(b) * P::kBytes + lead);
      wq[i] = P::levels(a.w + size_t(i) * a.wrb, b);
      aw[i] = _mm256_sign_epi8(wq[i], wq[i]);  // |w| as u8
      dw[i] = _cvtsh_ss(P::d(a.w + size_t(i) * a.wrb, b));
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_0*>(a.x + size_t(j) * a.xrb) + b;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->qs));
      const float dx = _cvtsh_ss(xb->d);
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        // |w|·sign(x, w) = w·x; pairs stay within int16 since |w|, |x| <= 127
        const __m256i p16 = _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(xq, wq[i]));
        const __m256i p32 = _mm256_madd_epi16(p16, ones);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
      }
    }
  }
  store_tile(a, acc);
}

// ---------------------------------------------------------------------------- K-quants × Q8_K
//
// A 256-element block in 8 chunks of 32 elements, each chunk's levels as unsigned bytes (vpmaddubsw
// takes them as u8 against the signed x bytes, pair sums within int16 for levels up to 63), the
// int16 pair sums multiplied by their sub-block's scale and summed into int32 by vpmaddwd. Per kind
// (a policy: KQ45 for Q4_K / Q5_K, KQ6K, KQ2K, KQ3K): prep() unpacks a block's scales into int16
// (kPer16: two per chunk, one per 16 elements; else one) and the per-bsum vector `extra` — the
// minimums (kFold false: dmin·Σ mn·bsum is its own term, Q2_K/Q4_K/Q5_K) or -offset·scale (kFold:
// folded into the integer sum, Q3_K's +4 and Q6_K's +32 on the levels) — and levels(blk, k) gives
// chunk k's 32 levels.
template <class B, bool kFifthBit>
struct KQ45 {
  using Block = B;
  static constexpr bool kPer16 = false, kFold = false;
  // sc: 8 scales (one a chunk); extra: each sub-block's minimum twice (one per bsum of 16). The
  // 6-bit scales and minimums as GGML packs them (MODELS.md §2.2), unpacked four at a time.
  static void prep(const Block* blk, int16_t sc[16], __m256i& extra, float& d, float& dmin) {
    uint32_t a, b, c;
    __builtin_memcpy(&a, blk->scales, 4);
    __builtin_memcpy(&b, blk->scales + 4, 4);
    __builtin_memcpy(&c, blk->scales + 8, 4);
    const uint32_t sc_lo = a & 0x3F3F3F3Fu, mn_lo = b & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t mn_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(sc_hi), int(sc_lo))));
    const __m128i mn = _mm_set_epi32(0, 0, int(mn_hi), int(mn_lo));
    extra = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    d = _cvtsh_ss(blk->d);
    dmin = _cvtsh_ss(blk->dmin);
  }
  // Chunk k is sub-block k: nibbles of bytes 32·(k / 2).. (low for even k), Q5_K's bit k of qh[l].
  static __m256i levels(const Block* blk, int k) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * (k >> 1)));
    __m256i v = _mm256_and_si256(k & 1 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    if constexpr (kFifthBit) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh));
      const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1));  // k < 8: no leak
      v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
    }
    return v;
  }
};

struct KQ6K {
  using Block = BlockQ6_K;
  static constexpr bool kPer16 = true, kFold = true;
  static void prep(const Block* blk, int16_t sc[16], __m256i& extra, float& d, float& dmin) {
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), s16);
    extra = _mm256_mullo_epi16(s16, _mm256_set1_epi16(-32));
    d = _cvtsh_ss(blk->d);
    dmin = 0.0f;
  }
  // Element 128h + 32q + l: nibble of ql[64h + 32(q & 1) + l] (low for q < 2) | bits 2q, 2q+1 of
  // qh[32h + l] << 4, stored as level + 32.
  static __m256i levels(const Block* blk, int k) {
    const int h = k >> 2, q = k & 3;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->ql + 64 * h + 32 * (q & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h));
    const __m256i lo = _mm256_and_si256(q < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), _mm256_set1_epi8(3));  // 2q < 8: no leak
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
};

struct KQ2K {
  using Block = BlockQ2_K;
  static constexpr bool kPer16 = true, kFold = false;
  static void prep(const Block* blk, int16_t sc[16], __m256i& extra, float& d, float& dmin) {
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F))));
    extra = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
    d = _cvtsh_ss(blk->d);
    dmin = _cvtsh_ss(blk->dmin);
  }
  // Element 128h + 32j + l: bits 2j, 2j+1 of qs[32h + l].
  static __m256i levels(const Block* blk, int k) {
    const int h = k >> 2, j = k & 3;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * h));
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
  }
};
struct KQ3K {
  using Block = BlockQ3_K;
  static constexpr bool kPer16 = true, kFold = true;
  static void prep(const Block* blk, int16_t sc[16], __m256i& extra, float& d, float& dmin) {
    // 16 signed six-bit scales (MODELS.md §2.4): low nibbles in bytes 0-7, two high bits each in 8-11.
    uint64_t lo;
    uint32_t c;
    __builtin_memcpy(&lo, blk->scales, 8);
    __builtin_memcpy(&c, blk->scales + 8, 4);
    const uint64_t h01 = uint64_t(c & 0x03030303u) | uint64_t((c >> 2) & 0x03030303u) << 32;        // 0-7
    const uint64_t h23 = uint64_t((c >> 4) & 0x03030303u) | uint64_t((c >> 6) & 0x03030303u) << 32;  // 8-15
    const uint64_t s07 = (lo & 0x0F0F0F0F0F0F0F0Full) | h01 << 4;
    const uint64_t s8f = ((lo >> 4) & 0x0F0F0F0F0F0F0F0Full) | h23 << 4;
    const __m256i s16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_set_epi64x(int64_t(s8f), int64_t(s07))),
                                         _mm256_set1_epi16(32));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), s16);
    extra = _mm256_mullo_epi16(s16, _mm256_set1_epi16(-4));
    d = _cvtsh_ss(blk->d);
    dmin = 0.0f;
  }
  // Element 128h + 32j + l: bits 2j, 2j+1 of qs[32h + l], plus 4 where bit 4h + j of hmask[l] is set
  // (level + 4: GGML subtracts 4 where it is clear).
  static __m256i levels(const Block* blk, int k) {
    const int h = k >> 2, j = k & 3;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * h));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->hmask));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));  // < 8: no leak
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
  }
};

template <class K, int NW, int NX>
void tile_kq(const Args& a) {
  using Block = typename K::Block;
  const int64_t nb = a.n / 256;
  __m256 acc[NW][NX];
  zero_tile(acc);
  const size_t lead = prefetch_lead(NW * a.wrb);
  for (int64_t b = 0; b < nb; ++b) {
    alignas(32) int16_t sc[NW][16];
    __m256i extra[NW];
    float dw[NW], dmw[NW];
    const Block* blk[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
      blk[i] = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
      if constexpr (NX <= kPrefetchMaxTokens)
        prefetch_lines<sizeof(Block)>(reinterpret_cast<const uint8_t*>(blk[i]) + lead);
      K::prep(blk[i], sc[i], extra[i], dw[i], dmw[i]);
    }
    __m256i isum[NW][NX];
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums));
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) isum[i][j] = K::kFold ? _mm256_madd_epi16(bs, extra[i]) : _mm256_setzero_si256();
    }
    for (int k = 0; k < 8; ++k) {
      __m256i wq[NW], sv[NW];
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        wq[i] = K::levels(blk[i], k);
        // int16 lane L of the pair sums covers elements 2L, 2L+1: lanes 0-7 the chunk's first 16.
        sv[i] = K::kPer16 ? _mm256_set_m128i(_mm_set1_epi16(sc[i][2 * k + 1]), _mm_set1_epi16(sc[i][2 * k]))
                          : _mm256_set1_epi16(sc[i][k]);
      }
#pragma GCC unroll 8
      for (int j = 0; j < NX; ++j) {
        const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->qs + 32 * k));
#pragma GCC unroll 8
        for (int i = 0; i < NW; ++i)
          isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(wq[i], xq), sv[i]));
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      const float dx = xb->d;
#pragma GCC unroll 8
      for (int i = 0; i < NW; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
        if constexpr (!K::kFold) {
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb->bsums));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs, extra[i])),
                                      _mm256_set1_ps(-dmw[i] * dx), acc[i][j]);
        }
      }
    }
  }
  store_tile(a, acc);
}

template <template <int, int> class K>
struct FloatTable {
  static constexpr TileFn fns[kFloatMW][kFloatMX] = {
      {K<1, 1>::f, K<1, 2>::f}, {K<2, 1>::f, K<2, 2>::f}, {K<3, 1>::f, K<3, 2>::f}, {K<4, 1>::f, K<4, 2>::f}};
};
// Rows 3-4 with tokens 3-4 are never called (run_tiles takes 2 rows there).
template <template <int, int> class K>
struct IntTable {
  static constexpr TileFn fns[kIntMW][kIntMX] = {{K<1, 1>::f, K<1, 2>::f, K<1, 3>::f, K<1, 4>::f},
                                                 {K<2, 1>::f, K<2, 2>::f, K<2, 3>::f, K<2, 4>::f},
                                                 {K<3, 1>::f, K<3, 2>::f, nullptr, nullptr},
                                                 {K<4, 1>::f, K<4, 2>::f, nullptr, nullptr}};
};
constexpr int kIntRowsWide = 2;

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

template <class Block, bool kFifthBit>
struct Q81K {
  template <int NW, int NX>
  struct K {
    static void f(const Args& a) { tile_q8_1<Block, kFifthBit, NW, NX>(a); }
  };
};
template <class Block, bool kFifthBit>
void dot_q8_1act(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
                 size_t os) {
  run_tiles(IntTable<Q81K<Block, kFifthBit>::template K>::fns, kIntRowsWide, n, w, wrb, nw, x, xrb, nx, out, os);
}

template <class Kind>
struct KQK {
  template <int NW, int NX>
  struct K {
    static void f(const Args& a) { tile_kq<Kind, NW, NX>(a); }
  };
};

template <class Kind>
void dot_kq(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out, size_t os) {
  run_tiles(IntTable<KQK<Kind>::template K>::fns, kIntRowsWide, n, w, wrb, nw, x, xrb, nx, out, os);
}

template <FloatKind FK>
void dot_float(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(FloatTable<FloatK<FK>::template K>::fns, kFloatMW, n, w, wrb, nw, x, xrb, nx, out, os);
}
template <class P>
void dot_q8act(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(IntTable<Q8K<P>::template K>::fns, kIntRowsWide, n, w, wrb, nw, x, xrb, nx, out, os);
}

}  // namespace

int detail::avx2_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      {GgmlType::F32, GgmlType::F32, Isa::Avx2, kFloatMW, kFloatMX, nullptr, dot_float<FloatKind::F32>, nullptr},
      {GgmlType::F16, GgmlType::F32, Isa::Avx2, kFloatMW, kFloatMX, nullptr, dot_float<FloatKind::F16>, nullptr},
      {GgmlType::BF16, GgmlType::F32, Isa::Avx2, kFloatMW, kFloatMX, nullptr, dot_float<FloatKind::BF16>, nullptr},
      {GgmlType::Q8_0, GgmlType::Q8_0, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_q8act<PolicyQ8_0>, nullptr},
      {GgmlType::Q4_0, GgmlType::Q8_0, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_q8act<PolicyQ4_0>, nullptr},
      {GgmlType::Q5_0, GgmlType::Q8_0, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_q8act<PolicyQ5_0>, nullptr},
      {GgmlType::Q4_1, GgmlType::Q8_1, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_q8_1act<BlockQ4_1, false>, nullptr},
      {GgmlType::Q5_1, GgmlType::Q8_1, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_q8_1act<BlockQ5_1, true>, nullptr},
      {GgmlType::Q2_K, GgmlType::Q8_K, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_kq<KQ2K>, nullptr},
      {GgmlType::Q3_K, GgmlType::Q8_K, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_kq<KQ3K>, nullptr},
      {GgmlType::Q4_K, GgmlType::Q8_K, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_kq<KQ45<BlockQ4_K, false>>, nullptr},
      {GgmlType::Q5_K, GgmlType::Q8_K, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_kq<KQ45<BlockQ5_K, true>>, nullptr},
      {GgmlType::Q6_K, GgmlType::Q8_K, Isa::Avx2, kIntMW, kIntMX, nullptr, dot_kq<KQ6K>, nullptr},
  };
  int count = 0;
  for (const auto& k : all)
    if (count < cap) out[count++] = k;
  return count;
}

#else
int detail::avx2_kernels(MatmulKernels* out, int cap) { return 0; }
#endif

}  // namespace cera::cpu
