// LFM2 gated short convolution (MODELS.md §3.5) for all sequences of a step: per channel, a causal
// depthwise conv of B⊙X over [state (L-1 values), new tokens], gated by C, state updated in place.
#include <algorithm>
#include <vector>

#include "backend/cpu/ops.h"

namespace cera::cpu {

void short_conv(ThreadPool& pool, std::span<const StepSequence> seqs, const Tensor& bcx, const Tensor& w,
                float* state, Tensor out) {
  const int64_t D = out.cols;
  const int32_t L = int32_t(w.cols);
  const int32_t S = L - 1;  // state length
  const float* kernel = w.f32();  // [D][L]

  for (const auto& s : seqs) {
    float* st = state + size_t(s.conv_slot) * S * D;  // [S][D], oldest first
    // Channels are independent: split them across threads.
    pool.parallel_for(D, 64, [&](int64_t c0, int64_t c1) {
      std::vector<float> window(size_t(S) + s.n_tokens);
      for (int64_t c = c0; c < c1; ++c) {
        for (int32_t j = 0; j < S; ++j) window[j] = st[size_t(j) * D + c];
        for (int32_t t = 0; t < s.n_tokens; ++t) {
          const float* row = bcx.row(s.first_token + t);
          window[S + t] = row[c] * row[2 * D + c];  // B ⊙ X
        }
        const float* wc = kernel + c * L;
        for (int32_t t = 0; t < s.n_tokens; ++t) {
          float acc = 0.f;
          for (int32_t k = 0; k < L; ++k) acc += wc[k] * window[t + k];
          out.row(s.first_token + t)[c] = bcx.row(s.first_token + t)[D + c] * acc;  // C ⊙ conv
        }
        for (int32_t j = 0; j < S; ++j) st[size_t(j) * D + c] = window[s.n_tokens + j];
      }
    });
  }
}

}  // namespace cera::cpu
