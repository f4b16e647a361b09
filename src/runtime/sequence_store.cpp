#include "runtime/sequence_store.h"

#include <string>

#include "cera/error.h"

namespace cera::runtime {

SequenceStore::SequenceStore(const SequenceStoreConfig& config)
    : config_(config), allocator_(config.n_kv_blocks), slots_(size_t(config.n_slots)) {}

SequenceState& SequenceStore::create() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]) {
      slots_[i].emplace();
      slots_[i]->id = int32_t(i);
      slots_[i]->conv_slot = int32_t(i);
      return *slots_[i];
    }
  }
  throw Error(ErrorCode::OutOfRange,
              "all " + std::to_string(slots_.size()) + " sequence slots are in use");
}

void SequenceStore::release(int32_t id) {
  SequenceState& s = get(id);
  for (int32_t b : s.blocks) allocator_.release(b);
  slots_[size_t(id)].reset();
}

SequenceState& SequenceStore::get(int32_t id) {
  if (id < 0 || size_t(id) >= slots_.size() || !slots_[size_t(id)])
    throw Error(ErrorCode::Internal, "no live sequence with id " + std::to_string(id));
  return *slots_[size_t(id)];
}

void SequenceStore::reserve(int32_t id, int32_t n_tokens) {
  SequenceState& s = get(id);
  if (config_.n_kv_blocks == 0) return;  // attention-free model
  const size_t need = size_t((n_tokens + config_.kv_block_size - 1) / config_.kv_block_size);
  while (s.blocks.size() < need) {
    auto b = allocator_.allocate();
    if (!b)
      throw Error(ErrorCode::OutOfRange,
                  "the KV cache is full: " + std::to_string(n_tokens) + " tokens do not fit in " +
                      std::to_string(capacity_tokens()) + " (raise the context size with -c)");
    s.blocks.push_back(*b);
  }
}

void SequenceStore::adopt_prefix(int32_t id, std::vector<int32_t> blocks, int32_t n_tokens) {
  SequenceState& s = get(id);
  if (s.n_past != 0 || !s.blocks.empty())
    throw Error(ErrorCode::Internal, "adopt_prefix on a sequence that is not empty");
  s.blocks = std::move(blocks);
  s.n_past = n_tokens;
}

SequenceState& SequenceStore::fork(int32_t id) {
  const SequenceState source = get(id);  // copy: create() may move the slot vector's contents
  SequenceState& child = create();
  for (int32_t b : source.blocks) allocator_.retain(b);
  child.blocks = source.blocks;
  child.n_past = source.n_past;
  return child;
}

std::optional<std::pair<int32_t, int32_t>> SequenceStore::make_tail_writable(int32_t id) {
  SequenceState& s = get(id);
  const size_t tail = size_t(s.n_past / config_.kv_block_size);
  if (s.n_past % config_.kv_block_size == 0 || tail >= s.blocks.size()) return std::nullopt;  // next write opens a new block
  const int32_t old_block = s.blocks[tail];
  if (allocator_.refcount(old_block) == 1) return std::nullopt;
  auto fresh = allocator_.allocate();
  if (!fresh)
    throw Error(ErrorCode::OutOfRange, "the KV cache is full (raise the context size with -c)");
  s.blocks[tail] = *fresh;
  allocator_.release(old_block);
  return std::make_pair(old_block, *fresh);
}

std::vector<std::pair<int32_t, int32_t>> SequenceStore::make_writable_from(int32_t id, size_t first_block) {
  SequenceState& s = get(id);
  std::vector<std::pair<int32_t, int32_t>> moved;
  for (size_t i = first_block; i < s.blocks.size(); ++i) {
    if (allocator_.refcount(s.blocks[i]) == 1) continue;
    auto fresh = allocator_.allocate();
    if (!fresh) throw Error(ErrorCode::OutOfRange, "the KV cache is full (raise the context size with -c)");
    moved.emplace_back(s.blocks[i], *fresh);
    allocator_.release(s.blocks[i]);
    s.blocks[i] = *fresh;
  }
  return moved;
}

void SequenceStore::truncate(int32_t id, int32_t n_tokens) {
  SequenceState& s = get(id);
  const size_t keep = size_t((n_tokens + config_.kv_block_size - 1) / config_.kv_block_size);
  while (s.blocks.size() > keep) {
    allocator_.release(s.blocks.back());
    s.blocks.pop_back();
  }
  if (s.n_past > n_tokens) s.n_past = n_tokens;
}

}  // namespace cera::runtime
