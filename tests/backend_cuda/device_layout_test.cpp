// The GPU layout of weight rows (quant_kernels.h, device_layout.cpp): host code, so these run
// without a device. Block b of a Q4_0 GGML row (f16 scale, 16 nibble bytes) must land in super-block
// b / 8 with its scale at 2·(b % 8) and its nibbles at 16 + 16·(b % 8), the last super-block
// zero-padded; Q4_1, Q5_0, Q5_1 and Q8_0 likewise, each field in its plane (quant_kernels.h), and
// every element read back by that description must equal the scalar dequantizer's; a Q4_K or Q5_K
// super-block keeps its 144 / 176 bytes, reordered as quant_kernels.h describes (read back here by that description
// and checked against the scalar dequantizer of the GGML row); a Q2_K super-block (84 bytes) must land
// at 88·b with zero bytes after it; a Q3_K super-block becomes 112 bytes with its scales in three
// words and a Q6_K one 216 with its levels in lane order (both read back and checked against the
// scalar dequantizer); float types are
// copied as stored. The kernels that read
// the layout are checked against the CPU reference in quant_kernels_test.cpp and
// matvec_int8_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "common/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"

namespace cera {
namespace {

std::vector<uint8_t> ggml_rows(GgmlType type, int64_t n_rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(k));
  const size_t row = ggml_row_bytes(type, k);
  std::vector<uint8_t> out(row * size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (auto& x : v) x = nd(rng);
    quant::quantize_row_ref(type, v.data(), out.data() + size_t(r) * row, k);
  }
  return out;
}

// n_rows random GGML rows of `type` and the same rows converted to the GPU layout, each device row
// followed by `pad` bytes of 0xEE that the conversion must leave alone.
struct Converted {
  int64_t n_rows;
  size_t src_row, dev_row, dst_row;
  std::vector<uint8_t> src, dst;
  const uint8_t* src_at(int64_t r) const { return src.data() + size_t(r) * src_row; }
  const uint8_t* dst_at(int64_t r) const { return dst.data() + size_t(r) * dst_row; }
};
Converted convert(GgmlType type, int64_t n_rows, int64_t k, uint32_t seed, size_t pad) {
  Converted c{n_rows, ggml_row_bytes(type, k), cuda::device_row_bytes(type, k), 0, ggml_rows(type, n_rows, k, seed), {}};
  c.dst_row = c.dev_row + pad;
  c.dst.assign(c.dst_row * size_t(n_rows), 0xEE);
  cuda::to_device_layout(type, c.src.data(), c.src_row, n_rows, k, c.dst.data(), c.dst_row);
  return c;
}
void expect_padding_untouched(const Converted& c) {
  for (int64_t r = 0; r < c.n_rows; ++r)
    for (size_t j = c.dev_row; j < c.dst_row; ++j) EXPECT_EQ(c.dst_at(r)[j], 0xEE) << "row " << r << ": wrote past it";
}
// Every element of every converted row, read as quant_kernels.h describes (element(row, e)), equals
// the scalar dequantizer's value of the GGML row.
template <class Element>
void expect_reads_back(GgmlType type, const Converted& c, int64_t k, Element element) {
  std::vector<float> want(static_cast<size_t>(k));
  for (int64_t r = 0; r < c.n_rows; ++r) {
    quant::dequantize_row_ref(type, c.src_at(r), want.data(), k);
    int bad = 0;
    for (int64_t e = 0; e < k && bad < 5; ++e) {
      const float got = element(c.dst_at(r), e);
      if (got != want[size_t(e)])
        ++bad, ADD_FAILURE() << "row " << r << " element " << e << ": " << got << " against " << want[size_t(e)];
    }
  }
}

// The 32-element formats: a GGML block is its fields in stored order (f16 d; Q4_1 / Q5_1: f16 m;
// Q5_0 / Q5_1: 4 bytes of fifth bits; the levels), and the GPU super-block of 8 blocks holds field f
// of block s at P_f + size_f·s, P_f = 8 · the sizes of the fields before f (quant_kernels.h).
struct PlaneCase {
  GgmlType type;
  std::vector<size_t> fields;
};
const PlaneCase kPlaneCases[] = {{GgmlType::Q4_0, {2, 16}},
                                 {GgmlType::Q4_1, {2, 2, 16}},
                                 {GgmlType::Q5_0, {2, 4, 16}},
                                 {GgmlType::Q5_1, {2, 2, 4, 16}},
                                 {GgmlType::Q8_0, {2, 32}}};

TEST(DeviceLayout, BlocksOf32BecomeSuperBlocksOfPlanes) {
  for (const PlaneCase& pc : kPlaneCases)
    for (const int64_t k : {int64_t(32), int64_t(256), int64_t(896), int64_t(2048), int64_t(2080)}) {
      const GgmlType type = pc.type;
      SCOPED_TRACE(std::string(ggml_type_name(type)) + " k " + std::to_string(k));
      size_t block = 0;
      for (size_t f : pc.fields) block += f;
      ASSERT_EQ(block, ggml_traits(type).block_bytes);
      const size_t super = 8 * block;
      const int64_t n_rows = 3, blocks = k / 32;
      const Converted c = convert(type, n_rows, k, uint32_t(k), 5);
      const size_t dev_row = c.dev_row;
      ASSERT_EQ(dev_row, size_t((blocks + 7) / 8) * super);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* s = c.src_at(r);
        const uint8_t* d = c.dst_at(r);
        std::vector<bool> written(dev_row, false);
        for (int64_t b = 0; b < blocks; ++b) {
          const size_t sb = size_t(b / 8) * super, i = size_t(b % 8);
          size_t plane = 0, at = 0;
          for (size_t f = 0; f < pc.fields.size(); ++f) {
            const size_t size = pc.fields[f];
            EXPECT_EQ(plane % 16, 0u) << "field " << f << "'s plane is not 16-byte aligned";
            for (size_t j = 0; j < size; ++j) {
              EXPECT_EQ(d[sb + plane + size * i + j], s[block * b + at + j]) << "row " << r << " block " << b
                                                                              << " field " << f;
              written[sb + plane + size * i + j] = true;
            }
            plane += 8 * size, at += size;
          }
        }
        for (size_t j = 0; j < dev_row; ++j) {
          if (written[j]) continue;
          EXPECT_EQ(d[j], 0) << "row " << r << ": padding byte " << j;
        }
      }
      expect_padding_untouched(c);
    }
}

// Element e of a row of a 32-element format in its GPU layout, read as quant_kernels.h describes it:
// d·(level − offset) (+ m), the reference dequantizer's arithmetic.
float planes_element(GgmlType type, const uint8_t* row, int64_t e) {
  const bool has_min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
  const bool has_qh = type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
  const int level_bytes = type == GgmlType::Q8_0 ? 32 : 16;
  const int qh_at = has_min ? 32 : 16, levels_at = qh_at + (has_qh ? 32 : 0);
  const uint8_t* sb = row + size_t(e / 256) * size_t(levels_at + 8 * level_bytes);
  const int s = int(e % 256) / 32, j = int(e % 32);
  auto f16 = [&](int at) { return f16_to_f32(uint16_t(sb[at] | sb[at + 1] << 8)); };
  const uint8_t* lv = sb + levels_at + level_bytes * s;
  if (type == GgmlType::Q8_0) return f16(2 * s) * float(int8_t(lv[j]));
  int level = (lv[j & 15] >> (j < 16 ? 0 : 4)) & 15;
  if (has_qh) level += 16 * ((sb[qh_at + 4 * s + j / 8] >> (j % 8)) & 1);
  if (has_min) return f16(2 * s) * float(level) + f16(16 + 2 * s);
  return f16(2 * s) * float(level - (has_qh ? 16 : 8));
}

TEST(DeviceLayout, BlocksOf32ReadBackAsTheReferenceDequantizes) {
  for (const PlaneCase& pc : kPlaneCases)
    for (const int64_t k : {int64_t(32), int64_t(896), int64_t(2048)}) {
      SCOPED_TRACE(std::string(ggml_type_name(pc.type)) + " k " + std::to_string(k));
      const Converted c = convert(pc.type, 2, k, uint32_t(k) + 7, 0);
      expect_reads_back(pc.type, c, k, [&](const uint8_t* row, int64_t e) { return planes_element(pc.type, row, e); });
    }
}

// Element e of a Q4_K or Q5_K row in the GPU layout, as quant_kernels.h describes it.
float k_device_element(GgmlType type, const uint8_t* row, int64_t e) {
  const bool q5 = type == GgmlType::Q5_K;
  const uint8_t* sb = row + size_t(e / 256) * (q5 ? 176 : 144);
  const int s = int(e % 256) / 32, j = int(e % 32);
  auto word = [&](int at) { return uint32_t(sb[at]) | uint32_t(sb[at + 1]) << 8 | uint32_t(sb[at + 2]) << 16 | uint32_t(sb[at + 3]) << 24; };
  const uint32_t sc = ((word(4) >> (4 * s)) & 15u) | ((word(12) >> (4 * s)) & 3u) << 4;
  const uint32_t mn = ((word(8) >> (4 * s)) & 15u) | ((word(12) >> (4 * s + 2)) & 3u) << 4;
  int level = (sb[16 + 16 * s + (j & 15)] >> (j < 16 ? 0 : 4)) & 15;
  if (q5) level += 16 * int((word(144 + 4 * s) >> j) & 1);
  const float d = f16_to_f32(uint16_t(sb[0] | sb[1] << 8)), dmin = f16_to_f32(uint16_t(sb[2] | sb[3] << 8));
  return d * float(sc) * float(level) - dmin * float(mn);  // the reference dequantizer's arithmetic
}

TEST(DeviceLayout, Q4_KAndQ5_KSuperBlocksAreReordered) {
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K})
    for (const int64_t k : {int64_t(256), int64_t(2048)}) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + " k " + std::to_string(k));
      ASSERT_EQ(cuda::device_row_bytes(type, k), ggml_row_bytes(type, k));
      const Converted c = convert(type, 4, k, uint32_t(k) + 1, 8);
      expect_reads_back(type, c, k, [&](const uint8_t* row, int64_t e) { return k_device_element(type, row, e); });
      expect_padding_untouched(c);
    }
}

TEST(DeviceLayout, Q2_KSuperBlocksArePadded) {
  constexpr int stored = 84, padded = 88;
  for (const int64_t k : {int64_t(256), int64_t(2048)}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const int64_t n_rows = 3, blocks = k / 256;
    const Converted c = convert(GgmlType::Q2_K, n_rows, k, uint32_t(k), 8);
    ASSERT_EQ(c.src_row, size_t(blocks) * stored);
    ASSERT_EQ(c.dev_row, size_t(blocks) * padded);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* s = c.src_at(r);
      const uint8_t* d = c.dst_at(r);
      for (int64_t b = 0; b < blocks; ++b) {
        EXPECT_TRUE(std::equal(s + stored * b, s + stored * (b + 1), d + padded * b)) << "row " << r << " block " << b;
        for (int j = stored; j < padded; ++j) EXPECT_EQ(d[padded * b + j], 0) << "row " << r << " block " << b;
      }
    }
    expect_padding_untouched(c);
  }
}

// Element e of a Q6_K row in the GPU layout, as quant_kernels.h describes it: d·scale·(level − 32).
float q6_k_device_element(const uint8_t* row, int64_t e) {
  const uint8_t* sb = row + size_t(e / 256) * 216;
  const int s = int(e % 256) / 32, l = int(e % 32);
  const int h = (l % 16) / 8, j = l % 8;  // half h of the sub-block, byte j of its nibbles
  const int low = (sb[16 * s + 8 * h + j] >> (l < 16 ? 0 : 4)) & 15;
  const int w = 2 * (l / 16) + j / 4;  // the bit pairs' word: byte j % 4, pair w
  const int top = (sb[128 + 8 * s + 4 * h + j % 4] >> (2 * w)) & 3;
  const float d = f16_to_f32(uint16_t(sb[208] | sb[209] << 8));
  return d * float(int8_t(sb[192 + e % 256 / 16])) * float((low | top << 4) - 32);  // the reference's arithmetic
}

TEST(DeviceLayout, Q6_KLevelsAreInLaneOrder) {
  for (const int64_t k : {int64_t(256), int64_t(2048)}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const Converted c = convert(GgmlType::Q6_K, 3, k, uint32_t(k) + 5, 8);
    ASSERT_EQ(c.src_row, size_t(k / 256) * 210);
    ASSERT_EQ(c.dev_row, size_t(k / 256) * 216);
    expect_reads_back(GgmlType::Q6_K, c, k, q6_k_device_element);
    for (int64_t r = 0; r < c.n_rows; ++r)
      for (int64_t b = 0; b < k / 256; ++b)
        for (int j = 210; j < 216; ++j) EXPECT_EQ(c.dst_at(r)[216 * b + j], 0) << "row " << r << " block " << b;
    expect_padding_untouched(c);
  }
}

// Element e of a Q3_K row in the GPU layout, as quant_kernels.h describes it: d·scale·(level − 4).
float q3_k_device_element(const uint8_t* row, int64_t e) {
  const uint8_t* sb = row + size_t(e / 256) * 112;
  const int n = int(e % 256) / 128, j = int(e % 128) / 32, l = int(e % 32);
  auto word = [&](int at) { return uint32_t(sb[at]) | uint32_t(sb[at + 1]) << 8 | uint32_t(sb[at + 2]) << 16 | uint32_t(sb[at + 3]) << 24; };
  const int i = 8 * n + 2 * j + l / 16;  // the element's scale
  const uint32_t low4 = (word(i < 8 ? 96 : 100) >> (4 * (i % 8))) & 15u, high2 = (word(104) >> (2 * i)) & 3u;
  const int scale = int(low4 | high2 << 4) - 32;
  const int level = ((sb[32 + 32 * n + l] >> (2 * j)) & 3) | ((sb[l] >> (4 * n + j)) & 1) << 2;
  const float d = f16_to_f32(uint16_t(sb[108] | sb[109] << 8));
  return d * float(scale) * float(level - 4);  // the reference dequantizer's arithmetic
}

TEST(DeviceLayout, Q3_KScalesBecomeWords) {
  for (const int64_t k : {int64_t(256), int64_t(2048)}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const Converted c = convert(GgmlType::Q3_K, 3, k, uint32_t(k) + 3, 8);
    ASSERT_EQ(c.dev_row, size_t(k / 256) * 112);
    expect_reads_back(GgmlType::Q3_K, c, k, q3_k_device_element);
    for (int64_t r = 0; r < c.n_rows; ++r)
      for (int64_t b = 0; b < k / 256; ++b)
        EXPECT_TRUE(c.dst_at(r)[112 * b + 110] == 0 && c.dst_at(r)[112 * b + 111] == 0)
            << "row " << r << " block " << b << ": padding";
    expect_padding_untouched(c);
  }
}

TEST(DeviceLayout, FloatTypesAreCopiedAsStored) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const int64_t n_rows = 2, k = 512;
    const size_t row = ggml_row_bytes(type, k);
    ASSERT_EQ(cuda::device_row_bytes(type, k), row) << ggml_type_name(type);
    std::vector<uint8_t> src(row * n_rows);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 37 + 11);
    std::vector<uint8_t> dst(src.size() + 16, 0xEE);
    cuda::to_device_layout(type, src.data(), row, n_rows, k, dst.data(), row);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << ggml_type_name(type);
    EXPECT_EQ(dst[src.size()], 0xEE) << ggml_type_name(type);
  }
}

}  // namespace
}  // namespace cera
