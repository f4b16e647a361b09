// Prefill attention kernels on the GPU: the 3xTF32 tensor-core kernel, the f16 one and the SIMT one
// over a 4096-token prompt in the paged F32 KV cache (32-token blocks, shuffled), as one step of
// 4096 tokens and as 8 steps of 512 (each step's keys: everything before it, as chunked prefill
// sees them). Times one attention layer with CUDA events; TFLOP/s counts the causal product only
// (4·head_dim FLOPs per (query row, visible key)). Also prints each kernel's relative difference
// from the 3xTF32 result.
//   cera_bench_cuda_attention [reps (default 20)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/ops.h"
#include "backend/cuda/step_meta.h"
#include "cuda_bench_check.h"

namespace {

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(T) * std::max<size_t>(1, v.size())));
  CHECK(cudaMemcpy(d, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  return d;
}

struct Shape {
  const char* name;
  int32_t n_head, n_head_kv, head_dim;
};

enum class Kernel { Tf32, F16, Simt };
const char* kernel_name(Kernel k) { return k == Kernel::Tf32 ? "tf32x3" : k == Kernel::F16 ? "f16" : "simt"; }

}  // namespace

int main(int argc, char** argv) {
  using namespace cera::cuda;
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  cudaDeviceProp prop{};
  if (!first_cuda_device(prop)) return 0;
  std::printf("%s, %d SMs; prompt 4096, KV blocks of 32; %d reps; ms per attention layer\n", prop.name,
              prop.multiProcessorCount, reps);
  std::printf("%-22s %-10s %-7s %9s %8s %10s %9s\n", "shape", "steps", "kernel", "ms", "TFLOP/s", "vs tf32x3",
              "rel diff");

  constexpr int32_t kPrompt = 4096, kBlock = 32, kBlocks = kPrompt / kBlock;
  const Shape shapes[] = {{"LFM2-1.2B 32/8 d64", 32, 8, 64},
                          {"32/8 d128", 32, 8, 128},
                          {"Qwen3-0.6B 16/8 d128", 16, 8, 128},
                          {"Qwen2.5-0.5B 14/2 d64", 14, 2, 64}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> ud(-2.f, 2.f);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  std::vector<int32_t> table(kBlocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  int32_t* d_table = upload(table);

  for (const Shape& sh : shapes) {
    const int32_t hd = sh.head_dim, kv_dim = sh.n_head_kv * hd, qd = sh.n_head * hd;
    std::vector<float> host(size_t(kBlocks) * 2 * kBlock * kv_dim);
    for (auto& x : host) x = ud(rng);
    float* d_kv = upload(host);
    host.assign(size_t(kPrompt) * qd, 0.f);
    for (auto& x : host) x = ud(rng);
    float* d_q = upload(host);  // q rows of the step: the first n_tokens rows
    float* d_out = nullptr;
    CHECK(cudaMalloc(&d_out, sizeof(float) * size_t(kPrompt) * qd));
    const KvLayer kv{d_kv, kBlock, kv_dim};
    const AttentionShape ash{sh.n_head, sh.n_head_kv, hd, 1.f / std::sqrt(float(hd))};

    for (const int32_t step_tokens : {kPrompt, 512}) {
      // One StepView per step: one sequence whose n_past is everything before the step.
      const int32_t n_steps = kPrompt / step_tokens, n_tiles = step_tokens / kAttentionTileTokens;
      std::vector<AttentionTile> tiles;
      for (int32_t i = 0; i < n_tiles; ++i) tiles.push_back({0, i * kAttentionTileTokens, kAttentionTileTokens});
      AttentionTile* d_tiles = upload(tiles);
      std::vector<DeviceSeq*> d_seqs;
      double flops = 0;
      for (int32_t st = 0; st < n_steps; ++st) {
        d_seqs.push_back(upload(std::vector<DeviceSeq>{{0, step_tokens, st * step_tokens, -1, 0}}));
        for (int32_t t = 0; t < step_tokens; ++t) flops += 4.0 * hd * sh.n_head * (st * step_tokens + t + 1);
      }
      auto run = [&](Kernel k) {
        for (int32_t st = 0; st < n_steps; ++st) {
          StepView view{};
          view.seqs = d_seqs[size_t(st)];
          view.block_tables = d_table;
          view.tiles = d_tiles;
          if (k == Kernel::Tf32)
            attention_prefill_tc(kv, view, n_tiles, d_q, qd, d_out, qd, ash, stream);
          else if (k == Kernel::F16)
            attention_prefill_f16(kv, view, n_tiles, d_q, qd, d_out, qd, ash, stream);
          else
            attention_prefill(kv, view, n_tiles, d_q, qd, d_out, qd, ash, stream);  // with the override below
        }
      };
      double tf32_ms = 0;
      std::vector<float> ref, got(size_t(step_tokens) * qd);
      for (Kernel k : {Kernel::Tf32, Kernel::F16, Kernel::Simt}) {
        if (k == Kernel::Simt) setenv("CERA_CUDA_ATTENTION", "simt", 1);
        run(k);  // warm-up (and the output of the last step, for the comparison)
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaMemcpy(got.data(), d_out, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
        CHECK(cudaEventRecord(e0, stream));
        for (int r = 0; r < reps; ++r) run(k);
        CHECK(cudaEventRecord(e1, stream));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= float(reps);
        if (k == Kernel::Simt) unsetenv("CERA_CUDA_ATTENTION");
        if (k == Kernel::Tf32) {
          tf32_ms = ms;
          ref = got;
        }
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          num += double(got[i] - ref[i]) * double(got[i] - ref[i]);
          den += double(ref[i]) * double(ref[i]);
        }
        char steps[32];
        std::snprintf(steps, sizeof steps, "%dx%d", n_steps, step_tokens);
        std::printf("%-22s %-10s %-7s %9.3f %8.1f %9.2fx %9.2e\n", sh.name, steps, kernel_name(k), ms,
                    flops / (ms * 1e-3) / 1e12, tf32_ms / ms, std::sqrt(num / den));
      }
      CHECK(cudaFree(d_tiles));
      for (DeviceSeq* p : d_seqs) CHECK(cudaFree(p));
    }
    CHECK(cudaFree(d_kv));
    CHECK(cudaFree(d_q));
    CHECK(cudaFree(d_out));
  }
  CHECK(cudaFree(d_table));
  return 0;
}
