// `-m path/to/hf-folder`: the engine loads a Hugging Face folder directly (converted in memory,
// BF16 kept). Same criteria as a BF16 GGUF: float path, rel_rms <= 1e-4 against the HF float32
// logits over every prompt and position; the tokenizer reproduces the HF token ids.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cera/engine.h"
#include "format/safetensors.h"
#include "support/fixtures.h"
#include "support/logits.h"

namespace cera {
namespace {

std::unique_ptr<Engine> load_folder() {
  EngineOptions o;
  o.model_path = test::fixture_path("models/lfm2-tiny/hf");
  o.n_ctx = 512;
  return Engine::load(o);
}

TEST(HfFolder, Lfm2LogitsMatchHuggingFace) {
  auto engine = load_folder();
  EXPECT_EQ(engine->info().arch, "lfm2");
  const auto hf = safetensors::File::open(test::fixture_path("models/lfm2-tiny/ref/hf.safetensors"));
  const auto prompts = nlohmann::json::parse(test::read_text_file(test::fixture_path("models/lfm2-tiny/ref/prompts.json")));
  test::RelRms rel;
  size_t i = 0;
  for (const auto& p : prompts["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    auto session = engine->new_session();
    session->append(ids, /*all_logits=*/true);
    const auto ours = session->logits();
    const auto ref = hf->get("p" + std::to_string(i++) + ".logits").to_f32();
    ASSERT_EQ(ours.size(), ref.size());
    rel.add(ours, ref);
  }
  ASSERT_GT(i, 0u);
  std::printf("[ hf/ folder ] rel_rms vs HF %.3e over %zu prompts\n", rel.value(), i);
  EXPECT_LE(rel.value(), 1e-4);
}

TEST(HfFolder, TokenizerGivesHuggingFaceIds) {
  auto engine = load_folder();
  const auto prompts = nlohmann::json::parse(test::read_text_file(test::fixture_path("models/lfm2-tiny/ref/prompts.json")));
  size_t n = 0;
  for (const auto& p : prompts["prompts"]) {
    EXPECT_EQ(engine->tokenize(p["text"].get<std::string>(), /*add_special=*/true, /*parse_special=*/true),
              p["ids"].get<std::vector<int32_t>>())
        << p["text"];
    ++n;
  }
  EXPECT_GT(n, 0u);
}

TEST(HfFolder, FolderWithoutWeightsIsACleanError) {
  EngineOptions o;
  o.model_path = test::fixture_path("models/llama-tiny/hf");  // config + tokenizer only
  try {
    Engine::load(o);
    FAIL() << "loaded a folder without weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cera
