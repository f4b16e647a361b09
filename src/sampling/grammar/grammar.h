// A context-free grammar over Unicode code points, parsed from GBNF (llama.cpp's dialect; see
// docs/STRUCTURED_OUTPUT.md). Repetitions and groups are already rewritten into plain rules, so a
// Grammar is just rules -> alternatives -> sequences of (rule reference | character class).
//
// Immutable after parse(); safe to share between threads and matchers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cera {

struct CharRange {
  uint32_t lo, hi;  // inclusive
  bool operator==(const CharRange&) const = default;
};

// A character class: sorted, merged ranges. negated = every code point NOT in ranges ('.' is a
// negated empty class).
struct CharSet {
  std::vector<CharRange> ranges;
  bool negated = false;

  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // some code point in [lo, hi] is in the set
  bool covers(uint32_t lo, uint32_t hi) const;      // every code point in [lo, hi] is in the set
  void normalize();                                 // sort and merge ranges
  bool operator==(const CharSet&) const = default;
};

// One element of the flattened rule table. Every alternative ends with Alt or End (End closes a
// rule's last alternative).
struct GrammarElem {
  enum Kind : uint8_t { End, Alt, Rule, Chars };
  Kind kind;
  uint32_t value;  // Rule: rule id; Chars: charset id; otherwise 0
};

class Grammar {
 public:
  // Throws cera::Error(InvalidArgument) with "line:column: what was expected", for undefined or
  // duplicate rules, a missing root and left recursion.
  static Grammar parse(std::string_view gbnf);

  uint32_t root() const { return root_; }
  uint32_t n_rules() const { return uint32_t(names_.size()); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  // Element indices where each alternative of `rule` starts.
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return {alt_starts_.data() + rule_alts_[rule], alt_starts_.data() + rule_alts_[rule + 1]};
  }
  const GrammarElem& elem(uint32_t index) const { return elems_[index]; }
  const CharSet& charset(uint32_t id) const { return charsets_[id]; }
  uint32_t n_charsets() const { return uint32_t(charsets_.size()); }

  std::string to_string() const;  // GBNF again (generated rules included), for debugging

  // Building blocks for the parser. Each rule is a list of alternatives of element lists (without
  // the Alt/End terminators). check() rejects left recursion and is run by parse().
  struct Draft {
    std::vector<std::string> names;
    std::vector<std::vector<std::vector<GrammarElem>>> rules;
    std::vector<CharSet> charsets;
    uint32_t root = 0;
  };
  static Grammar from_draft(Draft draft);

 private:
  std::vector<GrammarElem> elems_;
  std::vector<uint32_t> alt_starts_;
  std::vector<uint32_t> rule_alts_;  // n_rules + 1 offsets into alt_starts_
  std::vector<CharSet> charsets_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

}  // namespace cera
