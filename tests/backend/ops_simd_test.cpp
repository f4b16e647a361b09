// The AVX-512 attention row and SiLU·up against straightforward f64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops_internal.h"

namespace cera::cpu {
namespace {

bool simd_available() { return detected_isa() == Isa::Avx512 && detail::have_avx512_ops(); }

TEST(OpsSimd, SiluMulMatchesReference) {
  if (!simd_available()) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (int64_t n : {1, 15, 16, 17, 1000, 4608}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n)), out(static_cast<size_t>(n) + 1, -7.0f);
    for (auto& v : g) v = dist(rng);
    for (auto& v : u) v = dist(rng);
    g[0] = -120.0f;  // exp overflows: silu -> -0
    if (n > 1) g[1] = 95.0f;
    detail::silu_mul_avx512(g.data(), u.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
      EXPECT_NEAR(out[size_t(i)], want, 4e-7 * std::fabs(want) + 1e-30) << "n=" << n << " i=" << i;
    }
    EXPECT_EQ(out[size_t(n)], -7.0f) << "wrote past the end";
  }
}

// Runs of 1-4 q heads of one KV head: each head against a float64 reference, and bit for bit the
// same whatever run it is computed in (a key's loads are shared, not its arithmetic).
TEST(OpsSimd, AttentionRowsMatchReferenceWhateverTheRun) {
  if (!simd_available()) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(4);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int32_t kHeads = detail::kMaxAttentionHeads;
  for (int32_t head_dim : {64, 40, 128}) {
    const int32_t bs = 16, n_kv_heads = 2, kv_dim = n_kv_heads * head_dim, n_blocks = 6;
    std::vector<float> kv(size_t(n_blocks) * 2 * bs * kv_dim);
    for (auto& v : kv) v = 3.0f * dist(rng);
    const std::vector<int32_t> blocks = {4, 1, 5, 0, 2, 3};
    std::vector<float> q(size_t(kHeads) * size_t(head_dim));  // kHeads q heads of one KV head, one after another
    for (auto& v : q) v = dist(rng);
    for (int32_t n_keys : {1, 7, 16, 17, 90}) {
      for (int32_t kvh = 0; kvh < n_kv_heads; ++kvh) {
        const float scale = 1.0f / std::sqrt(float(head_dim));
        auto run = [&](int32_t h0, int32_t nh) {  // heads [h0, h0 + nh) as one run; one float past them
          std::vector<float> scores(size_t(nh) * size_t(n_keys)), out(size_t(nh) * size_t(head_dim) + 1, -7.0f);
          detail::attention_rows_avx512({q.data() + h0 * head_dim, kv.data(), blocks.data(), bs, kv_dim,
                                         kvh * bs * head_dim, head_dim, n_keys, scale, scores.data(), out.data(), nh});
          EXPECT_EQ(out.back(), -7.0f) << "wrote past the run";
          out.pop_back();
          return out;
        };
        auto at = [&](int32_t pos, bool v) {  // KvLayerView's layout: [K|V][KV head][slot][head_dim] a block
          return kv.data() + (size_t(blocks[size_t(pos / bs)]) * 2 + (v ? 1 : 0)) * bs * kv_dim +
                 (size_t(kvh) * bs + pos % bs) * head_dim;
        };
        const std::vector<float> all = run(0, kHeads);
        for (int32_t h = 0; h < kHeads; ++h) {
          const float* qh = q.data() + h * head_dim;
          std::vector<double> s(static_cast<size_t>(n_keys));
          double m = -1e300, l = 0;
          for (int32_t p = 0; p < n_keys; ++p) {
            double d = 0;
            for (int32_t i = 0; i < head_dim; ++i) d += double(qh[i]) * at(p, false)[i];
            s[size_t(p)] = d * scale;
            m = std::max(m, s[size_t(p)]);
          }
          for (auto& v : s) l += (v = std::exp(v - m));
          const std::vector<float> alone = run(h, 1);
          for (int32_t i = 0; i < head_dim; ++i) {
            double want = 0, mag = 0;
            for (int32_t p = 0; p < n_keys; ++p) {
              want += s[size_t(p)] * at(p, true)[i];
              mag += s[size_t(p)] * std::fabs(at(p, true)[i]);
            }
            const float got = all[size_t(h * head_dim + i)];
            EXPECT_NEAR(got, want / l, 2e-6 * mag / l) << "d=" << head_dim << " keys=" << n_keys << " head " << h;
            EXPECT_EQ(got, alone[size_t(i)]) << "d=" << head_dim << " keys=" << n_keys << " head " << h << " i=" << i;
          }
        }
        // Runs of 2 and 3 give each head the bits of the run of kHeads.
        for (int32_t nh : {2, 3}) {
          const std::vector<float> part = run(1, nh);
          for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], all[size_t(head_dim) + i]) << nh;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cera::cpu
