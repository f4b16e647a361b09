// The weight quantizers reproduce llama.cpp's byte for byte: every quantized tensor of the fixture
// GGUFs (written by llama-quantize from the BF16 file without an importance matrix, Q8_0 files by
// convert_hf_to_gguf.py's numpy quantizer) is re-quantized here from the BF16 fixture's tensor
// (BF16 -> f32 is exact) with quantize_row_ref and compared block by block.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "support/fixtures.h"

namespace cera::quant {
namespace {

struct FileCase {
  const char* model;
  const char* file_type;  // the fixture's suffix: lfm2-tiny-<file_type>.gguf
};

bool is_block_quant(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

struct Tally {
  int64_t blocks = 0, identical = 0;
};

class LlamaCppBytes : public ::testing::TestWithParam<FileCase> {};

TEST_P(LlamaCppBytes, EveryQuantizedTensorMatches) {
  const FileCase c = GetParam();
  const std::string dir = std::string("models/") + c.model + "/gguf/" + c.model;
  const auto src = gguf::File::open(test::fixture_path(dir + "-BF16.gguf"));
  const auto ref = gguf::File::open(test::fixture_path(dir + "-" + c.file_type + ".gguf"));

  std::map<std::string, Tally> per_type;  // by ggml type name, for the report
  int quantized_tensors = 0;
  for (const auto& t : ref->tensors()) {
    if (!is_block_quant(t.type)) continue;
    ++quantized_tensors;
    const gguf::TensorInfo& s = src->tensor(t.name);
    ASSERT_EQ(s.type, GgmlType::BF16) << t.name;
    ASSERT_EQ(s.n_elements(), t.n_elements()) << t.name;
    std::vector<float> x(size_t(s.n_elements()));
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, s.data + 2 * i, 2);
      x[i] = bf16_to_f32(h);
    }
    std::vector<uint8_t> ours(t.nbytes);
    ASSERT_EQ(ggml_row_bytes(t.type, t.n_elements()), t.nbytes) << t.name;
    quantize_row_ref(t.type, x.data(), ours.data(), t.n_elements());

    const size_t block_bytes = ggml_traits(t.type).block_bytes;
    Tally& tally = per_type[std::string(ggml_type_name(t.type))];
    int64_t first_diff = -1;
    for (size_t b = 0; b < t.nbytes / block_bytes; ++b) {
      ++tally.blocks;
      if (std::memcmp(ours.data() + b * block_bytes, t.data + b * block_bytes, block_bytes) == 0)
        ++tally.identical;
      else if (first_diff < 0)
        first_diff = int64_t(b);
    }
    EXPECT_EQ(first_diff, -1) << t.name << " (" << ggml_type_name(t.type) << "): first differing block " << first_diff;
  }
  EXPECT_GT(quantized_tensors, 0);
  for (const auto& [type, tally] : per_type)
    std::printf("[ %s-%s ] %s: %lld/%lld blocks identical (%.4f%%)\n", c.model, c.file_type, type.c_str(),
                (long long)tally.identical, (long long)tally.blocks, 100.0 * double(tally.identical) / double(tally.blocks));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LlamaCppBytes,
    ::testing::Values(FileCase{"lfm2-tiny", "Q8_0"}, FileCase{"lfm2-tiny", "Q4_0"}, FileCase{"lfm2-tiny", "Q4_1"},
                      FileCase{"lfm2-tiny", "Q5_0"}, FileCase{"lfm2-tiny", "Q5_1"}, FileCase{"lfm2-tiny", "Q6_K"},
                      FileCase{"lfm2-tiny", "Q5_K_M"}, FileCase{"lfm2-tiny", "Q4_K_M"},
                      FileCase{"lfm2-tiny", "Q3_K_M"}, FileCase{"lfm2-tiny", "Q2_K"},
                      FileCase{"llama-tiny", "Q8_0"}, FileCase{"llama-tiny", "Q4_K_M"},
                      FileCase{"qwen2-tiny", "Q8_0"}, FileCase{"qwen2-tiny", "Q4_K_M"},
                      FileCase{"qwen3-tiny", "Q8_0"}, FileCase{"qwen3-tiny", "Q4_K_M"}),
    [](const auto& info) {
      std::string name = std::string(info.param.model) + "_" + info.param.file_type;
      for (char& ch : name)
        if (ch == '-') ch = '_';
      return name;
    });

}  // namespace
}  // namespace cera::quant
