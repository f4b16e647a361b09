// Scalar reference quantizers.
//
// Every format reproduces llama.cpp's reference quantizer bit for bit, so a file written by
// `cera quantize` is byte-identical to one written by llama-quantize without an importance matrix
// (quantize_q4_K(..., quant_weights = NULL) etc. all end in the quantize_row_*_ref functions), and
// activations quantized here carry exactly the noise llama.cpp's do.
//
// Exactness rules that the code below follows throughout (they are why it looks the way it does):
//  * all arithmetic is float, evaluated in llama.cpp's order: a*b*c is (a*b)*c, sums accumulate
//    left to right element by element, x*id with id = 1/d where llama.cpp multiplies and x/d where
//    it divides. The project builds this file without FMA, so nothing is contracted either.
//  * scales go through f16 exactly where llama.cpp stores them, and the final levels are chosen
//    against the stored (f16) values.
//  * level rounding is round-half-to-even (nearest_int) in the K-quants, truncation of x + 0.5 in
//    the 32-wide formats, roundf in Q8_0/Q8_1 — each as its llama.cpp counterpart.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "cera/error.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace cera::quant {
namespace {

// Round half to even for |v| < 2^22: adding 1.5·2^23 forces the FPU to round v to an integer in
// the mantissa (in the current, nearest-even mode); the low 23 bits then hold v + 2^22.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// A value's f16 code and the float it decodes to (what a dequantizer will read back).
inline float as_stored(uint16_t h) { return f16_to_f32(h); }

// Sub-blocks whose largest magnitude is below this are treated as all zero (llama.cpp's
// GROUP_MAX_EPS), so tiny denormal groups do not produce huge inverse scales.
constexpr float kGroupMaxEps = 1e-15f;

// The element of largest magnitude, keeping its sign; the first one wins ties.
struct SignedMax {
  float amax = 0.0f;  // |max|
  float max = 0.0f;   // the element itself
};
inline SignedMax signed_max(const float* x, int n) {
  SignedMax m;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > m.amax) {
      m.amax = ax;
      m.max = x[i];
    }
  }
  return m;
}

// ---------------------------------------------------------------- Q8 formats (weights and activations)

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

// ---------------------------------------------------------------- 32-wide weight formats

// Symmetric 4/5-bit: the signed extreme maps to the most negative level (-8 / -16), which uses the
// one extra negative level and leaves the opposite side one step short. Levels are
// trunc(x/d + offset + 0.5), i.e. round half up, capped at the top level.
void q4_0_block(const float* x, BlockQ4_0* y) {
  const float d = signed_max(x, kQK).max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  for (int j = 0; j < 16; ++j) {
    const float lo = x[j] * id, hi = x[j + 16] * id;
    const int qlo = std::min(15, int(int8_t(lo + 8.5f)));
    const int qhi = std::min(15, int(int8_t(hi + 8.5f)));
    y->qs[j] = uint8_t(qlo | qhi << 4);
  }
}

void q5_0_block(const float* x, BlockQ5_0* y) {
  const float d = signed_max(x, kQK).max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const float lo = x[j] * id, hi = x[j + 16] * id;
    const int qlo = std::min(31, int(int8_t(lo + 16.5f)));
    const int qhi = std::min(31, int(int8_t(hi + 16.5f)));
    y->qs[j] = uint8_t((qlo & 0xF) | (qhi & 0xF) << 4);
    qh |= uint32_t(qlo >> 4 & 1) << j | uint32_t(qhi >> 4 & 1) << (j + 16);
  }
  std::memcpy(y->qh, &qh, 4);  // little-endian u32, as the format defines
}

// Asymmetric 4/5-bit: min stored as-is, d spans [min, max] in 15 / 31 steps.
void min_max(const float* x, int n, float* mn, float* mx) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

void q4_1_block(const float* x, BlockQ4_1* y) {
  float mn, mx;
  min_max(x, kQK, &mn, &mx);
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  y->m = f32_to_f16(mn);
  for (int j = 0; j < 16; ++j) {
    const float lo = (x[j] - mn) * id, hi = (x[j + 16] - mn) * id;
    const int qlo = std::min(15, int(int8_t(lo + 0.5f)));
    const int qhi = std::min(15, int(int8_t(hi + 0.5f)));
    y->qs[j] = uint8_t(qlo | qhi << 4);
  }
}

void q5_1_block(const float* x, BlockQ5_1* y) {
  float mn, mx;
  min_max(x, kQK, &mn, &mx);
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  y->m = f32_to_f16(mn);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const float lo = (x[j] - mn) * id, hi = (x[j + 16] - mn) * id;
    // no cap here in llama.cpp: (max-min)·id rounds to 31 at most
    const int qlo = uint8_t(lo + 0.5f), qhi = uint8_t(hi + 0.5f);
    y->qs[j] = uint8_t((qlo & 0xF) | (qhi & 0xF) << 4);
    qh |= uint32_t(qlo >> 4 & 1) << j | uint32_t(qhi >> 4 & 1) << (j + 16);
  }
  std::memcpy(y->qh, &qh, 4);
}

// ---------------------------------------------------------------- K-quant sub-block searches

// Asymmetric sub-block fit x ≈ scale·L - m with L in [0, nmax] and m ≥ 0 (llama.cpp's
// make_qkx2_quants). Starts from the min/max grid, then tries nstep+1 inverse scales
// (nmax + rmin + rdelta·k)/(max - offset); for each it rounds, solves the weighted least-squares
// (scale, offset) for those levels (offset clipped to ≤ 0), and keeps the candidate with the
// smallest weighted error (|diff| with use_mad, else diff²). Note that `offset` is the best fit so
// far, not the sub-block minimum: once a candidate wins, later candidates are gridded from its
// offset — llama.cpp does this, and matching its bytes requires doing it too.
// Returns scale; *neg_min = m.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep, bool use_mad) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // the offset can only shift down
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -lo;
    return 0.0f;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* levels) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * float(levels[i]) + offset - x[i];
      diff = use_mad ? std::fabs(diff) : diff * diff;
      err += w[i] * diff;
    }
    return err;
  };

  float iscale = float(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float offset = lo;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(clamp_int(nearest_int(iscale * (x[i] - offset)), 0, nmax));
  float best_err = error_of(scale, offset, L);

  uint8_t cand[32];
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * float(k) + float(nmax)) / (hi - offset);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - offset)), 0, nmax);
      cand[i] = uint8_t(l);
      const float wl = w[i] * float(l);
      sum_l += wl;
      sum_l2 += wl * float(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / det;
    float o = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (o > 0) {  // a positive offset is not representable: refit the scale alone
      o = 0;
      s = sum_xl / sum_l2;
    }
    const float err = error_of(s, o, cand);
    if (err < best_err) {
      std::memcpy(L, cand, size_t(n));
      best_err = err;
      scale = s;
      offset = o;
    }
  }
  *neg_min = -offset;
  return scale;
}

// Symmetric 16-element fit for Q3_K (llama.cpp's make_q3_quants with do_rmse): levels in
// [-nmax, nmax-1] from the signed extreme, then up to 5 passes of coordinate descent that move one
// level at a time when that raises (Σ w·x·l)² / Σ w·l² (the x²-weighted least-squares gain).
// L gets levels + nmax. Returns the least-squares scale.
float fit_q3(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 4;
  const SignedMax m = signed_max(x, n);
  if (m.amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = float(-nmax) / m.max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        // the level that best fits x[i] given the other elements' scale
        const int nl = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (nl != L[i]) {
          slx += w * x[i] * float(nl);
          sl2 += w * float(nl) * float(nl);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Symmetric 16-element fit for Q6_K (llama.cpp's make_qx_quants, rmse_type 1, no imatrix):
// inverse scales -(nmax + 0.1k)/max for k = 0, ±1..±9, levels in [-nmax, nmax-1]; keeps the one
// with the largest x²-weighted least-squares gain (Σ w·x·l)² / Σ w·l². L gets levels + nmax.
float fit_q6(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 32;
  const SignedMax m = signed_max(x, n);
  if (m.amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float w[n];
  for (int i = 0; i < n; ++i) w[i] = x[i] * x[i];
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = float(clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      slx += w[i] * x[i] * l;
      sl2 += w[i] * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
  };
  auto set_levels = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  };

  float iscale = float(-nmax) / m.max;
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  set_levels(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(k)) / m.max;
    sums(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      set_levels(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ---------------------------------------------------------------- K-quant blocks

// Two bits per level, four levels per byte: byte l of half h holds elements 128h + l + 32s in bits
// 2s..2s+1 (Q2_K and the low bits of Q3_K).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(e[0] | e[32] << 2 | e[64] << 4 | e[96] << 6);
    }
}

void q2_k_block(const float* x, BlockQ2_K* y) {
  uint8_t L[kQK_K];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;  // scales and mins are both ≥ 0 here
  for (int s = 0; s < 16; ++s) {
    const float* xs = x + 16 * s;
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(xs[l]);
    scales[s] = fit_scale_min(16, 3, xs, w, L + 16 * s, &mins[s], -0.5f, 0.1f, 15, /*use_mad=*/true);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  // 4-bit scale and min per sub-block against f16 super-scales max/15.
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int s = 0; s < 16; ++s) y->scales[s] = uint8_t(nearest_int(iscale * scales[s]));
    y->d = f32_to_f16(max_scale / 15.0f);
  } else {
    for (int s = 0; s < 16; ++s) y->scales[s] = 0;
    y->d = f32_to_f16(0.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int s = 0; s < 16; ++s) y->scales[s] = uint8_t(y->scales[s] | nearest_int(iscale * mins[s]) << 4);
    y->dmin = f32_to_f16(max_min / 15.0f);
  } else {
    y->dmin = f32_to_f16(0.0f);
  }
  // Re-pick the levels against the stored scale and min; a zero scale keeps the search's levels.
  const float d_all = as_stored(y->d), dmin_all = as_stored(y->dmin);
  for (int s = 0; s < 16; ++s) {
    const float d = d_all * float(y->scales[s] & 0xF);
    if (d == 0.0f) continue;
    const float dm = dmin_all * float(y->scales[s] >> 4);
    for (int l = 0; l < 16; ++l) L[16 * s + l] = uint8_t(clamp_int(nearest_int((x[16 * s + l] + dm) / d), 0, 3));
  }
  pack_2bit(L, y->qs);
}

void q3_k_block(const float* x, BlockQ3_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float amax = 0, max_scale = 0;  // the sub-block scale of largest magnitude, signed
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_q3(x + 16 * s, L + 16 * s);
    const float a = std::fabs(scales[s]);
    if (a > amax) {
      amax = a;
      max_scale = scales[s];
    }
  }
  // 6-bit signed scales: the largest maps to -32 (the extra negative code), packed as low nibbles
  // in bytes 0..7 (two per byte) and top two bits in bytes 8..11.
  std::memset(y->scales, 0, sizeof(y->scales));
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (int s = 0; s < 16; ++s) {
      int8_t q = int8_t(nearest_int(iscale * scales[s]));
      q = int8_t(clamp_int(q, -32, 31) + 32);
      if (s < 8) y->scales[s] = uint8_t(q & 0xF);
      else y->scales[s - 8] = uint8_t(y->scales[s - 8] | (q & 0xF) << 4);
      y->scales[8 + s % 4] = uint8_t(y->scales[8 + s % 4] | (q >> 4) << (2 * (s / 4)));
    }
    y->d = f32_to_f16(1.0f / iscale);
  } else {
    y->d = f32_to_f16(0.0f);
  }
  // Re-pick levels against the stored scales (a zero scale keeps the search's levels).
  const float d_all = as_stored(y->d);
  for (int s = 0; s < 16; ++s) {
    const int low4 = s < 8 ? (y->scales[s] & 0xF) : (y->scales[s - 8] >> 4);
    const int high2 = (y->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    const float d = d_all * float((low4 | high2 << 4) - 32);
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) L[16 * s + l] = int8_t(clamp_int(nearest_int(x[16 * s + l] / d), -4, 3) + 4);
  }
  // Bit 2 of level k goes to hmask[k % 32], bit k / 32; the low two bits pack like Q2_K.
  uint8_t low[kQK_K];
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int k = 0; k < kQK_K; ++k) {
    const int q = L[k];
    if (q > 3) y->hmask[k % 32] = uint8_t(y->hmask[k % 32] | 1u << (k / 32));
    low[k] = uint8_t(q & 3);
  }
  pack_2bit(low, y->qs);
}

// Q4_K / Q5_K: eight 32-element sub-blocks, each fitted with weights |x| + rms(sub-block), then
// 6-bit scales and mins against f16 super-scales max/63, then levels re-picked.
struct K4Result {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t L[kQK_K];
};

void fit_k4_block(const float* x, int nmax, float rmin, int nstep, K4Result* r) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[s] = fit_scale_min(32, nmax, xs, w, r->L + 32 * s, &mins[s], rmin, 0.1f, nstep, /*use_mad=*/false);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    // uint8 first, then cap: a (never seen) negative scale wraps and lands on 63, as in llama.cpp
    sc[s] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[s])));
    mn[s] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[s])));
  }
  // Packing per MODELS.md §2.2: bytes 0-3 sc0-3 (+ top bits of sc4-7), 4-7 mn0-3 (+ top bits of
  // mn4-7), 8-11 low nibbles of sc4-7 | mn4-7.
  for (int j = 0; j < 4; ++j) {
    r->scales[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    r->scales[j + 4] = uint8_t(mn[j] | (mn[j + 4] >> 4) << 6);
    r->scales[j + 8] = uint8_t((sc[j + 4] & 0xF) | (mn[j + 4] & 0xF) << 4);
  }
  r->d = f32_to_f16(max_scale / 63.0f);
  r->dmin = f32_to_f16(max_min / 63.0f);
  const float d_all = as_stored(r->d), dmin_all = as_stored(r->dmin);
  for (int s = 0; s < 8; ++s) {
    const float d = d_all * float(sc[s]);
    if (d == 0.0f) continue;  // keeps the search's levels
    const float dm = dmin_all * float(mn[s]);
    for (int l = 0; l < 32; ++l)
      r->L[32 * s + l] = uint8_t(clamp_int(nearest_int((x[32 * s + l] + dm) / d), 0, nmax));
  }
}

void q4_k_block(const float* x, BlockQ4_K* y) {
  K4Result r;
  fit_k4_block(x, 15, -1.0f, 20, &r);
  y->d = r.d;
  y->dmin = r.dmin;
  std::memcpy(y->scales, r.scales, 12);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) y->qs[32 * c + l] = uint8_t(r.L[64 * c + l] | r.L[64 * c + 32 + l] << 4);
}

void q5_k_block(const float* x, BlockQ5_K* y) {
  K4Result r;
  fit_k4_block(x, 31, -0.5f, 15, &r);
  y->d = r.d;
  y->dmin = r.dmin;
  std::memcpy(y->scales, r.scales, 12);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = r.L[64 * c + l], hi = r.L[64 * c + 32 + l];
      y->qs[32 * c + l] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
      y->qh[l] = uint8_t(y->qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
    }
}

void q6_k_block(const float* x, BlockQ6_K* y) {
  int8_t L[kQK_K];
  float scales[16];
  float max_abs = 0, max_scale = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_q6(x + 16 * s, L + 16 * s);
    const float a = std::fabs(scales[s]);
    if (a > max_abs) {
      max_abs = a;
      max_scale = scales[s];
    }
  }
  if (max_abs < kGroupMaxEps) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  // 8-bit signed scales: the largest maps to -128.
  const float iscale = -128.0f / max_scale;
  y->d = f32_to_f16(1.0f / iscale);
  for (int s = 0; s < 16; ++s) y->scales[s] = int8_t(std::min(127, nearest_int(iscale * scales[s])));
  const float d_all = as_stored(y->d);
  for (int s = 0; s < 16; ++s) {
    const float d = d_all * float(y->scales[s]);
    if (d == 0.0f) continue;  // keeps the search's levels
    for (int l = 0; l < 16; ++l) L[16 * s + l] = int8_t(clamp_int(nearest_int(x[16 * s + l] / d), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int8_t* e = L + 128 * h + l;
      const int q1 = e[0], q2 = e[32], q3 = e[64], q4 = e[96];
      y->ql[64 * h + l] = uint8_t((q1 & 0xF) | (q3 & 0xF) << 4);
      y->ql[64 * h + l + 32] = uint8_t((q2 & 0xF) | (q4 & 0xF) << 4);
      y->qh[32 * h + l] = uint8_t((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
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
