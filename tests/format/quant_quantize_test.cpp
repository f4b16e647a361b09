// Quantizers: exact activation rounding (llama.cpp's reference rules) and round-trip error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace cera::quant {
namespace {

std::vector<float> gaussian(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> buf(ggml_row_bytes(t, int64_t(x.size())));
  quantize_row_ref(t, x.data(), buf.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row_ref(t, buf.data(), y.data(), int64_t(x.size()));
  return y;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += double(x[i] - y[i]) * (x[i] - y[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

TEST(QuantQuantize, Q8_0RoundsHalfAwayFromZero) {
  // amax 127 -> d = 1, id = 1: ties show roundf semantics (2.5 -> 3, not 2).
  float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 3.49f, -126.6f};
  BlockQ8_0 b;
  quantize_row_ref(GgmlType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int8_t want[8] = {127, 3, -3, 1, -1, 2, 3, -127};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(b.qs[j], want[j]) << j;
  for (int j = 8; j < 32; ++j) EXPECT_EQ(b.qs[j], 0);
}

TEST(QuantQuantize, Q8_1SumUsesQuantizedValues) {
  float x[32] = {-63.5f, 2.5f, -0.5f, 0.5f, 10.0f};  // amax 63.5 -> d = 0.5, id = 2
  BlockQ8_1 b;
  quantize_row_ref(GgmlType::Q8_1, x, &b, 32);
  EXPECT_EQ(b.d, 0x3800);
  const int8_t want[5] = {-127, 5, -1, 1, 20};
  int sum = 0;
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(b.qs[j], want[j]) << j;
    sum += want[j];
  }
  EXPECT_EQ(sum, -102);
  EXPECT_EQ(b.s, f32_to_f16(-51.0f));  // 0.5 * -102
}

TEST(QuantQuantize, Q8_KSignedMaxAndNearestEven) {
  std::vector<float> x(256, 0.0f);
  x[0] = 5.0f;      // iscale = -127/-254 = 0.5: 2.5 -> 2 (half to even)
  x[1] = 7.0f;      // 3.5 -> 4
  x[2] = -3.0f;     // -1.5 -> -2
  x[3] = -254.0f;   // the signed extreme -> -127
  x[17] = 100.0f;   // 50
  BlockQ8_K b;
  quantize_row_ref(GgmlType::Q8_K, x.data(), &b, 256);
  EXPECT_EQ(b.d, 2.0f);
  EXPECT_EQ(b.qs[0], 2);
  EXPECT_EQ(b.qs[1], 4);
  EXPECT_EQ(b.qs[2], -2);
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[17], 50);
  EXPECT_EQ(b.bsums[0], 2 + 4 - 2 - 127);
  EXPECT_EQ(b.bsums[1], 50);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);

  // Positive extreme: iscale = -1, so values flip sign.
  std::vector<float> y(256, 0.0f);
  y[0] = 127.0f;
  y[1] = 2.5f;   // -2.5 -> -2
  y[2] = -0.5f;  // 0.5 -> 0
  y[3] = -1.5f;  // 1.5 -> 2
  quantize_row_ref(GgmlType::Q8_K, y.data(), &b, 256);
  EXPECT_EQ(b.d, -1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], -2);
  EXPECT_EQ(b.qs[2], 0);
  EXPECT_EQ(b.qs[3], 2);
}

TEST(QuantQuantize, ZeroBlocks) {
  std::vector<float> z(256, 0.0f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::Q4_0, GgmlType::Q4_K,
                     GgmlType::Q6_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::Q5_1}) {
    const auto y = round_trip(t, z);
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

TEST(QuantQuantize, F16AndBf16RoundToNearestEven) {
  const float x[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  uint16_t h[4], b[4];
  quantize_row_ref(GgmlType::F16, x, h, 4);
  quantize_row_ref(GgmlType::BF16, x, b, 4);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x3C02);
  EXPECT_EQ(b[2], 0x3F80);
  EXPECT_EQ(b[3], 0x3F82);
}

TEST(QuantQuantize, Q8_0ErrorWithinHalfStep) {
  const auto x = gaussian(4096, 1);
  const auto y = round_trip(GgmlType::Q8_0, x);
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f;
    const float d16 = f16_to_f32(f32_to_f16(d));
    // half a step, plus what rounding d to f16 moves the largest level
    const float bound = 0.5f * d + 127.0f * std::fabs(d16 - d) + 1e-7f;
    for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[b + j] - y[b + j]), bound) << b + j;
  }
}

TEST(QuantQuantize, Q8_KErrorWithinHalfStep) {
  const auto x = gaussian(4096, 2);
  const auto y = round_trip(GgmlType::Q8_K, x);
  for (size_t b = 0; b < x.size(); b += 256) {
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::fmax(amax, std::fabs(x[b + j]));
    for (int j = 0; j < 256; ++j) ASSERT_LE(std::fabs(x[b + j] - y[b + j]), 0.5001f * amax / 127.0f);
  }
}

// Relative RMS error of a gaussian row. The quantizers are llama.cpp's reference algorithms
// (byte-identity against llama-quantize's files is tested in quant_llamacpp_bytes_test.cpp);
// measured: q4_0 0.085, q4_1 0.079, q5_0 0.043, q5_1 0.038, q2_K 0.300, q3_K 0.150, q4_K 0.071,
// q5_K 0.036, q6_K 0.0176. Bounds are those of the earlier error-minimising search where llama.cpp's
// algorithm meets them too; q4_1 and q5_1 (plain min/max scaling, slightly worse than that search)
// are ~10% above their measurement, so a regression to a cruder quantizer still fails.
struct RmsCase {
  GgmlType type;
  double bound;
};

class QuantRoundTrip : public ::testing::TestWithParam<RmsCase> {};

TEST_P(QuantRoundTrip, RelativeRmsError) {
  const auto x = gaussian(8192, 3);
  const auto y = round_trip(GetParam().type, x);
  const double e = rel_rms(x, y);
  EXPECT_LE(e, GetParam().bound) << ggml_type_name(GetParam().type);
  EXPECT_GT(e, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Weights, QuantRoundTrip,
    ::testing::Values(RmsCase{GgmlType::Q4_0, 0.090}, RmsCase{GgmlType::Q4_1, 0.087},
                      RmsCase{GgmlType::Q5_0, 0.045}, RmsCase{GgmlType::Q5_1, 0.041},
                      RmsCase{GgmlType::Q8_0, 0.006}, RmsCase{GgmlType::Q2_K, 0.30},
                      RmsCase{GgmlType::Q3_K, 0.16}, RmsCase{GgmlType::Q4_K, 0.078},
                      RmsCase{GgmlType::Q5_K, 0.039}, RmsCase{GgmlType::Q6_K, 0.0185},
                      RmsCase{GgmlType::Q8_K, 0.0076}, RmsCase{GgmlType::F16, 0.00025},
                      RmsCase{GgmlType::BF16, 0.0019}),
    [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(QuantQuantize, Q4_0LlamaCppRounding) {
  // d = (signed extreme) / -8, levels trunc(x/d + 8.5) capped at 15: ties round up, not to even.
  float x[32] = {-8.0f, 2.5f, -2.5f, 7.9f, 0.49f, 1.5f};  // extreme -8 -> d = 1
  BlockQ4_0 b;
  quantize_row_ref(GgmlType::Q4_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int want[6] = {0, 11, 6, 15, 8, 10};  // 2.5 -> 3 (+8), -2.5 -> -2, 7.9 -> 8 capped to 7
  for (int j = 0; j < 6; ++j) EXPECT_EQ(b.qs[j] & 0xF, want[j]) << j;
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] >> 4, 8) << j;  // zeros in the second half

  // A positive extreme gives a negative d, so the extreme itself lands on level 0 (-8).
  float y[32] = {8.0f, 2.5f};
  quantize_row_ref(GgmlType::Q4_0, y, &b, 32);
  EXPECT_EQ(b.d, 0xBC00);
  EXPECT_EQ(b.qs[0] & 0xF, 0);
  EXPECT_EQ(b.qs[1] & 0xF, 6);  // -2.5 + 8.5 = 6
}

TEST(QuantQuantize, Q4_1MinAndRoundHalfUp) {
  // min = -1, max = 14 -> d = 1, m = -1; levels trunc(x - min + 0.5).
  float x[32];
  for (float& v : x) v = 0.0f;
  x[0] = -1.0f;
  x[1] = 14.0f;
  x[2] = 1.5f;   // 2.5 -> 3
  x[3] = 0.49f;  // 1.49 -> 1
  BlockQ4_1 b;
  quantize_row_ref(GgmlType::Q4_1, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.m, 0xBC00);
  EXPECT_EQ(b.qs[0] & 0xF, 0);
  EXPECT_EQ(b.qs[1] & 0xF, 15);
  EXPECT_EQ(b.qs[2] & 0xF, 3);
  EXPECT_EQ(b.qs[3] & 0xF, 1);
  EXPECT_EQ(b.qs[4] & 0xF, 1);  // 0 -> 1
}

}  // namespace
}  // namespace cera::quant
