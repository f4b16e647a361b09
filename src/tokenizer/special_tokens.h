// Cuts raw text at special / added tokens before any normalization or BPE (MODELS.md §6.2 step 1,
// HF added_tokens). Matching is leftmost-longest, as HF's added-token splitter does; for the
// usual non-overlapping token sets this gives the same result as llama.cpp's longest-first scan.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace cera {

struct TextFragment {
  int32_t token = -1;     // >= 0: a matched special token
  std::string_view text;  // token < 0: plain text still to be tokenized
};

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher() = default;
  // Indexes every CONTROL, UNKNOWN and USER_DEFINED token with non-empty text.
  explicit SpecialTokenMatcher(const VocabSpec& spec);

  // CONTROL / UNKNOWN tokens are recognised only when parse_special; USER_DEFINED always.
  void partition(std::string_view text, bool parse_special, std::vector<TextFragment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
    int32_t token = -1;
    bool always = false;  // the token matches even without parse_special (USER_DEFINED)
  };
  struct Flags {
    bool lstrip = false, rstrip = false;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // Longest allowed token starting at text[pos]: returns its length (0 = none) and sets token.
  size_t match_at(std::string_view text, size_t pos, bool parse_special, int32_t& token) const;

  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};  // quick reject for positions no token starts at
  std::vector<Flags> flags_;            // by token id
};

}  // namespace cera
