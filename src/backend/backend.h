// The op interface every backend implements (DESIGN.md §3). A model's forward pass is written once
// against it; the CPU backend is the reference, and CUDA/Vulkan implement the same ops.
//
// Shape of a step, chosen so a GPU backend can capture a whole decode step in one graph:
//   1. set_step(StepInputs)  — copies the step's metadata (token ids, positions, per-sequence ranges,
//      KV block tables, conv-state slots) into backend-owned buffers at fixed addresses;
//   2. the model calls ops on activation tensors the backend allocated once (alloc);
//   3. read() copies the logits back (or the head wrote them into a host slot: host_logits).
// Ops never take host pointers to per-step data, so step 2 replays identically for every step of the
// same token count: a CUDA backend records it once per bucket and replays it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cera/error.h"
#include "format/ggml_type.h"

namespace cera {

// A 2-D row-major view of backend memory: rows × cols, cols contiguous. Activations are F32;
// weights keep the type stored in the file (cols is then a multiple of the block size).
struct Tensor {
  void* data = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;  // stride between rows

  bool valid() const { return data != nullptr; }
  float* f32() const { return static_cast<float*>(data); }
  float* row(int64_t r) const { return reinterpret_cast<float*>(static_cast<char*>(data) + r * row_bytes); }
  // The first n rows (a smaller batch reusing the same buffer).
  Tensor first_rows(int64_t n) const { Tensor t = *this; t.rows = n; return t; }
  // Columns [c0, c0+n) of an F32 tensor, keeping the row stride.
  Tensor cols_slice(int64_t c0, int64_t n) const {
    Tensor t = *this;
    t.data = static_cast<float*>(data) + c0;
    t.cols = n;
    return t;
  }
};

// One sequence's part of a step. Its tokens are rows [first_token, first_token + n_tokens) of the
// batch, at positions n_past, n_past+1, ...
struct StepSequence {
  int32_t first_token = 0;
  int32_t n_tokens = 0;
  int32_t n_past = 0;           // tokens already in its KV cache / conv state
  int32_t conv_slot = -1;       // its conv-state slot (LFM2), -1 if the model has none
  std::span<const int32_t> kv_blocks;  // its KV block table (covers n_past + n_tokens positions)
};

struct StepInputs {
  // [T]. With tokens_from_argmax, ignored (may be empty): token t is row t of the last
  // argmax_rows_async result, read where it was computed (device-side feedback, no host round trip).
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;  // [T]
  std::span<const StepSequence> sequences;
  std::span<const int32_t> output_rows;  // batch rows whose logits are wanted, in output order
  bool tokens_from_argmax = false;
  // ≥ 0: the host will read this step's one row of logits; step_logits() may then place them in
  // host_logits(host_logits_slot), where they are readable after synchronize() without a copy.
  int32_t host_logits_slot = -1;
};

// What per-sequence state the model needs; the backend allocates the memory, the runtime decides
// which slot/block belongs to whom.
struct StateLayout {
  int32_t n_attention_layers = 0;
  int32_t kv_dim = 0;         // n_head_kv * head_dim per attention layer
  int32_t kv_block_size = 0;  // tokens per KV block
  int32_t n_kv_blocks = 0;    // blocks per attention layer
  int32_t n_conv_layers = 0;
  int32_t conv_state_dim = 0;  // (L-1) * D per conv layer
  int32_t n_conv_slots = 0;
};

struct RopeParams {
  int32_t n_rot = 0;            // rotated dims per head (head_dim unless partial)
  bool neox = true;             // NEOX (halves) or NORMAL (adjacent pairs), MODELS.md §5.2
  float freq_base = 10000.f;
  float freq_scale = 1.f;
  const float* freq_factors = nullptr;  // optional [n_rot/2] (Llama-3 rope_freqs), host memory
};

struct AttentionParams {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 0.f;  // softmax scale, usually 1/sqrt(head_dim)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory
  // Makes a weight usable by this backend. `data` points into the model file's map and stays valid
  // for the backend's lifetime; the CPU backend uses it in place (no copy, no dequantized copy).
  virtual Tensor upload_weight(GgmlType type, int64_t rows, int64_t cols, const void* data) = 0;
  // An F32 activation buffer of rows × cols, owned by the backend.
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual void configure_state(const StateLayout& layout) = 0;
  virtual void clear_conv_slot(int32_t slot) = 0;
  virtual void copy_conv_slot(int32_t src, int32_t dst) = 0;
  virtual void copy_kv_block(int32_t src, int32_t dst) = 0;  // all attention layers

  // ---- a step
  virtual void set_step(const StepInputs& inputs) = 0;
  // Ends the step without reading anything: what it queued is launched (a GPU backend's captured
  // graph) and the call returns without waiting. read(), argmax_rows and top_k_rows end a step the
  // same way; the engine calls this after every forward, so that no capture stays open while the
  // host goes on (an append returns before its logits are read).
  virtual void end_step() {}
  // After set_step: whether the step replays a recorded one (a GPU backend's graph), so every op
  // call until end_step() returns at once and the model may skip them (Model::replay).
  virtual bool replaying() const { return false; }
  // Copies `t` (F32) to host memory, row by row.
  virtual void read(const Tensor& t, float* host) = 0;

  // Logits the LM head writes straight into host memory. A one-row append's logits are read by the
  // host (a sampler over the full row, a benchmark loop); on a GPU, copying the row after the step
  // (256-513 KB over PCIe) sat between every two tokens. The engine gives such a step a slot that no
  // session still reads (StepInputs::host_logits_slot), the model passes the head's output through
  // step_logits(), and forward() returning a tensor over the slot's memory says it worked; the row
  // is readable there once synchronize() returns. Backends without this return nullptr / t.
  static constexpr int32_t kHostLogitsSlots = 2;
  // Slot `slot`'s memory, at least n floats (allocated on first use: call it between steps).
  virtual float* host_logits(int32_t /*slot*/, size_t /*n*/) { return nullptr; }
  // The tensor a model's head should write for this step's logits `t`: t itself, or a view of the
  // step's host_logits slot when it asked for one and t is a single row.
  virtual Tensor step_logits(const Tensor& t) { return t; }
  // Ends the step like end_step() and waits until everything queued so far has run.
  virtual void synchronize() {}
  // host[r] = the column of row r's largest value (the first on ties), for every row of `t`: greedy
  // decoding without moving rows × n_vocab logits to the host. Ends the step like read().
  virtual void argmax_rows(const Tensor& t, int32_t* host) = 0;
  // The largest k top_k_rows takes.
  static constexpr int32_t kMaxTopK = 1024;
  // For every row r of `t` (F32): its k largest values by value descending, ties broken by the
  // smaller column, NaN never selected (-inf is a value like any other), in host_values[r·k + i] and
  // their columns in host_ids[r·k + i], i < k; a row with fewer than k non-NaN values fills the rest
  // with id -1 and value NaN. Sampling with top-k reads these instead of rows × n_vocab logits. The
  // values are the row's own, so every backend gives identical results. Throws
  // Error(InvalidArgument) unless 1 ≤ k ≤ min(cols, kMaxTopK). Ends the step like read().
  virtual void top_k_rows(const Tensor& t, int32_t k, float* host_values, int32_t* host_ids) = 0;

  // Pipelined greedy decoding (Engine::generate_greedy_batch). argmax_rows_async ends the step like
  // argmax_rows but does not wait: the ids come back through argmax_rows_wait (oldest first; at most
  // two outstanding), and the next step may take them as its tokens without a host round trip
  // (StepInputs::tokens_from_argmax, which every backend's set_step honors), so the host prepares
  // step k+1 while the device runs step k. The default runs argmax_rows at once and queues the
  // result; a backend computing on the host feeds last_async_argmax() to the next step.
  virtual void argmax_rows_async(const Tensor& t) {
    if (pending_argmax_.size() >= 2) throw Error(ErrorCode::Internal, "argmax_rows_async: two results already pending");
    last_argmax_.resize(static_cast<size_t>(t.rows));
    argmax_rows(t, last_argmax_.data());
    pending_argmax_.push_back(last_argmax_);
  }
  virtual void argmax_rows_wait(int32_t* host) {
    if (pending_argmax_.empty()) throw_no_pending_argmax();
    std::copy(pending_argmax_.front().begin(), pending_argmax_.front().end(), host);
    pending_argmax_.erase(pending_argmax_.begin());
  }

  // ---- ops (all on the current step's T rows unless the tensor says fewer)
  // out[t] = table row tokens[t] (dequantized).
  virtual void embed(const Tensor& table, Tensor out) = 0;
  // out = w ⊙ x / sqrt(mean(x²) + eps), per row. x and out may alias.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) = 0;
  // x += delta (residual add); then out = rms_norm(x). Fused because every layer ends this way.
  virtual void add_rms_norm(Tensor x, const Tensor& delta, const Tensor& w, float eps, Tensor out) = 0;
  virtual void add(Tensor x, const Tensor& delta) = 0;  // x += delta
  virtual void scale(Tensor x, float s) = 0;            // x *= s
  // ys[i] = x · ws[i]ᵀ for each i, converting x to the kernels' activation format once.
  virtual void matmul(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) = 0;
  void matmul(const Tensor& x, const Tensor& w, Tensor y) { matmul(x, {&w, 1}, {&y, 1}); }
  // out = silu(gate) ⊙ up
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor out) = 0;
  // Adds a bias row to every row of x.
  virtual void add_bias(Tensor x, const Tensor& bias) = 0;
  // A hint before a model's upload_weight calls: about `bytes` in `n_tensors` tensors are coming.
  // A backend that copies weights into its own memory can reserve it at once, so that weights
  // uploaded one after another stay adjacent (the fused products run [gate; up] and q|k|v as one).
  virtual void reserve_weights(size_t /*bytes*/, size_t /*n_tensors*/) {}
  // Bytes of one K or V element in the cache configure_state allocates; the engine sizes its
  // prefix cache by it.
  virtual size_t kv_element_bytes() const { return sizeof(float); }
  // The bytes upload_weight will keep for such a weight: as stored, unless the backend keeps
  // a format in a layout of its own (what reserve_weights is told is the sum of these).
  virtual size_t weight_bytes(GgmlType type, int64_t rows, int64_t cols) const {
    return ggml_row_bytes(type, cols) * size_t(rows);
  }
  // Per-head RMSNorm (if norm weights are given) then RoPE at the step positions, in place.
  // q: [T, n_head*head_dim], k: [T, n_head_kv*head_dim].
  virtual void qk_norm_rope(Tensor q, Tensor k, const Tensor* q_norm, const Tensor* k_norm, float eps,
                            const AttentionParams& attn, const RopeParams& rope) = 0;
  // Stores k, v of the step's tokens into attention layer `kv_layer`'s paged cache, then computes
  // causal GQA attention of q over each sequence's cached + new keys. out: [T, n_head*head_dim].
  virtual void attention(int32_t kv_layer, const Tensor& q, const Tensor& k, const Tensor& v, Tensor out,
                         const AttentionParams& params) = 0;
  // LFM2 gated short conv for every sequence of the step (MODELS.md §3.5): bcx [T, 3D] = (B, C, X);
  // out [T, D] = C ⊙ conv(B ⊙ X) with conv layer `conv_layer`'s per-sequence state, updated.
  // w: [D, L] F32 kernel.
  virtual void short_conv(int32_t conv_layer, const Tensor& bcx, const Tensor& w, Tensor out) = 0;
  // Context shift: moves the K/V of positions [first, first + count) of the sequence whose block
  // table is `blocks` to positions [first - delta, ...) of the same table, re-rotating K by RoPE of
  // -delta so it is exactly what RoPE at the new position would give (V moves unchanged).
  virtual void shift_kv(int32_t kv_layer, std::span<const int32_t> blocks, int32_t first, int32_t count,
                        int32_t delta, const AttentionParams& attn, const RopeParams* rope) = 0;
  // out[i] = x[output_rows[i]]: picks the rows whose logits are wanted.
  virtual void gather_output_rows(const Tensor& x, Tensor out) = 0;

  // ---- fused ops: what every layer does around its matrix products, as one call. The defaults run
  // the plain ops above (the reference); a backend overrides them to save a decode step's small
  // kernels (CUDA folds the norm into the product's prologue and the rest into its epilogue).
  //
  // ys[i] = (rms_norm(x) ⊙ norm_w) · ws[i]ᵀ. `normed` ([T, cols(x)]) is scratch: it may or may not
  // receive the normalised rows.
  virtual void rms_norm_matmul(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed,
                               std::span<const Tensor> ws, std::span<Tensor> ys) {
    rms_norm(x, norm_w, eps, normed);
    matmul(normed, ws, ys);
  }
  // The SwiGLU feed-forward's first half: h = rms_norm(x) ⊙ norm_w; out = silu(h·gateᵀ) ⊙ (h·upᵀ).
  // `normed` [T, cols(x)] and `gate_up` [T, 2F] (gate columns then up columns) are scratch.
  virtual void rms_norm_swiglu(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed, const Tensor& gate,
                               const Tensor& up, Tensor gate_up, Tensor out) {
    rms_norm(x, norm_w, eps, normed);
    const int64_t F = gate.rows;
    Tensor g = gate_up.cols_slice(0, F), u = gate_up.cols_slice(F, F);
    const Tensor ws[] = {gate, up};
    Tensor ys[] = {g, u};
    matmul(normed, ws, ys);
    swiglu(g, u, out);
  }
  // The whole SwiGLU feed-forward as a residual branch: x += s · (silu(h·gateᵀ) ⊙ (h·upᵀ)) · downᵀ with
  // h = rms_norm(x) ⊙ norm_w. Scratch: normed [T, cols(x)], gate_up [T, 2F], act [T, F] (F = rows(gate)),
  // product [T, cols(x)].
  virtual void ffn_swiglu(Tensor x, const Tensor& norm_w, float eps, const Tensor& gate, const Tensor& up,
                          const Tensor& down, float s, Tensor normed, Tensor gate_up, Tensor act, Tensor product) {
    rms_norm_swiglu(x, norm_w, eps, normed, gate, up, gate_up, act);
    matmul_add(act, down, s, product, x);
  }
  // The attention sublayer's core: qk_norm_rope (when a norm weight is given or rope.n_rot > 0),
  // then attention. q and k are scratch: they may or may not hold the normalised, rotated rows
  // afterwards (CUDA decode does all of it in one launch without writing them back).
  virtual void qk_norm_rope_attention(int32_t kv_layer, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                                      const Tensor* k_norm, float eps, const AttentionParams& attn,
                                      const RopeParams& rope, Tensor out) {
    if (q_norm || k_norm || rope.n_rot > 0) qk_norm_rope(q, k, q_norm, k_norm, eps, attn, rope);
    attention(kv_layer, q, k, v, out, attn);
  }
  // LFM2's conv mixer up to its output projection: bcx = (rms_norm(x) ⊙ norm_w) · in_projᵀ, then
  // out = short_conv(bcx) with the layer's conv state rolled forward. `normed` [T, cols(x)] and
  // `bcx` [T, 3D] are scratch (CUDA decode computes each channel's B, C, X and its convolution in
  // one block of the product and writes neither).
  virtual void rms_norm_matmul_short_conv(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed,
                                          const Tensor& in_proj, Tensor bcx, int32_t conv_layer,
                                          const Tensor& conv_w, Tensor out) {
    rms_norm_matmul(x, norm_w, eps, normed, {&in_proj, 1}, {&bcx, 1});
    short_conv(conv_layer, bcx, conv_w, out);
  }
  // x += s · (a · wᵀ): a residual branch's output projection. `product` [T, rows(w)] is scratch.
  virtual void matmul_add(const Tensor& a, const Tensor& w, float s, Tensor product, Tensor x) {
    matmul(a, w, product);
    if (s != 1.f) scale(product, s);
    add(x, product);
  }
  // A hint, given just before the op that updates x (a residual branch's output projection): the
  // op after that one will rms-norm x with weights norm_w and take products of it. A backend may
  // have the updating op also prepare that input (CUDA decode: a Q4_0 product writes the row
  // already rounded to int8 for the next Q4_0 products, MatvecFusion::Int8X, which round it per 8
  // elements where they would round it per 32). Ignored by default.
  virtual void will_norm(const Tensor& /*x*/, const Tensor& /*norm_w*/) {}
  // out = rms_norm(the rows of x that output logits) ⊙ w: the final norm, applied to the gathered rows.
  virtual void gather_output_rows_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
    gather_output_rows(x, out);
    rms_norm(out, w, eps, out);
  }

 protected:
  // The default argmax_rows_async's last result: what a backend that computes on the host feeds
  // to a step with tokens_from_argmax.
  const std::vector<int32_t>& last_async_argmax() const { return last_argmax_; }

 private:
  [[noreturn]] static void throw_no_pending_argmax() {
    throw Error(ErrorCode::Internal, "argmax_rows_wait without a pending argmax_rows_async");
  }
  std::vector<std::vector<int32_t>> pending_argmax_;  // the default argmax_rows_async's queue
  std::vector<int32_t> last_argmax_;
};

}  // namespace cera
