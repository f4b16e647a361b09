// Session behaviour through the public API: prefix-cache hits give bit-identical logits, forks are
// independent, cancellation stops long work.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "cera/engine.h"
#include "engine/engine_impl.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"

namespace cera {
namespace {

std::unique_ptr<Engine> load(const std::string& type, int32_t cache_mib = 64, int32_t n_seq = 2, int32_t n_ctx = 1024) {
  EngineOptions o;
  o.model_path = test::fixture_gguf("lfm2-tiny", type);
  o.n_ctx = n_ctx;
  o.n_seq_max = n_seq;
  o.prefix_cache_mib = cache_mib;
  return Engine::load(o);
}

// A long prompt from the fixture prompts, plus a variant sharing its first `shared` tokens.
std::vector<int32_t> long_prompt(size_t n, int32_t salt = 0) {
  std::vector<int32_t> out;
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  while (out.size() < n)
    for (const auto& p : prompts)
      for (int32_t id : p.ids) out.push_back((id + salt) % 1024);
  out.resize(n);
  return out;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PrefixCacheHit : public ::testing::TestWithParam<const char*> {};

TEST_P(PrefixCacheHit, LogitsAreBitIdenticalToFullRecomputation) {
  const auto first = long_prompt(300);
  auto second = long_prompt(330);
  for (size_t i = 280; i < second.size(); ++i) second[i] = (second[i] + 7) % 1024;  // diverges at 280

  auto engine = load(GetParam());
  {
    auto s = engine->new_session();
    s->append(first);
    EXPECT_EQ(s->reused_tokens(), 0);
  }
  auto hit = engine->new_session();
  hit->append(second);
  EXPECT_EQ(hit->reused_tokens(), 256) << "resumes from the last checkpoint (every 128 tokens) before 280";

  auto fresh_engine = load(GetParam());
  auto full = fresh_engine->new_session();
  full->append(second);
  EXPECT_EQ(full->reused_tokens(), 0);
  EXPECT_TRUE(bitwise_equal(hit->last_logits(), full->last_logits()));

  // And the continuation stays identical token by token.
  for (int step = 0; step < 8; ++step) {
    const int32_t next = int32_t(std::max_element(full->last_logits().begin(), full->last_logits().end()) -
                                 full->last_logits().begin());
    hit->append({&next, 1});
    full->append({&next, 1});
    ASSERT_TRUE(bitwise_equal(hit->last_logits(), full->last_logits())) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, PrefixCacheHit, ::testing::Values("BF16", "Q4_0", "Q4_K_M"));

TEST(PrefixCache, IdenticalPromptStillEvaluatesItsLastToken) {
  auto engine = load("BF16");
  const auto prompt = long_prompt(256);
  auto a = engine->new_session();
  a->append(prompt);
  auto b = engine->new_session();
  b->append(prompt);
  EXPECT_EQ(b->reused_tokens(), 128);  // the checkpoint at 256 cannot be used: token 255 must run
  EXPECT_TRUE(bitwise_equal(a->last_logits(), b->last_logits()));
}

TEST(PrefixCache, OffMeansNoReuse) {
  auto engine = load("BF16", /*cache_mib=*/0);
  const auto prompt = long_prompt(300);
  engine->new_session()->append(prompt);
  auto b = engine->new_session();
  b->append(prompt);
  EXPECT_EQ(b->reused_tokens(), 0);
}

TEST(Session, ForkedSessionsAreIndependent) {
  auto engine = load("Q8_0", 0, /*n_seq=*/3);
  const auto prompt = long_prompt(45);  // ends inside a KV block: the fork shares a partial block
  auto parent = engine->new_session();
  parent->append(prompt);
  auto child = parent->fork();
  EXPECT_EQ(child->position(), parent->position());
  EXPECT_TRUE(bitwise_equal(child->last_logits(), parent->last_logits()));

  const int32_t a = 5, b = 9;
  parent->append({&a, 1});
  child->append({&b, 1});  // copy-on-write of the shared tail block
  auto reference = engine->new_session();
  std::vector<int32_t> with_b = prompt;
  with_b.push_back(b);
  reference->append(with_b);
  EXPECT_TRUE(bitwise_equal(child->last_logits(), reference->last_logits()));
  reference.reset();
  std::vector<int32_t> with_a = prompt;
  with_a.push_back(a);
  auto reference_a = engine->new_session();
  reference_a->append(with_a);
  EXPECT_TRUE(bitwise_equal(parent->last_logits(), reference_a->last_logits()));
}

// An append leaves its logits where the step wrote them until someone reads them: steps of other
// sessions read them first, so nothing is lost; a session dropped with unread logits is forgotten.
TEST(Session, UnreadLogitsSurviveOtherSessionsSteps) {
  auto engine = load("Q8_0", 0, /*n_seq=*/3);
  auto logits_of = [&](const std::vector<int32_t>& tokens) {
    auto s = engine->new_session();
    s->append(tokens);
    const auto row = s->last_logits();
    return std::vector<float>(row.begin(), row.end());
  };
  const auto prompt = long_prompt(20);
  auto a = engine->new_session();
  a->append(prompt);  // not read
  {
    auto b = engine->new_session();
    b->append(long_prompt(20, 7));
    const int32_t t = 11;
    b->append({&t, 1});  // b's not read either, and b goes away with them
  }
  const auto want = logits_of(prompt);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(bitwise_equal(a->last_logits(), want));

  std::vector<int32_t> longer = prompt;
  for (const int32_t t : {3, 4, 5}) {  // a decode loop that reads nothing in between
    a->append({&t, 1});
    longer.push_back(t);
  }
  const auto want_longer = logits_of(longer);  // another session's step first, then a's read
  EXPECT_TRUE(bitwise_equal(a->last_logits(), want_longer));
  EXPECT_EQ(a->position(), int32_t(longer.size()));
}

// A one-row append's logits may live in one of the backend's host slots (Backend::host_logits),
// where the LM head wrote them. The row logits() returned stays valid while other sessions step: a
// slot is held until its session's logits are replaced, and a session finding none free reads its
// row from the backend's logits as before.
TEST(Session, HostLogitsSlotsStayWithTheirSession) {
  auto engine = load("Q8_0", 0, /*n_seq=*/4);
  auto& impl = EngineInternals::of(*engine);
  const std::vector<int32_t> prompts[3] = {long_prompt(20), long_prompt(20, 7), long_prompt(20, 13)};
  std::unique_ptr<Session> sessions[3];
  std::span<const float> rows[3];
  std::vector<float> copies[3];  // taken at once, before any other step
  for (int i = 0; i < 3; ++i) {
    sessions[i] = engine->new_session();
    sessions[i]->append(prompts[i]);
    rows[i] = sessions[i]->last_logits();
    copies[i].assign(rows[i].begin(), rows[i].end());
  }
  // The first two took the two slots; the third found none free.
  const float* slot0 = impl.backend->host_logits(0, 1);
  const float* slot1 = impl.backend->host_logits(1, 1);
  EXPECT_EQ(rows[0].data(), slot0);
  EXPECT_EQ(rows[1].data(), slot1);
  EXPECT_NE(rows[2].data(), slot0);
  EXPECT_NE(rows[2].data(), slot1);
  // Steps of another session: every row is still its own.
  auto other = engine->new_session();
  other->append(prompts[0]);
  const int32_t t = 5;
  other->append({&t, 1});
  EXPECT_FALSE(bitwise_equal(other->last_logits(), copies[0]));  // it wrote a different row
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(rows[i], copies[i])) << i;
  // A session's next append releases its slot and takes the first free one; dropping it frees it.
  other.reset();
  sessions[0]->append({&t, 1});
  EXPECT_EQ(sessions[0]->last_logits().data(), slot0);
  EXPECT_TRUE(bitwise_equal(rows[1], copies[1]));
  sessions[1].reset();
  auto d = engine->new_session();
  d->append(prompts[1]);
  EXPECT_EQ(d->last_logits().data(), slot1);
  EXPECT_TRUE(bitwise_equal(d->last_logits(), copies[1]));  // the same prompt, the same logits
}

TEST(Session, CancelFromAnotherThreadStopsALongPrefill) {
  auto engine = load("BF16", 0, 1, /*n_ctx=*/16384);
  auto session = engine->new_session();
  const auto prompt = long_prompt(16000);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    session->cancel();
  });
  try {
    session->append(prompt);
    ADD_FAILURE() << "append finished before it was cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Cancelled);
  }
  canceller.join();
  EXPECT_LT(session->position(), 16000);
}

TEST(Session, CancelStopsGeneration) {
  auto engine = load("BF16", 0, 1);
  auto session = engine->new_session();
  session->append(long_prompt(10));
  GenerateOptions g;
  g.max_tokens = 100;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  int n = 0;
  const FinishReason r = session->generate(g, [&](int32_t token, std::string_view) {
    if (token >= 0 && ++n == 3) session->cancel();
    return true;
  });
  EXPECT_EQ(r, FinishReason::Cancelled);
  EXPECT_EQ(n, 3);
}

TEST(Session, ContextOverflowIsAClearError) {
  auto engine = load("BF16", 0, 1, /*n_ctx=*/64);
  auto session = engine->new_session();
  try {
    session->append(long_prompt(65));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfRange);
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cera

namespace cera {
namespace {

// A stop string that spans a token boundary ends generation, and no byte of it reaches the stream.
TEST(Session, StopStringSplitAcrossTokensIsNeverEmitted) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);
  GenerateOptions g;
  g.max_tokens = 24;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  const auto prompt = engine->tokenize("The wise man", true, false);

  std::vector<std::string> pieces;
  {
    auto s = engine->new_session();
    s->append(prompt);
    s->generate(g, [&](int32_t token, std::string_view text) {
      if (token >= 0) pieces.emplace_back(text);
      return true;
    });
  }
  // Find two consecutive pieces that each have at least 2 bytes; the stop takes the end of one and
  // the start of the next.
  size_t k = 1;
  while (k + 1 < pieces.size() && (pieces[k].size() < 2 || pieces[k + 1].size() < 2)) ++k;
  ASSERT_LT(k + 1, pieces.size()) << "the continuation has no two multi-byte pieces in a row";
  const std::string stop = pieces[k].substr(pieces[k].size() - 2) + pieces[k + 1].substr(0, 2);
  std::string before;
  for (size_t i = 0; i < k; ++i) before += pieces[i];
  before += pieces[k].substr(0, pieces[k].size() - 2);
  ASSERT_EQ(before.find(stop), std::string::npos) << "pick a stop that does not occur earlier";

  g.stop = {stop};
  auto s = engine->new_session();
  s->append(prompt);
  std::string streamed;
  const FinishReason r = s->generate(g, [&](int32_t, std::string_view text) {
    streamed += text;
    return true;
  });
  EXPECT_EQ(r, FinishReason::StopString);
  EXPECT_EQ(streamed, before);
}

// The same seed gives the same text; sampling parameters reach the sampler.
TEST(Session, FixedSeedReproducesTheSameText) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);
  auto run = [&](uint64_t seed) {
    GenerateOptions g;
    g.max_tokens = 20;
    g.sampling.temperature = 1.0f;
    g.sampling.seed = seed;
    auto s = engine->new_session();
    s->append(engine->tokenize("Once", true, false));
    std::string text;
    s->generate(g, [&](int32_t, std::string_view t) {
      text += t;
      return true;
    });
    return text;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace cera

#include "cera/structured_output.h"
#include <nlohmann/json.hpp>

namespace cera {
namespace {

// With a JSON schema, every sampled generation of the real default model is valid JSON of that shape.
TEST(Session, JsonSchemaConstrainsGeneration) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);
  GenerateOptions g;
  g.max_tokens = 200;
  g.sampling.temperature = 1.0f;
  g.grammar = json_schema_grammar_gbnf(
      R"({"type":"object","properties":{"answer":{"enum":["yes","no"]},"sure":{"type":"boolean"}},"required":["answer","sure"]})");
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    g.sampling.seed = seed;
    auto s = engine->new_session();
    s->append(engine->tokenize("Answer in JSON:", true, false));
    std::string text;
    const FinishReason r = s->generate(g, [&](int32_t, std::string_view t) {
      text += t;
      return true;
    });
    EXPECT_EQ(r, FinishReason::EndOfGeneration) << "seed " << seed << ": " << text;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << "seed " << seed << ": " << text;
    EXPECT_TRUE(j.at("answer") == "yes" || j.at("answer") == "no") << text;
    EXPECT_TRUE(j.at("sure").is_boolean()) << text;
  }
}

TEST(Session, BadGrammarIsAClearError) {
  EXPECT_THROW(validate_grammar("root ::= undefined-rule"), Error);
  EXPECT_THROW(json_schema_grammar_gbnf(R"({"type":"string","pattern":"a+"})"), Error);
}

}  // namespace
}  // namespace cera

namespace cera {
namespace {

// With context_shift, generation goes past the context size; without, it stops there.
TEST(Session, ContextShiftKeepsGenerating) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  o.n_ctx = 64;
  auto engine = Engine::load(o);
  GenerateOptions g;
  g.max_tokens = 150;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  auto s = engine->new_session();
  const auto prompt = engine->tokenize("The wise man", true, false);
  s->append(prompt);
  int n = 0;
  EXPECT_EQ(s->generate(g, [&](int32_t t, std::string_view) { n += t >= 0; return true; }), FinishReason::Length);
  EXPECT_LT(n, 64) << "without a shift the context size ends it";
  s.reset();  // frees the engine's only sequence slot

  g.context_shift = true;
  g.n_keep = int32_t(prompt.size());
  auto shifted = engine->new_session();  // a second live session would be a clear error (one slot)
  shifted->append(prompt);
  n = 0;
  std::string text;
  EXPECT_EQ(shifted->generate(g, [&](int32_t t, std::string_view piece) {
              n += t >= 0;
              text += piece;
              return true;
            }),
            FinishReason::Length);
  EXPECT_EQ(n, 150);
  EXPECT_LE(shifted->position(), 64);
  for (float v : shifted->last_logits()) ASSERT_TRUE(std::isfinite(v));
  // Still English-like text after the shift, not noise: mostly letters and spaces.
  size_t letters = 0;
  for (char c : text) letters += std::isalpha(static_cast<unsigned char>(c)) || c == ' ';
  EXPECT_GT(double(letters) / double(text.size()), 0.8) << text;
}

}  // namespace
}  // namespace cera

namespace cera {
namespace {

TEST(Session, TooManySessionsIsAClearErrorAndHarmsNoOtherSession) {
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  auto engine = Engine::load(o);  // one sequence slot
  auto first = engine->new_session();
  first->append(engine->tokenize("Hello", true, false));
  EXPECT_THROW(engine->new_session(), Error);
  EXPECT_EQ(first->position(), int32_t(engine->tokenize("Hello", true, false).size()));
  const int32_t t = 5;
  first->append({&t, 1});  // still usable
}

}  // namespace
}  // namespace cera

namespace cera {
namespace {

TEST(Session, AppendTextAddsBosOnlyAtTheStart) {
  EngineOptions o;
  o.model_path = test::fixture_gguf("lfm2-tiny", "BF16");
  o.n_seq_max = 2;
  auto engine = Engine::load(o);
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  auto s = engine->new_session();
  s->append_text("The capital of France is");
  EXPECT_EQ(s->position(), int32_t(prompts[0].ids.size()));  // the fixture ids include BOS
  auto reference = engine->new_session();
  reference->append(prompts[0].ids);
  EXPECT_TRUE(bitwise_equal(s->last_logits(), reference->last_logits()));
  const int32_t before = s->position();
  s->append_text(" Paris");
  EXPECT_EQ(s->position(), before + int32_t(engine->tokenize(" Paris", false, false).size()));
  EXPECT_THROW(s->append_text(""), Error);
}

TEST(Session, LogprobsOfGreedyTokensAreTheLogSoftmaxOfTheLogits) {
  EngineOptions o;
  o.model_path = test::fixture_gguf("lfm2-tiny", "BF16");
  auto engine = Engine::load(o);
  auto s = engine->new_session();
  s->append(test::load_fixture_prompts("lfm2-tiny")[0].ids);
  std::vector<float> first_logits(s->last_logits().begin(), s->last_logits().end());
  GenerateOptions g;
  g.max_tokens = 3;
  g.sampling.temperature = 0;
  g.sampling.n_probs = 5;
  std::vector<SampledToken> seen;
  g.on_logprobs = [&](const SampledToken& t) { seen.push_back(t); };
  s->generate(g, [](int32_t, std::string_view) { return true; });
  ASSERT_EQ(seen.size(), 3u);
  ASSERT_EQ(seen[0].top.size(), 5u);
  EXPECT_EQ(seen[0].top[0].id, seen[0].id) << "greedy takes the most likely token";
  double max = *std::max_element(first_logits.begin(), first_logits.end()), sum = 0;
  for (float l : first_logits) sum += std::exp(double(l) - max);
  const double expected = double(first_logits[size_t(seen[0].id)]) - max - std::log(sum);
  EXPECT_NEAR(seen[0].logprob, expected, 1e-4);
  for (size_t i = 1; i < seen[0].top.size(); ++i) EXPECT_LE(seen[0].top[i].logprob, seen[0].top[i - 1].logprob);
}

}  // namespace
}  // namespace cera

#include "format/gguf.h"

namespace cera {
namespace {

// append_chat renders the model's template (the fixture's own rendering and ids), and a second turn
// evaluates only what the conversation added.
TEST(Session, AppendChatRendersTheTemplateAndFeedsOnlyTheNewTurn) {
  EngineOptions o;
  o.model_path = test::fixture_gguf("lfm2-tiny", "BF16");
  o.n_seq_max = 2;
  auto engine = Engine::load(o);
  const auto chat = nlohmann::json::parse(test::read_text_file(test::fixture_path("models/lfm2-tiny/ref/prompts.json")))["chat"];
  const auto& first = chat[0];
  auto s = engine->new_session();
  s->append_chat(first["messages"].dump());
  const auto ids = first["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(s->position(), int32_t(ids.size()));
  auto reference = engine->new_session();
  reference->append(ids);
  EXPECT_TRUE(bitwise_equal(s->last_logits(), reference->last_logits())) << "the fixture's chat ids";

  GenerateOptions g;
  g.max_tokens = 6;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  std::string reply;
  s->generate(g, [&](int32_t, std::string_view t) { reply += t; return true; });
  const int32_t after_reply = s->position();

  nlohmann::json messages = first["messages"];
  messages.push_back({{"role", "assistant"}, {"content", reply}});
  messages.push_back({{"role", "user"}, {"content", "And then?"}});
  s->append_chat(messages.dump());
  EXPECT_GT(s->position(), after_reply) << "the new turn was appended";
  EXPECT_LT(s->position() - after_reply, 20) << "only the new turn was evaluated, not the whole conversation";

  // A rewritten history starts over.
  nlohmann::json rewritten = nlohmann::json::array({{{"role", "user"}, {"content", "Something else"}}});
  s->append_chat(rewritten.dump());
  EXPECT_EQ(s->position(), int32_t(engine->tokenize(std::string("<|startoftext|><|im_start|>user\nSomething else<|im_end|>\n<|im_start|>assistant\n"), false, true).size()));
  EXPECT_THROW(s->append_chat("not json"), Error);
}

}  // namespace
}  // namespace cera
