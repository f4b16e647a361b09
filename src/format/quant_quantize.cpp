// Scalar reference quantizers.
//
// Activation formats (Q8_0, Q8_1, Q8_K) follow llama.cpp's reference rounding exactly, so that the
// noise cera adds to activations is the noise llama.cpp adds. Weight formats use a small
// error-minimising search (candidate scales + least-squares refit), then pack the result.
#include <cmath>
#include <cstring>
#include <string>

#include "cera/error.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace cera::quant {
namespace {

// Round half to even (like llama.cpp's nearest_int); valid for |v| < 2^22.
int nearest_int(float v) { return int(std::lrintf(v)); }

int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// ---------------------------------------------------------------- activation formats (exact)

void q8_0_block(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) y->qs[j] = int8_t(std::roundf(x[j] * id));
}

void q8_1_block(const float* x, BlockQ8_1* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    y->qs[j] = int8_t(std::roundf(x[j] * id));
    sum += y->qs[j];
  }
  y->s = f32_to_f16(float(sum) * d);  // unrounded d, as llama.cpp
}

// llama.cpp scales by the signed extreme with -127 (its comment: -128 made the AVX paths awkward),
// so qs stays within [-127, 127].
void q8_k_block(const float* x, BlockQ8_K* y) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK_K; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < kQK_K; ++j) {
    const int v = nearest_int(iscale * x[j]);
    y->qs[j] = int8_t(v < 127 ? v : 127);
  }
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += y->qs[16 * g + l];
    y->bsums[g] = int16_t(sum);
  }
  y->d = 1.0f / iscale;
}

// ---------------------------------------------------------------- weight-format fitting

// x ≈ d·L with integer L in [qmin, qmax]: tries scales that put the signed extreme on several
// levels near either end, refits d by least squares for each, keeps the lowest squared error.
float fit_symmetric(const float* x, int n, int qmin, int qmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax == 0.0f) return 0.0f;
  float best_d = max / float(qmin), best_err = INFINITY;
  for (int side = 0; side < 2; ++side) {
    for (int k = 0; k <= 10; ++k) {
      // target level for the extreme: qmin + k/4 on one side, -(qmax - k/4)... on the other
      const float target = side == 0 ? float(qmin) + 0.2f * float(k) : float(qmax) - 0.2f * float(k);
      if (target == 0.0f) continue;
      const float d0 = max / target;
      double sxl = 0, sll = 0;
      for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(x[i] / d0), qmin, qmax);
        sxl += double(x[i]) * l;
        sll += double(l) * l;
      }
      if (sll == 0) continue;
      const float d = float(sxl / sll);
      if (d == 0.0f) continue;
      double err = 0;
      for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(x[i] / d), qmin, qmax);
        const double e = double(x[i]) - double(d) * l;
        err += e * e;
      }
      if (err < best_err) {
        best_err = float(err);
        best_d = d;
      }
    }
  }
  return best_d;
}

// x ≈ a·L + b with integer L in [0, nmax]. With nonpos_offset, b is kept ≤ 0 (K-quants store the
// offset as an unsigned min that is subtracted). Searches iscale around nmax/(max-min) and refits
// (a, b) by least squares, like llama.cpp's make_qkx2_quants but unweighted.
void fit_asymmetric(const float* x, int n, int nmax, bool nonpos_offset, float* a_out, float* b_out) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::fmin(mn, x[i]);
    mx = std::fmax(mx, x[i]);
  }
  if (nonpos_offset && mn > 0.0f) mn = 0.0f;
  if (mx == mn) {
    *a_out = 0.0f;
    *b_out = mn;
    return;
  }
  float best_a = (mx - mn) / float(nmax), best_b = mn;
  double best_err = INFINITY;
  for (int k = -1; k <= 20; ++k) {
    const float iscale = k < 0 ? float(nmax) / (mx - mn) : (float(nmax) - 1.0f + 0.1f * float(k)) / (mx - mn);
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - mn)), 0, nmax);
      sl += l;
      sll += double(l) * l;
      sx += x[i];
      sxl += double(x[i]) * l;
    }
    const double det = n * sll - sl * sl;
    if (det <= 0) continue;
    double a = (n * sxl - sl * sx) / det;
    double b = (sll * sx - sl * sxl) / det;
    if (nonpos_offset && b > 0) {
      b = 0;
      a = sxl / sll;
    }
    if (a <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(float((x[i] - b) / a)), 0, nmax);
      const double e = x[i] - (a * l + b);
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_a = float(a);
      best_b = float(b);
    }
  }
  *a_out = best_a;
  *b_out = best_b;
}

int level_sym(float x, float d, int qmin, int qmax) {
  return d == 0.0f ? 0 : clamp_int(nearest_int(x / d), qmin, qmax);
}
int level_asym(float x, float a, float b, int nmax) {
  return a == 0.0f ? 0 : clamp_int(nearest_int((x - b) / a), 0, nmax);
}

void q4_0_block(const float* x, BlockQ4_0* y) {
  const float d = round_f16(fit_symmetric(x, kQK, -8, 7));
  y->d = f32_to_f16(d);
  for (int j = 0; j < 16; ++j) {
    const int lo = level_sym(x[j], d, -8, 7) + 8, hi = level_sym(x[j + 16], d, -8, 7) + 8;
    y->qs[j] = uint8_t(lo | hi << 4);
  }
}

void q5_0_block(const float* x, BlockQ5_0* y) {
  const float d = round_f16(fit_symmetric(x, kQK, -16, 15));
  y->d = f32_to_f16(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = level_sym(x[j], d, -16, 15) + 16, hi = level_sym(x[j + 16], d, -16, 15) + 16;
    y->qs[j] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
    qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) y->qh[k] = uint8_t(qh >> (8 * k));
}

void q4_1_block(const float* x, BlockQ4_1* y) {
  float a, b;
  fit_asymmetric(x, kQK, 15, false, &a, &b);
  a = round_f16(a);
  b = round_f16(b);
  y->d = f32_to_f16(a);
  y->m = f32_to_f16(b);
  for (int j = 0; j < 16; ++j)
    y->qs[j] = uint8_t(level_asym(x[j], a, b, 15) | level_asym(x[j + 16], a, b, 15) << 4);
}

void q5_1_block(const float* x, BlockQ5_1* y) {
  float a, b;
  fit_asymmetric(x, kQK, 31, false, &a, &b);
  a = round_f16(a);
  b = round_f16(b);
  y->d = f32_to_f16(a);
  y->m = f32_to_f16(b);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = level_asym(x[j], a, b, 31), hi = level_asym(x[j + 16], a, b, 31);
    y->qs[j] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
    qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) y->qh[k] = uint8_t(qh >> (8 * k));
}

// K-quants with (scale, min) per sub-block: fits every sub-block, quantizes the scales and mins
// with `scale_bits` bits against two f16 super-scales, then picks levels with the final values.
// levels[k] gets L for element k; sc/mn the quantized sub-block scale and min.
void fit_k_asym(const float* x, int sub, int nmax, int scale_max, uint16_t* d_out, uint16_t* dmin_out,
                uint8_t* sc, uint8_t* mn, uint8_t* levels) {
  const int nsub = kQK_K / sub;
  float scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < nsub; ++s) {
    float a, b;
    fit_asymmetric(x + s * sub, sub, nmax, true, &a, &b);
    scales[s] = a;
    mins[s] = -b;
    max_scale = std::fmax(max_scale, a);
    max_min = std::fmax(max_min, -b);
  }
  const float d = round_f16(max_scale / float(scale_max));
  const float dmin = round_f16(max_min / float(scale_max));
  *d_out = f32_to_f16(d);
  *dmin_out = f32_to_f16(dmin);
  for (int s = 0; s < nsub; ++s) {
    sc[s] = uint8_t(d > 0 ? clamp_int(nearest_int(scales[s] / d), 0, scale_max) : 0);
    mn[s] = uint8_t(dmin > 0 ? clamp_int(nearest_int(mins[s] / dmin), 0, scale_max) : 0);
    const float a = d * float(sc[s]), b = -dmin * float(mn[s]);
    for (int l = 0; l < sub; ++l) levels[s * sub + l] = uint8_t(level_asym(x[s * sub + l], a, b, nmax));
  }
}

// K-quants with a signed scale per sub-block of 16 (Q3_K, Q6_K).
float fit_k_sym(const float* x, int qmin, int qmax, int scale_max, int8_t* sc, int8_t* levels) {
  float scales[16], amax = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_symmetric(x + 16 * s, 16, qmin, qmax);
    amax = std::fmax(amax, std::fabs(scales[s]));
  }
  const float d = round_f16(amax / float(scale_max));
  for (int s = 0; s < 16; ++s) {
    sc[s] = int8_t(d > 0 ? clamp_int(nearest_int(scales[s] / d), -scale_max, scale_max) : 0);
    const float ds = d * float(sc[s]);
    for (int l = 0; l < 16; ++l) levels[16 * s + l] = int8_t(level_sym(x[16 * s + l], ds, qmin, qmax));
  }
  return d;
}

void q2_k_block(const float* x, BlockQ2_K* y) {
  uint8_t sc[16], mn[16], L[kQK_K];
  fit_k_asym(x, 16, 3, 15, &y->d, &y->dmin, sc, mn, L);
  for (int s = 0; s < 16; ++s) y->scales[s] = uint8_t(sc[s] | mn[s] << 4);
  std::memset(y->qs, 0, sizeof(y->qs));
  for (int n = 0; n < 2; ++n)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) y->qs[32 * n + l] |= uint8_t(L[128 * n + 32 * j + l] << (2 * j));
}

void q3_k_block(const float* x, BlockQ3_K* y) {
  int8_t sc[16], L[kQK_K];
  const float d = fit_k_sym(x, -4, 3, 31, sc, L);
  y->d = f32_to_f16(d);
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int s = 0; s < 16; ++s) {
    const int u = sc[s] + 32;  // 6-bit biased
    if (s < 8) y->scales[s] |= uint8_t(u & 0xF);
    else y->scales[s - 8] |= uint8_t((u & 0xF) << 4);
    y->scales[8 + s % 4] |= uint8_t((u >> 4) << (2 * (s / 4)));
  }
  std::memset(y->qs, 0, sizeof(y->qs));
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int n = 0; n < 2; ++n)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const int u = L[128 * n + 32 * j + l] + 4;  // 0..7
        y->qs[32 * n + l] |= uint8_t((u & 3) << (2 * j));
        if (u & 4) y->hmask[l] |= uint8_t(1u << (4 * n + j));
      }
}

void pack_scales_k4(const uint8_t* sc, const uint8_t* mn, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
  }
}

void q4_k_block(const float* x, BlockQ4_K* y) {
  uint8_t sc[8], mn[8], L[kQK_K];
  fit_k_asym(x, 32, 15, 63, &y->d, &y->dmin, sc, mn, L);
  pack_scales_k4(sc, mn, y->scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) y->qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

void q5_k_block(const float* x, BlockQ5_K* y) {
  uint8_t sc[8], mn[8], L[kQK_K];
  fit_k_asym(x, 32, 31, 63, &y->d, &y->dmin, sc, mn, L);
  pack_scales_k4(sc, mn, y->scales);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      y->qs[32 * c + l] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
      y->qh[l] |= uint8_t((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
    }
}

void q6_k_block(const float* x, BlockQ6_K* y) {
  int8_t L[kQK_K];
  const float d = fit_k_sym(x, -32, 31, 127, y->scales, L);
  y->d = f32_to_f16(d);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const int base = 128 * n;
      const int q1 = L[base + l] + 32, q2 = L[base + l + 32] + 32;
      const int q3 = L[base + l + 64] + 32, q4 = L[base + l + 96] + 32;
      y->ql[64 * n + l] = uint8_t((q1 & 0xF) | (q3 & 0xF) << 4);
      y->ql[64 * n + l + 32] = uint8_t((q2 & 0xF) | (q4 & 0xF) << 4);
      y->qh[32 * n + l] = uint8_t((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
    }
}

template <typename Block, int QK, void (*F)(const float*, Block*)>
void per_block(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) F(x + i * QK, y + i);
}

}  // namespace

bool can_quantize(GgmlType type) { return can_dequantize(type); }

void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize(type))
    throw Error(ErrorCode::Unsupported, "cannot quantize to tensor type " + std::string(ggml_type_name(type)));
  const int64_t blk = ggml_traits(type).block_elems;
  if (n % blk != 0)
    throw Error(ErrorCode::InvalidArgument, std::string(ggml_type_name(type)) + ": row of " + std::to_string(n) +
                                                " elements is not a multiple of " + std::to_string(blk));
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q4_0: return per_block<BlockQ4_0, kQK, q4_0_block>(src, dst, n);
    case GgmlType::Q4_1: return per_block<BlockQ4_1, kQK, q4_1_block>(src, dst, n);
    case GgmlType::Q5_0: return per_block<BlockQ5_0, kQK, q5_0_block>(src, dst, n);
    case GgmlType::Q5_1: return per_block<BlockQ5_1, kQK, q5_1_block>(src, dst, n);
    case GgmlType::Q8_0: return per_block<BlockQ8_0, kQK, q8_0_block>(src, dst, n);
    case GgmlType::Q8_1: return per_block<BlockQ8_1, kQK, q8_1_block>(src, dst, n);
    case GgmlType::Q2_K: return per_block<BlockQ2_K, kQK_K, q2_k_block>(src, dst, n);
    case GgmlType::Q3_K: return per_block<BlockQ3_K, kQK_K, q3_k_block>(src, dst, n);
    case GgmlType::Q4_K: return per_block<BlockQ4_K, kQK_K, q4_k_block>(src, dst, n);
    case GgmlType::Q5_K: return per_block<BlockQ5_K, kQK_K, q5_k_block>(src, dst, n);
    case GgmlType::Q6_K: return per_block<BlockQ6_K, kQK_K, q6_k_block>(src, dst, n);
    case GgmlType::Q8_K: return per_block<BlockQ8_K, kQK_K, q8_k_block>(src, dst, n);
    default: break;
  }
}

}  // namespace cera::quant
