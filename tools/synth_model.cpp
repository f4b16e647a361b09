// cera-synth: writes an LFM2 GGUF with random weights and the exact shape of a released model, for
// speed and memory measurements at real sizes (no trained weights can be downloaded here). The text
// it generates is noise; the work per token is that of the real model.
//
//   cera-synth --shape lfm2-350m --type q4_k_m -o lfm2-350m-q4_k_m.gguf
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cera/error.h"
#include "format/gguf.h"
#include "format/quant.h"

namespace {

struct Shape {
  const char* name;
  int n_layer, d_model, d_ff, n_head, n_head_kv, n_vocab;
  std::vector<int> attention_layers;
};

const Shape kShapes[] = {
    {"tiny", 6, 256, 512, 4, 2, 512, {2, 4}},
    {"lfm2-350m", 16, 1024, 4608, 16, 8, 65536, {2, 5, 8, 10, 12, 14}},
    {"lfm2-700m", 16, 1536, 6912, 24, 8, 65536, {2, 5, 8, 10, 12, 14}},
    {"lfm2-1.2b", 16, 2048, 8192, 32, 8, 65536, {2, 5, 8, 10, 12, 14}},
};

// llama.cpp's rule for which layers get more bits in the _M mixes.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Type of one 2-D weight under a named mix (what users know as Q4_K_M, Q4_0, ...).
cera::GgmlType weight_type(const std::string& mix, const std::string& name, int layer, int n_layer, int attn_index,
                           int n_attn) {
  using T = cera::GgmlType;
  if (mix == "f32") return T::F32;
  if (mix == "f16") return T::F16;
  if (mix == "bf16") return T::BF16;
  if (mix == "q8_0") return T::Q8_0;
  const bool embd = name == "token_embd.weight";  // tied: also the LM head, which llama-quantize keeps at Q6_K
  if (mix == "q4_0") return embd ? T::Q6_K : T::Q4_0;
  if (mix == "q4_k_m") {
    if (embd) return T::Q6_K;
    if (name.find("attn_v") != std::string::npos && use_more_bits(attn_index, n_attn)) return T::Q6_K;
    if (name.find("ffn_down") != std::string::npos && use_more_bits(layer, n_layer)) return T::Q6_K;
    return T::Q4_K;
  }
  throw cera::Error(cera::ErrorCode::InvalidArgument, "unknown --type '" + mix + "' (f32, f16, bf16, q8_0, q4_0, q4_k_m)");
}

struct Generator {
  cera::gguf::Writer writer;
  std::mt19937_64 rng{1234};
  std::string mix;
  int n_threads = int(std::max(1u, std::thread::hardware_concurrency()));

  // Sum of four uniforms (Irwin-Hall, close to a normal) from a splitmix64 stream: the weights only
  // need a realistic spread, and std::normal_distribution made a 1.2B model take most of a minute.
  std::vector<float> random(int64_t n, float stddev) {
    uint64_t state = rng();
    std::vector<float> v(static_cast<size_t>(n));
    const float scale = stddev * 1.7320508f / 32768.f;  // 4 uniforms on [-32768, 32768): variance 4·2^30/3
    for (auto& x : v) {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const int32_t s = int32_t(int16_t(z)) + int32_t(int16_t(z >> 16)) + int32_t(int16_t(z >> 32)) +
                        int32_t(int16_t(z >> 48));
      x = float(s) * scale * 0.5f;
    }
    return v;
  }

  void add(const std::string& name, cera::GgmlType type, std::vector<int64_t> ne, const std::vector<float>& values) {
    const int64_t cols = ne[0], rows = int64_t(values.size()) / cols;
    const size_t row_bytes = cera::ggml_row_bytes(type, cols);
    std::vector<uint8_t> data(row_bytes * size_t(rows));
    std::vector<std::thread> workers;
    for (int t = 0; t < n_threads; ++t)
      workers.emplace_back([&, t] {
        for (int64_t r = t; r < rows; r += n_threads)
          cera::quant::quantize_row_ref(type, values.data() + r * cols, data.data() + size_t(r) * row_bytes, cols);
      });
    for (auto& w : workers) w.join();
    writer.add_tensor(name, type, std::move(ne), data.data(), data.size());
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cera-synth: write a random-weight LFM2 GGUF of a real model's shape (for benchmarks)"};
  std::string shape_name = "lfm2-350m", type = "f16", out;
  app.add_option("--shape", shape_name, "tiny, lfm2-350m, lfm2-700m, lfm2-1.2b")->capture_default_str();
  app.add_option("--type", type, "f32, f16, bf16, q8_0, q4_0, q4_k_m")->capture_default_str();
  app.add_option("-o,--output", out, "output GGUF")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const Shape* shape = nullptr;
    for (const auto& s : kShapes)
      if (shape_name == s.name) shape = &s;
    if (!shape) throw cera::Error(cera::ErrorCode::InvalidArgument, "unknown --shape '" + shape_name + "'");
    const Shape& S = *shape;
    Generator g;
    g.mix = type;
    weight_type(type, "x", 0, 1, 0, 1);  // validates the mix name before any work

    auto& w = g.writer;
    w.set_string("general.architecture", "lfm2");
    w.set_string("general.name", "cera-synth " + shape_name + " (random weights)");
    w.set_u32("general.quantization_version", 2);
    w.set_u32("lfm2.block_count", uint32_t(S.n_layer));
    w.set_u32("lfm2.context_length", 128000);
    w.set_u32("lfm2.embedding_length", uint32_t(S.d_model));
    w.set_u32("lfm2.feed_forward_length", uint32_t(S.d_ff));
    w.set_u32("lfm2.attention.head_count", uint32_t(S.n_head));
    std::vector<int32_t> kv(size_t(S.n_layer), 0);
    for (int l : S.attention_layers) kv[size_t(l)] = S.n_head_kv;
    w.set_i32_array("lfm2.attention.head_count_kv", kv);
    w.set_f32("lfm2.rope.freq_base", 1e6f);
    w.set_f32("lfm2.attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_u32("lfm2.vocab_size", uint32_t(S.n_vocab));
    w.set_u32("lfm2.shortconv.l_cache", 3);

    // Tokenizer: the 256 GPT-2 byte symbols, LFM2's special tokens, then unused fillers.
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    const char* specials[] = {"<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>",
                              "<|fim_suf|>", "<|im_start|>", "<|im_end|>"};
    for (const char* s : specials) tokens.push_back(s), types.push_back(3);
    for (int b = 0; b < 256; ++b) {
      // GPT-2 byte -> code point map (MODELS.md §6.2).
      int cp = b;
      if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
        int n = 0;
        for (int c = 0; c < b; ++c)
          if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff))) ++n;
        cp = 256 + n;
      }
      std::string u;
      if (cp < 0x80) u += char(cp);
      else u += char(0xc0 | (cp >> 6)), u += char(0x80 | (cp & 0x3f));
      tokens.push_back(u);
      types.push_back(1);
    }
    while (int(tokens.size()) < S.n_vocab) tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]"), types.push_back(5);
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "lfm2");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", {});
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 7);
    w.set_u32("tokenizer.ggml.padding_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);

    const int64_t D = S.d_model, F = S.d_ff, d = D / S.n_head, V = S.n_vocab;
    const float std_w = 0.02f;
    int attn_index = 0;
    const int n_attn = int(S.attention_layers.size());
    auto mat = [&](const std::string& name, int64_t cols, int64_t rows, int layer) {
      const cera::GgmlType t = weight_type(type, name, layer, S.n_layer, attn_index, n_attn);
      std::fprintf(stderr, "\r%-40s %s   ", name.c_str(), std::string(cera::ggml_type_name(t)).c_str());
      g.add(name, t, {cols, rows}, g.random(cols * rows, std_w));
    };
    auto ones = [&](const std::string& name, int64_t n) { g.add(name, cera::GgmlType::F32, {n}, std::vector<float>(size_t(n), 1.f)); };
    mat("token_embd.weight", D, V, 0);
    ones("token_embd_norm.weight", D);
    for (int i = 0; i < S.n_layer; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      ones(b + "attn_norm.weight", D);
      ones(b + "ffn_norm.weight", D);
      mat(b + "ffn_gate.weight", D, F, i);
      mat(b + "ffn_up.weight", D, F, i);
      mat(b + "ffn_down.weight", F, D, i);
      if (kv[size_t(i)] == 0) {
        mat(b + "shortconv.in_proj.weight", D, 3 * D, i);
        g.add(b + "shortconv.conv.weight", cera::GgmlType::F32, {3, D}, g.random(3 * D, 0.3f));
        mat(b + "shortconv.out_proj.weight", D, D, i);
      } else {
        mat(b + "attn_q.weight", D, D, i);
        mat(b + "attn_k.weight", D, S.n_head_kv * d, i);
        mat(b + "attn_v.weight", D, S.n_head_kv * d, i);
        mat(b + "attn_output.weight", D, D, i);
        ones(b + "attn_q_norm.weight", d);
        ones(b + "attn_k_norm.weight", d);
        ++attn_index;
      }
    }
    std::fprintf(stderr, "\rwriting %s\n", out.c_str());
    w.write(out);
  } catch (const cera::Error& e) {
    std::fprintf(stderr, "cera-synth: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
