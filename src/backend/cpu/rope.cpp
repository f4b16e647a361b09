#include <cmath>

#include "backend/cpu/ops.h"

namespace cera::cpu {

void rope_inv_freq(const RopeParams& rope, double* inv_freq) {
  for (int32_t i = 0; i < rope.n_rot / 2; ++i) {
    // Double precision: float angles at positions in the thousands lose the digits parity needs
    // (bf16/f32-rounded frequencies are a classic source of 1e-3 logit errors).
    inv_freq[i] = std::pow(double(rope.freq_base), -2.0 * i / double(rope.n_rot)) * rope.freq_scale;
    if (rope.freq_factors) inv_freq[i] /= rope.freq_factors[i];
  }
}

void rope_cos_sin(const double* inv_freq, int32_t n_rot, int32_t position, float* cos_out, float* sin_out) {
  for (int32_t i = 0; i < n_rot / 2; ++i) {
    const double theta = double(position) * inv_freq[i];
    cos_out[i] = float(std::cos(theta));
    sin_out[i] = float(std::sin(theta));
  }
}

void rope_apply(float* v, const float* cos_t, const float* sin_t, int32_t n_rot, bool neox) {
  const int32_t half = n_rot / 2;
  for (int32_t i = 0; i < half; ++i) {
    const int32_t ia = neox ? i : 2 * i;
    const int32_t ib = neox ? i + half : 2 * i + 1;
    const float a = v[ia], b = v[ib];
    v[ia] = a * cos_t[i] - b * sin_t[i];
    v[ib] = a * sin_t[i] + b * cos_t[i];
  }
}

}  // namespace cera::cpu
