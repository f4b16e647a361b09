// Liquid LFM2 (MODELS.md §3): a hybrid of gated short-conv layers and GQA attention layers, each
// followed by a SwiGLU FFN, RMSNorm everywhere, tied LM head. Written once, against the backend ops.
#include "model/lfm2.h"

#include <cmath>

#include "cera/error.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace cera {
namespace {

class Lfm2Model final : public Model {
 public:
  Lfm2Model(const gguf::File& f, Backend& be, const ModelOptions& opt) : Model(be, opt) {
    hp_ = read_common_hparams(f, "lfm2");
    hp_.conv_kernel = int32_t(f.get_int_opt("lfm2.shortconv.l_cache").value_or(3));
    if (hp_.conv_kernel < 2 || hp_.conv_kernel > 64)
      throw Error(ErrorCode::BadFormat, f.path() + ": lfm2.shortconv.l_cache = " + std::to_string(hp_.conv_kernel));
    hp_.rope_base = float(f.get_float_opt("lfm2.rope.freq_base").value_or(1e6));

    const int64_t D = hp_.n_embd, d = hp_.head_dim;
    WeightLoader w(f, be);
    const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
    hp_.n_vocab = int32_t(emb.ne[1]);
    tok_embd_ = w.get("token_embd.weight", {D, hp_.n_vocab});
    output_norm_ = w.get_f32("token_embd_norm.weight", {D});
    output_ = w.get_optional("output.weight", {D, hp_.n_vocab}).value_or(tok_embd_);

    int32_t n_attn = 0, n_conv = 0;
    for (int32_t i = 0; i < hp_.n_layer; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      Layer L;
      const int64_t F = hp_.n_ff[size_t(i)];
      L.attn_norm = w.get_f32(b + "attn_norm.weight", {D});
      L.ffn_norm = w.get_f32(b + "ffn_norm.weight", {D});
      L.ffn_gate = w.get(b + "ffn_gate.weight", {D, F});
      L.ffn_up = w.get(b + "ffn_up.weight", {D, F});
      L.ffn_down = w.get(b + "ffn_down.weight", {F, D});
      const int32_t kv_heads = hp_.n_head_kv[size_t(i)];
      if (kv_heads == 0) {  // conv layer (llama.cpp: is_recurrent iff head_count_kv == 0)
        L.is_conv = true;
        L.state_index = n_conv++;
        L.in_proj = w.get(b + "shortconv.in_proj.weight", {D, 3 * D});
        L.conv = w.get_f32(b + "shortconv.conv.weight", {hp_.conv_kernel, D});
        L.out_proj = w.get(b + "shortconv.out_proj.weight", {D, D});
      } else {
        if (kv_dim_ != 0 && kv_dim_ != kv_heads * d)
          throw Error(ErrorCode::Unsupported, f.path() + ": attention layers with different KV widths");
        kv_dim_ = int32_t(kv_heads * d);
        L.state_index = n_attn++;
        L.wq = w.get(b + "attn_q.weight", {D, hp_.n_head * d});
        L.wk = w.get(b + "attn_k.weight", {D, kv_heads * d});
        L.wv = w.get(b + "attn_v.weight", {D, kv_heads * d});
        L.wo = w.get(b + "attn_output.weight", {hp_.n_head * d, D});
        L.q_norm = w.get_f32(b + "attn_q_norm.weight", {d});
        L.k_norm = w.get_f32(b + "attn_k_norm.weight", {d});
      }
      layers_.push_back(L);
    }
    n_attn_ = n_attn;
    n_conv_ = n_conv;

    // Activations for the largest step, allocated once (fixed addresses: graph-capturable).
    const int64_t B = max_batch_tokens_;
    int64_t F_max = 0;
    for (int32_t v : hp_.n_ff) F_max = std::max<int64_t>(F_max, v);
    x_ = be.alloc(B, D);
    h_ = be.alloc(B, D);
    o_ = be.alloc(B, D);
    bcx_ = be.alloc(B, 3 * D);
    // q, k, v side by side (and gate, up): a backend may then run each group as one matrix product
    // when the weights are adjacent too (CUDA does).
    qkv_ = be.alloc(B, hp_.n_head * d + 2 * std::max<int64_t>(kv_dim_, 1));
    attn_ = be.alloc(B, hp_.n_head * d);
    ffn_ = be.alloc(B, 2 * F_max);
    out_rows_ = be.alloc(max_output_rows_, D);
    logits_ = be.alloc(max_output_rows_, hp_.n_vocab);
  }

  const ModelHparams& hparams() const override { return hp_; }

  StateLayout state_layout(int32_t block_size, int32_t n_blocks, int32_t n_slots) const override {
    StateLayout s;
    s.n_attention_layers = n_attn_;
    s.kv_dim = kv_dim_;
    s.kv_block_size = block_size;
    s.n_kv_blocks = n_attn_ ? n_blocks : 0;
    s.n_conv_layers = n_conv_;
    s.conv_state_dim = (hp_.conv_kernel - 1) * hp_.n_embd;
    s.n_conv_slots = n_slots;
    return s;
  }

  RopeParams rope_params() const {
    RopeParams rope;
    rope.n_rot = hp_.head_dim;
    rope.neox = true;
    rope.freq_base = hp_.rope_base;
    return rope;
  }

  void shift_context(std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta) override {
    const RopeParams rope = rope_params();
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (layers_[i].is_conv) continue;
      AttentionParams ap;
      ap.n_head = hp_.n_head;
      ap.n_head_kv = hp_.n_head_kv[i];
      ap.head_dim = hp_.head_dim;
      backend_.shift_kv(layers_[i].state_index, blocks, first, count, delta, ap, &rope);
    }
  }

  Tensor forward(int32_t T, int32_t n_out) override {
    check_outputs(n_out);
    Backend& be = backend_;
    const int64_t D = hp_.n_embd;
    const float eps = hp_.norm_eps;
    Tensor x = x_.first_rows(T), h = h_.first_rows(T), o = o_.first_rows(T);

    AttentionParams ap;
    ap.n_head = hp_.n_head;
    ap.head_dim = hp_.head_dim;
    ap.scale = 1.f / std::sqrt(float(hp_.head_dim));
    const RopeParams rope = rope_params();

    // Each layer: x += mixer(norm(x)); x += ffn(norm(x)). The norms and residual adds ride on the
    // matrix products (Backend's fused ops).
    be.embed(tok_embd_, x);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& L = layers_[i];
      if (L.is_conv) {
        Tensor bcx = bcx_.first_rows(T);
        Tensor y = attn_.first_rows(T).cols_slice(0, D);
        be.rms_norm_matmul_short_conv(x, L.attn_norm, eps, h, L.in_proj, bcx, L.state_index, L.conv, y);
        be.will_norm(x, L.ffn_norm);
        be.matmul_add(y, L.out_proj, 1.f, o, x);
      } else {
        ap.n_head_kv = hp_.n_head_kv[i];
        const int64_t qd = int64_t(hp_.n_head) * hp_.head_dim;
        Tensor qkv = qkv_.first_rows(T), a = attn_.first_rows(T);
        Tensor q = qkv.cols_slice(0, qd), k = qkv.cols_slice(qd, kv_dim_), v = qkv.cols_slice(qd + kv_dim_, kv_dim_);
        const Tensor ws[] = {L.wq, L.wk, L.wv};
        Tensor ys[] = {q, k, v};
        be.rms_norm_matmul(x, L.attn_norm, eps, h, ws, ys);
        be.qk_norm_rope_attention(L.state_index, q, k, v, &L.q_norm, &L.k_norm, eps, ap, rope, a);
        be.will_norm(x, L.ffn_norm);
        be.matmul_add(a, L.wo, 1.f, o, x);
      }
      const int64_t F = hp_.n_ff[i];
      Tensor gu = ffn_.first_rows(T).cols_slice(0, 2 * F), g = gu.cols_slice(0, F);
      if (i + 1 < layers_.size()) be.will_norm(x, layers_[i + 1].attn_norm);
      be.ffn_swiglu(x, L.ffn_norm, eps, L.ffn_gate, L.ffn_up, L.ffn_down, 1.f, h, gu, g, o);
    }
    return head(x, n_out);
  }

  Tensor replay(int32_t T, int32_t n_out) override {
    check_outputs(n_out);
    return head(x_.first_rows(T), n_out);
  }

 private:
  struct Layer {
    bool is_conv = false;
    int32_t state_index = 0;  // conv-state layer or KV layer index
    Tensor attn_norm, ffn_norm, ffn_gate, ffn_up, ffn_down;
    Tensor in_proj, conv, out_proj;
    Tensor wq, wk, wv, wo, q_norm, k_norm;
  };

  ModelHparams hp_;
  Tensor tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  int32_t n_attn_ = 0, n_conv_ = 0, kv_dim_ = 0;
  // The final norm of the output rows and the LM head (the end of forward and replay).
  Tensor head(const Tensor& x, int32_t n_out) {
    Backend& be = backend_;
    Tensor rows = out_rows_.first_rows(n_out);
    be.gather_output_rows_norm(x, output_norm_, hp_.norm_eps, rows);
    output_hidden_ = rows;
    Tensor logits = be.step_logits(logits_.first_rows(n_out));  // maybe straight into host memory
    be.matmul(rows, output_, logits);
    return logits;
  }

  Tensor x_, h_, o_, bcx_, qkv_, attn_, ffn_, out_rows_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_lfm2_model(const gguf::File& file, Backend& backend, const ModelOptions& options) {
  return std::make_unique<Lfm2Model>(file, backend, options);
}

}  // namespace cera
