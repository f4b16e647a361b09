// The pushdown automaton a GrammarMatcher runs: a state is a *set of stacks* (one per way the
// input so far can be parsed). Stacks are hash-consed linked lists (a node = a grammar position
// plus the node to return to), and sets of stacks are interned too, so a state is one integer and
// "state x code point -> state" can be memoized. That memo is what makes masking a 150k-token
// vocabulary cheap: the trie walk re-uses transitions instead of re-expanding rules.
//
// Not thread-safe (the memo tables grow on use); one per matcher.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "sampling/grammar/grammar.h"

namespace cera {

class GrammarAutomaton {
 public:
  using State = uint32_t;
  static constexpr State kDead = 0;  // no stack left: the input cannot be parsed

  explicit GrammarAutomaton(std::shared_ptr<const Grammar> grammar);

  State initial() const { return initial_; }
  State advance(State s, uint32_t cp) {
    if (s == kDead) return kDead;
    if (cp < 128) {
      const int32_t memo = ascii_[s][cp];
      if (memo >= 0) return State(memo);
      const State next = compute_advance(s, cp);  // may grow ascii_: index again afterwards
      ascii_[s][cp] = int32_t(next);
      return next;
    }
    // Most states treat every non-ASCII code point alike (inside a JSON string: all allowed;
    // elsewhere: none), so one memo entry serves them all and the hash map is rarely touched.
    const int32_t high = high_next_[s];
    if (high >= 0) return State(high);
    if (high == kHighUnknown) {
      const State next = compute_advance(s, cp);  // may grow high_next_: index again
      high_next_[s] = high_uniform_[s] ? int32_t(next) : kHighMixed;
      return next;
    }
    const uint64_t key = (uint64_t(s) << 21) | cp;
    auto it = other_.find(key);
    if (it != other_.end()) return it->second;
    const State next = compute_advance(s, cp);
    other_.emplace(key, next);
    return next;
  }
  // Some stack has finished the root rule: the grammar may end here.
  bool can_end(State s) const { return accepting_[s]; }
  // Every stack has finished: nothing but the end can follow.
  bool must_end(State s) const { return sets_[s].size() == 1 && sets_[s][0] == 0; }
  // Some stack can take a code point in [lo, hi] next (for a partial UTF-8 character).
  bool can_take_range(State s, uint32_t lo, uint32_t hi) const;

  // ASCII code points (as two 64-bit masks) that lead from s back to s, and whether every
  // non-ASCII code point does. Computed once per state, on demand.
  struct Loops {
    uint64_t lo = 0, hi = 0;
    bool high = false;
  };
  const Loops& loops(State s);

  const Grammar& grammar() const { return *grammar_; }
  size_t n_states() const { return sets_.size(); }

 private:
  struct Node {
    uint32_t pos;     // element index in the grammar
    uint32_t parent;  // node to continue with when this rule ends; 0 = bottom
  };
  uint32_t node(uint32_t pos, uint32_t parent);
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);
  State intern(std::vector<uint32_t>& tops);
  State compute_advance(State s, uint32_t cp);

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;  // node 0 is the empty stack
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<std::vector<uint32_t>> sets_;  // per state: sorted top nodes (0 = a finished stack)
  std::vector<bool> accepting_;
  std::unordered_map<std::string, State> set_ids_;
  std::vector<std::array<int32_t, 128>> ascii_;  // memo for ASCII; -1 = not computed yet
  std::unordered_map<uint64_t, State> other_;    // memo for the rest
  static constexpr int32_t kHighUnknown = -1, kHighMixed = -2;
  std::vector<uint8_t> high_uniform_;  // per state: all code points >= 0x80 lead to one state
  std::vector<int32_t> high_next_;     // that state once known, or kHighUnknown / kHighMixed
  std::vector<Loops> loops_;
  std::vector<uint8_t> loops_known_;
  State initial_ = kDead;
};

}  // namespace cera
