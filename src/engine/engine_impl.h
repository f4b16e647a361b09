// What an Engine holds: the file, the backend with the model's weights, the tokenizer, and the
// per-sequence state store. Session and the CLI's bench reach in through this header.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/host_memory.h"
#include "chat/chat_template.h"
#include "cera/engine.h"
#include "format/gguf.h"
#include "model/model.h"
#include "runtime/prefix_cache.h"
#include "sampling/grammar/matcher.h"
#include "runtime/sequence_store.h"
#include "tokenizer/tokenizer.h"

namespace cera {

// Most logits rows one step returns besides one per sequence: all_logits chunks are cut to this
// (a 4096-token GPU step would otherwise need 4096 × n_vocab floats of logits).
inline constexpr int32_t kMaxLogitsRows = 512;

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
  void step(std::span<const SeqInput> inputs, HostVector<float>& logits_out, std::vector<float>* hidden_out = nullptr);
  // The same step, but only the argmax of each output row comes back (computed by the backend).
  void step_argmax(std::span<const SeqInput> inputs, std::vector<int32_t>& argmax_out);
  // The same step, but only each output row's k largest logits come back (Backend::top_k_rows:
  // values and ids, [n_outputs, k]). Returns the logits tensor, whose full rows stay readable
  // (backend->read) until the next step (step_count says which step that is).
  Tensor step_top_k(std::span<const SeqInput> inputs, int32_t k, std::vector<float>& values,
                    std::vector<int32_t>& ids, std::vector<float>* hidden_out = nullptr);
  // Shared by all: validates, reserves KV, runs the forward; returns the output logits tensor.
  // With tokens_from_argmax the step's tokens are the backend's last argmax_rows_async result (each
  // input's tokens then only say how many: one).
  // host_logits_slot: a slot claimed for the step's one row of logits (Backend::host_logits).
  Tensor run_step(std::span<const SeqInput> inputs, bool tokens_from_argmax = false, int32_t host_logits_slot = -1);
  // The sequence whose last one-row logits each Backend::host_logits slot holds (-1: free). A slot
  // stays held until that session's next call that replaces its logits, so the span logits()
  // returned stays valid while other sessions step.
  int32_t host_logits_holder[Backend::kHostLogitsSlots] = {-1, -1};
  // A free slot, now held by seq_id (-1 when none is free or the backend has none).
  int32_t claim_host_logits(int32_t seq_id);
  void release_host_logits(int32_t slot) {
    if (slot >= 0) host_logits_holder[slot] = -1;
  }
  uint64_t step_count = 0;  // forward steps run (run_step)
  // The session whose last step left its logits in the backend's tensor, to read when someone asks
  // (Session::Impl::keep_logits_on_device): a loop of appends that reads none launches each step
  // without waiting for the one before. A step of other sequences would overwrite them, so run_step
  // first calls fetch_pending_logits, which reads them for that session.
  int32_t pending_logits_seq = -1;
  std::function<void()> fetch_pending_logits;
  // decode_batch's logits of all its sessions, kept between calls: the buffer is page-locked while a
  // CUDA backend exists (host_memory.h), which is slow to allocate and free every step.
  HostVector<float> batch_logits;
  // Session::generate samples from the device's top-k when that gives the same draws (tests turn
  // it off to compare); top_k_steps counts the steps that read only the top k.
  bool sample_from_top_k = true;
  uint64_t top_k_steps = 0;
  void advance(std::span<const SeqInput> inputs);
  // Reserves KV blocks for a sequence, evicting prefix-cache entries if the pool is short.
  void reserve_evicting(int32_t seq_id, int32_t n_tokens);
};

// The Impl of an Engine, for tests (its switches and counters).
struct EngineInternals {
  static Engine::Impl& of(Engine& engine) { return *engine.impl_; }
};

}  // namespace cera
