// AArch64 NEON matmul kernels. Integer block dots use the ARMv8.2 dot product (vdotq_s32) when the
// build targets it (__ARM_FEATURE_DOTPROD), else widening multiplies with pairwise accumulation;
// float weights are widened to f32 and multiplied with f32 FMA. Same rules as the x86 files:
// internal linkage only, no inline helpers from shared headers, one exported registration function.
// On other architectures this file only defines neon_kernels() returning 0.
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "backend/cpu/kernels_internal.h"
#include "format/quant_blocks.h"

namespace cera::cpu {

#if defined(__aarch64__) && defined(__ARM_NEON)
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQK_K;

// 4 weight rows × 2 activation rows: 8 f32x4 accumulators for floats, and small enough that the
// unpacked weight block of one row stays in registers while both activation rows use it.
constexpr int kMW = 4, kMX = 2;

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

// A tile's sums (CW weight rows × CX tokens) into the output.
template <int CW, int CX>
inline void store_tile(const Args& a, const float (&s)[CW][CX]) {
  for (int i = 0; i < CW; ++i)
    for (int j = 0; j < CX; ++j) a.out[size_t(j) * a.os + size_t(i)] = s[i][j];
}

// Every output's accumulation sequence depends only on its own two rows, never on CW / CX, so a
// token's result is bit-identical whatever tile it was computed in.
template <template <int, int> class K>
struct Table {
  static constexpr TileFn fns[kMW][kMX] = {
      {K<1, 1>::run, K<1, 2>::run}, {K<2, 1>::run, K<2, 2>::run},
      {K<3, 1>::run, K<3, 2>::run}, {K<4, 1>::run, K<4, 2>::run}};
};

template <template <int, int> class K>
void run_tiles(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  for (int j0 = 0; j0 < nx; j0 += kMX) {
    const int cx = nx - j0 < kMX ? nx - j0 : kMX;
    for (int i0 = 0; i0 < nw; i0 += kMW) {
      const int cw = nw - i0 < kMW ? nw - i0 : kMW;
      const Args a{n, static_cast<const uint8_t*>(w) + size_t(i0) * wrb, wrb,
                   static_cast<const uint8_t*>(x) + size_t(j0) * xrb, xrb, out + size_t(j0) * os + size_t(i0), os};
      Table<K>::fns[cw - 1][cx - 1](a);
    }
  }
}

// Raw f16 bits to f32 through the hardware converter (exact; AArch64 always has it).
inline float f16(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

template <typename T>
inline T load(const void* p) {
  T v;
  __builtin_memcpy(&v, p, sizeof(T));  // rows may sit at any byte offset
  return v;
}

// Scalar float steps use explicit fused multiply-adds: left to the compiler, -ffp-contract fuses
// differently per CW / CX instantiation, and tile-width independence must be bit-exact.
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// acc += Σ over groups of 4 lanes of a·b (int8 × int8 → int32).
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  // |a·b| ≤ 128·128 fits int16; pairwise add-accumulate widens to int32.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

// ---- float weights (F32 / F16 / BF16) × f32 activations ----

enum class FloatKind { F32, F16, BF16 };

template <FloatKind F>
inline float32x4_t load4(const uint8_t* row, int64_t k) {
  if constexpr (F == FloatKind::F32) return vld1q_f32(reinterpret_cast<const float*>(row) + k);
  const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(row) + k);
  if constexpr (F == FloatKind::F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));  // bf16 is the high half of an f32
}

template <FloatKind F>
inline float load1(const uint8_t* row, int64_t k) {
  if constexpr (F == FloatKind::F32) return reinterpret_cast<const float*>(row)[k];
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[k];
  if constexpr (F == FloatKind::F16) return f16(h);
  return vgetq_lane_f32(vreinterpretq_f32_u32(vshll_n_u16(vdup_n_u16(h), 16)), 0);
}

template <FloatKind F>
struct FloatTile {
  template <int CW, int CX>
  struct K {
    static void run(const Args& a) {
      float32x4_t acc[CW][CX];
      for (int i = 0; i < CW; ++i)
        for (int j = 0; j < CX; ++j) acc[i][j] = vdupq_n_f32(0.0f);
      int64_t k = 0;
      for (; k + 4 <= a.n; k += 4) {
        float32x4_t xv[CX];
        for (int j = 0; j < CX; ++j) xv[j] = vld1q_f32(reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb) + k);
        for (int i = 0; i < CW; ++i) {
          const float32x4_t wv = load4<F>(a.w + size_t(i) * a.wrb, k);
          for (int j = 0; j < CX; ++j) acc[i][j] = vfmaq_f32(acc[i][j], wv, xv[j]);
        }
      }
      for (int i = 0; i < CW; ++i)
        for (int j = 0; j < CX; ++j) {
          float s = vaddvq_f32(acc[i][j]);
          const uint8_t* wr = a.w + size_t(i) * a.wrb;
          const float* xr = reinterpret_cast<const float*>(a.x + size_t(j) * a.xrb);
          for (int64_t t = k; t < a.n; ++t) s = fma(load1<F>(wr, t), xr[t], s);  // n not a multiple of 4
          a.out[size_t(j) * a.os + size_t(i)] = s;
        }
    }
  };
};

template <FloatKind F>
void dot_float(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles<FloatTile<F>::template K>(n, w, wrb, nw, x, xrb, nx, out, os);
}

// ---- Q8_0 / Q4_0 weights × Q8_0 activations ----
// Per block: exact int32 dot, then s += float(sumi) · (dw·dx) as the scalar reference (fused).

struct Q8_0Weights {
  using Block = BlockQ8_0;
  static void unpack(const Block& b, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(b.qs);
    hi = vld1q_s8(b.qs + 16);
  }
};

struct Q4_0Weights {
  using Block = BlockQ4_0;
  static void unpack(const Block& b, int8x16_t& lo, int8x16_t& hi) {
    // Element j in the low nibble of qs[j], element j+16 in the high nibble; levels are q - 8.
    const uint8x16_t v = vld1q_u8(b.qs);
    const int8x16_t eight = vdupq_n_s8(8);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), eight);
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
  }
};

// The fifth bits of a Q5_0 / Q5_1 block (qh: bit k belongs to element k) as 0x10 bytes, elements
// 0-15 in lo and 16-31 in hi.
inline void fifth_bits(const uint8_t* qh, uint8x16_t& lo, uint8x16_t& hi) {
  const uint32_t h = load<uint32_t>(qh);
  // Byte k of a 16-byte vector takes byte k / 8 of its half of h, then its own bit k % 8.
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit);
  const uint8x16_t b01 = vcombine_u8(vdup_n_u8(uint8_t(h)), vdup_n_u8(uint8_t(h >> 8)));
  const uint8x16_t b23 = vcombine_u8(vdup_n_u8(uint8_t(h >> 16)), vdup_n_u8(uint8_t(h >> 24)));
  lo = vandq_u8(vtstq_u8(b01, bit), vdupq_n_u8(0x10));
  hi = vandq_u8(vtstq_u8(b23, bit), vdupq_n_u8(0x10));
}

struct Q5_0Weights {
  using Block = BlockQ5_0;
  static void unpack(const Block& b, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t v = vld1q_u8(b.qs);
    uint8x16_t h0, h1;
    fifth_bits(b.qh, h0, h1);
    const int8x16_t sixteen = vdupq_n_s8(16);
    lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), h0)), sixteen);
    hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), h1)), sixteen);
  }
};

// Q4_1 / Q5_1 × Q8_1 as the scalar reference: s += float(Σ q·xq) · (dw·dx) + m·sx per block, the
// levels unsigned (< 32, so the int8 dot takes them as they are).
template <class Block, bool kFifthBit>
struct Q81Tile {
  template <int CW, int CX>
  struct K {
    static void run(const Args& a) {
      float s[CW][CX] = {};
      const int64_t nb = a.n / kQK;
      for (int64_t b = 0; b < nb; ++b) {
        int8x16_t xl[CX], xh[CX];
        float dx[CX], sx[CX];
        for (int j = 0; j < CX; ++j) {
          const auto* xb = reinterpret_cast<const BlockQ8_1*>(a.x + size_t(j) * a.xrb) + b;
          xl[j] = vld1q_s8(xb->qs);
          xh[j] = vld1q_s8(xb->qs + 16);
          dx[j] = f16(load<uint16_t>(&xb->d));
          sx[j] = f16(load<uint16_t>(&xb->s));
        }
        for (int i = 0; i < CW; ++i) {
          const auto* wb = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
          const uint8x16_t v = vld1q_u8(wb->qs);
          uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
          if constexpr (kFifthBit) {
            uint8x16_t h0, h1;
            fifth_bits(wb->qh, h0, h1);
            lo = vorrq_u8(lo, h0);
            hi = vorrq_u8(hi, h1);
          }
          const float dw = f16(load<uint16_t>(&wb->d)), mw = f16(load<uint16_t>(&wb->m));
          for (int j = 0; j < CX; ++j) {
            const int32x4_t p = dot16(dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(lo), xl[j]), vreinterpretq_s8_u8(hi), xh[j]);
            // Explicit fmas: left to -ffp-contract the sum would fuse differently per CW / CX.
            s[i][j] = fma(mw, sx[j], fma(float(vaddvq_s32(p)), dw * dx[j], s[i][j]));
          }
        }
      }
      store_tile(a, s);
    }
  };
};

template <class W>
struct Q8ActTile {
  template <int CW, int CX>
  struct K {
    static void run(const Args& a) {
      float s[CW][CX] = {};
      const int64_t nb = a.n / kQK;
      for (int64_t b = 0; b < nb; ++b) {
        int8x16_t xl[CX], xh[CX];
        float dx[CX];
        for (int j = 0; j < CX; ++j) {
          const auto* xb = reinterpret_cast<const BlockQ8_0*>(a.x + size_t(j) * a.xrb) + b;
          xl[j] = vld1q_s8(xb->qs);
          xh[j] = vld1q_s8(xb->qs + 16);
          dx[j] = f16(load<uint16_t>(&xb->d));
        }
        for (int i = 0; i < CW; ++i) {
          const auto* wb = reinterpret_cast<const typename W::Block*>(a.w + size_t(i) * a.wrb) + b;
          int8x16_t wl, wh;
          W::unpack(*wb, wl, wh);
          const float dw = f16(load<uint16_t>(&wb->d));
          for (int j = 0; j < CX; ++j) {
            const int32x4_t p = dot16(dot16(vdupq_n_s32(0), wl, xl[j]), wh, xh[j]);
            s[i][j] = fma(float(vaddvq_s32(p)), dw * dx[j], s[i][j]);
          }
        }
      }
      store_tile(a, s);
    }
  };
};

template <class W>
void dot_q8_0act(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
                 size_t os) {
  run_tiles<Q8ActTile<W>::template K>(n, w, wrb, nw, x, xrb, nx, out, os);
}

// ---- Q4_K / Q6_K weights × Q8_K activations ----
// Per super-block: exact int32 Σ scale·(sub-block dot), then the scalar reference's float formula.

// Q4_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes (MODELS.md §2.2).
void unpack_k4_scales(const uint8_t* s, int32_t sc[8], int16_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = int16_t(s[j + 4] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    mn[j] = int16_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K and Q5_K (kFifthBit: bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c+1 of 64c + 32 + l).
template <class Block, bool kFifthBit>
struct Q45KTile {
  template <int CW, int CX>
  struct K {
    static void run(const Args& a) {
      float s[CW][CX] = {};
      const int64_t nb = a.n / kQK_K;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* xb[CX];
        int16x8_t pair_sums[CX];  // Σ xq per 32 elements = per Q4_K sub-block
        for (int j = 0; j < CX; ++j) {
          xb[j] = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
          pair_sums[j] = vpaddq_s16(vld1q_s16(xb[j]->bsums), vld1q_s16(xb[j]->bsums + 8));
        }
        for (int i = 0; i < CW; ++i) {
          const auto* wb = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
          int32_t sc[8];
          int16_t mn[8];
          unpack_k4_scales(wb->scales, sc, mn);
          int32x4_t acc[CX];
          for (int j = 0; j < CX; ++j) acc[j] = vdupq_n_s32(0);
          uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);  // Q5_K: the fifth bits of elements l, 16 + l
          if constexpr (kFifthBit) qh0 = vld1q_u8(wb->qh), qh1 = vld1q_u8(wb->qh + 16);
          for (int c = 0; c < 4; ++c) {
            // 32 bytes: low nibbles are sub-block 2c (elements 64c..64c+31), high nibbles 2c+1.
            const uint8x16_t v0 = vld1q_u8(wb->qs + 32 * c), v1 = vld1q_u8(wb->qs + 32 * c + 16);
            const uint8x16_t m4 = vdupq_n_u8(0x0F);
            uint8x16_t u0 = vandq_u8(v0, m4), u1 = vandq_u8(v1, m4), u2 = vshrq_n_u8(v0, 4), u3 = vshrq_n_u8(v1, 4);
            if constexpr (kFifthBit) {
              const uint8x16_t blo = vdupq_n_u8(uint8_t(1u << (2 * c))), bhi = vdupq_n_u8(uint8_t(2u << (2 * c)));
              const uint8x16_t sixteen = vdupq_n_u8(0x10);
              u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(qh0, blo), sixteen));
              u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(qh1, blo), sixteen));
              u2 = vorrq_u8(u2, vandq_u8(vtstq_u8(qh0, bhi), sixteen));
              u3 = vorrq_u8(u3, vandq_u8(vtstq_u8(qh1, bhi), sixteen));
            }
            const int8x16_t l0 = vreinterpretq_s8_u8(u0), l1 = vreinterpretq_s8_u8(u1);
            const int8x16_t h0 = vreinterpretq_s8_u8(u2), h1 = vreinterpretq_s8_u8(u3);
            for (int j = 0; j < CX; ++j) {
              const int8_t* q = xb[j]->qs + 64 * c;
              const int32x4_t plo = dot16(dot16(vdupq_n_s32(0), l0, vld1q_s8(q)), l1, vld1q_s8(q + 16));
              const int32x4_t phi = dot16(dot16(vdupq_n_s32(0), h0, vld1q_s8(q + 32)), h1, vld1q_s8(q + 48));
              acc[j] = vmlaq_n_s32(acc[j], plo, sc[2 * c]);
              acc[j] = vmlaq_n_s32(acc[j], phi, sc[2 * c + 1]);
            }
          }
          const int16x8_t mv = vld1q_s16(mn);
          const float dw = f16(load<uint16_t>(&wb->d)), dmin = f16(load<uint16_t>(&wb->dmin));
          for (int j = 0; j < CX; ++j) {
            const int32x4_t m = vmlal_high_s16(vmull_s16(vget_low_s16(mv), vget_low_s16(pair_sums[j])), mv, pair_sums[j]);
            const int sumi = vaddvq_s32(acc[j]), summ = vaddvq_s32(m);
            s[i][j] = fma(load<float>(&xb[j]->d), fma(dw, float(sumi), -(dmin * float(summ))), s[i][j]);
          }
        }
      }
      store_tile(a, s);
    }
  };
};

template <int CW, int CX>
struct Q6KTile {
  static void run(const Args& a) {
    float s[CW][CX] = {};
    const int64_t nb = a.n / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K* xb[CX];
      for (int j = 0; j < CX; ++j) xb[j] = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
      for (int i = 0; i < CW; ++i) {
        const auto* wb = reinterpret_cast<const BlockQ6_K*>(a.w + size_t(i) * a.wrb) + b;
        int32x4_t acc[CX];
        for (int j = 0; j < CX; ++j) acc[j] = vdupq_n_s32(0);
        const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
        const int8x16_t off = vdupq_n_s8(32);
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 32; l += 16) {
            // Half h covers elements 128h..128h+127: four 32-element groups, each 2 sub-blocks of 16.
            const uint8x16_t ql0 = vld1q_u8(wb->ql + 64 * h + l), ql1 = vld1q_u8(wb->ql + 64 * h + 32 + l);
            const uint8x16_t qh = vld1q_u8(wb->qh + 32 * h + l);
            int8x16_t q[4];
            q[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(ql0, m4), vshlq_n_u8(vandq_u8(qh, m3), 4)));
            q[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(ql1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4)));
            q[2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(ql0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4)));
            q[3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(ql1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4)));
            for (int g = 0; g < 4; ++g) {
              const int e = 128 * h + 32 * g + l;  // first element of this 16-lane slice
              const int8x16_t lv = vsubq_s8(q[g], off);
              const int32_t scale = wb->scales[e / 16];
              for (int j = 0; j < CX; ++j)
                acc[j] = vmlaq_n_s32(acc[j], dot16(vdupq_n_s32(0), lv, vld1q_s8(xb[j]->qs + e)), scale);
            }
          }
        const float dw = f16(load<uint16_t>(&wb->d));
        for (int j = 0; j < CX; ++j) s[i][j] = fma(load<float>(&xb[j]->d) * dw, float(vaddvq_s32(acc[j])), s[i][j]);
      }
    }
    store_tile(a, s);
  }
};

// Q2_K and Q3_K (kQ3): element 128h + 32g + l is bits 2g, 2g+1 of qs[32h + l] (Q3_K: minus 4 where
// bit 4h + g of hmask[l] is clear), a scale per 16 elements; Q2_K's levels are unsigned with a
// minimum per 16 (as Q4_K's), Q3_K's scales signed six-bit. The scalar reference's float formula.
template <class Block, bool kQ3>
struct Q23KTile {
  template <int CW, int CX>
  struct K {
    static void run(const Args& a) {
      float s[CW][CX] = {};
      const int64_t nb = a.n / kQK_K;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* xb[CX];
        for (int j = 0; j < CX; ++j) xb[j] = reinterpret_cast<const BlockQ8_K*>(a.x + size_t(j) * a.xrb) + b;
        for (int i = 0; i < CW; ++i) {
          const auto* wb = reinterpret_cast<const Block*>(a.w + size_t(i) * a.wrb) + b;
          int32_t sc[16];
          int16_t mn[16] = {};
          if constexpr (kQ3) {
            const uint8_t* p = wb->scales;
            for (int k = 0; k < 16; ++k) {
              const int low4 = k < 8 ? (p[k] & 0xF) : (p[k - 8] >> 4);
              const int high2 = (p[8 + k % 4] >> (2 * (k / 4))) & 3;
              sc[k] = (low4 | (high2 << 4)) - 32;
            }
          } else {
            for (int k = 0; k < 16; ++k) sc[k] = wb->scales[k] & 15, mn[k] = int16_t(wb->scales[k] >> 4);
          }
          int32x4_t acc[CX];
          for (int j = 0; j < CX; ++j) acc[j] = vdupq_n_s32(0);
          for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; l += 16) {
              const uint8x16_t q = vld1q_u8(wb->qs + 32 * h + l);
              uint8x16_t hm = vdupq_n_u8(0);
              if constexpr (kQ3) hm = vld1q_u8(wb->hmask + l);
              for (int g = 0; g < 4; ++g) {
                const int e = 128 * h + 32 * g + l;  // first element of this 16-lane slice
                int8x16_t lv = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q, vdupq_n_s8(int8_t(-2 * g))), vdupq_n_u8(3)));
                if constexpr (kQ3) {  // minus 4 where the hmask bit is clear
                  const uint8x16_t set = vtstq_u8(hm, vdupq_n_u8(uint8_t(1u << (4 * h + g))));
                  lv = vsubq_s8(lv, vreinterpretq_s8_u8(vbicq_u8(vdupq_n_u8(4), set)));
                }
                for (int j = 0; j < CX; ++j)
                  acc[j] = vmlaq_n_s32(acc[j], dot16(vdupq_n_s32(0), lv, vld1q_s8(xb[j]->qs + e)), sc[e / 16]);
              }
            }
          const float dw = f16(load<uint16_t>(&wb->d));
          float dmin = 0.0f;
          if constexpr (!kQ3) dmin = f16(load<uint16_t>(&wb->dmin));
          const int16x8_t m0 = vld1q_s16(mn), m1 = vld1q_s16(mn + 8);  // Q2_K's minimums (Q3_K: zeros)
          for (int j = 0; j < CX; ++j) {
            const int sumi = vaddvq_s32(acc[j]);
            if constexpr (kQ3) {
              s[i][j] = fma(load<float>(&xb[j]->d) * dw, float(sumi), s[i][j]);
            } else {
              const int16x8_t b0 = vld1q_s16(xb[j]->bsums), b1 = vld1q_s16(xb[j]->bsums + 8);
              int32x4_t m = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
              m = vmlal_high_s16(m, m0, b0);
              m = vmlal_s16(m, vget_low_s16(m1), vget_low_s16(b1));
              m = vmlal_high_s16(m, m1, b1);
              s[i][j] = fma(load<float>(&xb[j]->d), fma(dw, float(sumi), -(dmin * float(vaddvq_s32(m)))), s[i][j]);
            }
          }
        }
      }
      store_tile(a, s);
    }
  };
};

template <template <int, int> class K>
void dot_tiles(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles<K>(n, w, wrb, nw, x, xrb, nx, out, os);
}

}  // namespace

int detail::neon_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      {GgmlType::F32, GgmlType::F32, Isa::Neon, kMW, kMX, nullptr, dot_float<FloatKind::F32>, nullptr},
      {GgmlType::F16, GgmlType::F32, Isa::Neon, kMW, kMX, nullptr, dot_float<FloatKind::F16>, nullptr},
      {GgmlType::BF16, GgmlType::F32, Isa::Neon, kMW, kMX, nullptr, dot_float<FloatKind::BF16>, nullptr},
      {GgmlType::Q8_0, GgmlType::Q8_0, Isa::Neon, kMW, kMX, nullptr, dot_q8_0act<Q8_0Weights>, nullptr},
      {GgmlType::Q4_0, GgmlType::Q8_0, Isa::Neon, kMW, kMX, nullptr, dot_q8_0act<Q4_0Weights>, nullptr},
      {GgmlType::Q5_0, GgmlType::Q8_0, Isa::Neon, kMW, kMX, nullptr, dot_q8_0act<Q5_0Weights>, nullptr},
      {GgmlType::Q4_1, GgmlType::Q8_1, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q81Tile<BlockQ4_1, false>::K>, nullptr},
      {GgmlType::Q5_1, GgmlType::Q8_1, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q81Tile<BlockQ5_1, true>::K>, nullptr},
      {GgmlType::Q2_K, GgmlType::Q8_K, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q23KTile<BlockQ2_K, false>::K>, nullptr},
      {GgmlType::Q3_K, GgmlType::Q8_K, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q23KTile<BlockQ3_K, true>::K>, nullptr},
      {GgmlType::Q4_K, GgmlType::Q8_K, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q45KTile<BlockQ4_K, false>::K>, nullptr},
      {GgmlType::Q5_K, GgmlType::Q8_K, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q45KTile<BlockQ5_K, true>::K>, nullptr},
      {GgmlType::Q6_K, GgmlType::Q8_K, Isa::Neon, kMW, kMX, nullptr, dot_tiles<Q6KTile>, nullptr},
  };
  int count = 0;
  for (const auto& k : all)
    if (count < cap) out[count++] = k;
  return count;
}

#else
int detail::neon_kernels(MatmulKernels* out, int cap) { return 0; }
#endif

}  // namespace cera::cpu
