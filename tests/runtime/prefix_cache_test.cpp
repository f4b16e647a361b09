#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace cera::runtime {
namespace {

std::vector<int32_t> tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<int32_t> take_blocks(BlockAllocator& a, int n) {
  std::vector<int32_t> b;
  for (int i = 0; i < n; ++i) b.push_back(*a.allocate());
  return b;
}

PrefixCacheConfig config(bool checkpoints) {
  PrefixCacheConfig c;
  c.block_size = 4;
  c.max_blocks = 100;
  c.n_checkpoint_slots = 8;
  c.needs_checkpoints = checkpoints;
  return c;
}

TEST(PrefixCache, MatchesWholeBlocksOfASharedPrefix) {
  BlockAllocator kv(32);
  PrefixCache cache(config(false), kv);
  const auto prompt = tokens(10);  // 2 whole blocks + 2 tokens
  const auto blocks = take_blocks(kv, 3);
  cache.insert(prompt, std::span(blocks).first(2));
  EXPECT_EQ(cache.n_blocks(), 2);
  EXPECT_EQ(kv.refcount(blocks[0]), 2);  // the sequence and the cache

  auto other = tokens(9);
  other[6] = 7;  // diverges inside the second block
  const auto m = cache.lookup(other, 1000);
  EXPECT_EQ(m.n_tokens, 4);
  ASSERT_EQ(m.kv_blocks.size(), 1u);
  EXPECT_EQ(m.kv_blocks[0], blocks[0]);
  EXPECT_EQ(kv.refcount(blocks[0]), 3);  // retained for the caller
  EXPECT_EQ(m.checkpoint, -1);
}

TEST(PrefixCache, MaxTokensLeavesSomethingToEvaluate) {
  BlockAllocator kv(32);
  PrefixCache cache(config(false), kv);
  const auto prompt = tokens(8);
  const auto blocks = take_blocks(kv, 2);
  cache.insert(prompt, blocks);
  EXPECT_EQ(cache.lookup(prompt, 7).n_tokens, 4);  // the identical prompt still keeps its last token
  EXPECT_EQ(cache.lookup(prompt, 8).n_tokens, 8);
}

TEST(PrefixCache, HybridModelsResumeOnlyAtCheckpoints) {
  BlockAllocator kv(32);
  PrefixCache cache(config(true), kv);
  const auto prompt = tokens(12);
  const auto blocks = take_blocks(kv, 3);
  cache.insert(prompt, blocks);
  EXPECT_EQ(cache.lookup(prompt, 100).n_tokens, 0) << "no checkpoint yet: nothing can be resumed";
  const auto slot = cache.checkpoint_slot_for(prompt, 8);
  ASSERT_TRUE(slot.has_value());
  EXPECT_FALSE(cache.checkpoint_slot_for(prompt, 8).has_value()) << "already has one";
  EXPECT_FALSE(cache.checkpoint_slot_for(prompt, 6).has_value()) << "not a block boundary";
  const auto m = cache.lookup(prompt, 100);
  EXPECT_EQ(m.n_tokens, 8);
  EXPECT_EQ(m.checkpoint, *slot);
  EXPECT_EQ(m.kv_blocks.size(), 2u);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesAndReleasesTheirBlocks) {
  BlockAllocator kv(32);
  auto c = config(false);
  c.max_blocks = 4;
  PrefixCache cache(c, kv);
  const auto a = tokens(8, 0), b = tokens(8, 1000);
  const auto ba = take_blocks(kv, 2), bb = take_blocks(kv, 2);
  cache.insert(a, ba);
  cache.insert(b, bb);
  cache.lookup(a, 100);  // a is now more recent than b
  const auto cc = tokens(4, 5000);
  const auto bc = take_blocks(kv, 1);
  cache.insert(cc, bc);  // over budget by one: b's leaf goes
  EXPECT_EQ(cache.n_blocks(), 4);
  EXPECT_EQ(kv.refcount(bb[1]), 1) << "only the sequence still holds it";
  EXPECT_EQ(cache.lookup(b, 100).n_tokens, 4);
  EXPECT_EQ(cache.lookup(a, 100).n_tokens, 8);
}

TEST(PrefixCache, CheckpointSlotsAreRecycledLeastRecentlyUsedFirst) {
  BlockAllocator kv(64);
  auto c = config(true);
  c.n_checkpoint_slots = 1;
  PrefixCache cache(c, kv);
  const auto a = tokens(4, 0), b = tokens(4, 1000);
  cache.insert(a, take_blocks(kv, 1));
  cache.insert(b, take_blocks(kv, 1));
  const auto sa = cache.checkpoint_slot_for(a, 4);
  ASSERT_TRUE(sa);
  const auto sb = cache.checkpoint_slot_for(b, 4);
  ASSERT_TRUE(sb);
  EXPECT_EQ(*sa, *sb) << "the only slot moved to the newer prefix";
  EXPECT_EQ(cache.lookup(a, 100).n_tokens, 0);
  EXPECT_EQ(cache.lookup(b, 100).n_tokens, 4);
}

TEST(PrefixCache, DestructionReleasesEverything) {
  BlockAllocator kv(8);
  {
    PrefixCache cache(config(false), kv);
    auto blocks = take_blocks(kv, 2);
    cache.insert(tokens(8), blocks);
    for (int32_t b : blocks) kv.release(b);  // the sequence goes away first
    EXPECT_EQ(kv.n_free(), 6);
  }
  EXPECT_EQ(kv.n_free(), 8);
}

}  // namespace
}  // namespace cera::runtime
