#include "sampling/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "sampling/grammar/utf8_step.h"

namespace cera {

// Sorting the tokens by bytes gives the pre-order directly: a node is created for each new byte
// past the common prefix with the previous token, and a node's subtree closes when a later token
// diverges above it.
TokenTrie::TokenTrie(std::span<const std::string> tokens) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!tokens[i].empty()) order.push_back(int32_t(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return tokens[size_t(a)] < tokens[size_t(b)] || (tokens[size_t(a)] == tokens[size_t(b)] && a < b);
  });
  byte_.push_back(0);
  end_.push_back(0);
  std::vector<uint32_t> node_tokens_first;  // per node: index into `order` of its first token, or npos
  std::vector<uint32_t> node_token_count;
  node_tokens_first.push_back(0);
  node_token_count.push_back(0);
  std::vector<uint32_t> path{0};  // node per depth along the previous token
  std::string prev;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string& t = tokens[size_t(order[k])];
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    // Close the nodes below the common prefix.
    while (path.size() > common + 1) {
      end_[path.back()] = uint32_t(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      path.push_back(uint32_t(byte_.size()));
      byte_.push_back(uint8_t(t[d]));
      end_.push_back(0);
      node_tokens_first.push_back(0);
      node_token_count.push_back(0);
    }
    const uint32_t leaf = path.back();
    if (node_token_count[leaf]++ == 0) node_tokens_first[leaf] = uint32_t(k);
    prev = t;
  }
  while (!path.empty()) {
    end_[path.back()] = uint32_t(byte_.size());
    path.pop_back();
  }
  token_off_.assign(byte_.size() + 1, 0);
  for (size_t i = 0; i < byte_.size(); ++i) {
    token_off_[i + 1] = token_off_[i] + node_token_count[i];
    for (uint32_t j = 0; j < node_token_count[i]; ++j) token_ids_.push_back(order[node_tokens_first[i] + j]);
  }
  summarize();
}

// Paths below i from a mid-character state u; at the next boundary the memo for that node answers.
bool TokenTrie::valid_from(uint32_t i, Utf8Step u) const {
  for (uint32_t c = i + 1; c < end_[i]; c = end_[c]) {
    Utf8Step v = u;
    if (!v.push(byte_[c])) return false;
    if (v.need == 0 ? !(flags_[c] & kValidBelow) : !valid_from(c, v)) return false;
  }
  return true;
}

void TokenTrie::summarize() {
  const uint32_t n = n_nodes();
  below_lo_.assign(n, 0);
  below_hi_.assign(n, 0);
  flags_.assign(n, 0);
  // Reverse pre-order visits every node after all of its descendants.
  for (uint32_t i = n; i-- > 0;) {
    uint8_t f = kValidBelow;
    for (uint32_t c = i + 1; c < end_[i]; c = end_[c]) {
      const uint8_t b = byte_[c];
      below_lo_[i] |= below_lo_[c];
      below_hi_[i] |= below_hi_[c];
      if (b < 64) below_lo_[i] |= uint64_t(1) << b;
      else if (b < 128) below_hi_[i] |= uint64_t(1) << (b - 64);
      if (b >= 0x80 || (flags_[c] & kHighBelow)) f |= kHighBelow;
      Utf8Step u;
      if (!u.push(b) || (u.need == 0 ? !(flags_[c] & kValidBelow) : !valid_from(c, u))) f &= uint8_t(~kValidBelow);
    }
    flags_[i] = f;
  }
}

}  // namespace cera
