// Backend::top_k_rows on the CPU backend (the reference the CUDA kernel is compared with) against an
// independent brute force: a stable sort of every non-NaN column by value, descending.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cera/error.h"

namespace cera {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Rows mixing every hard case: few distinct values (ties), NaN, ±inf, -0 and +0.
std::vector<float> hard_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  std::uniform_int_distribution<int> kind(0, 99);
  std::vector<float> v(size_t(rows * cols));
  for (auto& x : v) {
    const int c = kind(rng);
    if (c < 30) x = std::round(u(rng));  // 17 levels: many ties, also at the k-th place
    else if (c < 35) x = kNaN;
    else if (c < 38) x = -kInf;
    else if (c < 39) x = kInf;
    else if (c < 41) x = -0.f;
    else if (c < 43) x = 0.f;
    else x = u(rng);
  }
  return v;
}

// The documented result, the slow way.
void brute_force(const float* row, int64_t cols, int32_t k, std::vector<float>& values, std::vector<int32_t>& ids) {
  std::vector<int32_t> order;
  for (int64_t c = 0; c < cols; ++c)
    if (!std::isnan(row[c])) order.push_back(int32_t(c));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  values.assign(size_t(k), kNaN);
  ids.assign(size_t(k), -1);
  for (size_t i = 0; i < std::min(size_t(k), order.size()); ++i) {
    ids[i] = order[i];
    values[i] = row[order[i]];
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

struct Case {
  int64_t rows, cols;
  int32_t k;
};

class CpuTopK : public ::testing::TestWithParam<Case> {};

TEST_P(CpuTopK, MatchesBruteForce) {
  const Case c = GetParam();
  auto be = make_cpu_backend({2});
  Tensor t = be->alloc(c.rows, c.cols);
  const auto v = hard_rows(c.rows, c.cols, uint32_t(c.cols * 31 + c.k));
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
  std::vector<float> values(size_t(c.rows * c.k));
  std::vector<int32_t> ids(size_t(c.rows * c.k));
  be->top_k_rows(t, c.k, values.data(), ids.data());
  std::vector<float> want_v;
  std::vector<int32_t> want_i;
  for (int64_t r = 0; r < c.rows; ++r) {
    brute_force(v.data() + r * c.cols, c.cols, c.k, want_v, want_i);
    for (int32_t i = 0; i < c.k; ++i) {
      const size_t at = size_t(r * c.k + i);
      ASSERT_EQ(ids[at], want_i[size_t(i)]) << "row " << r << " slot " << i;
      ASSERT_TRUE(same_bits(values[at], want_v[size_t(i)])) << "row " << r << " slot " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuTopK,
                         ::testing::Values(Case{3, 65536, 1}, Case{3, 65536, 40}, Case{2, 65536, 1024},
                                           Case{4, 1001, 40}, Case{2, 1001, 1001}, Case{5, 7, 3}),
                         [](const auto& info) {
                           return "r" + std::to_string(info.param.rows) + "_c" + std::to_string(info.param.cols) +
                                  "_k" + std::to_string(info.param.k);
                         });

// Hand-checked rows: ties go to the smaller column, -0 ties +0, NaN is skipped, -inf is a value, and
// a row with fewer than k non-NaN values ends in id -1 / NaN.
TEST(CpuTopKRows, HandCheckedRows) {
  auto be = make_cpu_backend({1});
  const std::vector<float> v = {1.f,  kNaN, 3.f,   3.f,  -kInf, 0.f,  -0.f, 2.f,   // row 0
                                kNaN, -0.f, kNaN,  0.f,  kNaN,  kNaN, kNaN, -kInf};  // row 1
  Tensor t = be->alloc(2, 8);
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
  std::vector<float> values(2 * 5);
  std::vector<int32_t> ids(2 * 5);
  be->top_k_rows(t, 5, values.data(), ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 7, 0, 5, /**/ 1, 3, 7, -1, -1}));
  EXPECT_EQ(values[0], 3.f);
  EXPECT_EQ(values[2], 2.f);
  EXPECT_TRUE(same_bits(values[5], -0.f)) << "the row's own value comes back";
  EXPECT_EQ(values[7], -kInf);
  EXPECT_TRUE(std::isnan(values[8]) && std::isnan(values[9]));
}

// A column slice (row stride wider than the row) reads only its columns.
TEST(CpuTopKRows, StridedRows) {
  auto be = make_cpu_backend({1});
  Tensor t = be->alloc(2, 6);
  const std::vector<float> v = {9, 1, 5, 2, 9, 9, /**/ 9, 7, 3, 8, 9, 9};
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
  const Tensor s = t.cols_slice(1, 3);
  std::vector<float> values(4);
  std::vector<int32_t> ids(4);
  be->top_k_rows(s, 2, values.data(), ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 2, 0}));
  EXPECT_EQ(values, (std::vector<float>{5, 2, 8, 7}));
}

TEST(CpuTopKRows, RefusesBadK) {
  auto be = make_cpu_backend({1});
  Tensor narrow = be->alloc(1, 10), wide = be->alloc(1, 4096);
  std::vector<float> values(2048);
  std::vector<int32_t> ids(2048);
  auto code = [&](const Tensor& t, int32_t k) {
    try {
      be->top_k_rows(t, k, values.data(), ids.data());
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;  // no error
  };
  EXPECT_EQ(code(narrow, 0), ErrorCode::InvalidArgument);
  EXPECT_EQ(code(narrow, -3), ErrorCode::InvalidArgument);
  EXPECT_EQ(code(narrow, 11), ErrorCode::InvalidArgument) << "more than the row width";
  EXPECT_EQ(code(wide, Backend::kMaxTopK + 1), ErrorCode::InvalidArgument) << "more than kMaxTopK";
  EXPECT_EQ(code(narrow, 10), ErrorCode::Internal) << "k = cols is fine";
  EXPECT_EQ(code(wide, Backend::kMaxTopK), ErrorCode::Internal) << "k = kMaxTopK is fine";
}

}  // namespace
}  // namespace cera
