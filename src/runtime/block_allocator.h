// Hands out fixed-size KV blocks from a pool, with reference counts so that a block can be shared
// by several sequences (forks, prefix-cache hits) and is freed when the last holder lets go.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cera::runtime {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);

  std::optional<int32_t> allocate();  // refcount 1, or nullopt when the pool is exhausted
  void retain(int32_t block);
  void release(int32_t block);        // frees at refcount 0
  int32_t refcount(int32_t block) const { return refcount_[size_t(block)]; }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t n_blocks() const { return int32_t(refcount_.size()); }

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first (warm in cache)
};

}  // namespace cera::runtime
