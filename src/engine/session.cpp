#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/engine_impl.h"
#include <nlohmann/json.hpp>

#include "sampling/sampler.h"
#include "sampling/stop_strings.h"

namespace cera {

struct Session::Impl {
  Engine::Impl* engine;
  int32_t seq_id = -1;  // -1 until a sequence slot is held
  int32_t n_vocab;
  std::vector<int32_t> history;  // every token in the sequence (the prefix cache is keyed by it)
  HostVector<float> logits;      // of the last append: [n, n_vocab]
  // The buffer an all_logits (or embeddings) chunk reads its logits into, swapped with `logits`
  // rather than copied when the append is one chunk.
  HostVector<float> chunk_logits;
  std::vector<float> embeddings; // of the same rows, [n, n_embd], when the engine keeps them
  int32_t reused = 0;
  bool shifted = false;  // after a context shift the state no longer matches a plain prefix
  // Chat: the text the session holds (rendered conversation + replies), while it is known exactly.
  std::optional<std::string> chat_fed;
  std::atomic<bool> cancel_requested{false};
  // After an append of one row's logits, or generate's append of a token drawn from only the row's
  // largest logits (top_values/top_ids, as Backend::top_k_rows gives them): the full row stays in
  // the backend's logits tensor, and fetch_logits() brings it into `logits` when someone asks — or
  // the engine does, before a step of other sequences overwrites it (Engine::Impl::
  // fetch_pending_logits). So appends that read no logits (a decode loop fed from elsewhere, the
  // chunks of a long prompt) launch each step without waiting for the device to finish the last.
  std::vector<float> top_values;
  std::vector<int32_t> top_ids;
  bool top_fresh = false;  // top_values/top_ids are of the last step (not of an earlier generate)
  bool logits_on_device = false;
  Tensor device_logits;
  uint64_t device_step = 0;  // the engine step that produced it
  // Or the head wrote the row straight into a host slot of the backend (Backend::host_logits),
  // which this session holds until its logits are replaced: fetch_logits() then only waits for the
  // step, and logits() returns the slot's row itself (host_row), never copied.
  int32_t host_slot = -1;
  const float* host_ptr = nullptr;
  std::span<const float> host_row;

  std::span<const float> current_logits() const {
    return host_row.empty() ? std::span<const float>(logits) : host_row;
  }

  // Keeps a one-row step's logits where they are: in host slot `slot` if the head wrote them there
  // (the step returned a tensor over it), else on the device.
  void keep_logits(const Tensor& row, int32_t slot) {
    float* p = slot >= 0 ? engine->backend->host_logits(slot, size_t(n_vocab)) : nullptr;
    if (p && row.data == p) {
      host_slot = slot;
      host_ptr = p;
      logits_on_device = true;
      return;
    }
    engine->release_host_logits(slot);
    keep_logits_on_device(row);
  }

  void keep_logits_on_device(const Tensor& t) {
    device_logits = t;
    device_step = engine->step_count;
    logits_on_device = true;
    engine->pending_logits_seq = seq_id;
    engine->fetch_pending_logits = [this] { fetch_logits(); };
  }
  // Forgets logits not yet in `logits`: on the device, or in a host slot (released here).
  void drop_pending_logits() {
    logits_on_device = false;
    host_row = {};
    engine->release_host_logits(host_slot);
    host_slot = -1;
    if (engine->pending_logits_seq != seq_id) return;
    engine->pending_logits_seq = -1;
    engine->fetch_pending_logits = nullptr;
  }
  void fetch_logits() {
    if (!logits_on_device) return;
    if (host_slot >= 0) {
      logits_on_device = false;
      engine->backend->synchronize();
      host_row = {host_ptr, size_t(n_vocab)};
      return;
    }
    drop_pending_logits();
    if (engine->step_count != device_step) return;  // a step of this sequence replaced them: no logits
    logits.resize(size_t(n_vocab));
    engine->backend->read(device_logits, logits.data());
  }

  // generate's append of a sampled token when the next draw needs only the row's n largest logits.
  void append_sampled_top_k(int32_t token, int32_t n) {
    Engine::Impl& e = *engine;
    reused = 0;
    logits.clear();
    embeddings.clear();
    drop_pending_logits();
    top_fresh = false;
    throw_if_cancelled();
    const int32_t one[] = {token};
    Engine::Impl::SeqInput in{seq_id, one, false};
    keep_logits_on_device(e.step_top_k({&in, 1}, n, top_values, top_ids, e.options.embeddings ? &embeddings : nullptr));
    top_fresh = true;
    history.push_back(token);
    publish_to_cache();
  }

  ~Impl() {
    drop_pending_logits();
    if (seq_id >= 0) engine->sequences->release(seq_id);
  }

  runtime::SequenceState& state() { return engine->sequences->get(seq_id); }

  void throw_if_cancelled() {
    if (cancel_requested.exchange(false)) throw Error(ErrorCode::Cancelled, "cancelled");
  }

  // Keeps the first n_keep tokens, drops half of the rest, moves the remainder down.
  void shift_context(int32_t n_keep) {
    Engine::Impl& e = *engine;
    runtime::SequenceState& st = state();
    const int32_t n_past = st.n_past;
    n_keep = std::clamp(n_keep, 0, n_past - 1);
    const int32_t n_discard = (n_past - n_keep) / 2;
    if (n_discard <= 0) throw Error(ErrorCode::OutOfRange, "context shift: nothing left to discard");
    for (auto [from, to] : e.sequences->make_writable_from(seq_id, size_t(n_keep / e.sequences->config().kv_block_size)))
      e.backend->copy_kv_block(from, to);
    e.model->shift_context(st.blocks, n_keep + n_discard, n_past - n_keep - n_discard, n_discard);
    e.sequences->truncate(seq_id, n_past - n_discard);
    history.erase(history.begin() + n_keep, history.begin() + n_keep + n_discard);
    shifted = true;
  }

  // A fresh sequence whose prompt starts like a cached one continues from there.
  std::span<const int32_t> resume_from_cache(std::span<const int32_t> tokens) {
    Engine::Impl& e = *engine;
    if (!e.prefix_cache || state().n_past != 0) return tokens;
    // Keep at least one token to evaluate: its logits are what the caller wants.
    auto m = e.prefix_cache->lookup(tokens, int32_t(tokens.size()) - 1);
    if (m.n_tokens == 0) return tokens;
    e.sequences->adopt_prefix(seq_id, std::move(m.kv_blocks), m.n_tokens);
    if (m.checkpoint >= 0) e.backend->copy_conv_slot(e.checkpoint_slot_base + m.checkpoint, state().conv_slot);
    history.assign(tokens.begin(), tokens.begin() + m.n_tokens);
    reused = m.n_tokens;
    return tokens.subspan(size_t(m.n_tokens));
  }

  // What a batched decode step does for each session once it has appended `token` (the caller has
  // set or cleared its logits and embeddings).
  void appended_in_batch(int32_t token) {
    drop_pending_logits();
    top_fresh = false;
    reused = 0;
    history.push_back(token);
    chat_fed.reset();  // the session now holds text its chat rendering does not know
    publish_to_cache();
  }

  // After a chunk that ended on a checkpoint boundary: publish the prefix and its conv state.
  void publish_to_cache() {
    Engine::Impl& e = *engine;
    const int32_t pos = state().n_past;
    if (!e.prefix_cache || shifted || pos % e.options.checkpoint_interval != 0) return;
    const int32_t n_blocks = pos / e.sequences->config().kv_block_size;
    e.prefix_cache->insert(history, std::span<const int32_t>(state().blocks).first(size_t(n_blocks)));
    if (auto slot = e.prefix_cache->checkpoint_slot_for(history, pos))
      e.backend->copy_conv_slot(state().conv_slot, e.checkpoint_slot_base + *slot);
  }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Engine::new_session() {
  auto impl = std::make_unique<Session::Impl>();
  impl->engine = impl_.get();
  runtime::SequenceState& s = impl_->sequences->create();
  impl->seq_id = s.id;
  impl->n_vocab = impl_->info.n_vocab;
  impl_->backend->clear_conv_slot(s.conv_slot);
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

void Engine::decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) {
  decode_batch_impl(sessions, tokens, {});
}

void Engine::decode_batch_greedy(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                                 std::span<int32_t> next_tokens) {
  if (next_tokens.size() != sessions.size())
    throw Error(ErrorCode::InvalidArgument, "decode_batch_greedy: next_tokens must have one entry per session");
  decode_batch_impl(sessions, tokens, next_tokens);
}

void Engine::generate_greedy_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                                   int32_t n_steps, std::span<int32_t> out_tokens) {
  const size_t n = sessions.size();
  if (n_steps < 0 || out_tokens.size() != size_t(n_steps) * n)
    throw Error(ErrorCode::InvalidArgument, "generate_greedy_batch: out_tokens must hold n_steps x sessions entries");
  check_batch(sessions, tokens);
  if (n_steps == 0) return;
  Impl& e = *impl_;
  auto chosen = [&](int32_t k) { return out_tokens.subspan(size_t(k) * n, n); };
  // Step k's inputs: one token per session; after step 0 the backend supplies it (its last argmax).
  std::vector<Impl::SeqInput> inputs;
  const int32_t placeholder[1] = {0};
  for (size_t i = 0; i < n; ++i) inputs.push_back({sessions[i]->impl_->seq_id, tokens.subspan(i, 1), false});
  // What decode_batch does for a session after a step, once the token it appended is known. Run
  // after the step is launched but before the next one: n_past already counts the step, and a
  // checkpoint copy (publish_to_cache) lands after the step in stream order.
  auto bookkeeping = [&](std::span<const int32_t> fed) {
    for (size_t i = 0; i < n; ++i) {
      Session::Impl& s = *sessions[i]->impl_;
      s.logits.clear();
      s.embeddings.clear();
      s.appended_in_batch(fed[i]);
    }
  };
  int32_t launched = 0, received = 0;
  try {
    for (size_t i = 0; i < n; ++i) sessions[i]->impl_->throw_if_cancelled();
    e.backend->argmax_rows_async(e.run_step(inputs));
    e.advance(inputs);
    ++launched;
    bookkeeping(tokens);
    for (auto& in : inputs) in.tokens = placeholder;
    for (int32_t k = 1; k < n_steps; ++k) {
      for (size_t i = 0; i < n; ++i) sessions[i]->impl_->throw_if_cancelled();
      e.backend->argmax_rows_async(e.run_step(inputs, /*tokens_from_argmax=*/true));  // step k
      e.advance(inputs);
      ++launched;
      e.backend->argmax_rows_wait(chosen(k - 1).data());  // step k - 1's choice: what step k appended
      ++received;
      bookkeeping(chosen(k - 1));
    }
    e.backend->argmax_rows_wait(chosen(n_steps - 1).data());
    ++received;
  } catch (...) {
    // Leave the sessions consistent with the steps that ran: collect what is in flight.
    while (received < launched) {
      std::vector<int32_t> ids(n);
      e.backend->argmax_rows_wait(ids.data());
      if (received < n_steps) std::copy(ids.begin(), ids.end(), chosen(received).begin());
      ++received;
      if (received < launched) bookkeeping(chosen(received - 1));
    }
    throw;
  }
}

void Engine::check_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) const {
  if (sessions.empty()) throw Error(ErrorCode::InvalidArgument, "decode_batch: no sessions");
  if (sessions.size() != tokens.size())
    throw Error(ErrorCode::InvalidArgument, "decode_batch: " + std::to_string(sessions.size()) + " sessions but " +
                                                std::to_string(tokens.size()) + " tokens");
  std::vector<int32_t> seen;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i] || sessions[i]->impl_->engine != impl_.get())
      throw Error(ErrorCode::InvalidArgument, "decode_batch: session " + std::to_string(i) + " is not of this engine");
    Session::Impl& s = *sessions[i]->impl_;
    if (std::find(seen.begin(), seen.end(), s.seq_id) != seen.end())
      throw Error(ErrorCode::InvalidArgument, "decode_batch: session " + std::to_string(i) + " is listed twice");
    seen.push_back(s.seq_id);
    if (tokens[i] < 0 || tokens[i] >= s.n_vocab)
      throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(tokens[i]) +
                                                  " is outside the vocabulary (0.." + std::to_string(s.n_vocab - 1) + ")");
  }
}

void Engine::decode_batch_impl(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                               std::span<int32_t> next_tokens) {
  check_batch(sessions, tokens);
  std::vector<Engine::Impl::SeqInput> inputs;
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session::Impl& s = *sessions[i]->impl_;
    s.throw_if_cancelled();
    inputs.push_back({s.seq_id, tokens.subspan(i, 1), false});
  }

  HostVector<float>& logits = impl_->batch_logits;
  std::vector<float> hidden;
  std::vector<int32_t> best;
  if (next_tokens.empty()) impl_->step(inputs, logits, impl_->options.embeddings ? &hidden : nullptr);
  else impl_->step_argmax(inputs, best);
  const size_t V = size_t(impl_->info.n_vocab), E = size_t(impl_->info.n_embd);
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session::Impl& s = *sessions[i]->impl_;
    if (next_tokens.empty()) {
      s.logits.assign(logits.begin() + long(i * V), logits.begin() + long((i + 1) * V));
    } else {
      s.logits.clear();
      next_tokens[i] = best[i];
    }
    if (hidden.empty()) s.embeddings.clear();
    else s.embeddings.assign(hidden.begin() + long(i * E), hidden.begin() + long((i + 1) * E));
    s.appended_in_batch(tokens[i]);
  }
}

void Session::append(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) throw Error(ErrorCode::InvalidArgument, "append: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= impl_->n_vocab)
      throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                                                  std::to_string(impl_->n_vocab - 1) + ")");
  Engine::Impl& e = *impl_->engine;
  impl_->reused = 0;
  impl_->logits.clear();
  impl_->drop_pending_logits();
  impl_->top_fresh = false;
  impl_->embeddings.clear();
  if (!all_logits) tokens = impl_->resume_from_cache(tokens);

  // Chunks end at multiples of the checkpoint interval (when the cache is on), so the same tokens
  // are always evaluated in the same chunks: a resumed prompt gives bit-identical results.
  const int32_t interval = e.prefix_cache ? e.options.checkpoint_interval : 0;
  HostVector<float>& part = impl_->chunk_logits;
  std::vector<float> hidden;
  std::vector<float>* hidden_out = e.options.embeddings ? &hidden : nullptr;
  size_t done = 0;
  while (done < tokens.size()) {
    impl_->throw_if_cancelled();
    const int32_t pos = impl_->state().n_past;
    size_t n = std::min(tokens.size() - done, size_t(e.model->max_batch_tokens()));
    if (all_logits) n = std::min(n, size_t(e.model->max_output_rows()));  // a logits row per token
    if (interval > 0) n = std::min(n, size_t(interval - pos % interval));
    const auto piece = tokens.subspan(done, n);
    const bool last = done + n == tokens.size();
    Engine::Impl::SeqInput in{impl_->seq_id, piece, all_logits};
    if (!all_logits && !hidden_out) {  // one row of logits, read when asked: no wait for the device here
      const int32_t slot = last ? e.claim_host_logits(impl_->seq_id) : -1;
      Tensor row;
      try {
        row = e.run_step({&in, 1}, false, slot);
      } catch (...) {
        e.release_host_logits(slot);
        throw;
      }
      e.advance({&in, 1});
      if (last) impl_->keep_logits(row, slot);
      else e.release_host_logits(slot);
    } else {
      e.step({&in, 1}, part, hidden_out);
      if (all_logits || last) {
        if (impl_->logits.empty()) std::swap(impl_->logits, part);  // the common case: one piece
        else impl_->logits.insert(impl_->logits.end(), part.begin(), part.end());
        if (hidden_out) impl_->embeddings.insert(impl_->embeddings.end(), hidden.begin(), hidden.end());
      }
    }
    impl_->history.insert(impl_->history.end(), piece.begin(), piece.end());
    impl_->publish_to_cache();
    done += n;
  }
}

void Session::append_chat(const std::string& messages_json, const std::string& tools_json) {
  Engine::Impl& e = *impl_->engine;
  nlohmann::ordered_json messages, tools = nullptr;
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
    if (!tools_json.empty()) tools = nlohmann::ordered_json::parse(tools_json);
  } catch (const nlohmann::json::exception& err) {
    throw Error(ErrorCode::InvalidArgument, std::string("append_chat: not valid JSON: ") + err.what());
  }
  if (!messages.is_array()) throw Error(ErrorCode::InvalidArgument, "append_chat: messages must be a JSON array");
  chat::ChatContextOptions co;
  co.add_generation_prompt = true;
  const chat::ChatTemplate& tmpl = e.get_chat_template();
  co.bos_token = e.bos_text;
  co.eos_token = e.eos_text;
  const std::string rendered = tmpl.render(chat::make_chat_context(messages, tools, co));
  std::string suffix = rendered;
  const std::optional<std::string>& fed = impl_->chat_fed;
  if (fed && position() > 0 && rendered.size() > fed->size() && rendered.compare(0, fed->size(), *fed) == 0) {
    suffix = rendered.substr(fed->size());
  } else {
    reset();  // the conversation was rewritten: start over (the prefix cache keeps that cheap)
  }
  // The template writes BOS itself; its special-token text is parsed into the special tokens.
  const auto ids = e.tokenizer->encode(suffix, /*add_special=*/false, /*parse_special=*/true);
  impl_->chat_fed.reset();
  append(ids);
  impl_->chat_fed = rendered;
}

void Session::append_text(std::string_view text, bool parse_special) {
  const auto ids = impl_->engine->tokenizer->encode(text, /*add_special=*/position() == 0, parse_special);
  if (ids.empty()) throw Error(ErrorCode::InvalidArgument, "append_text: the text has no tokens");
  append(ids);
}

std::span<const float> Session::logits() const {
  impl_->fetch_logits();
  return impl_->current_logits();
}

std::span<const float> Session::last_logits() const {
  impl_->fetch_logits();
  const std::span<const float> all = impl_->current_logits();
  if (all.empty()) return {};
  return all.last(size_t(impl_->n_vocab));
}

std::span<const float> Session::embeddings() const { return impl_->embeddings; }

int32_t Session::position() const { return impl_->engine->sequences->get(impl_->seq_id).n_past; }

int32_t Session::reused_tokens() const { return impl_->reused; }

void Session::cancel() { impl_->cancel_requested = true; }

void Session::reset() {
  Engine::Impl& e = *impl_->engine;
  e.sequences->truncate(impl_->seq_id, 0);
  e.backend->clear_conv_slot(impl_->state().conv_slot);
  impl_->history.clear();
  impl_->logits.clear();
  impl_->drop_pending_logits();
  impl_->top_fresh = false;
  impl_->embeddings.clear();
  impl_->reused = 0;
  impl_->shifted = false;
  impl_->chat_fed.reset();
}

std::unique_ptr<Session> Session::fork() {
  Engine::Impl& e = *impl_->engine;
  impl_->fetch_logits();
  runtime::SequenceState& child = e.sequences->fork(impl_->seq_id);
  e.backend->copy_conv_slot(impl_->state().conv_slot, child.conv_slot);
  auto impl = std::make_unique<Impl>();
  impl->engine = &e;
  impl->seq_id = child.id;
  impl->n_vocab = impl_->n_vocab;
  impl->history = impl_->history;
  impl->shifted = impl_->shifted;
  impl->chat_fed = impl_->chat_fed;
  const std::span<const float> logits = impl_->current_logits();
  impl->logits.assign(logits.begin(), logits.end());
  impl->embeddings = impl_->embeddings;
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

FinishReason Session::generate(const GenerateOptions& options, const TokenCallback& on_token) {
  impl_->fetch_logits();
  if (impl_->current_logits().empty())
    throw Error(ErrorCode::InvalidArgument, "generate: append a prompt first");
  Engine::Impl& e = *impl_->engine;
  SamplingParams params = options.sampling;
  if (options.ignore_eos)
    for (int32_t t = 0; t < impl_->n_vocab; ++t)
      if (e.tokenizer->is_eog(t)) params.logit_bias[t] = -INFINITY;
  Sampler sampler(params);
  // Penalties look at the conversation so far, as llama.cpp's do (the prompt included).
  const size_t n_history = params.repeat_last_n < 0 ? impl_->history.size()
                                                    : std::min(impl_->history.size(), size_t(params.repeat_last_n));
  for (size_t i = impl_->history.size() - n_history; i < impl_->history.size(); ++i) sampler.accept(impl_->history[i]);
  StreamingDetokenizer detok(*e.tokenizer, options.render_special);
  StopStringFilter stops(options.stop);
  // The chat text the session holds grows with the reply's tokens; whatever way generate ends, the
  // session keeps it (append() clears it, since plain appends are unknown to the chat text).
  std::optional<std::string> chat = impl_->chat_fed;
  struct KeepChatText {
    Session::Impl& impl;
    std::optional<std::string>& chat;
    ~KeepChatText() { impl.chat_fed = impl.shifted ? std::nullopt : chat; }
  } keep_chat_text{*impl_, chat};
  std::optional<GrammarMatcher> grammar;
  if (!options.grammar.empty())
    grammar.emplace(std::make_shared<const Grammar>(Grammar::parse(options.grammar)), e.get_grammar_vocab());
  // Sampling from the row's largest logits only (read by Backend::top_k_rows, so a GPU does not move
  // the whole row) where Sampler::sample_top draws exactly what the full row would: not with a
  // grammar (it masks the full row) nor with log-probabilities over the full row.
  const bool top_k_path = e.sample_from_top_k && !grammar && !(params.n_probs > 0 && options.on_logprobs);
  // The session keeps its last token's full logits whatever way generate ends (the normal ends fetch
  // them below; on an exception, without a second one).
  struct FetchLogitsAtEnd {
    Session::Impl& impl;
    ~FetchLogitsAtEnd() {
      try {
        impl.fetch_logits();
      } catch (...) {
        impl.logits.clear();
        impl.drop_pending_logits();
      }
    }
  } fetch_logits_at_end{*impl_};
  std::vector<float> masked;
  auto draw = [&](std::span<const float> logits) {
    if (params.n_probs <= 0 || !options.on_logprobs) return sampler.sample(logits);
    const SampledToken t = sampler.sample_with_probs(logits);
    options.on_logprobs(t);
    return t.id;
  };
  // Text still held back (an incomplete UTF-8 tail, the start of a possible stop string) is handed
  // over with token -1 at the end.
  auto finish = [&](FinishReason reason) {
    impl_->fetch_logits();
    std::string rest = stops.stopped() ? std::string() : stops.push(detok.flush()).text;
    if (!stops.stopped()) rest += stops.flush();
    if (!rest.empty()) on_token(-1, rest);
    return reason;
  };
  for (int32_t n = 0; options.max_tokens < 0 || n < options.max_tokens; ++n) {
    if (impl_->cancel_requested.exchange(false)) return finish(FinishReason::Cancelled);
    int32_t token;
    if (grammar) {
      if (grammar->is_exhausted()) return finish(FinishReason::EndOfGeneration);  // nothing may follow
      masked.assign(last_logits().begin(), last_logits().end());
      grammar->mask(masked);
      token = draw(masked);
      grammar->accept_token(token);
    } else if (top_k_path && impl_->top_fresh) {
      token = sampler.sample_top(impl_->top_values, impl_->top_ids);
      if (token < 0) token = draw(last_logits());  // all of them banned: the full row decides
    } else {
      token = draw(last_logits());
    }
    if (e.tokenizer->is_eog(token)) return finish(FinishReason::EndOfGeneration);
    const StopStringFilter::Out out = stops.push(detok.push(token));
    if (!on_token(token, out.text)) return finish(FinishReason::Cancelled);
    if (out.stopped) {
      impl_->fetch_logits();
      return FinishReason::StopString;
    }
    if (position() + 1 > e.options.n_ctx) {
      if (!options.context_shift) return finish(FinishReason::Length);
      impl_->shift_context(options.n_keep);
    }
    const int32_t one[] = {token};
    try {
      const int32_t n_top = top_k_path ? sampler.top_candidates_needed() : 0;
      if (n_top > 0 && n_top <= Backend::kMaxTopK && n_top < impl_->n_vocab)
        impl_->append_sampled_top_k(token, n_top);
      else
        append(one);
      if (chat) {
        if (e.tokenizer->is_control(token)) chat.reset();  // its text is not what a template writes
        else *chat += e.tokenizer->token_to_piece(token);
      }
    } catch (const Error& err) {
      if (err.code() == ErrorCode::Cancelled) return finish(FinishReason::Cancelled);
      throw;
    }
  }
  return finish(FinishReason::Length);
}

}  // namespace cera
