// Constrained sampling: GrammarMatcher tracks how far the generated text has got through a
// Grammar and tells which vocabulary tokens may come next.
//
// Typical use (one matcher per generation; the GrammarVocab once per tokenizer):
//   auto vocab = std::make_shared<GrammarVocab>(pieces, eog_ids);   // pieces[id] = token bytes
//   GrammarMatcher m(std::make_shared<Grammar>(Grammar::parse(gbnf)), vocab);
//   loop: logits -> m.mask(logits) -> sample id -> m.accept_token(id); stop on an EOG id
//         (allowed only when m.is_complete()) or when m.is_exhausted().
//
// Not thread-safe: const methods fill the automaton's memo tables. Copyable (copies the state).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/grammar/automaton.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/token_trie.h"
#include "sampling/grammar/utf8_step.h"

namespace cera {

// The vocabulary as the grammar sees it: each token's raw bytes (Tokenizer::token_to_piece; may
// be part of a UTF-8 character; empty for control tokens, which the grammar then never allows)
// and the end-of-generation ids, which are allowed exactly when the grammar can end.
class GrammarVocab {
 public:
  GrammarVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids);

  int32_t n_vocab() const { return int32_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_eog(int32_t id) const { return eog_[size_t(id)] != 0; }
  std::span<const int32_t> eog_ids() const { return eog_ids_; }
  const TokenTrie& trie() const { return trie_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> eog_;
  std::vector<int32_t> eog_ids_;
  TokenTrie trie_;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab);

  // Sets the logit of every token the grammar does not allow next to -inf. logits.size() may
  // exceed n_vocab (padded output rows): the extra entries are disallowed too.
  void mask(std::span<float> logits) const;
  // The same decision as a 0/1 vector of n_vocab entries.
  void allowed_tokens(std::vector<uint8_t>& out) const;

  bool token_allowed(int32_t id) const;
  // Whether these bytes can be consumed from the current state (a trailing partial UTF-8
  // character counts if some completion of it could be).
  bool allowed(std::string_view bytes) const;

  // Advances by a sampled token. Throws Error(InvalidArgument) if the grammar does not allow it.
  void accept_token(int32_t id);
  // Advances by raw bytes; returns false and leaves the state as it was if they do not fit.
  bool accept_bytes(std::string_view bytes);

  // The root rule can end here (no partial character pending): EOG tokens are allowed.
  bool is_complete() const { return utf8_.need == 0 && automaton_.can_end(state_); }
  // Nothing but the end can follow (or an EOG token was accepted): the caller should stop.
  bool is_exhausted() const;
  void reset();

  const GrammarVocab& vocab() const { return *vocab_; }

 private:
  using State = GrammarAutomaton::State;
  // Feeds bytes from (state, utf8); false on a dead end.
  bool feed(std::string_view bytes, State& state, Utf8Step& utf8) const;
  void walk(uint32_t node, State state, Utf8Step utf8, uint8_t* allowed) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
  mutable GrammarAutomaton automaton_;
  mutable std::vector<uint8_t> scratch_;
  State state_;
  Utf8Step utf8_;
  bool ended_ = false;
};

}  // namespace cera
