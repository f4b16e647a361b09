// Backend::top_k_rows on CUDA (src/backend/cuda/top_k.cu) against the CPU backend, which must agree
// exactly (same ids in the same order, the same value bits): random rows full of ties, NaN, ±inf and
// ±0, rows that are all NaN / all equal / all -inf, vocabulary widths of 65536 and odd ones, k = 1,
// 40, 1024. Then the launcher inside a captured CUDA graph, and generation through the engine on the
// device top-k path. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/ops.h"
#include "cera/engine.h"
#include "cuda_test_support.h"
#include "engine/engine_impl.h"
#include "support/fixtures.h"

namespace cera {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Row r of `rows`: random logits with the hard cases mixed in; rows 1, 2, 3 (when there) are all
// NaN but a few, all equal, all -inf; row 4 counts down so the top k sit at the start.
std::vector<float> hard_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit(0.f, 3.f);
  std::uniform_int_distribution<int> kind(0, 999);
  std::vector<float> v(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = v.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const int k = kind(rng);
      float x = logit(rng);
      if (k < 200) x = std::round(x * 2) / 2;  // ties, also around the k-th place
      else if (k < 230) x = kNaN;
      else if (k < 240) x = -kInf;
      else if (k < 242) x = kInf;
      else if (k < 250) x = (k & 1) ? -0.f : 0.f;
      switch (r) {
        case 1: x = c % 997 == 5 ? float(c % 13) : kNaN; break;  // fewer non-NaN values than some k
        case 2: x = 0.5f; break;
        case 3: x = -kInf; break;
        case 4: x = -float(c); break;
        default: break;
      }
      row[c] = x;
    }
  }
  return v;
}

struct Case {
  int64_t rows, cols;
  int32_t k;
};

class CudaTopK : public ::testing::TestWithParam<Case> {};

TEST_P(CudaTopK, MatchesCpu) {
  CERA_REQUIRE_CUDA();
  const Case c = GetParam();
  auto cpu = make_cpu_backend({2});
  CudaBackendOptions o;
  o.use_graphs = false;
  auto gpu = make_cuda_backend(o);
  // A wider buffer sliced to `cols`: the row stride is not the width.
  const auto v = hard_rows(c.rows, c.cols + 3, uint32_t(c.cols + c.k));
  const Tensor tc = cpu->alloc(c.rows, c.cols + 3), tg = gpu->alloc(c.rows, c.cols + 3);
  test::write(*cpu, tc, v);
  test::write(*gpu, tg, v);
  std::vector<float> cv(size_t(c.rows * c.k)), gv(cv.size(), 123.f);
  std::vector<int32_t> ci(cv.size()), gi(cv.size(), -7);
  cpu->top_k_rows(tc.cols_slice(1, c.cols), c.k, cv.data(), ci.data());
  gpu->top_k_rows(tg.cols_slice(1, c.cols), c.k, gv.data(), gi.data());
  int64_t filled = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int32_t i = 0; i < c.k; ++i) {
      const size_t at = size_t(r * c.k + i);
      ASSERT_EQ(gi[at], ci[at]) << "row " << r << " slot " << i;
      ASSERT_EQ(std::memcmp(&gv[at], &cv[at], sizeof(float)), 0)
          << "row " << r << " slot " << i << ": " << gv[at] << " vs " << cv[at];
      filled += ci[at] >= 0;
    }
  EXPECT_GT(filled, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaTopK,
                         ::testing::Values(Case{6, 65536, 1}, Case{6, 65536, 40}, Case{6, 65536, 1024},
                                           Case{5, 151937, 40}, Case{5, 151937, 1024}, Case{64, 65536, 40},
                                           Case{3, 1001, 1001}, Case{5, 4099, 300}, Case{5, 7, 5}),
                         [](const auto& info) {
                           return "r" + std::to_string(info.param.rows) + "_c" + std::to_string(info.param.cols) +
                                  "_k" + std::to_string(info.param.k);
                         });

TEST(CudaTopKRows, RefusesBadK) {
  CERA_REQUIRE_CUDA();
  auto gpu = make_cuda_backend({});
  const Tensor t = gpu->alloc(1, 2000);
  std::vector<float> v(2048);
  std::vector<int32_t> i(2048);
  EXPECT_THROW(gpu->top_k_rows(t, 0, v.data(), i.data()), Error);
  EXPECT_THROW(gpu->top_k_rows(t, Backend::kMaxTopK + 1, v.data(), i.data()), Error);
  EXPECT_THROW(gpu->top_k_rows(t.cols_slice(0, 10), 11, v.data(), i.data()), Error);
}

// The launcher records into a CUDA graph (no allocation, no synchronisation inside) and the replay
// on new data gives the new answer.
TEST(CudaTopKRows, CapturesIntoAGraph) {
  CERA_REQUIRE_CUDA();
  const int32_t rows = 3, cols = 70001, k = 64;
  cuda::DeviceBuffer x(sizeof(float) * rows * cols), scratch(cuda::top_k_scratch_bytes(rows, cols, k)),
      out(size_t(rows) * k * 8);
  float* values = out.as<float>();
  int32_t* ids = reinterpret_cast<int32_t*>(values + rows * k);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cuda::top_k_rows(x.as<float>(), cols, rows, cols, k, scratch.get(), values, ids, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  auto cpu = make_cpu_backend({2});
  const Tensor tc = cpu->alloc(rows, cols);
  for (uint32_t seed : {1u, 2u}) {
    const auto v = hard_rows(rows, cols, seed);
    ASSERT_EQ(cudaMemcpy(x.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<float> gv(size_t(rows) * k), cv(gv.size());
    std::vector<int32_t> gi(gv.size()), ci(gv.size());
    ASSERT_EQ(cudaMemcpy(gv.data(), values, gv.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gi.data(), ids, gi.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    test::write(*cpu, tc, v);
    cpu->top_k_rows(tc, k, cv.data(), ci.data());
    EXPECT_EQ(gi, ci) << "seed " << seed;
    EXPECT_EQ(std::memcmp(gv.data(), cv.data(), gv.size() * sizeof(float)), 0) << "seed " << seed;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// Generation on the CUDA backend samples from the device's top-k and gives the same tokens and
// final logits as reading every full row (same backend, same logits: the draws must be identical).
TEST(CudaTopKRows, GenerateMatchesTheFullRowPath) {
  CERA_REQUIRE_CUDA();
  EngineOptions o;
  o.model_path = test::source_path("models/default.gguf");
  o.device = "cuda";
  auto engine = Engine::load(o);
  auto& impl = EngineInternals::of(*engine);
  GenerateOptions g;
  g.max_tokens = 32;
  g.ignore_eos = true;
  g.sampling.seed = 99;
  g.sampling.repeat_penalty = 1.2f;
  std::vector<int32_t> tokens[2];
  std::vector<float> logits[2];
  {  // warm up: both runs below then replay the same captured decode graphs
    auto s = engine->new_session();
    s->append(engine->tokenize("Once upon a time", true, false));
    s->generate(g, [](int32_t, std::string_view) { return true; });
  }
  for (int on = 0; on < 2; ++on) {
    impl.sample_from_top_k = on == 1;
    const uint64_t before = impl.top_k_steps;
    auto s = engine->new_session();
    s->append(engine->tokenize("Once upon a time", true, false));
    s->generate(g, [&](int32_t t, std::string_view) {
      if (t >= 0) tokens[on].push_back(t);
      return true;
    });
    logits[on].assign(s->last_logits().begin(), s->last_logits().end());
    EXPECT_EQ(impl.top_k_steps - before, on == 1 ? uint64_t(g.max_tokens) : 0u);
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  ASSERT_FALSE(logits[1].empty());
  EXPECT_EQ(std::memcmp(logits[1].data(), logits[0].data(), logits[0].size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace cera
