// A prefix tree over the vocabulary's token byte strings, laid out in pre-order so a walk can skip
// a whole subtree (every token sharing a dead prefix) in one step. Built once per vocabulary and
// shared by every matcher for it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

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

 private:
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> end_;
  std::vector<uint32_t> token_off_;  // n_nodes + 1
  std::vector<int32_t> token_ids_;
};

}  // namespace cera
