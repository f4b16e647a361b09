#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace cera {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

static bool by_logit_desc(const Candidate& a, const Candidate& b) { return a.logit > b.logit; }

void sort_candidates(std::vector<Candidate>& c) { std::stable_sort(c.begin(), c.end(), by_logit_desc); }

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

void apply_typical(std::vector<Candidate>& c, float p) {
  if (p >= 1.f || c.size() <= 1) return;
  softmax(c);
  double entropy = 0;
  for (const auto& x : c)
    if (x.p > 0) entropy -= double(x.p) * std::log(double(x.p));
  // Distance of each token's surprisal from the entropy; the most "typical" tokens come first.
  std::vector<std::pair<double, size_t>> order(c.size());
  for (size_t i = 0; i < c.size(); ++i) order[i] = {std::fabs(-std::log(double(c[i].p)) - entropy), i};
  // Stable: equally typical tokens stay in logit order, so the result does not depend on the library.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double cum = 0;
  size_t keep = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    cum += c[order[i].second].p;
    if (cum > p) {  // strictly above, as llama.cpp (top-p uses >=)
      keep = i + 1;
      break;
    }
  }
  std::vector<Candidate> kept;
  kept.reserve(keep);
  for (size_t i = 0; i < keep; ++i) kept.push_back(c[order[i].second]);
  sort_candidates(kept);
  c = std::move(kept);
}

// The candidate with this id: direct when the list is still indexed by id, else a scan.
static Candidate* find_candidate(std::vector<Candidate>& c, int32_t id) {
  if (id < 0) return nullptr;
  if (size_t(id) < c.size() && c[size_t(id)].id == id) return &c[size_t(id)];
  for (auto& x : c)
    if (x.id == id) return &x;
  return nullptr;
}

void apply_logit_bias(std::vector<Candidate>& c, const std::map<int32_t, float>& bias) {
  for (const auto& [id, b] : bias)
    if (Candidate* x = find_candidate(c, id)) x->logit += b;
}

void apply_penalties(std::vector<Candidate>& c, std::span<const int32_t> last_tokens, float repeat,
                     float frequency, float presence) {
  if (last_tokens.empty() || (repeat == 1.f && frequency == 0.f && presence == 0.f)) return;
  std::unordered_map<int32_t, int32_t> counts;
  for (int32_t t : last_tokens) ++counts[t];
  for (const auto& [id, n] : counts) {
    Candidate* x = find_candidate(c, id);
    if (!x) continue;
    // Dividing a negative logit would make the token *more* likely; multiply it instead.
    if (x->logit <= 0.f)
      x->logit *= repeat;
    else
      x->logit /= repeat;
    x->logit -= float(n) * frequency + presence;
  }
}

void drop_banned(std::vector<Candidate>& c) {
  const float ninf = -std::numeric_limits<float>::infinity();
  auto keep_end = std::remove_if(c.begin(), c.end(), [&](const Candidate& x) { return x.logit == ninf; });
  if (keep_end == c.begin()) return;  // everything banned: leave the list as it is, never empty
  c.erase(keep_end, c.end());
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  std::vector<TokenLogprob> out;
  if (logits.empty() || n <= 0) return out;
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - max_logit);
  const double lse = max_logit + std::log(sum);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  const size_t k = std::min(size_t(n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) out.push_back({ids[i], float(double(logits[size_t(ids[i])]) - lse)});
  return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  seed_ = params.seed == 0xFFFFFFFFu ? std::random_device{}() : params.seed;
  rng_.seed(seed_);
}

void Sampler::accept(int32_t token) {
  const int32_t last_n = params_.repeat_last_n;
  if (last_n == 0) return;
  history_.push_back(token);
  if (last_n > 0)
    while (history_.size() > size_t(last_n)) history_.pop_front();
}

int32_t Sampler::run_chain(std::span<const float> logits) {
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {int32_t(i), logits[i], 0.f};
  if (candidates_.empty()) return -1;
  if (!params_.logit_bias.empty()) apply_logit_bias(candidates_, params_.logit_bias);
  if (params_.repeat_last_n != 0 && !history_.empty()) {
    history_flat_.assign(history_.begin(), history_.end());
    apply_penalties(candidates_, history_flat_, params_.repeat_penalty, params_.frequency_penalty,
                    params_.presence_penalty);
  }
  drop_banned(candidates_);
  if (params_.temperature <= 0.f) {
    // Greedy: llama.cpp's temperature stage keeps only the (first) maximum; the filters before it
    // never remove the maximum, so they are skipped.
    size_t best = 0;
    for (size_t i = 1; i < candidates_.size(); ++i)
      if (candidates_[i].logit > candidates_[best].logit) best = i;
    candidates_ = {{candidates_[best].id, candidates_[best].logit, 1.f}};
    return candidates_[0].id;
  }
  // top-k first on the unsorted list keeps the sort cheap for 65k–150k vocabularies.
  if (params_.top_k > 0 && size_t(params_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit_desc);
    candidates_.resize(size_t(params_.top_k));
  } else {
    sort_candidates(candidates_);
  }
  apply_typical(candidates_, params_.typical_p);
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

int32_t Sampler::sample(std::span<const float> logits) {
  const int32_t id = run_chain(logits);
  if (id >= 0) accept(id);
  return id;
}

SampledToken Sampler::sample_with_probs(std::span<const float> logits) {
  SampledToken out;
  out.id = run_chain(logits);
  if (out.id < 0) return out;
  if (params_.post_sampling_probs) {
    for (const auto& x : candidates_)
      if (x.id == out.id) out.logprob = std::log(x.p);
    const size_t k = std::min(size_t(std::max(params_.n_probs, 0)), candidates_.size());
    for (size_t i = 0; i < k; ++i) out.top.push_back({candidates_[i].id, std::log(candidates_[i].p)});
  } else {
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - max_logit);
    out.logprob = float(double(logits[size_t(out.id)]) - max_logit - std::log(sum));
    out.top = top_logprobs(logits, params_.n_probs);
  }
  accept(out.id);
  return out;
}

}  // namespace cera
