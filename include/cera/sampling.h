// Sampling parameters, with llama.cpp's defaults and semantics.
#pragma once

#include <cstdint>

namespace cera {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy (argmax)
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  uint64_t seed = 0xFFFFFFFFu;  // 0xFFFFFFFF (llama.cpp's LLAMA_DEFAULT_SEED): a random seed
};

}  // namespace cera
