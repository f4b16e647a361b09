#include "sampling/grammar/automaton.h"

#include <algorithm>
#include <string>

namespace cera {

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  nodes_.push_back({0, 0});
  std::vector<uint32_t> none;
  intern(none);  // state 0: the dead state (no stacks)
  std::vector<uint32_t> tops;
  for (uint32_t alt : grammar_->alternatives(grammar_->root())) expand(alt, 0, tops);
  initial_ = intern(tops);
}

uint32_t GrammarAutomaton::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  auto [it, inserted] = node_ids_.emplace(key, uint32_t(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

// Pushes onto `out` the stack tops reachable from "at element pos, then continue with parent"
// without consuming input: each top is at a character class, or 0 for "everything matched".
// Terminates because Grammar::parse rejected left recursion.
void GrammarAutomaton::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out) {
  const GrammarElem& e = grammar_->elem(pos);
  switch (e.kind) {
    case GrammarElem::End:
    case GrammarElem::Alt:
      if (parent == 0) {
        out.push_back(0);
      } else {
        const Node p = nodes_[parent];
        expand(p.pos, p.parent, out);
      }
      return;
    case GrammarElem::Chars:
      out.push_back(node(pos, parent));
      return;
    case GrammarElem::Rule: {
      // A reference in tail position returns straight to our parent: right-recursive repetition
      // then keeps the stack flat instead of growing it by one node per iteration.
      const GrammarElem::Kind next = grammar_->elem(pos + 1).kind;
      const uint32_t cont = (next == GrammarElem::End || next == GrammarElem::Alt) ? parent : node(pos + 1, parent);
      for (uint32_t alt : grammar_->alternatives(e.value)) expand(alt, cont, out);
      return;
    }
  }
}

GrammarAutomaton::State GrammarAutomaton::intern(std::vector<uint32_t>& tops) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(uint32_t));
  auto [it, inserted] = set_ids_.emplace(std::move(key), State(sets_.size()));
  if (inserted) {
    sets_.push_back(tops);
    accepting_.push_back(!tops.empty() && tops.front() == 0);
    ascii_.emplace_back();
    ascii_.back().fill(-1);
    bool uniform = true;
    for (uint32_t top : tops) {
      if (top == 0) continue;
      const CharSet& cs = grammar_->charset(grammar_->elem(nodes_[top].pos).value);
      if (!cs.covers(0x80, 0x10FFFF) && cs.intersects(0x80, 0x10FFFF)) uniform = false;
    }
    high_uniform_.push_back(uniform);
    high_next_.push_back(uniform ? kHighUnknown : kHighMixed);
  }
  return it->second;
}

GrammarAutomaton::State GrammarAutomaton::compute_advance(State s, uint32_t cp) {
  std::vector<uint32_t> next;
  for (uint32_t top : sets_[s]) {
    if (top == 0) continue;
    const Node n = nodes_[top];
    if (grammar_->charset(grammar_->elem(n.pos).value).contains(cp)) expand(n.pos + 1, n.parent, next);
  }
  return intern(next);
}

const GrammarAutomaton::Loops& GrammarAutomaton::loops(State s) {
  if (loops_known_.size() <= s) {
    loops_known_.resize(sets_.size(), 0);
    loops_.resize(sets_.size());
  }
  if (!loops_known_[s]) {
    Loops l;  // built locally: advance() may grow the tables
    for (uint32_t c = 0; c < 128; ++c)
      if (advance(s, c) == s) (c < 64 ? l.lo : l.hi) |= uint64_t(1) << (c & 63);
    l.high = high_uniform_[s] && advance(s, 0x80) == s;
    if (loops_known_.size() < sets_.size()) {
      loops_known_.resize(sets_.size(), 0);
      loops_.resize(sets_.size());
    }
    loops_[s] = l;
    loops_known_[s] = 1;
  }
  return loops_[s];
}

bool GrammarAutomaton::can_take_range(State s, uint32_t lo, uint32_t hi) const {
  for (uint32_t top : sets_[s]) {
    if (top == 0) continue;
    if (grammar_->charset(grammar_->elem(nodes_[top].pos).value).intersects(lo, hi)) return true;
  }
  return false;
}

}  // namespace cera
