#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_internal.h"

namespace cera::cpu {

void rms_norm_row(const float* x, const float* w, float eps, float* out, int64_t n) {
  // Accumulate in double: the row sums of 1-4k squares are where float error would show first.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  static const bool simd = active_isa() == Isa::Avx512 && detail::have_avx512_ops();
  if (simd) return detail::silu_mul_avx512(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

}  // namespace cera::cpu
