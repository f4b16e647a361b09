// Backend::top_k_rows' argument check and reference selection, shared by the CPU backend (which
// is this) and the CUDA backend (which checks its arguments the same way).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace cera::cpu {

// Throws Error(InvalidArgument) unless t is F32 and 1 ≤ k ≤ min(t.cols, Backend::kMaxTopK).
void check_top_k(const Tensor& t, int32_t k);

// One row of Backend::top_k_rows: the k largest of row[0..cols) by value descending, then the
// smaller column; NaN never selected; slots past the row's non-NaN count get id -1 and value NaN.
// `scratch` is reused between calls (it grows to cols entries).
void top_k_row(const float* row, int64_t cols, int32_t k, float* values, int32_t* ids,
               std::vector<int32_t>& scratch);

}  // namespace cera::cpu
