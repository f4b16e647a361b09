// The paged KV cache as the kernels see it: KvLayer's blocks with their element type (float or
// __half) fixed at compile time. Kernels read elements as float (kv_load) and write them rounded to
// nearest (kv_store), so one kernel body serves both cache types; launchers pick the instance with
// with_kv_view.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/ops.h"

namespace cera::cuda {

template <class T>
struct KvView {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __half>, "a KV cache holds float or __half");
  T* base;
  int32_t block_size;
  int32_t kv_dim;
};

// The element type of a KvView (for launchers holding one from with_kv_view).
template <class V>
using KvElem = std::remove_pointer_t<decltype(V::base)>;

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void kv_store(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_store(__half* p, float x) { *p = __float2half_rn(x); }
// x as the cache holds it (rounded to f16 for an f16 cache).
template <class T>
__device__ __forceinline__ T kv_cast(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return __float2half_rn(x);
}

// The head dim of a lane's e-th element (e < E = head dims / 32) in the decode kernels, which spread
// a head over a warp. An f32 cache: lane + 32e, a warp's loads of element e are 128 contiguous
// bytes. An f16 cache: in pairs, 64·(e/2) + 2·lane + e%2, so a lane reads elements e and e + 1 as
// one half2 and a warp still loads 128 bytes per instruction (one half per lane, 64 bytes per
// load, made 32 Qwen3-0.6B sequences after 2,048 tokens 35 % slower than with f32; in pairs 7 %
// faster, H200). q, the accumulators and the merged output follow the same map.
template <class T>
__device__ __forceinline__ int32_t lane_dim(int lane, int e) {
  if constexpr (std::is_same_v<T, __half>) return 64 * (e / 2) + 2 * lane + (e % 2);
  else return lane + 32 * e;
}
// Elements e of a lane's head row at p (its K or V): E of them, zero at or past hd.
template <int E>
__device__ __forceinline__ void kv_load_lane(const float* p, int32_t hd, float (&x)[E]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int32_t d = lane_dim<float>(lane, e);
    x[e] = d < hd ? p[d] : 0.f;
  }
}
// The same elements as the cache holds them: E floats (f32), or E / 2 pairs of halves (f16).
template <int E>
__device__ __forceinline__ void kv_load_words(const float* p, int32_t hd, float (&w)[E]) {
  kv_load_lane(p, hd, w);
}
template <int W2>
__device__ __forceinline__ void kv_load_words(const __half* p, int32_t hd, __half2 (&w)[W2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < W2; ++i) {
    const int32_t d = lane_dim<__half>(lane, 2 * i);  // even: hd is even, so d < hd means d + 1 < hd
    w[i] = d < hd ? *reinterpret_cast<const __half2*>(p + d) : __floats2half2_rn(0.f, 0.f);
  }
}
template <int E>
__device__ __forceinline__ void kv_load_lane(const __half* p, int32_t hd, float (&x)[E]) {
  static_assert(E % 2 == 0, "an f16 row is read in pairs");
  __half2 w[E / 2];
  kv_load_words(p, hd, w);
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const float2 f = __half22float2(w[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

// Key `pos` of a sequence (block table `table`): its K row; its V row is block_size · kv_dim further.
template <class T>
__device__ inline T* k_at(const KvView<T>& kv, const int32_t* table, int32_t pos) {
  const int32_t b = table[pos / kv.block_size];
  return kv.base + (int64_t(b) * 2 * kv.block_size + pos % kv.block_size) * kv.kv_dim;
}

// f(KvView<float>) or f(KvView<__half>), as the layer's cache holds.
template <class F>
inline void with_kv_view(const KvLayer& kv, F&& f) {
  if (kv.f16)
    f(KvView<__half>{static_cast<__half*>(kv.base), kv.block_size, kv.kv_dim});
  else
    f(KvView<float>{static_cast<float*>(kv.base), kv.block_size, kv.kv_dim});
}

}  // namespace cera::cuda
