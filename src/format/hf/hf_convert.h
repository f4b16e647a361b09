// Hugging Face folder -> GGUF, writing what llama.cpp's convert_hf_to_gguf.py writes for the same
// folder: general.* keys, {arch}.* keys, tokenizer keys, and the tensors with the converter's
// names, shapes, order and types (norms, 1-D tensors and the LFM2 conv kernel in F32; the rest in
// the chosen type). MODELS.md §3–§6.
#pragma once

#include <string>

#include "format/gguf.h"

namespace cera::hf {

// kKeep keeps the stored float type (the first matrix's dtype: BF16, F16 or F32) — what loading a
// folder directly uses, so BF16 weights stay BF16.
enum class OutType { kKeep, kF32, kF16, kBF16, kQ8_0 };
OutType parse_out_type(const std::string& s);  // "f32" | "f16" | "bf16" | "q8_0" | "keep"; throws

// Throws cera::Error naming the problem: no config.json, an unknown architecture, a missing
// tensor or weight file, an unsupported tokenizer.
gguf::Writer convert(const std::string& dir, OutType type = OutType::kKeep);

}  // namespace cera::hf
