// Hand-built blocks with expected values worked out from the MODELS.md §2 formulas.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cera/error.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace cera::quant {
namespace {

std::vector<float> deq(GgmlType t, const void* b, int n) {
  std::vector<float> y(n, -12345.0f);
  dequantize_row_ref(t, b, y.data(), n);
  return y;
}

void expect_all(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(QuantDequant, F16AndBf16) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x3555, 0x0001};
  const auto y = deq(GgmlType::F16, h, 4);
  expect_all(y, {1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f});
  const uint16_t b[3] = {0x3F80, 0xC040, 0x0000};
  expect_all(deq(GgmlType::BF16, b, 3), {1.0f, -3.0f, 0.0f});
  const float f[2] = {1.5f, -7.25f};
  expect_all(deq(GgmlType::F32, f, 2), {1.5f, -7.25f});
}

TEST(QuantDequant, Q8_0) {
  BlockQ8_0 b{};
  b.d = 0x3800;  // 0.5
  std::vector<float> want(32);
  for (int j = 0; j < 32; ++j) {
    b.qs[j] = int8_t(j * 8 - 128);
    want[j] = 0.5f * float(j * 8 - 128);
  }
  expect_all(deq(GgmlType::Q8_0, &b, 32), want);
}

TEST(QuantDequant, Q8_1AndQ8_K) {
  BlockQ8_1 b{};
  b.d = 0x3800;
  b.s = 0x4000;  // s is not used by dequantization
  b.qs[0] = -7;
  b.qs[31] = 100;
  std::vector<float> want(32, 0.0f);
  want[0] = -3.5f;
  want[31] = 50.0f;
  expect_all(deq(GgmlType::Q8_1, &b, 32), want);

  BlockQ8_K k{};
  k.d = 0.25f;
  k.qs[5] = -128;
  k.qs[255] = 3;
  std::vector<float> wk(256, 0.0f);
  wk[5] = -32.0f;
  wk[255] = 0.75f;
  expect_all(deq(GgmlType::Q8_K, &k, 256), wk);
}

TEST(QuantDequant, Q4_0NibbleOrder) {
  BlockQ4_0 b{};
  b.d = 0x4000;  // 2.0
  std::memset(b.qs, 0x88, 16);  // both nibbles = 8 -> 0
  b.qs[0] = 0x1F;               // y0 = 2*(15-8), y16 = 2*(1-8)
  b.qs[7] = 0x80;               // y7 = 2*(0-8), y23 = 0
  std::vector<float> want(32, 0.0f);
  want[0] = 14.0f;
  want[16] = -14.0f;
  want[7] = -16.0f;
  expect_all(deq(GgmlType::Q4_0, &b, 32), want);
}

TEST(QuantDequant, Q4_1) {
  BlockQ4_1 b{};
  b.d = 0x3800;  // 0.5
  b.m = 0xBC00;  // -1
  b.qs[3] = 0xA5;
  std::vector<float> want(32, -1.0f);
  want[3] = 1.5f;   // 0.5*5 - 1
  want[19] = 4.0f;  // 0.5*10 - 1
  expect_all(deq(GgmlType::Q4_1, &b, 32), want);
}

TEST(QuantDequant, Q5_0HighBits) {
  BlockQ5_0 b{};
  b.d = 0x3C00;  // 1
  b.qh[0] = 0x01;  // bit 0 -> element 0
  b.qh[3] = 0x80;  // bit 31 -> element 31
  b.qs[0] = 0x0F;  // y0 = (15|16) - 16, y16 = 0 - 16
  b.qs[15] = 0xF0; // y15 = -16, y31 = (15|16) - 16
  std::vector<float> want(32, -16.0f);
  want[0] = 15.0f;
  want[31] = 15.0f;
  expect_all(deq(GgmlType::Q5_0, &b, 32), want);
}

TEST(QuantDequant, Q5_1) {
  BlockQ5_1 b{};
  b.d = 0x3400;  // 0.25
  b.m = 0x3C00;  // 1
  b.qh[2] = 0x01;  // bit 16 -> element 16
  b.qs[0] = 0x21;
  std::vector<float> want(32, 1.0f);
  want[0] = 1.25f;  // 0.25*1 + 1
  want[16] = 5.5f;  // 0.25*(2|16) + 1
  expect_all(deq(GgmlType::Q5_1, &b, 32), want);
}

TEST(QuantDequant, Q4_KScalesAndMins) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1
  b.dmin = 0x3800;  // 0.5
  // sc0 = 3, mn0 = 2, sc5 = 40 (0b10'1000), mn5 = 17 (0b01'0001)
  b.scales[0] = 3;
  b.scales[4] = 2;
  b.scales[1] = 2 << 6;          // high bits of sc5
  b.scales[5] = 1 << 6;          // high bits of mn5
  b.scales[9] = 8 | (1 << 4);    // low nibbles of sc5 / mn5
  b.qs[0] = 0x70;   // element 0: low nibble 0 (sub-block 0); element 32: 7 (sub-block 1, scale 0)
  b.qs[2] = 0x05;   // element 2: 3*5 - 1
  b.qs[65] = 0x30;  // element 161: sub-block 5, 40*3 - 0.5*17; element 129: sub-block 4 -> 0
  std::vector<float> want(256, 0.0f);
  for (int l = 0; l < 32; ++l) want[l] = -1.0f;  // sub-block 0: 0 - 0.5*2
  want[2] = 14.0f;
  for (int l = 0; l < 32; ++l) want[160 + l] = -8.5f;
  want[161] = 111.5f;
  expect_all(deq(GgmlType::Q4_K, &b, 256), want);
}

TEST(QuantDequant, Q5_KFifthBit) {
  BlockQ5_K b{};
  b.d = 0x3C00;
  b.dmin = 0x0000;
  b.scales[2] = 1;   // sc2 = 1: elements 64..95 (chunk 1, low nibbles)
  b.scales[3] = 2;   // sc3 = 2: elements 96..127 (chunk 1, high nibbles)
  b.qs[32 + 3] = 0x45;
  b.qh[3] = 0x04 | 0x01;  // bit 2 -> element 67; bit 0 -> element 3 (scale 0)
  b.qh[4] = 0x08;         // bit 3 -> element 100
  std::vector<float> want(256, 0.0f);
  want[67] = 21.0f;         // 1*(5+16)
  want[99] = 8.0f;          // 2*4
  want[100] = 32.0f;        // 2*(0+16)
  expect_all(deq(GgmlType::Q5_K, &b, 256), want);
}

TEST(QuantDequant, Q6_K) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5
  b.scales[2] = -3;
  b.scales[13] = 5;
  b.ql[33] = 0x0A;   // element 33: low nibble 10
  b.qh[1] = 0x0C;    // element 33: bits 2-3 = 3 -> q = (10|48) - 32 = 26
  b.ql[84] = 0xF0;   // element 212 (half 1, l = 20, third quarter): high nibble 15
  b.qh[52] = 0x20;   // bits 4-5 = 2 -> q = (15|32) - 32 = 15
  std::vector<float> want(256, 0.0f);
  for (int l = 32; l < 48; ++l) want[l] = 48.0f;     // 0.5 * -3 * -32
  for (int l = 208; l < 224; ++l) want[l] = -80.0f;  // 0.5 * 5 * -32
  want[33] = -39.0f;
  want[212] = 37.5f;
  expect_all(deq(GgmlType::Q6_K, &b, 256), want);
}

TEST(QuantDequant, Q2_K) {
  BlockQ2_K b{};
  b.d = 0x3C00;
  b.dmin = 0x3800;
  b.scales[5] = 0x23;  // sub-block 5 (elements 80..95): scale 3, min 2
  b.qs[18] = 0x20;     // element 82: (qs[18] >> 4) & 3 = 2
  std::vector<float> want(256, 0.0f);
  for (int l = 80; l < 96; ++l) want[l] = -1.0f;
  want[82] = 5.0f;  // 3*2 - 0.5*2
  expect_all(deq(GgmlType::Q2_K, &b, 256), want);
}

TEST(QuantDequant, Q3_K) {
  BlockQ3_K b{};
  b.d = 0x4000;  // 2
  // Every scale: low4 = 0, high2 = 2 -> 32 - 32 = 0, except S[6] = 3 and S[9] = -5.
  for (int i = 8; i < 12; ++i) b.scales[i] = 0xAA;
  b.scales[6] = 3;                          // S[6]: low4 3
  b.scales[1] = 0xB0;                       // S[9]: low4 11 in the high nibble of byte 1
  b.scales[9] = uint8_t((0xAA & ~0x30) | 0x10);  // S[9]: high2 = 1 -> 27 - 32 = -5
  b.qs[4] = 0xC0;     // element 100 (n 0, j 3): (qs[4] >> 6) & 3 = 3
  b.hmask[4] = 0x08;  // mask bit 3 set -> no -4
  b.qs[52] = 0x01;    // element 148 (n 1, j 0, l 20): 1
  b.hmask[20] = 0x10; // mask bit 4
  std::vector<float> want(256, 0.0f);
  for (int l = 96; l < 112; ++l) want[l] = -24.0f;   // 2*3*(0-4)
  for (int l = 144; l < 160; ++l) want[l] = 40.0f;   // 2*-5*(0-4)
  want[100] = 18.0f;
  want[148] = -10.0f;
  expect_all(deq(GgmlType::Q3_K, &b, 256), want);
}

TEST(QuantDequant, RejectsPartialBlocksAndUnknownTypes) {
  BlockQ4_0 b{};
  float y[64];
  EXPECT_THROW(dequantize_row_ref(GgmlType::Q4_0, &b, y, 31), Error);
  EXPECT_THROW(dequantize_row_ref(GgmlType::I32, &b, y, 4), Error);
  EXPECT_FALSE(can_dequantize(GgmlType::F64));
  EXPECT_TRUE(can_dequantize(GgmlType::Q6_K));
}

}  // namespace
}  // namespace cera::quant
