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

class DenseParity : public ::testing::TestWithParam<FileCase> {};

TEST_P(DenseParity, LogitsMeetFixtureCriteria) {
  const FileCase c = GetParam();
  const std::string m = c.model;
  auto engine = load_file(gguf_path(m, c.type));
  const auto hf = safetensors::File::open(test::fixture_path("models/" + m + "/ref/hf.safetensors"));
  const auto lc = safetensors::File::open(test::fixture_path("models/" + m + "/ref/llamacpp-" + c.type + ".safetensors"));
  const auto prompts = load_prompts(m);
  test::RelRms vs_hf, vs_llamacpp;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = "p" + std::to_string(i) + ".logits";
    const auto ours = all_logits(*engine, prompts[i].ids);
    const auto ref = hf->get(name).to_f32();
    const auto ref_lc = lc->get(name).to_f32();
    ASSERT_EQ(ours.size(), ref.size()) << name;
    ASSERT_EQ(ours.size(), ref_lc.size()) << name;
    vs_hf.add(ours, ref);
    vs_llamacpp.add(ours, ref_lc);
  }
  RecordProperty("rel_rms_vs_hf", std::to_string(vs_hf.value()));
  RecordProperty("rel_rms_vs_llamacpp", std::to_string(vs_llamacpp.value()));
  std::printf("[ %s %-6s ] rel_rms vs HF %.3e (llama.cpp %.3e), vs llama.cpp %.3e\n", c.model, c.type,
              vs_hf.value(), c.llamacpp_rel_rms, vs_llamacpp.value());
  if (c.is_float) {
    EXPECT_LE(vs_hf.value(), 1e-4);
  } else {
    EXPECT_LE(vs_hf.value(), 1.1 * c.llamacpp_rel_rms + 0.002);
    EXPECT_LE(vs_llamacpp.value(), 0.5 * c.llamacpp_rel_rms);
  }
}

// The same tokens fed as one batched prefill and one token at a time give the same logits.
TEST_P(DenseParity, PrefillEqualsTokenByTokenDecode) {
  const FileCase c = GetParam();
  auto engine = load_file(gguf_path(c.model, c.type));
  const size_t V = size_t(engine->info().n_vocab);
  for (const auto& p : load_prompts(c.model)) {
    const auto all = all_logits(*engine, p.ids);
    auto stepwise = engine->new_session();
    test::RelRms diff;
    for (size_t t = 0; t < p.ids.size(); ++t) {
      stepwise->append({&p.ids[t], 1});
      diff.add(stepwise->last_logits(), std::span<const float>(all).subspan(t * V, V));
    }
    EXPECT_LE(diff.value(), 1e-6) << c.model << " " << c.type << ", prompt of " << p.ids.size() << " tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtureFiles, DenseParity, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return case_name(info.param); });

// Greedy continuation of the BF16 file equals HF generate(); a divergence is accepted only right
// after a near tie (top-2 margin < 1e-3), where float rounding may legitimately flip the argmax.
//
// Fixture caveat: for llama-tiny prompts 0-2, prompts.json `greedy[0]` is not the argmax of the
// same fixture's last-position logits (hf.safetensors): HF's generate() and HF's forward pass
// disagree (prompt 3, longer than the 64-token original context of its Llama-3 RoPE scaling, agrees
// for 3 tokens, then departs with a clear margin). When a model's generate() reference contradicts
// its own forward pass, the forward pass is the only trustworthy reference: we check that our first
// greedy token is the argmax of HF's logits and do not compare the rest of that model's continuations.
class DenseGreedy : public ::testing::TestWithParam<const char*> {};

TEST_P(DenseGreedy, Bf16ContinuationMatchesHuggingFace) {
  const std::string m = GetParam();
  auto engine = load_file(gguf_path(m, "BF16"));
  const auto hf = safetensors::File::open(test::fixture_path("models/" + m + "/ref/hf.safetensors"));
  const auto prompts = load_prompts(m);
  const size_t V = size_t(engine->info().n_vocab);
  std::vector<int32_t> hf_first(prompts.size());
  bool fixture_consistent = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ref = hf->get("p" + std::to_string(i) + ".logits").to_f32();
    hf_first[i] = int32_t(std::max_element(ref.end() - long(V), ref.end()) - (ref.end() - long(V)));
    fixture_consistent = fixture_consistent && hf_first[i] == prompts[i].greedy[0];
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    auto session = engine->new_session();
    session->append(p.ids);
    for (size_t step = 0; step < p.greedy.size(); ++step) {
      const auto logits = session->last_logits();
      std::vector<float> sorted(logits.begin(), logits.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const int32_t ours = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (!fixture_consistent) {
        EXPECT_EQ(ours, hf_first[i]) << m << " prompt " << i << ": first greedy token vs HF's forward-pass argmax";
        std::printf("[ note ] %s prompt %zu: the fixture's generate() contradicts its forward logits; "
                    "checked the first token (%d) only\n", m.c_str(), i, hf_first[i]);
        break;
      }
      if (ours != p.greedy[step]) {
        EXPECT_LT(sorted[0] - sorted[1], 1e-3f) << m << ": greedy token " << step << " differs: ours " << ours
                                                << ", HF " << p.greedy[step] << " with a clear margin";
        break;  // after a legitimate flip the continuations are different texts
      }
      session->append({&ours, 1});
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FixtureModels, DenseGreedy, ::testing::Values("llama-tiny", "qwen2-tiny", "qwen3-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

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
