// The fixture models under ../shared/fixtures/models: their prompts, files and llama.cpp's own
// error per file (the table in the fixtures README), shared by the parity suites.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cera::test {

struct FixturePrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;  // HF generate(), 16 tokens
};

std::vector<FixturePrompt> load_fixture_prompts(const std::string& model);  // e.g. "lfm2-tiny"
std::string fixture_gguf(const std::string& model, const std::string& type);  // ".../lfm2-tiny-Q4_0.gguf"

// Writes a copy of a GGUF with every tensor dequantized to F32 (scalar reference dequantizers) and
// returns its path: the same weights computed exactly, to separate weight error from arithmetic.
std::string dequantized_f32_copy(const std::string& gguf_path);

}  // namespace cera::test
