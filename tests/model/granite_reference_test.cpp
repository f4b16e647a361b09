// Granite against transformers' GraniteForCausalLM: tests/data/granite-tiny is a tiny random Granite
// (tied embeddings; embedding 12, residual 0.22, attention 1/128, logits 8 — all far from 1) made by
// tools/fixtures/make_granite_fixture.py, with float32 reference logits for every prompt position.
// Loaded straight from the HF folder and through a BF16 GGUF written by our converter, both must
// meet the float criterion (rel_rms <= 1e-4); the GGUF carries the four multipliers; the greedy
// continuation is HF's; and changing any one multiplier in the file moves the logits far off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cera/engine.h"
#include "format/gguf.h"
#include "format/hf/hf_convert.h"
#include "format/safetensors.h"
#include "support/fixtures.h"
#include "support/logits.h"

namespace cera {
namespace {

namespace fs = std::filesystem;

const char* const kDir = "tests/data/granite-tiny";

std::string data(const std::string& rel) { return test::source_path(std::string(kDir) + "/" + rel); }

struct Prompt {
  std::vector<int32_t> ids;
  std::vector<float> logits;   // [T, V]
  std::vector<int32_t> greedy;
};

std::vector<Prompt> load_reference() {
  const auto ref = safetensors::File::open(data("ref/hf.safetensors"));
  const auto meta = nlohmann::json::parse(test::read_text_file(data("ref/prompts.json")));
  std::vector<Prompt> out;
  for (size_t i = 0; i < meta["prompts"].size(); ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    Prompt x;
    x.ids = ref->get(p + "ids").to_i32();
    EXPECT_EQ(x.ids, meta["prompts"][i]["ids"].get<std::vector<int32_t>>()) << "prompt " << i;
    x.logits = ref->get(p + "logits").to_f32();
    x.greedy = ref->get(p + "greedy").to_i32();
    EXPECT_EQ(x.greedy, meta["prompts"][i]["greedy"].get<std::vector<int32_t>>()) << "prompt " << i;
    out.push_back(std::move(x));
  }
  return out;
}

std::unique_ptr<Engine> load(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 512;
  return Engine::load(o);
}

// A BF16 GGUF written by our converter from the HF folder, in a per-process temp dir.
class GraniteReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = fs::temp_directory_path() / ("cera_granite_" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
    gguf_ = (tmp_ / "granite-tiny-BF16.gguf").string();
    hf::convert(data("hf"), hf::OutType::kBF16).write(gguf_);
  }
  static void TearDownTestSuite() { fs::remove_all(tmp_); }

  static double rel_rms_over_prompts(Engine& e, const std::vector<Prompt>& prompts, bool print) {
    test::RelRms all;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = e.new_session();
      s->append(prompts[i].ids, /*all_logits=*/true);
      const auto ours = s->logits();
      EXPECT_EQ(ours.size(), prompts[i].logits.size()) << "prompt " << i;
      if (ours.size() != prompts[i].logits.size()) return 1e9;
      test::RelRms one;
      one.add(ours, prompts[i].logits);
      all.add(ours, prompts[i].logits);
      if (print) std::printf("  prompt %zu (%zu tokens): rel_rms %.3e\n", i, prompts[i].ids.size(), one.value());
    }
    return all.value();
  }

  static inline fs::path tmp_;
  static inline std::string gguf_;
};

TEST_F(GraniteReference, ReferenceIsWhatTheTestsAssume) {
  const auto prompts = load_reference();
  ASSERT_EQ(prompts.size(), 4u);
  size_t longest = 0;
  for (const auto& p : prompts) {
    ASSERT_EQ(p.logits.size(), p.ids.size() * 1024);
    EXPECT_EQ(p.greedy.size(), 16u);
    longest = std::max(longest, p.ids.size());
  }
  EXPECT_GT(longest, 64u);
}

TEST_F(GraniteReference, HfFolderMatchesTransformers) {
  auto e = load(data("hf"));
  EXPECT_EQ(e->info().arch, "granite");
  EXPECT_EQ(e->info().n_vocab, 1024);
  const double r = rel_rms_over_prompts(*e, load_reference(), true);
  std::printf("[ granite-tiny hf/ folder ] rel_rms vs HF float32 %.3e\n", r);
  EXPECT_LE(r, 1e-4);
  // and the folder's tokenizer gives the reference's ids for the prompt texts
  const auto meta = nlohmann::json::parse(test::read_text_file(data("ref/prompts.json")));
  for (const auto& p : meta["prompts"])
    EXPECT_EQ(e->tokenize(p["text"].get<std::string>(), /*add_special=*/true, /*parse_special=*/true),
              p["ids"].get<std::vector<int32_t>>())
        << p["text"];
}

TEST_F(GraniteReference, ConvertedBf16GgufMatchesTransformers) {
  auto e = load(gguf_);
  EXPECT_EQ(e->info().arch, "granite");
  const double r = rel_rms_over_prompts(*e, load_reference(), true);
  std::printf("[ granite-tiny BF16 GGUF ] rel_rms vs HF float32 %.3e\n", r);
  EXPECT_LE(r, 1e-4);
}

TEST_F(GraniteReference, GgufCarriesTheMultipliers) {
  const auto f = gguf::File::open(gguf_);
  EXPECT_EQ(f->get_string("general.architecture"), "granite");
  // config.json: embedding_multiplier 12.0, residual_multiplier 0.22, attention_multiplier
  // 0.0078125, logits_scaling 8.0 (stored as f32, as convert_hf_to_gguf.py stores them).
  EXPECT_EQ(f->get_float("granite.embedding_scale"), double(12.0f));
  EXPECT_EQ(f->get_float("granite.residual_scale"), double(0.22f));
  EXPECT_EQ(f->get_float("granite.attention.scale"), double(0.0078125f));
  EXPECT_EQ(f->get_float("granite.logit_scale"), double(8.0f));
  EXPECT_EQ(f->get_float("granite.rope.freq_base"), 10000.0);
  EXPECT_EQ(f->get_int("granite.attention.head_count_kv"), 2);
  EXPECT_FALSE(f->find_tensor("output.weight")) << "tied embeddings: no separate output matrix";
}

// Greedy continuation equals the reference's (argmax of full float32 forward passes); a divergence
// is accepted only right after a near tie (top-2 margin < 1e-3).
TEST_F(GraniteReference, GreedyContinuationMatchesTransformers) {
  const auto prompts = load_reference();
  for (const std::string path : {data("hf"), gguf_}) {
    auto e = load(path);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto s = e->new_session();
      s->append(prompts[i].ids);
      for (size_t step = 0; step < prompts[i].greedy.size(); ++step) {
        const auto logits = s->last_logits();
        std::vector<float> sorted(logits.begin(), logits.end());
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        const int32_t ours = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (ours != prompts[i].greedy[step]) {
          EXPECT_LT(sorted[0] - sorted[1], 1e-3f) << path << " prompt " << i << ": greedy token " << step
                                                  << " differs: ours " << ours << ", HF " << prompts[i].greedy[step]
                                                  << " with a clear margin";
          break;
        }
        s->append({&ours, 1});
      }
    }
  }
}

// Each multiplier matters on this model: the same file with any one of them set to 1 gives logits
// far from the reference, so the parity above cannot hold with a multiplier ignored or misapplied.
TEST_F(GraniteReference, EveryMultiplierMovesTheLogits) {
  const auto prompts = load_reference();
  const auto f = gguf::File::open(gguf_);
  for (const char* key : {"granite.embedding_scale", "granite.residual_scale", "granite.attention.scale",
                          "granite.logit_scale"}) {
    gguf::Writer w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    w.set_f32(key, 1.0f);
    for (const auto& t : f->tensors())
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data, t.nbytes);
    const std::string path = (tmp_ / "altered.gguf").string();
    w.write(path);
    auto e = load(path);
    const double r = rel_rms_over_prompts(*e, prompts, false);
    std::printf("[ %s = 1 ] rel_rms vs HF %.3e\n", key, r);
    EXPECT_GT(r, 1e-2) << key;
  }
}

}  // namespace
}  // namespace cera
