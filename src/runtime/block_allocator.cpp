#include "runtime/block_allocator.h"

#include "cera/error.h"

namespace cera::runtime {

BlockAllocator::BlockAllocator(int32_t n_blocks) : refcount_(size_t(n_blocks), 0) {
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refcount_[size_t(b)] = 1;
  return b;
}

void BlockAllocator::retain(int32_t block) {
  if (refcount_.at(size_t(block)) <= 0) throw Error(ErrorCode::Internal, "retain of a free KV block");
  ++refcount_[size_t(block)];
}

void BlockAllocator::release(int32_t block) {
  if (refcount_.at(size_t(block)) <= 0) throw Error(ErrorCode::Internal, "double release of a KV block");
  if (--refcount_[size_t(block)] == 0) free_.push_back(block);
}

}  // namespace cera::runtime
