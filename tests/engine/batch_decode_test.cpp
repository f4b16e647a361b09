// Engine::decode_batch / decode_batch_greedy: one step over several sessions gives each exactly what
// appending its token alone would (the CPU computes every row with the same kernels), and bad calls
// are refused with clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cera/engine.h"
#include "engine/engine_impl.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"
#include "support/logits.h"

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

// Engine::generate_greedy_batch: the CPU backend feeds the argmax back too (Backend's default
// queue), so the pipelined path runs here. Against decode_batch_greedy step by step: the same tokens,
// the same state afterwards (bit for bit), and the same prefix-cache checkpoint when a session
// crosses the 128-token checkpoint interval mid-run (the checkpoint copy must land after the step
// it belongs to, not after the one launched behind it).
std::vector<int32_t> synthetic_prompt(int i, int len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int j = 0; j < len; ++j) p[size_t(j)] = (j * 13 + i * 7) % 200 + 1;
  return p;
}

TEST(GenerateGreedyBatch, SameTokensAndStateAsStepByStep) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "Q4_0");
  const int n = 3, steps = 30;
  auto a = load(path, n + 1), b = load(path, n + 1);
  std::vector<std::unique_ptr<Session>> sa, sb;
  for (int i = 0; i < n; ++i) {
    const auto prompt = synthetic_prompt(i, 110 + 3 * i);
    sa.push_back(a->new_session());
    sa.back()->append(prompt);
    sb.push_back(b->new_session());
    sb.back()->append(prompt);
  }
  auto ba = raw(sa), bb = raw(sb);
  const std::vector<int32_t> first = {7, 8, 9};
  std::vector<int32_t> chosen_a(size_t(n) * steps), chosen_b(size_t(n) * steps);
  a->generate_greedy_batch(ba, first, steps, chosen_a);
  std::vector<int32_t> fed = first;
  for (int k = 0; k < steps; ++k) {
    b->decode_batch_greedy(bb, fed, std::span<int32_t>(chosen_b).subspan(size_t(k) * n, n));
    fed.assign(chosen_b.begin() + long(k) * n, chosen_b.begin() + long(k + 1) * n);
  }
  EXPECT_EQ(chosen_a, chosen_b);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(sa[size_t(i)]->position(), 110 + 3 * i + steps);
    EXPECT_EQ(sa[size_t(i)]->position(), sb[size_t(i)]->position());
  }
  // One more step with logits: the states are identical.
  a->decode_batch(ba, fed);
  b->decode_batch(bb, fed);
  for (int i = 0; i < n; ++i) {
    const auto la = ba[size_t(i)]->last_logits(), lb = bb[size_t(i)]->last_logits();
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "session " << i;
  }
  // Session 0 crossed position 128 during the run: a new prompt that shares its first 140 tokens
  // resumes from that checkpoint in both engines and sees the same logits.
  std::vector<int32_t> history = synthetic_prompt(0, 110);
  history.push_back(first[0]);
  for (int k = 0; history.size() < 140; ++k) history.push_back(chosen_a[size_t(k) * n]);
  auto ra = a->new_session(), rb = b->new_session();
  ra->append(history);
  rb->append(history);
  EXPECT_GE(ra->reused_tokens(), 128);
  EXPECT_EQ(ra->reused_tokens(), rb->reused_tokens());
  const auto la = ra->last_logits(), lb = rb->last_logits();
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(GenerateGreedyBatch, StopsCleanlyWhenTheContextFills) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "Q4_0");
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 64;
  o.n_seq_max = 2;
  auto e = Engine::load(o);
  auto s = e->new_session();
  s->append(synthetic_prompt(1, 50));
  std::vector<Session*> batch = {s.get()};
  const int32_t first = 5;
  std::vector<int32_t> chosen(30, -1);
  try {
    e->generate_greedy_batch(batch, {&first, 1}, 30, chosen);
    ADD_FAILURE() << "no error when the context filled";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::OutOfRange);
  }
  EXPECT_EQ(s->position(), 64);  // every step that fit ran, and the session counts them
  for (int k = 0; k < 14; ++k) EXPECT_GE(chosen[size_t(k)], 0) << "step " << k;
  // The session is still usable.
  s->reset();
  s->append(synthetic_prompt(2, 10));
  EXPECT_EQ(s->position(), 10);
  std::vector<int32_t> out(2);
  EXPECT_THROW(e->generate_greedy_batch(batch, {&first, 1}, 3, out), Error);  // out too small
  e->generate_greedy_batch(batch, {&first, 1}, 0, std::span<int32_t>());
  EXPECT_EQ(s->position(), 10);
}

// A step's logits buffer holds at most max(512, n_seq_max) rows, however large the prefill step:
// an all_logits append longer than that is cut into pieces and gives the same rows as an engine
// whose steps are small anyway. The device-dependent defaults resolve on the CPU to 512 / 128.
TEST(EngineDefaults, AllLogitsBeyondTheLogitsRowsAndCpuDefaults) {
  const std::string path = test::fixture_gguf("lfm2-tiny", "Q4_0");
  EngineOptions big;
  big.model_path = path;
  big.n_ctx = 1024;
  big.n_batch = 1024;
  big.prefix_cache_mib = 0;  // no checkpoint cuts: one 700-token step where it fits
  EngineOptions small = big;
  small.n_batch = 128;
  auto a = Engine::load(big), b = Engine::load(small);
  EXPECT_EQ(EngineInternals::of(*a).model->max_output_rows(), 512);
  const auto prompt = synthetic_prompt(3, 700);
  auto sa = a->new_session(), sb = b->new_session();
  const uint64_t steps_before = EngineInternals::of(*a).step_count;
  sa->append(prompt, /*all_logits=*/true);
  EXPECT_EQ(EngineInternals::of(*a).step_count - steps_before, 2u) << "700 logits rows: steps of 512 and 188";
  sb->append(prompt, true);
  const auto la = sa->logits(), lb = sb->logits();
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_EQ(la.size(), size_t(700) * size_t(a->info().n_vocab));
  test::RelRms diff;
  diff.add(la, lb);
  EXPECT_LE(diff.value(), 1e-5) << "the same rows, whatever the step size";
  EngineOptions d;
  d.model_path = path;
  auto c = Engine::load(d);
  EXPECT_EQ(c->options().checkpoint_interval, kDefaultCheckpointCpu);
}

}  // namespace
}  // namespace cera
