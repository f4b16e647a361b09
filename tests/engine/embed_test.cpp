// Session::embeddings(): the final-norm hidden states (the LM head's input). No reference exists for
// hidden states, so the tests check invariants: shapes, agreement between the all-rows and the
// last-row paths, and that the tied LM head (token_embd · h, computed here from the file) gives back
// the logits the engine returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cera/engine.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "support/fixture_models.h"

namespace cera {
namespace {

std::unique_ptr<Engine> load(bool embeddings, const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 256;
  o.embeddings = embeddings;
  o.n_seq_max = 3;  // two sessions and a fork
  return Engine::load(o);
}

std::vector<int32_t> prompt_ids() { return test::load_fixture_prompts("lfm2-tiny").at(1).ids; }

TEST(Embeddings, PerTokenRowsHaveNEmbdValues) {
  auto engine = load(true, test::fixture_gguf("lfm2-tiny", "BF16"));
  const auto ids = prompt_ids();
  auto s = engine->new_session();
  s->append(ids, /*all_logits=*/true);
  const size_t d = size_t(engine->info().n_embd);
  ASSERT_GT(d, 0u);
  ASSERT_EQ(s->embeddings().size(), ids.size() * d);
  ASSERT_EQ(s->logits().size(), ids.size() * size_t(engine->info().n_vocab));
  // Rows are RMS-normed then scaled by the norm weight: finite, not all zero, and distinct per token.
  for (float v : s->embeddings()) ASSERT_TRUE(std::isfinite(v));
  const auto h = s->embeddings();
  EXPECT_FALSE(std::equal(h.begin(), h.begin() + std::ptrdiff_t(d), h.begin() + std::ptrdiff_t(d)));

  // The default append keeps the last row only, and it is the same row.
  auto last = engine->new_session();
  last->append(ids);
  ASSERT_EQ(last->embeddings().size(), d);
  for (size_t j = 0; j < d; ++j)
    EXPECT_NEAR(last->embeddings()[j], h[(ids.size() - 1) * d + j], 1e-4f * (1 + std::fabs(h[(ids.size() - 1) * d + j])));

  // Generation updates them with each fed token; fork copies them; reset clears them.
  GenerateOptions g;
  g.max_tokens = 2;
  g.sampling.temperature = 0;
  last->generate(g, [](int32_t, std::string_view) { return true; });
  EXPECT_EQ(last->embeddings().size(), d);
  auto child = last->fork();
  EXPECT_TRUE(std::equal(child->embeddings().begin(), child->embeddings().end(), last->embeddings().begin(),
                         last->embeddings().end()));
  last->reset();
  EXPECT_TRUE(last->embeddings().empty());
}

TEST(Embeddings, OffByDefault) {
  auto engine = load(false, test::fixture_gguf("lfm2-tiny", "BF16"));
  auto s = engine->new_session();
  s->append(prompt_ids(), true);
  EXPECT_TRUE(s->embeddings().empty());
  EXPECT_FALSE(s->logits().empty());
}

// The LM head of the tied LFM2 fixture is token_embd: logits[v] = token_embd[v] · h.
TEST(Embeddings, TiedLmHeadOfTheRowsGivesTheEngineLogits) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "BF16");
  auto file = gguf::File::open(path);
  ASSERT_EQ(file->find_tensor("output.weight"), nullptr) << "the fixture is expected to tie its LM head";
  const gguf::TensorInfo& emb = file->tensor("token_embd.weight");
  auto engine = load(true, path);
  const int64_t d = engine->info().n_embd, n_vocab = engine->info().n_vocab;
  ASSERT_EQ(emb.ne[0], d);
  ASSERT_EQ(emb.n_rows(), n_vocab);
  std::vector<float> table(size_t(d * n_vocab));
  for (int64_t v = 0; v < n_vocab; ++v)
    quant::dequantize_row_ref(emb.type, emb.data + size_t(v) * emb.row_bytes(), table.data() + v * d, d);

  const auto ids = prompt_ids();
  auto s = engine->new_session();
  s->append(ids, true);
  const auto h = s->embeddings();
  const auto logits = s->logits();
  double worst = 0;
  for (size_t t = 0; t < ids.size(); t += 7) {
    const float* row = h.data() + t * size_t(d);
    const float* want = logits.data() + t * size_t(n_vocab);
    double scale = 0;
    for (int64_t v = 0; v < n_vocab; ++v) scale = std::max(scale, std::fabs(double(want[v])));
    for (int64_t v = 0; v < n_vocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += double(table[size_t(v * d + j)]) * row[j];
      worst = std::max(worst, std::fabs(dot - want[v]) / scale);
    }
  }
  EXPECT_LT(worst, 1e-5) << "largest |token_embd·h - logit| relative to the row's largest logit";
  std::printf("tied LM head vs engine logits: worst relative error %.3g\n", worst);
}

}  // namespace
}  // namespace cera
