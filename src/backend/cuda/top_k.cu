// Backend::top_k_rows on the device: the k ≤ 1024 largest logits of every row, sorted, for sampling
// without moving rows × n_vocab floats to the host.
//
// Every element becomes a unique 64-bit key: the value's bits mapped to an unsigned integer with the
// same order (−0 and +0 the same), then the complement of its column, so larger keys are larger
// values and, on equal values, smaller columns. The top k are then the keys ≥ the k-th largest key,
// found by a radix select (8-bit digits, most significant first, stopping as soon as a digit bin holds
// exactly the keys still missing); NaN becomes key 0 and is never selected. This order is the CPU
// reference's exactly, so both backends return the same columns in the same order.
//
// Two launches for all rows:
//   1. (chunks × rows) blocks: each loads a chunk of a row into shared memory and keeps its chunk's
//      top k keys (unordered; 0 pads where the chunk has fewer) in the scratch;
//   2. one block per row: the top k of its chunks' candidates, bitonic-sorted, written as values and
//      ids.
// No allocation and no synchronisation: the scratch comes from the caller (graph-capturable).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/ops.h"

namespace cera::cuda {
namespace {

constexpr int kChunkThreads = 512;
constexpr int kMergeThreads = 1024;
constexpr int kMaxK = 1024;  // Backend::kMaxTopK

// Columns per stage-1 block: small chunks spread one row over many SMs; for large k, chunks of 8192
// keep the candidates of stage 2 at ≤ 1/8 of the row.
int32_t chunk_cols(int32_t k) { return k <= 256 ? 4096 : 8192; }

__device__ __forceinline__ uint32_t value_key(float f) {
  if (f != f) return 0u;  // NaN: below every number (their keys are ≥ 0x007FFFFF)
  const uint32_t u = f == 0.f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long make_key(uint32_t vkey, int32_t col) {
  return vkey == 0u ? 0ull : (static_cast<unsigned long long>(vkey) << 32) | static_cast<uint32_t>(~uint32_t(col));
}

__device__ __forceinline__ int32_t key_col(unsigned long long key) { return int32_t(~uint32_t(key)); }

struct SelectState {
  unsigned long long prefix;     // the digits fixed so far
  unsigned long long threshold;  // result: the selected keys are those ≥ threshold (≥ 1: never 0)
  uint32_t need;                 // keys still missing among those that match prefix
  uint32_t done;
  uint32_t count;                // collected so far
};

// Block-wide radix select over keys get(0..n) (0 = no candidate): sets st.threshold so that exactly
// min(k, non-zero keys) keys are ≥ it (the keys are unique). Ends with the block synchronised.
template <int kThreads, typename Get>
__device__ void radix_select(const Get& get, int32_t n, int32_t k, uint32_t* hist, SelectState& st) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    st.prefix = 0;
    st.threshold = 1;
    st.need = uint32_t(k);
    st.done = 0;
    st.count = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    const unsigned long long prefix = st.prefix;
    const unsigned long long mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
    for (int32_t base = 0; base < n; base += kThreads) {  // warp-uniform trip count for __match_any_sync
      const int32_t i = base + int32_t(threadIdx.x);
      uint32_t digit = 256;
      if (i < n) {
        const unsigned long long key = get(i);
        if (key != 0ull && (key & mask) == prefix) digit = uint32_t(key >> shift) & 255u;
      }
      // Logits crowd into a few bins: one shared atomic per distinct digit of the warp.
      const uint32_t peers = __match_any_sync(0xffffffffu, digit);
      if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], uint32_t(__popc(peers)));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255-8l down to 248-8l; an inclusive scan over lanes counts from the top.
      const uint32_t need = st.need;
      uint32_t local[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (local[j] = hist[255 - 8 * lane - j]);
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const uint32_t excl = incl - sum;
      __syncwarp();  // every lane has read st.need before one writes it
      if (excl < need && need <= incl) {
        uint32_t cum = excl;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (cum < need && need <= cum + local[j]) {
            const unsigned long long p = prefix | (static_cast<unsigned long long>(255 - 8 * lane - j) << shift);
            st.prefix = p;
            st.need = need - cum;
            if (local[j] == need - cum || shift == 0) {  // the whole bin is in: every key ≥ p
              st.threshold = p > 1ull ? p : 1ull;
              st.done = 1;
            }
          }
          cum += local[j];
        }
      }
      if (lane == 31 && incl < need) st.done = 1;  // fewer candidates than k: all of them (threshold 1)
    }
    __syncthreads();
    if (st.done) break;
  }
}

// Stage 1: the top k keys of one chunk of one row, unordered, 0-padded to k.
__global__ void __launch_bounds__(kChunkThreads)
    top_k_chunk_kernel(const float* x, int64_t xs, int32_t cols, int32_t k, int32_t chunk, unsigned long long* scratch) {
  extern __shared__ uint32_t vkeys[];
  __shared__ uint32_t hist[256];
  __shared__ SelectState st;
  const int32_t row = int32_t(blockIdx.y), c0 = int32_t(blockIdx.x) * chunk;
  const int32_t n = min(chunk, cols - c0);
  const float* src = x + int64_t(row) * xs + c0;
  for (int32_t i = threadIdx.x; i < n; i += kChunkThreads) vkeys[i] = value_key(src[i]);
  __syncthreads();
  const auto get = [&](int32_t i) { return make_key(vkeys[i], c0 + i); };
  radix_select<kChunkThreads>(get, n, k, hist, st);
  unsigned long long* out = scratch + (int64_t(row) * gridDim.x + blockIdx.x) * k;
  const unsigned long long threshold = st.threshold;
  for (int32_t i = threadIdx.x; i < n; i += kChunkThreads) {
    const unsigned long long key = get(i);
    if (key >= threshold) {
      const uint32_t at = atomicAdd(&st.count, 1u);
      if (at < uint32_t(k)) out[at] = key;
    }
  }
  __syncthreads();
  for (int32_t i = int32_t(min(st.count, uint32_t(k))) + int32_t(threadIdx.x); i < k; i += kChunkThreads) out[i] = 0ull;
}

// Stage 2: the top k of a row's n_chunks · k candidates, sorted descending; values read from the row.
__global__ void __launch_bounds__(kMergeThreads)
    top_k_merge_kernel(const float* x, int64_t xs, int32_t k, int32_t n_chunks, const unsigned long long* scratch,
                       float* values, int32_t* ids) {
  __shared__ unsigned long long sel[kMaxK];
  __shared__ uint32_t hist[256];
  __shared__ SelectState st;
  const int32_t row = int32_t(blockIdx.x);
  const unsigned long long* cand = scratch + int64_t(row) * n_chunks * k;
  const auto get = [&](int32_t i) { return cand[i]; };
  radix_select<kMergeThreads>(get, n_chunks * k, k, hist, st);
  int32_t width = 1;  // the sort's width: a power of two ≥ k
  while (width < k) width <<= 1;
  for (int32_t i = threadIdx.x; i < width; i += kMergeThreads) sel[i] = 0ull;
  __syncthreads();
  const unsigned long long threshold = st.threshold;
  for (int32_t i = threadIdx.x; i < n_chunks * k; i += kMergeThreads) {
    const unsigned long long key = cand[i];
    if (key >= threshold) {
      const uint32_t at = atomicAdd(&st.count, 1u);
      if (at < uint32_t(k)) sel[at] = key;
    }
  }
  __syncthreads();
  // Bitonic sort, descending (the 0 pads go last).
  for (int32_t size = 2; size <= width; size <<= 1) {
    for (int32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int32_t i = threadIdx.x; i < width; i += kMergeThreads) {
        const int32_t j = i ^ stride;
        if (j > i) {
          const unsigned long long a = sel[i], b = sel[j];
          if ((i & size) == 0 ? a < b : a > b) {
            sel[i] = b;
            sel[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  const float* src = x + int64_t(row) * xs;
  for (int32_t i = threadIdx.x; i < k; i += kMergeThreads) {
    const unsigned long long key = sel[i];
    const int32_t col = key != 0ull ? key_col(key) : -1;
    values[int64_t(row) * k + i] = col >= 0 ? src[col] : __int_as_float(0x7fc00000);
    ids[int64_t(row) * k + i] = col;
  }
}

}  // namespace

size_t top_k_scratch_bytes(int32_t rows, int32_t cols, int32_t k) {
  const int32_t chunk = chunk_cols(k);
  const int64_t n_chunks = (int64_t(cols) + chunk - 1) / chunk;
  return sizeof(unsigned long long) * size_t(rows) * size_t(n_chunks) * size_t(k);
}

void top_k_rows(const float* x, int64_t x_stride, int32_t rows, int32_t cols, int32_t k, void* scratch,
                float* values, int32_t* ids, cudaStream_t s) {
  if (rows <= 0) return;
  const int32_t chunk = chunk_cols(k);
  const int32_t n_chunks = int32_t((int64_t(cols) + chunk - 1) / chunk);
  auto* keys = static_cast<unsigned long long*>(scratch);
  top_k_chunk_kernel<<<dim3(uint32_t(n_chunks), uint32_t(rows)), kChunkThreads, sizeof(uint32_t) * size_t(chunk), s>>>(
      x, x_stride, cols, k, chunk, keys);
  CERA_CUDA_CHECK_LAUNCH();
  top_k_merge_kernel<<<rows, kMergeThreads, 0, s>>>(x, x_stride, k, n_chunks, keys, values, ids);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
