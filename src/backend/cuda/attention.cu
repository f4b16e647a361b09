// Causal GQA attention over the paged F32 KV cache, flash-style (online softmax, no score matrix in
// memory). Two kernels of one family: a query-tiled kernel for prefill, where a block shares each K/V
// tile among up to 64 (token, head) rows; and a split-K kernel for decode, where one token per
// sequence leaves too little work per block unless each sequence's keys are spread over blocks.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include <cooperative_groups.h>

#include "backend/cuda/check.h"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/warp_sum.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/rope_head.cuh"
#include "cera/error.h"

namespace cera::cuda {
namespace {

namespace cg = cooperative_groups;

template <class T>
__global__ void store_kv_kernel(KvView<T> kv, StepView step, const float* k, int64_t ks, const float* v, int64_t vs) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t t = blockIdx.x;
  const DeviceSeq sq = step.seqs[step.token_seq[t]];
  const int32_t pos = sq.n_past + (t - sq.first_token);
  const int32_t* table = step.block_tables + sq.block_offset;
  T* kd = k_at(kv, table, pos);
  T* vd = kd + int64_t(kv.block_size) * kv.kv_dim;
  for (int32_t c = threadIdx.x; c < kv.kv_dim; c += blockDim.x) {
    kv_store(kd + c, k[int64_t(t) * ks + c]);
    kv_store(vd + c, v[int64_t(t) * vs + c]);
  }
}

// ---- prefill: grid (n_tiles, n_head_kv × row_chunks), 256 threads = 64 rows × 4 threads. A tile
// has kAttentionTileTokens × group rows (token, q head); a block takes 64 of them. Each row's
// 4 threads hold every 4th element of the head.
constexpr int kPrefillThreads = 256;
constexpr int kPrefillRows = 64;

template <int kMaxHd, class T>
__global__ void __launch_bounds__(kPrefillThreads) prefill_kernel(KvView<T> kv, StepView step, const float* q,
                                                                  int64_t qs, float* out, int64_t os,
                                                                  AttentionShape sh, int32_t group,
                                                                  int32_t row_chunks) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  constexpr int E = kMaxHd / 4;
  constexpr int KT = kMaxHd <= 128 ? 32 : 16;  // keys per shared-memory tile
  __shared__ float ks[KT][kMaxHd + 1];         // +1: rows land in different banks
  __shared__ float vs[KT][kMaxHd + 1];

  const int32_t hd = sh.head_dim;
  const AttentionTile tile = step.tiles[blockIdx.x];
  const DeviceSeq sq = step.seqs[tile.seq];
  const int32_t* table = step.block_tables + sq.block_offset;
  const int32_t kvh = blockIdx.y / row_chunks;
  const int32_t row = (blockIdx.y % row_chunks) * kPrefillRows + threadIdx.x / 4, part = threadIdx.x % 4;
  const bool valid = row < tile.n_tokens * group;
  const int32_t local = tile.first_local + (valid ? row / group : 0);
  const int32_t head = kvh * group + (valid ? row % group : 0);
  const int32_t batch_row = sq.first_token + local;
  const int32_t q_pos = sq.n_past + local;  // the query's own KV index: keys at or below it are visible

  float qv[E], acc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const int32_t d = part + 4 * i;
    qv[i] = (valid && d < hd) ? q[int64_t(batch_row) * qs + int64_t(head) * hd + d] : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  const int32_t n_keys = sq.n_past + tile.first_local + tile.n_tokens;
  for (int32_t k0 = 0; k0 < n_keys; k0 += KT) {
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < KT * hd; idx += kPrefillThreads) {
      const int32_t j = idx / hd, d = idx % hd;
      const int32_t pos = k0 + j;
      float kval = 0.f, vval = 0.f;
      if (pos < n_keys) {
        const T* kp = k_at(kv, table, pos) + int64_t(kvh) * hd;
        kval = kv_load(kp + d);
        vval = kv_load(kp + int64_t(kv.block_size) * kv.kv_dim + d);
      }
      ks[j][d] = kval;
      vs[j][d] = vval;
    }
    __syncthreads();

    float s[KT];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < E; ++i)
        if (part + 4 * i < hd) dot += qv[i] * ks[j][part + 4 * i];
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      s[j] = (valid && k0 + j <= q_pos) ? dot * sh.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing visible yet (or an idle row)
    const float corr = expf(m - m_new);
    l *= corr;
#pragma unroll
    for (int i = 0; i < E; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      const float p = expf(s[j] - m_new);
      l += p;
#pragma unroll
      for (int i = 0; i < E; ++i)
        if (part + 4 * i < hd) acc[i] += p * vs[j][part + 4 * i];
    }
    m = m_new;
  }
  if (!valid) return;
  const float inv = 1.f / l;
  float* o = out + int64_t(batch_row) * os + int64_t(head) * hd;
#pragma unroll
  for (int i = 0; i < E; ++i)
    if (part + 4 * i < hd) o[part + 4 * i] = acc[i] * inv;
}

// ---- decode: grid (T, n_head_kv * head_chunks, kDecodeSplits), 4 warps. A block takes up to
// kDecodeHeads q heads of one KV group over one split of the keys; each warp takes every 4th key,
// each lane every 32nd element of a head. Partial (m, l, unnormalised o) go to `partial`.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeHeads = 8;

// What a decode block (grid (T, n_head_kv × head_chunks, kDecodeSplits)) works on: token t, KV head
// kvh, q heads [h0, h0 + nh), and its split of the keys.
struct DecodeBlock {
  int32_t t, kvh, h0, nh, split;
};
// H: q heads per block.
template <int H>
__device__ inline DecodeBlock decode_block(int32_t group, int32_t head_chunks) {
  const int32_t kvh = blockIdx.y / head_chunks;
  const int32_t h0 = kvh * group + (blockIdx.y % head_chunks) * H;
  return {int32_t(blockIdx.x), kvh, h0, min(H, kvh * group + group - h0), int32_t(blockIdx.z)};
}

// The online softmax's start: each lane's elements of the nh q heads (q_at(g, d); zero past nh or
// head_dim; d = lane_dim<T>, the map of a cache of T), zero accumulators, m = -inf, l = 0.
template <class T, int H, int E, class QAt>
__device__ void start_heads(int32_t nh, int32_t hd, QAt q_at, float (&qv)[H][E], float (&acc)[H][E], float (&m)[H],
                            float (&l)[H]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int g = 0; g < H; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int32_t d = lane_dim<T>(lane, e);
      qv[g][e] = (g < nh && d < hd) ? q_at(g, d) : 0.f;
      acc[g][e] = 0.f;
    }
  }
}

// Keys whose K and V a warp loads together before using them (32 registers of each lane's share):
// an f16 cache's keys stay in pairs of halves (half2) until folded, so the same registers hold
// twice the keys, and a split twice the keys (kFusedKeysPerSplit). H200, f16 cache against f32
// (`CERA_CUDA_KV`, tg128 at depth 0 / after 4,096 tokens): with f32-sized batches of halves LFM2-1.2B
// BF16 -4 % after 4,096, Llama-3.2-1B -8 %, Qwen3-0.6B -12 %; with these -2 % / -1 %, -2 % / -1 %,
// +4 % / +3 % (docs/BENCHMARKS.md).
template <class T, int E>
inline constexpr int kKeyBatch = (std::is_same_v<T, __half> ? 2 : 1) * (E <= 2 ? 8 : E <= 4 ? 4 : 2);

// One batch of a warp's keys: jb, jb + W, ... (kKeyBatch of them, those < j1; W warps). Decode
// contexts are short, so the loads' latency, not their bytes, is what a key costs: a warp issues a
// whole batch's loads, then folds the keys in one by one, in the same order as one at a time.
// Element e of key u is k(u, e) (lane_dim<T>'s map), as float.
template <class T, int E>
struct KeyBatch {
  static constexpr bool kHalf = std::is_same_v<T, __half>;
  static constexpr int kWords = kHalf ? E / 2 : E;
  using Word = std::conditional_t<kHalf, __half2, float>;
  Word kw[kKeyBatch<T, E>][kWords], vw[kKeyBatch<T, E>][kWords];
  __device__ __forceinline__ float k(int u, int e) const { return element(kw[u], e); }
  __device__ __forceinline__ float v(int u, int e) const { return element(vw[u], e); }
  __device__ static __forceinline__ float element(const Word (&w)[kWords], int e) {
    if constexpr (kHalf) return e % 2 ? __high2float(w[e / 2]) : __low2float(w[e / 2]);
    else return w[e];
  }
};

// key_at(j) points at key j's head (in the cache's element type); its value is v_offset elements
// further, except that the key `own_k` (if given) has its value at own_v. Keys equal to `skip` are
// left unloaded.
template <class KeyAt>
using KeyPtr = decltype(std::declval<KeyAt&>()(int32_t(0)));
template <int W, class T, int E, class KeyAt>
__device__ void load_keys(int32_t jb, int32_t j1, int32_t hd, KeyAt key_at, int64_t v_offset, KeyBatch<T, E>& kb,
                          KeyPtr<KeyAt> own_k = nullptr, KeyPtr<KeyAt> own_v = nullptr, int32_t skip = -1) {
#pragma unroll
  for (int u = 0; u < kKeyBatch<T, E>; ++u) {
    const int32_t j = jb + u * W;
    if (j >= j1) break;
    if (j == skip) continue;  // filled in by the caller
    const auto kp = key_at(j);
    const auto vp = kp == own_k ? own_v : kp + v_offset;
    kv_load_words(kp, hd, kb.kw[u]);
    kv_load_words(vp, hd, kb.vw[u]);
  }
}

// Online softmax of the block's nh q heads (qv) over the batch's keys, as one update per head: the
// batch's dot products are reduced together (their shuffle chains interleave), then the running
// max, sum and output move once. Latency, not arithmetic, is what a decode key costs.
template <int W, int H, class T, int E>
__device__ void fold_keys(int32_t jb, int32_t j1, int32_t nh, const AttentionShape& sh, const float (&qv)[H][E],
                          float (&acc)[H][E], float (&m)[H], float (&l)[H], const KeyBatch<T, E>& kb) {
  constexpr int U = kKeyBatch<T, E>;
#pragma unroll
  for (int g = 0; g < H; ++g) {
    if (g >= nh) break;
    float s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      s[u] = 0.f;
      if (jb + u * W < j1)
#pragma unroll
        for (int e = 0; e < E; ++e) s[u] += qv[g][e] * kb.k(u, e);
    }
    // Every key of the batch is reduced, even past j1: skipping those (a warp-uniform branch per
    // key) broke the interleaving of the shuffle chains — H200 `--parallel 1` LFM2-1.2B BF16 1,432
    // -> 1,411, Llama-3.2-1B 1,253 -> 1,220, Qwen3-0.6B 1,517 -> 1,464; tg128 after 4,096 tokens
    // LFM2-1.2B 1,245 -> 1,120.
    // All U scores to every lane as one reduce-scatter and a broadcast (warp_sum.cuh): 17 shuffles
    // instead of 40 for 8 keys. H200 `--parallel 1`: Llama-3.2-1B BF16 1,281 -> 1,287, LFM2-1.2B
    // BF16 1,457 -> 1,463; tg128 Qwen3-0.6B BF16 1,638 -> 1,652.
    detail::WarpSum<U>::run_all(s, threadIdx.x & 31);
    float mx = m[g];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (jb + u * W < j1) mx = fmaxf(mx, s[u] * sh.scale);
    const float corr = expf(m[g] - mx);  // 0 while m is -inf; mx is finite (the batch has a key)
    l[g] *= corr;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] *= corr;
    m[g] = mx;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (jb + u * W >= j1) break;
      const float p = expf(s[u] * sh.scale - mx);
      l[g] += p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] += p * kb.v(u, e);
    }
  }
}

// Online softmax of the block's nh q heads over keys [j0, j1) a batch at a time (the fused decode
// layer: few sequences, where latency is what a key costs): each of the W warps takes every W-th
// key, each lane every 32nd element; `first` is the warp's first batch, already loaded. key_at /
// own_k / own_v as in load_keys.
template <int W, int H, class T, int E, class KeyAt>
__device__ void attend_key_batches(int32_t j0, int32_t j1, int32_t nh, const AttentionShape& sh,
                                   const float (&qv)[H][E], float (&acc)[H][E], float (&m)[H], float (&l)[H],
                                   KeyAt key_at, int64_t v_offset, KeyPtr<KeyAt> own_k, KeyPtr<KeyAt> own_v,
                                   const KeyBatch<T, E>& first) {
  const int warp = threadIdx.x / 32;
  constexpr int32_t kStride = W * kKeyBatch<T, E>;
  // The next batch's loads are issued before this one is folded, so a warp's folding overlaps its
  // next loads instead of waiting for them (no spills: ≤ 128 registers at 16 warps). H200, tg128
  // after 3,800 tokens (`cera bench -d`), same start: LFM2-1.2B BF16 1,216, 1,213 -> 1,271, 1,266,
  // Llama-3.2-1B 919, 921 -> 1,009, 1,008, Qwen3-0.6B 912, 914 -> 952, 952; after 1,000 and at 0
  // within the spread.
  KeyBatch<T, E> cur = first;
  for (int32_t jb = j0 + warp; jb < j1; jb += kStride) {
    KeyBatch<T, E> next;
    if (jb + kStride < j1) load_keys<W>(jb + kStride, j1, sh.head_dim, key_at, v_offset, next, own_k, own_v);
    fold_keys<W>(jb, j1, nh, sh, qv, acc, m, l, cur);
    cur = next;
  }
}

// The same one key at a time (the split-K decode kernel of larger batches, which many sequences
// keep busy: batches measured slower there, 46k vs 56k tokens/s at 128 LFM2-1.2B sequences).
template <int E, class KeyAt>
__device__ void attend_keys(int32_t j0, int32_t j1, int32_t nh, const AttentionShape& sh,
                            const float (&qv)[kDecodeHeads][E], float (&acc)[kDecodeHeads][E], float (&m)[kDecodeHeads],
                            float (&l)[kDecodeHeads], KeyAt key_at, int64_t v_offset) {
  const int warp = threadIdx.x / 32;
  const int32_t hd = sh.head_dim;
  for (int32_t j = j0 + warp; j < j1; j += kDecodeWarps) {
    const auto kp = key_at(j);
    const auto vp = kp + v_offset;
    float kr[E], vr[E];
    kv_load_lane(kp, hd, kr);
    kv_load_lane(vp, hd, vr);
#pragma unroll
    for (int g = 0; g < kDecodeHeads; ++g) {
      if (g >= nh) break;
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot += qv[g][e] * kr[e];
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const float s = dot * sh.scale;
      if (s > m[g]) {
        const float corr = expf(m[g] - s);
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= corr;
        m[g] = s;
      }
      const float p = expf(s - m[g]);
      l[g] += p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] += p * vr[e];
    }
  }
}

// Merges the block's warps' partial softmaxes for its nh heads and writes this split's part
// (m, l, unnormalised o) of each (token t, head h0 + g) to `partial` (the split-K decode kernel;
// the fused one merges its warps with merge_warps).
template <class T, int kMaxHd, int E = kMaxHd / 32>
__device__ void write_split(float (&sm_m)[kDecodeWarps][kDecodeHeads], float (&sm_l)[kDecodeWarps][kDecodeHeads],
                            float (&sm_o)[kDecodeWarps][kDecodeHeads][kMaxHd], const float (&m)[kDecodeHeads],
                            const float (&l)[kDecodeHeads], const float (&acc)[kDecodeHeads][E], float* partial,
                            int32_t t, int32_t h0, int32_t nh, int32_t split, const AttentionShape& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t hd = sh.head_dim;
#pragma unroll
  for (int g = 0; g < kDecodeHeads; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      sm_o[warp][g][lane_dim<T>(lane, e)] = acc[g][e];  // E · 32 = kMaxHd: every index is in range
  }
  __syncthreads();
  const int32_t stride = hd + 2;
  for (int32_t g = warp; g < nh; g += kDecodeWarps) {
    float mm = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) mm = fmaxf(mm, sm_m[w][g]);
    float ll = 0.f;
    for (int w = 0; w < kDecodeWarps; ++w)
      if (sm_m[w][g] != -INFINITY) ll += sm_l[w][g] * expf(sm_m[w][g] - mm);
    float* dst = partial + ((int64_t(t) * sh.n_head + h0 + g) * kDecodeSplits + split) * stride;
    for (int32_t d = lane; d < hd; d += 32) {
      float o = 0.f;
      for (int w = 0; w < kDecodeWarps; ++w)
        if (sm_m[w][g] != -INFINITY) o += sm_o[w][g][d] * expf(sm_m[w][g] - mm);
      dst[2 + d] = o;
    }
    if (lane == 0) {
      dst[0] = mm;
      dst[1] = ll;
    }
  }
}


template <int kMaxHd, class T>
__global__ void __launch_bounds__(kDecodeWarps * 32) decode_kernel(KvView<T> kv, StepView step, const float* q,
                                                                   int64_t qs, AttentionShape sh, int32_t group,
                                                                   int32_t head_chunks, float* partial) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  constexpr int E = kMaxHd / 32;
  __shared__ float sm_m[kDecodeWarps][kDecodeHeads], sm_l[kDecodeWarps][kDecodeHeads];
  __shared__ float sm_o[kDecodeWarps][kDecodeHeads][kMaxHd];

  const DecodeBlock blk = decode_block<kDecodeHeads>(group, head_chunks);  // (lambdas below capture its fields)
  const int32_t t = blk.t, kvh = blk.kvh, h0 = blk.h0, nh = blk.nh, split = blk.split;
  const int32_t hd = sh.head_dim;

  const DeviceSeq sq = step.seqs[step.token_seq[t]];
  const int32_t* table = step.block_tables + sq.block_offset;
  const int32_t n_keys = sq.n_past + (t - sq.first_token) + 1;
  const int32_t per = (n_keys + kDecodeSplits - 1) / kDecodeSplits;
  const int32_t j0 = split * per, j1 = min(n_keys, j0 + per);

  float qv[kDecodeHeads][E], acc[kDecodeHeads][E], m[kDecodeHeads], l[kDecodeHeads];
  start_heads<T>(nh, hd, [&](int32_t g, int32_t d) { return q[int64_t(t) * qs + int64_t(h0 + g) * hd + d]; }, qv, acc,
                 m, l);

  attend_keys(j0, j1, nh, sh, qv, acc, m, l, [&](int32_t j) { return k_at(kv, table, j) + int64_t(kvh) * hd; },
              int64_t(kv.block_size) * kv.kv_dim);

  write_split<T>(sm_m, sm_l, sm_o, m, l, acc, partial, t, h0, nh, split, sh);
}

// One warp merges the first n_split (≤ kDecodeSplits ≤ 32) parts of one (token, head) into
// out[0..hd): part(s) points at part s, (m, l, o[0..hd)), and load(ptr) reads one of its floats.
// Two rounds of loads, not a chain per part: lane s takes part s's (m, l), the warp reduces them,
// then every part's o loads at once (the loop over parts is unrolled).
template <class PartAt, class Load>
__device__ void combine_parts(PartAt part, Load load, float* out, int32_t hd, int32_t n_split) {
  static_assert(kDecodeSplits <= 32, "a lane per split");
  const int lane = threadIdx.x & 31;
  const float ms = lane < n_split ? load(part(lane)) : -INFINITY;
  const float ls = lane < n_split ? load(part(lane) + 1) : 0.f;
  float mm = ms;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
  const float c = ms == -INFINITY ? 0.f : expf(ms - mm);  // a part without keys weighs nothing
  float l = ls * c;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  const float inv = 1.f / l;
  float cs[kDecodeSplits];  // every part's weight, in every lane (before the loop: hd may not be a multiple of 32)
#pragma unroll
  for (int s = 0; s < kDecodeSplits; ++s) cs[s] = __shfl_sync(0xffffffffu, c, s);
  for (int32_t d = lane; d < hd; d += 32) {
    float o = 0.f;
#pragma unroll
    for (int s = 0; s < kDecodeSplits; ++s)
      if (s < n_split) o += cs[s] * load(part(s) + 2 + d);
    out[d] = o * inv;
  }
}

// The parts of one (token, head) in `partial`, kDecodeSplits apart, through L2 (__ldcg): in the
// fused kernel they were written by other blocks of the same grid.
__device__ void combine_splits(const float* p, float* out, int32_t hd, int32_t n_split = kDecodeSplits) {
  const int32_t stride = hd + 2;
  combine_parts([&](int s) { return p + s * stride; }, [](const float* x) { return __ldcg(x); }, out, hd, n_split);
}

// Thread block clusters (sm_90): the fused decode kernel's splits of one head group are one
// cluster, and merge through distributed shared memory. Compiled to nothing below sm_90, where
// the kernel is never launched with clusters.
__device__ __forceinline__ void cluster_sync_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::this_cluster().sync();
#endif
}
template <class T>
__device__ __forceinline__ T* cluster_peer(T* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cg::this_cluster().map_shared_rank(p, rank);
#else
  return p;
#endif
}

// ---- fused decode: the decode kernel above with its neighbours folded in, one launch per layer
// instead of four (qk_norm_rope, store_kv, decode, combine), which at batch 1 are latency, not work.
// Each block normalises and rotates its own q heads and the token's k head in shared memory (the
// same per-head arithmetic as qk_norm_rope, redone by each split: a few hundred flops); the split-0
// block of a KV head's first chunk writes the token's k/v into the cache, and no block reads that
// slot from the cache in this launch (the token's own key comes from shared memory), so there is
// no race. On sm_90 the splits of a (token, head chunk) are one thread block cluster of 2 to
// kClusterSplits blocks (cluster_size): each leaves its merged part in its shared memory and split 0 reads them
// through distributed shared memory between two cluster barriers (H200, Qwen3-0.6B BF16 with
// 2-4 splits: see docs/BENCHMARKS.md). Elsewhere (or CERA_CUDA_ATTENTION_CLUSTER=0) the grid has
// kDecodeSplits splits, and the last block of a (token, head chunk) to finish, found with a
// counter, merges them from global memory (threadfence-reduction pattern) and resets the counter.
// The grid has a fixed number of splits (a captured graph replays it at every context length), but
// only the first n_split = ⌈n_keys / kFusedKeysPerSplit⌉ (at most that number) work: short contexts
// take few splits, and a context of ≤ kFusedKeysPerSplit keys is one block per head group that
// writes its output directly, with no partials, counter or merge.
// A block is kFusedWarps warps over kFusedHeads q heads, and a split is as many keys as its warps
// load in one batch each, before the PDL wait: the keys' loads overlap the products before the
// layer, and after the wait a split folds in keys already in registers. Head dims up to 64 take
// 128 keys per split, 80-128 take 64 (twice that from an f16 cache, whose batches hold twice the
// keys: kKeyBatch), so a short decode needs no merge between blocks. (The
// previous shape, 4 warps and 32 keys per split, measured tg128 2-4 % slower on LFM2-1.2B and
// Llama-3.2-1B and 11 % slower on Qwen3-0.6B (28 attention layers, head dim 128), H200.)
// Up to 4 q heads a block (kFusedHeads): steps of several tokens take 4, since twice the blocks
// would not fit an 8-sequence step's clusters in one wave (decode_clusters_usable; not measured).
// A one-token step's shape follows its context span (fused_shape below; H200, `cera bench
// --parallel 1 --parallel-prompt D`, the shapes alternating on one machine start, BENCHMARKS.md):
// * up to kClusterMinKeys keys (span 0): 1 q head a block where a KV head has more than 2. The
//   folding of the keys (a chain of shuffles and exps per head, 16 warps on one SM) was the layer's
//   longest step, and LFM2-1.2B's 8 KV-head groups of 4 ran on 8 SMs with 4 heads a block; each
//   block loads its KV head's keys, the later loads mostly from L2. At D = 100: LFM2-1.2B BF16
//   1,393 (4 heads) / 1,435 (2) / 1,451 (1), Llama-3.2-1B 1,185 / 1,277 / 1,294. Groups of 2 keep
//   2: 1 head measured Qwen3-0.6B tg128 (contexts 1-128, host-fed) 1,551, 1,537 against 1,567,
//   1,579 (Q4_0 1,664, 1,653 against 1,686, 1,674), `--parallel 1` and LFM2-350M within 0.3 %.
// * up to kLongContextSpan / 2 keys: 2 heads a block (kFusedHeadsOneToken), splits as clusters;
//   with 1 head a block, 4× the clusters of 4 heads do not fit at once and fall back to global
//   merges (D = 2048: LFM2-1.2B 1,147 with 1 head, 1,256 with 2, 1,229 with 4).
// * longer: kDecodeSplits single blocks a KV head, each over all of its q heads (up to 4), so every
//   key is read once per step, merged through global memory (an 8-block cluster's blocks each
//   fold twice the keys of one of 16 splits). D = 3,800, clusters of 2 heads -> this:
//   LFM2-1.2B 1,208 -> 1,227, Llama-3.2-1B 910 -> 932, Qwen3-0.6B 844 -> 925; at D = 1,200 and
//   1,800 (span 2048) it measured Qwen3 6 % and 1 % slower, LFM2 and Llama within 2 % either way.
constexpr int kFusedHeads = 4;
constexpr int kFusedHeadsOneToken = 2;
// The most splits per head group when they run as one thread block cluster: 8, the portable
// cluster size (each block fills an SM, and a cluster's blocks share one GPC).
constexpr int kClusterSplits = 8;
template <int kMaxHd>
inline constexpr int kFusedWarps = kMaxHd <= 128 ? 16 : 8;  // shared memory: sm.o is W · H · kMaxHd floats
template <int kMaxHd, class T>
inline constexpr int32_t kFusedKeysPerSplit = kFusedWarps<kMaxHd> * kKeyBatch<T, kMaxHd / 32>;

// The W warps' online-softmax parts of the block's H heads, merged in shared memory.
template <int kMaxHd, int W, int H>
struct WarpParts {
  float m[W][H], l[W][H], c[W][H], mm[H], ll[H];
  float o[W][H][kMaxHd];
};

// Merges the warps' parts (m, l, acc) of heads g < nh and writes, for head g at dst + g·head_stride,
// either the normalised output (direct) or the split's part (m, l, unnormalised o: what
// combine_splits reads). Each output sums the warps in a fixed order: replays are bit for bit.
template <class T, int kMaxHd, int W, int H, int E>
__device__ void merge_warps(WarpParts<kMaxHd, W, H>& sm, const float (&m)[H], const float (&l)[H],
                            const float (&acc)[H][E], int32_t nh, int32_t hd, float* dst, int64_t head_stride,
                            bool direct) {
  static_assert(W >= H && W <= 32, "warp g merges head g, lane w reads warp w's part");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int g = 0; g < H; ++g) {
    if (lane == 0) sm.m[warp][g] = m[g], sm.l[warp][g] = l[g];
#pragma unroll
    for (int e = 0; e < E; ++e) sm.o[warp][g][lane_dim<T>(lane, e)] = acc[g][e];
  }
  __syncthreads();
  if (warp < nh) {  // each warp's weight exp(m_w - max m) in head `warp`, and the merged l
    const int g = warp;
    const float mw = lane < W ? sm.m[lane][g] : -INFINITY;
    float mm = mw;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
    const float c = mw == -INFINITY ? 0.f : expf(mw - mm);  // a warp without keys weighs nothing
    float ll = lane < W ? sm.l[lane][g] * c : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ll += __shfl_xor_sync(0xffffffffu, ll, o);
    if (lane < W) sm.c[lane][g] = c;
    if (lane == 0) sm.mm[g] = mm, sm.ll[g] = ll;
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < nh * hd; i += W * 32) {
    const int32_t g = i / hd, d = i % hd;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) o += sm.o[w][g][d] * sm.c[w][g];
    float* head = dst + g * head_stride;
    if (direct) {
      head[d] = o * (1.f / sm.ll[g]);
      continue;
    }
    head[2 + d] = o;
    if (d == 0) head[0] = sm.mm[g], head[1] = sm.ll[g];
  }
}

template <int kMaxHd, bool kCluster, int H, class T>
__global__ void __launch_bounds__(kFusedWarps<kMaxHd> * 32)
    decode_fused_kernel(KvView<T> kv, StepView step, DecodeQkv in, AttentionShape sh, int32_t group, int32_t head_chunks,
                        float* partial, unsigned* done, float* out, int64_t os) {
  // The next kernel (an output projection) launches after this block's PDL wait, not before: its
  // blocks' weight loads would queue ahead of this layer's dependent loads (H200, Qwen3-0.6B BF16
  // with 28 of these layers: tg128 1,433 -> 1,500 tokens/s; LFM2-1.2B and Llama-3.2-1B unchanged).
  trace::trace_block_started();
  constexpr int E = kMaxHd / 32, W = kFusedWarps<kMaxHd>;
  __shared__ WarpParts<kMaxHd, W, H> sm;
  __shared__ float sm_q[H][kMaxHd], sm_k[kMaxHd], sm_v[kMaxHd];
  __shared__ __align__(16) T sm_kc[kMaxHd];  // the token's k and v as the cache holds them (read
  __shared__ __align__(16) T sm_vc[kMaxHd];  // in pairs, like the cache, by kv_load_words)
  __shared__ bool sm_last;

  // Before the PDL wait (pdl.h): the step's metadata, the RoPE angles and the warp's first batch of
  // cached keys. None of it is written by a kernel of this step — the cache slots before the
  // token's were filled by earlier steps, and its own slot is written only by this launch and
  // read from shared memory — so a decode layer's dependent loads overlap the products before it
  // and only the token's q, k and v are read after the wait.
  const DecodeBlock blk = decode_block<H>(group, head_chunks);  // (lambdas below capture its fields)
  const int32_t t = blk.t, kvh = blk.kvh, h0 = blk.h0, nh = blk.nh, split = blk.split;
  const int32_t hd = sh.head_dim;
  const DeviceSeq sq = step.seqs[step.tokens_are_seqs ? t : step.token_seq[t]];
  const int32_t* table = step.block_tables + sq.block_offset;
  const int32_t slot = sq.n_past + (t - sq.first_token);  // the token's cache position
  const int32_t n_keys = slot + 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int32_t kKeys = kFusedKeysPerSplit<kMaxHd, T>;
  const int32_t n_split = min(int32_t(gridDim.z), (n_keys + kKeys - 1) / kKeys);
  if (split >= n_split) {  // block-uniform: no barrier below is skipped by part of a block
    pdl_trigger_dependents();
    // An idle block of a single-block grid reads and writes nothing, and split 0 always works and
    // waits, so the grid still ends after the kernel before it (pdl.h's exception). Leaving at once
    // frees its SM (a block takes up to 56 K registers) for the working blocks and the next kernel:
    // H100, tg128, two rounds, +0.3-0.5 % on Llama-3.2-1B BF16 and LFM2-1.2B Q4_0 (docs/BENCHMARKS.md).
    // A trace records the exit as the block's wait.
    if (kCluster) pdl_wait();
    else trace::trace_block_waited();
    if (kCluster && n_split > 1) cluster_sync_all(), cluster_sync_all();  // the cluster's two barriers below
    return;
  }
  const int32_t per = (n_keys + n_split - 1) / n_split;
  const int32_t j0 = split * per, j1 = min(n_keys, j0 + per);
  const int64_t v_offset = int64_t(kv.block_size) * kv.kv_dim;
  auto cached_key = [&](int32_t j) -> const T* { return k_at(kv, table, j) + int64_t(kvh) * hd; };
  constexpr int P = kMaxHd / 64;  // RoPE pairs a lane rotates
  const bool has_rope = in.rope.n_rot > 0;
  // A cluster's blocks start late (a GPC's SMs come free only once the products before end), so
  // its wait has usually passed when the preamble ends and the angles (sines and cosines in double)
  // would delay the q load: a cluster block requests the angles' inputs first and computes them
  // after the wait, while the token's q, k and v load (`--parallel 1`, contexts of 129-256 keys:
  // this code on an H100, Llama-3.2-1B BF16 +1.5 %, Qwen3-0.6B BF16 +2.8 %; its first form on an
  // H200 +1.9 % / +3.4 %; single blocks, which mostly start before the products end, lost ~1 % on
  // LFM2-1.2B Q4_0 that way on the H200 and keep the angles here).
  RopeLaneInputs<P> rope_in{};
  if (kCluster && has_rope) rope_in = rope_lane_inputs<P>(in.rope, step.positions[t]);
  KeyBatch<T, E> first;
  load_keys<W>(j0 + warp, j1, hd, cached_key, v_offset, first, nullptr, nullptr, slot);
  RopeLane<P> rot{};
  if (!kCluster && has_rope) rot = rope_lane<P>(in.rope, step.positions[t]);
  // The warp's q or k norm weight too: after the wait, only the token's q, k and v are read.
  const NormLane<P> norm_w = norm_lane<P>(warp < nh ? in.q_norm : warp == W - 1 ? in.k_norm : nullptr, hd);
  trace::trace_mark(4);  // the preamble issued (single blocks: angles computed; key loads may be in flight)
  pdl_wait();
  pdl_trigger_dependents();

  // The block's q heads and the token's k head, normalised and rotated, and its v head.
  if constexpr (kCluster) {
    // Each warp holds at most one q head (nh ≤ H < W - 1): its loads are issued before the angles
    // are computed, and land in shared memory after.
    static_assert(H < W - 1, "one q head a warp, and the k/v warp is none of them");
    const bool q_warp = warp < nh, kv_warp = warp == W - 1;
    const float* src_a = q_warp    ? in.q + int64_t(t) * in.q_stride + int64_t(h0 + warp) * hd
                         : kv_warp ? in.k + int64_t(t) * in.k_stride + int64_t(kvh) * hd
                                   : nullptr;
    const float* src_b = in.v + int64_t(t) * in.v_stride + int64_t(kvh) * hd;
    float a[E], b[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int32_t d = lane + 32 * e;
      a[e] = src_a && d < hd ? src_a[d] : 0.f;
      b[e] = kv_warp && d < hd ? src_b[d] : 0.f;
    }
    if (has_rope) rot = rope_lane_angles(rope_in);
    float* dst_a = q_warp ? sm_q[warp] : sm_k;
    if (q_warp || kv_warp) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int32_t d = lane + 32 * e;
        if (d < hd) dst_a[d] = a[e];
        if (kv_warp && d < hd) sm_v[d] = b[e];
      }
      __syncwarp();
      norm_rope_head(dst_a, (q_warp ? in.q_norm : in.k_norm) != nullptr, norm_w, in.eps, hd, in.rope, rot);
    }
  } else {
    for (int32_t g = warp; g < nh; g += W) {
      const float* src = in.q + int64_t(t) * in.q_stride + int64_t(h0 + g) * hd;
      for (int32_t d = lane; d < hd; d += 32) sm_q[g][d] = src[d];
      __syncwarp();
      norm_rope_head(sm_q[g], in.q_norm != nullptr, norm_w, in.eps, hd, in.rope, rot);
    }
    if (warp == W - 1) {
      const float* ks = in.k + int64_t(t) * in.k_stride + int64_t(kvh) * hd;
      const float* vs = in.v + int64_t(t) * in.v_stride + int64_t(kvh) * hd;
      for (int32_t d = lane; d < hd; d += 32) sm_k[d] = ks[d], sm_v[d] = vs[d];
      __syncwarp();
      norm_rope_head(sm_k, in.k_norm != nullptr, norm_w, in.eps, hd, in.rope, rot);
    }
  }
  if (warp == W - 1) {
    // The token's key takes part in its own attention as the cache stores it (rounded for an f16
    // cache), as it will in every later step.
    for (int32_t d = lane; d < hd; d += 32) sm_kc[d] = kv_cast<T>(sm_k[d]), sm_vc[d] = kv_cast<T>(sm_v[d]);
  }
  __syncthreads();
  trace::trace_mark(1);  // q and k normalised and rotated
  if (split == 0 && blockIdx.y % head_chunks == 0) {
    T* kd = k_at(kv, table, slot) + int64_t(kvh) * hd;
    T* vd = kd + v_offset;
    for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) kd[d] = sm_kc[d], vd[d] = sm_vc[d];
  }
  // The token's own key, if it is in the first batch, from shared memory.
#pragma unroll
  for (int u = 0; u < kKeyBatch<T, E>; ++u)
    if (j0 + warp + u * W == slot && slot < j1) {
      kv_load_words(sm_kc, hd, first.kw[u]);
      kv_load_words(sm_vc, hd, first.vw[u]);
    }

  float qv[H][E], acc[H][E], m[H], l[H];
  start_heads<T>(nh, hd, [&](int32_t g, int32_t d) { return sm_q[g][d]; }, qv, acc, m, l);
  trace::trace_mark(5);  // the token's k/v stored, the heads' q in registers: folding starts
  // Later batches: the token's own key and value come from shared memory (own_k / own_v).
  attend_key_batches<W>(j0, j1, nh, sh, qv, acc, m, l,
                        [&](int32_t j) -> const T* { return j == slot ? sm_kc : cached_key(j); }, v_offset, sm_kc,
                        sm_vc, first);
  trace::trace_mark(2);  // thread 0's keys folded in
  if (n_split == 1) {  // this block saw every key
    merge_warps<T>(sm, m, l, acc, nh, hd, out + int64_t(t) * os + int64_t(h0) * hd, hd, true);
    trace::trace_mark(3);  // merged and written
    return;
  }
  if constexpr (kCluster) {  // split = the block's rank in its cluster, which is this head group's splits
    __shared__ float sm_part[H][kMaxHd + 2];
    merge_warps<T>(sm, m, l, acc, nh, hd, &sm_part[0][0], kMaxHd + 2, false);
    cluster_sync_all();  // every split's part is in its block's shared memory
    if (split == 0)
      for (int32_t g = warp; g < nh; g += W)
        combine_parts([&](int r) -> const float* { return cluster_peer(&sm_part[g][0], r); },
                      [](const float* x) { return *x; }, out + int64_t(t) * os + int64_t(h0 + g) * hd, hd, n_split);
    cluster_sync_all();  // no block leaves while split 0 may still read its part
    return;
  }
  const int32_t stride = hd + 2;
  merge_warps<T>(sm, m, l, acc, nh, hd, partial + ((int64_t(t) * sh.n_head + h0) * kDecodeSplits + split) * stride,
              int64_t(kDecodeSplits) * stride, false);

  // The last of the n_split blocks of this (token, head chunk) merges them.
  __threadfence();  // this block's part is visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = done + int64_t(t) * gridDim.y + blockIdx.y;
    sm_last = atomicAdd(counter, 1u) == unsigned(n_split - 1);
    if (sm_last) *counter = 0;  // every split has counted: ready for the next launch
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  for (int32_t g = warp; g < nh; g += W)
    combine_splits(partial + (int64_t(t) * sh.n_head + h0 + g) * kDecodeSplits * (hd + 2),
                   out + int64_t(t) * os + int64_t(h0 + g) * hd, hd, n_split);
}

// grid (T, n_head), one warp: merges the splits of one (token, head).
__global__ void decode_combine_kernel(const float* partial, float* out, int64_t os, int32_t n_head, int32_t hd) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t t = blockIdx.x, h = blockIdx.y;
  combine_splits(partial + (int64_t(t) * n_head + h) * kDecodeSplits * (hd + 2), out + int64_t(t) * os + int64_t(h) * hd,
                 hd);
}

template <class T>
__global__ void shift_gather_kernel(KvView<T> kv, const int32_t* blocks, int32_t first, int32_t n_head_kv,
                                    int32_t hd, const float* rc, const float* rs, int32_t n_rot, bool neox,
                                    float* scratch) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t i = blockIdx.x;  // i-th moved position
  const int32_t p = first + i;
  const T* kp = k_at(kv, blocks, p);
  const T* vp = kp + int64_t(kv.block_size) * kv.kv_dim;
  float* sk = scratch + int64_t(i) * 2 * kv.kv_dim;
  float* sv = sk + kv.kv_dim;
  for (int32_t c = threadIdx.x; c < kv.kv_dim; c += blockDim.x) {
    sk[c] = kv_load(kp + c);
    sv[c] = kv_load(vp + c);
  }
  __syncthreads();
  if (!rc) return;
  const int32_t half = n_rot / 2;
  for (int32_t w = threadIdx.x; w < n_head_kv * half; w += blockDim.x) {
    const int32_t h = w / half, j = w % half;
    float* head = sk + int64_t(h) * hd;
    const int32_t ia = neox ? j : 2 * j, ib = neox ? j + half : 2 * j + 1;
    const float a = head[ia], b = head[ib];
    head[ia] = __fsub_rn(__fmul_rn(a, rc[j]), __fmul_rn(b, rs[j]));
    head[ib] = __fadd_rn(__fmul_rn(a, rs[j]), __fmul_rn(b, rc[j]));
  }
}

template <class T>
__global__ void shift_scatter_kernel(KvView<T> kv, const int32_t* blocks, int32_t first, int32_t delta,
                                     const float* scratch) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int32_t i = blockIdx.x;
  const int32_t q = first + i - delta;
  T* kd = k_at(kv, blocks, q);
  T* vd = kd + int64_t(kv.block_size) * kv.kv_dim;
  const float* sk = scratch + int64_t(i) * 2 * kv.kv_dim;
  for (int32_t c = threadIdx.x; c < kv.kv_dim; c += blockDim.x) {
    kv_store(kd + c, sk[c]);
    kv_store(vd + c, sk[kv.kv_dim + c]);
  }
}

// CERA_CUDA_ATTENTION picks the prefill kernel whatever the backend asked for (for comparison):
// simt (the SIMT kernel), tf32 (3xTF32 tensor cores) or f16; unset or anything else: no override.
// Read per call, so a test can switch it between backends; a getenv per layer is noise next to the kernel.
enum class PrefillOverride { None, Simt, Tf32, F16 };
PrefillOverride prefill_override() {
  const char* e = std::getenv("CERA_CUDA_ATTENTION");
  if (!e) return PrefillOverride::None;
  if (std::strcmp(e, "simt") == 0) return PrefillOverride::Simt;
  if (std::strcmp(e, "tf32") == 0) return PrefillOverride::Tf32;
  if (std::strcmp(e, "f16") == 0) return PrefillOverride::F16;
  return PrefillOverride::None;
}

int head_dim_bucket(int32_t hd) {
  if (hd <= 64) return 64;
  if (hd <= 128) return 128;
  if (hd <= 256) return 256;
  throw Error(ErrorCode::Unsupported, "CUDA attention supports head_dim up to 256, not " + std::to_string(hd));
}

// Whether the fused decode kernel for kMaxHd launches its n_clusters head groups' splits as clusters
// of `size` blocks: on sm_90+ unless CERA_CUDA_ATTENTION_CLUSTER=0 (read per call, so a test can
// compare both), and only when the device can hold all of them at once. A cluster's idle splits
// keep their SMs until it merges, so clusters in waves wait for each other (H200, 8 LFM2-1.2B
// sequences: 64 clusters, BF16 6,688 -> 5,778 tokens/s).
template <int kMaxHd, int H, class T>
bool decode_clusters_usable(int size, int64_t n_clusters) {
  static const std::array<int, kClusterSplits + 1> max_active = [] {  // by cluster size
    std::array<int, kClusterSplits + 1> n{};
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9)
      return n;
    for (int c = 2; c <= kClusterSplits; c *= 2) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(1, 1, unsigned(c));
      cfg.blockDim = dim3(kFusedWarps<kMaxHd> * 32);
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 1, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = unsigned(c);
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, decode_fused_kernel<kMaxHd, true, H, T>, &cfg) == cudaSuccess)
        n[size_t(c)] = clusters;
      cudaGetLastError();  // a failed query leaves no error behind
    }
    return n;
  }();
  const char* e = std::getenv("CERA_CUDA_ATTENTION_CLUSTER");
  return n_clusters <= max_active[size_t(size)] && !(e && std::strcmp(e, "0") == 0);
}

// A cluster has as many splits as the context span needs (a power of two, 2 to kClusterSplits):
// its blocks wait for that many free SMs of one GPC, so a 200-key context takes 2 of them, not 8
// of which 6 only join the barriers.
template <int kMaxHd, class T>
int cluster_size(int32_t context_span) {
  return std::clamp(context_span / kFusedKeysPerSplit<kMaxHd, T>, 2, kClusterSplits);
}

template <int kMaxHd, int H, class T>
void launch_decode_fused(const KvView<T>& kv, const StepView& step, int32_t n_tokens, const DecodeQkv& qkv, float* out,
                         int64_t os, const AttentionShape& sh, int32_t group, int32_t chunks, float* partial,
                         unsigned* counters, int32_t context_span, cudaStream_t s) {
  const dim3 block(kFusedWarps<kMaxHd> * 32);
  const int size = cluster_size<kMaxHd, T>(context_span);
  if (context_span > 0 && decode_clusters_usable<kMaxHd, H, T>(size, int64_t(n_tokens) * sh.n_head_kv * chunks)) {
    const dim3 grid(unsigned(n_tokens), unsigned(sh.n_head_kv * chunks), unsigned(size));
    launch_pdl_cluster(decode_fused_kernel<kMaxHd, true, H, T>, grid, block, dim3(1, 1, unsigned(size)), 0, s, kv,
                       step, qkv, sh, group, chunks, partial, counters, out, os);
  } else {
    const dim3 grid(unsigned(n_tokens), unsigned(sh.n_head_kv * chunks), kDecodeSplits);
    launch_pdl(decode_fused_kernel<kMaxHd, false, H, T>, grid, block, 0, s, kv, step, qkv, sh, group, chunks, partial,
               counters, out, os);
  }
}

}  // namespace

void store_kv(const KvLayer& kv, const StepView& step, const float* k, int64_t ks, const float* v, int64_t vs,
              int32_t n_tokens, cudaStream_t s) {
  if (n_tokens <= 0) return;
  with_kv_view(kv, [&](auto view) {
    launch_pdl(store_kv_kernel<KvElem<decltype(view)>>, dim3(n_tokens), dim3(128), 0, s, view, step, k, ks, v, vs);
  });
  CERA_CUDA_CHECK_LAUNCH();
}

namespace {
// The f16 tensor-core kernel where the precision asks for it, or the override; also for an f16
// cache unless the SIMT kernel is forced: the 3xTF32 kernel copies f32 tiles only.
bool takes_f16_kernel(const AttentionShape& sh, AttentionPrecision precision, bool kv_f16,
                      PrefillOverride forced = prefill_override()) {
  const bool f16 = forced == PrefillOverride::F16 ||
                   (forced == PrefillOverride::None && (precision == AttentionPrecision::F16 || kv_f16)) ||
                   (forced == PrefillOverride::Tf32 && kv_f16);
  return f16 && attention_prefill_f16_supported(sh.head_dim);
}
}  // namespace

PrefillSplit attention_prefill_plan(int32_t n_tiles, int32_t max_keys, const AttentionShape& sh,
                                    AttentionPrecision precision, bool kv_f16) {
  if (n_tiles <= 0 || !takes_f16_kernel(sh, precision, kv_f16)) return {};  // only the f16 kernel splits its keys
  const char* e = std::getenv("CERA_CUDA_ATTENTION_SPLITS");  // per call, like CERA_CUDA_ATTENTION
  const int32_t forced = e ? std::max(0, std::atoi(e)) : 0;
  return plan_prefill_key_splits(attention_prefill_f16_blocks(n_tiles, sh), max_keys,
                                 attention_prefill_f16_wave(sh, kv_f16), forced);
}

void attention_prefill(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t qs,
                       float* out, int64_t os, const AttentionShape& sh, cudaStream_t s,
                       AttentionPrecision precision, const PrefillSplit& split, float* partial, int32_t n_tokens) {
  if (n_tiles <= 0) return;
  const PrefillOverride forced = prefill_override();  // the environment is read once per launch
  if (takes_f16_kernel(sh, precision, kv.f16, forced)) {
    attention_prefill_f16(kv, step, n_tiles, q, qs, out, os, sh, s, split, partial, n_tokens);
    return;
  }
  if (forced != PrefillOverride::Simt && !kv.f16 && attention_prefill_tc_supported(sh.head_dim)) {
    attention_prefill_tc(kv, step, n_tiles, q, qs, out, os, sh, s);
    return;
  }
  const int32_t group = sh.n_head / sh.n_head_kv;
  const int32_t chunks = (kAttentionTileTokens * group + kPrefillRows - 1) / kPrefillRows;
  const dim3 grid(unsigned(n_tiles), unsigned(sh.n_head_kv * chunks));
  with_kv_view(kv, [&](auto view) {
    using T = KvElem<decltype(view)>;
    switch (head_dim_bucket(sh.head_dim)) {
      case 64: launch_pdl(prefill_kernel<64, T>, grid, dim3(kPrefillThreads), 0, s, view, step, q, qs, out, os, sh, group, chunks); break;
      case 128: launch_pdl(prefill_kernel<128, T>, grid, dim3(kPrefillThreads), 0, s, view, step, q, qs, out, os, sh, group, chunks); break;
      default: launch_pdl(prefill_kernel<256, T>, grid, dim3(kPrefillThreads), 0, s, view, step, q, qs, out, os, sh, group, chunks); break;
    }
  });
  CERA_CUDA_CHECK_LAUNCH();
}

void attention_decode(const KvLayer& kv, const StepView& step, int32_t n_tokens, const float* q, int64_t qs,
                      float* out, int64_t os, const AttentionShape& sh, float* partial, cudaStream_t s) {
  if (n_tokens <= 0) return;
  const int32_t group = sh.n_head / sh.n_head_kv;
  const int32_t chunks = (group + kDecodeHeads - 1) / kDecodeHeads;
  const dim3 grid(unsigned(n_tokens), unsigned(sh.n_head_kv * chunks), kDecodeSplits);
  const int threads = kDecodeWarps * 32;
  with_kv_view(kv, [&](auto view) {
    using T = KvElem<decltype(view)>;
    switch (head_dim_bucket(sh.head_dim)) {
      case 64: launch_pdl(decode_kernel<64, T>, grid, dim3(threads), 0, s, view, step, q, qs, sh, group, chunks, partial); break;
      case 128: launch_pdl(decode_kernel<128, T>, grid, dim3(threads), 0, s, view, step, q, qs, sh, group, chunks, partial); break;
      default: launch_pdl(decode_kernel<256, T>, grid, dim3(threads), 0, s, view, step, q, qs, sh, group, chunks, partial); break;
    }
  });
  CERA_CUDA_CHECK_LAUNCH();
  launch_pdl(decode_combine_kernel, dim3(unsigned(n_tokens), unsigned(sh.n_head)), dim3(32), 0, s, partial, out, os, sh.n_head,
                                                                                    sh.head_dim);
  CERA_CUDA_CHECK_LAUNCH();
}

namespace {
// q heads per block and whether the splits may run as clusters, by the step's shape (see kFusedHeads).
struct FusedShape {
  int heads;
  bool clusters;
};
FusedShape fused_shape(int32_t n_tokens, int32_t group, int32_t context_span) {
  if (n_tokens != 1) return {kFusedHeads, true};
  if (context_span == 0) return {group > 2 ? 1 : 2, false};
  if (context_span >= kLongContextSpan) return {group <= 2 ? 2 : kFusedHeads, false};
  return {kFusedHeadsOneToken, true};
}
}  // namespace

bool attention_decode_fused_supported(int32_t head_dim) { return head_dim <= 256; }

// One counter per (token, head chunk); a chunk has at least one q head, so a KV head has at most
// `group` chunks (fused_shape's smallest chunk is one head).
size_t attention_decode_counters(int32_t n_tokens, const AttentionShape& sh) {
  const int32_t group = sh.n_head / sh.n_head_kv;
  return size_t(n_tokens) * size_t(sh.n_head_kv) * size_t(group);
}

void attention_decode_fused(const KvLayer& kv, const StepView& step, int32_t n_tokens, const DecodeQkv& qkv,
                            float* out, int64_t os, const AttentionShape& sh, float* partial, unsigned* counters,
                            int32_t context_span, cudaStream_t s) {
  if (n_tokens <= 0) return;
  if (!attention_decode_fused_supported(sh.head_dim))
    throw Error(ErrorCode::Unsupported, "fused decode attention: head_dim " + std::to_string(sh.head_dim) + " > 256");
  const int32_t group = sh.n_head / sh.n_head_kv;
  const FusedShape shape = fused_shape(n_tokens, group, context_span);
  const int32_t chunks = (group + shape.heads - 1) / shape.heads;
  const int32_t span = shape.clusters ? context_span : 0;  // 0: a grid of kDecodeSplits single blocks
  with_kv_view(kv, [&](auto view) {
    auto launch = [&](auto hd) {
      constexpr int kMaxHd = decltype(hd)::value;
      switch (shape.heads) {
        case 1: launch_decode_fused<kMaxHd, 1>(view, step, n_tokens, qkv, out, os, sh, group, chunks, partial, counters, span, s); break;
        case 2: launch_decode_fused<kMaxHd, 2>(view, step, n_tokens, qkv, out, os, sh, group, chunks, partial, counters, span, s); break;
        default: launch_decode_fused<kMaxHd, kFusedHeads>(view, step, n_tokens, qkv, out, os, sh, group, chunks, partial, counters, span, s); break;
      }
    };
    switch (head_dim_bucket(sh.head_dim)) {
      case 64: launch(std::integral_constant<int, 64>{}); break;
      case 128: launch(std::integral_constant<int, 128>{}); break;
      default: launch(std::integral_constant<int, 256>{}); break;
    }
  });
  CERA_CUDA_CHECK_LAUNCH();
}

void shift_kv(const KvLayer& kv, const int32_t* blocks, int32_t first, int32_t count, int32_t delta,
              int32_t n_head_kv, int32_t head_dim, const float* rc, const float* rs, int32_t n_rot, bool neox,
              float* scratch, cudaStream_t s) {
  if (count <= 0) return;
  with_kv_view(kv, [&](auto view) {
    using T = KvElem<decltype(view)>;
    launch_pdl(shift_gather_kernel<T>, dim3(count), dim3(128), 0, s, view, blocks, first, n_head_kv, head_dim, rc, rs,
               n_rot, neox, scratch);
    CERA_CUDA_CHECK_LAUNCH();
    launch_pdl(shift_scatter_kernel<T>, dim3(count), dim3(128), 0, s, view, blocks, first, delta, scratch);
    CERA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace cera::cuda
