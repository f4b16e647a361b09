// The C API (include/cera/cera.h): thin wrappers that turn every exception into a cera_status and a
// per-thread message, so none ever unwinds into C frames.
#include "cera/cera.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "cera/engine.h"

struct cera_engine {
  std::unique_ptr<cera::Engine> engine;
};

struct cera_session {
  std::unique_ptr<cera::Session> session;
};

namespace {

thread_local std::string g_last_error;

cera_status fail(cera_status status, const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    // Out of memory for the message itself: keep the status.
  }
  return status;
}

cera_status status_of(cera::ErrorCode code) { return cera_status(int(code) + 1); }

// Runs f; maps whatever it throws. f returns nothing: results travel through captures.
template <class F>
cera_status guarded(F&& f) noexcept {
  try {
    f();
    return CERA_OK;
  } catch (const cera::Error& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(CERA_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(CERA_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(CERA_ERR_INTERNAL, "unknown C++ exception");
  }
}

cera::SamplingParams to_cpp(const cera_sampling_params& p) {
  cera::SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.seed = p.seed;
  s.typical_p = p.typical_p;
  s.repeat_last_n = p.repeat_last_n;
  s.repeat_penalty = p.repeat_penalty;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  return s;
}

// The C++ sessions behind a C array of n sessions (with its tokens), or InvalidArgument naming `fn`.
std::vector<cera::Session*> batch_of(const char* fn, cera_engine* engine, cera_session* const* sessions,
                                     const int32_t* tokens, size_t n) {
  if (!engine || (n > 0 && (!sessions || !tokens)))
    throw cera::Error(cera::ErrorCode::InvalidArgument, std::string(fn) + ": NULL argument");
  std::vector<cera::Session*> batch(n);
  for (size_t i = 0; i < n; ++i) {
    if (!sessions[i])
      throw cera::Error(cera::ErrorCode::InvalidArgument,
                        std::string(fn) + ": session " + std::to_string(i) + " is NULL");
    batch[i] = sessions[i]->session.get();
  }
  return batch;
}

// One of the session's per-row outputs (logits or embeddings, from rows_of) with the rows of its
// last append, which the logits count. The logits of an append are read from the device here
// (Session::append returns once its steps are launched), so a device error surfaces here: NULL, and
// the message in cera_last_error.
template <class RowsOf>
const float* session_rows(const cera_session* session, size_t* n_rows, RowsOf rows_of) {
  if (n_rows) *n_rows = 0;
  if (!session) return nullptr;
  const float* out = nullptr;
  guarded([&] {
    const std::span<const float> rows = rows_of(*session->session);
    if (rows.empty()) return;
    // logits() is [n, n_vocab]; the row width is not stored here, so derive n from last_logits().
    if (n_rows) *n_rows = session->session->logits().size() / session->session->last_logits().size();
    out = rows.data();
  });
  return out;
}

}  // namespace

extern "C" {

cera_engine_options cera_engine_options_default(void) {
  const cera::EngineOptions d;
  cera_engine_options o{};
  o.model_path = nullptr;
  o.n_threads = d.n_threads;
  o.n_ctx = d.n_ctx;
  o.n_batch = d.n_batch;
  o.n_seq_max = d.n_seq_max;
  o.prefix_cache_mib = d.prefix_cache_mib;
  o.checkpoint_interval = d.checkpoint_interval;
  o.embeddings = d.embeddings ? 1 : 0;
  o.device = nullptr;
  o.n_gpu_layers = d.n_gpu_layers;
  o.cache_type = nullptr;
  return o;
}

cera_sampling_params cera_sampling_params_default(void) {
  const cera::SamplingParams d;
  cera_sampling_params p{};
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.seed = d.seed;
  p.typical_p = d.typical_p;
  p.repeat_last_n = d.repeat_last_n;
  p.repeat_penalty = d.repeat_penalty;
  p.presence_penalty = d.presence_penalty;
  p.frequency_penalty = d.frequency_penalty;
  return p;
}

cera_generate_options cera_generate_options_default(void) {
  const cera::GenerateOptions d;
  cera_generate_options o{};
  o.max_tokens = d.max_tokens;
  o.sampling = cera_sampling_params_default();
  o.ignore_eos = 0;
  o.stop = nullptr;
  o.n_stop = 0;
  o.grammar = nullptr;
  return o;
}

const char* cera_last_error(void) { return g_last_error.c_str(); }

const char* cera_status_name(cera_status status) {
  if (status == CERA_OK) return "ok";
  if (status >= CERA_ERR_INVALID_ARGUMENT && status <= CERA_ERR_INTERNAL)
    return cera::error_code_name(cera::ErrorCode(int(status) - 1));
  return "unknown status";
}

cera_engine* cera_engine_load(const cera_engine_options* options, char* err, size_t err_len) {
  cera_engine* out = nullptr;
  const cera_status st = guarded([&] {
    if (!options) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_engine_load: options is NULL");
    cera::EngineOptions o;
    o.model_path = options->model_path ? options->model_path : "";
    o.n_threads = options->n_threads;
    o.n_ctx = options->n_ctx;
    o.n_batch = options->n_batch;
    o.n_seq_max = options->n_seq_max;
    o.prefix_cache_mib = options->prefix_cache_mib;
    o.checkpoint_interval = options->checkpoint_interval;
    o.embeddings = options->embeddings != 0;
    o.device = options->device ? options->device : "";
    o.n_gpu_layers = options->n_gpu_layers;
    o.cache_type_k = options->cache_type ? options->cache_type : "";
    auto e = std::make_unique<cera_engine>();
    e->engine = cera::Engine::load(o);
    out = e.release();
  });
  if (st != CERA_OK && err && err_len > 0) {
    const size_t n = std::min(err_len - 1, g_last_error.size());
    std::memcpy(err, g_last_error.data(), n);
    err[n] = '\0';
  }
  return out;
}

void cera_engine_free(cera_engine* engine) { delete engine; }

int32_t cera_engine_n_vocab(const cera_engine* engine) { return engine ? engine->engine->info().n_vocab : 0; }
int32_t cera_engine_n_embd(const cera_engine* engine) { return engine ? engine->engine->info().n_embd : 0; }

int cera_engine_is_eog(const cera_engine* engine, int32_t token) {
  if (!engine || token < 0 || token >= engine->engine->info().n_vocab) return 0;
  return engine->engine->is_end_of_generation(token) ? 1 : 0;
}

cera_status cera_tokenize(const cera_engine* engine, const char* text, size_t text_len, int add_special,
                          int parse_special, int32_t* ids, size_t capacity, size_t* n_ids) {
  return guarded([&] {
    if (!engine || (!text && text_len > 0) || !n_ids || (!ids && capacity > 0))
      throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_tokenize: NULL argument");
    const auto v = engine->engine->tokenize(std::string_view(text ? text : "", text_len), add_special != 0,
                                            parse_special != 0);
    *n_ids = v.size();
    if (capacity < v.size())
      throw cera::Error(cera::ErrorCode::OutOfRange, "cera_tokenize: the text needs " + std::to_string(v.size()) +
                                                         " ids, the buffer holds " + std::to_string(capacity));
    std::copy(v.begin(), v.end(), ids);
  });
}

cera_status cera_detokenize(const cera_engine* engine, const int32_t* ids, size_t n_ids, char* buf, size_t capacity,
                            size_t* len) {
  return guarded([&] {
    if (!engine || (!ids && n_ids > 0) || !len || (!buf && capacity > 0))
      throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_detokenize: NULL argument");
    const int32_t n_vocab = engine->engine->info().n_vocab;
    for (size_t i = 0; i < n_ids; ++i)
      if (ids[i] < 0 || ids[i] >= n_vocab)
        throw cera::Error(cera::ErrorCode::InvalidArgument, "token id " + std::to_string(ids[i]) + " is outside the vocabulary");
    const std::string s = engine->engine->detokenize(std::span<const int32_t>(ids, n_ids));
    *len = s.size();
    if (capacity < s.size() + 1)
      throw cera::Error(cera::ErrorCode::OutOfRange, "cera_detokenize: the text needs " + std::to_string(s.size() + 1) +
                                                         " bytes, the buffer holds " + std::to_string(capacity));
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
  });
}

cera_session* cera_session_new(cera_engine* engine) {
  cera_session* out = nullptr;
  guarded([&] {
    if (!engine) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_session_new: engine is NULL");
    auto s = std::make_unique<cera_session>();
    s->session = engine->engine->new_session();
    out = s.release();
  });
  return out;
}

void cera_session_free(cera_session* session) { delete session; }

cera_status cera_session_append(cera_session* session, const int32_t* ids, size_t n_ids, int all_logits) {
  return guarded([&] {
    if (!session || (!ids && n_ids > 0))
      throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_session_append: NULL argument");
    session->session->append(std::span<const int32_t>(ids, n_ids), all_logits != 0);
  });
}

cera_status cera_decode_batch(cera_engine* engine, cera_session* const* sessions, const int32_t* tokens, size_t n,
                              int32_t* next_tokens) {
  return guarded([&] {
    const std::vector<cera::Session*> batch = batch_of("cera_decode_batch", engine, sessions, tokens, n);
    const std::span<const int32_t> ids(tokens, n);
    if (next_tokens) engine->engine->decode_batch_greedy(batch, ids, std::span<int32_t>(next_tokens, n));
    else engine->engine->decode_batch(batch, ids);
  });
}

cera_status cera_generate_greedy_batch(cera_engine* engine, cera_session* const* sessions, const int32_t* tokens,
                                       size_t n, int32_t n_steps, int32_t* out_tokens) {
  return guarded([&] {
    const std::vector<cera::Session*> batch = batch_of("cera_generate_greedy_batch", engine, sessions, tokens, n);
    if (n > 0 && n_steps > 0 && !out_tokens)
      throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_generate_greedy_batch: NULL argument");
    if (n_steps < 0) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_generate_greedy_batch: n_steps < 0");
    engine->engine->generate_greedy_batch(batch, std::span<const int32_t>(tokens, n), n_steps,
                                          std::span<int32_t>(out_tokens, size_t(n_steps) * n));
  });
}

const float* cera_session_logits(const cera_session* session, size_t* n_rows) {
  return session_rows(session, n_rows, [](const cera::Session& s) { return s.logits(); });
}

const float* cera_session_embeddings(const cera_session* session, size_t* n_rows) {
  return session_rows(session, n_rows, [](const cera::Session& s) { return s.embeddings(); });
}

int32_t cera_session_position(const cera_session* session) { return session ? session->session->position() : 0; }

cera_status cera_session_reset(cera_session* session) {
  return guarded([&] {
    if (!session) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_session_reset: session is NULL");
    session->session->reset();
  });
}

cera_session* cera_session_fork(cera_session* session) {
  cera_session* out = nullptr;
  guarded([&] {
    if (!session) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_session_fork: session is NULL");
    auto s = std::make_unique<cera_session>();
    s->session = session->session->fork();
    out = s.release();
  });
  return out;
}

void cera_session_cancel(cera_session* session) {
  if (session) session->session->cancel();
}

cera_status cera_generate(cera_session* session, const cera_generate_options* options, cera_token_callback callback,
                          void* user_data, cera_finish_reason* finish_reason) {
  if (finish_reason) *finish_reason = CERA_FINISH_NONE;
  return guarded([&] {
    if (!session) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_generate: session is NULL");
    const cera_generate_options o = options ? *options : cera_generate_options_default();
    cera::GenerateOptions g;
    g.max_tokens = o.max_tokens;
    g.sampling = to_cpp(o.sampling);
    g.ignore_eos = o.ignore_eos != 0;
    if (o.n_stop > 0 && !o.stop) throw cera::Error(cera::ErrorCode::InvalidArgument, "cera_generate: stop is NULL");
    for (size_t i = 0; i < o.n_stop; ++i)
      if (o.stop[i]) g.stop.emplace_back(o.stop[i]);
    if (o.grammar) g.grammar = o.grammar;
    const cera::FinishReason r =
        session->session->generate(g, [&](int32_t token, std::string_view text) {
          return callback ? callback(token, text.data(), text.size(), user_data) != 0 : true;
        });
    if (finish_reason) *finish_reason = cera_finish_reason(int(r));
  });
}

}  // extern "C"
