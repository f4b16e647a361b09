// Sampler::sample_top (sampling from a row's largest logits, as Backend::top_k_rows returns them)
// against Sampler::sample on the full row: the same seed must give the same tokens, the same
// candidates with the same probabilities, and the same history, draw after draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace cera {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

// The row's n largest logits in top_k_rows' form, the slow way: a stable sort of the non-NaN ids.
void top_of(const std::vector<float>& row, int32_t n, std::vector<float>& values, std::vector<int32_t>& ids) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < row.size(); ++i)
    if (!std::isnan(row[i])) order.push_back(int32_t(i));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
  values.assign(size_t(n), std::numeric_limits<float>::quiet_NaN());
  ids.assign(size_t(n), -1);
  for (size_t i = 0; i < std::min(size_t(n), order.size()); ++i) {
    ids[i] = order[i];
    values[i] = row[size_t(order[i])];
  }
}

// Parameters whose candidates are exactly the top k (no top-p or min-p cut).
SamplingParams top_k_only(int32_t k) {
  SamplingParams p;
  p.top_k = k;
  p.top_p = 1.f;
  p.min_p = 0.f;
  return p;
}

struct Config {
  std::string name;
  SamplingParams params;
  float tie_step;  // > 0: logits rounded to multiples of it (ties everywhere, also at the k-th place)
};

std::vector<Config> configs() {
  std::vector<Config> out;
  SamplingParams p;
  p.seed = 11;
  out.push_back({"defaults", p, 0.f});  // top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  p.top_k = 1;
  out.push_back({"top_k_1", p, 0.f});
  p = SamplingParams{};
  p.seed = 12;
  p.temperature = 0.f;
  p.top_k = 0;  // greedy needs one candidate whatever top-k says
  p.repeat_penalty = 1.5f;
  out.push_back({"greedy_with_penalty", p, 0.25f});
  p = SamplingParams{};
  p.seed = 13;
  p.top_k = 5;
  p.temperature = 1.5f;
  p.typical_p = 0.9f;
  p.min_p = 0.f;
  // The likeliest tokens are pushed down (some below the top 5) or banned.
  p.logit_bias = {{0, -2.5f}, {1, -kInf}, {2, -6.f}, {3, -0.5f}, {500, -1.f}, {7, 0.f}};
  out.push_back({"negative_bias", p, 0.f});
  p = SamplingParams{};
  p.seed = 14;
  p.top_k = 10;
  p.top_p = 0.9f;
  p.repeat_last_n = 8;
  p.repeat_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.75f;
  out.push_back({"penalties", p, 0.5f});
  p.repeat_last_n = -1;
  p.top_k = 3;
  p.logit_bias = {{4, -kInf}};
  out.push_back({"penalties_whole_history_and_ban", p, 0.5f});
  return out;
}

// Rows where a few tokens dominate (so drawn tokens are penalized, biased ones are near the top).
std::vector<float> make_row(std::mt19937& gen, size_t n_vocab, float tie_step) {
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> row(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) {
    float l = normal(gen) + (i < 12 ? 6.f - 0.4f * float(i) : 0.f);
    if (tie_step > 0) l = std::round(l / tie_step) * tie_step;
    row[i] = l;
  }
  return row;
}

TEST(SampleTop, SameDrawsAsTheFullRow) {
  for (const Config& c : configs()) {
    Sampler full(c.params), top(c.params);
    for (int32_t t : {5, 0, 3, 5}) {  // a prompt in the penalty history
      full.accept(t);
      top.accept(t);
    }
    std::mt19937 gen(uint32_t(c.params.seed));
    std::vector<float> values;
    std::vector<int32_t> ids;
    for (int step = 0; step < 400; ++step) {
      const auto row = make_row(gen, 1000, c.tie_step);
      const int32_t n = top.top_candidates_needed();
      ASSERT_GT(n, 0) << c.name;
      top_of(row, n, values, ids);
      const int32_t want = full.sample(row);
      const int32_t got = top.sample_top(values, ids);
      ASSERT_EQ(got, want) << c.name << " step " << step;
      const auto& a = full.last_candidates();
      const auto& b = top.last_candidates();
      ASSERT_EQ(a.size(), b.size()) << c.name << " step " << step;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].id, b[i].id) << c.name << " step " << step << " candidate " << i;
        ASSERT_EQ(a[i].p, b[i].p) << c.name << " step " << step << " candidate " << i;
      }
    }
  }
}

TEST(SampleTop, CandidatesNeeded) {
  SamplingParams p;
  p.top_k = 40;
  EXPECT_EQ(Sampler(p).top_candidates_needed(), 40);
  p.temperature = 0.f;
  EXPECT_EQ(Sampler(p).top_candidates_needed(), 1) << "greedy";
  p.temperature = 0.8f;
  p.logit_bias = {{3, -1.f}, {9, -kInf}, {10, 0.f}};
  EXPECT_EQ(Sampler(p).top_candidates_needed(), 42) << "one more per lowered token";
  p.logit_bias[11] = 0.5f;
  EXPECT_EQ(Sampler(p).top_candidates_needed(), 0) << "a raised token may come from anywhere";
  p.logit_bias.clear();
  p.top_k = 0;
  EXPECT_EQ(Sampler(p).top_candidates_needed(), 0) << "top-k off: any token may be drawn";

  p.top_k = 40;
  p.repeat_penalty = 1.2f;
  Sampler s(p);
  EXPECT_EQ(s.top_candidates_needed(), 40) << "no history yet";
  for (int32_t t : {7, 8, 7, 9}) s.accept(t);
  EXPECT_EQ(s.top_candidates_needed(), 43) << "one more per distinct token in the history";
  for (auto [repeat, frequency, presence] : {std::tuple{0.9f, 0.f, 0.f}, std::tuple{1.f, -0.1f, 0.f},
                                             std::tuple{1.f, 0.f, -0.1f}, std::tuple{kInf, 0.f, 0.f}}) {
    p.repeat_penalty = repeat;
    p.frequency_penalty = frequency;
    p.presence_penalty = presence;
    Sampler raising(p);
    raising.accept(7);
    EXPECT_EQ(raising.top_candidates_needed(), 0) << repeat << " " << frequency << " " << presence;
  }
  p.repeat_penalty = 1.f;
  p.frequency_penalty = 0.f;
  p.presence_penalty = 0.f;
  Sampler neutral(p);
  neutral.accept(7);
  EXPECT_EQ(neutral.top_candidates_needed(), 40) << "neutral penalties change nothing";
}

// Token 0 is the largest logit but its bias drops it to third place: top-2 are tokens 1 and 2, and
// the third-largest raw logit had to be read to know that.
TEST(SampleTop, BiasPullsATokenFromBelowTheTopK) {
  SamplingParams p = top_k_only(2);
  p.seed = 3;
  p.logit_bias = {{0, -5.f}};
  Sampler s(p);
  ASSERT_EQ(s.top_candidates_needed(), 3);
  const std::vector<float> values = {10, 9, 8};
  const std::vector<int32_t> ids = {0, 1, 2};
  const int32_t t = s.sample_top(values, ids);
  EXPECT_TRUE(t == 1 || t == 2) << t;
  ASSERT_EQ(s.last_candidates().size(), 2u);
  EXPECT_EQ(s.last_candidates()[0].id, 1);
  EXPECT_EQ(s.last_candidates()[1].id, 2);
}

// When every given candidate is banned the whole row is: sample_top draws nothing, records nothing,
// and the full row then gives exactly what a sampler that never saw the top-k gives.
TEST(SampleTop, AllBannedAsksForTheFullRow) {
  SamplingParams p;
  p.top_k = 1;
  p.seed = 5;
  p.repeat_penalty = 1.1f;
  p.logit_bias = {{0, -kInf}, {1, -kInf}};
  Sampler full(p), top(p);
  const std::vector<float> row = {5, 4, -kInf, -kInf};
  const int32_t n = top.top_candidates_needed();
  ASSERT_EQ(n, 3);
  std::vector<float> values;
  std::vector<int32_t> ids;
  top_of(row, n, values, ids);
  EXPECT_EQ(top.sample_top(values, ids), -1);
  EXPECT_EQ(top.top_candidates_needed(), 3) << "nothing entered the history";
  EXPECT_EQ(top.sample(row), full.sample(row));
  const std::vector<float> row2 = {0.3f, 0.1f, 0.2f, 0.25f};
  for (int i = 0; i < 20; ++i) ASSERT_EQ(top.sample(row2), full.sample(row2)) << "the same random stream";
}

// Slots past a row's non-NaN values (id -1) are not candidates.
TEST(SampleTop, SkipsEmptySlots) {
  SamplingParams p = top_k_only(4);
  Sampler s(p);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {2, 1, nan, nan};
  const std::vector<int32_t> ids = {2, 0, -1, -1};
  const int32_t t = s.sample_top(values, ids);
  EXPECT_TRUE(t == 2 || t == 0) << t;
  ASSERT_EQ(s.last_candidates().size(), 2u);
  EXPECT_EQ(s.last_candidates()[0].id, 2);
  EXPECT_EQ(s.last_candidates()[1].id, 0);
}

// The full row's top-k keeps the smaller ids on ties (the order top_k_rows uses), whatever the
// position of the tie.
TEST(SampleTop, FullRowTiesKeepTheSmallerIds) {
  SamplingParams p = top_k_only(3);
  Sampler s(p);
  std::vector<float> row(500, 1.f);
  row[400] = 2.f;
  s.sample(row);
  ASSERT_EQ(s.last_candidates().size(), 3u);
  EXPECT_EQ(s.last_candidates()[0].id, 400);
  EXPECT_EQ(s.last_candidates()[1].id, 0);
  EXPECT_EQ(s.last_candidates()[2].id, 1);
  p.temperature = 0.f;
  std::vector<float> flat(300, -1.f);
  flat[299] = flat[17] = flat[250] = 0.f;
  EXPECT_EQ(Sampler(p).sample(flat), 17) << "greedy: the first maximum";
}

}  // namespace
}  // namespace cera
