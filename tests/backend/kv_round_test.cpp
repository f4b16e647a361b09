// The CPU backend's f16-rounded KV store (CpuBackendOptions::round_kv_to_f16), the reference an f16
// KV cache on the GPU is held to: stored K and V must be exactly the nearest f16 values, after a
// context shift's rotation too; without the option nothing is rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "common/fp16.h"

namespace cera {
namespace {

float nearest_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// One token attending to itself: its output is its value row as the cache holds it.
std::vector<float> one_token_output(bool round, const std::vector<float>& v_row) {
  CpuBackendOptions o;
  o.n_threads = 1;
  o.round_kv_to_f16 = round;
  auto be = make_cpu_backend(o);
  const int32_t hd = int32_t(v_row.size());
  StateLayout L;
  L.n_attention_layers = 1;
  L.kv_dim = hd;
  L.kv_block_size = 4;
  L.n_kv_blocks = 1;
  be->configure_state(L);
  Tensor q = be->alloc(1, hd), k = be->alloc(1, hd), v = be->alloc(1, hd), out = be->alloc(1, hd);
  for (int32_t i = 0; i < hd; ++i) q.row(0)[i] = k.row(0)[i] = 0.25f, v.row(0)[i] = v_row[size_t(i)];
  const std::vector<int32_t> blocks = {0};
  const std::vector<int32_t> tokens = {1}, positions = {0}, out_rows = {0};
  StepSequence s;
  s.first_token = 0;
  s.n_tokens = 1;
  s.n_past = 0;
  s.kv_blocks = blocks;
  const std::vector<StepSequence> seqs = {s};
  be->set_step({tokens, positions, seqs, out_rows});
  be->attention(0, q, k, v, out, AttentionParams{1, 1, hd, 1.f});
  std::vector<float> r(static_cast<size_t>(hd));
  be->read(out, r.data());
  return r;
}

TEST(KvRoundToF16, StoredValuesAreTheNearestF16) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> v(64);
  for (auto& x : v) x = dist(rng);
  v[0] = 1.f + 1.f / 4096;  // a tie between two f16 values: to the even one, 1.0
  const std::vector<float> rounded = one_token_output(true, v), plain = one_token_output(false, v);
  int changed = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(rounded[i], nearest_f16(v[i])) << i;
    EXPECT_EQ(plain[i], v[i]) << i;
    changed += rounded[i] != v[i];
  }
  EXPECT_EQ(rounded[0], 1.f);
  EXPECT_GT(changed, 50) << "random values are almost never f16 values already";
}

TEST(KvRoundToF16, ShiftedKeysAreRoundedAfterTheirRotation) {
  const int32_t bs = 4, d = 16, n_pos = 10, delta = 3, keep = 2;
  const std::vector<int32_t> blocks = {2, 0, 1};
  std::vector<float> memory(size_t(3) * 2 * bs * d);
  cpu::KvLayerView kv{memory.data(), bs, d, d, true};  // one KV head
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (auto& x : memory) x = nearest_f16(dist(rng));  // as an f16 cache holds them
  RopeParams rope;
  rope.n_rot = d;
  rope.freq_base = 10000.f;
  std::vector<float> expect_k;  // the moved keys rotated in f32, before rounding
  for (int32_t p = keep + delta; p < n_pos; ++p) {
    std::vector<float> k(kv.k(blocks[size_t(p / bs)], p % bs, 0), kv.k(blocks[size_t(p / bs)], p % bs, 0) + d);
    std::vector<double> inv(size_t(d / 2));
    std::vector<float> c(inv.size()), s(inv.size());
    cpu::rope_inv_freq(rope, inv.data());
    cpu::rope_cos_sin(inv.data(), d, -delta, c.data(), s.data());
    cpu::rope_apply(k.data(), c.data(), s.data(), d, rope.neox);
    expect_k.insert(expect_k.end(), k.begin(), k.end());
  }
  cpu::shift_kv(kv, blocks, keep + delta, n_pos - keep - delta, delta, &rope);
  for (int32_t p = keep; p < n_pos - delta; ++p)
    for (int32_t i = 0; i < d; ++i) {
      const float x = kv.k(blocks[size_t(p / bs)], p % bs, 0)[i];
      EXPECT_EQ(x, nearest_f16(expect_k[size_t((p - keep) * d + i)])) << "position " << p << " elem " << i;
    }
}

}  // namespace
}  // namespace cera
