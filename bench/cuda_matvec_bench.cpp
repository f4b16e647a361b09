// Decode matvec throughput on the GPU: for each weight type, the LFM2-1.2B FFN shapes and a
// vocabulary-sized head, weight bytes streamed per second (the kernel's job is to run at HBM speed).
// Several copies of each matrix are cycled so that the 60 MB L2 does not serve repeats.
// A second table times Q4_0 / Q8_0 / Q4_K / Q6_K with int8 activations (quant_kernels.h) against the same kernel
// decoding to f32, on the real decode shapes (LFM2-1.2B, Llama-3.2-1B, Qwen3-0.6B) with their fusions.
// A third table times the general kernel with the norm folded in against the same product without.
// A fourth ("chain") replays the LFM2-1.2B decode step's products alone as one CUDA graph (PDL, as
// the backend launches them), with and without a one-row rms_norm kernel after each: what the
// chain of launches costs on top of the bytes, and what one small kernel adds to it.
//   cera_bench_cuda_matvec [n_x_rows (default 1)] [reps (default 200)] [int8|norm|chain (only that table)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "cuda_bench_check.h"

namespace {

constexpr double kPeakBytesPerSec = 4.0e12;

struct FastShape {
  const char* name;
  int64_t n_rows, k;
  cera::cuda::MatvecFusion::Out out;
  bool norm;
};

// The decode matvecs of the benchmark models (n_rows x k; SwiGLU rows are [gate; up]).
const FastShape kFastShapes[] = {
    {"lfm2 attn/out 2048", 2048, 2048, cera::cuda::MatvecFusion::Out::Accumulate, false},
    {"lfm2 in_proj 3x2048", 6144, 2048, cera::cuda::MatvecFusion::Out::Store, true},
    {"lfm2 gate+up 2x8192", 16384, 2048, cera::cuda::MatvecFusion::Out::SwiGLU, true},
    {"lfm2 down", 2048, 8192, cera::cuda::MatvecFusion::Out::Accumulate, false},
    {"lfm2 head 65536", 65536, 2048, cera::cuda::MatvecFusion::Out::Store, true},
    {"llama q 2048", 2048, 2048, cera::cuda::MatvecFusion::Out::Store, true},
    {"llama k/v 512", 512, 2048, cera::cuda::MatvecFusion::Out::Store, true},
    {"llama gate+up 2x8192", 16384, 2048, cera::cuda::MatvecFusion::Out::SwiGLU, true},
    {"llama down", 2048, 8192, cera::cuda::MatvecFusion::Out::Accumulate, false},
    {"llama head 128256", 128256, 2048, cera::cuda::MatvecFusion::Out::Store, true},
    {"qwen3 q 2048", 2048, 1024, cera::cuda::MatvecFusion::Out::Store, true},
    {"qwen3 k/v 1024", 1024, 1024, cera::cuda::MatvecFusion::Out::Store, true},
    {"qwen3 o 1024", 1024, 2048, cera::cuda::MatvecFusion::Out::Accumulate, false},
    {"qwen3 gate+up 2x3072", 6144, 1024, cera::cuda::MatvecFusion::Out::SwiGLU, true},
    {"qwen3 down", 1024, 3072, cera::cuda::MatvecFusion::Out::Accumulate, false},
    {"qwen3 head 151936", 151936, 1024, cera::cuda::MatvecFusion::Out::Store, true},
};

// Average seconds per call of fn(buffer) over reps calls cycling through the buffers (after one
// warm-up pass).
template <class Fn>
double time_calls(const std::vector<void*>& bufs, int reps, cudaEvent_t e0, cudaEvent_t e1, Fn&& fn) {
  for (void* b : bufs) fn(b);
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) fn(bufs[size_t(i) % bufs.size()]);
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return double(ms) / 1e3 / reps;
}

// Copies of a matrix (one quantized random row tiled) exceeding the L2 several times over.
// Rows in the GPU layout (cuda::to_device_layout), cuda::device_row_bytes apart.
std::vector<void*> make_copies(cera::GgmlType t, int64_t n_rows, int64_t k, const std::vector<float>& row) {
  const size_t row_bytes = cera::cuda::device_row_bytes(t, k);
  const size_t bytes = row_bytes * size_t(n_rows);
  std::vector<uint8_t> stored(cera::ggml_row_bytes(t, k)), qrow(row_bytes), host(bytes);
  cera::quant::quantize_row_ref(t, row.data(), stored.data(), k);
  cera::cuda::to_device_layout(t, stored.data(), stored.size(), 1, k, qrow.data(), row_bytes);
  for (int64_t r = 0; r < n_rows; ++r) std::copy(qrow.begin(), qrow.end(), host.begin() + r * row_bytes);
  const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / bytes + 1));
  std::vector<void*> bufs(static_cast<size_t>(copies));
  for (auto& b : bufs) {
    CHECK(cudaMalloc(&b, bytes));
    if (&b == &bufs[0]) CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
    else CHECK(cudaMemcpy(b, bufs[0], bytes, cudaMemcpyDeviceToDevice));
  }
  return bufs;
}

// Int8 activations vs f32 decode (cuda::matvec_int8_enable) per shape.
void bench_int8(int nx, int reps, const std::vector<float>& row, float* dx, float* dy, float* dnorm, cudaEvent_t e0,
                cudaEvent_t e1) {
  using cera::GgmlType;
  std::printf("\nQ4_0/Q8_0/Q4_K/Q6_K with int8 activations vs decoded to f32 (cuda::matvec), n_x_rows=%d\n", nx);
  std::printf("%-6s %-22s %-13s %8s | %9s %7s %7s | %9s %7s %7s | %6s\n", "type", "shape", "n x k", "MB", "int8 us",
              "GB/s", "of 4TB", "f32 us", "GB/s", "of 4TB", "speed");
  const bool was_on = cera::cuda::matvec_int8_enabled();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const FastShape& s : kFastShapes) {
      const size_t row_bytes = cera::cuda::device_row_bytes(t, s.k);
      const size_t bytes = row_bytes * size_t(s.n_rows);
      const std::vector<void*> bufs = make_copies(t, s.n_rows, s.k, row);
      cera::cuda::MatvecFusion f;
      f.out = s.out;
      if (s.norm) f.norm_w = dnorm, f.norm_eps = 1e-5f;
      const int64_t ys = s.n_rows;
      auto run = [&](void* w) {
        cera::cuda::matvec(t, w, s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, ys, nullptr, f);
      };
      cera::cuda::matvec_int8_enable(true);
      const double i8 = time_calls(bufs, reps, e0, e1, run);
      cera::cuda::matvec_int8_enable(false);
      const double f32 = time_calls(bufs, reps, e0, e1, run);
      CHECK(cudaGetLastError());
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.n_rows, (long long)s.k);
      const double gi = double(bytes) / i8 / 1e9, gf = double(bytes) / f32 / 1e9;
      std::printf("%-6s %-22s %-13s %8.2f | %9.2f %7.0f %6.1f%% | %9.2f %7.0f %6.1f%% | %5.2fx\n",
                  std::string(cera::ggml_type_name(t)).c_str(), s.name, shape, double(bytes) / 1e6, i8 * 1e6, gi,
                  100.0 * gi * 1e9 / kPeakBytesPerSec, f32 * 1e6, gf, 100.0 * gf * 1e9 / kPeakBytesPerSec, f32 / i8);
      for (auto b : bufs) CHECK(cudaFree(b));
    }
  }
  cera::cuda::matvec_int8_enable(was_on);
}

// The norm folded into the general kernel (MatvecFusion::norm_w) against the same product without
// it, per decode shape: what the fold costs the product (the separate rms_norm kernel it replaces
// is a launch of its own, not timed here).
void bench_norm_fold(int nx, int reps, const std::vector<float>& row, float* dx, float* dy, float* dnorm,
                     cudaEvent_t e0, cudaEvent_t e1) {
  using cera::GgmlType;
  std::printf("\nnorm folded into the general kernel vs without it, n_x_rows=%d\n", nx);
  std::printf("%-6s %-22s %-13s %8s | %9s %6s | %9s %6s\n", "type", "shape", "n x k", "MB", "plain us", "of 4TB",
              "+norm us", "of 4TB");
  for (GgmlType t : {GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    for (const FastShape& s : kFastShapes) {
      if (!s.norm || s.n_rows > 16384) continue;
      const size_t row_bytes = cera::cuda::device_row_bytes(t, s.k);
      const size_t bytes = row_bytes * size_t(s.n_rows);
      const std::vector<void*> bufs = make_copies(t, s.n_rows, s.k, row);
      cera::cuda::MatvecFusion f;
      f.out = s.out;
      const double plain = time_calls(bufs, reps, e0, e1, [&](void* w) {
        cera::cuda::matvec(t, w, s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, s.n_rows, nullptr, f);
      });
      f.norm_w = dnorm, f.norm_eps = 1e-5f;
      const double normed = time_calls(bufs, reps, e0, e1, [&](void* w) {
        cera::cuda::matvec(t, w, s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, s.n_rows, nullptr, f);
      });
      CHECK(cudaGetLastError());
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.n_rows, (long long)s.k);
      std::printf("%-6s %-22s %-13s %8.2f | %9.2f %5.1f%% | %9.2f %5.1f%%\n",
                  std::string(cera::ggml_type_name(t)).c_str(), s.name, shape, double(bytes) / 1e6, plain * 1e6,
                  100.0 * double(bytes) / plain / kPeakBytesPerSec, normed * 1e6,
                  100.0 * double(bytes) / normed / kPeakBytesPerSec);
      for (auto b : bufs) CHECK(cudaFree(b));
    }
  }
}

// The LFM2-1.2B shape's decode products (16 layers of in_proj 3·2048, out 2048, [gate; up] 2·8192
// and down, then the 65536-row head), every layer's weights distinct, captured once and replayed.
void bench_chain(int nx, int reps, float* dx, float* dy, float* dnorm, cudaEvent_t e0, cudaEvent_t e1) {
  using cera::GgmlType;
  using Out = cera::cuda::MatvecFusion::Out;
  struct Product {
    int64_t n_rows, k;
    Out out;
    bool norm;
  };
  std::vector<Product> step;
  for (int l = 0; l < 16; ++l) {
    step.push_back({6144, 2048, Out::Store, true});
    step.push_back({2048, 2048, Out::Accumulate, false});
    step.push_back({16384, 2048, Out::SwiGLU, true});
    step.push_back({2048, 8192, Out::Accumulate, false});
  }
  step.push_back({65536, 2048, Out::Store, true});
  std::printf("\nchain: the LFM2-1.2B decode step's %zu products as one CUDA graph, n_x_rows=%d\n", step.size(), nx);
  std::printf("%-9s %-34s %9s %10s %7s %10s\n", "type", "variant", "MB", "us/step", "of 4TB", "us/kernel+");
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const bool int8_was_on = cera::cuda::matvec_int8_enabled();
  // Q4_0 with int8 activations folds the norm as the backend does; decoded to f32 it does not.
  const struct {
    GgmlType t;
    bool int8;
  } configs[] = {{GgmlType::BF16, false}, {GgmlType::Q4_0, true}, {GgmlType::Q4_0, false}};
  for (const auto& cfg : configs) {
    const GgmlType t = cfg.t;
    cera::cuda::matvec_int8_enable(cfg.int8);
    const bool fold = t == GgmlType::BF16 || cfg.int8;
    std::vector<void*> ws;
    size_t total = 0;
    for (const Product& p : step) {
      const size_t bytes = cera::cuda::device_row_bytes(t, p.k) * size_t(p.n_rows);
      void* w = nullptr;
      CHECK(cudaMalloc(&w, bytes));
      CHECK(cudaMemset(w, 0x3c, bytes));  // small finite values in every format
      ws.push_back(w);
      total += bytes;
    }
    double base_us = 0;
    for (int variant = 0; variant < 3; ++variant) {
      const bool early = variant != 1, spacer = variant == 2;
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (size_t i = 0; i < step.size(); ++i) {
        const Product& p = step[i];
        cera::cuda::MatvecFusion f;
        f.out = p.out;
        f.early_weights = early;
        if (p.norm && fold) f.norm_w = dnorm, f.norm_eps = 1e-5f;
        cera::cuda::matvec(t, ws[i], p.n_rows, p.k, cera::cuda::device_row_bytes(t, p.k), dx, p.k, nx, dy, p.n_rows, st, f);
        if (spacer)
          cera::cuda::rms_norm(dx, 8192, nullptr, 0, dnorm, 1e-5f, dx + 4096, 8192, nx, 2048, st);
      }
      CHECK(cudaStreamEndCapture(st, &g));
      cudaGraphExec_t ge;
      CHECK(cudaGraphInstantiate(&ge, g, 0));
      for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(ge, st));
      CHECK(cudaEventRecord(e0, st));
      for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(ge, st));
      CHECK(cudaEventRecord(e1, st));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const double us = double(ms) * 1e3 / reps;
      if (variant == 0) base_us = us;
      const char* names[] = {"products (early weights)", "products (weights after the wait)",
                             "products + a 1-row rms_norm after each"};
      const std::string type_name = std::string(cera::ggml_type_name(t)) + (cfg.int8 ? " i8" : "");
      std::printf("%-9s %-34s %9.1f %10.1f %6.1f%% %10.2f\n", type_name.c_str(),
                  names[variant], double(total) / 1e6, us, 100.0 * double(total) / (us * 1e-6) / kPeakBytesPerSec,
                  variant == 2 ? (us - base_us) / double(step.size()) : 0.0);
      CHECK(cudaGraphExecDestroy(ge));
      CHECK(cudaGraphDestroy(g));
    }
    for (void* w : ws) CHECK(cudaFree(w));
  }
  cera::cuda::matvec_int8_enable(int8_was_on);
  CHECK(cudaStreamDestroy(st));
}

}  // namespace

int main(int argc, char** argv) {
  using cera::GgmlType;
  const int nx = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::string only = argc > 3 ? argv[3] : "";  // "int8", "norm" or "chain": only that table
  cudaDeviceProp prop{};
  if (!first_cuda_device(prop)) return 0;
  std::printf("%s, %d SMs, L2 %d MB; n_x_rows=%d, %d reps; GB/s = weight bytes / time\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, nx, reps);
  std::printf("%-6s %-13s %10s %10s %8s %7s\n", "type", "shape", "MB", "us", "GB/s", "of 4TB/s");

  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q6_K,
                            GgmlType::Q5_K, GgmlType::Q5_1, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q4_1,
                            GgmlType::Q4_0, GgmlType::Q3_K, GgmlType::Q2_K};
  const struct { int64_t n_rows, k; } shapes[] = {{8192, 2048}, {2048, 8192}, {65536, 2048}};

  // One random row pattern, quantized per type and tiled over the matrix (content does not matter
  // for speed; quantizing every row on the host would dominate the run time).
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> row(8192);
  for (auto& v : row) v = nd(rng);

  float *dx = nullptr, *dy = nullptr, *dnorm = nullptr;
  CHECK(cudaMalloc(&dx, sizeof(float) * 8192 * 8));
  CHECK(cudaMalloc(&dy, sizeof(float) * 151936 * 8));
  CHECK(cudaMalloc(&dnorm, sizeof(float) * 8192));
  {
    std::vector<float> hx(8192 * 8), hn(8192, 1.0f);
    for (auto& v : hx) v = nd(rng);
    CHECK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dnorm, hn.data(), hn.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dy, 0, sizeof(float) * 151936 * 8));
  }
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  for (GgmlType t : types) {
    if (!only.empty()) break;
    for (const auto& s : shapes) {
      const size_t row_bytes = cera::cuda::device_row_bytes(t, s.k);
      const size_t bytes = row_bytes * size_t(s.n_rows);
      const std::vector<void*> bufs = make_copies(t, s.n_rows, s.k, row);
      const double sec = time_calls(bufs, reps, e0, e1, [&](void* w) {
        cera::cuda::matvec(t, w, s.n_rows, s.k, row_bytes, dx, s.k, nx, dy, s.n_rows, nullptr);
      });
      const double gbs = double(bytes) / sec / 1e9;
      char shape[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.n_rows, (long long)s.k);
      std::printf("%-6s %-13s %10.2f %10.2f %8.0f %7.1f%%\n", std::string(cera::ggml_type_name(t)).c_str(), shape,
                  double(bytes) / 1e6, sec * 1e6, gbs, 100.0 * gbs * 1e9 / kPeakBytesPerSec);
      for (auto b : bufs) CHECK(cudaFree(b));
    }
  }
  if (only.empty() || only == "int8") bench_int8(nx, reps, row, dx, dy, dnorm, e0, e1);
  if (only.empty() || only == "norm") bench_norm_fold(nx, reps, row, dx, dy, dnorm, e0, e1);
  if (only.empty() || only == "chain") bench_chain(nx, reps, dx, dy, dnorm, e0, e1);
  CHECK(cudaGetLastError());
  return 0;
}
