// The public C++ API: an Engine owns a loaded model (weights on a backend, tokenizer, per-sequence
// state); a Session is one sequence of tokens being extended, prompt then generated tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cera/error.h"
#include "cera/sampling.h"

namespace cera {

inline constexpr int32_t kDefaultBatchCpu = 512;
inline constexpr int32_t kDefaultBatchGpu = 4096;
inline constexpr int32_t kDefaultCheckpointCpu = 128;
inline constexpr int32_t kDefaultCheckpointGpu = 1024;

struct EngineOptions {
  std::string model_path;    // a GGUF file
  int32_t n_threads = 0;     // 0: all hardware threads (CPU backend)
  // Where the model runs: "cpu" or "cuda". Empty: "cuda" when n_gpu_layers > 0, else "cpu".
  std::string device;
  // llama.cpp's -ngl, for familiarity. cera offloads all layers or none: 0 keeps the model on the
  // CPU; a value of at least the layer count (e.g. 99) puts it all on the GPU; -1: not given.
  int32_t n_gpu_layers = -1;
  int32_t n_ctx = 4096;      // tokens per sequence (KV memory is sized from this)
  // Largest number of tokens in one forward step (prefill chunk); 0 = the device's default
  // (kDefaultBatchCpu on the CPU, kDefaultBatchGpu on a GPU, where bigger steps use it better).
  int32_t n_batch = 0;
  int32_t n_seq_max = 1;     // sequences alive at once
  // Prompt prefix cache (memory budget for its KV blocks and conv checkpoints; 0 turns it off).
  // A new session whose prompt starts like an earlier one resumes from the cached prefix.
  int32_t prefix_cache_mib = 256;
  // Tokens between conv-state checkpoints (a multiple of 32). Prefill runs in chunks ending at
  // these positions, so a hybrid model (LFM2) can resume from any multiple of it. 0 = the device's
  // default: kDefaultCheckpointCpu, or kDefaultCheckpointGpu (larger, so prefill steps stay large).
  int32_t checkpoint_interval = 0;
  // Sessions also keep the final-norm hidden states of their output rows (Session::embeddings()).
  bool embeddings = false;
  // KV cache element type, as llama.cpp's --cache-type-k/-v: "" (the device's default, f32), "f32",
  // or "f16" (CUDA only: half the KV memory; decode at long contexts is a little slower). K and V
  // share one type: an empty one takes the other's.
  std::string cache_type_k, cache_type_v;
};

struct ModelInfo {
  std::string arch;
  std::string name;
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  uint64_t n_params = 0;
  uint64_t weight_bytes = 0;  // bytes of all tensors in the file
  std::string backend;
};

class Engine;

enum class FinishReason { None, Length, EndOfGeneration, StopString, Cancelled };

struct GenerateOptions {
  int32_t max_tokens = 128;  // -1: until end of generation or context full
  SamplingParams sampling;
  bool ignore_eos = false;   // end-of-generation tokens are banned (as llama.cpp's --ignore-eos)
  // Generation stops when the text contains one of these; the stop itself (and anything after it)
  // is never passed to the callback, also when it arrives split across several tokens.
  std::vector<std::string> stop;
  // A GBNF grammar (llama.cpp's dialect) the output must follow; empty: unconstrained. For JSON,
  // pass json_grammar_gbnf() or json_schema_to_gbnf(schema) (cera/structured_output.h).
  std::string grammar;
  // When the context is full: false ends with FinishReason::Length; true shifts the context as
  // llama.cpp does — keeps the first n_keep tokens, drops half of the rest (RoPE-correct: the kept
  // keys are re-rotated for their new positions) and goes on.
  bool context_shift = false;
  int32_t n_keep = 0;
  // With sampling.n_probs > 0: called for every sampled token, before the token callback, with its
  // log-probability and the n_probs most likely alternatives (see SamplingParams::post_sampling_probs).
  std::function<void(const SampledToken&)> on_logprobs;
  // Pass the text of special tokens (e.g. <|tool_call_start|>) to the callback; normally dropped.
  bool render_special = false;
};

// Called for every generated token with its id and the text it completes (possibly empty while a
// UTF-8 character is split across tokens); at the end, text still held back comes with token -1.
// Return false to stop.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Feeds tokens (prefill in chunks of n_batch). With all_logits the logits of every fed token are
  // kept (see logits()), otherwise only those of the last. On a GPU, an append of the latter kind
  // returns once its steps are launched and logits() waits for them: appends whose logits nobody
  // reads follow each other without the host waiting between them.
  void append(std::span<const int32_t> tokens, bool all_logits = false);
  // Tokenizes and appends text; BOS is added (as the model's tokenizer says) only at position 0.
  // parse_special: text such as <|im_start|> becomes its special token (for rendered templates).
  void append_text(std::string_view text, bool parse_special = false);
  // Chat: `messages_json` is the whole conversation so far, a JSON array of {"role", "content"}
  // objects as in the OpenAI API (`tools_json`: a JSON array of tools, or empty). Renders the model's
  // chat template with the generation prompt and evaluates only what is new since the last
  // append_chat + generate (the session holds the rendering and the reply); if earlier turns were
  // rewritten it starts over. Throws Error(NotFound) if the model has no chat template.
  void append_chat(const std::string& messages_json, const std::string& tools_json = "");
  // Logits of the tokens fed by the last append: [n, n_vocab] row-major (n = 1 unless all_logits).
  std::span<const float> logits() const;
  std::span<const float> last_logits() const;
  // With EngineOptions::embeddings: the final-norm hidden states (the LM head's input) of the same
  // rows as logits(), [n, n_embd]; empty otherwise.
  std::span<const float> embeddings() const;
  int32_t position() const;  // tokens processed so far
  void reset();              // back to an empty sequence
  // An independent copy of this session (same tokens, same state). KV blocks are shared until
  // either side writes into a shared block (copy-on-write), so forking is cheap.
  std::unique_ptr<Session> fork();
  // Asks a running append()/generate() (on another thread) to stop at the next step boundary; it
  // then throws Error(Cancelled) / returns FinishReason::Cancelled. The flag clears when it stops.
  void cancel();
  // Tokens of the last append() that were restored from the prefix cache instead of evaluated.
  int32_t reused_tokens() const;

  // Samples up to max_tokens tokens after what was appended, feeding each back.
  FinishReason generate(const GenerateOptions& options, const TokenCallback& on_token);

 private:
  friend class Engine;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Engine {
 public:
  static std::unique_ptr<Engine> load(const EngineOptions& options);  // throws cera::Error
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const;
  const EngineOptions& options() const;

  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = false) const;
  std::string token_to_piece(int32_t token) const;
  // The text of the tokens, as valid UTF-8 (byte sequences that are not UTF-8 become U+FFFD).
  std::string detokenize(std::span<const int32_t> tokens) const;
  bool is_end_of_generation(int32_t token) const;

  std::unique_ptr<Session> new_session();

  // Appends tokens[i] to sessions[i], for every i, in ONE forward step over all of them: batched
  // decode, the primitive continuous batching is built on (many sequences cost little more than one
  // while decode is bound by reading the weights). Afterwards sessions[i]->last_logits() is the
  // distribution after tokens[i], exactly as if each had called append({tokens[i]}).
  // Throws InvalidArgument for an empty list, mismatched lengths, a session of another engine or
  // listed twice, or a token outside the vocabulary; OutOfRange when a session's context is full.
  void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens);
  // decode_batch for greedy decoding: the same step, but only each session's most likely next token
  // comes back (next_tokens[i], computed where the model runs, the first on ties), so a GPU does not
  // move sessions × n_vocab logits to the host every step. last_logits() is empty afterwards.
  void decode_batch_greedy(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                           std::span<int32_t> next_tokens);
  // n_steps of decode_batch_greedy in a row, each step appending the previous one's tokens:
  // step 0 appends tokens[i] to sessions[i]; out_tokens[k·n + i] (n = sessions.size()) is the token
  // session i chose at step k, which step k + 1 appends (the last step's choice is not appended).
  // The same tokens as n_steps calls of decode_batch_greedy, but pipelined: each step's argmax is
  // fed back where it was computed (on a GPU it never crosses to the host first), and the host
  // launches step k + 1 and does step k's bookkeeping while the device runs step k.
  // Errors as decode_batch; on an error the sessions hold every step that ran.
  void generate_greedy_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens, int32_t n_steps,
                             std::span<int32_t> out_tokens);

 private:
  friend class Session;
  friend struct EngineInternals;  // src/engine/engine_impl.h: tests reach the Impl through it
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  // decode_batch and decode_batch_greedy: next_tokens empty asks for the logits.
  void decode_batch_impl(std::span<Session* const> sessions, std::span<const int32_t> tokens,
                         std::span<int32_t> next_tokens);
  // The checks decode_batch makes on its arguments.
  void check_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cera
