// Session::generate sampling from the backend's top-k (Backend::top_k_rows) instead of the full
// logits row: with the same seed it generates exactly the tokens the full-row path generates, and
// the session ends with the same full logits (and hidden states), also across two generate calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cera/engine.h"
#include "engine/engine_impl.h"
#include "support/fixtures.h"

namespace cera {
namespace {

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<float> last_logits, embeddings;
  uint64_t top_k_steps = 0;
};

// Two generate calls after a prompt, with the device top-k path on or off.
GenRun generate(Engine& engine, bool device_top_k, const GenerateOptions& g) {
  auto& impl = EngineInternals::of(engine);
  impl.sample_from_top_k = device_top_k;
  const uint64_t before = impl.top_k_steps;
  GenRun r;
  auto s = engine.new_session();
  s->append(engine.tokenize("Once upon a time", true, false));
  for (int call = 0; call < 2; ++call) {
    s->generate(g, [&](int32_t t, std::string_view) {
      if (t >= 0) r.tokens.push_back(t);
      return true;
    });
  }
  r.last_logits.assign(s->last_logits().begin(), s->last_logits().end());
  r.embeddings.assign(s->embeddings().begin(), s->embeddings().end());
  r.top_k_steps = impl.top_k_steps - before;
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  const char* name;
  GenerateOptions options;
  bool uses_top_k;  // whether the device path applies to these options
};

std::vector<Case> cases() {
  std::vector<Case> out;
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;  // every token is appended: a fixed number of steps (the EOG ban is a bias)
  g.sampling.seed = 1234;
  out.push_back({"defaults", g, true});  // top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  GenerateOptions p = g;
  p.sampling.seed = 77;
  p.sampling.temperature = 1.3f;
  p.sampling.top_k = 8;
  p.sampling.typical_p = 0.9f;
  p.sampling.repeat_penalty = 1.3f;
  p.sampling.frequency_penalty = 0.4f;
  p.sampling.presence_penalty = 0.2f;
  p.sampling.logit_bias = {{10, -3.f}, {11, -INFINITY}};
  out.push_back({"penalties_and_bias", p, true});
  GenerateOptions greedy = g;
  greedy.sampling.temperature = 0.f;
  greedy.sampling.repeat_penalty = 1.5f;
  out.push_back({"greedy", greedy, true});
  GenerateOptions off = g;
  off.sampling.top_k = 0;  // every token may be drawn: the full row is needed
  out.push_back({"top_k_off", off, false});
  GenerateOptions raise = g;
  raise.sampling.logit_bias = {{5, 1.f}};  // a raised token may come from anywhere
  out.push_back({"positive_bias", raise, false});
  GenerateOptions probs = g;
  probs.sampling.n_probs = 3;
  probs.on_logprobs = [](const SampledToken&) {};  // log-probabilities of the full row
  out.push_back({"logprobs", probs, false});
  return out;
}

TEST(DeviceTopKSampling, SameTokensAsTheFullRow) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  o.embeddings = true;
  auto engine = Engine::load(o);
  for (const Case& c : cases()) {
    const GenRun with = generate(*engine, true, c.options);
    const GenRun without = generate(*engine, false, c.options);
    EXPECT_EQ(without.top_k_steps, 0u) << c.name;
    // Every token generate appended read only the top-k (ignore_eos: max_tokens per call); each
    // call still starts from full logits (the prompt's, then those fetched when the first ended).
    EXPECT_EQ(with.top_k_steps, c.uses_top_k ? uint64_t(2 * c.options.max_tokens) : 0u) << c.name;
    ASSERT_EQ(with.tokens.size(), size_t(2 * c.options.max_tokens)) << c.name;
    EXPECT_EQ(with.tokens, without.tokens) << c.name;
    EXPECT_FALSE(with.last_logits.empty()) << c.name;
    EXPECT_TRUE(bitwise_equal(with.last_logits, without.last_logits)) << c.name;
    EXPECT_FALSE(with.embeddings.empty()) << c.name;
    EXPECT_TRUE(bitwise_equal(with.embeddings, without.embeddings)) << c.name;
  }
  // Different seeds still give different text on the top-k path (it is really sampling).
  GenerateOptions g = cases()[0].options;
  const GenRun a = generate(*engine, true, g);
  g.sampling.seed = 4321;
  EXPECT_NE(generate(*engine, true, g).tokens, a.tokens);
}

// A generate that needs the full row (log-probabilities here) after one that sampled from the
// top-k, on the same session: each of its tokens is drawn from its own step's logits, not from the
// top-k values the earlier call left behind.
TEST(DeviceTopKSampling, FullRowCallAfterATopKCallOnOneSession) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);
  const GenerateOptions first = cases()[0].options;
  GenerateOptions second = first;
  second.sampling.n_probs = 3;
  int n_logprobs = 0;
  second.on_logprobs = [&](const SampledToken&) { ++n_logprobs; };
  std::vector<int32_t> tokens[2];
  for (int on = 0; on < 2; ++on) {
    EngineInternals::of(*engine).sample_from_top_k = on == 1;
    auto s = engine->new_session();
    s->append(engine->tokenize("Once upon a time", true, false));
    const GenerateOptions* calls[] = {&first, &second};
    for (const GenerateOptions* g : calls)
      s->generate(*g, [&](int32_t t, std::string_view) {
        if (t >= 0) tokens[on].push_back(t);
        return true;
      });
  }
  EXPECT_EQ(n_logprobs, 2 * second.max_tokens);  // every token of the second call, both runs
  ASSERT_EQ(tokens[0].size(), size_t(first.max_tokens + second.max_tokens));
  EXPECT_EQ(tokens[1], tokens[0]);
}

// A callback may read the logits the next token will be drawn from while the row is on the device.
TEST(DeviceTopKSampling, LastLogitsInsideTheCallbackAreTheFullRow) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);
  GenerateOptions g = cases()[0].options;
  std::vector<std::vector<float>> seen[2];
  for (int on = 0; on < 2; ++on) {
    EngineInternals::of(*engine).sample_from_top_k = on == 1;
    auto s = engine->new_session();
    s->append(engine->tokenize("Once upon a time", true, false));
    s->generate(g, [&](int32_t t, std::string_view) {
      if (t >= 0) seen[on].emplace_back(s->last_logits().begin(), s->last_logits().end());
      return true;
    });
  }
  ASSERT_EQ(seen[0].size(), seen[1].size());
  for (size_t i = 0; i < seen[0].size(); ++i) {
    ASSERT_FALSE(seen[1][i].empty()) << i;
    ASSERT_TRUE(bitwise_equal(seen[0][i], seen[1][i])) << i;
  }
}

}  // namespace
}  // namespace cera
