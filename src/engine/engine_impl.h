// What an Engine holds: the file, the backend with the model's weights, the tokenizer, and the
// per-sequence state store. Session and the CLI's bench reach in through this header.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "cera/engine.h"
#include "format/gguf.h"
#include "model/model.h"
#include "runtime/prefix_cache.h"
#include "sampling/grammar/matcher.h"
#include "runtime/sequence_store.h"
#include "tokenizer/tokenizer.h"

namespace cera {

struct Engine::Impl {
  EngineOptions options;
  ModelInfo info;
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<runtime::SequenceStore> sequences;
  std::unique_ptr<runtime::PrefixCache> prefix_cache;  // null when off
  int32_t checkpoint_slot_base = 0;  // backend conv slot of checkpoint 0 (after the sequence slots)
  std::shared_ptr<const GrammarVocab> grammar_vocab;  // built on first constrained generation
  const std::shared_ptr<const GrammarVocab>& get_grammar_vocab();
  std::unique_ptr<chat::ChatTemplate> chat_template;  // parsed on first append_chat
  std::string bos_text, eos_text;                     // what the template calls bos_token/eos_token
  const chat::ChatTemplate& get_chat_template();

  // One forward step over several sequences: seq_ids[i] gets tokens[i] (appended at its position).
  // Returns the logits of the requested outputs, [n_outputs, n_vocab] on the host.
  struct SeqInput {
    int32_t seq_id;
    std::span<const int32_t> tokens;
    bool all_logits;  // else only the last token's
  };
  // With hidden_out, also the output rows' final-norm hidden states, [n_outputs, n_embd].
  void step(std::span<const SeqInput> inputs, std::vector<float>& logits_out, std::vector<float>* hidden_out = nullptr);
  // The same step, but only the argmax of each output row comes back (computed by the backend).
  void step_argmax(std::span<const SeqInput> inputs, std::vector<int32_t>& argmax_out);
  // Shared by both: validates, reserves KV, runs the forward; returns the output logits tensor.
  Tensor run_step(std::span<const SeqInput> inputs);
  void advance(std::span<const SeqInput> inputs);
  // Reserves KV blocks for a sequence, evicting prefix-cache entries if the pool is short.
  void reserve_evicting(int32_t seq_id, int32_t n_tokens);
};

}  // namespace cera
