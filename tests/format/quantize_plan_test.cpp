// The quantization plan: per-tensor types equal llama-quantize's on every fixture model and type,
// plus the rules that the tiny fixtures cannot exercise (deep stacks, fallbacks, untied heads).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "format/gguf.h"
#include "format/quantize_plan.h"
#include "support/fixtures.h"

namespace cera::quant {
namespace {

TensorShape shape(std::string name, std::vector<int64_t> ne, GgmlType type = GgmlType::BF16) {
  TensorShape t;
  t.name = std::move(name);
  t.n_dims = int(ne.size());
  for (size_t d = 0; d < ne.size(); ++d) t.ne[d] = ne[d];
  t.type = type;
  return t;
}

std::vector<TensorShape> shapes_of(const gguf::File& f) {
  std::vector<TensorShape> out;
  for (const auto& t : f.tensors()) out.push_back({t.name, t.n_dims, t.ne, t.type});
  return out;
}

// Every quantized fixture next to a BF16 source: {model dir, TYPE}.
std::vector<std::pair<std::string, std::string>> fixture_quant_files() {
  std::vector<std::pair<std::string, std::string>> out;
  const std::filesystem::path models = test::fixtures_dir() + "/models";
  for (const auto& m : std::filesystem::directory_iterator(models)) {
    const std::string model = m.path().filename().string();
    if (!std::filesystem::exists(m.path() / "gguf" / (model + "-BF16.gguf"))) continue;
    for (const auto& f : std::filesystem::directory_iterator(m.path() / "gguf")) {
      const std::string stem = f.path().stem().string();
      const std::string type = stem.substr(model.size() + 1);
      if (type != "BF16" && type != "F16") out.emplace_back(model, type);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(QuantizePlan, MatchesLlamaQuantizeOnEveryFixture) {
  const auto files = fixture_quant_files();
  ASSERT_GE(files.size(), 15u) << "fixture GGUFs missing";
  for (const auto& [model, type] : files) {
    SCOPED_TRACE(model + " " + type);
    const std::string dir = test::fixtures_dir() + "/models/" + model + "/gguf/";
    const auto src = gguf::File::open(dir + model + "-BF16.gguf");
    const auto ref = gguf::File::open(dir + model + "-" + type + ".gguf");
    const auto mix = mix_from_name(type);
    ASSERT_TRUE(mix.has_value());
    const auto shapes = shapes_of(*src);
    const auto plan = make_plan(shapes, facts_from_gguf(*src), {*mix, false});
    ASSERT_EQ(plan.size(), shapes.size());
    ASSERT_EQ(ref->tensors().size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& expected = ref->tensor(shapes[i].name);
      EXPECT_EQ(ggml_type_name(plan[i].type), ggml_type_name(expected.type)) << shapes[i].name;
      EXPECT_FALSE(plan[i].fallback) << shapes[i].name;
    }
  }
}

TEST(QuantizePlan, LfmFixtureSpotChecks) {
  // The rules the fixture comparison relies on, spelled out for lfm2-tiny (6 layers, attention at 2 and 4).
  const auto src = gguf::File::open(test::fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-BF16.gguf"));
  const auto shapes = shapes_of(*src);
  const ModelFacts facts = facts_from_gguf(*src);
  EXPECT_TRUE(facts.tied_embeddings);
  EXPECT_EQ(facts.n_layer, 6);
  EXPECT_EQ(facts.n_attn_v, 2);
  EXPECT_EQ(facts.n_gqa(), 0);  // layer 0 is a conv layer: no KV heads
  const auto plan = make_plan(shapes, facts, {Mix::Q4_K_M, false});
  auto type_of = [&](const std::string& name) {
    for (size_t i = 0; i < shapes.size(); ++i)
      if (shapes[i].name == name) return plan[i].type;
    ADD_FAILURE() << name << " not in the model";
    return GgmlType::F32;
  };
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q6_K);  // tied: it is the LM head
  EXPECT_EQ(type_of("blk.0.shortconv.conv.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("blk.2.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.4.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.2.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.5.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.1.shortconv.in_proj.weight"), GgmlType::Q4_K);
}

// A llama-like stack of n layers, untied unless `tied`.
std::vector<TensorShape> llama_stack(int n, bool tied, int64_t d = 256, int64_t ff = 512) {
  std::vector<TensorShape> t;
  t.push_back(shape("token_embd.weight", {d, 1000}));
  if (!tied) t.push_back(shape("output.weight", {d, 1000}));
  t.push_back(shape("output_norm.weight", {d}, GgmlType::F32));
  for (int i = 0; i < n; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* w : {"attn_q", "attn_k", "attn_v", "attn_output"}) t.push_back(shape(b + w + ".weight", {d, d}));
    t.push_back(shape(b + "ffn_gate.weight", {d, ff}));
    t.push_back(shape(b + "ffn_up.weight", {d, ff}));
    t.push_back(shape(b + "ffn_down.weight", {ff, d}));
    t.push_back(shape(b + "attn_norm.weight", {d}, GgmlType::F32));
  }
  return t;
}

ModelFacts llama_facts(const std::vector<TensorShape>& t, int n_layer, int n_head = 8, int n_head_kv = 8) {
  ModelFacts f = facts_from_tensors(t);
  f.arch = "llama";
  f.n_layer = n_layer;
  f.n_head = n_head;
  f.n_head_kv = n_head_kv;
  return f;
}

GgmlType planned(const std::vector<TensorShape>& t, const std::vector<PlannedTensor>& plan, const std::string& name) {
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i].name == name) return plan[i].type;
  ADD_FAILURE() << name << " not found";
  return GgmlType::F32;
}

TEST(QuantizePlan, MoreBitsLayersInADeepStackFollowLayerNumbersNotNameOrder) {
  // 16 layers: "blk.10" sorts before "blk.2" as a string; the extra-bits layers must still be
  // the first/last eighth and every third in between: 0 1 4 7 10 13 14 15.
  auto t = llama_stack(16, false);
  std::mt19937 rng(7);
  std::shuffle(t.begin(), t.end(), rng);  // file order must not matter either
  const auto plan = make_plan(t, llama_facts(t, 16), {Mix::Q4_K_M, false});
  const std::vector<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int i = 0; i < 16; ++i) {
    const bool m = std::find(more.begin(), more.end(), i) != more.end();
    const std::string b = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(planned(t, plan, b + "ffn_down.weight"), m ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(planned(t, plan, b + "attn_v.weight"), m ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(planned(t, plan, b + "attn_q.weight"), GgmlType::Q4_K) << i;
  }
  // Untied: the output gets Q6_K, the embedding table the base type.
  EXPECT_EQ(planned(t, plan, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(planned(t, plan, "token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(planned(t, plan, "output_norm.weight"), GgmlType::F32);
}

TEST(QuantizePlan, SmallAndLargeMixRules) {
  auto t = llama_stack(32, true);
  const auto f = llama_facts(t, 32, 32, 8);  // GQA 4
  auto q2 = make_plan(t, f, {Mix::Q2_K, false});
  EXPECT_EQ(planned(t, q2, "blk.3.attn_v.weight"), GgmlType::Q4_K);  // n_gqa >= 4
  EXPECT_EQ(planned(t, q2, "blk.3.ffn_down.weight"), GgmlType::Q3_K);
  EXPECT_EQ(planned(t, q2, "blk.3.attn_output.weight"), GgmlType::Q3_K);
  EXPECT_EQ(planned(t, q2, "blk.3.ffn_up.weight"), GgmlType::Q2_K);
  EXPECT_EQ(planned(t, q2, "token_embd.weight"), GgmlType::Q6_K);

  auto q3m = make_plan(t, f, {Mix::Q3_K_M, false});
  EXPECT_EQ(planned(t, q3m, "blk.0.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(planned(t, q3m, "blk.1.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(planned(t, q3m, "blk.2.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(planned(t, q3m, "blk.1.ffn_down.weight"), GgmlType::Q5_K);  // i < n/16
  EXPECT_EQ(planned(t, q3m, "blk.2.ffn_down.weight"), GgmlType::Q4_K);

  auto q4s = make_plan(t, f, {Mix::Q4_K_S, false});
  EXPECT_EQ(planned(t, q4s, "blk.3.attn_v.weight"), GgmlType::Q5_K);
  EXPECT_EQ(planned(t, q4s, "blk.4.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(planned(t, q4s, "blk.3.ffn_down.weight"), GgmlType::Q5_K);
  EXPECT_EQ(planned(t, q4s, "blk.4.ffn_down.weight"), GgmlType::Q4_K);

  auto q5s = make_plan(t, f, {Mix::Q5_K_S, false});
  EXPECT_EQ(planned(t, q5s, "blk.0.ffn_down.weight"), GgmlType::Q5_K);
  EXPECT_EQ(planned(t, q5s, "token_embd.weight"), GgmlType::Q6_K);

  auto q8 = make_plan(t, f, {Mix::Q8_0, false});
  EXPECT_EQ(planned(t, q8, "token_embd.weight"), GgmlType::Q8_0);  // never below the base
}

TEST(QuantizePlan, PureUsesTheBaseTypeEverywhere) {
  auto t = llama_stack(8, true);
  const auto plan = make_plan(t, llama_facts(t, 8), {Mix::Q4_K_M, true});
  for (size_t i = 0; i < t.size(); ++i)
    EXPECT_EQ(plan[i].type, t[i].n_dims == 1 ? GgmlType::F32 : GgmlType::Q4_K) << t[i].name;
}

TEST(QuantizePlan, RowsThatDoNotFitFallBack) {
  // 320 is a multiple of 32 but not of 256; 100 is neither.
  std::vector<TensorShape> t = {shape("blk.0.attn_q.weight", {320, 64}), shape("blk.0.ffn_up.weight", {100, 64}),
                                shape("token_embd.weight", {320, 64})};
  ModelFacts f = facts_from_tensors(t);
  f.n_layer = 1;
  struct Case { Mix mix; GgmlType fit32; };
  for (const Case c : {Case{Mix::Q4_K_M, GgmlType::Q5_0}, Case{Mix::Q5_K_M, GgmlType::Q5_1}, Case{Mix::Q6_K, GgmlType::Q8_0},
                       Case{Mix::Q3_K_M, GgmlType::Q4_0}, Case{Mix::Q2_K, GgmlType::Q4_0}, Case{Mix::Q4_0, GgmlType::Q4_0}}) {
    SCOPED_TRACE(std::string(mix_info(c.mix).name));
    const auto plan = make_plan(t, f, {c.mix, false});
    EXPECT_EQ(plan[0].type, c.fit32);
    EXPECT_EQ(plan[0].fallback, c.mix != Mix::Q4_0);
    EXPECT_EQ(plan[1].type, GgmlType::F16);
    EXPECT_TRUE(plan[1].fallback);
    // The LM head's Q6_K does not fit 320-long rows either: Q8_0.
    EXPECT_EQ(plan[2].type, GgmlType::Q8_0);
  }
}

TEST(QuantizePlan, KeepsTensorsLlamaQuantizeKeeps) {
  std::vector<TensorShape> t = {
      shape("blk.0.shortconv.conv.weight", {3, 256}, GgmlType::F32), shape("blk.0.attn_q_norm.weight", {64}, GgmlType::F32),
      shape("blk.0.ffn_gate_inp.weight", {256, 8}), shape("rope_freqs.weight", {32}, GgmlType::F32),
      shape("blk.0.attn_q.bias", {256, 2}), shape("blk.0.attn_q.weight", {256, 256}, GgmlType::F16),
      shape("blk.0.attn_k.weight", {256, 256}, GgmlType::Q4_K)};
  const auto plan = make_plan(t, facts_from_tensors(t), {Mix::Q4_K_M, false});
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(plan[i].type, t[i].type) << t[i].name;
    EXPECT_FALSE(plan[i].quantize) << t[i].name;
  }
  EXPECT_TRUE(plan[5].quantize);
  EXPECT_EQ(plan[5].type, GgmlType::Q4_K);
  EXPECT_FALSE(plan[6].quantize);  // already the target type: copied
}

TEST(QuantizePlan, FloatTargetsConvertWithoutMixRules) {
  auto t = llama_stack(2, true);
  const auto plan = make_plan(t, llama_facts(t, 2), {Mix::F16, false});
  for (size_t i = 0; i < t.size(); ++i)
    EXPECT_EQ(plan[i].type, t[i].n_dims == 1 ? GgmlType::F32 : GgmlType::F16) << t[i].name;
}

TEST(QuantizePlan, MixNames) {
  EXPECT_EQ(mix_from_name("q4_k_m"), Mix::Q4_K_M);
  EXPECT_EQ(mix_from_name("Q4_K"), Mix::Q4_K_M);
  EXPECT_EQ(mix_from_name("Q5_K"), Mix::Q5_K_M);
  EXPECT_EQ(mix_from_name("Q3_K"), Mix::Q3_K_M);
  EXPECT_EQ(mix_from_name("Q8_0"), Mix::Q8_0);
  EXPECT_EQ(mix_from_name("bf16"), Mix::BF16);
  EXPECT_FALSE(mix_from_name("Q4_K_X").has_value());
  EXPECT_FALSE(mix_from_name("IQ4_XS").has_value());
  EXPECT_FALSE(mix_from_name("").has_value());
  // The llama_ftype values written to general.file_type (MODELS.md §1.4).
  EXPECT_EQ(uint32_t(Mix::Q4_K_M), 15u);
  EXPECT_EQ(uint32_t(Mix::Q6_K), 18u);
  EXPECT_EQ(uint32_t(Mix::Q8_0), 7u);
  EXPECT_NE(mix_names_joined().find("Q5_K_M"), std::string::npos);
}

}  // namespace
}  // namespace cera::quant
