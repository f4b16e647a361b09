// Comparing logits the way ../shared/tools/compare_logits.py does: rel_rms = ‖a−b‖₂/‖b‖₂ over
// every prompt and position together.
#pragma once

#include <cmath>
#include <span>

namespace cera::test {

struct RelRms {
  double num = 0, den = 0;
  void add(std::span<const float> ours, std::span<const float> ref) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = double(ours[i]) - ref[i];
      num += d * d;
      den += double(ref[i]) * ref[i];
    }
  }
  double value() const { return std::sqrt(num / den); }
};

}  // namespace cera::test
