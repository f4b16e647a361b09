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
//
// Runs S sub-blocks of N elements side by side ("lanes"), inputs transposed: xt[i*S + s] is
// element i of sub-block s. Each lane performs exactly the single-sub-block operations in the same
// order (its sums still accumulate element 0, 1, 2, ...), so the result is bit-identical; but the S
// independent float add chains overlap instead of each waiting out the adder's latency, and the
// inner loops over lanes vectorize. Outputs: Lt (transposed like xt), scale[s], neg_min[s].
template <int S, int N, int nmax, bool use_mad>
void fit_scale_min_lanes(const float* xt, const float* wt, float rmin, float rdelta, int nstep, uint8_t* Lt,
                         float* scale_out, float* neg_min_out) {
  float lo[S], hi[S], sum_w[S], sum_x[S];
  for (int s = 0; s < S; ++s) {
    lo[s] = hi[s] = xt[s];
    sum_w[s] = wt[s];
    sum_x[s] = sum_w[s] * xt[s];
  }
  for (int i = 1; i < N; ++i)
    for (int s = 0; s < S; ++s) {
      const float x = xt[i * S + s], w = wt[i * S + s];
      lo[s] = x < lo[s] ? x : lo[s];
      hi[s] = x > hi[s] ? x : hi[s];
      sum_w[s] += w;
      sum_x[s] += w * x;
    }
  bool flat[S];  // all elements equal (after including 0): nothing to fit
  float offset[S], scale[S], best_err[S], iscale[S];
  for (int s = 0; s < S; ++s) {
    if (lo[s] > 0) lo[s] = 0;  // the offset can only shift down
    flat[s] = hi[s] == lo[s];
    offset[s] = lo[s];
    iscale[s] = flat[s] ? 0.0f : float(nmax) / (hi[s] - lo[s]);
    scale[s] = flat[s] ? 0.0f : 1.0f / iscale[s];
  }
  // The levels of the candidate with scale sc and offset of, and its weighted error.
  float lev[N * S];
  auto round_levels = [&](const float* isc) {
    for (int i = 0; i < N; ++i)
      for (int s = 0; s < S; ++s)
        lev[i * S + s] = float(clamp_int(nearest_int(isc[s] * (xt[i * S + s] - offset[s])), 0, nmax));
  };
  auto weighted_error = [&](const float* sc, const float* of, float* err) {
    for (int s = 0; s < S; ++s) err[s] = 0;
    for (int i = 0; i < N; ++i)
      for (int s = 0; s < S; ++s) {
        float diff = sc[s] * lev[i * S + s] + of[s] - xt[i * S + s];
        if constexpr (use_mad) diff = std::fabs(diff);
        else diff = diff * diff;
        err[s] += wt[i * S + s] * diff;
      }
  };
  round_levels(iscale);
  weighted_error(scale, offset, best_err);
  float best_lev[N * S];
  std::memcpy(best_lev, lev, sizeof(lev));

  for (int k = 0; k <= nstep; ++k) {
    for (int s = 0; s < S; ++s) iscale[s] = (rmin + rdelta * float(k) + float(nmax)) / (hi[s] - offset[s]);
    round_levels(iscale);
    float sum_l[S] = {}, sum_l2[S] = {}, sum_xl[S] = {};
    for (int i = 0; i < N; ++i)
      for (int s = 0; s < S; ++s) {
        const float l = lev[i * S + s], wl = wt[i * S + s] * l;
        sum_l[s] += wl;
        sum_l2[s] += wl * l;
        sum_xl[s] += wl * xt[i * S + s];
      }
    float cand_scale[S], cand_offset[S], err[S];
    bool usable[S];
    for (int s = 0; s < S; ++s) {
      const float det = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s];
      usable[s] = !flat[s] && det > 0;
      float sc = usable[s] ? (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / det : 0.0f;
      float of = usable[s] ? (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / det : 0.0f;
      if (of > 0) {  // a positive offset is not representable: refit the scale alone
        of = 0;
        sc = sum_xl[s] / sum_l2[s];
      }
      cand_scale[s] = sc;
      cand_offset[s] = of;
    }
    weighted_error(cand_scale, cand_offset, err);
    bool any = false, won[S];
    for (int s = 0; s < S; ++s) {
      won[s] = usable[s] && err[s] < best_err[s];
      if (!won[s]) continue;
      any = true;
      best_err[s] = err[s];
      scale[s] = cand_scale[s];
      offset[s] = cand_offset[s];
    }
    if (any)
      for (int i = 0; i < N; ++i)
        for (int s = 0; s < S; ++s)
          if (won[s]) best_lev[i * S + s] = lev[i * S + s];
  }
  for (int s = 0; s < S; ++s) {
    scale_out[s] = flat[s] ? 0.0f : scale[s];
    neg_min_out[s] = -offset[s];
  }
  for (int i = 0; i < N * S; ++i) Lt[i] = flat[i % S] ? 0 : uint8_t(best_lev[i]);
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
// inverse scales -(nmax + 0.1k)/max for k = 0, then ±1..±9 in order -9..9, levels in
// [-nmax, nmax-1]; keeps the first candidate with the largest x²-weighted least-squares gain
// (Σ w·x·l)² / Σ w·l². Only the winner's levels matter, so they are rounded once at the end.
// All 16 sub-blocks of a super-block run side by side, transposed (xt[i*16 + s] = element i of
// sub-block s) — per lane the same operations in the same order as one sub-block alone.
// Lt gets levels + nmax (transposed), scale[s] the fitted scale (0 for an all-zero sub-block).
void fit_q6_lanes(const float* xt, int8_t* Lt, float* scale) {
  constexpr int S = 16, N = 16, nmax = 32;
  float amax[S] = {}, max[S] = {};  // signed element of largest magnitude, first one on ties
  for (int i = 0; i < N; ++i)
    for (int s = 0; s < S; ++s) {
      const float v = xt[i * S + s], av = std::fabs(v);
      const bool bigger = av > amax[s];
      amax[s] = bigger ? av : amax[s];
      max[s] = bigger ? v : max[s];
    }
  bool zero[S];
  for (int s = 0; s < S; ++s) {
    zero[s] = amax[s] < kGroupMaxEps;
    if (zero[s]) max[s] = 1.0f;  // any finite value; the lane's result is overwritten
  }
  float wt[N * S];
  for (int i = 0; i < N * S; ++i) wt[i] = xt[i] * xt[i];
  auto sums = [&](const float* isc, float* sumlx, float* suml2) {
    for (int s = 0; s < S; ++s) sumlx[s] = suml2[s] = 0;
    for (int i = 0; i < N; ++i)
      for (int s = 0; s < S; ++s) {
        const float x = xt[i * S + s], w = wt[i * S + s];
        const float l = float(clamp_int(nearest_int(isc[s] * x), -nmax, nmax - 1));
        sumlx[s] += w * x * l;
        suml2[s] += w * l * l;
      }
  };
  float iscale[S], best_iscale[S], sumlx[S], suml2[S], best[S];
  for (int s = 0; s < S; ++s) iscale[s] = best_iscale[s] = float(-nmax) / max[s];
  sums(iscale, sumlx, suml2);
  for (int s = 0; s < S; ++s) {
    scale[s] = suml2[s] != 0.0f ? sumlx[s] / suml2[s] : 0.0f;
    best[s] = scale[s] * sumlx[s];
  }
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    for (int s = 0; s < S; ++s) iscale[s] = -(float(nmax) + 0.1f * float(k)) / max[s];
    sums(iscale, sumlx, suml2);
    for (int s = 0; s < S; ++s)
      if (suml2[s] > 0 && sumlx[s] * sumlx[s] > best[s] * suml2[s]) {
        best_iscale[s] = iscale[s];
        scale[s] = sumlx[s] / suml2[s];
        best[s] = scale[s] * sumlx[s];
      }
  }
  for (int i = 0; i < N; ++i)
    for (int s = 0; s < S; ++s)
      Lt[i * S + s] =
          zero[s] ? 0 : int8_t(nmax + clamp_int(nearest_int(best_iscale[s] * xt[i * S + s]), -nmax, nmax - 1));
  for (int s = 0; s < S; ++s)
    if (zero[s]) scale[s] = 0.0f;
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
  // 16 sub-blocks of 16, fitted side by side with weights |x| and the absolute-error criterion.
  float xt[kQK_K], wt[kQK_K];
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < 16; ++l) {
      xt[l * 16 + s] = x[16 * s + l];
      wt[l * 16 + s] = std::fabs(x[16 * s + l]);
    }
  uint8_t Lt[kQK_K], L[kQK_K];
  float scales[16], mins[16];
  fit_scale_min_lanes<16, 16, 3, /*use_mad=*/true>(xt, wt, -0.5f, 0.1f, 15, Lt, scales, mins);
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < 16; ++l) L[16 * s + l] = Lt[l * 16 + s];
  float max_scale = 0, max_min = 0;  // scales and mins are both ≥ 0 here
  for (int s = 0; s < 16; ++s) {
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

template <int nmax>
void fit_k4_block(const float* x, float rmin, int nstep, K4Result* r) {
  // Weights |x| + rms of the sub-block favour the large elements without ignoring small ones.
  float xt[kQK_K], wt[kQK_K], sum_x2[8] = {}, av_x[8];
  for (int l = 0; l < 32; ++l)
    for (int s = 0; s < 8; ++s) {
      const float v = x[32 * s + l];
      xt[l * 8 + s] = v;
      sum_x2[s] += v * v;
    }
  for (int s = 0; s < 8; ++s) av_x[s] = std::sqrt(sum_x2[s] / 32.0f);
  for (int i = 0; i < kQK_K; ++i) wt[i] = av_x[i % 8] + std::fabs(xt[i]);
  uint8_t Lt[kQK_K];
  float scales[8], mins[8];
  fit_scale_min_lanes<8, 32, nmax, /*use_mad=*/false>(xt, wt, rmin, 0.1f, nstep, Lt, scales, mins);
  for (int s = 0; s < 8; ++s)
    for (int l = 0; l < 32; ++l) r->L[32 * s + l] = Lt[l * 8 + s];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
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
  fit_k4_block<15>(x, -1.0f, 20, &r);
  y->d = r.d;
  y->dmin = r.dmin;
  std::memcpy(y->scales, r.scales, 12);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) y->qs[32 * c + l] = uint8_t(r.L[64 * c + l] | r.L[64 * c + 32 + l] << 4);
}

void q5_k_block(const float* x, BlockQ5_K* y) {
  K4Result r;
  fit_k4_block<31>(x, -0.5f, 15, &r);
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
  float xt[kQK_K];
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < 16; ++l) xt[l * 16 + s] = x[16 * s + l];
  int8_t Lt[kQK_K], L[kQK_K];
  float scales[16];
  fit_q6_lanes(xt, Lt, scales);
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < 16; ++l) L[16 * s + l] = Lt[l * 16 + s];
  float max_abs = 0, max_scale = 0;
  for (int s = 0; s < 16; ++s) {
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
