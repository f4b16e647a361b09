// Reference dot kernels: one weight row · one activation row, integer block dot products scaled
// afterwards (the formulation every SIMD kernel follows), looped over the tile.
#include "backend/cpu/kernels_internal.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_unpack.h"

namespace cera::cpu {
namespace {

using namespace cera::quant;

float dot_f32(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += f16_to_f32(a[i]) * b[i];
  return s;
}

float dot_bf16(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += bf16_to_f32(a[i]) * b[i];
  return s;
}

uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

float dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j)
      sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
    s += float(sumi) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d));
  }
  return s;
}

float dot_q5_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(a[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = ((a[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4) - 16;
      const int hi = ((a[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4) - 16;
      sumi += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
    }
    s += float(sumi) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d));
  }
  return s;
}

float dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    s += float(sumi) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d));
  }
  return s;
}

// Q4_1 / Q5_1: Σ (d·q + m)·x = d·dx·Σ q·xq + m·(dx·Σ xq), the last factor being the Q8_1 `s`.
float dot_q4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += (a[i].qs[j] & 0xF) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
    s += float(sumi) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) + f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
  }
  return s;
}

float dot_q5_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(a[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (a[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int hi = (a[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      sumi += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
    }
    s += float(sumi) * (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) + f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
  }
  return s;
}

// K-quants: integer levels L[256] and per-sub-block scale (and min). The min term uses the Q8_K
// per-16 sums: Σ_k mn·xq_k = mn · bsum.
int sub_dot(const int8_t* l, const int8_t* q, int len) {
  int s = 0;
  for (int k = 0; k < len; ++k) s += l[k] * q[k];
  return s;
}

float dot_q2_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ2_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t L[kQK_K];
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) L[128 * h + 32 * j + l] = int8_t((a[i].qs[32 * h + l] >> (2 * j)) & 3);
    int sumi = 0, summ = 0;
    for (int sb = 0; sb < 16; ++sb) {
      sumi += (a[i].scales[sb] & 15) * sub_dot(L + 16 * sb, b[i].qs + 16 * sb, 16);
      summ += (a[i].scales[sb] >> 4) * b[i].bsums[sb];
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sumi) - f16_to_f32(a[i].dmin) * float(summ));
  }
  return s;
}

float dot_q3_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ3_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t L[kQK_K], sc[16];
    unpack_scales_q3k(a[i].scales, sc);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          const int v = ((a[i].qs[32 * h + l] >> (2 * j)) & 3) - ((a[i].hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
          L[128 * h + 32 * j + l] = int8_t(v);
        }
    int sumi = 0;
    for (int sb = 0; sb < 16; ++sb) sumi += sc[sb] * sub_dot(L + 16 * sb, b[i].qs + 16 * sb, 16);
    s += b[i].d * f16_to_f32(a[i].d) * float(sumi);
  }
  return s;
}

template <bool kFifthBit, typename Block>
float dot_q45_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const Block*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t L[kQK_K];
    uint8_t sc[8], mn[8];
    unpack_scales_k4(a[i].scales, sc, mn);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        int lo = a[i].qs[32 * c + l] & 0xF, hi = a[i].qs[32 * c + l] >> 4;
        if constexpr (kFifthBit) {
          lo += 16 * ((a[i].qh[l] >> (2 * c)) & 1);
          hi += 16 * ((a[i].qh[l] >> (2 * c + 1)) & 1);
        }
        L[64 * c + l] = int8_t(lo);
        L[64 * c + 32 + l] = int8_t(hi);
      }
    int sumi = 0, summ = 0;
    for (int sb = 0; sb < 8; ++sb) {
      sumi += sc[sb] * sub_dot(L + 32 * sb, b[i].qs + 32 * sb, 32);
      summ += mn[sb] * (b[i].bsums[2 * sb] + b[i].bsums[2 * sb + 1]);
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sumi) - f16_to_f32(a[i].dmin) * float(summ));
  }
  return s;
}

float dot_q6_k(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float s = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t L[kQK_K];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = a[i].ql + 64 * h;
      const uint8_t* qh = a[i].qh + 32 * h;
      int8_t* out = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        out[l] = int8_t(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
        out[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int sb = 0; sb < 16; ++sb) sumi += a[i].scales[sb] * sub_dot(L + 16 * sb, b[i].qs + 16 * sb, 16);
    s += b[i].d * f16_to_f32(a[i].d) * float(sumi);
  }
  return s;
}

template <float (*Dot)(int64_t, const void*, const void*)>
void tile(int64_t n, const void* w, size_t wrb, int nw, const void* x, size_t xrb, int nx, float* out,
          size_t out_stride) {
  for (int j = 0; j < nx; ++j)
    for (int i = 0; i < nw; ++i)
      out[size_t(j) * out_stride + size_t(i)] =
          Dot(n, static_cast<const uint8_t*>(w) + size_t(i) * wrb, static_cast<const uint8_t*>(x) + size_t(j) * xrb);
}

template <GgmlType T>
void quantize_as(const float* x, void* dst, int64_t n) {
  quantize_row_ref(T, x, dst, n);
}

template <GgmlType T>
void dequantize_as(const void* src, float* dst, int64_t n) {
  dequantize_row_ref(T, src, dst, n);
}

template <GgmlType W, GgmlType A, float (*Dot)(int64_t, const void*, const void*)>
MatmulKernels make() {
  return MatmulKernels{W, A, Isa::Scalar, 4, 4, quantize_as<A>, tile<Dot>, dequantize_as<W>};
}

}  // namespace

int detail::scalar_kernels(MatmulKernels* out, int cap) {
  const MatmulKernels all[] = {
      make<GgmlType::F32, GgmlType::F32, dot_f32>(),
      make<GgmlType::F16, GgmlType::F32, dot_f16>(),
      make<GgmlType::BF16, GgmlType::F32, dot_bf16>(),
      make<GgmlType::Q4_0, GgmlType::Q8_0, dot_q4_0>(),
      make<GgmlType::Q4_1, GgmlType::Q8_1, dot_q4_1>(),
      make<GgmlType::Q5_0, GgmlType::Q8_0, dot_q5_0>(),
      make<GgmlType::Q5_1, GgmlType::Q8_1, dot_q5_1>(),
      make<GgmlType::Q8_0, GgmlType::Q8_0, dot_q8_0>(),
      make<GgmlType::Q2_K, GgmlType::Q8_K, dot_q2_k>(),
      make<GgmlType::Q3_K, GgmlType::Q8_K, dot_q3_k>(),
      make<GgmlType::Q4_K, GgmlType::Q8_K, dot_q45_k<false, BlockQ4_K>>(),
      make<GgmlType::Q5_K, GgmlType::Q8_K, dot_q45_k<true, BlockQ5_K>>(),
      make<GgmlType::Q6_K, GgmlType::Q8_K, dot_q6_k>(),
  };
  int count = 0;
  for (const auto& k : all)
    if (count < cap) out[count++] = k;
  return count;
}

}  // namespace cera::cpu
