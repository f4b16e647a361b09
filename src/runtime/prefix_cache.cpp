#include "runtime/prefix_cache.h"

#include <algorithm>

namespace cera::runtime {

PrefixCache::PrefixCache(const PrefixCacheConfig& config, BlockAllocator& kv_blocks)
    : config_(config), kv_(kv_blocks) {
  for (int32_t s = config.n_checkpoint_slots - 1; s >= 0; --s) free_checkpoints_.push_back(s);
}

PrefixCache::~PrefixCache() { evict_to(0); }

PrefixCache::Match PrefixCache::lookup(std::span<const int32_t> tokens, int32_t max_tokens) {
  const int32_t bs = config_.block_size;
  Match best;
  std::vector<int32_t> path;
  Node* node = &root_;
  const uint64_t now = ++clock_;
  for (int32_t end = bs; end <= std::min<int32_t>(int32_t(tokens.size()), max_tokens); end += bs) {
    std::vector<int32_t> key(tokens.begin() + (end - bs), tokens.begin() + end);
    auto it = node->children.find(key);
    if (it == node->children.end()) break;
    node = it->second.get();
    node->last_used = now;
    path.push_back(node->kv_block);
    if (!config_.needs_checkpoints || node->checkpoint >= 0) {
      best.n_tokens = end;
      best.kv_blocks = path;
      best.checkpoint = config_.needs_checkpoints ? node->checkpoint : -1;
    }
  }
  for (int32_t b : best.kv_blocks) kv_.retain(b);
  return best;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> kv_blocks) {
  const int32_t bs = config_.block_size;
  Node* node = &root_;
  const uint64_t now = ++clock_;
  for (size_t i = 0; i < kv_blocks.size() && int32_t((i + 1) * bs) <= int32_t(tokens.size()); ++i) {
    std::vector<int32_t> key(tokens.begin() + long(i * bs), tokens.begin() + long((i + 1) * bs));
    auto& child = node->children[key];
    if (!child) {
      child = std::make_unique<Node>();
      child->tokens = std::move(key);
      child->kv_block = kv_blocks[i];
      child->parent = node;
      kv_.retain(kv_blocks[i]);
      ++n_blocks_;
    }
    node = child.get();
    node->last_used = now;
  }
  if (n_blocks_ > config_.max_blocks) evict_to(config_.max_blocks);
}

PrefixCache::Node* PrefixCache::find(std::span<const int32_t> tokens, int32_t n_tokens) {
  const int32_t bs = config_.block_size;
  if (n_tokens <= 0 || n_tokens % bs != 0 || n_tokens > int32_t(tokens.size())) return nullptr;
  Node* node = &root_;
  for (int32_t end = bs; end <= n_tokens; end += bs) {
    auto it = node->children.find(std::vector<int32_t>(tokens.begin() + (end - bs), tokens.begin() + end));
    if (it == node->children.end()) return nullptr;
    node = it->second.get();
  }
  return node;
}

std::optional<int32_t> PrefixCache::take_checkpoint_slot() {
  while (free_checkpoints_.empty()) {
    // Free the checkpoint of the least recently used node that has one (its KV stays usable for
    // attention-only reuse of shorter matches).
    Node* victim = nullptr;
    std::vector<Node*> stack{&root_};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (n->checkpoint >= 0 && (!victim || n->last_used < victim->last_used)) victim = n;
      for (auto& [_, c] : n->children) stack.push_back(c.get());
    }
    if (!victim) return std::nullopt;
    free_checkpoints_.push_back(victim->checkpoint);
    victim->checkpoint = -1;
    --n_checkpoints_;
  }
  const int32_t slot = free_checkpoints_.back();
  free_checkpoints_.pop_back();
  return slot;
}

std::optional<int32_t> PrefixCache::checkpoint_slot_for(std::span<const int32_t> tokens, int32_t n_tokens) {
  if (!config_.needs_checkpoints) return std::nullopt;
  Node* node = find(tokens, n_tokens);
  if (!node || node->checkpoint >= 0) return std::nullopt;
  node->last_used = ++clock_;  // keep it from being the victim of its own slot request
  auto slot = take_checkpoint_slot();
  if (!slot) return std::nullopt;
  node->checkpoint = *slot;
  ++n_checkpoints_;
  return slot;
}

PrefixCache::Node* PrefixCache::least_recently_used_leaf(Node* node) {
  Node* best = nullptr;
  std::vector<Node*> stack{node};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != &root_ && n->children.empty() && (!best || n->last_used < best->last_used)) best = n;
    for (auto& [_, c] : n->children) stack.push_back(c.get());
  }
  return best;
}

void PrefixCache::remove_leaf(Node* leaf) {
  kv_.release(leaf->kv_block);
  --n_blocks_;
  if (leaf->checkpoint >= 0) {
    free_checkpoints_.push_back(leaf->checkpoint);
    --n_checkpoints_;
  }
  const std::vector<int32_t> key = leaf->tokens;  // the node (and its key) dies in erase
  leaf->parent->children.erase(key);
}

bool PrefixCache::evict_to(int32_t max_blocks) {
  bool dropped = false;
  while (n_blocks_ > max_blocks) {
    Node* leaf = least_recently_used_leaf(&root_);
    if (!leaf) break;
    remove_leaf(leaf);
    dropped = true;
  }
  return dropped;
}

}  // namespace cera::runtime
