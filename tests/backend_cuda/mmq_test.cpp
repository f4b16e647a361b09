// cuda::mmq (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights × int8-rounded x on the int8
// tensor cores) against a
// double-precision host reference: the scalar dequantizer's weights (format/quant.h) and x
// rounded as the kernel specifies (int8_dot.cuh: per 32 elements d = max|x|/127 in f32, id = 1/d in
// f32, q = x·id rounded once to nearest even), so the int8 values and scales are the kernel's bit
// for bit and only the f32 summation differs.
//
// Bound. The exact result is v = Σ_b c_b · s_b over the weights' scale blocks b (Q4_0, Q8_0: 32 elements,
// c_b = dw_b · dx_b; Q6_K: 16, c_b = d · scale_b · dx_b, d · scale_b exact in f32) with s_b the exact
// integer sum of block b. The kernel rounds c_b once, adds s_b · c_b into a lane accumulator with
// one fma per block (at most n_b = k/32 per warp for Q4_0, Q5_0 and Q8_0, k/16 for Q6_K), adds 4 warps' sums in a
// row, multiplies by alpha and adds beta·y with an fma: at most n_b + 7 roundings on any path, so
//   |y_gpu − y| ≤ (n_b + 8) · 2^-24 · |alpha| · Σ_b |c_b · s_b| + 2^-23 · (|beta · y0| + |y|).
// Q4_1's, Q5_1's, Q4_K's and Q5_K's blocks add two terms each, scale·dx · Σ level·q and bias · (dx·Σq)
// (Q4_1, Q5_1: d and m; Q4_K, Q5_K: d·scale and −dmin·min; n_b = k/16 terms; both magnitudes in the
// sum). Q4_0's, Q5_0's and Q8_0's reference weights dw · level are exact in f32, the two-term types'
// scales and biases are decoded from the GGML bytes here; Q6_K's d · scale · (level − 32) are rounded once each, which adds
// 2^-24 · |alpha| · Σ_j |w_j · q_j · dx_j|.
// A wrong nibble, scale, x block, row or token moves a result by far more than that.
//
// Outputs are poisoned (0xFF bytes, NaN) where beta = 0, so an unwritten element fails, and the
// padding between y rows must still hold the poison afterwards.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/mmq.h"
#include "common/fp16.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

using test::DevBuf;

struct Case {
  GgmlType type;
  int64_t n_rows, k, n_x;
  bool x_f16;
  float alpha, beta;
};

std::string describe(const Case& c) {
  return std::string(ggml_type_name(c.type)) + " " + std::to_string(c.n_rows) + "x" + std::to_string(c.k) + " by " + std::to_string(c.n_x) + " rows of x" +
         (c.x_f16 ? " (f16)" : " (f32)") + " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta);
}

bool is_poison(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u == 0xFFFFFFFFu;
}

// One row of x as the kernel rounds it.
struct QuantX {
  std::vector<double> d;  // per 32 elements
  std::vector<int> q;
};
QuantX quantize_row(const float* x, int64_t k) {
  QuantX r;
  r.d.resize(size_t(k / 32));
  r.q.resize(size_t(k));
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    r.d[size_t(b)] = d;
    for (int j = 0; j < 32; ++j) r.q[size_t(32 * b + j)] = int(std::nearbyint(double(x[32 * b + j]) * double(id)));
  }
  return r;
}

void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const int64_t k = c.k, xs = k + 8, ys = c.n_rows + 3;  // strided rows; y padding must stay untouched
  // The types with minimums: rows shifted off zero, so minimums and scales both matter.
  const bool k_min = c.type == GgmlType::Q4_K || c.type == GgmlType::Q5_K;
  const bool block_min = c.type == GgmlType::Q4_1 || c.type == GgmlType::Q5_1;
  const bool two_terms = k_min || block_min;
  const test::RandomWeights w = test::random_weights(c.type, c.n_rows, k, 16, seed, {3, two_terms, 0x5A});
  std::mt19937 rng(seed + 1000);
  std::vector<float> x(size_t(c.n_x * xs), 0.0f);
  for (int64_t t = 0; t < c.n_x; ++t) {
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    const float mag = std::ldexp(1.0f, int(rng() % 7) - 3);  // rows of different magnitudes
    for (int64_t j = 0; j < k; ++j) {
      float v = ud(rng) * mag;
      if (j % 97 == 5) v *= 16.0f;  // an outlier now and then: blocks of different scales
      if (c.x_f16) v = f16_to_f32(f32_to_f16(v));  // what the kernel reads
      x[size_t(t * xs + j)] = v;
    }
  }
  std::vector<uint16_t> x16(x.size());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_f16(x[i]);
  std::vector<float> y0(size_t(c.n_x * ys));
  if (c.beta != 0.0f) {
    std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
    for (auto& v : y0) v = ud(rng);
    for (int64_t t = 0; t < c.n_x; ++t)
      for (int64_t j = c.n_rows; j < ys; ++j) std::memset(&y0[size_t(t * ys + j)], 0xFF, 4);
  } else {
    std::memset(y0.data(), 0xFF, y0.size() * 4);
  }

  DevBuf dw(w.bytes.size()), dx(x.size() * 4), dy(y0.size() * 4),
      scratch(cuda::mmq_scratch_bytes(c.n_x, k));
  ASSERT_TRUE(dw.p && dx.p && dy.p && scratch.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  if (c.x_f16)
    CERA_CUDA_OK(cudaMemcpy(dx.p, x16.data(), x16.size() * 2, cudaMemcpyHostToDevice));
  else
    CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dy.p, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemset(scratch.p, 0x77, scratch.bytes));  // junk: every byte read must be written first
  cuda::mmq(c.type, dw.p, c.n_rows, k, w.row_bytes, dx.p, c.x_f16, xs, c.n_x, dy.as<float>(), ys, c.alpha,
            c.beta, scratch.p, nullptr);
  CERA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(y0.size());
  CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));

  int bad = 0;
  for (int64_t t = 0; t < c.n_x && bad < 5; ++t) {
    const QuantX qx = quantize_row(&x[size_t(t * xs)], k);
    for (int64_t n = 0; n < ys && bad < 5; ++n) {
      const float got = y[size_t(t * ys + n)];
      if (n >= c.n_rows) {
        if (!is_poison(got)) ++bad, ADD_FAILURE() << "wrote y padding (" << t << ", " << n << ")";
        continue;
      }
      const int block = c.type == GgmlType::Q6_K ? 16 : 32;  // elements a weight scale covers
      const int64_t terms = two_terms || c.type == GgmlType::Q6_K ? k / 16 : k / 32;
      double v = 0, mag = 0, ref_err = 0;
      for (int64_t b = 0; two_terms && b < k / 32; ++b) {
        const test::SubBlockQ4K sub =
            k_min ? test::k_sub_block(c.type, w.stored_row(n) + size_t(b / 8) * ggml_traits(c.type).block_bytes, int(b % 8))
                  : test::min_block(c.type, w.stored_row(n), b);
        double s1 = 0, s2 = 0;  // Σ level·q, Σ q
        for (int j = 0; j < 32; ++j) s1 += double(sub.level[j]) * qx.q[size_t(32 * b + j)], s2 += qx.q[size_t(32 * b + j)];
        const double dx = qx.d[size_t(b)];
        v += (sub.scale * s1 + sub.bias * s2) * dx;
        mag += (std::fabs(sub.scale * s1) + std::fabs(sub.bias * s2)) * dx;
      }
      for (int64_t b = 0; !two_terms && b < k / block; ++b) {
        double s = 0;  // Σ w·q over the block, exact
        const double dx = qx.d[size_t(b * block / 32)];
        for (int j = 0; j < block; ++j) {
          const double wq = double(w.ref[size_t(n * k + block * b + j)]) * qx.q[size_t(block * b + j)];
          s += wq;
          ref_err += std::fabs(wq * dx);
        }
        v += s * dx;
        mag += std::fabs(s * dx);
      }
      if (c.type != GgmlType::Q6_K) ref_err = 0;  // Q4_0's, Q5_0's and Q8_0's reference weights are exact
      const double y_in = c.beta != 0.0f ? double(y0[size_t(t * ys + n)]) : 0.0;
      const double want = double(c.alpha) * v + double(c.beta) * y_in;
      const double bound = double(terms + 8) * std::ldexp(std::fabs(double(c.alpha)) * mag, -24) +
                           std::ldexp(std::fabs(double(c.alpha)) * ref_err, -24) +
                           std::ldexp(std::fabs(double(c.beta) * y_in) + std::fabs(want), -23) + 1e-30;
      const double err = std::fabs(double(got) - want);
      if (!(err <= bound)) {  // also catches NaN (poison left in place)
        ++bad;
        ADD_FAILURE() << "x row " << t << " output " << n << ": got " << got << " want " << want << " (|error| "
                      << err << ", bound " << bound << ")";
      }
    }
  }
}

// Every type; row counts with tail row groups (not a multiple of 16 or 32), k of one super-block
// (three warps idle), a partial last super-block of the 32-element formats (k = 288, 896, 2080), up to
// 22 super-blocks (5.5 a warp), and every
// tile shape: 1-8 rows of x (one token group), 9-16, and 17-128 (groups of 32, a last block of
// x rows with 1-4 groups, rows of x not a multiple of 8); f32 and f16 x; store, scaled store and
// residual accumulate (beta = 1).
TEST(Mmq, MatchesReference) {
  CERA_REQUIRE_CUDA();
  const GgmlType q4 = GgmlType::Q4_0, q6 = GgmlType::Q6_K, qk = GgmlType::Q4_K, q8 = GgmlType::Q8_0,
                 q5 = GgmlType::Q5_K, q41 = GgmlType::Q4_1, q50 = GgmlType::Q5_0, q51 = GgmlType::Q5_1;
  const Case cases[] = {
      {q4, 80, 256, 1, false, 1.0f, 0.0f},      {q4, 256, 512, 3, true, 1.0f, 0.0f},
      {q4, 64, 288, 8, false, 1.0f, 0.0f},      {q4, 130, 2048, 13, false, -0.75f, 1.0f},
      {q4, 48, 1024, 16, true, 1.0f, 0.0f},     {q4, 96, 768, 33, false, 1.0f, 0.0f},
      {q4, 33, 5632, 5, true, 0.5f, 1.0f},      {q4, 272, 1536, 64, true, 1.0f, 1.0f},
      {q4, 40, 2080, 100, false, 2.0f, 0.0f},   {q4, 32, 2560, 128, false, 1.0f, 1.0f},
      {q4, 17, 256, 127, true, -1.0f, 0.0f},    {q4, 528, 2048, 2, false, 1.0f, 1.0f},
      {q6, 80, 256, 1, false, 1.0f, 0.0f},      {q6, 200, 2048, 8, true, 1.0f, 0.0f},
      {q6, 130, 1024, 13, false, -0.75f, 1.0f}, {q6, 48, 1536, 16, true, 1.0f, 0.0f},
      {q6, 96, 768, 33, false, 1.0f, 0.0f},     {q6, 33, 5632, 100, true, 0.5f, 1.0f},
      {q6, 17, 256, 128, false, 1.0f, 0.0f},
      {qk, 80, 256, 1, false, 1.0f, 0.0f},      {qk, 200, 2048, 8, true, 1.0f, 0.0f},
      {qk, 130, 1024, 13, false, -0.75f, 1.0f}, {qk, 48, 1536, 16, true, 1.0f, 0.0f},
      {qk, 96, 768, 33, false, 1.0f, 0.0f},     {qk, 33, 5632, 100, true, 0.5f, 1.0f},
      {q8, 80, 256, 1, false, 1.0f, 0.0f},      {q8, 64, 288, 8, true, 1.0f, 0.0f},
      {q8, 130, 2048, 13, false, -0.75f, 1.0f}, {q8, 48, 1024, 16, true, 1.0f, 0.0f},
      {q8, 40, 2080, 100, false, 2.0f, 0.0f},   {q8, 33, 5632, 32, true, 0.5f, 1.0f},
      {q5, 80, 256, 1, false, 1.0f, 0.0f},      {q5, 200, 2048, 8, true, 1.0f, 0.0f},
      {q5, 130, 1024, 13, false, -0.75f, 1.0f}, {q5, 48, 1536, 16, true, 1.0f, 0.0f},
      {q5, 96, 768, 33, false, 1.0f, 0.0f},     {q5, 33, 5632, 100, true, 0.5f, 1.0f},
      {q41, 80, 256, 1, false, 1.0f, 0.0f},     {q41, 64, 288, 8, true, 1.0f, 0.0f},
      {q41, 130, 896, 13, false, -0.75f, 1.0f}, {q41, 40, 2080, 100, false, 2.0f, 0.0f},
      {q50, 80, 256, 1, false, 1.0f, 0.0f},     {q50, 64, 288, 8, true, 1.0f, 0.0f},
      {q50, 130, 896, 13, false, -0.75f, 1.0f}, {q50, 48, 1024, 16, true, 1.0f, 0.0f},
      {q50, 40, 2080, 100, false, 2.0f, 0.0f},  {q50, 33, 4864, 32, true, 0.5f, 1.0f},
      {q51, 80, 256, 1, false, 1.0f, 0.0f},     {q51, 64, 288, 8, true, 1.0f, 0.0f},
      {q51, 130, 896, 13, false, -0.75f, 1.0f}, {q51, 96, 768, 33, false, 1.0f, 0.0f},
      {q51, 33, 5632, 100, true, 0.5f, 1.0f},
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    run_case(c, seed++);
    if (HasFailure()) return;
  }
}

// What the product refuses, with a message instead of a wrong result.
TEST(Mmq, RejectsWhatItCannotRun) {
  CERA_REQUIRE_CUDA();
  DevBuf w(4096), x(4096), y(4096), scratch(cuda::mmq_scratch_bytes(8, 256));
  ASSERT_TRUE(w.p && x.p && y.p && scratch.p);
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q4_1, w.p, 160));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q5_0, w.as<uint8_t>() + 8, 176));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q3_K, w.p, 112));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::BF16, w.p, 512));
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q8_0, w.p, 272));
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q5_K, w.p, 176));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q5_K, w.as<uint8_t>() + 8, 176));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q4_0, w.as<uint8_t>() + 8, 144));
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q4_0, w.p, 144));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q6_K, w.as<uint8_t>() + 4, 216));
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q6_K, w.as<uint8_t>() + 8, 216));
  EXPECT_TRUE(cuda::mmq_supported(GgmlType::Q4_K, w.p, 144));
  EXPECT_FALSE(cuda::mmq_supported(GgmlType::Q4_K, w.as<uint8_t>() + 8, 144));
  auto run = [&](GgmlType type, int64_t k, int64_t n_x) {
    cuda::mmq(type, w.p, 4, k, 144, x.p, false, k, n_x, y.as<float>(), 4, 1.0f, 0.0f, scratch.p, nullptr);
  };
  EXPECT_THROW(run(GgmlType::Q3_K, 256, 1), Error);
  EXPECT_THROW(run(GgmlType::Q5_1, 256, 1), Error);  // 144-byte rows are shorter than a 192-byte super-block
  EXPECT_THROW(run(GgmlType::Q8_0, 256, 1), Error);  // 144-byte rows are shorter than a 272-byte super-block
  EXPECT_THROW(run(GgmlType::Q4_0, 256, 0), Error);
  EXPECT_THROW(run(GgmlType::Q4_0, 256, cuda::kMmqMaxRows + 1), Error);
  EXPECT_THROW(run(GgmlType::Q4_0, 48, 1), Error);   // k not a multiple of 32
  EXPECT_THROW(run(GgmlType::Q4_0, 512, 1), Error);  // 144-byte rows hold one super-block, not two
  EXPECT_THROW(run(GgmlType::Q6_K, 128, 1), Error);  // Q6_K rows are whole super-blocks
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace cera
