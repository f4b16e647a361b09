// Turns a row of logits into a token with llama.cpp's default chain, so the same flags mean the same
// thing: logit bias → penalties → top-k → typical → top-p → min-p → temperature → a seeded draw
// (temperature <= 0: argmax after bias and penalties).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "cera/sampling.h"

namespace cera {

struct Candidate {
  int32_t id;
  float logit;
  float p;
};

// The stages, exposed so each can be tested on crafted logits. The filters keep candidates sorted
// by logit, descending, and never empty the list.
void sort_candidates(std::vector<Candidate>& c);
void softmax(std::vector<Candidate>& c);  // sets p from logit (expects the list sorted)
void apply_top_k(std::vector<Candidate>& c, int32_t k);
void apply_top_p(std::vector<Candidate>& c, float p);
void apply_min_p(std::vector<Candidate>& c, float min_p);
// A list in any order sorted, then apply_top_p and apply_min_p, sorting only the candidates those
// can keep: min-p keeps the logits ≥ max + ln(min_p), top-p the shortest prefix whose mass reaches
// top_p, so with top-k off over a 65k-150k vocabulary a few linear passes and a short sort replace
// sorting the whole row. The mass is normalised by softmax's sum over every candidate, taken in list
// order instead of rank order: the same sum to within double rounding.
void sort_top_p_min_p(std::vector<Candidate>& c, float top_p, float min_p);
void apply_temperature(std::vector<Candidate>& c, float temperature);
// Locally typical sampling: keeps the tokens whose surprisal -log p is closest to the entropy until
// their mass exceeds p, then re-sorts by logit.
void apply_typical(std::vector<Candidate>& c, float p);
// These two work on any order; they are cheapest on a list where c[i].id == i (the full vocabulary).
void apply_logit_bias(std::vector<Candidate>& c, const std::map<int32_t, float>& bias);
void apply_penalties(std::vector<Candidate>& c, std::span<const int32_t> last_tokens, float repeat,
                     float frequency, float presence);
// Drops candidates whose logit is -inf (banned by a bias), keeping at least one, so later stages
// never see a zero-probability token (typical's entropy would turn NaN).
void drop_banned(std::vector<Candidate>& c);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Draws a token and records it in the penalty history.
  int32_t sample(std::span<const float> logits);
  // Same draw (same random stream), plus log-probabilities as params.n_probs asks.
  SampledToken sample_with_probs(std::span<const float> logits);

  // Sampling from a row's largest logits only (Backend::top_k_rows), when that draws exactly what
  // sample() on the full row draws. The full row's top-k (1 when greedy) under bias and penalties
  // is always among its top_k + m raw largest logits, where m counts the tokens bias and penalties
  // lower; one they could raise (a positive bias, repeat < 1, a negative frequency or presence
  // penalty) may come from anywhere. Log-probabilities over the full row and grammars are the
  // caller's to exclude.
  //
  // How many of the row's largest logits the next draw needs: top_k (1 when greedy) plus the
  // tokens with a negative bias or in the penalty history; 0 when it needs the full row (top-k off
  // while sampling, or an adjustment that can raise a logit).
  int32_t top_candidates_needed() const;
  // sample() from the row's n largest logits in Backend::top_k_rows' form (value descending, the
  // smaller id first on ties; id -1 past the row's non-NaN values), n ≥ top_candidates_needed():
  // the same token, random draw, last_candidates() and history as sample() on the full row (for
  // rows without NaN). Returns -1, drawing nothing and recording nothing, when they cannot decide
  // (bias and penalties leave none of them above -inf): then call sample() with the full row.
  int32_t sample_top(std::span<const float> values, std::span<const int32_t> ids);
  // Records a token the sampler did not draw itself (prompt tokens, a forced token) in the penalty
  // history, as llama.cpp's common_sampler_accept does.
  void accept(int32_t token);
  void reset_history() { history_.clear(); }
  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  // The candidates the last draw chose from, with their probabilities (sorted, descending).
  const std::vector<Candidate>& last_candidates() const { return candidates_; }

 private:
  int32_t run_chain(std::span<const float> logits);
  // Bias and penalties on candidates_ (any order), then drop_banned.
  void adjust_candidates();
  // The chain after adjust_candidates: greedy, or top-k → typical → top-p → min-p → temperature
  // and the draw. Needs only the candidates that can make the top-k (ties: the smaller id first).
  int32_t finish_chain();
  // Temperature, softmax and the seeded draw over candidates_ (sorted, filtered).
  int32_t draw();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  std::deque<int32_t> history_;
  std::vector<int32_t> history_flat_;
};

int32_t argmax(std::span<const float> logits);

// Log-softmax of raw logits, the n most likely (descending); ties keep the lower id first.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

}  // namespace cera
