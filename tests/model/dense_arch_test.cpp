// Dense families (llama, qwen2, qwen3, granite; MODELS.md §4) through the public API. Fixture
// models: every GGUF vs Hugging Face float32 logits and llama.cpp's logits for the same file
// (../shared/fixtures/README.md "what correct means"), prefill vs token-by-token decode, BF16 greedy.
// Granite has no fixture: a granite file is built from llama-tiny's tensors, and each multiplier
// is checked against what the math predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "cera/engine.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "support/fixtures.h"
#include "support/logits.h"

namespace cera {
namespace {

struct FileCase {
  const char* model;  // fixture folder, e.g. "llama-tiny"
  const char* type;
  double llamacpp_rel_rms;  // llama.cpp's own error vs HF (fixtures README table)
  bool is_float;
};

const FileCase kCases[] = {
    {"llama-tiny", "BF16", 5.95e-3, true},  {"llama-tiny", "Q8_0", 3.28e-2, false},
    {"llama-tiny", "Q4_K_M", 0.301, false}, {"qwen2-tiny", "BF16", 6.14e-3, true},
    {"qwen2-tiny", "Q8_0", 3.33e-2, false}, {"qwen2-tiny", "Q4_K_M", 0.270, false},
    {"qwen3-tiny", "BF16", 6.41e-3, true},  {"qwen3-tiny", "Q8_0", 3.42e-2, false},
    {"qwen3-tiny", "Q4_K_M", 0.284, false},
};

void PrintTo(const FileCase& c, std::ostream* os) { *os << c.model << " " << c.type; }

std::string case_name(const FileCase& c) {
  std::string s = std::string(c.model) + "_" + c.type;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
};

std::vector<Prompt> load_prompts(const std::string& model) {
  auto j = nlohmann::json::parse(test::read_text_file(test::fixture_path("models/" + model + "/ref/prompts.json")));
  std::vector<Prompt> out;
  for (const auto& p : j["prompts"])
    out.push_back({p["ids"].get<std::vector<int32_t>>(), p["greedy"].get<std::vector<int32_t>>()});
  return out;
}

std::string gguf_path(const std::string& model, const std::string& type) {
  return test::fixture_path("models/" + model + "/gguf/" + model + "-" + type + ".gguf");
}

std::unique_ptr<Engine> load_file(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 512;
  return Engine::load(o);
}

std::vector<float> all_logits(Engine& engine, const std::vector<int32_t>& ids) {
  auto session = engine.new_session();
  session->append(ids, /*all_logits=*/true);
  return {session->logits().begin(), session->logits().end()};
}

// ---- crafted files: llama-tiny BF16's tensors and metadata, rewritten through gguf::Writer

// Copies a GGUF with its `llama.*` keys renamed to `<arch>.*`; `edit` may then change keys, and
// `tensor_edit` may rewrite a tensor's bytes.
std::string craft_from_llama_tiny(
    const std::string& file_name, const std::string& arch, const std::function<void(gguf::Writer&)>& edit,
    const std::function<void(const std::string&, GgmlType, std::vector<uint8_t>&)>& tensor_edit = {}) {
  const auto src = gguf::File::open(gguf_path("llama-tiny", "BF16"));
  gguf::Writer w;
  for (const auto& [key, value] : src->metadata()) {
    if (key.rfind("llama.", 0) == 0)
      w.set(arch + key.substr(5), value);
    else
      w.set(key, value);
  }
  w.set_string("general.architecture", arch);
  edit(w);
  for (const auto& t : src->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    if (tensor_edit) tensor_edit(t.name, t.type, bytes);
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), bytes.data(),
                 bytes.size());
  }
  const std::string path = ::testing::TempDir() + "/" + file_name + ".gguf";
  w.write(path);
  return path;
}

TEST(DenseArch, UnknownArchitectureIsAClearError) {
  const std::string path = craft_from_llama_tiny("dense_unknown_arch", "bogusformer", [](gguf::Writer&) {});
  try {
    load_file(path);
    FAIL() << "loading an unknown architecture succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'bogusformer'"), std::string::npos) << e.what();
  }
}

// A RoPE scaling scheme cera does not implement is refused, not silently run as unscaled RoPE.
TEST(DenseArch, UnsupportedRopeScalingIsAClearError) {
  const std::string path = craft_from_llama_tiny("dense_yarn", "llama", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_f32("llama.rope.scaling.factor", 4.f);
  });
  try {
    load_file(path);
    FAIL() << "loading a yarn-scaled model succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("yarn"), std::string::npos) << e.what();
  }
}

// Logits of a file over all llama-tiny prompts and positions, concatenated.
std::vector<float> prompt_logits(const std::string& path) {
  auto engine = load_file(path);
  std::vector<float> out;
  for (const auto& p : load_prompts("llama-tiny")) {
    const auto l = all_logits(*engine, p.ids);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  test::RelRms r;
  r.add(a, b);
  return r.value();
}

struct GraniteScales {
  float embedding = 1.f, residual = 1.f, logit = 1.f;
  float attention = 0.125f;  // 1/sqrt(64): llama-tiny's default softmax scale
};

std::string granite_file(const std::string& name, const GraniteScales& s, float eps = -1.f,
                         float q_weight_multiplier = 1.f) {
  return craft_from_llama_tiny(
      name, "granite",
      [&](gguf::Writer& w) {
        w.set_f32("granite.embedding_scale", s.embedding);
        w.set_f32("granite.residual_scale", s.residual);
        w.set_f32("granite.logit_scale", s.logit);
        w.set_f32("granite.attention.scale", s.attention);
        if (eps >= 0.f) w.set_f32("granite.attention.layer_norm_rms_epsilon", eps);
      },
      [&](const std::string& tensor, GgmlType type, std::vector<uint8_t>& bytes) {
        if (q_weight_multiplier == 1.f || tensor.find("attn_q.weight") == std::string::npos) return;
        ASSERT_EQ(type, GgmlType::BF16);
        // bf16 = the top half of an f32; multiplying by a power of two is exact.
        for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
          uint32_t u = uint32_t(bytes[i] | (bytes[i + 1] << 8)) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          f *= q_weight_multiplier;
          std::memcpy(&u, &f, 4);
          bytes[i] = uint8_t(u >> 16);
          bytes[i + 1] = uint8_t(u >> 24);
        }
      });
}

// Granite with neutral multipliers is llama (both NORMAL RoPE, same rope_freqs, same tensors).
TEST(DenseGranite, NeutralMultipliersEqualLlama) {
  const auto llama = prompt_logits(gguf_path("llama-tiny", "BF16"));
  const auto granite = prompt_logits(granite_file("granite_neutral", {}));
  EXPECT_LE(rel_rms(granite, llama), 1e-6);
}

// logits = (output · x) / logit_scale.
TEST(DenseGranite, LogitScaleDividesLogits) {
  const auto base = prompt_logits(granite_file("granite_logit1", {}));
  GraniteScales s;
  s.logit = 3.f;
  auto scaled = prompt_logits(granite_file("granite_logit3", s));
  for (float& v : scaled) v *= 3.f;
  EXPECT_LE(rel_rms(scaled, base), 1e-6);
}

// RMSNorm is scale-invariant (with eps ≈ 0): scaling the embeddings AND every branch output by the
// same power of two scales the whole residual stream, so the logits do not change. Either scale
// alone changes them — that shows each is applied, the pair shows both branches are scaled.
TEST(DenseGranite, EmbeddingAndResidualScalesActOnTheResidualStream) {
  const float eps = 1e-30f;
  const auto base = prompt_logits(granite_file("granite_er_base", {}, eps));
  GraniteScales both, emb_only, res_only;
  both.embedding = both.residual = 4.f;
  emb_only.embedding = 4.f;
  res_only.residual = 4.f;
  EXPECT_LE(rel_rms(prompt_logits(granite_file("granite_er_both", both, eps)), base), 1e-5);
  EXPECT_GE(rel_rms(prompt_logits(granite_file("granite_er_emb", emb_only, eps)), base), 1e-2);
  EXPECT_GE(rel_rms(prompt_logits(granite_file("granite_er_res", res_only, eps)), base), 1e-2);
}

// attention.scale replaces 1/sqrt(d): doubling the Q weights (exact in bf16) and halving the scale
// leaves every score unchanged; halving the scale alone does not.
TEST(DenseGranite, AttentionScaleIsTheSoftmaxScale) {
  const auto base = prompt_logits(granite_file("granite_att_base", {}));
  GraniteScales half;
  half.attention = 0.0625f;
  EXPECT_LE(rel_rms(prompt_logits(granite_file("granite_att_q2", half, -1.f, 2.f)), base), 1e-6);
  EXPECT_GE(rel_rms(prompt_logits(granite_file("granite_att_half", half)), base), 1e-3);
}

}  // namespace
}  // namespace cera
