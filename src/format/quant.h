// Scalar reference (de)quantizers for the GGML block formats (MODELS.md §2). These are the
// definition every SIMD kernel is tested against: plain loops, no intrinsics, no cleverness.
#pragma once

#include <cstdint>

#include "format/ggml_type.h"

namespace cera::quant {

// dst[0..n) = the values of n elements stored in `type` (n a multiple of the block size).
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes n floats into `type` blocks, with the same rounding rules as llama.cpp's reference
// quantizers (so activations quantized here carry the same noise as llama.cpp's).
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n);

bool can_dequantize(GgmlType type);
bool can_quantize(GgmlType type);

}  // namespace cera::quant
