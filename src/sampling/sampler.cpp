#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace cera {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void sort_candidates(std::vector<Candidate>& c) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
}

void softmax(std::vector<Candidate>& c) {
  if (c.empty()) return;
  const float max_logit = c.front().logit;  // sorted
  double sum = 0;
  for (auto& x : c) sum += (x.p = std::exp(x.logit - max_logit));
  for (auto& x : c) x.p = float(x.p / sum);
}

void apply_top_k(std::vector<Candidate>& c, int32_t k) {
  if (k > 0 && size_t(k) < c.size()) c.resize(size_t(k));
}

void apply_top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.empty()) return;
  softmax(c);
  // Keep the smallest prefix whose probability mass reaches p (at least one token).
  double cum = 0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void apply_min_p(std::vector<Candidate>& c, float min_p) {
  if (min_p <= 0.f || c.empty()) return;
  // Relative to the most likely token: p_i >= min_p * p_max  <=>  logit_i >= logit_max + ln(min_p).
  const float threshold = c.front().logit + std::log(min_p);
  size_t keep = 1;
  while (keep < c.size() && c[keep].logit >= threshold) ++keep;
  c.resize(keep);
}

void apply_temperature(std::vector<Candidate>& c, float temperature) {
  for (auto& x : c) x.logit /= temperature;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  seed_ = params.seed == 0xFFFFFFFFu ? std::random_device{}() : params.seed;
  rng_.seed(seed_);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature <= 0.f) return argmax(logits);
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {int32_t(i), logits[i], 0.f};
  // top-k first on the unsorted list keeps the sort cheap for 65k–150k vocabularies.
  if (params_.top_k > 0 && size_t(params_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(),
                      [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
    candidates_.resize(size_t(params_.top_k));
  } else {
    sort_candidates(candidates_);
  }
  apply_top_p(candidates_, params_.top_p);
  apply_min_p(candidates_, params_.min_p);
  apply_temperature(candidates_, params_.temperature);
  softmax(candidates_);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double r = uniform(rng_);
  double cum = 0;
  for (const auto& x : candidates_) {
    cum += x.p;
    if (r < cum) return x.id;
  }
  return candidates_.back().id;
}

}  // namespace cera
