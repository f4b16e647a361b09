// AVX2 + FMA + F16C matmul kernels (no VNNI here: int8 dots use llama.cpp's idea of |w| × sign(x, w)
// through vpmaddubsw, then vpmaddwd against ones). Same ODR rules as kernels_avx512.cpp: internal
// linkage only, intrinsics and builtins only, one exported registration function.
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/kernels_internal.h"
#include "format/quant_blocks.h"

namespace cera::cpu {

#if defined(__x86_64__) && defined(__AVX2__)
namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;

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

void run_tiles(const TileFn (&fns)[kMW][kMX], int64_t n, const void* w, size_t wrb, int nw, const void* x,
               size_t xrb, int nx, float* out, size_t os) {
  for (int j0 = 0; j0 < nx; j0 += kMX) {
    const int cx = nx - j0 < kMX ? nx - j0 : kMX;
    for (int i0 = 0; i0 < nw; i0 += kMW) {
      const int cw = nw - i0 < kMW ? nw - i0 : kMW;
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
  __m256 acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= a.n; k += 8) {
    __m256 wv[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) wv[i] = load_w8<K>(a.w + size_t(i) * a.wrb, k);
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
  static __m256i levels(const uint8_t* row, int64_t b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>((reinterpret_cast<const BlockQ8_0*>(row) + b)->qs));
  }
  static uint16_t d(const uint8_t* row, int64_t b) { return (reinterpret_cast<const BlockQ8_0*>(row) + b)->d; }
};

struct PolicyQ4_0 {
  static __m256i levels(const uint8_t* row, int64_t b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>((reinterpret_cast<const BlockQ4_0*>(row) + b)->qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
  }
  static uint16_t d(const uint8_t* row, int64_t b) { return (reinterpret_cast<const BlockQ4_0*>(row) + b)->d; }
};

template <class P, int NW, int NX>
void tile_q8_0(const Args& a) {
  const int64_t nb = a.n / 32;
  __m256 acc[NW][NX];
#pragma GCC unroll 8
  for (int i = 0; i < NW; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NX; ++j) acc[i][j] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i aw[NW], wq[NW];
    float dw[NW];
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) {
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
#pragma GCC unroll 8
  for (int j = 0; j < NX; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < NW; ++i) a.out[size_t(j) * a.os + size_t(i)] = hsum(acc[i][j]);
}

template <template <int, int> class K>
struct Table {
  static constexpr TileFn fns[kMW][kMX] = {
      {K<1, 1>::f, K<1, 2>::f}, {K<2, 1>::f, K<2, 2>::f}, {K<3, 1>::f, K<3, 2>::f}, {K<4, 1>::f, K<4, 2>::f}};
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

template <FloatKind FK>
void dot_float(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(Table<FloatK<FK>::template K>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}
template <class P>
void dot_q8act(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
               size_t os) {
  run_tiles(Table<Q8K<P>::template K>::fns, n, w, wrb, nw, x, xrb, nx, out, os);
}

}  // namespace

int detail::avx2_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      {GgmlType::F32, GgmlType::F32, Isa::Avx2, kMW, kMX, nullptr, dot_float<FloatKind::F32>, nullptr},
      {GgmlType::F16, GgmlType::F32, Isa::Avx2, kMW, kMX, nullptr, dot_float<FloatKind::F16>, nullptr},
      {GgmlType::BF16, GgmlType::F32, Isa::Avx2, kMW, kMX, nullptr, dot_float<FloatKind::BF16>, nullptr},
      {GgmlType::Q8_0, GgmlType::Q8_0, Isa::Avx2, kMW, kMX, nullptr, dot_q8act<PolicyQ8_0>, nullptr},
      {GgmlType::Q4_0, GgmlType::Q8_0, Isa::Avx2, kMW, kMX, nullptr, dot_q8act<PolicyQ4_0>, nullptr},
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
