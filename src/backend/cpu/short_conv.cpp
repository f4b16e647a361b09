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
    // Channels are independent: split them across threads. Within a chunk, walk tokens outermost so
    // every access is a contiguous run of channels (the channel-outer loop strided across 12 KB
    // rows: 8% of a Q4_0 pp512). Per (token, channel) the sum order is unchanged.
    pool.parallel_for(D, 64, [&](int64_t c0, int64_t c1) {
      const int64_t n = c1 - c0;
      std::vector<float> hist(size_t(S + s.n_tokens) * size_t(n));  // [S + T][n]: B ⊙ X over time
      for (int32_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < n; ++c) hist[size_t(j) * n + c] = st[size_t(j) * D + c0 + c];
      for (int32_t t = 0; t < s.n_tokens; ++t) {
        const float* row = bcx.row(s.first_token + t);
        float* h = hist.data() + size_t(S + t) * n;
        for (int64_t c = 0; c < n; ++c) h[c] = row[c0 + c] * row[2 * D + c0 + c];  // B ⊙ X
      }
      for (int32_t t = 0; t < s.n_tokens; ++t) {
        const float* gate = bcx.row(s.first_token + t) + D + c0;  // C
        float* o = out.row(s.first_token + t) + c0;
        for (int64_t c = 0; c < n; ++c) {
          const float* wc = kernel + (c0 + c) * L;
          float acc = 0.f;
          for (int32_t k = 0; k < L; ++k) acc += wc[k] * hist[size_t(t + k) * n + c];
          o[c] = gate[c] * acc;  // C ⊙ conv
        }
      }
      for (int32_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < n; ++c) st[size_t(j) * D + c0 + c] = hist[size_t(s.n_tokens + j) * n + c];
    });
  }
}

}  // namespace cera::cpu
