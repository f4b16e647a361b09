// Sums of M per-lane floats over a warp, with fewer shuffles than M separate butterflies.
//
// Why: a decode product's block ends with each lane holding a partial sum of each of its R rows
// (times NX activation rows); summing them as M = R·NX butterflies costs 5·M shuffles a warp, and
// the H200 issues one warp shuffle per clock per SM against four adds. Between the PDL wait and the
// block's end that shuffle pipe is on the critical path of every product.
//
// How (a reduce-scatter): while the count m of values is even, a step pairs value i with i + m/2;
// the lane whose bit o is set sends the first and keeps the second, its partner the reverse, so one
// shuffle per pair halves the values each lane holds while doubling the lanes each one sums. After
// kSteps halving steps the remaining kKept values are summed by plain butterflies over the lower
// lane bits. M = 8: 4 + 2 + 1 + 1 + 1 = 9 shuffles instead of 40; M = 16: 16 instead of 80.
// The order of additions is fixed by M and the lane, so results do not depend on timing.
// H200 tg128 against 5·M shuffles (matvec.cu's end of block, ab.sh, two rounds): LFM2-1.2B BF16
// 1,454 -> 1,474, Q4_0 `--parallel 1` 2,374 -> 2,415; Llama-3.2-1B BF16 1,309 -> 1,327, Q4_0
// 2,065 -> 2,104; Qwen3-0.6B Q4_0 +0.4 %.
#pragma once

#include <cuda_runtime.h>

namespace cera::cuda::detail {

template <int M>
struct WarpSum {
  static constexpr int halving_steps() {
    int s = 0;
    while (s < 5 && ((M >> s) & 1) == 0) ++s;
    return s;
  }
  static constexpr int kSteps = halving_steps();
  static constexpr int kKept = M >> kSteps;  // values each lane holds at the end

  // v[0..kKept) become the warp's totals of the values index(lane, 0..kKept) (v[kKept..M) are left
  // as scratch). All 32 lanes call it together.
  __device__ static __forceinline__ void run(float (&v)[M], int lane) { step<0>(v, lane); }

  // Which of the M inputs v[i] totals after run().
  __device__ static __forceinline__ int index(int lane, int i) {
    int idx = i;
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (lane & (16 >> s)) idx += M >> (s + 1);
    return idx;
  }

  // One lane of each group holding the same totals: the one that stores them.
  __device__ static __forceinline__ bool writer(int lane) { return (lane & ((32 >> kSteps) - 1)) == 0; }

  // Every lane gets all M totals (M a power of two up to 32): run(), then total u is read from the
  // first lane that holds it. 2·M - 1 + 5 - log2(M) shuffles instead of 5·M, one level deeper.
  __device__ static __forceinline__ void run_all(float (&v)[M], int lane) {
    static_assert(kKept == 1, "M must be a power of two up to 32");
    run(v, lane);
    const float own = v[0];
#pragma unroll
    for (int u = 0; u < M; ++u) v[u] = __shfl_sync(0xffffffffu, own, u << (5 - kSteps));
  }

 private:
  template <int S>
  __device__ static __forceinline__ void step(float (&v)[M], int lane) {
    if constexpr (S < kSteps) {
      constexpr int h = (M >> S) / 2;
      constexpr int o = 16 >> S;
      const bool upper = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < h; ++i) {
        const float send = upper ? v[i] : v[i + h];
        const float keep = upper ? v[i + h] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
      step<S + 1>(v, lane);
    } else {
#pragma unroll
      for (int o = 16 >> kSteps; o > 0; o >>= 1)
#pragma unroll
        for (int i = 0; i < kKept; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
    }
  }
};

}  // namespace cera::cuda::detail
