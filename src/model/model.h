// A model = hyper-parameters + weights on a backend + one forward pass written against the
// backend op interface. Architectures register a loader by their GGUF `general.architecture`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/gguf.h"

namespace cera {

struct ModelHparams {
  std::string arch;
  std::string name;
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t head_dim = 0;
  std::vector<int32_t> n_head_kv;  // per layer (LFM2: 0 marks a conv layer)
  std::vector<int32_t> n_ff;       // per layer
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  float norm_eps = 1e-5f;
  float rope_base = 10000.f;
  int32_t conv_kernel = 0;  // LFM2 shortconv.l_cache
};

struct ModelOptions {
  int32_t max_batch_tokens = 512;  // rows of the largest step (prefill chunk)
  // Rows of logits one step can return (≤ max_batch_tokens; 0 = max_batch_tokens): the logits buffer
  // is this × n_vocab floats, so a large prefill step need not mean gigabytes of logits.
  int32_t max_output_rows = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelHparams& hparams() const = 0;
  // Per-sequence state this architecture needs, for the given KV pool and number of slots.
  virtual StateLayout state_layout(int32_t kv_block_size, int32_t n_kv_blocks, int32_t n_slots) const = 0;
  int32_t max_batch_tokens() const { return max_batch_tokens_; }
  int32_t max_output_rows() const { return max_output_rows_; }
  // Runs the step whose inputs were handed to backend().set_step(); returns the logits of the
  // step's output rows, [n_outputs, n_vocab], in backend memory.
  virtual Tensor forward(int32_t n_tokens, int32_t n_outputs) = 0;
  // The same step while the backend replays a recorded one (Backend::replaying): every op call
  // would return at once, so only what forward() returns (and output_hidden) is worked out.
  virtual Tensor replay(int32_t n_tokens, int32_t n_outputs) { return forward(n_tokens, n_outputs); }
  // Context shift: in every attention layer, moves the K/V of positions [first, first + count) of
  // the sequence with block table `blocks` down by `delta`, with K re-rotated for its new position.
  // (Conv state holds only the last few inputs, so it is already right after a shift.)
  virtual void shift_context(std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta) = 0;
  // The last forward's output rows after the final norm (the LM head's input), [n_outputs, n_embd],
  // in backend memory: the hidden states embeddings are read from.
  const Tensor& output_hidden() const { return output_hidden_; }
  Backend& backend() { return backend_; }

 protected:
  Model(Backend& backend, const ModelOptions& o)
      : backend_(backend),
        max_batch_tokens_(o.max_batch_tokens),
        max_output_rows_(o.max_output_rows > 0 ? std::min(o.max_output_rows, o.max_batch_tokens) : o.max_batch_tokens) {}
  // forward() refuses a step with more outputs than the logits buffer holds.
  void check_outputs(int32_t n_outputs) const;
  Backend& backend_;
  int32_t max_batch_tokens_, max_output_rows_;
  Tensor output_hidden_;  // set by forward()
};

// Reads the architecture from the file and builds the model; throws Error(Unsupported) naming an
// unknown architecture, Error(NotFound)/Error(BadFormat) for missing or mis-shaped tensors/keys.
std::unique_ptr<Model> load_model(const gguf::File& file, Backend& backend, const ModelOptions& options);

}  // namespace cera
