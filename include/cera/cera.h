/* cera's C API: the same Engine and Session as cera/engine.h behind opaque handles, for C and for
 * foreign-function interfaces. No C++ exception crosses it: every failure becomes a cera_status and
 * a message (cera_last_error(), per thread).
 *
 * Threads: one engine may be used from several threads only as cera/engine.h allows (one thread per
 * session at a time); cera_session_cancel() may be called from any thread (not from a signal handler). */
#ifndef CERA_CERA_H
#define CERA_CERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mirrors cera::ErrorCode (value = code + 1); CERA_OK is success. */
typedef enum cera_status {
  CERA_OK = 0,
  CERA_ERR_INVALID_ARGUMENT = 1,
  CERA_ERR_IO = 2,
  CERA_ERR_BAD_FORMAT = 3,
  CERA_ERR_UNSUPPORTED = 4,
  CERA_ERR_NOT_FOUND = 5,
  CERA_ERR_OUT_OF_RANGE = 6, /* also: a caller buffer is too small (the required size is reported) */
  CERA_ERR_CANCELLED = 7,
  CERA_ERR_INTERNAL = 8
} cera_status;

typedef enum cera_finish_reason {
  CERA_FINISH_NONE = 0,
  CERA_FINISH_LENGTH = 1,
  CERA_FINISH_END_OF_GENERATION = 2,
  CERA_FINISH_STOP_STRING = 3,
  CERA_FINISH_CANCELLED = 4
} cera_finish_reason;

typedef struct cera_engine cera_engine;
typedef struct cera_session cera_session;

typedef struct cera_engine_options {
  const char* model_path;       /* a GGUF file (or a Hugging Face folder) */
  int32_t n_threads;            /* 0: all hardware threads */
  int32_t n_ctx;                /* tokens per sequence */
  int32_t n_batch;              /* largest prefill chunk; 0 = the device's default (512 CPU, 4096 GPU) */
  int32_t n_seq_max;            /* sessions alive at once */
  int32_t prefix_cache_mib;     /* 0: no prompt prefix cache */
  int32_t checkpoint_interval;  /* a multiple of 32; 0 = the device's default (128 CPU, 1024 GPU) */
  int32_t embeddings;           /* non-zero: sessions also keep final-norm hidden states */
  const char* device;           /* "cpu", "cuda" or "cuda:N"; NULL or "": cpu (cuda when n_gpu_layers > 0) */
  int32_t n_gpu_layers;         /* llama.cpp's -ngl: 0 none, >= the layer count all; -1: not given */
  const char* cache_type;       /* KV cache type: NULL or "": the default (f32); "f32"; "f16" (cuda only) */
} cera_engine_options;

/* Same defaults as cera::SamplingParams (llama.cpp's). temperature <= 0: greedy. */
typedef struct cera_sampling_params {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed; /* 0xFFFFFFFF: random */
  float typical_p;
  int32_t repeat_last_n;
  float repeat_penalty;
  float presence_penalty;
  float frequency_penalty;
} cera_sampling_params;

typedef struct cera_generate_options {
  int32_t max_tokens; /* -1: until end of generation or context full */
  cera_sampling_params sampling;
  int32_t ignore_eos;
  const char* const* stop; /* n_stop NUL-terminated stop strings (may be NULL when n_stop is 0) */
  size_t n_stop;
  const char* grammar;     /* GBNF, or NULL/"" for none */
} cera_generate_options;

/* Called for each generated token with the text it completes (not NUL-terminated, maybe empty); at
 * the end, held-back text comes with token -1. Return non-zero to continue, 0 to stop. */
typedef int (*cera_token_callback)(int32_t token, const char* text, size_t len, void* user_data);

cera_engine_options cera_engine_options_default(void);
cera_sampling_params cera_sampling_params_default(void);
cera_generate_options cera_generate_options_default(void);

/* The message of the last failure on this thread ("" if none). Valid until the next failing call. */
const char* cera_last_error(void);
const char* cera_status_name(cera_status status);

/* NULL on failure; the message goes to err (truncated to err_len, NUL-terminated; err may be NULL)
 * and to cera_last_error(). */
cera_engine* cera_engine_load(const cera_engine_options* options, char* err, size_t err_len);
void cera_engine_free(cera_engine* engine); /* NULL is fine; free its sessions first */
int32_t cera_engine_n_vocab(const cera_engine* engine);
int32_t cera_engine_n_embd(const cera_engine* engine);
int cera_engine_is_eog(const cera_engine* engine, int32_t token);

/* Writes up to capacity ids; *n_ids gets the number the text needs. CERA_ERR_OUT_OF_RANGE when
 * capacity is too small (call again with a buffer of *n_ids). ids may be NULL when capacity is 0. */
cera_status cera_tokenize(const cera_engine* engine, const char* text, size_t text_len, int add_special,
                          int parse_special, int32_t* ids, size_t capacity, size_t* n_ids);
/* The text of the ids (valid UTF-8), NUL-terminated. *len gets its length without the NUL;
 * CERA_ERR_OUT_OF_RANGE when capacity < *len + 1 (buf then holds nothing useful). */
cera_status cera_detokenize(const cera_engine* engine, const int32_t* ids, size_t n_ids, char* buf, size_t capacity,
                            size_t* len);

cera_session* cera_session_new(cera_engine* engine); /* NULL on failure (see cera_last_error) */
void cera_session_free(cera_session* session);
cera_status cera_session_append(cera_session* session, const int32_t* ids, size_t n_ids, int all_logits);
/* Logits of the last append: *n_rows rows of cera_engine_n_vocab floats. Valid until the next call
 * on the session. NULL with *n_rows = 0 before any append. On a GPU an append returns once its
 * steps are launched and this call waits for them: a device error then shows here (NULL, and the
 * message in cera_last_error). */
const float* cera_session_logits(const cera_session* session, size_t* n_rows);
/* Final-norm hidden states of the same rows, n_embd floats each; NULL unless the engine was loaded
 * with embeddings. */
const float* cera_session_embeddings(const cera_session* session, size_t* n_rows);
int32_t cera_session_position(const cera_session* session);
cera_status cera_session_reset(cera_session* session);
cera_session* cera_session_fork(cera_session* session); /* NULL on failure */
void cera_session_cancel(cera_session* session);         /* any thread */

/* One forward step over n sessions of `engine` (batched decode): sessions[i] appends tokens[i].
 * With next_tokens NULL, each session's logits (cera_session_logits) are the distribution after its
 * token. With next_tokens non-NULL, next_tokens[i] gets session i's most likely next token, computed
 * where the model runs (on a GPU no n × n_vocab logits cross to the host), and the logits are empty.
 * A session may appear once; all must belong to `engine`. */
cera_status cera_decode_batch(cera_engine* engine, cera_session* const* sessions, const int32_t* tokens, size_t n,
                              int32_t* next_tokens);
/* n_steps greedy steps of cera_decode_batch in a row: step 0 appends tokens[i] to sessions[i];
 * out_tokens[k * n + i] (n_steps * n entries) is session i's most likely token after step k, which
 * step k + 1 appends (the last step's choice is not appended). On a GPU the steps are pipelined:
 * each step's tokens stay on the device and the host prepares the next step while one runs. */
cera_status cera_generate_greedy_batch(cera_engine* engine, cera_session* const* sessions, const int32_t* tokens,
                                       size_t n, int32_t n_steps, int32_t* out_tokens);

/* Samples after what was appended, feeding each token back. options may be NULL (defaults). */
cera_status cera_generate(cera_session* session, const cera_generate_options* options, cera_token_callback callback,
                          void* user_data, cera_finish_reason* finish_reason);

#ifdef __cplusplus
}
#endif

#endif /* CERA_CERA_H */
