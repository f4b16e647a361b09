// How many key ranges a prefill attention launch splits each row's keys into (ops.h PrefillSplit).
// Pure arithmetic on the launch's shape, so CI tests it without a device.
#include <algorithm>

#include "backend/cuda/ops.h"

namespace cera::cuda {
namespace {

int32_t round_up(int32_t x, int32_t to) { return (x + to - 1) / to * to; }

// Ranges of equal length, a multiple of kPrefillSplitAlign, that cover max_keys with none empty for
// the longest row.
PrefillSplit even_ranges(int32_t max_keys, int32_t want) {
  const int32_t split_keys = round_up((max_keys + want - 1) / want, kPrefillSplitAlign);
  const int32_t splits = (max_keys + split_keys - 1) / split_keys;
  if (splits <= 1) return {};
  return {splits, split_keys};
}

}  // namespace

// As many ranges as keep the launch within one wave of resident blocks: on an H200 a prefill
// launch at depth 4096 ran fastest with ranges × blocks ≈ one wave (2 blocks an SM of every f16
// variant measured), a wave and a half being slower than one (BENCHMARKS.md, "prefill at depth").
PrefillSplit plan_prefill_key_splits(int64_t blocks, int32_t max_keys, int64_t wave_blocks, int32_t forced) {
  if (max_keys <= 0 || blocks <= 0) return {};
  if (forced > 0) return even_ranges(max_keys, std::min(forced, kPrefillSplitMax));
  const int64_t by_wave = wave_blocks / blocks;
  const int64_t by_keys = max_keys / kPrefillMinSplitKeys;
  const int64_t want = std::min({by_wave, by_keys, int64_t(kPrefillSplitMax)});
  if (want <= 1) return {};
  return even_ranges(max_keys, int32_t(want));
}

}  // namespace cera::cuda
