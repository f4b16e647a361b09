// Per-sequence state as plain data: how many tokens a sequence holds, its KV block table and its
// conv-state slot. Knows nothing about models or kernels; the backend holds the memory these
// indices point into.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/block_allocator.h"

namespace cera::runtime {

struct SequenceState {
  int32_t id = -1;
  int32_t n_past = 0;          // tokens already processed (in KV / conv state)
  int32_t conv_slot = -1;
  std::vector<int32_t> blocks;  // KV block table
};

struct SequenceStoreConfig {
  int32_t kv_block_size = 32;
  int32_t n_kv_blocks = 0;  // 0 when the model has no attention layers
  int32_t n_slots = 1;      // sequences that can be live at once
};

class SequenceStore {
 public:
  explicit SequenceStore(const SequenceStoreConfig& config);

  const SequenceStoreConfig& config() const { return config_; }

  // A fresh, empty sequence; throws Error(OutOfRange) if all slots are taken.
  // The caller must clear its conv slot in the backend (the store does not touch memory).
  SequenceState& create();
  void release(int32_t id);
  SequenceState& get(int32_t id);

  // Makes sure sequence `id` has KV blocks for n_tokens positions in total.
  // Throws Error(OutOfRange) naming the sizes if the pool cannot hold them.
  void reserve(int32_t id, int32_t n_tokens);
  // Forgets everything after the first n_tokens (frees whole blocks no longer needed).
  void truncate(int32_t id, int32_t n_tokens);

  // Starts an empty sequence from a cached prefix: `blocks` (already retained for it) hold its
  // first n_tokens positions.
  void adopt_prefix(int32_t id, std::vector<int32_t> blocks, int32_t n_tokens);
  // A new sequence sharing all of `id`'s KV blocks (copy-on-write; see make_tail_writable).
  SequenceState& fork(int32_t id);
  // Before appending to `id`: if the block that position n_past falls into is shared with another
  // holder, gives the sequence its own block. Returns {old, new} so the caller copies the contents.
  std::optional<std::pair<int32_t, int32_t>> make_tail_writable(int32_t id);
  // Gives the sequence its own copy of every shared block from index first_block on (before an
  // in-place rewrite such as a context shift). Returns the {old, new} pairs to copy.
  std::vector<std::pair<int32_t, int32_t>> make_writable_from(int32_t id, size_t first_block);

  int32_t capacity_tokens() const { return config_.n_kv_blocks * config_.kv_block_size; }
  BlockAllocator& blocks() { return allocator_; }

 private:
  SequenceStoreConfig config_;
  BlockAllocator allocator_;
  std::vector<std::optional<SequenceState>> slots_;
};

}  // namespace cera::runtime
