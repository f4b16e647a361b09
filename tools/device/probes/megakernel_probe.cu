// Would a persistent decode kernel beat a graph of PDL kernels on the Q4_0 step? (A probe, not part
// of the build: `nvcc -O3 -arch=sm_90a -o megakernel_probe megakernel_probe.cu && ./megakernel_probe`
// on the GPU machine.)
//
// The Q4_0 decode step of LFM2-1.2B is ~400 µs against ~152 µs of weight bytes: ~70 dependent
// products, each a kernel boundary (~2.5 µs, chain_probe.cu) plus the latency of loading its
// weights once its SMs drain. A persistent kernel could stream product n+1's weights into shared
// memory while product n computes (a Q4_0 product is at most 144 KB a block, so two fit an SM),
// paying a grid barrier (~3.5 µs, chain_probe.cu) instead of a boundary. This measures that idea on
// the step's 64 layer products (real shapes, random weights; the head, attention and conv left out)
// computed the same way in every variant — x quantized to int8 per 32, dp4a against the 4-bit
// weights — so the only difference is how the weights arrive:
//   A  one cooperative launch, one block an SM; each phase's block slice arrives by bulk copies
//      (TMA) into one of two shared-memory slots, phase n + 1's issued as phase n starts; phases
//      meet at a grid barrier;
//   A0 the same, each phase's copy issued only once its phase starts (no prefetch);
//   B  one kernel a phase in a graph with PDL, each block bulk-copying its slice before its wait;
//   timing floors (wrong outputs): A2 no weight traffic, A3 also no products (the barrier and x's
//   quantization), B' B with x already quantized in global memory (no quantization, no barrier).
// Checks: A, A0 and B give bit-identical outputs; phase 0 against a CPU reference.
// Args: [chunk KB of each bulk copy, default 16] [replays, default 20] [conv: no attention layers].
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "probe_common.cuh"

constexpr int kThreads = 512;
constexpr int kMaxK = 8192;
constexpr int kMaxPhases = 80;

// A product: rows × k Q4_0 weights, each row k/2 bytes of nibbles (byte j: element j low, j + 16
// high, as Q4_0) then k/32 f16 scales — Q4_0's 18 bytes per 32 weights, rows 16-byte aligned.
struct Phase {
  const uint8_t* w;
  int rows, k, block_rows;  // block_rows: rows a block owns (the last blocks may own fewer or none)
};
__constant__ Phase c_phases[kMaxPhases];

__host__ __device__ inline size_t row_bytes(int k) { return size_t(k) / 2 + size_t(k) / 16; }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_to_smem(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}" ::"r"(
          smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// Orders this block's generic-proxy shared-memory accesses before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Thread 0: requests this block's rows of phase p into `slot`, completing on `bar`.
__device__ void issue_phase(int p, uint8_t* slot, uint64_t* bar, unsigned chunk) {
  const Phase ph = c_phases[p];
  const int r0 = blockIdx.x * ph.block_rows, r1 = min(ph.rows, r0 + ph.block_rows);
  const unsigned bytes = r1 > r0 ? unsigned(size_t(r1 - r0) * row_bytes(ph.k)) : 0u;
  mbar_expect_tx(bar, bytes);
  const uint8_t* src = ph.w + size_t(max(r0, 0)) * row_bytes(ph.k);
  for (unsigned off = 0; off < bytes; off += chunk) bulk_to_smem(slot + off, src + off, min(chunk, bytes - off), bar);
}

// x (k floats, read through the L2: other blocks of this launch wrote it) as int8 per 32 with a
// scale and the block's sum of its int8 values (for Q4_0's -8 offset). 8 threads a block of 32.
__device__ void quantize_x(const float* x, int k, int8_t* xq, float* xs, int* xsum) {
  for (int i4 = threadIdx.x; i4 < k / 4; i4 += blockDim.x) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(x) + i4);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    const int q0 = __float2int_rn(v.x * inv), q1 = __float2int_rn(v.y * inv), q2 = __float2int_rn(v.z * inv),
              q3 = __float2int_rn(v.w * inv);
    int s = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    reinterpret_cast<uint32_t*>(xq)[i4] =
        (uint32_t(q0) & 0xff) | (uint32_t(q1) & 0xff) << 8 | (uint32_t(q2) & 0xff) << 16 | uint32_t(q3) << 24;
    if (i4 % 8 == 0) xs[i4 / 8] = amax / 127.f, xsum[i4 / 8] = s;
  }
}

// This block's rows of phase p from `slot`: a warp a row at a time, lane l owning the row's 32-weight
// blocks l, l + 32, ... (NB of them), whose x it holds in registers for all of the block's rows, so
// shared memory is read for the weights only.
template <int NB>
__device__ void compute_rows(const Phase& ph, const uint8_t* slot, const int8_t* xq, const float* xs, const int* xsum,
                             float* y) {
  const int r0 = blockIdx.x * ph.block_rows, r1 = min(ph.rows, r0 + ph.block_rows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t rb = row_bytes(ph.k);
  int4 xa[NB], xb[NB];
  float xsc[NB];
  int xo[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    const int b = lane + 32 * j;
    xa[j] = reinterpret_cast<const int4*>(xq)[2 * b], xb[j] = reinterpret_cast<const int4*>(xq)[2 * b + 1];
    xsc[j] = xs[b], xo[j] = 8 * xsum[b];
  }
  for (int r = r0 + warp; r < r1; r += blockDim.x / 32) {
    const uint8_t* row = slot + size_t(r - r0) * rb;
    const __half* sc = reinterpret_cast<const __half*>(row + ph.k / 2);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int b = lane + 32 * j;
      const uint4 q = reinterpret_cast<const uint4*>(row)[b];
      int s = __dp4a(int(q.x & 0x0f0f0f0fu), xa[j].x, 0);
      s = __dp4a(int(q.y & 0x0f0f0f0fu), xa[j].y, s);
      s = __dp4a(int(q.z & 0x0f0f0f0fu), xa[j].z, s);
      s = __dp4a(int(q.w & 0x0f0f0f0fu), xa[j].w, s);
      s = __dp4a(int((q.x >> 4) & 0x0f0f0f0fu), xb[j].x, s);
      s = __dp4a(int((q.y >> 4) & 0x0f0f0f0fu), xb[j].y, s);
      s = __dp4a(int((q.z >> 4) & 0x0f0f0f0fu), xb[j].z, s);
      s = __dp4a(int((q.w >> 4) & 0x0f0f0f0fu), xb[j].w, s);
      acc += float(s - xo[j]) * (__half2float(sc[b]) * xsc[j]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[r] = acc;
  }
}
__device__ void compute_phase(int p, const uint8_t* slot, const int8_t* xq, const float* xs, const int* xsum, float* y) {
  const Phase ph = c_phases[p];
  if (ph.k == 2048) compute_rows<2>(ph, slot, xq, xs, xsum, y);
  else compute_rows<8>(ph, slot, xq, xs, xsum, y);  // k = 8192 (main() makes no other)
}

struct SmemPlan {
  size_t slot0, slot1;  // the largest even / odd phase slice
  size_t x_off() const { return slot0 + slot1; }
  size_t bytes() const { return x_off() + kMaxK + 2 * sizeof(float) * (kMaxK / 32); }
};

struct XArea {
  int8_t* q;
  float* s;
  int* sum;
};
__device__ XArea x_area(uint8_t* smem, size_t off) {
  return {reinterpret_cast<int8_t*>(smem + off), reinterpret_cast<float*>(smem + off + kMaxK),
          reinterpret_cast<int*>(smem + off + kMaxK + sizeof(float) * (kMaxK / 32))};
}

// Phase p reads buf[(p + 1) % 2] (phase 0: the input in buf[1]) and writes buf[p % 2].
__global__ void __launch_bounds__(kThreads, 1)
    persistent_kernel(int n_phases, float* buf0, float* buf1, unsigned* count, unsigned* gen, size_t slot0,
                      size_t x_off, unsigned chunk, int mode) {
  // mode 0: A; 1: A0; timing floors, wrong outputs: 2 no weights (compute on what the slot holds),
  // 3 no weights and no products (the barrier and x's quantization only).
  const bool prefetch = mode == 0, weights = mode <= 1;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2];
  uint8_t* slot[2] = {smem, smem + slot0};
  const XArea xa = x_area(smem, x_off);
  if (threadIdx.x == 0) {
    mbar_init(&bars[0]);
    mbar_init(&bars[1]);
    fence_proxy_async();
    if (prefetch) issue_phase(0, slot[0], &bars[0], chunk);
  }
  __syncthreads();
  for (int p = 0; p < n_phases; ++p) {
    if (threadIdx.x == 0) {
      fence_proxy_async();  // the slot being refilled was last read by phase p - 1
      if (prefetch && p + 1 < n_phases) issue_phase(p + 1, slot[(p + 1) & 1], &bars[(p + 1) & 1], chunk);
      if (mode == 1) issue_phase(p, slot[p & 1], &bars[p & 1], chunk);
    }
    quantize_x((p & 1) ? buf0 : buf1, c_phases[p].k, xa.q, xa.s, xa.sum);
    __syncthreads();
    if (weights) mbar_wait(&bars[p & 1], unsigned(p >> 1) & 1u);
    if (mode <= 2) compute_phase(p, slot[p & 1], xa.q, xa.s, xa.sum, (p & 1) ? buf1 : buf0);
    grid_barrier(count, gen);
  }
}

__global__ void __launch_bounds__(kThreads)
    phase_kernel(int p, float* buf0, float* buf1, size_t x_off, unsigned chunk, XArea pre) {
  // pre.q set: a timing variant (wrong outputs) whose x arrives already quantized in global memory,
  // as if the previous product's epilogue had quantized it: no quantization and no block barrier
  // after the wait.
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bar;
  XArea xa = x_area(smem, x_off);
  if (threadIdx.x == 0) {
    mbar_init(&bar);
    fence_proxy_async();
    issue_phase(p, smem, &bar, chunk);  // weights: written by no kernel of the step
  }
  __syncthreads();
  pdl_trigger();
  pdl_wait();
  if (pre.q) {
    xa = pre;
  } else {
    quantize_x((p & 1) ? buf0 : buf1, c_phases[p].k, xa.q, xa.s, xa.sum);
    __syncthreads();
  }
  mbar_wait(&bar, 0);
  compute_phase(p, smem, xa.q, xa.s, xa.sum, (p & 1) ? buf1 : buf0);
}

// ---- host

// Phase 0 on the CPU, the GPU's arithmetic (float quantization, exact int dots).
std::vector<float> reference_phase0(const std::vector<uint8_t>& w, int rows, int k, const std::vector<float>& x) {
  const int nb = k / 32;
  std::vector<int8_t> xq(k);
  std::vector<float> xs(nb);
  std::vector<int> xsum(nb);
  for (int b = 0; b < nb; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int s = 0;
    for (int i = 0; i < 32; ++i) s += xq[b * 32 + i] = int8_t(std::nearbyint(x[b * 32 + i] * inv));
    xs[b] = amax / 127.f, xsum[b] = s;
  }
  std::vector<float> y(rows);
  const size_t rb = row_bytes(k);
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = w.data() + size_t(r) * rb;
    double acc = 0;
    for (int b = 0; b < nb; ++b) {
      int s = 0;
      for (int j = 0; j < 16; ++j) {
        s += int(row[b * 16 + j] & 15) * xq[b * 32 + j] + int(row[b * 16 + j] >> 4) * xq[b * 32 + 16 + j];
      }
      __half h;
      std::memcpy(&h, row + k / 2 + 2 * b, 2);
      acc += double(s - 8 * xsum[b]) * (double(__half2float(h)) * xs[b]);
    }
    y[r] = float(acc);
  }
  return y;
}

int main(int argc, char** argv) {
  unsigned chunk = unsigned(argc > 1 ? std::atoi(argv[1]) : 16) << 10;
  const int replays = argc > 2 ? std::atoi(argv[2]) : 20;
  int dev = 0, n_sm = 0, coop = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));

  // LFM2-1.2B's layer products: conv layers in_proj (3·2048) and out_proj, attention layers q/k/v
  // (2048 + 2·512) and o; every layer [gate; up] (2·8192) and down (k = 8192).
  // ("conv" as the third argument: every layer a conv layer, the shapes of cera_bench_cuda_matvec's
  // chain, which adds the head.)
  const bool all_conv = argc > 3 && std::strcmp(argv[3], "conv") == 0;
  bool attn[16] = {0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  if (all_conv) std::fill(attn, attn + 16, false);
  std::vector<std::pair<int, int>> shapes;  // rows, k
  for (int l = 0; l < 16; ++l) {
    shapes.push_back({attn[l] ? 3072 : 6144, 2048});
    shapes.push_back({2048, 2048});
    shapes.push_back({16384, 2048});
    shapes.push_back({2048, 8192});
  }
  const int n = int(shapes.size());
  std::vector<Phase> phases(n);
  std::vector<uint8_t*> dev_w(n);
  SmemPlan plan{0, 0};
  size_t total = 0;
  std::mt19937 rng(7);
  std::vector<uint8_t> w0;  // phase 0's weights, for the reference
  for (int p = 0; p < n; ++p) {
    const auto [rows, k] = shapes[p];
    const size_t rb = row_bytes(k), bytes = size_t(rows) * rb;
    std::vector<uint8_t> h(bytes);
    // Nibbles 1-15 (weights -7..7, mean 0: a mean would grow the outputs phase after phase) with
    // scales 1/sqrt(18.7 k), the weights' mean square: x keeps its magnitude from phase to phase.
    __half d = __float2half(1.f / std::sqrt(18.67f * float(k)));
    for (int r = 0; r < rows; ++r) {
      uint8_t* row = h.data() + size_t(r) * rb;
      for (int j = 0; j < k / 2; ++j) row[j] = uint8_t(1 + rng() % 15) | uint8_t(1 + rng() % 15) << 4;
      for (int b = 0; b < k / 32; ++b) std::memcpy(row + k / 2 + 2 * b, &d, 2);
    }
    if (p == 0) w0 = h;
    CHECK(cudaMalloc(&dev_w[p], bytes));
    CHECK(cudaMemcpy(dev_w[p], h.data(), bytes, cudaMemcpyHostToDevice));
    phases[p] = {dev_w[p], rows, k, (rows + n_sm - 1) / n_sm};
    const size_t slice = size_t(phases[p].block_rows) * rb;
    (p & 1 ? plan.slot1 : plan.slot0) = std::max(p & 1 ? plan.slot1 : plan.slot0, slice);
    total += bytes;
  }
  CHECK(cudaMemcpyToSymbol(c_phases, phases.data(), sizeof(Phase) * n));
  int max_smem = 0;
  CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  std::printf("%d phases, %.1f MB of Q4_0 weights (%.1f µs at 4.55 TB/s); slots %zu + %zu B, %zu of %d B shared\n",
              n, total / 1e6, total / 4.55e6, plan.slot0, plan.slot1, plan.bytes(), max_smem);
  if (plan.bytes() > size_t(max_smem) || !coop) {
    std::fprintf(stderr, "does not fit (or no cooperative launch)\n");
    return 1;
  }

  std::vector<float> x(16384, 0.f);
  std::normal_distribution<float> nd;
  for (int i = 0; i < 2048; ++i) x[i] = nd(rng);
  float *buf0, *buf1;
  unsigned *count, *gen;
  CHECK(cudaMalloc(&buf0, sizeof(float) * 16384));
  CHECK(cudaMalloc(&buf1, sizeof(float) * 16384));
  CHECK(cudaMalloc(&count, sizeof(unsigned)));
  CHECK(cudaMalloc(&gen, sizeof(unsigned)));
  CHECK(cudaMemset(count, 0, sizeof(unsigned)));
  CHECK(cudaMemset(gen, 0, sizeof(unsigned)));
  auto reset_input = [&] {
    CHECK(cudaMemcpy(buf1, x.data(), sizeof(float) * 16384, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(buf0, 0, sizeof(float) * 16384));
  };
  CHECK(cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.bytes())));
  // B's kernels take their own phase's slice and x area (small ones may share an SM with the next).
  const size_t x_bytes = kMaxK + 2 * sizeof(float) * (kMaxK / 32);
  CHECK(cudaFuncSetAttribute(phase_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.slot0 + x_bytes)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  size_t slot0 = plan.slot0, x_off = plan.x_off();
  auto launch_persistent = [&](int mode, int n_phases) {
    void* args[] = {&n_phases, &buf0, &buf1, &count, &gen, &slot0, &x_off, &chunk, &mode};
    CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(n_sm), dim3(kThreads), args, plan.bytes(), s));
  };
  // B: the phases as a graph of PDL launches; B' (exec_pre) the same with x taken pre-quantized.
  XArea pre{};
  CHECK(cudaMalloc(&pre.q, kMaxK));
  CHECK(cudaMalloc(&pre.s, sizeof(float) * (kMaxK / 32)));
  CHECK(cudaMalloc(&pre.sum, sizeof(int) * (kMaxK / 32)));
  CHECK(cudaMemset(pre.q, 1, kMaxK));
  CHECK(cudaMemset(pre.s, 0, sizeof(float) * (kMaxK / 32)));
  CHECK(cudaMemset(pre.sum, 0, sizeof(int) * (kMaxK / 32)));
  cudaGraphExec_t exec, exec_pre;
  for (int g = 0; g < 2; ++g) {
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int p = 0; p < n; ++p) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(n_sm);
      cfg.blockDim = dim3(kThreads);
      const size_t slice = size_t(phases[p].block_rows) * row_bytes(phases[p].k);
      cfg.dynamicSmemBytes = slice + x_bytes;
      cfg.stream = s;
      cudaLaunchAttribute a{};
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = &a;
      cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, phase_kernel, p, buf0, buf1, slice, chunk, g ? pre : XArea{}));
    }
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(g ? &exec_pre : &exec, graph, 0));
  }

  // Correctness: every variant's final output, bit for bit; phase 0 against the CPU.
  std::vector<float> out[3];
  std::vector<float> y0(shapes[0].first);
  const char* names[3] = {"A  persistent, next phase prefetched", "A0 persistent, no prefetch",
                          "B  graph of PDL kernels"};
  for (int v = 0; v < 3; ++v) {
    reset_input();
    if (v < 2) launch_persistent(v, n);
    else CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    out[v].resize(16384);
    const float* last = ((n - 1) & 1) ? buf1 : buf0;
    CHECK(cudaMemcpy(out[v].data(), last, sizeof(float) * 16384, cudaMemcpyDeviceToHost));
  }
  {  // phase 0 alone: a one-phase persistent launch
    reset_input();
    launch_persistent(0, 1);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(y0.data(), buf0, sizeof(float) * y0.size(), cudaMemcpyDeviceToHost));
  }
  const std::vector<float> ref = reference_phase0(w0, shapes[0].first, shapes[0].second, x);
  double err = 0, rms = 0;
  for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, double(std::fabs(ref[i] - y0[i]))), rms += ref[i] * ref[i];
  rms = std::sqrt(rms / ref.size());
  const bool same = out[0] == out[1] && out[0] == out[2];
  double orms = 0;
  for (int i = 0; i < shapes[n - 1].first; ++i) orms += out[0][i] * out[0][i];
  std::printf("phase 0 vs CPU: max |err| %.3g (rms %.3g); final outputs identical across variants: %s (rms %.3g)\n",
              err, rms, same ? "yes" : "NO", std::sqrt(orms / shapes[n - 1].first));
  if (!same || err > 1e-4 * rms) return 1;

  // Timing: `replays` steps back to back, after a warm-up; µs a step.
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const char* floors[3] = {"A2 persistent, no weights (floor)", "A3 no weights, no products",
                           "B' B with x pre-quantized (floor)"};
  for (int v = 0; v < 6; ++v) {
    std::vector<float> times;
    for (int rep = 0; rep < 3; ++rep) {
      for (int i = 0; i < replays + 1; ++i) {
        if (i == 1) CHECK(cudaEventRecord(e0, s));
        if (v == 2 || v == 5) CHECK(cudaGraphLaunch(v == 2 ? exec : exec_pre, s));
        else launch_persistent(v < 2 ? v : v - 1, n);
      }
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      times.push_back(ms * 1000.f / replays);
    }
    std::sort(times.begin(), times.end());
    const float us = times[1];
    std::printf("%-40s %7.1f µs a step, %5.2f µs a phase, %5.0f GB/s\n", v < 3 ? names[v] : floors[v - 3], us,
                us / n, total / (us * 1e3));
  }
  return 0;
}
