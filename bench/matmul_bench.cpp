// dot_tile throughput on one thread: y[T, N] = x[T, K] · W[N, K]ᵀ with K = 1024, N = 4608, driven
// the way the engine drives it (weight-row blocks outermost so a block stays cache-resident while
// every activation tile passes over it). Reports GFLOP/s (2·N·K·T per iteration).
// Filter by ISA with CERA_CPU_ISA=scalar|avx2|avx512.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "format/quant.h"

namespace {

using cera::GgmlType;

constexpr int64_t kK = 1024;
constexpr int kN = 4608;

void BM_DotTile(benchmark::State& state, GgmlType type, int T) {
  const auto& k = cera::cpu::matmul_kernels(type);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(kK);
  const size_t wrb = cera::ggml_row_bytes(type, kK), xrb = cera::ggml_row_bytes(k.act_type, kK);
  std::vector<uint8_t> w(wrb * kN), x(xrb * size_t(T));
  for (int i = 0; i < kN; ++i) {
    for (auto& v : row) v = dist(rng);
    cera::quant::quantize_row_ref(type, row.data(), w.data() + wrb * size_t(i), kK);
  }
  for (int j = 0; j < T; ++j) {
    for (auto& v : row) v = dist(rng);
    k.quantize_act(row.data(), x.data() + xrb * size_t(j), kK);
  }
  std::vector<float> y(size_t(T) * kN);
  constexpr int kRowBlock = 64;
  for (auto _ : state) {
    for (int i0 = 0; i0 < kN; i0 += kRowBlock)
      for (int j = 0; j < T; j += k.max_nx) {
        const int nx = T - j < k.max_nx ? T - j : k.max_nx;
        for (int i = i0; i < i0 + kRowBlock; i += k.max_nw) {
          const int nw = i0 + kRowBlock - i < k.max_nw ? i0 + kRowBlock - i : k.max_nw;
          k.dot_tile(kK, w.data() + wrb * size_t(i), wrb, nw, x.data() + xrb * size_t(j), xrb, nx,
                     y.data() + size_t(j) * kN + size_t(i), kN);
        }
      }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * kN * kK * T * double(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
  state.SetLabel(std::string(cera::cpu::isa_name(k.isa)));
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

const bool kRegistered = [] {
  for (GgmlType t : kTypes)
    for (int T : {1, 512}) {
      const std::string name = "dot_tile/" + std::string(cera::ggml_type_name(t)) + "/T" + std::to_string(T);
      benchmark::RegisterBenchmark(name.c_str(), BM_DotTile, t, T)->Unit(benchmark::kMillisecond)->MinTime(0.3);
    }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
