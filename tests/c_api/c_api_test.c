/* The C API exercised from C11: load the lfm2-tiny fixture, tokenize against the fixture ids,
 * greedy-generate against the fixture greedy tokens, and the error paths. Not gtest: plain C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera/cera.h"

static int passed = 0, failed = 0;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      ++passed;                                            \
    } else {                                               \
      ++failed;                                            \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
    }                                                      \
  } while (0)

static const int32_t kPromptIds[] = {1, 65, 286, 297, 474, 325, 294, 382, 510, 341, 663, 326};
static const int32_t kGreedy[] = {466, 666, 762, 799, 149, 616, 25, 59};
#define N_PROMPT (sizeof kPromptIds / sizeof kPromptIds[0])
#define N_GREEDY (sizeof kGreedy / sizeof kGreedy[0])

typedef struct {
  int32_t tokens[64];
  size_t n;
  char text[1024];
  size_t text_len;
  size_t stop_after; /* 0: never stop early */
} Collected;

static int collect(int32_t token, const char* text, size_t len, void* user) {
  Collected* c = (Collected*)user;
  if (token >= 0 && c->n < 64) c->tokens[c->n++] = token;
  if (c->text_len + len < sizeof c->text) {
    memcpy(c->text + c->text_len, text, len);
    c->text_len += len;
    c->text[c->text_len] = '\0';
  }
  return c->stop_after == 0 || c->n < c->stop_after;
}

int main(void) {
  char path[4096];
  const char* fixtures = getenv("CERA_FIXTURES");
  snprintf(path, sizeof path, "%s/models/lfm2-tiny/gguf/lfm2-tiny-BF16.gguf",
           fixtures && *fixtures ? fixtures : CERA_FIXTURES_DIR);

  /* Error path: a missing file gives NULL, a status-bearing message, and no exception. */
  {
    char err[256] = "";
    cera_engine_options o = cera_engine_options_default();
    o.model_path = "/nonexistent/model.gguf";
    cera_engine* e = cera_engine_load(&o, err, sizeof err);
    CHECK(e == NULL, "loading a missing file succeeded");
    CHECK(strlen(err) > 0, "no error message");
    CHECK(strstr(err, "nonexistent") != NULL, "message does not name the file: %s", err);
    CHECK(strcmp(cera_last_error(), err) == 0, "last error '%s' != '%s'", cera_last_error(), err);
    char tiny[8];
    e = cera_engine_load(&o, tiny, sizeof tiny); /* truncated, still NUL-terminated */
    CHECK(e == NULL && strlen(tiny) == sizeof tiny - 1, "truncated message has length %zu", strlen(tiny));
    CHECK(cera_engine_load(NULL, NULL, 0) == NULL, "NULL options accepted");
    o.device = "tpu";
    e = cera_engine_load(&o, err, sizeof err);
    CHECK(e == NULL && strstr(err, "tpu") != NULL, "an unknown device was accepted: %s", err);
    o.device = "cpu";
    o.cache_type = "f16"; /* the CPU keeps an f32 cache: refused before the file is opened */
    e = cera_engine_load(&o, err, sizeof err);
    CHECK(e == NULL && strstr(err, "--device cuda") != NULL, "an f16 cache on the CPU was accepted: %s", err);
    o.cache_type = "q8_0";
    e = cera_engine_load(&o, err, sizeof err);
    CHECK(e == NULL && strstr(err, "q8_0") != NULL, "an unknown cache type was accepted: %s", err);
  }

  char err[512] = "";
  cera_engine_options o = cera_engine_options_default();
  o.model_path = path;
  o.n_ctx = 256;
  o.n_threads = 2;
  o.n_seq_max = 4; /* the session, its fork, and two for batched decode */
  cera_engine* engine = cera_engine_load(&o, err, sizeof err);
  CHECK(engine != NULL, "load %s: %s", path, err);
  if (!engine) {
    printf("%d passed, %d failed\n", passed, failed);
    return 1;
  }

  /* Tokenize: first ask for the size, then fill. */
  const char* prompt = "The capital of France is";
  size_t n_ids = 0;
  cera_status st = cera_tokenize(engine, prompt, strlen(prompt), 1, 0, NULL, 0, &n_ids);
  CHECK(st == CERA_ERR_OUT_OF_RANGE && n_ids == N_PROMPT, "size query: status %d, n %zu", (int)st, n_ids);
  int32_t ids[64];
  st = cera_tokenize(engine, prompt, strlen(prompt), 1, 0, ids, 64, &n_ids);
  CHECK(st == CERA_OK, "tokenize: %s", cera_last_error());
  CHECK(n_ids == N_PROMPT && memcmp(ids, kPromptIds, sizeof kPromptIds) == 0, "ids differ from the fixture (n %zu)", n_ids);

  /* Detokenize round trip (the BOS renders as nothing). */
  char text[256];
  size_t len = 0;
  st = cera_detokenize(engine, ids + 1, n_ids - 1, text, sizeof text, &len);
  CHECK(st == CERA_OK && strcmp(text, prompt) == 0, "detokenize: '%s' (%s)", text, cera_last_error());
  st = cera_detokenize(engine, ids + 1, n_ids - 1, text, 4, &len);
  CHECK(st == CERA_ERR_OUT_OF_RANGE && len == strlen(prompt), "small buffer: status %d len %zu", (int)st, len);

  /* Greedy generation matches the fixture. */
  cera_session* s = cera_session_new(engine);
  CHECK(s != NULL, "session: %s", cera_last_error());
  st = cera_session_append(s, ids, n_ids, 0);
  CHECK(st == CERA_OK, "append: %s", cera_last_error());
  CHECK(cera_session_position(s) == (int32_t)N_PROMPT, "position %d", cera_session_position(s));
  size_t rows = 0;
  const float* logits = cera_session_logits(s, &rows);
  CHECK(logits != NULL && rows == 1, "logits rows %zu", rows);
  if (logits) { /* argmax of the prompt's last logits is the first greedy token */
    int32_t best = 0;
    for (int32_t i = 1; i < cera_engine_n_vocab(engine); ++i)
      if (logits[i] > logits[best]) best = i;
    CHECK(best == kGreedy[0], "argmax %d", best);
  }
  rows = 7;
  CHECK(cera_session_embeddings(s, &rows) == NULL && rows == 0, "embeddings without the option: rows %zu", rows);
  cera_session* fork = cera_session_fork(s);
  CHECK(fork != NULL, "fork: %s", cera_last_error());

  cera_generate_options g = cera_generate_options_default();
  g.max_tokens = (int32_t)N_GREEDY;
  g.sampling.temperature = 0.f;
  g.ignore_eos = 1;
  Collected c;
  memset(&c, 0, sizeof c);
  cera_finish_reason reason = CERA_FINISH_NONE;
  st = cera_generate(s, &g, collect, &c, &reason);
  CHECK(st == CERA_OK, "generate: %s", cera_last_error());
  CHECK(reason == CERA_FINISH_LENGTH, "finish reason %d", (int)reason);
  CHECK(c.n == N_GREEDY && memcmp(c.tokens, kGreedy, sizeof kGreedy) == 0, "greedy tokens differ (n %zu)", c.n);
  for (size_t i = 0; i < c.n && i < N_GREEDY; ++i)
    if (c.tokens[i] != kGreedy[i]) fprintf(stderr, "  token %zu: %d, want %d\n", i, c.tokens[i], kGreedy[i]);
  {
    char want[256];
    size_t wl = 0;
    cera_detokenize(engine, kGreedy, N_GREEDY, want, sizeof want, &wl);
    CHECK(strcmp(c.text, want) == 0, "streamed text '%s' != '%s'", c.text, want);
  }

  /* The fork continues independently, and the callback can stop it. */
  memset(&c, 0, sizeof c);
  c.stop_after = 3;
  st = cera_generate(fork, &g, collect, &c, &reason);
  CHECK(st == CERA_OK && reason == CERA_FINISH_CANCELLED && c.n == 3, "stop from callback: st %d reason %d n %zu",
        (int)st, (int)reason, c.n);
  CHECK(c.n >= 3 && memcmp(c.tokens, kGreedy, 3 * sizeof(int32_t)) == 0, "fork tokens differ");

  /* Reset, errors on the session, cancel before work. */
  CHECK(cera_session_reset(s) == CERA_OK && cera_session_position(s) == 0, "reset");
  memset(&c, 0, sizeof c);
  st = cera_generate(s, &g, collect, &c, &reason);
  CHECK(st == CERA_ERR_INVALID_ARGUMENT && strlen(cera_last_error()) > 0, "generate without a prompt: %d", (int)st);
  const int32_t bad = 1 << 30;
  st = cera_session_append(s, &bad, 1, 0);
  CHECK(st == CERA_ERR_INVALID_ARGUMENT && strstr(cera_last_error(), "vocabulary") != NULL, "bad id: %d %s", (int)st,
        cera_last_error());
  st = cera_session_append(s, ids, n_ids, 0);
  CHECK(st == CERA_OK, "append after reset");
  cera_session_cancel(s);
  memset(&c, 0, sizeof c);
  st = cera_generate(s, &g, collect, &c, &reason);
  CHECK(st == CERA_OK && reason == CERA_FINISH_CANCELLED && c.n == 0, "cancel: reason %d n %zu", (int)reason, c.n);
  g.grammar = "root ::= [";  /* a broken grammar is an error code, not an abort */
  st = cera_generate(s, &g, collect, &c, &reason);
  CHECK(st != CERA_OK && strlen(cera_last_error()) > 0, "bad grammar: status %d", (int)st);

  /* Batched decode: two sessions with the prompt take the first greedy token together; the argmax
   * (greedy variant) and then the logits (plain variant) continue the fixture's greedy sequence. */
  {
    cera_session* a = cera_session_new(engine);
    cera_session* b = cera_session_new(engine);
    CHECK(a && b, "sessions: %s", cera_last_error());
    CHECK(cera_session_append(a, ids, n_ids, 0) == CERA_OK && cera_session_append(b, ids, n_ids, 0) == CERA_OK,
          "append: %s", cera_last_error());
    cera_session* pair[2] = {a, b};
    int32_t tok[2] = {kGreedy[0], kGreedy[0]}, next[2] = {-1, -1};
    st = cera_decode_batch(engine, pair, tok, 2, next);
    CHECK(st == CERA_OK && next[0] == kGreedy[1] && next[1] == kGreedy[1], "greedy batch: %d %d (%s)", next[0],
          next[1], cera_last_error());
    tok[0] = tok[1] = kGreedy[1];
    st = cera_decode_batch(engine, pair, tok, 2, NULL);
    size_t r = 0;
    const float* l = cera_session_logits(b, &r);
    CHECK(st == CERA_OK && l != NULL && r == 1, "batch logits: %s", cera_last_error());
    if (l) {
      int32_t best = 0;
      for (int32_t i = 1; i < cera_engine_n_vocab(engine); ++i)
        if (l[i] > l[best]) best = i;
      CHECK(best == kGreedy[2], "argmax after the batch %d", best);
    }
    cera_session* twice[2] = {a, a};
    CHECK(cera_decode_batch(engine, twice, tok, 2, NULL) == CERA_ERR_INVALID_ARGUMENT, "a session twice accepted");
    cera_session* with_null[2] = {a, NULL};
    CHECK(cera_decode_batch(engine, with_null, tok, 2, NULL) == CERA_ERR_INVALID_ARGUMENT, "a NULL session accepted");
    CHECK(cera_session_position(a) == (int32_t)N_PROMPT + 2, "position after the batches %d", cera_session_position(a));
    cera_session_free(a);
    cera_session_free(b);
  }

  /* Several greedy steps at once: both sessions follow the fixture's greedy continuation. */
  {
    cera_session* a = cera_session_new(engine);
    cera_session* b = cera_session_new(engine);
    CHECK(a && b && cera_session_append(a, ids, n_ids, 0) == CERA_OK && cera_session_append(b, ids, n_ids, 0) == CERA_OK,
          "sessions: %s", cera_last_error());
    cera_session* pair[2] = {a, b};
    const int32_t first[2] = {kGreedy[0], kGreedy[0]};
    int32_t out[2 * (N_GREEDY - 1)];
    st = cera_generate_greedy_batch(engine, pair, first, 2, (int32_t)(N_GREEDY - 1), out);
    CHECK(st == CERA_OK, "generate_greedy_batch: %s", cera_last_error());
    for (size_t k = 0; k + 1 < N_GREEDY; ++k)
      CHECK(out[2 * k] == kGreedy[k + 1] && out[2 * k + 1] == kGreedy[k + 1], "step %zu: %d %d, want %d", k,
            out[2 * k], out[2 * k + 1], kGreedy[k + 1]);
    CHECK(cera_session_position(a) == (int32_t)(N_PROMPT + N_GREEDY - 1), "position %d", cera_session_position(a));
    CHECK(cera_generate_greedy_batch(engine, pair, first, 2, 3, NULL) == CERA_ERR_INVALID_ARGUMENT, "NULL out accepted");
    cera_session_free(a);
    cera_session_free(b);
  }

  cera_session_free(fork);
  cera_session_free(s);
  cera_engine_free(engine);

  /* With embeddings on: the prompt's last row of final-norm hidden states, n_embd floats. */
  o.embeddings = 1;
  engine = cera_engine_load(&o, err, sizeof err);
  CHECK(engine != NULL, "load with embeddings: %s", err);
  if (engine) {
    cera_session* e = cera_session_new(engine);
    CHECK(e != NULL && cera_session_append(e, ids, n_ids, 0) == CERA_OK, "append: %s", cera_last_error());
    rows = 0;
    const float* h = cera_session_embeddings(e, &rows);
    CHECK(h != NULL && rows == 1, "embeddings rows %zu", rows);
    int finite = h != NULL;
    for (int32_t i = 0; h && i < cera_engine_n_embd(engine); ++i) finite = finite && h[i] == h[i] && h[i] - h[i] == 0.f;
    CHECK(finite, "embeddings are not all finite numbers");
    cera_session_free(e);
    cera_engine_free(engine);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
