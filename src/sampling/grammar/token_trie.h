// A prefix tree over the vocabulary's token byte strings, laid out in pre-order so a walk can skip
// a whole subtree (every token sharing a dead prefix) in one step. Built once per vocabulary and
// shared by every matcher for it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sampling/grammar/utf8_step.h"

namespace cera {

class TokenTrie {
 public:
  // Empty strings are left out (such tokens never match a grammar).
  explicit TokenTrie(std::span<const std::string> tokens);

  // Node 0 is the root (the empty prefix). For node i: byte(i) is the byte on the edge into it;
  // its descendants are i+1 .. end(i)-1; its first child is i+1 and each next sibling of a child c
  // is end(c).
  uint32_t n_nodes() const { return uint32_t(byte_.size()); }
  uint8_t byte(uint32_t i) const { return byte_[i]; }
  uint32_t end(uint32_t i) const { return end_[i]; }
  std::span<const int32_t> tokens_at(uint32_t i) const {
    return {token_ids_.data() + token_off_[i], token_ids_.data() + token_off_[i + 1]};
  }
  // Every token strictly below node i (pre-order keeps them contiguous).
  std::span<const int32_t> tokens_below(uint32_t i) const {
    return {token_ids_.data() + token_off_[i + 1], token_ids_.data() + token_off_[end_[i]]};
  }

  // Summaries of the bytes strictly below node i, so a matcher can accept a whole subtree at once
  // when its state loops on all of them: which ASCII bytes occur, whether any byte >= 0x80 does,
  // and whether every path down from i is valid UTF-8 when i is at a character boundary (a
  // trailing unfinished character counts as valid).
  bool ascii_below_subset_of(uint32_t i, uint64_t lo, uint64_t hi) const {
    return (below_lo_[i] & ~lo) == 0 && (below_hi_[i] & ~hi) == 0;
  }
  bool high_below(uint32_t i) const { return flags_[i] & kHighBelow; }
  bool valid_utf8_below(uint32_t i) const { return flags_[i] & kValidBelow; }

 private:
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> end_;
  std::vector<uint32_t> token_off_;  // n_nodes + 1
  std::vector<int32_t> token_ids_;
  static constexpr uint8_t kHighBelow = 1, kValidBelow = 2;
  std::vector<uint64_t> below_lo_, below_hi_;  // ASCII bytes 0..63 / 64..127 below each node
  std::vector<uint8_t> flags_;
  void summarize();
  bool valid_from(uint32_t i, Utf8Step u) const;
};

}  // namespace cera
