// What the fixture parity suites share (CPU: tests/model, CUDA: tests/backend_cuda): the fixture
// files with llama.cpp's own error per file (the fixtures README table), and logits of every prompt
// at every position through the public API. Header-only: the format tests link the support library
// without the engine.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "cera/engine.h"
#include "format/safetensors.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"
#include "support/logits.h"

namespace cera::test {

struct FixtureFile {
  const char* model;
  const char* type;
  double llamacpp_rel_rms;  // llama.cpp's own error vs HF (fixtures README table)
  bool is_float;
};

inline constexpr FixtureFile kFixtureFiles[] = {
    {"lfm2-tiny", "BF16", 1.17e-2, true},    {"lfm2-tiny", "F16", 4.54e-3, true},
    {"lfm2-tiny", "Q8_0", 6.25e-2, false},   {"lfm2-tiny", "Q6_K", 0.160, false},
    {"lfm2-tiny", "Q5_K_M", 0.275, false},   {"lfm2-tiny", "Q5_0", 0.299, false},
    {"lfm2-tiny", "Q5_1", 0.299, false},     {"lfm2-tiny", "Q4_K_M", 0.476, false},
    {"lfm2-tiny", "Q4_0", 0.556, false},     {"lfm2-tiny", "Q4_1", 0.513, false},
    {"lfm2-tiny", "Q3_K_M", 0.808, false},   {"lfm2-tiny", "Q2_K", 1.137, false},
    {"llama-tiny", "BF16", 5.95e-3, true},   {"llama-tiny", "Q8_0", 3.28e-2, false},
    {"llama-tiny", "Q4_K_M", 0.301, false},  {"qwen2-tiny", "BF16", 6.14e-3, true},
    {"qwen2-tiny", "Q8_0", 3.33e-2, false},  {"qwen2-tiny", "Q4_K_M", 0.270, false},
    {"qwen3-tiny", "BF16", 6.41e-3, true},   {"qwen3-tiny", "Q8_0", 3.42e-2, false},
    {"qwen3-tiny", "Q4_K_M", 0.284, false},
};

// gtest prints parameters with this (instead of the struct's raw bytes).
inline void PrintTo(const FixtureFile& f, std::ostream* os) { *os << f.model << " " << f.type; }

// llama.cpp's BF16 row for a model: the bound of reduced-precision (GPU) paths on its float files.
inline double llamacpp_bf16_rel_rms(const std::string& model) {
  for (const auto& f : kFixtureFiles)
    if (model == f.model && std::string(f.type) == "BF16") return f.llamacpp_rel_rms;
  return 0;
}

inline std::string fixture_case_name(const FixtureFile& c) {
  std::string s = std::string(c.model) + "_" + c.type;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

// Logits of every prompt at every position, concatenated.
inline std::vector<float> prompt_logits(Engine& engine, const std::vector<FixturePrompt>& prompts) {
  std::vector<float> out;
  for (const auto& p : prompts) {
    auto session = engine.new_session();
    session->append(p.ids, /*all_logits=*/true);
    out.insert(out.end(), session->logits().begin(), session->logits().end());
  }
  return out;
}

// A reference file's logits (ref/hf.safetensors, ref/llamacpp-TYPE.safetensors), concatenated.
inline std::vector<float> reference_logits(const std::string& model, const std::string& file, size_t n_prompts) {
  const auto ref = safetensors::File::open(fixture_path("models/" + model + "/ref/" + file));
  std::vector<float> out;
  for (size_t i = 0; i < n_prompts; ++i) {
    const auto v = ref->get("p" + std::to_string(i) + ".logits").to_f32();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline double rel_rms(const std::vector<float>& ours, const std::vector<float>& ref) {
  RelRms r;
  r.add(ours, ref);
  return r.value();
}

}  // namespace cera::test
