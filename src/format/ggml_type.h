// The GGML tensor types cera knows (ids as in GGUF files) and their block geometry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cera {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_elems;    // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool weight_type;       // cera can compute with it as a weight (has a dequantizer + kernels)
};

// Traits for a type id read from a file; nullopt for an id cera does not know.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType type);  // for a known enum value
std::string_view ggml_type_name(GgmlType type);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // case-insensitive

// Bytes of one row of n elements (n must be a multiple of block_elems).
inline size_t ggml_row_bytes(GgmlType type, int64_t n) {
  const auto& t = ggml_traits(type);
  return size_t(n / t.block_elems) * t.block_bytes;
}

}  // namespace cera
