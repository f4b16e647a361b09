// The prefill attention's key-split plan (attention_prefill_plan.cpp): host arithmetic, so these run
// without a device. Whatever it picks, the ranges must cover every key of the longest row with
// none empty, start on key tiles, and fit the merge (one range per lane); it must leave launches
// that already fill the GPU, and short contexts, unsplit. The split kernel itself is checked
// against the CPU in cuda_attention_f16_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/ops.h"

namespace cera {
namespace {

using cuda::PrefillSplit;

void expect_valid(const PrefillSplit& s, int32_t max_keys) {
  if (s.splits <= 1) return;
  EXPECT_LE(s.splits, cuda::kPrefillSplitMax);
  EXPECT_EQ(s.split_keys % cuda::kPrefillSplitAlign, 0) << s.split_keys;
  EXPECT_GE(int64_t(s.splits) * s.split_keys, max_keys) << "the ranges miss keys";
  EXPECT_LT(int64_t(s.splits - 1) * s.split_keys, max_keys) << "the last range is empty";
}

TEST(AttentionPrefillPlan, ShortStepsOverALongContextSplitTheirKeys) {
  // Chat turns after 4,096 tokens of history on an H200 (132 SMs, 2 blocks an SM: a wave of 264):
  // 512 tokens are 16 tiles × 8 KV heads = 128 blocks, 128 tokens 32 blocks. The ranges fill one
  // wave and no more.
  constexpr int64_t kWave = 264;
  for (const int64_t blocks : {8, 16, 32, 64, 128}) {
    const PrefillSplit s = cuda::plan_prefill_key_splits(blocks, 4608, kWave);
    EXPECT_GT(s.splits, 1) << blocks << " blocks";
    EXPECT_LE(s.splits * blocks, kWave) << blocks << " blocks";
    expect_valid(s, 4608);
  }
  EXPECT_EQ(cuda::plan_prefill_key_splits(128, 4608, kWave).splits, 2);
  EXPECT_EQ(cuda::plan_prefill_key_splits(32, 4608, kWave).splits, 8);
  // A single tile over 32k keys takes as many ranges as the merge allows.
  const PrefillSplit one_tile = cuda::plan_prefill_key_splits(1, 32768, kWave);
  EXPECT_EQ(one_tile.splits, cuda::kPrefillSplitMax);
  expect_valid(one_tile, 32768);
}

TEST(AttentionPrefillPlan, LaunchesThatFillTheGpuOrShortContextsStayWhole) {
  EXPECT_EQ(cuda::plan_prefill_key_splits(1024, 8192, 264).splits, 1);  // a 4,096-token prompt
  EXPECT_EQ(cuda::plan_prefill_key_splits(200, 8192, 264).splits, 1);   // two ranges: past one wave
  EXPECT_EQ(cuda::plan_prefill_key_splits(8, 300, 264).splits, 1);      // too few keys to share
  EXPECT_EQ(cuda::plan_prefill_key_splits(8, 0, 264).splits, 1);
  EXPECT_EQ(cuda::plan_prefill_key_splits(0, 4096, 264).splits, 1);
  // Ranges never get shorter than kPrefillMinSplitKeys (before rounding to key tiles).
  for (int32_t keys = 1; keys <= 5000; keys += 37) {
    const PrefillSplit s = cuda::plan_prefill_key_splits(1, keys, 264);
    expect_valid(s, keys);
    EXPECT_LE(s.splits, std::max<int32_t>(1, keys / cuda::kPrefillMinSplitKeys)) << keys;
  }
}

TEST(AttentionPrefillPlan, ForcedRangesCoverTheKeys) {
  for (int32_t keys : {1, 63, 64, 65, 337, 1000, 4096, 100000})
    for (int32_t forced : {1, 2, 3, 5, 7, 31, 32, 33, 1000}) {
      const PrefillSplit s = cuda::plan_prefill_key_splits(100000, keys, 264, forced);
      expect_valid(s, keys);
      const int32_t want = std::min(forced, cuda::kPrefillSplitMax);
      EXPECT_LE(s.splits, want) << keys << " keys, forced " << forced;
      // As short as the alignment allows: one key tile less and `want` ranges would miss keys.
      if (s.splits > 1)
        EXPECT_LT(int64_t(s.split_keys - cuda::kPrefillSplitAlign) * want, keys) << keys << " keys, forced " << forced;
      else
        EXPECT_TRUE(want == 1 || keys <= cuda::kPrefillSplitAlign) << keys << " keys, forced " << forced;
    }
}

}  // namespace
}  // namespace cera
