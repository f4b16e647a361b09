// Each stage on crafted logits with hand-computed expectations, then the chain and its random stream.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace cera {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

std::vector<Candidate> make(std::vector<float> logits) {
  std::vector<Candidate> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.f});
  return c;
}

std::vector<int32_t> ids(const std::vector<Candidate>& c) {
  std::vector<int32_t> out;
  for (const auto& x : c) out.push_back(x.id);
  return out;
}

// p = 1/2, 1/4, 1/8, 1/8: every threshold below is easy to check by hand.
std::vector<float> halves() { return {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)}; }

// Everything off but the stage under test.
SamplingParams plain() {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.temperature = 1.f;
  p.seed = 1234;
  return p;
}

TEST(Stages, TopK) {
  auto c = make({1, 3, 2, 0});
  sort_candidates(c);
  apply_top_k(c, 2);
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 2}));
  apply_top_k(c, 0);  // off
  EXPECT_EQ(c.size(), 2u);
}

TEST(Stages, TopP) {
  auto c = make(halves());
  apply_top_p(c, 0.7f);  // 0.5 < 0.7 <= 0.75
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1}));
  c = make(halves());
  apply_top_p(c, 0.76f);  // needs the third token (0.875)
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1, 2}));
  c = make(halves());
  apply_top_p(c, 0.1f);
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0}));
}

TEST(Stages, MinP) {
  auto c = make(halves());
  apply_min_p(c, 0.3f);  // keeps p >= 0.15
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1}));
  c = make(halves());
  apply_min_p(c, 0.2f);  // keeps p >= 0.1: all
  EXPECT_EQ(c.size(), 4u);
}

// sort_top_p_min_p against the stages it stands for (sort, apply_top_p, apply_min_p), on lists in a
// shuffled order: flat and peaked rows, ties, a whole vocabulary, every filter on and off.
TEST(Stages, SortTopPMinPMatchesSortThenFilters) {
  std::mt19937 gen(11);
  int cases = 0;
  for (const size_t n : {size_t(1), size_t(2), size_t(300), size_t(65536)})
    for (const float sigma : {0.3f, 2.f, 8.f, 0.f})  // 0: integer logits, many ties
      for (const float top_p : {1.f, 0.95f, 0.5f, 0.01f})
        for (const float min_p : {0.f, 0.05f, 0.5f, 2.f}) {
          std::normal_distribution<float> normal(0.f, sigma);
          std::uniform_int_distribution<int> small(-3, 3);
          std::vector<float> logits(n);
          for (auto& l : logits) l = sigma > 0.f ? normal(gen) : float(small(gen));
          if (n > 2 && sigma == 2.f) logits[n / 3] = 20.f;  // one dominant token
          auto expected = make(logits);
          std::sort(expected.begin(), expected.end(),
                    [](const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
          apply_top_p(expected, top_p);
          apply_min_p(expected, min_p);
          auto got = make(logits);
          std::shuffle(got.begin(), got.end(), gen);
          sort_top_p_min_p(got, top_p, min_p);
          ASSERT_EQ(ids(got), ids(expected)) << "n " << n << " sigma " << sigma << " top_p " << top_p << " min_p " << min_p;
          for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].logit, expected[i].logit);
          ++cases;
        }
  EXPECT_EQ(cases, 256);
}

TEST(Stages, SortTopPMinPWithNaN) {  // NaN ranks last, as the sort puts it
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto c = make({1.f, nan, 3.f, 2.f});
  sort_top_p_min_p(c, 1.f, 0.f);
  EXPECT_EQ(ids(c), (std::vector<int32_t>{2, 3, 0, 1}));
}

TEST(Stages, Temperature) {
  auto c = make({2, 1});
  apply_temperature(c, 0.5f);
  EXPECT_FLOAT_EQ(c[0].logit, 4);
  EXPECT_FLOAT_EQ(c[1].logit, 2);
}

TEST(Stages, Softmax) {
  auto c = make(halves());
  softmax(c);
  EXPECT_NEAR(c[0].p, 0.5, 1e-6);
  EXPECT_NEAR(c[3].p, 0.125, 1e-6);
}

// Entropy H = 1.75 ln 2. Surprisals: ln2, 2ln2, 3ln2, 3ln2 -> distances 0.75ln2, 0.25ln2, 1.25ln2,
// 1.25ln2: the most typical token is id 1 (p = 1/4), then id 0, then 2 and 3.
TEST(Stages, Typical) {
  auto c = make(halves());
  apply_typical(c, 0.2f);  // 0.25 > 0.2 at once: only id 1, not the most likely token
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1}));
  c = make(halves());
  apply_typical(c, 0.5f);  // 0.25, then 0.75 > 0.5; back in logit order
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1}));
  c = make(halves());
  apply_typical(c, 0.25f);  // strictly above p: 0.25 is not enough
  EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1}));
  c = make(halves());
  apply_typical(c, 0.9f);  // 0.875 <= 0.9: all four
  EXPECT_EQ(c.size(), 4u);
  c = make(halves());
  apply_typical(c, 1.f);  // off
  EXPECT_EQ(c.size(), 4u);
}

TEST(Stages, Penalties) {
  auto c = make({2, -2, 1, 0.5f});
  const int32_t last[] = {0, 1, 1};
  apply_penalties(c, last, 2.f, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(c[0].logit, 2.f / 2 - 0.5f * 1 - 0.25f);   // positive: divided
  EXPECT_FLOAT_EQ(c[1].logit, -2.f * 2 - 0.5f * 2 - 0.25f);  // negative: multiplied; seen twice
  EXPECT_FLOAT_EQ(c[2].logit, 1.f);                           // not seen
  EXPECT_FLOAT_EQ(c[3].logit, 0.5f);
  // Works on a sorted (not id-indexed) list as well.
  auto s = make({2, -2, 1, 0.5f});
  sort_candidates(s);
  apply_penalties(s, last, 2.f, 0.f, 0.f);
  for (const auto& x : s) {
    if (x.id == 0) { EXPECT_FLOAT_EQ(x.logit, 1.f); }
    if (x.id == 1) { EXPECT_FLOAT_EQ(x.logit, -4.f); }
  }
}

TEST(Stages, LogitBiasAndBan) {
  auto c = make({1, 2, 3});
  apply_logit_bias(c, {{0, 5.f}, {2, -kInf}, {7, 1.f}});  // 7: out of range, ignored
  drop_banned(c);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, 0);
  EXPECT_FLOAT_EQ(c[0].logit, 6.f);
  EXPECT_EQ(c[1].id, 1);
  auto all = make({1, 2});
  apply_logit_bias(all, {{0, -kInf}, {1, -kInf}});
  drop_banned(all);
  EXPECT_EQ(all.size(), 2u);  // never empty
}

TEST(Sampler, GreedyHonoursBiasAndBan) {
  SamplingParams p = plain();
  p.temperature = 0.f;
  const std::vector<float> logits = {1, 5, 3};
  EXPECT_EQ(Sampler(p).sample(logits), 1);
  p.logit_bias[1] = -kInf;
  EXPECT_EQ(Sampler(p).sample(logits), 2);
  p.logit_bias[0] = 10.f;
  EXPECT_EQ(Sampler(p).sample(logits), 0);
  p.logit_bias = {{0, -kInf}, {1, -kInf}, {2, -kInf}};
  const int32_t t = Sampler(p).sample(logits);  // all banned: still a valid id, no crash
  EXPECT_GE(t, 0);
  EXPECT_LT(t, 3);
}

TEST(Sampler, BannedTokenNeverDrawn) {
  SamplingParams p = plain();
  p.logit_bias[0] = -kInf;
  Sampler s(p);
  const std::vector<float> logits = {10, 0, 0};  // token 0 would win almost always
  for (int i = 0; i < 500; ++i) EXPECT_NE(s.sample(logits), 0);
}

// Logits 3, 2, 1, greedy, presence penalty 1.5: a seen token 0 drops to 1.5, below token 1.
std::vector<int32_t> greedy_run(int32_t last_n, bool accept_prompt = false) {
  SamplingParams p = plain();
  p.temperature = 0.f;
  p.presence_penalty = 1.5f;
  p.repeat_last_n = last_n;
  Sampler s(p);
  if (accept_prompt) s.accept(0);
  const std::vector<float> logits = {3, 2, 1};
  std::vector<int32_t> out;
  for (int i = 0; i < 4; ++i) out.push_back(s.sample(logits));
  return out;
}

TEST(Sampler, PenaltyWindow) {
  // last 64: after 0,1 both are penalized (1.5, 0.5, 1) and 0 wins from then on.
  EXPECT_EQ(greedy_run(64), (std::vector<int32_t>{0, 1, 0, 0}));
  // last 1: only the previous token is penalized, so the two alternate.
  EXPECT_EQ(greedy_run(1), (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(greedy_run(0), (std::vector<int32_t>{0, 0, 0, 0}));  // off
  EXPECT_EQ(greedy_run(-1), (std::vector<int32_t>{0, 1, 0, 0}));
  // A prompt token fed through accept() counts as seen.
  EXPECT_EQ(greedy_run(1, true), (std::vector<int32_t>{1, 0, 1, 0}));
}

TEST(Sampler, RepeatPenaltyChangesGreedyChoice) {
  SamplingParams p = plain();
  p.temperature = 0.f;
  p.repeat_penalty = 1.1f;
  Sampler s(p);
  const std::vector<float> logits = {2.f, 1.9f, 0.f};
  EXPECT_EQ(s.sample(logits), 0);
  EXPECT_EQ(s.sample(logits), 1);  // 2 / 1.1 = 1.818 < 1.9
  EXPECT_EQ(s.sample(logits), 0);  // 1.9 / 1.1 = 1.727 < 1.818
}

// min-p is relative to the untempered distribution (it runs before temperature): with min_p 0.3 two
// tokens survive even though temperature 10 would flatten all four above the threshold.
TEST(Sampler, ChainOrderMinPBeforeTemperature) {
  SamplingParams p = plain();
  p.min_p = 0.3f;
  p.temperature = 10.f;
  Sampler s(p);
  s.sample(halves());
  EXPECT_EQ(ids(s.last_candidates()), (std::vector<int32_t>{0, 1}));
}

// The chain's stages one by one in llama.cpp's order, after `history` was accepted: the candidates
// Sampler::sample must draw from (sorted, with their probabilities).
std::vector<Candidate> stages_by_hand(const std::vector<float>& logits, const SamplingParams& p,
                                      const std::vector<int32_t>& history) {
  auto c = make(logits);
  apply_logit_bias(c, p.logit_bias);
  apply_penalties(c, history, p.repeat_penalty, p.frequency_penalty, p.presence_penalty);
  drop_banned(c);
  sort_candidates(c);
  apply_top_k(c, p.top_k);
  apply_typical(c, p.typical_p);
  apply_top_p(c, p.top_p);
  apply_min_p(c, p.min_p);
  apply_temperature(c, p.temperature);
  softmax(c);
  return c;
}

// The chain applies its stages in llama.cpp's order: compare with the stages run by hand.
TEST(Sampler, ChainOrderMatchesManualStages) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(200);
    for (auto& l : logits) l = normal(gen);
    SamplingParams p;
    p.top_k = 50;
    p.typical_p = 0.9f;
    p.top_p = 0.8f;
    p.min_p = 0.05f;
    p.temperature = 0.7f;
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.1f;
    p.logit_bias = {{3, 2.f}, {4, -kInf}};
    p.seed = 99;
    Sampler s(p);
    const std::vector<int32_t> prompt = {3, 5, 5, 8, 13};
    for (int32_t t : prompt) s.accept(t);
    s.sample(logits);

    const auto c = stages_by_hand(logits, p, prompt);
    ASSERT_EQ(ids(s.last_candidates()), ids(c)) << "trial " << trial;
  }
}

// With top-k off the chain sorts only what top-p and min-p keep: the same candidates and draws as
// the stages run by hand over a whole vocabulary.
TEST(Sampler, TopKOffMatchesManualStages) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<float> logits(65536);
    for (auto& l : logits) l = normal(gen);
    SamplingParams p;
    p.top_k = trial % 2 ? 0 : 100000;  // off, or more than the row holds
    p.top_p = trial % 3 == 0 ? 1.f : 0.9f;
    p.min_p = trial % 4 < 2 ? 0.05f : 0.f;
    p.temperature = 0.8f;
    p.repeat_penalty = 1.1f;
    p.logit_bias = {{7, -kInf}, {9, 1.5f}};
    p.seed = 17 + uint64_t(trial);
    Sampler s(p);
    const std::vector<int32_t> prompt = {1, 2, 2, 40000};
    for (int32_t t : prompt) s.accept(t);
    const int32_t token = s.sample(logits);

    const auto c = stages_by_hand(logits, p, prompt);
    ASSERT_EQ(ids(s.last_candidates()), ids(c)) << "trial " << trial;
    // The same draw: the first uniform of the same seed over the same probabilities.
    std::mt19937_64 rng(p.seed);
    const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    double cum = 0;
    int32_t want = c.back().id;
    for (const auto& x : c)
      if (r < (cum += x.p)) {
        want = x.id;
        break;
      }
    EXPECT_EQ(token, want) << "trial " << trial;
  }
}

TEST(Sampler, SeedReproducesDraws) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> rows(300, std::vector<float>(64));
  for (auto& r : rows)
    for (auto& l : r) l = normal(gen);
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    p.repeat_penalty = 1.2f;
    p.typical_p = 0.95f;
    Sampler s(p);
    std::vector<int32_t> out;
    for (const auto& r : rows) out.push_back(s.sample(r));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, DrawFollowsDistribution) {
  SamplingParams p = plain();
  Sampler s(p);
  const std::vector<float> logits = {std::log(0.75f), std::log(0.25f)};
  int zeros = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) zeros += s.sample(logits) == 0;
  EXPECT_NEAR(double(zeros) / n, 0.75, 0.015);
}

TEST(Logprobs, RawLogitsByDefault) {
  SamplingParams p = plain();
  p.temperature = 0.f;
  p.n_probs = 2;
  p.logit_bias[0] = -kInf;  // the raw distribution ignores bias and the chain
  Sampler s(p);
  const SampledToken t = s.sample_with_probs(halves());
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.25), 1e-5);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].id, 0);
  EXPECT_NEAR(t.top[0].logprob, std::log(0.5), 1e-5);
  EXPECT_EQ(t.top[1].id, 1);
  EXPECT_NEAR(t.top[1].logprob, std::log(0.25), 1e-5);
}

TEST(Logprobs, PostSampling) {
  SamplingParams p = plain();
  p.top_k = 2;
  p.n_probs = 5;
  p.post_sampling_probs = true;
  Sampler s(p);
  const SampledToken t = s.sample_with_probs(halves());
  // After top-k 2 the chain renormalizes 1/2, 1/4 to 2/3, 1/3; only those two are reported.
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].id, 0);
  EXPECT_NEAR(t.top[0].logprob, std::log(2.0 / 3), 1e-5);
  EXPECT_EQ(t.top[1].id, 1);
  EXPECT_NEAR(t.top[1].logprob, std::log(1.0 / 3), 1e-5);
  EXPECT_NEAR(t.logprob, t.id == 0 ? std::log(2.0 / 3) : std::log(1.0 / 3), 1e-5);

  p.temperature = 0.f;  // greedy: the drawn token had probability 1
  const SampledToken g = Sampler(p).sample_with_probs(halves());
  EXPECT_EQ(g.id, 0);
  EXPECT_NEAR(g.logprob, 0.0, 1e-6);
}

TEST(Logprobs, SameDrawsAsSample) {
  SamplingParams p;
  p.seed = 5;
  p.n_probs = 3;
  std::vector<float> logits = {0.1f, 0.5f, 0.2f, 0.9f, 0.3f};
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits), b.sample_with_probs(logits).id);
}

TEST(Logprobs, TopLogprobsTiesAndSize) {
  const std::vector<float> logits = {1, 2, 2, 0};
  auto top = top_logprobs(logits, 10);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  double sum = 0;
  for (auto& t : top) sum += std::exp(double(t.logprob));
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_TRUE(top_logprobs(logits, 0).empty());
}

}  // namespace
}  // namespace cera
