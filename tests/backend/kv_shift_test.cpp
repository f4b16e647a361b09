// A context shift moves K/V down by `delta` positions; K must then equal RoPE at the new position.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"

namespace cera::cpu {
namespace {

void rope_at(float* head, const RopeParams& rope, int32_t position) {
  std::vector<double> inv(size_t(rope.n_rot / 2));
  std::vector<float> c(inv.size()), s(inv.size());
  rope_inv_freq(rope, inv.data());
  rope_cos_sin(inv.data(), rope.n_rot, position, c.data(), s.data());
  rope_apply(head, c.data(), s.data(), rope.n_rot, rope.neox);
}

class KvShift : public ::testing::TestWithParam<bool> {};  // NEOX or NORMAL pairing

TEST_P(KvShift, KeysEqualRopeAtTheirNewPositionAndValuesMove) {
  const int32_t bs = 4, n_head_kv = 2, d = 8, kv_dim = n_head_kv * d, n_pos = 23;
  const std::vector<int32_t> blocks = {5, 1, 3, 0, 2, 4};  // deliberately not in order
  std::vector<float> memory(size_t(6) * 2 * bs * kv_dim);
  KvLayerView kv{memory.data(), bs, kv_dim, d};
  RopeParams rope;
  rope.n_rot = d;
  rope.neox = GetParam();
  rope.freq_base = 10000.f;

  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<std::vector<float>> raw_k(n_pos, std::vector<float>(kv_dim)), raw_v = raw_k;
  for (int32_t p = 0; p < n_pos; ++p) {
    for (auto& x : raw_k[p]) x = dist(rng);
    for (auto& x : raw_v[p]) x = dist(rng);
    for (int32_t h = 0; h < n_head_kv; ++h) {
      float* k = kv.k(blocks[p / bs], p % bs, h);
      std::copy_n(raw_k[p].begin() + h * d, d, k);
      rope_at(k, rope, p);
      std::copy_n(raw_v[p].begin() + h * d, d, kv.v(blocks[p / bs], p % bs, h));
    }
  }
  const int32_t n_keep = 3, delta = 7;
  shift_kv(kv, blocks, n_keep + delta, n_pos - n_keep - delta, delta, &rope);

  for (int32_t p = 0; p < n_pos - delta; ++p) {
    const int32_t source = p < n_keep ? p : p + delta;  // the token now at p
    std::vector<float> expect = raw_k[source];
    for (int32_t h = 0; h < n_head_kv; ++h) rope_at(expect.data() + h * d, rope, p);
    for (int32_t i = 0; i < kv_dim; ++i) {
      const float k = kv.k(blocks[p / bs], p % bs, i / d)[i % d], v = kv.v(blocks[p / bs], p % bs, i / d)[i % d];
      EXPECT_NEAR(k, expect[i], 2e-5f) << "position " << p << " elem " << i;
      EXPECT_EQ(v, raw_v[source][i]) << "position " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairing, KvShift, ::testing::Values(true, false));

}  // namespace
}  // namespace cera::cpu
