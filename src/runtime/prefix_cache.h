// Prompt prefixes that can be resumed: a trie of whole token blocks. Each node is one block of
// `block_size` tokens following its parent's; it keeps that block's KV cache block (a reference
// in the BlockAllocator) and, where taken, a checkpoint of the conv state after the block.
//
// Why checkpoints: attention state is indexed by position, so any prefix of the KV cache can be
// reused; LFM2's conv state is a running summary that cannot be rewound. A prompt that shares a
// prefix with an earlier one resumes from the deepest node that has a conv checkpoint (llama.cpp
// re-processes the whole prompt of a hybrid model instead).
//
// Plain data: ids of KV blocks and of checkpoint slots; the backend holds the memory they index.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "runtime/block_allocator.h"

namespace cera::runtime {

struct PrefixCacheConfig {
  int32_t block_size = 32;
  int32_t max_blocks = 0;        // KV blocks the cache may keep referenced (its memory budget)
  int32_t n_checkpoint_slots = 0;  // conv checkpoints it may hold (0 for attention-only models)
  bool needs_checkpoints = false;  // the model has conv state: a match must end at a checkpoint
};

class PrefixCache {
 public:
  PrefixCache(const PrefixCacheConfig& config, BlockAllocator& kv_blocks);
  ~PrefixCache();

  struct Match {
    int32_t n_tokens = 0;            // whole blocks matched (multiple of block_size)
    std::vector<int32_t> kv_blocks;  // their KV blocks, already retained for the caller
    int32_t checkpoint = -1;         // slot with the conv state after n_tokens, -1 if none needed
  };
  // The longest cached prefix of `tokens` (whole blocks; ending at a checkpoint if the model needs
  // one). At most max_tokens are matched, so a caller can keep at least one token to evaluate.
  Match lookup(std::span<const int32_t> tokens, int32_t max_tokens);

  // Records that tokens[0 .. kv_blocks.size() * block_size) are held in `kv_blocks` (whole blocks
  // only). Blocks already cached are left as they are; new nodes retain their KV block.
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> kv_blocks);

  // Asks for a checkpoint slot for the node ending after n_tokens (a block boundary already
  // inserted). Returns the slot the caller must fill with the current conv state, or nullopt if the
  // node already has one, does not exist, or no slot can be freed.
  std::optional<int32_t> checkpoint_slot_for(std::span<const int32_t> tokens, int32_t n_tokens);

  // Drops least-recently-used leaves until at most `max_blocks` KV blocks are held. Returns true if
  // anything was dropped.
  bool evict_to(int32_t max_blocks);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_checkpoints() const { return n_checkpoints_; }
  const PrefixCacheConfig& config() const { return config_; }

 private:
  struct Node {
    std::vector<int32_t> tokens;  // this block's tokens
    int32_t kv_block = -1;
    int32_t checkpoint = -1;
    uint64_t last_used = 0;
    Node* parent = nullptr;
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
  };

  Node* find(std::span<const int32_t> tokens, int32_t n_tokens);
  Node* least_recently_used_leaf(Node* node);
  void remove_leaf(Node* leaf);
  std::optional<int32_t> take_checkpoint_slot();

  PrefixCacheConfig config_;
  BlockAllocator& kv_;
  Node root_;
  uint64_t clock_ = 0;
  int32_t n_blocks_ = 0;
  int32_t n_checkpoints_ = 0;
  std::vector<int32_t> free_checkpoints_;
};

}  // namespace cera::runtime
