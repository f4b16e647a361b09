// Dense pre-norm transformers (MODELS.md §4): llama, qwen2, qwen3 and granite share one forward
// pass — RMSNorm, GQA attention with RoPE, SwiGLU FFN — and differ only in switches read from the
// file: RoPE pairing, q/k/v biases, per-head q/k norms, and granite's four multipliers.
#include "model/dense.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <optional>

#include "cera/error.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace cera {
namespace {

// What distinguishes one family from another; everything else is in ModelHparams.
struct DenseConfig {
  bool neox_rope = false;     // NEOX (halves) vs NORMAL (adjacent pairs) RoPE, MODELS.md §5.2
  bool use_rope = true;       // granite: rope.scaling.finetuned = false disables RoPE
  int32_t n_rot = 0;          // rotated dims per head
  float freq_scale = 1.f;     // 1 / linear scaling factor
  std::vector<float> freq_factors;  // Llama-3 rope_freqs, host copy; empty if absent
  float attn_scale = 0.f;     // softmax scale
  float embedding_scale = 0.f;  // granite multipliers; 0 = not applied (as llama.cpp)
  float residual_scale = 0.f;
  float logit_scale = 0.f;
};

// NORMAL-pairing families: their converters permute HF's Q/K rows back to Meta's interleaved order.
bool uses_neox_rope(const std::string& arch) { return arch == "qwen2" || arch == "qwen3"; }

float optional_f32(const gguf::File& f, const std::string& key, float fallback) {
  return float(f.get_float_opt(key).value_or(fallback));
}

DenseConfig read_dense_config(const gguf::File& f, const ModelHparams& hp) {
  const std::string p = hp.arch + ".";
  DenseConfig c;
  c.neox_rope = uses_neox_rope(hp.arch);
  c.n_rot = int32_t(f.get_int_opt(p + "rope.dimension_count").value_or(hp.head_dim));
  if (c.n_rot <= 0 || c.n_rot > hp.head_dim || c.n_rot % 2 != 0)
    throw Error(ErrorCode::BadFormat, f.path() + ": " + p + "rope.dimension_count = " + std::to_string(c.n_rot) +
                                          " does not fit head_dim " + std::to_string(hp.head_dim));

  // Linear scaling divides every angle by the factor; other schemes change the angles differently.
  const std::string scaling = f.get_string_opt(p + "rope.scaling.type").value_or("linear");
  double factor = f.get_float_opt(p + "rope.scale_linear").value_or(0.0);
  factor = f.get_float_opt(p + "rope.scaling.factor").value_or(factor);
  if (scaling != "linear" && scaling != "none" && factor != 0.0 && factor != 1.0)
    throw Error(ErrorCode::Unsupported, f.path() + ": rope scaling '" + scaling + "' is not supported");
  if (scaling == "linear" && factor != 0.0) {
    if (!(factor > 0.0)) throw Error(ErrorCode::BadFormat, f.path() + ": rope scaling factor must be positive");
    c.freq_scale = float(1.0 / factor);
  }

  // rope_freqs is read on the host (the backend takes host factors), straight from the file's map.
  if (const gguf::TensorInfo* ff = f.find_tensor("rope_freqs.weight")) {
    if (ff->type != GgmlType::F32 || ff->n_elements() != c.n_rot / 2)
      throw Error(ErrorCode::BadFormat, f.path() + ": tensor 'rope_freqs.weight' must be f32 with " +
                                            std::to_string(c.n_rot / 2) + " elements");
    c.freq_factors.resize(size_t(c.n_rot / 2));
    std::memcpy(c.freq_factors.data(), ff->data, c.freq_factors.size() * sizeof(float));
  }

  c.attn_scale = 1.f / std::sqrt(float(hp.head_dim));
  if (hp.arch == "granite") {
    c.use_rope = f.get_bool_opt(p + "rope.scaling.finetuned").value_or(true);
    c.embedding_scale = optional_f32(f, p + "embedding_scale", 0.f);
    c.residual_scale = optional_f32(f, p + "residual_scale", 0.f);
    c.logit_scale = float(f.get_float(p + "logit_scale"));  // required, as in llama.cpp
    const float s = optional_f32(f, p + "attention.scale", 0.f);
    if (s != 0.f) c.attn_scale = s;
  }
  return c;
}

class DenseModel final : public Model {
 public:
  DenseModel(const gguf::File& f, Backend& be, const ModelOptions& opt) : Model(be, opt) {
    const std::string arch = f.get_string("general.architecture");
    hp_ = read_common_hparams(f, arch);
    cfg_ = read_dense_config(f, hp_);
    const std::string p = arch + ".";
    const int64_t value_dim = f.get_int_opt(p + "attention.value_length").value_or(hp_.head_dim);
    if (value_dim != hp_.head_dim)
      throw Error(ErrorCode::Unsupported, f.path() + ": value head width " + std::to_string(value_dim) +
                                              " differs from key head width " + std::to_string(hp_.head_dim));
    if (f.find_tensor("blk.0.ffn_gate_inp.weight"))
      throw Error(ErrorCode::Unsupported, f.path() + ": mixture-of-experts '" + arch + "' models are not supported");

    const int64_t D = hp_.n_embd, d = hp_.head_dim, Q = int64_t(hp_.n_head) * d;
    WeightLoader w(f, be);
    hp_.n_vocab = int32_t(f.tensor("token_embd.weight").ne[1]);
    tok_embd_ = w.get("token_embd.weight", {D, hp_.n_vocab});
    output_norm_ = w.get_f32("output_norm.weight", {D});
    output_ = w.get_optional("output.weight", {D, hp_.n_vocab}).value_or(tok_embd_);  // tied if absent
    output_bias_ = w.get_f32_optional("output.bias", {hp_.n_vocab});

    for (int32_t i = 0; i < hp_.n_layer; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      const int32_t kv_heads = hp_.n_head_kv[size_t(i)];
      if (kv_heads <= 0)
        throw Error(ErrorCode::BadFormat, f.path() + ": layer " + std::to_string(i) + " has no KV heads");
      if (kv_dim_ != 0 && kv_dim_ != kv_heads * d)
        throw Error(ErrorCode::Unsupported, f.path() + ": layers with different KV widths");
      kv_dim_ = int32_t(kv_heads * d);
      const int64_t F = hp_.n_ff[size_t(i)];
      Layer L;
      L.attn_norm = w.get_f32(b + "attn_norm.weight", {D});
      L.wq = w.get(b + "attn_q.weight", {D, Q});
      L.wk = w.get(b + "attn_k.weight", {D, kv_dim_});
      L.wv = w.get(b + "attn_v.weight", {D, kv_dim_});
      L.wo = w.get(b + "attn_output.weight", {Q, D});
      L.bqkv = w.get_f32_concat_optional(
          {{b + "attn_q.bias", Q}, {b + "attn_k.bias", kv_dim_}, {b + "attn_v.bias", kv_dim_}},
          bias_rows_.emplace_back());
      L.bo = w.get_f32_optional(b + "attn_output.bias", {D});
      L.q_norm = w.get_f32_optional(b + "attn_q_norm.weight", {d});
      L.k_norm = w.get_f32_optional(b + "attn_k_norm.weight", {d});
      if (L.q_norm.has_value() != L.k_norm.has_value())
        throw Error(ErrorCode::BadFormat, f.path() + ": layer " + std::to_string(i) + " has only one of q/k norm");
      L.ffn_norm = w.get_f32(b + "ffn_norm.weight", {D});
      L.ffn_gate = w.get(b + "ffn_gate.weight", {D, F});
      L.ffn_up = w.get(b + "ffn_up.weight", {D, F});
      L.ffn_down = w.get(b + "ffn_down.weight", {F, D});
      L.b_gate = w.get_f32_optional(b + "ffn_gate.bias", {F});
      L.b_up = w.get_f32_optional(b + "ffn_up.bias", {F});
      L.b_down = w.get_f32_optional(b + "ffn_down.bias", {D});
      layers_.push_back(std::move(L));
    }
    if (arch == "qwen3" && !layers_[0].q_norm)
      throw Error(ErrorCode::NotFound, f.path() + ": qwen3 model without attn_q_norm/attn_k_norm tensors");

    // Activations for the largest step, allocated once (fixed addresses: graph-capturable).
    const int64_t B = max_batch_tokens_;
    int64_t F_max = 0;
    for (int32_t v : hp_.n_ff) F_max = std::max<int64_t>(F_max, v);
    x_ = be.alloc(B, D);
    h_ = be.alloc(B, D);
    o_ = be.alloc(B, D);
    // q, k, v side by side (and gate, up): a backend may then run each group as one matrix product
    // when the weights are adjacent too (CUDA does).
    qkv_ = be.alloc(B, Q + 2 * int64_t(kv_dim_));
    attn_ = be.alloc(B, Q);
    ffn_ = be.alloc(B, 2 * F_max);
    out_rows_ = be.alloc(max_output_rows_, D);
    logits_ = be.alloc(max_output_rows_, hp_.n_vocab);
  }

  const ModelHparams& hparams() const override { return hp_; }

  StateLayout state_layout(int32_t block_size, int32_t n_blocks, int32_t n_slots) const override {
    StateLayout s;
    s.n_attention_layers = hp_.n_layer;
    s.kv_dim = kv_dim_;
    s.kv_block_size = block_size;
    s.n_kv_blocks = n_blocks;
    return s;
  }

  RopeParams rope_params() const {
    RopeParams rope;
    rope.n_rot = cfg_.use_rope ? cfg_.n_rot : 0;  // 0 rotates nothing
    rope.neox = cfg_.neox_rope;
    rope.freq_base = hp_.rope_base;
    rope.freq_scale = cfg_.freq_scale;
    rope.freq_factors = cfg_.freq_factors.empty() ? nullptr : cfg_.freq_factors.data();
    return rope;
  }

  void shift_context(std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta) override {
    const RopeParams rope = rope_params();
    for (size_t i = 0; i < layers_.size(); ++i) {
      AttentionParams ap;
      ap.n_head = hp_.n_head;
      ap.n_head_kv = hp_.n_head_kv[i];
      ap.head_dim = hp_.head_dim;
      backend_.shift_kv(int32_t(i), blocks, first, count, delta, ap, rope.n_rot > 0 ? &rope : nullptr);
    }
  }

  Tensor forward(int32_t T, int32_t n_out) override {
    check_outputs(n_out);
    Backend& be = backend_;
    const float eps = hp_.norm_eps;
    Tensor x = x_.first_rows(T), h = h_.first_rows(T), o = o_.first_rows(T);
    const int64_t qd = int64_t(hp_.n_head) * hp_.head_dim;
    Tensor qkv = qkv_.first_rows(T), a = attn_.first_rows(T);
    Tensor q = qkv.cols_slice(0, qd), k = qkv.cols_slice(qd, kv_dim_), v = qkv.cols_slice(qd + kv_dim_, kv_dim_);

    AttentionParams ap;
    ap.n_head = hp_.n_head;
    ap.head_dim = hp_.head_dim;
    ap.scale = cfg_.attn_scale;
    const RopeParams rope = rope_params();

    auto add_bias = [&](Tensor y, const std::optional<Tensor>& bias) {
      if (bias) be.add_bias(y, *bias);
    };
    // granite scales each branch output before it joins the residual stream.
    const float branch_scale = cfg_.residual_scale != 0.f ? cfg_.residual_scale : 1.f;
    // x += branch_scale · (in · wᵀ + bias): fused unless there is a bias to add first.
    auto project_into_residual = [&](const Tensor& in, const Tensor& w, const std::optional<Tensor>& bias) {
      if (!bias) return be.matmul_add(in, w, branch_scale, o, x);
      be.matmul(in, w, o);
      be.add_bias(o, *bias);
      if (branch_scale != 1.f) be.scale(o, branch_scale);
      be.add(x, o);
    };

    be.embed(tok_embd_, x);
    if (cfg_.embedding_scale != 0.f) be.scale(x, cfg_.embedding_scale);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& L = layers_[i];
      ap.n_head_kv = hp_.n_head_kv[i];
      {
        const Tensor ws[] = {L.wq, L.wk, L.wv};
        Tensor ys[] = {q, k, v};
        be.rms_norm_matmul(x, L.attn_norm, eps, h, ws, ys);
      }
      add_bias(qkv, L.bqkv);  // qwen2: biases before RoPE, q | k | v in one add
      const Tensor* qn = L.q_norm ? &*L.q_norm : nullptr;
      const Tensor* kn = L.k_norm ? &*L.k_norm : nullptr;
      be.qk_norm_rope_attention(int32_t(i), q, k, v, qn, kn, eps, ap, rope, a);
      be.will_norm(x, L.ffn_norm);
      project_into_residual(a, L.wo, L.bo);

      const int64_t F = hp_.n_ff[i];
      Tensor gu = ffn_.first_rows(T).cols_slice(0, 2 * F);
      Tensor g = gu.cols_slice(0, F), u = gu.cols_slice(F, F);
      if (L.b_gate || L.b_up || L.b_down) {
        const Tensor ws[] = {L.ffn_gate, L.ffn_up};
        Tensor ys[] = {g, u};
        be.rms_norm_matmul(x, L.ffn_norm, eps, h, ws, ys);
        add_bias(g, L.b_gate);
        add_bias(u, L.b_up);
        be.swiglu(g, u, g);
        project_into_residual(g, L.ffn_down, L.b_down);
      } else {
        if (i + 1 < layers_.size()) be.will_norm(x, layers_[i + 1].attn_norm);
        be.ffn_swiglu(x, L.ffn_norm, eps, L.ffn_gate, L.ffn_up, L.ffn_down, branch_scale, h, gu, g, o);
      }
    }
    return head(x, n_out);
  }

  Tensor replay(int32_t T, int32_t n_out) override {
    check_outputs(n_out);
    return head(x_.first_rows(T), n_out);
  }

 private:
  struct Layer {
    Tensor attn_norm, wq, wk, wv, wo;
    std::optional<Tensor> bqkv, bo, q_norm, k_norm;  // bqkv: the q, k and v biases as one row
    Tensor ffn_norm, ffn_gate, ffn_up, ffn_down;
    std::optional<Tensor> b_gate, b_up, b_down;
  };

  ModelHparams hp_;
  DenseConfig cfg_;
  Tensor tok_embd_, output_norm_, output_;
  std::optional<Tensor> output_bias_;
  std::vector<Layer> layers_;
  std::deque<std::vector<float>> bias_rows_;  // host copies the CPU backend reads in place (bqkv)
  int32_t kv_dim_ = 0;
  // The final norm of the output rows and the LM head (the end of forward and replay).
  Tensor head(const Tensor& x, int32_t n_out) {
    Backend& be = backend_;
    Tensor rows = out_rows_.first_rows(n_out);
    be.gather_output_rows_norm(x, output_norm_, hp_.norm_eps, rows);
    output_hidden_ = rows;
    // The head writes host memory only when it is the last op on the logits (no bias or scale after
    // it: those would read and write the row across the bus).
    Tensor logits = logits_.first_rows(n_out);
    if (!output_bias_ && cfg_.logit_scale == 0.f) logits = be.step_logits(logits);
    be.matmul(rows, output_, logits);
    if (output_bias_) be.add_bias(logits, *output_bias_);
    if (cfg_.logit_scale != 0.f) be.scale(logits, 1.f / cfg_.logit_scale);  // granite divides
    return logits;
  }

  Tensor x_, h_, o_, qkv_, attn_, ffn_, out_rows_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_dense_model(const gguf::File& file, Backend& backend, const ModelOptions& options) {
  return std::make_unique<DenseModel>(file, backend, options);
}

}  // namespace cera
