// Turns a row of logits into a token: greedy, or top-k → top-p → min-p → temperature → a draw
// from a seeded generator (llama.cpp's default chain order, so the same flags mean the same thing).
#pragma once

#include <cstdint>
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

// The stages, exposed so each can be tested on crafted logits. Each keeps candidates sorted by
// logit, descending, and never empties the list.
void sort_candidates(std::vector<Candidate>& c);
void softmax(std::vector<Candidate>& c);  // sets p from logit
void apply_top_k(std::vector<Candidate>& c, int32_t k);
void apply_top_p(std::vector<Candidate>& c, float p);
void apply_min_p(std::vector<Candidate>& c, float min_p);
void apply_temperature(std::vector<Candidate>& c, float temperature);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace cera
