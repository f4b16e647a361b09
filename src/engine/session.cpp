#include <algorithm>

#include "engine/engine_impl.h"
#include "sampling/sampler.h"

namespace cera {

struct Session::Impl {
  Engine::Impl* engine;
  int32_t seq_id;
  std::vector<float> logits;  // of the last append: [n, n_vocab]
  int32_t n_vocab;

  ~Impl() { engine->sequences->release(seq_id); }
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

void Session::append(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) throw Error(ErrorCode::InvalidArgument, "append: no tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= impl_->n_vocab)
      throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                                                  std::to_string(impl_->n_vocab - 1) + ")");
  Engine::Impl& e = *impl_->engine;
  const size_t chunk = size_t(e.model->max_batch_tokens());
  impl_->logits.clear();
  std::vector<float> part;
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const auto piece = tokens.subspan(i, std::min(chunk, tokens.size() - i));
    const bool last = i + piece.size() == tokens.size();
    if (!all_logits && !last) {
      // Intermediate chunk: its logits are not wanted; still one output row is computed (cheap).
      Engine::Impl::SeqInput in{impl_->seq_id, piece, false};
      e.step({&in, 1}, part);
      continue;
    }
    Engine::Impl::SeqInput in{impl_->seq_id, piece, all_logits};
    e.step({&in, 1}, part);
    impl_->logits.insert(impl_->logits.end(), part.begin(), part.end());
  }
}

std::span<const float> Session::logits() const { return impl_->logits; }

std::span<const float> Session::last_logits() const {
  if (impl_->logits.empty()) return {};
  return std::span<const float>(impl_->logits).last(size_t(impl_->n_vocab));
}

int32_t Session::position() const { return impl_->engine->sequences->get(impl_->seq_id).n_past; }

void Session::reset() {
  Engine::Impl& e = *impl_->engine;
  e.sequences->truncate(impl_->seq_id, 0);
  e.backend->clear_conv_slot(e.sequences->get(impl_->seq_id).conv_slot);
  impl_->logits.clear();
}

FinishReason Session::generate(const GenerateOptions& options, const TokenCallback& on_token) {
  if (impl_->logits.empty())
    throw Error(ErrorCode::InvalidArgument, "generate: append a prompt first");
  Engine::Impl& e = *impl_->engine;
  Sampler sampler(options.sampling);
  StreamingDetokenizer detok(*e.tokenizer);
  // Text still held back (an incomplete UTF-8 tail) is handed over with token -1 at the end.
  auto finish = [&](FinishReason reason) {
    const std::string rest = detok.flush();
    if (!rest.empty()) on_token(-1, rest);
    return reason;
  };
  for (int32_t n = 0; options.max_tokens < 0 || n < options.max_tokens; ++n) {
    const int32_t token = sampler.sample(last_logits());
    if (!options.ignore_eos && e.tokenizer->is_eog(token)) return finish(FinishReason::EndOfGeneration);
    if (!on_token(token, detok.push(token))) return finish(FinishReason::Cancelled);
    if (position() + 1 > e.options.n_ctx) return finish(FinishReason::Length);
    const int32_t one[] = {token};
    append(one);
  }
  return finish(FinishReason::Length);
}

}  // namespace cera
