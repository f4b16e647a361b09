// Every fixture GGUF on the CUDA backend, through the public API: the fixture criteria for both the
// prefill path (tensor-core GEMM, 16-bit activations) and the decode path (F32 matvec, CUDA graphs),
// greedy continuations against the CPU backend, graph replay against eager launches, and batched
// decode against one sequence at a time. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cera/engine.h"
#include "cuda_test_support.h"
#include "support/fixture_parity.h"

namespace cera {
namespace {

using test::FixtureFile;

// Prompts for a model: the fixture's, or for the committed default model a few of its own texts.
std::vector<std::vector<int32_t>> prompts_for(const std::string& model, Engine& engine) {
  std::vector<std::vector<int32_t>> out;
  if (model == "default") {
    for (const char* text : {"Once upon a time, there was a little", "The sun rose over the hills and",
                             "Tom wanted to play with his friends, but"})
      out.push_back(engine.tokenize(text));
  } else {
    for (const auto& p : test::load_fixture_prompts(model)) out.push_back(p.ids);
  }
  return out;
}

std::string model_path(const std::string& model, const std::string& type) {
  return model == "default" ? test::source_path("models/default.gguf") : test::fixture_gguf(model, type);
}

std::unique_ptr<Engine> load(const std::string& path, const std::string& device, int32_t n_seq = 1) {
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 512;
  o.device = device;
  o.n_seq_max = n_seq;
  return Engine::load(o);
}

// The same logits, token by token (the decode path).
std::vector<float> decode_logits(Engine& engine, const std::vector<test::FixturePrompt>& prompts) {
  std::vector<float> out;
  for (const auto& p : prompts) {
    auto session = engine.new_session();
    for (int32_t id : p.ids) {
      session->append({&id, 1});
      out.insert(out.end(), session->last_logits().begin(), session->last_logits().end());
    }
  }
  return out;
}

// The fixture criteria (../shared/fixtures/README.md) for a reduced-precision backend: float files
// within 1.1 x llama.cpp's BF16 row of HF; quantized files as on the CPU (tests/model).
void expect_fixture_criteria(const FixtureFile& c, const std::vector<float>& ours, const char* path_name) {
  const auto prompts = test::load_fixture_prompts(c.model);
  const auto hf = test::reference_logits(c.model, "hf.safetensors", prompts.size());
  const auto lc = test::reference_logits(c.model, std::string("llamacpp-") + c.type + ".safetensors", prompts.size());
  ASSERT_EQ(ours.size(), hf.size());
  const double vs_hf = test::rel_rms(ours, hf), vs_lc = test::rel_rms(ours, lc);
  std::printf("[ cuda %-7s %-10s %-6s ] rel_rms vs HF %.3e (llama.cpp %.3e), vs llama.cpp %.3e\n", path_name,
              c.model, c.type, vs_hf, c.llamacpp_rel_rms, vs_lc);
  if (c.is_float) {
    EXPECT_LE(vs_hf, 1.1 * test::llamacpp_bf16_rel_rms(c.model)) << path_name;
    return;
  }
  EXPECT_LE(vs_hf, 1.1 * c.llamacpp_rel_rms + 0.002) << path_name;
  if (std::string(c.type) != "Q8_0") {
    EXPECT_LE(vs_lc, 0.5 * c.llamacpp_rel_rms) << path_name;
    return;
  }
  // Q8_0: the documented substitute bound of tests/model/fixture_parity_test.cpp — our arithmetic
  // adds no more error than llama.cpp's to the file's own weights (computed exactly on the CPU).
  // Unlike the CPU path, CUDA does not round activations to 8 bits at all (f16 in prefill, f32 in
  // decode: measured 2e-3 and 1e-6 from exact), so its distance to llama.cpp is simply llama.cpp's
  // own rounding error (4.4e-2 of 6.25e-2 on lfm2) and the CPU's extra "0.7 x row" bound does not
  // apply; the bound below is the one that catches a misread block format, and it holds with room.
  auto exact_engine = load(test::dequantized_f32_copy(test::fixture_gguf(c.model, c.type)), "cpu");
  const auto exact = test::prompt_logits(*exact_engine, prompts);
  const double ours_err = test::rel_rms(ours, exact), lc_err = test::rel_rms(lc, exact);
  std::printf("[ cuda %-7s %-10s %-6s ] vs exact weights: ours %.3e, llama.cpp %.3e\n", path_name, c.model, c.type,
              ours_err, lc_err);
  EXPECT_LE(ours_err, 1.05 * lc_err) << path_name;
}

class CudaFixtureParity : public ::testing::TestWithParam<FixtureFile> {};

TEST_P(CudaFixtureParity, PrefillLogitsMeetFixtureCriteria) {
  CERA_REQUIRE_CUDA();
  const FixtureFile c = GetParam();
  auto engine = load(test::fixture_gguf(c.model, c.type), "cuda");
  expect_fixture_criteria(c, test::prompt_logits(*engine, test::load_fixture_prompts(c.model)), "prefill");
}

TEST_P(CudaFixtureParity, DecodeLogitsMeetFixtureCriteria) {
  CERA_REQUIRE_CUDA();
  const FixtureFile c = GetParam();
  auto engine = load(test::fixture_gguf(c.model, c.type), "cuda");
  expect_fixture_criteria(c, decode_logits(*engine, test::load_fixture_prompts(c.model)), "decode");
}

INSTANTIATE_TEST_SUITE_P(AllFixtureFiles, CudaFixtureParity, ::testing::ValuesIn(test::kFixtureFiles),
                         [](const auto& info) { return test::fixture_case_name(info.param); });

// Decode with the Q4_0 products' int8 hand-offs (MatvecFusion::Int8X) in every launch, which on the
// 1B shapes they take by default and on this small model only under CERA_CUDA_INT8_HANDOFF=all:
// the fixture criteria hold, and the logits are not those without the hand-offs (rows rounded per 8
// elements instead of per 32), so the path did run.
TEST(CudaInt8Handoff, Lfm2TinyQ4_0DecodeMeetsFixtureCriteria) {
  CERA_REQUIRE_CUDA();
  const FixtureFile* c = nullptr;
  for (const FixtureFile& f : test::kFixtureFiles)
    if (std::string(f.model) == "lfm2-tiny" && std::string(f.type) == "Q4_0") c = &f;
  ASSERT_NE(c, nullptr);
  const auto prompts = test::load_fixture_prompts(c->model);
  auto logits = [&](const char* mode) {
    const test::ScopedEnv env("CERA_CUDA_INT8_HANDOFF", mode);
    auto engine = load(test::fixture_gguf(c->model, c->type), "cuda");
    return decode_logits(*engine, prompts);
  };
  const std::vector<float> with = logits("all"), without = logits("0");
  expect_fixture_criteria(*c, with, "decode, int8 hand-offs");
  EXPECT_NE(with, without);
}

double rms(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

int32_t argmax(std::span<const float> v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// CUDA's greedy continuation equals the CPU's; a divergence is accepted only at a near tie: where
// the CPU's top-2 margin is within 5x the reduced-precision error the criteria allow
// (1.1 x llama.cpp's BF16 row, relative to the logits' rms). For quantized files the CPU reference
// computes the file's weights dequantized to F32: the CPU's quantized path rounds activations to
// 8 bits as llama.cpp does (0.1 x rms away on Q4_K_M), CUDA does not, so only exact weights make a
// reference whose own error is below the tolerance. The Q4_0/Q8_0/Q4_K decode products' int8 activations
// (quant_kernels.h) round like the CPU's quantized path, so they are off here: this test checks the
// arithmetic against exact weights; the int8 path is checked against its exact reference
// (MatvecInt8.*) and, end to end, by the fixture criteria above.
// "default" is the committed models/default.gguf.
class CudaGreedy : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(CudaGreedy, ContinuationMatchesCpu) {
  CERA_REQUIRE_CUDA();
  const std::string model = GetParam().first, type = GetParam().second;
  const std::string path = model_path(model, type);
  const bool is_float = type == "BF16" || type == "F16" || type == "F32";
  test::MatvecInt8Scope int8_off(false);
  auto gpu = load(path, "cuda");
  auto cpu = load(is_float ? path : test::dequantized_f32_copy(path), "cpu");
  const auto prompts = prompts_for(model, *cpu);
  const double tol = 5 * 1.1 * test::llamacpp_bf16_rel_rms(model == "default" ? "lfm2-tiny" : model);
  int compared = 0;
  for (const auto& p : prompts) {
    auto g = gpu->new_session(), c = cpu->new_session();
    g->append(p);
    c->append(p);
    for (int step = 0; step < 24; ++step) {
      const int32_t tg = argmax(g->last_logits()), tc = argmax(c->last_logits());
      ++compared;
      if (tg != tc) {
        const auto lc = c->last_logits();
        const double margin = double(lc[size_t(tc)]) - lc[size_t(tg)];
        EXPECT_LT(margin, tol * rms(lc)) << model << " " << type << ": step " << step << " cuda " << tg << ", cpu "
                                         << tc << " with a clear margin";
        break;
      }
      g->append({&tg, 1});
      c->append({&tc, 1});
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Files, CudaGreedy,
                         ::testing::Values(std::pair{"default", "Q8_0"}, std::pair{"lfm2-tiny", "BF16"},
                                           std::pair{"lfm2-tiny", "Q4_0"}, std::pair{"lfm2-tiny", "Q4_K_M"},
                                           std::pair{"llama-tiny", "BF16"}, std::pair{"qwen2-tiny", "BF16"},
                                           std::pair{"qwen2-tiny", "Q8_0"}, std::pair{"qwen3-tiny", "Q4_K_M"}),
                         [](const auto& info) {
                           std::string s = std::string(info.param.first) + "_" + info.param.second;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Greedy decode logits, step by step.
std::vector<std::vector<float>> greedy_trace(Engine& e, const std::vector<int32_t>& prompt, int steps) {
  std::vector<std::vector<float>> trace;
  auto s = e.new_session();
  s->append(prompt);
  for (int i = 0; i < steps; ++i) {
    trace.emplace_back(s->last_logits().begin(), s->last_logits().end());
    const int32_t t = argmax(s->last_logits());
    s->append({&t, 1});
  }
  return trace;
}

// A replayed graph runs exactly the kernels of the eager step, on the same data: bit-identical.
TEST(CudaGraphs, ReplayEqualsEagerLaunchesBitForBit) {
  CERA_REQUIRE_CUDA();
  // lfm2-tiny Q4_0: the int8 hand-offs between its products (Backend::will_norm) in both modes,
  // also where they change a product's block shape (as on this small model).
  const test::ScopedEnv handoff_everywhere("CERA_CUDA_INT8_HANDOFF", "all");
  for (const auto& [model, type] : {std::pair{"lfm2-tiny", "Q4_0"}, std::pair{"default", "Q8_0"},
                                     std::pair{"qwen3-tiny", "BF16"}, std::pair{"llama-tiny", "Q4_K_M"}}) {
    const std::string path = model_path(model, type);
    auto eager = [&] {
      const test::ScopedEnv no_graphs("CERA_CUDA_GRAPHS", "0");
      return load(path, "cuda");
    }();
    auto graphs = load(path, "cuda");
    const auto prompt = prompts_for(model, *graphs).front();
    const auto a = greedy_trace(*eager, prompt, 24), b = greedy_trace(*graphs, prompt, 24);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << model << " " << type << " step " << i;
  }
}

// A one-row append's logits are written by the LM head straight into page-locked host memory (a
// Backend::host_logits slot, across PCIe): the same row, bit for bit, as an all_logits append of the
// same token reads from the device; and a row logits() returned stays intact while other sessions
// step (the two slots are held by their sessions, a third session reads from the device).
TEST(CudaHostLogits, HeadWritesTheDeviceRowAndEachSessionKeepsItsOwn) {
  CERA_REQUIRE_CUDA();
  auto engine = load(model_path("default", ""), "cuda", 4);
  const auto prompts = prompts_for("default", *engine);
  ASSERT_GE(prompts.size(), 3u);
  std::unique_ptr<Session> sessions[3];
  std::span<const float> rows[3];
  std::vector<float> copies[3];
  for (int i = 0; i < 3; ++i) {
    sessions[i] = engine->new_session();
    sessions[i]->append(prompts[size_t(i)]);
    for (int32_t t : {11, 12, 13}) sessions[i]->append({&t, 1});  // decode steps: replayed graphs
    rows[i] = sessions[i]->last_logits();
    copies[i].assign(rows[i].begin(), rows[i].end());
  }
  EXPECT_NE(rows[0].data(), rows[1].data());
  for (int i = 0; i < 3; ++i) {
    auto reference = engine->new_session();
    reference->append(prompts[size_t(i)]);
    for (int32_t t : {11, 12}) reference->append({&t, 1});
    const int32_t last = 13;
    reference->append({&last, 1}, /*all_logits=*/true);  // read from the device's logits
    EXPECT_TRUE(std::equal(rows[i].begin(), rows[i].end(), copies[i].begin(), copies[i].end())) << i;
    const auto want = reference->last_logits();
    ASSERT_EQ(want.size(), rows[i].size());
    EXPECT_TRUE(std::equal(rows[i].begin(), rows[i].end(), want.begin())) << i;
  }
}

// decode_batch over several sessions equals each session decoding alone: with up to two sequences
// the same matvec arithmetic per row (bit-identical), with more the GEMM path (16-bit activations:
// the reduced-precision bound). decode_batch_greedy returns the argmax of those logits.
// The pipelined greedy loop (the next step's tokens fed from the device argmax, the host a step
// ahead) against decode_batch_greedy step by step on a second engine: the same kernels and graphs,
// so the same tokens and, one step later, bit-identical logits.
TEST(CudaBatchedDecode, PipelinedGreedyEqualsStepByStep) {
  CERA_REQUIRE_CUDA();
  const std::string path = model_path("default", "");
  for (int n : {1, 5}) {
    auto a = load(path, "cuda", n), b = load(path, "cuda", n);
    const auto prompts = prompts_for("default", *a);
    std::vector<std::unique_ptr<Session>> sa, sb;
    std::vector<Session*> ba, bb;
    for (int i = 0; i < n; ++i) {
      const auto& ids = prompts[size_t(i) % prompts.size()];
      sa.push_back(a->new_session());
      sa.back()->append(ids);
      ba.push_back(sa.back().get());
      sb.push_back(b->new_session());
      sb.back()->append(ids);
      bb.push_back(sb.back().get());
    }
    const int steps = 20;
    std::vector<int32_t> first(static_cast<size_t>(n), 11), ca(size_t(n) * steps), cb(size_t(n) * steps);
    a->generate_greedy_batch(ba, first, steps, ca);
    std::vector<int32_t> fed = first;
    for (int k = 0; k < steps; ++k) {
      b->decode_batch_greedy(bb, fed, std::span<int32_t>(cb).subspan(size_t(k) * n, size_t(n)));
      fed.assign(cb.begin() + long(k) * n, cb.begin() + long(k + 1) * n);
    }
    EXPECT_EQ(ca, cb) << n << " sequences";
    a->decode_batch(ba, fed);
    b->decode_batch(bb, fed);
    for (int i = 0; i < n; ++i) {
      const auto la = ba[size_t(i)]->last_logits(), lb = bb[size_t(i)]->last_logits();
      EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin(), lb.end())) << n << " sequences, session " << i;
    }
  }
}

TEST(CudaBatchedDecode, EqualsOneSequenceAtATime) {
  CERA_REQUIRE_CUDA();
  const std::string path = model_path("default", "");
  for (int n : {2, 12}) {
    auto engine = load(path, "cuda", n);
    const auto prompts = prompts_for("default", *engine);
    auto prompt_of = [&](int i) {
      const auto& ids = prompts[size_t(i) % prompts.size()];
      return std::span<const int32_t>(ids).first(ids.size() - size_t(i % 3));
    };
    auto token_of = [](int step, int i) { return int32_t((step * 31 + i * 7) % 200 + 1); };
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> batch;
    for (int i = 0; i < n; ++i) {
      sessions.push_back(engine->new_session());
      sessions.back()->append(prompt_of(i));
      batch.push_back(sessions.back().get());
    }
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int step = 0; step < 6; ++step) {
      for (int i = 0; i < n; ++i) tokens[size_t(i)] = token_of(step, i);
      engine->decode_batch(batch, tokens);
    }
    // The reference: the same prompts and tokens, one session at a time.
    auto ref_engine = load(path, "cuda", 1);
    test::RelRms diff;
    bool bitwise = true;
    for (int i = 0; i < n; ++i) {
      auto s = ref_engine->new_session();
      s->append(prompt_of(i));
      for (int step = 0; step < 6; ++step) {
        const int32_t t = token_of(step, i);
        s->append({&t, 1});
      }
      const auto a = batch[size_t(i)]->last_logits(), b = s->last_logits();
      diff.add(a, b);
      bitwise = bitwise && std::equal(a.begin(), a.end(), b.begin(), b.end());
    }
    std::printf("[ cuda ] decode_batch of %d sequences vs one at a time: rel_rms %.3e\n", n, diff.value());
    if (n <= 2) EXPECT_TRUE(bitwise) << n << " sequences";
    else EXPECT_LE(diff.value(), 1.1 * test::llamacpp_bf16_rel_rms("lfm2-tiny")) << n << " sequences";

    // Greedy on the device: the argmax of the logits decode_batch returned for the same step.
    std::vector<int32_t> expected(static_cast<size_t>(n)), next(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) tokens[size_t(i)] = token_of(7, i);
    engine->decode_batch(batch, tokens);
    for (int i = 0; i < n; ++i) {
      const auto l = batch[size_t(i)]->last_logits();
      expected[size_t(i)] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    auto twin_engine = load(path, "cuda", n);
    std::vector<std::unique_ptr<Session>> twins;
    std::vector<Session*> twin_batch;
    for (int i = 0; i < n; ++i) {
      twins.push_back(twin_engine->new_session());
      twins.back()->append(prompt_of(i));
      twin_batch.push_back(twins.back().get());
    }
    for (int step = 0; step < 6; ++step) {
      for (int i = 0; i < n; ++i) tokens[size_t(i)] = token_of(step, i);
      twin_engine->decode_batch(twin_batch, tokens);
    }
    for (int i = 0; i < n; ++i) tokens[size_t(i)] = token_of(7, i);
    twin_engine->decode_batch_greedy(twin_batch, tokens, next);
    EXPECT_EQ(next, expected) << n << " sequences";
  }
}

}  // namespace
}  // namespace cera
