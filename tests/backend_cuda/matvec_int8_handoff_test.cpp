// The int8 hand-off between two decode products (cuda::MatvecFusion::Int8X): a Q4_0 SwiGLU or
// accumulating product also writes its output row as int8 groups of 8 (the writer), and a Q4_0
// product reads its x row from such groups instead of rounding an f32 row itself (the reader).
//
// Writer: the groups must be the writer's own f32 outputs (times the next norm's weights, one f32
// product, for an accumulating writer) rounded as quant_kernels.h specifies (per 8 elements
// d = max|v|/127 in f32, id = 1/d in f32, q = v·id rounded once to nearest even; the host takes
// v·id exactly in double, then rint), bit for bit, in lane order (g0, g2, g1, g3); an accumulating
// writer's Σv² per group as its butterfly adds them (((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) in f32).
//
// Reader: against the exact product v = Σ_b dw_b Σ_g d_g Σ_j (level_j − 8)·q_j in double (the
// reference weights dw·(level − 8) are exact in f32). The kernel adds per half block
// fma(float(S0), d0, f32(float(S1)·d1)) times dw with one fma: three roundings of a term bounded
// by |dw|·(|d0·S0| + |d1·S1|), then ≤ n_tiles fmas per lane, a 5-level lane tree and ≤ 8 warps in
// a row; bound (3 + n_tiles + 15)·2^-24·Σ|dw|·(|d0·S0| + |d1·S1|). One wrong group, level or scale
// moves a k = 8192 row by ~2^-10 of that sum, far past the bound. With a norm the sum is
// multiplied by rsqrtf(Σssq/k + eps) (≤ 2 ulp; the test's ssq are m/64, |m| < 64, so their sum is
// exact in f32 in any order) and rounded once more: 8·2^-24·|v| on top.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "cera/error.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

using Out = cuda::MatvecFusion::Out;
using test::DevBuf;

// The Int8X slot (8 bytes of levels, one scale) of element group g: lane order within each block
// of four groups.
int64_t slot_of_group(int64_t g) { return (g >> 2) * 4 + (g & 1) * 2 + ((g >> 1) & 1); }

// Rounds n elements into Int8X as the writer specifies (q: n bytes, d: n / 8 scales, lane order).
void round_groups(const float* v, int64_t n, std::vector<int8_t>& q, std::vector<float>& d) {
  q.assign(size_t(n), 0);
  d.assign(size_t(n / 8), 0.f);
  for (int64_t g = 0; g < n / 8; ++g) {
    float amax = 0.f;
    for (int j = 0; j < 8; ++j) amax = std::fmax(amax, std::fabs(v[8 * g + j]));
    const float dg = amax / 127.0f;
    const float id = dg != 0.0f ? 1.0f / dg : 0.0f;
    const int64_t s = slot_of_group(g);
    d[size_t(s)] = dg;
    for (int j = 0; j < 8; ++j) q[size_t(8 * s + j)] = int8_t(std::nearbyint(double(v[8 * g + j]) * double(id)));
  }
}

// Each group's Σv² as the accumulating writer's butterfly adds them (lane order).
std::vector<float> group_ssq(const float* v, int64_t n) {
  std::vector<float> out(size_t(n / 8));
  for (int64_t g = 0; g < n / 8; ++g) {
    float s[8];
    for (int j = 0; j < 8; ++j) s[j] = v[8 * g + j] * v[8 * g + j];
    for (int o = 1; o < 8; o <<= 1) {
      float t[8];
      for (int j = 0; j < 8; ++j) t[j] = s[j] + s[j ^ o];
      std::copy(t, t + 8, s);
    }
    out[size_t(slot_of_group(g))] = s[0];
  }
  return out;
}

struct Handoff {
  DevBuf q, d, ssq;
  explicit Handoff(int64_t n) : q(size_t(n)), d(sizeof(float) * size_t(n / 8)), ssq(sizeof(float) * size_t(n / 8)) {}
  cuda::MatvecFusion::Int8X view(bool with_ssq = false) const {
    return {q.as<int8_t>(), d.as<float>(), with_ssq ? ssq.as<float>() : nullptr};
  }
};

// Compares the device's groups (and sums of squares) with what the host rounds from `v`.
void expect_groups(const Handoff& h, const float* v, int64_t n, const std::vector<float>* want_ssq) {
  std::vector<float> d(static_cast<size_t>(n / 8)), ssq(static_cast<size_t>(n / 8));
  std::vector<int8_t> q(static_cast<size_t>(n));
  CERA_CUDA_OK(cudaMemcpy(q.data(), h.q.p, h.q.bytes, cudaMemcpyDeviceToHost));
  CERA_CUDA_OK(cudaMemcpy(d.data(), h.d.p, h.d.bytes, cudaMemcpyDeviceToHost));
  CERA_CUDA_OK(cudaMemcpy(ssq.data(), h.ssq.p, h.ssq.bytes, cudaMemcpyDeviceToHost));
  std::vector<int8_t> want_q;
  std::vector<float> want_d;
  round_groups(v, n, want_q, want_d);
  for (int64_t s = 0; s < n / 8; ++s) {
    ASSERT_EQ(std::memcmp(&d[size_t(s)], &want_d[size_t(s)], 4), 0)
        << "scale slot " << s << ": got " << d[size_t(s)] << " want " << want_d[size_t(s)];
    if (want_ssq)
      ASSERT_EQ(std::memcmp(&ssq[size_t(s)], &(*want_ssq)[size_t(s)], 4), 0)
          << "Σx² slot " << s << ": got " << ssq[size_t(s)] << " want " << (*want_ssq)[size_t(s)];
    for (int j = 0; j < 8; ++j)
      ASSERT_EQ(q[size_t(8 * s + j)], want_q[size_t(8 * s + j)]) << "slot " << s << " element " << j;
  }
}

// Writer: a Q4_0 SwiGLU product of 2F rows (norm folded or not) writes y and its groups.
void check_writer(int64_t F, int64_t k, bool norm, uint32_t seed) {
  SCOPED_TRACE("F=" + std::to_string(F) + " k=" + std::to_string(k) + (norm ? " +norm" : ""));
  const test::RandomWeights w = test::random_weights(GgmlType::Q4_0, 2 * F, k, 0, seed, {3, false, 0x5A});
  const std::vector<float> x = test::random_floats(size_t(k), seed + 1, -2.f, 2.f);
  const std::vector<float> nw = test::random_floats(size_t(k), seed + 2, 0.5f, 1.5f);
  DevBuf dw(w.bytes.size()), dx(4 * size_t(k)), dn(4 * size_t(k)), dy(4 * size_t(F)), dy0(4 * size_t(F));
  Handoff h(F);
  ASSERT_TRUE(dw.p && dx.p && dn.p && dy.p && dy0.p && h.q.p && h.d.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), 4 * size_t(k), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dn.p, nw.data(), 4 * size_t(k), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemset(h.q.p, 0x7F, h.q.bytes));  // poison: every level and scale must be written
  CERA_CUDA_OK(cudaMemset(h.d.p, 0xFF, h.d.bytes));

  cuda::MatvecFusion f;
  f.out = Out::SwiGLU;
  if (norm) f.norm_w = dn.as<float>(), f.norm_eps = 1e-5f;
  cuda::MatvecFusion plain = f;
  f.write_int8 = h.view();
  cuda::matvec(GgmlType::Q4_0, dw.p, 2 * F, k, w.row_bytes, dx.as<float>(), k, 1, dy.as<float>(), F, nullptr, f);
  cuda::matvec(GgmlType::Q4_0, dw.p, 2 * F, k, w.row_bytes, dx.as<float>(), k, 1, dy0.as<float>(), F, nullptr, plain);
  CERA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(static_cast<size_t>(F)), y0(static_cast<size_t>(F));
  CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));
  CERA_CUDA_OK(cudaMemcpy(y0.data(), dy0.p, dy0.bytes, cudaMemcpyDeviceToHost));

  // y: the SwiGLU row, within float rounding of the same product without the hand-off (which may
  // take another block shape, so another summation order; MatvecInt8's tests bound both exactly).
  double y_max = 0;
  for (float v : y0) y_max = std::fmax(y_max, std::fabs(double(v)));
  ASSERT_GT(y_max, 0.0);
  for (int64_t j = 0; j < F; ++j)
    ASSERT_NEAR(y[size_t(j)], y0[size_t(j)], 1e-5 * y_max) << "output " << j;
  expect_groups(h, y.data(), F, nullptr);  // y's own values rounded, bit for bit
}

TEST(MatvecInt8Handoff, WriterRoundsItsOwnOutputs) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);
  test::ScopedEnv handoff("CERA_CUDA_INT8_HANDOFF", nullptr);
  check_writer(32, 32, false, 11);
  check_writer(96, 64, true, 21);
  check_writer(1056, 1280, true, 31);  // 16-row blocks whatever the GPU's size
  check_writer(8192, 2048, true, 41);  // LFM2-1.2B's and Llama-3.2-1B's [gate; up]
}

// Writer: a Q4_0 product of n rows accumulating into y (the residual stream) writes norm_w ⊙ y_new
// and each group's Σy_new² for the next product's norm.
void check_residual_writer(int64_t n, int64_t k, uint32_t seed) {
  SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(k));
  const test::RandomWeights w = test::random_weights(GgmlType::Q4_0, n, k, 0, seed, {3, false, 0x5A});
  const std::vector<float> x = test::random_floats(size_t(k), seed + 1, -2.f, 2.f);
  const std::vector<float> y_in = test::random_floats(size_t(n), seed + 2, -3.f, 3.f);
  const std::vector<float> nw = test::random_floats(size_t(n), seed + 3, 0.5f, 1.5f);
  DevBuf dw(w.bytes.size()), dx(4 * size_t(k)), dn(4 * size_t(n)), dy(4 * size_t(n)), dy0(4 * size_t(n));
  Handoff h(n);
  ASSERT_TRUE(dw.p && dx.p && dn.p && dy.p && dy0.p && h.q.p && h.d.p && h.ssq.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), 4 * size_t(k), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dn.p, nw.data(), 4 * size_t(n), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dy.p, y_in.data(), 4 * size_t(n), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dy0.p, y_in.data(), 4 * size_t(n), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemset(h.q.p, 0x7F, h.q.bytes));
  CERA_CUDA_OK(cudaMemset(h.d.p, 0xFF, h.d.bytes));
  CERA_CUDA_OK(cudaMemset(h.ssq.p, 0xFF, h.ssq.bytes));

  cuda::MatvecFusion f;
  f.out = Out::Accumulate;
  f.scale = 0.5f;
  cuda::MatvecFusion plain = f;
  f.write_int8 = h.view(true);
  f.write_norm_w = dn.as<float>();
  cuda::matvec(GgmlType::Q4_0, dw.p, n, k, w.row_bytes, dx.as<float>(), k, 1, dy.as<float>(), n, nullptr, f);
  cuda::matvec(GgmlType::Q4_0, dw.p, n, k, w.row_bytes, dx.as<float>(), k, 1, dy0.as<float>(), n, nullptr, plain);
  CERA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(static_cast<size_t>(n)), y0(static_cast<size_t>(n));
  CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));
  CERA_CUDA_OK(cudaMemcpy(y0.data(), dy0.p, dy0.bytes, cudaMemcpyDeviceToHost));
  double y_max = 0;
  for (float v : y0) y_max = std::fmax(y_max, std::fabs(double(v)));
  for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(y[size_t(j)], y0[size_t(j)], 1e-5 * y_max) << "output " << j;
  std::vector<float> z(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) z[size_t(j)] = nw[size_t(j)] * y[size_t(j)];
  const std::vector<float> ssq = group_ssq(y.data(), n);
  expect_groups(h, z.data(), n, &ssq);
}

TEST(MatvecInt8Handoff, ResidualWriterRoundsNormedOutputs) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);
  test::ScopedEnv handoff("CERA_CUDA_INT8_HANDOFF", nullptr);
  check_residual_writer(96, 64, 51);     // 8-row blocks where the plain product takes 4
  check_residual_writer(2048, 2048, 61); // LFM2-1.2B's and Llama-3.2-1B's output projections
  check_residual_writer(2048, 8192, 71); // and their down products
}

// Reader: Store and Accumulate from random groups (one of them all zero, scale 0).
void check_reader(int64_t n_rows, int64_t k, Out mode, bool norm, uint32_t seed) {
  SCOPED_TRACE(std::to_string(n_rows) + "x" + std::to_string(k) + (mode == Out::Store ? " Store" : " Accumulate") +
               (norm ? " +norm" : ""));
  const test::RandomWeights w = test::random_weights(GgmlType::Q4_0, n_rows, k, 16, seed, {3, false, 0x5A});
  std::mt19937 rng(seed + 1);
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> d(static_cast<size_t>(k / 8));
  for (auto& v : q) v = int8_t(int(rng() % 255) - 127);
  std::uniform_real_distribution<float> ud(0.001f, 0.05f);
  for (auto& v : d) v = ud(rng);
  d[size_t(slot_of_group(k / 8 - 1))] = 0.f;  // a group of zeros rounds to scale 0 and levels 0
  for (int j = 0; j < 8; ++j) q[size_t(8 * slot_of_group(k / 8 - 1) + j)] = 0;
  std::vector<float> ssq(static_cast<size_t>(k / 8));  // m/64, |m| < 64: their sum is exact in f32
  for (auto& v : ssq) v = float(int(rng() % 63) + 1) / 64.0f;
  const float eps = 1e-5f;
  const float scale = -0.75f;
  const std::vector<float> y_in = test::random_floats(size_t(n_rows), seed + 2, -3.f, 3.f);

  DevBuf dw(w.bytes.size()), dy(4 * size_t(n_rows)), dx(4 * size_t(k));
  Handoff h(k);
  ASSERT_TRUE(dw.p && dy.p && dx.p && h.q.p && h.d.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(h.q.p, q.data(), h.q.bytes, cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(h.d.p, d.data(), h.d.bytes, cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(h.ssq.p, ssq.data(), h.ssq.bytes, cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemset(dx.p, 0xFF, dx.bytes));  // neither the f32 x nor the norm weights are read
  if (mode == Out::Accumulate)
    CERA_CUDA_OK(cudaMemcpy(dy.p, y_in.data(), dy.bytes, cudaMemcpyHostToDevice));
  else
    CERA_CUDA_OK(cudaMemset(dy.p, 0xFF, dy.bytes));

  cuda::MatvecFusion f;
  f.out = mode;
  f.scale = mode == Out::Accumulate ? scale : 1.f;
  f.read_int8 = h.view(norm);
  if (norm) f.norm_w = dx.as<float>(), f.norm_eps = eps;  // NaN weights: the groups already hold norm_w ⊙ x
  cuda::matvec(GgmlType::Q4_0, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), k, 1, dy.as<float>(), n_rows, nullptr,
               f);
  CERA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(static_cast<size_t>(n_rows));
  CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));

  const int64_t n_tiles = (k + 511) / 512;
  int bad = 0;
  for (int64_t r = 0; r < n_rows && bad < 5; ++r) {
    const float* wr = &w.ref[size_t(r * k)];  // dw·(level − 8), exact
    double v = 0, mag = 0;
    for (int64_t b = 0; b < k / 32; ++b)
      for (int h2 = 0; h2 < 2; ++h2) {  // a lane's half: groups h2 and 2 + h2 of the block
        double half_mag = 0;
        for (int gi : {h2, 2 + h2}) {
          const int64_t g = 4 * b + gi, s = slot_of_group(g);
          double sum = 0;  // dw · d_g · Σ (level − 8)·q
          for (int j = 0; j < 8; ++j) sum += double(wr[8 * g + j]) * double(q[size_t(8 * s + j)]);
          sum *= double(d[size_t(s)]);
          v += sum;
          half_mag += std::fabs(sum);
        }
        mag += half_mag;
      }
    double want = v, bound = double(3 + n_tiles + 15) * std::ldexp(1.0, -24) * mag;
    if (norm) {
      double total = 0;
      for (float p : ssq) total += p;
      const double inv = 1.0 / std::sqrt(total / double(k) + double(eps));
      want = v * inv;
      bound = bound * inv + 8 * std::ldexp(std::fabs(want), -24);
    }
    if (mode == Out::Accumulate) {
      want = double(y_in[size_t(r)]) + double(scale) * want;
      bound = std::fabs(double(scale)) * bound + 1.01 * std::ldexp(std::fabs(want), -24);
    }
    const double err = std::fabs(double(y[size_t(r)]) - want);
    if (!(err <= bound + 1e-30)) {  // NaN fails too
      ++bad;
      ADD_FAILURE() << "row " << r << ": got " << y[size_t(r)] << " want " << want << " (|error| " << err
                    << ", bound " << bound << ")";
    }
  }
}

TEST(MatvecInt8Handoff, ReaderMatchesReference) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);
  test::ScopedEnv handoff("CERA_CUDA_INT8_HANDOFF", nullptr);
  uint32_t seed = 100;
  for (Out mode : {Out::Store, Out::Accumulate})
    for (bool norm : {false, true}) {
      check_reader(7, 32, mode, norm, seed++);        // one block, fewer rows than a block
      check_reader(301, 1280, mode, norm, seed++);    // k not a multiple of the 512-element tile
      check_reader(2053, 8192, mode, norm, seed++);   // LFM2-1.2B's down product, a tail row group
      check_reader(16001, 2048, mode, norm, seed++);  // wide enough for 16-row blocks on an H100 / H200
    }
}

// What the hand-off refuses, with an error instead of a wrong product.
TEST(MatvecInt8Handoff, RefusesWhatItCannotDo) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);
  test::ScopedEnv handoff("CERA_CUDA_INT8_HANDOFF", nullptr);
  EXPECT_TRUE(cuda::matvec_int8_handoff(GgmlType::Q4_0, GgmlType::Q4_0, 8192));
  EXPECT_FALSE(cuda::matvec_int8_handoff(GgmlType::Q4_0, GgmlType::Q8_0, 8192));
  EXPECT_FALSE(cuda::matvec_int8_handoff(GgmlType::Q4_0, GgmlType::Q4_0, 8200));  // not whole 32-blocks
  {
    test::ScopedEnv off("CERA_CUDA_INT8_HANDOFF", "0");
    EXPECT_FALSE(cuda::matvec_int8_handoff(GgmlType::Q4_0, GgmlType::Q4_0, 8192));
  }
  const int64_t k = 64, n = 64;
  const test::RandomWeights w = test::random_weights(GgmlType::Q4_0, n, k, 0, 7, {3, false, 0x5A});
  const test::RandomWeights w8 = test::random_weights(GgmlType::Q8_0, n, k, 0, 7, {3, false, 0x5A});
  DevBuf dw(w.bytes.size()), dw8(w8.bytes.size()), dx(4 * 2 * size_t(k)), dy(4 * 2 * size_t(n));
  Handoff h(std::max(n, k));
  ASSERT_TRUE(dw.p && dw8.p && dx.p && dy.p && h.q.p && h.d.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dw8.p, w8.bytes.data(), w8.bytes.size(), cudaMemcpyHostToDevice));
  auto run = [&](GgmlType type, const DevBuf& weights, size_t row_bytes, int nx, const cuda::MatvecFusion& f) {
    cuda::matvec(type, weights.p, n, k, row_bytes, dx.as<float>(), k, nx, dy.as<float>(), n, nullptr, f);
  };
  cuda::MatvecFusion read;
  read.read_int8 = h.view();
  EXPECT_THROW(run(GgmlType::Q8_0, dw8, w8.row_bytes, 1, read), Error);  // Q4_0 only
  EXPECT_THROW(run(GgmlType::Q4_0, dw, w.row_bytes, 2, read), Error);    // one x row
  cuda::MatvecFusion read_norm = read;
  read_norm.norm_w = dx.as<float>();
  EXPECT_THROW(run(GgmlType::Q4_0, dw, w.row_bytes, 1, read_norm), Error);  // a norm needs the groups' Σx²
  cuda::MatvecFusion acc_write;
  acc_write.out = Out::Accumulate;
  acc_write.write_int8 = h.view(true);
  EXPECT_THROW(run(GgmlType::Q4_0, dw, w.row_bytes, 1, acc_write), Error);  // without the next norm's weights
  cuda::MatvecFusion write;
  write.write_int8 = h.view();
  EXPECT_THROW(run(GgmlType::Q4_0, dw, w.row_bytes, 1, write), Error);  // the writer is a SwiGLU product
  {
    test::MatvecInt8Scope off(false);
    EXPECT_THROW(run(GgmlType::Q4_0, dw, w.row_bytes, 1, read), Error);  // needs int8 activations
  }
  CERA_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace cera
