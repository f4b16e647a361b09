// Sampling parameters, with llama.cpp's defaults and semantics (the comments name its CLI flags).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace cera {

struct SamplingParams {
  float temperature = 0.8f;  // --temp; <= 0: greedy (argmax after logit bias and penalties)
  int32_t top_k = 40;        // --top-k; <= 0: off
  float top_p = 0.95f;       // --top-p; >= 1: off
  float min_p = 0.05f;       // --min-p; <= 0: off
  uint64_t seed = 0xFFFFFFFFu;  // 0xFFFFFFFF (llama.cpp's LLAMA_DEFAULT_SEED): a random seed
  float typical_p = 1.0f;       // --typical; >= 1: off (locally typical sampling)
  // Penalties over the last repeat_last_n tokens the sampler saw (Sampler::accept and its own draws).
  int32_t repeat_last_n = 64;     // --repeat-last-n; 0: off, -1: every token seen
  float repeat_penalty = 1.0f;    // --repeat-penalty; 1: off. Positive logits / it, negative ones * it
  float presence_penalty = 0.0f;  // --presence-penalty; subtracted once from every seen token
  float frequency_penalty = 0.0f; // --frequency-penalty; subtracted once per occurrence
  // --logit-bias TOKEN(+|-)BIAS: added to the token's logit before anything else; -INFINITY bans it.
  std::map<int32_t, float> logit_bias;
  // --n-probs / the server's n_probs: how many top alternatives to report per token (0: none).
  // post_sampling_probs = false (llama-server's default): log-softmax of the raw logits, before bias,
  // penalties and the sampler chain. true: the probabilities after the whole chain (what the draw
  // used; tokens the chain removed are absent).
  int32_t n_probs = 0;
  bool post_sampling_probs = false;
};

struct TokenLogprob {
  int32_t id;
  float logprob;  // natural log
};

// A drawn token with its log-probability and, when n_probs > 0, the n_probs most likely tokens
// (descending), under the distribution SamplingParams::post_sampling_probs selects.
struct SampledToken {
  int32_t id = -1;
  float logprob = 0.f;
  std::vector<TokenLogprob> top;
};

}  // namespace cera
