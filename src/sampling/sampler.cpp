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

// A strict total order: the larger logit first, the smaller id on ties (what a stable sort of a list
// in id order gives, and Backend::top_k_rows' order), NaN after every number (so the sort stays
// well-defined on broken logits).
static bool by_logit_then_id(const Candidate& a, const Candidate& b) {
  const bool an = std::isnan(a.logit), bn = std::isnan(b.logit);
  if (an || bn) return an != bn ? bn : a.id < b.id;
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

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

void sort_top_p_min_p(std::vector<Candidate>& c, float top_p, float min_p) {
  // by_logit_then_id without its NaN cases: NaN rows take the plain stages below.
  const auto by_rank = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  float max_logit = -std::numeric_limits<float>::infinity();
  bool has_nan = false;
  for (const auto& x : c) {
    has_nan |= std::isnan(x.logit);
    max_logit = std::max(max_logit, x.logit);
  }
  if (has_nan || c.size() <= 1) {  // the plain stages: NaN ranks last, which a partition by logit would not keep
    std::sort(c.begin(), c.end(), by_logit_then_id);
    apply_top_p(c, top_p);
    apply_min_p(c, min_p);
    return;
  }
  // c[0, sorted) is the top of the list in rank order; the kept prefix is at most `limit` long.
  size_t sorted = 0, limit = c.size();
  auto sort_up_to = [&](size_t end) {
    if (end <= sorted) return;
    if (end < limit) std::nth_element(c.begin() + ptrdiff_t(sorted), c.begin() + ptrdiff_t(end), c.begin() + ptrdiff_t(limit), by_rank);
    std::sort(c.begin() + ptrdiff_t(sorted), c.begin() + ptrdiff_t(end), by_rank);
    sorted = end;
  };
  if (min_p > 0.f) {  // apply_min_p's threshold, from the same maximum; it always keeps the first
    const float threshold = max_logit + std::log(min_p);
    const auto above = std::partition(c.begin(), c.end(), [&](const Candidate& x) { return x.logit >= threshold; });
    limit = size_t(above - c.begin());
    if (limit == 0) {  // nothing reaches it (min_p > 1): the maximum alone
      std::partial_sort(c.begin(), c.begin() + 1, c.end(), by_rank);
      sorted = limit = 1;
    }
  }
  if (top_p < 1.f) {
    // softmax's arithmetic over the whole list, as apply_top_p runs before min-p; the sum is taken
    // in list order, not rank order (the same value to within double rounding).
    double sum = 0;
    for (auto& x : c) sum += (x.p = std::exp(x.logit - max_logit));
    double cum = 0;
    for (size_t i = 0; i < limit; ++i) {
      // 256 first, then 4,096, then the rest at once: a peaked row stops early, a flat one costs
      // about one sort of what min-p kept.
      if (i == sorted) sort_up_to(std::min(limit, sorted == 0 ? size_t(256) : sorted < 4096 ? size_t(4096) : limit));
      cum += float(c[i].p / sum);
      if (cum >= top_p) {
        limit = i + 1;
        break;
      }
    }
  }
  sort_up_to(limit);
  c.resize(limit);
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
  adjust_candidates();
  drop_banned(candidates_);
  return finish_chain();
}

void Sampler::adjust_candidates() {
  if (!params_.logit_bias.empty()) apply_logit_bias(candidates_, params_.logit_bias);
  if (params_.repeat_last_n != 0 && !history_.empty()) {
    history_flat_.assign(history_.begin(), history_.end());
    apply_penalties(candidates_, history_flat_, params_.repeat_penalty, params_.frequency_penalty,
                    params_.presence_penalty);
  }
}

int32_t Sampler::finish_chain() {
  if (params_.temperature <= 0.f) {
    // Greedy: llama.cpp's temperature stage keeps only the (first) maximum; the filters before it
    // never remove the maximum, so they are skipped.
    size_t best = 0;
    for (size_t i = 1; i < candidates_.size(); ++i)
      if (by_logit_then_id(candidates_[i], candidates_[best])) best = i;
    candidates_ = {{candidates_[best].id, candidates_[best].logit, 1.f}};
    return candidates_[0].id;
  }
  // top-k first on the unsorted list keeps the sort cheap for 65k–150k vocabularies. Ties go to the
  // smaller id, so the kept set never depends on the library or on the list's order.
  if (params_.top_k > 0 && size_t(params_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit_then_id);
    candidates_.resize(size_t(params_.top_k));
  } else if (params_.typical_p >= 1.f) {
    // Top-k off: sort only what top-p and min-p can keep. A full sort of a 65,536-token row took
    // ~9 ms a token on the GPU machine's host (`cera run --top-k 0`: 114 tokens/s where the device
    // decodes ~2,400).
    sort_top_p_min_p(candidates_, params_.top_p, params_.min_p);
    return draw();
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit_then_id);
  }
  apply_typical(candidates_, params_.typical_p);
  apply_top_p(candidates_, params_.top_p);
  apply_min_p(candidates_, params_.min_p);
  return draw();
}

int32_t Sampler::draw() {
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

int32_t Sampler::top_candidates_needed() const {
  int64_t n = params_.temperature <= 0.f ? 1 : params_.top_k;
  if (n <= 0) return 0;  // top-k off: every token may be drawn
  for (const auto& [id, b] : params_.logit_bias) {
    if (!(b <= 0.f)) return 0;  // raises a logit (or is NaN)
    if (b < 0.f) ++n;
  }
  const float repeat = params_.repeat_penalty, frequency = params_.frequency_penalty,
              presence = params_.presence_penalty;
  if (params_.repeat_last_n != 0 && !history_.empty() && !(repeat == 1.f && frequency == 0.f && presence == 0.f)) {
    // Dividing a positive logit by repeat ≥ 1, multiplying a non-positive one by it and subtracting
    // non-negative amounts never raise a logit (rounding is monotone); infinities could make NaN.
    if (!(repeat >= 1.f && frequency >= 0.f && presence >= 0.f) || std::isinf(repeat) || std::isinf(frequency) ||
        std::isinf(presence))
      return 0;
    std::vector<int32_t> seen(history_.begin(), history_.end());
    std::sort(seen.begin(), seen.end());
    n += std::unique(seen.begin(), seen.end()) - seen.begin();
  }
  return int32_t(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

int32_t Sampler::sample_top(std::span<const float> values, std::span<const int32_t> ids) {
  // Why this equals run_chain on the full row (without NaN): let K be top_k (1 when greedy) and A
  // the adjusted tokens. At least K of the given tokens are not in A, so they keep their logits; a
  // token y not given has a raw logit ≤ theirs (equal only with a larger id), and bias and
  // penalties only lower it, so y ranks below those K by (logit, id) and is never in the full row's
  // top K, unless they are -inf, when y is -inf too and drop_banned removes it on both paths. The
  // top K are then the same list in the same order, and the rest of the chain sees nothing else.
  candidates_.clear();
  for (size_t i = 0; i < values.size() && i < ids.size(); ++i)
    if (ids[i] >= 0) candidates_.push_back({ids[i], values[i], 0.f});
  adjust_candidates();
  const float ninf = -std::numeric_limits<float>::infinity();
  if (std::all_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.logit == ninf; })) {
    // Everything given is banned, so is the whole row: drop_banned keeps the full list then.
    candidates_.clear();
    return -1;
  }
  drop_banned(candidates_);
  const int32_t id = finish_chain();
  accept(id);
  return id;
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
