#include "sampling/grammar/matcher.h"

#include <limits>

#include "cera/error.h"

namespace cera {

namespace {
std::vector<std::string> without_eog(std::vector<std::string> bytes, const std::vector<int32_t>& eog) {
  for (int32_t id : eog) bytes[size_t(id)].clear();  // EOG tokens are decided by is_complete() alone
  return bytes;
}
}  // namespace

GrammarVocab::GrammarVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)),
      eog_(bytes_.size(), 0),
      eog_ids_(std::move(eog_ids)),
      trie_([&] {
        for (int32_t id : eog_ids_)
          if (id < 0 || size_t(id) >= bytes_.size())
            throw Error(ErrorCode::InvalidArgument, "grammar vocab: EOG id " + std::to_string(id) + " is outside the vocabulary");
        return TokenTrie(without_eog(bytes_, eog_ids_));
      }()) {
  for (int32_t id : eog_ids_) eog_[size_t(id)] = 1;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), automaton_(grammar_), state_(automaton_.initial()) {}

void GrammarMatcher::reset() {
  state_ = automaton_.initial();
  utf8_ = {};
  ended_ = false;
}

bool GrammarMatcher::feed(std::string_view bytes, State& state, Utf8Step& utf8) const {
  for (char c : bytes) {
    if (!utf8.push(uint8_t(c))) return false;
    if (utf8.need == 0) {
      state = automaton_.advance(state, utf8.cp);
      if (state == GrammarAutomaton::kDead) return false;
    } else if (!automaton_.can_take_range(state, utf8.range_lo(), utf8.range_hi())) {
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::allowed(std::string_view bytes) const {
  if (ended_) return false;
  State s = state_;
  Utf8Step u = utf8_;
  return feed(bytes, s, u);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  State s = state_;
  Utf8Step u = utf8_;
  if (!feed(bytes, s, u)) return false;
  state_ = s;
  utf8_ = u;
  return true;
}

bool GrammarMatcher::token_allowed(int32_t id) const {
  if (id < 0 || id >= vocab_->n_vocab() || ended_) return false;
  if (vocab_->is_eog(id)) return is_complete();
  const std::string& b = vocab_->bytes(id);
  return !b.empty() && allowed(b);
}

void GrammarMatcher::accept_token(int32_t id) {
  if (!token_allowed(id))
    throw Error(ErrorCode::InvalidArgument, "grammar: token " + std::to_string(id) + " is not allowed here");
  if (vocab_->is_eog(id)) {
    ended_ = true;
    return;
  }
  accept_bytes(vocab_->bytes(id));
}

bool GrammarMatcher::is_exhausted() const {
  return ended_ || (utf8_.need == 0 && automaton_.must_end(state_));
}

// Depth-first over the trie, carrying the automaton state: a prefix that dies prunes every token
// below it, and a shared prefix is matched once for all the tokens that start with it.
void GrammarMatcher::walk(uint32_t node, State state, Utf8Step utf8, uint8_t* allowed) const {
  const TokenTrie& trie = vocab_->trie();
  const uint32_t stop = trie.end(node);
  for (uint32_t c = node + 1; c < stop; c = trie.end(c)) {
    Utf8Step u = utf8;
    if (!u.push(trie.byte(c))) continue;
    State next = state;
    if (u.need == 0) {
      next = automaton_.advance(state, u.cp);
      if (next == GrammarAutomaton::kDead) continue;
    } else if (!automaton_.can_take_range(state, u.range_lo(), u.range_hi())) {
      continue;
    }
    for (int32_t id : trie.tokens_at(c)) allowed[id] = 1;
    if (trie.end(c) == c + 1) continue;
    // Shortcut: the state just looped (e.g. inside a JSON string) and loops on every byte below,
    // which is valid UTF-8 from here: every token below is allowed without walking it.
    if (next == state && u.need == 0 && trie.valid_utf8_below(c)) {
      const GrammarAutomaton::Loops& l = automaton_.loops(next);
      if (trie.ascii_below_subset_of(c, l.lo, l.hi) && (l.high || !trie.high_below(c))) {
        for (int32_t id : trie.tokens_below(c)) allowed[id] = 1;
        continue;
      }
    }
    walk(c, next, u, allowed);
  }
}

void GrammarMatcher::allowed_tokens(std::vector<uint8_t>& out) const {
  out.assign(size_t(vocab_->n_vocab()), 0);
  if (ended_) return;
  walk(0, state_, utf8_, out.data());
  if (is_complete())
    for (int32_t id : vocab_->eog_ids()) out[size_t(id)] = 1;
}

void GrammarMatcher::mask(std::span<float> logits) const {
  allowed_tokens(scratch_);
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t n = scratch_.size();
  for (size_t i = 0; i < logits.size(); ++i)
    if (i >= n || !scratch_[i]) logits[i] = ninf;
}

}  // namespace cera
