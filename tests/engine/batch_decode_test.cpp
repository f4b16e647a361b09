// Engine::decode_batch / decode_batch_greedy: one step over several sessions gives each exactly what
// appending its token alone would (the CPU computes every row with the same kernels), and bad calls
// are refused with clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cera/engine.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"

namespace cera {
namespace {

std::unique_ptr<Engine> load(const std::string& path, int32_t n_seq) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 256;
  o.n_seq_max = n_seq;
  return Engine::load(o);
}

// Sessions with prompts of different lengths (prefix i of each fixture prompt, dropping i % 3).
std::vector<std::unique_ptr<Session>> start(Engine& e, int n, const std::vector<test::FixturePrompt>& prompts) {
  std::vector<std::unique_ptr<Session>> s;
  for (int i = 0; i < n; ++i) {
    s.push_back(e.new_session());
    const auto& ids = prompts[size_t(i) % prompts.size()].ids;
    s.back()->append(std::span<const int32_t>(ids).first(ids.size() - size_t(i % 3)));
  }
  return s;
}

std::vector<Session*> raw(const std::vector<std::unique_ptr<Session>>& s) {
  std::vector<Session*> r;
  for (const auto& x : s) r.push_back(x.get());
  return r;
}

TEST(BatchDecode, EachSessionGetsWhatItsOwnAppendGives) {
  for (const char* type : {"Q4_0", "BF16"}) {
    const std::string path = test::fixture_gguf("lfm2-tiny", type);
    const auto prompts = test::load_fixture_prompts("lfm2-tiny");
    const int n = 5;
    auto batched = load(path, n), single = load(path, 1);
    auto sessions = start(*batched, n, prompts);
    auto batch = raw(sessions);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int step = 0; step < 4; ++step) {
      for (int i = 0; i < n; ++i) tokens[size_t(i)] = (step * 31 + i * 7) % 200 + 1;
      batched->decode_batch(batch, tokens);
    }
    for (int i = 0; i < n; ++i) {
      auto s = single->new_session();
      const auto& ids = prompts[size_t(i) % prompts.size()].ids;
      s->append(std::span<const int32_t>(ids).first(ids.size() - size_t(i % 3)));
      for (int step = 0; step < 4; ++step) {
        const int32_t t = (step * 31 + i * 7) % 200 + 1;
        s->append({&t, 1});
      }
      const auto a = batch[size_t(i)]->last_logits(), b = s->last_logits();
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << type << " session " << i;
      EXPECT_EQ(batch[size_t(i)]->position(), s->position());
    }
  }
}

TEST(BatchDecode, GreedyReturnsTheArgmaxOfTheSameStep) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "Q4_K_M");
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  const int n = 4;
  auto a = load(path, n), b = load(path, n);
  auto sa = start(*a, n, prompts), sb = start(*b, n, prompts);
  auto ba = raw(sa), bb = raw(sb);
  std::vector<int32_t> ta(static_cast<size_t>(n), 1), tb(static_cast<size_t>(n), 1), next(static_cast<size_t>(n));
  for (int step = 0; step < 8; ++step) {
    a->decode_batch(ba, ta);
    b->decode_batch_greedy(bb, tb, next);
    for (int i = 0; i < n; ++i) {
      const auto l = ba[size_t(i)]->last_logits();
      const int32_t argmax = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
      EXPECT_EQ(next[size_t(i)], argmax) << "step " << step << " session " << i;
      EXPECT_TRUE(bb[size_t(i)]->last_logits().empty());
      ta[size_t(i)] = argmax;
    }
    tb = next;
  }
}

TEST(BatchDecode, RefusesBadCalls) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "Q4_0");
  auto e = load(path, 3), other = load(path, 1);
  auto s1 = e->new_session(), s2 = e->new_session(), foreign = other->new_session();
  const int32_t t = 5;
  s1->append({&t, 1});
  s2->append({&t, 1});
  std::vector<int32_t> two = {5, 6}, one = {5}, bad = {5, -1};
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& err) {
      return err.code();
    }
    return ErrorCode::Internal;  // no error: fails the expectations below
  };
  std::vector<Session*> none, pair = {s1.get(), s2.get()}, twice = {s1.get(), s1.get()}, mixed = {s1.get(), foreign.get()};
  std::vector<int32_t> next(2);
  EXPECT_EQ(code([&] { e->decode_batch(none, {}); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { e->decode_batch(pair, one); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { e->decode_batch(twice, two); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { e->decode_batch(mixed, two); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { e->decode_batch(pair, bad); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code([&] { e->decode_batch_greedy(pair, two, std::span<int32_t>(next).first(1)); }),
            ErrorCode::InvalidArgument);
  // Nothing above changed the sessions.
  EXPECT_EQ(s1->position(), 1);
  EXPECT_EQ(s2->position(), 1);
}

}  // namespace
}  // namespace cera
