#include "backend/cpu/top_k.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cera/error.h"

namespace cera::cpu {

void check_top_k(const Tensor& t, int32_t k) {
  if (t.type != GgmlType::F32)
    throw Error(ErrorCode::InvalidArgument, "top_k_rows: the tensor must be F32");
  const int64_t limit = std::min<int64_t>(t.cols, Backend::kMaxTopK);
  if (k < 1 || k > limit)
    throw Error(ErrorCode::InvalidArgument,
                "top_k_rows: k = " + std::to_string(k) + " is outside 1.." + std::to_string(limit) +
                    " (at most the row width " + std::to_string(t.cols) + " and at most " +
                    std::to_string(Backend::kMaxTopK) + ")");
}

void top_k_row(const float* row, int64_t cols, int32_t k, float* values, int32_t* ids,
               std::vector<int32_t>& scratch) {
  scratch.clear();
  for (int64_t c = 0; c < cols; ++c)
    if (!std::isnan(row[c])) scratch.push_back(int32_t(c));
  // A strict total order on the non-NaN columns: larger value first, the smaller column on ties
  // (-0 and +0 are equal values, so the column decides between them).
  const auto before = [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  const size_t n = std::min(size_t(k), scratch.size());
  if (n < scratch.size()) std::nth_element(scratch.begin(), scratch.begin() + ptrdiff_t(n), scratch.end(), before);
  std::sort(scratch.begin(), scratch.begin() + ptrdiff_t(n), before);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = scratch[i];
    values[i] = row[scratch[i]];
  }
  for (size_t i = n; i < size_t(k); ++i) {
    ids[i] = -1;
    values[i] = std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace cera::cpu
