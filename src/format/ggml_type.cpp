#include "format/ggml_type.h"

#include <array>
#include <cctype>

#include "cera/error.h"

namespace cera {
namespace {

constexpr std::array kTypes = {
    GgmlTypeTraits{GgmlType::F32, "f32", 1, 4, true},
    GgmlTypeTraits{GgmlType::F16, "f16", 1, 2, true},
    GgmlTypeTraits{GgmlType::Q4_0, "q4_0", 32, 18, true},
    GgmlTypeTraits{GgmlType::Q4_1, "q4_1", 32, 20, true},
    GgmlTypeTraits{GgmlType::Q5_0, "q5_0", 32, 22, true},
    GgmlTypeTraits{GgmlType::Q5_1, "q5_1", 32, 24, true},
    GgmlTypeTraits{GgmlType::Q8_0, "q8_0", 32, 34, true},
    GgmlTypeTraits{GgmlType::Q8_1, "q8_1", 32, 36, false},
    GgmlTypeTraits{GgmlType::Q2_K, "q2_K", 256, 84, true},
    GgmlTypeTraits{GgmlType::Q3_K, "q3_K", 256, 110, true},
    GgmlTypeTraits{GgmlType::Q4_K, "q4_K", 256, 144, true},
    GgmlTypeTraits{GgmlType::Q5_K, "q5_K", 256, 176, true},
    GgmlTypeTraits{GgmlType::Q6_K, "q6_K", 256, 210, true},
    GgmlTypeTraits{GgmlType::Q8_K, "q8_K", 256, 292, false},
    GgmlTypeTraits{GgmlType::I8, "i8", 1, 1, false},
    GgmlTypeTraits{GgmlType::I16, "i16", 1, 2, false},
    GgmlTypeTraits{GgmlType::I32, "i32", 1, 4, false},
    GgmlTypeTraits{GgmlType::I64, "i64", 1, 8, false},
    GgmlTypeTraits{GgmlType::F64, "f64", 1, 8, false},
    GgmlTypeTraits{GgmlType::BF16, "bf16", 1, 2, true},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& t : kTypes)
    if (uint32_t(t.type) == id) return t;
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t;
  throw Error(ErrorCode::Internal, "ggml type id " + std::to_string(uint32_t(type)) + " has no traits");
}

std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same = same && std::tolower((unsigned char)name[i]) == std::tolower((unsigned char)t.name[i]);
    if (same) return t.type;
  }
  return std::nullopt;
}

}  // namespace cera
