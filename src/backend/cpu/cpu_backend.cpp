#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/top_k.h"
#include "cera/error.h"

namespace cera {
namespace {

using cpu::ThreadPool;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : pool_(o.n_threads > 0 ? o.n_threads : int(std::max(1u, std::thread::hardware_concurrency()))),
        round_kv_to_f16_(o.round_kv_to_f16) {}

  std::string name() const override {
    return "cpu (" + std::string(cpu::isa_name(cpu::active_isa())) + ", " + std::to_string(pool_.size()) +
           " threads)";
  }

  Tensor upload_weight(GgmlType type, int64_t rows, int64_t cols, const void* data) override {
    Tensor t;
    t.data = const_cast<void*>(data);  // read only by every op that takes a weight
    t.type = type;
    t.rows = rows;
    t.cols = cols;
    t.row_bytes = ggml_row_bytes(type, cols);
    return t;
  }

  Tensor alloc(int64_t rows, int64_t cols) override {
    buffers_.emplace_back(size_t(rows * cols));
    Tensor t;
    t.data = buffers_.back().data();
    t.rows = rows;
    t.cols = cols;
    t.row_bytes = size_t(cols) * sizeof(float);
    return t;
  }

  void configure_state(const StateLayout& layout) override {
    layout_ = layout;
    kv_.assign(size_t(layout.n_attention_layers) * layout.n_kv_blocks * 2 * layout.kv_block_size * layout.kv_dim,
               0.f);
    conv_.assign(size_t(layout.n_conv_layers) * layout.n_conv_slots * layout.conv_state_dim, 0.f);
  }

  void clear_conv_slot(int32_t slot) override {
    for (int32_t l = 0; l < layout_.n_conv_layers; ++l)
      std::fill_n(conv_layer(l) + size_t(slot) * layout_.conv_state_dim, layout_.conv_state_dim, 0.f);
  }

  void copy_conv_slot(int32_t src, int32_t dst) override {
    for (int32_t l = 0; l < layout_.n_conv_layers; ++l) {
      float* base = conv_layer(l);
      std::copy_n(base + size_t(src) * layout_.conv_state_dim, layout_.conv_state_dim,
                  base + size_t(dst) * layout_.conv_state_dim);
    }
  }

  void copy_kv_block(int32_t src, int32_t dst) override {
    const size_t block = size_t(2) * layout_.kv_block_size * layout_.kv_dim;
    for (int32_t l = 0; l < layout_.n_attention_layers; ++l) {
      float* base = kv_base(l);
      std::copy_n(base + size_t(src) * block, block, base + size_t(dst) * block);
    }
  }

  // A step may take its tokens from the last argmax_rows_async (Backend's default queue): the
  // engine's pipelined path runs here too, step for step as on a GPU.
  void set_step(const StepInputs& in) override {
    if (in.tokens_from_argmax) {
      if (last_async_argmax().size() != in.positions.size())
        throw Error(ErrorCode::Internal, "the step's tokens do not match the last argmax");
      tokens_ = last_async_argmax();
    } else {
      tokens_.assign(in.tokens.begin(), in.tokens.end());
    }
    positions_.assign(in.positions.begin(), in.positions.end());
    output_rows_.assign(in.output_rows.begin(), in.output_rows.end());
    // Keep our own copies of the block tables: the runtime may change its vectors after the call.
    block_tables_.clear();
    for (const auto& s : in.sequences) block_tables_.emplace_back(s.kv_blocks.begin(), s.kv_blocks.end());
    seqs_.assign(in.sequences.begin(), in.sequences.end());
    for (size_t i = 0; i < seqs_.size(); ++i) seqs_[i].kv_blocks = block_tables_[i];
    host_logits_slot_ = in.host_logits_slot;
  }

  void read(const Tensor& t, float* host) override {
    for (int64_t r = 0; r < t.rows; ++r) std::memcpy(host + r * t.cols, t.row(r), sizeof(float) * t.cols);
  }

  // The head writes a one-row step's logits into the slot itself: the session reads them there, no
  // copy of the row per token.
  float* host_logits(int32_t slot, size_t n) override {
    auto& buf = host_logits_.at(size_t(slot));
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  }

  Tensor step_logits(const Tensor& t) override {
    if (host_logits_slot_ < 0 || t.rows != 1) return t;
    auto& buf = host_logits_.at(size_t(host_logits_slot_));
    if (buf.size() < size_t(t.cols)) return t;
    Tensor v = t;
    v.data = buf.data();
    v.row_bytes = sizeof(float) * size_t(t.cols);
    return v;
  }

  void argmax_rows(const Tensor& t, int32_t* host) override {
    for (int64_t r = 0; r < t.rows; ++r) {
      const float* row = t.row(r);
      host[r] = int32_t(std::max_element(row, row + t.cols) - row);
    }
  }

  void top_k_rows(const Tensor& t, int32_t k, float* host_values, int32_t* host_ids) override {
    cpu::check_top_k(t, k);
    pool_.parallel_for(t.rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<int32_t> scratch;
      for (int64_t r = r0; r < r1; ++r)
        cpu::top_k_row(t.row(r), t.cols, k, host_values + r * k, host_ids + r * k, scratch);
    });
  }

  void embed(const Tensor& table, Tensor out) override {
    const auto& kern = cpu::matmul_kernels(table.type);
    const auto* base = static_cast<const uint8_t*>(table.data);
    for (size_t t = 0; t < tokens_.size(); ++t) {
      const int32_t id = tokens_[t];
      if (id < 0 || id >= table.rows)
        throw Error(ErrorCode::InvalidArgument,
                    "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                        std::to_string(table.rows - 1) + ")");
      kern.dequantize_row(base + size_t(id) * table.row_bytes, out.row(int64_t(t)), table.cols);
    }
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    pool_.parallel_for(x.rows, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) cpu::rms_norm_row(x.row(r), w.f32(), eps, out.row(r), x.cols);
    });
  }

  void add_rms_norm(Tensor x, const Tensor& delta, const Tensor& w, float eps, Tensor out) override {
    pool_.parallel_for(x.rows, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* xr = x.row(r);
        const float* dr = delta.row(r);
        for (int64_t c = 0; c < x.cols; ++c) xr[c] += dr[c];
        cpu::rms_norm_row(xr, w.f32(), eps, out.row(r), x.cols);
      }
    });
  }

  void add(Tensor x, const Tensor& delta) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      float* xr = x.row(r);
      const float* dr = delta.row(r);
      for (int64_t c = 0; c < x.cols; ++c) xr[c] += dr[c];
    }
  }

  void scale(Tensor x, float s) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      float* xr = x.row(r);
      for (int64_t c = 0; c < x.cols; ++c) xr[c] *= s;
    }
  }

  void matmul(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) override {
    cpu::matmul(pool_, x, ws, ys);
  }

  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override {
    pool_.parallel_for(gate.rows, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) cpu::silu_mul(gate.row(r), up.row(r), out.row(r), gate.cols);
    });
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    const float* b = bias.f32();
    for (int64_t r = 0; r < x.rows; ++r) {
      float* xr = x.row(r);
      for (int64_t c = 0; c < x.cols; ++c) xr[c] += b[c];
    }
  }

  void qk_norm_rope(Tensor q, Tensor k, const Tensor* q_norm, const Tensor* k_norm, float eps,
                    const AttentionParams& a, const RopeParams& rope) override {
    std::vector<double> inv_freq(size_t(rope.n_rot / 2));
    cpu::rope_inv_freq(rope, inv_freq.data());
    pool_.parallel_for(q.rows, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> cos_t(inv_freq.size()), sin_t(inv_freq.size());
      for (int64_t r = r0; r < r1; ++r) {
        cpu::rope_cos_sin(inv_freq.data(), rope.n_rot, positions_[size_t(r)], cos_t.data(), sin_t.data());
        auto head_pass = [&](float* row, int32_t n_heads, const Tensor* norm) {
          for (int32_t h = 0; h < n_heads; ++h) {
            float* head = row + h * a.head_dim;
            if (norm) cpu::rms_norm_row(head, norm->f32(), eps, head, a.head_dim);
            cpu::rope_apply(head, cos_t.data(), sin_t.data(), rope.n_rot, rope.neox);
          }
        };
        head_pass(q.row(r), a.n_head, q_norm);
        head_pass(k.row(r), a.n_head_kv, k_norm);
      }
    });
  }

  void shift_kv(int32_t kv_layer_index, std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta,
                const AttentionParams& attn, const RopeParams* rope) override {
    cpu::shift_kv(kv_layer(kv_layer_index, attn.head_dim), blocks, first, count, delta, rope);
  }

  void attention(int32_t kv_layer_index, const Tensor& q, const Tensor& k, const Tensor& v, Tensor out,
                 const AttentionParams& params) override {
    cpu::attention(pool_, kv_layer(kv_layer_index, params.head_dim), seqs_, q, k, v, out, params);
  }

  void short_conv(int32_t conv_layer_index, const Tensor& bcx, const Tensor& w, Tensor out) override {
    cpu::short_conv(pool_, seqs_, bcx, w, conv_layer(conv_layer_index), out);
  }

  void gather_output_rows(const Tensor& x, Tensor out) override {
    for (size_t i = 0; i < output_rows_.size(); ++i)
      std::memcpy(out.row(int64_t(i)), x.row(output_rows_[i]), sizeof(float) * x.cols);
  }

 private:
  float* kv_base(int32_t l) { return kv_.data() + size_t(l) * layout_.n_kv_blocks * 2 * layout_.kv_block_size * layout_.kv_dim; }
  cpu::KvLayerView kv_layer(int32_t l, int32_t head_dim) {
    cpu::KvLayerView v;
    v.block_size = layout_.kv_block_size;
    v.kv_dim = layout_.kv_dim;
    v.head_dim = head_dim;
    v.base = kv_base(l);
    v.round_to_f16 = round_kv_to_f16_;
    return v;
  }
  float* conv_layer(int32_t l) { return conv_.data() + size_t(l) * layout_.n_conv_slots * layout_.conv_state_dim; }

  ThreadPool pool_;
  bool round_kv_to_f16_;
  std::deque<std::vector<float>> buffers_;  // deque: growing it never moves existing buffers
  StateLayout layout_;
  std::vector<float> kv_;
  std::vector<float> conv_;
  std::vector<int32_t> tokens_, positions_, output_rows_;
  int32_t host_logits_slot_ = -1;  // the step's, from StepInputs
  std::array<std::vector<float>, kHostLogitsSlots> host_logits_;
  std::vector<std::vector<int32_t>> block_tables_;
  std::vector<StepSequence> seqs_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace cera
