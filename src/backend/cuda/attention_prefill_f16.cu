// Prefill attention on tensor cores in f16: the same causal GQA flash attention over the paged F32
// KV cache as attention_prefill_tc.cu (same StepView tiles, same (token, q head) row order within a
// tile, same online softmax in fp32), with S = Q·Kᵀ and O += P·V done by mma.sync m16n8k16 with f16
// inputs and f32 accumulation — one mma per product instead of 3xTF32's three, and half the
// shared-memory bytes.
//
// What is rounded to f16 (11-bit significand, relative error ≤ 2⁻¹¹): Q·scale·log2(e) (once, into
// registers), K and V (when staged in shared memory), P (from the f32 exponentials, for P·V). Scores,
// the running max and sum, and O are f32; the scores are in log2 units, so the softmax is exp2.
// The row sums add the unrounded f32 probabilities. Like any f16 attention (llama.cpp's f16 KV cache),
// it assumes |Q·scale|, |K| and |V| stay below f16's 65504.
//
// Block: NW warps × 16 rows (NW = 8: 128 rows, a whole tile of a KV group of 4; NW = 4 for groups
// of at most 2, whose tiles have at most 64 rows). Keys go through shared memory as f16, KT at a
// time, KT = 512·NW / HD (each thread converts 16 floats of K and 16 of V per tile), double-buffered
// with one barrier per tile. The cache is f32, so cp.async cannot convert on the way: the next
// tile's K loads are issued into registers before the current tile's math and converted into the
// other buffer halfway through it, then its V loads likewise for the second half. The math runs
// over sub-tiles of at most 32 keys (S, online softmax, P·V each), which bounds S's registers.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", .f16; g = lane / 4, t = lane % 4;
// each .b32 register holds two f16, the lower column / k index in the low half):
//   A 16×16: a0 (g, 2t..2t+1)  a1 (g+8, 2t..2t+1)  a2 (g, 2t+8..2t+9)  a3 (g+8, 2t+8..2t+9)
//   B 16×8:  b0 (k 2t..2t+1, n g)  b1 (k 2t+8..2t+9, n g)
//   C 16×8:  c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
// S: B(k = dim, n = key) = K[key][dim], i.e. rows of K in shared memory: ldmatrix (non-transposed)
//    gives lane (g, t) row g, columns 2t, 2t+1 of each 8×8 matrix — exactly b0 / b1.
// P·V: P's A fragment for keys 16i..16i+15 is the C fragments of S's key tiles 2i and 2i+1, packed
//    to f16 pairs as they lie; B(k = key, n = dim) = V[key][dim] needs pairs along the key, which
//    ldmatrix.trans delivers from the same row-major [key][dim] layout.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/device_attribute.h"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.h"
#include "cera/error.h"

namespace cera::cuda {
namespace {

template <int HD, int NW>
struct F16Cfg {
  static constexpr int kThreads = NW * 32;
  static constexpr int kRows = NW * 16;          // (token, q head) rows per block
  static constexpr int kKeys = 512 * NW / HD;    // keys per shared-memory tile
  // Row stride in halves: HD + 8 makes it ≡ 16 bytes (mod 128), so the 8 rows of an ldmatrix
  // 8×8 matrix (16 bytes each) fall on disjoint banks; rows stay 16-byte aligned.
  static constexpr int kStride = HD + 8;
  static constexpr int kTile = kKeys * kStride;  // halves per K (or V) buffer
  static constexpr int kChunks = kKeys * (HD / 4) / kThreads;  // float4 of K (and of V) per thread per tile
  static_assert(kKeys % 16 == 0, "P·V takes keys 16 at a time");
  static_assert(kKeys * (HD / 4) % kThreads == 0, "the tile copy takes whole rounds of the block");
};

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: 2⁻²² relative; exp2(−inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// d += a · b, m16n8k16, f16 inputs, f32 accumulate.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8×8 f16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A split launch's results for one key range (blockIdx.z): per (range, token, q head) row, the
// unnormalized O, then the running max (log2 units) and the row sum; rows that see no key of the
// range are not written (the merge skips them by the same rule).
struct SplitOut {
  float* partial;  // null: no split, normalized rows go straight to `out`
  int32_t split_keys;
  int32_t n_tokens;  // the step's tokens: a range's rows are [n_tokens][n_head]
};

// grid (n_tiles, n_head_kv × row_chunks, key ranges), NW × 32 threads. HD 64 fits 128 registers
// (two blocks of 8 warps per SM); HD 128 needs more (O alone is 64), so one block of 8 or two of 4.
template <int HD, int NW, class T>
__global__ void __launch_bounds__(NW * 32, HD == 64 ? 16 / NW : 1)
    prefill_f16_kernel(KvView<T> kv, StepView step, const float* q, int64_t qs, float* out, int64_t os,
                       AttentionShape sh, int32_t group, int32_t row_chunks, SplitOut split) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  using C = F16Cfg<HD, NW>;
  constexpr int KT = C::kKeys;
  constexpr int NKS = HD / 16;  // k-steps of S over the head dim
  constexpr int KS = KT < 32 ? KT : 32;  // keys per sub-tile of the math
  constexpr int NSUB = KT / KS;
  constexpr int NN = KS / 8;    // n-tiles of S over a sub-tile's keys
  constexpr int NKV = KS / 16;  // k-steps of P·V over a sub-tile's keys
  constexpr int NO = HD / 8;    // n-tiles of O over the head dim
  constexpr int C4 = HD / 4;    // float4 chunks per K or V row
  constexpr int CH = C::kChunks;
  __shared__ __align__(128) __half kvs[2][2][C::kTile];  // [buffer][K, V][key][kStride]

  // Tiles in reverse: a sequence's later tiles see more keys, so the longest blocks start first and
  // the grid's last wave is short ones.
  const AttentionTile tile = step.tiles[gridDim.x - 1 - blockIdx.x];
  const DeviceSeq sq = step.seqs[tile.seq];
  const int32_t* table = step.block_tables + sq.block_offset;
  const int32_t kvh = blockIdx.y / row_chunks;
  const int32_t row0 = (blockIdx.y % row_chunks) * C::kRows;  // the block's first row in the tile
  const int32_t n_rows = tile.n_tokens * group;
  if (row0 >= n_rows) return;  // the whole block is past the tile (uniform: before any barrier)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Keys the block needs: through the KV index of its last row's token, within its key range.
  const int32_t base_pos = sq.n_past + tile.first_local;
  const int32_t key_begin = split.partial ? int32_t(blockIdx.z) * split.split_keys : 0;
  int32_t n_keys = base_pos + (min(n_rows, row0 + C::kRows) - 1) / group + 1;
  if (key_begin >= n_keys) return;  // no row of the block reaches this range (uniform)
  if (split.partial) n_keys = min(n_keys, key_begin + split.split_keys);
  // This warp's rows; a warp wholly past the tile still loads and syncs, but computes nothing.
  const int32_t wrow0 = row0 + warp * 16;
  const bool warp_active = wrow0 < n_rows;
  const int32_t warp_last_key = warp_active ? base_pos + (min(n_rows, wrow0 + 16) - 1) / group : -1;
  // Keys up to the warp's first row's own position are visible to all its rows: tiles ending there
  // need no mask. A warp with idle rows (q_pos −1) masks every tile.
  const int32_t warp_unmasked_end = wrow0 + 16 <= n_rows ? base_pos + wrow0 / group : -1;

  // The lane's two rows: g (r = 0) and g + 8 (r = 1). An idle row gets q_pos −1: every key masked.
  // In a split, o_off is the row's offset in `partial`, −1 where the row sees no key of the range.
  int32_t q_pos[2];
  int64_t o_off[2];
  const float* q_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t row = wrow0 + g + 8 * r;
    const bool valid = row < n_rows;
    const int32_t local = tile.first_local + (valid ? row / group : 0);
    const int32_t head = kvh * group + (valid ? row % group : 0);
    const int64_t batch_row = sq.first_token + local;
    q_pos[r] = valid ? sq.n_past + local : -1;
    if (split.partial)
      o_off[r] = valid && q_pos[r] >= key_begin
                     ? ((int64_t(blockIdx.z) * split.n_tokens + batch_row) * sh.n_head + head) *
                           (HD + kPrefillPartialStride)
                     : -1;
    else
      o_off[r] = valid ? batch_row * os + int64_t(head) * HD : -1;
    q_row[r] = valid ? q + batch_row * qs + int64_t(head) * HD : nullptr;
  }
  // Q·scale·log2(e) as f16 A fragments, for the whole head dim (zeros for idle rows).
  const float qscale = sh.scale * 1.4426950408889634f;
  uint32_t qa[NKS][4];
#pragma unroll
  for (int s = 0; s < NKS; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h)  // columns 16s + 8h + 2t, +1
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int d = 16 * s + 8 * h + 2 * t;
        const float x0 = q_row[r] ? q_row[r][d] * qscale : 0.f;
        const float x1 = q_row[r] ? q_row[r][d + 1] * qscale : 0.f;
        qa[s][2 * h + r] = pack_half2(x0, x1);
      }

  // The next tile's K (then V) in registers between its loads and its conversion into shared memory
  // (four elements per chunk: a float4 of an f32 cache, a uint2 of four halves of an f16 one, which
  // go to shared memory as they are); keys at or past n_keys are zeros. which = 0: K, 1: V.
  constexpr bool kHalfCache = std::is_same_v<T, __half>;
  using Chunk = std::conditional_t<kHalfCache, uint2, float4>;
  Chunk st[CH];
  const bool bs_pow2 = (kv.block_size & (kv.block_size - 1)) == 0;  // the usual case: a shift, not a division
  const int bs_shift = __ffs(kv.block_size) - 1;
  const T* const kv_head = kv.base + int64_t(kvh) * HD;
  auto fetch = [&](int32_t kt, int which) {
    const int32_t k0 = kt * KT;
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      const int idx = int(threadIdx.x) + i * C::kThreads;
      const int32_t pos = k0 + idx / C4;
      if (pos < n_keys) {
        const int32_t blk = bs_pow2 ? pos >> bs_shift : pos / kv.block_size;
        const int32_t b = table[blk];
        const T* src = kv_head + ((int64_t(b) * 2 + which) * kv.block_size + (pos - blk * kv.block_size)) *
                                     kv.kv_dim + 4 * (idx % C4);
        st[i] = *reinterpret_cast<const Chunk*>(src);
      } else {
        st[i] = Chunk{};
      }
    }
  };
  auto stash = [&](int buf, int which) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      const int idx = int(threadIdx.x) + i * C::kThreads;
      uint2 h;
      if constexpr (kHalfCache)
        h = st[i];
      else
        h = make_uint2(pack_half2(st[i].x, st[i].y), pack_half2(st[i].z, st[i].w));
      *reinterpret_cast<uint2*>(&kvs[buf][which][(idx / C4) * C::kStride + 4 * (idx % C4)]) = h;
    }
  };

  // Per-lane ldmatrix row offsets (halves). K (S's B, non-transposed): matrix mi = lane / 8 covers
  // keys 8·(mi / 2) + 0..7 of a 16-key pair, dims 8·(mi % 2) + 0..7 of a 16-dim k-step, so the four
  // registers are {b0, b1} of key tile 2p and {b0, b1} of key tile 2p + 1. V (P·V's B, transposed):
  // matrix mi covers keys 8·(mi % 2) + 0..7 of a 16-key k-step, dims 8·(mi / 2) + 0..7 of a 16-dim
  // pair: {b0, b1} of dim tile 2p, then of dim tile 2p + 1.
  const int mi = lane / 8, mr = lane % 8;
  const int k_lane = (8 * (mi / 2) + mr) * C::kStride + 8 * (mi % 2);
  const int v_lane = (8 * (mi % 2) + mr) * C::kStride + 8 * (mi / 2);

  float o[NO][4];  // O's C fragments: o[n] = {(g, 8n+2t), (g, 8n+2t+1), (g+8, 8n+2t), (g+8, 8n+2t+1)}
#pragma unroll
  for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};  // running max, log2 units
  float l[2] = {0.f, 0.f};  // this lane's share of the row sums (its columns); quad-summed at the end

  const int32_t kt0 = key_begin / KT;  // a range starts on a key tile (kPrefillSplitAlign)
  const int32_t n_kt = (n_keys + KT - 1) / KT;
  fetch(kt0, 0);
  stash(kt0 & 1, 0);
  fetch(kt0, 1);
  stash(kt0 & 1, 1);
  __syncthreads();
  // Tile kt + 1 goes into the other buffer while tile kt is used (that buffer's last reads were
  // before the previous barrier): its K loads are in flight during the first half of tile kt's
  // math, its V loads during the second. The math runs over sub-tiles of KS keys (S, softmax, P·V
  // each), which keeps S's registers at KS / 2 per lane.
  for (int32_t kt = kt0; kt < n_kt; ++kt) {
    const bool more = kt + 1 < n_kt;
    if (more) fetch(kt + 1, 0);
    const uint32_t kb = uint32_t(__cvta_generic_to_shared(&kvs[kt & 1][0][0]));
    const uint32_t vb = uint32_t(__cvta_generic_to_shared(&kvs[kt & 1][1][0]));
    auto swap_kv = [&] {  // K of tile kt + 1 into shared memory, then its V loads
      if (more) {
        stash((kt + 1) & 1, 0);
        fetch(kt + 1, 1);
      }
    };
#pragma unroll
    for (int h = 0; h < NSUB; ++h) {
      if (NSUB > 1 && h == NSUB / 2) swap_kv();
      const int32_t k0 = kt * KT + h * KS;
      const bool work = warp_active && k0 <= warp_last_key;  // else every key here is masked for this warp

      // S = Q·Kᵀ (log2 units): sacc[j] = keys k0 + 8j .. +7.
      float sacc[NN][4];
#pragma unroll
      for (int j = 0; j < NN; ++j) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
      if (work) {
#pragma unroll
        for (int s = 0; s < NKS; ++s)
#pragma unroll
          for (int p = 0; p < NN / 2; ++p) {
            uint32_t b[4];
            ldmatrix_x4(b, kb + 2 * uint32_t(k_lane + (h * KS + 16 * p) * C::kStride + 16 * s));
            mma_f16(sacc[2 * p], qa[s], b[0], b[1]);
            mma_f16(sacc[2 * p + 1], qa[s], b[2], b[3]);
          }
      }
      if (NSUB == 1) swap_kv();
      if (!work) continue;

      // Online softmax on the fragments: element e of sacc[j] is row g + 8·(e / 2), key k0 + 8j + 2t + e % 2.
      const bool masked = k0 + KS - 1 > warp_unmasked_end;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NN; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sacc[j][2 * r + e];
            if (masked && k0 + 8 * j + 2 * t + e > q_pos[r]) x = -INFINITY;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet: p = 0
        const float corr = fast_exp2(m[r] - m_use);            // 0 while m was −inf
        m[r] = m_new;
        l[r] *= corr;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
#pragma unroll
        for (int j = 0; j < NN; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sacc[j][2 * r + e];
            x = fast_exp2(x - m_use);
            l[r] += x;
          }
      }

      // O += P·V: k-step i covers keys k0 + 16i .. +15 (S's key tiles 2i and 2i + 1).
#pragma unroll
      for (int i = 0; i < NKV; ++i) {
        const uint32_t a[4] = {pack_half2(sacc[2 * i][0], sacc[2 * i][1]), pack_half2(sacc[2 * i][2], sacc[2 * i][3]),
                               pack_half2(sacc[2 * i + 1][0], sacc[2 * i + 1][1]),
                               pack_half2(sacc[2 * i + 1][2], sacc[2 * i + 1][3])};
#pragma unroll
        for (int p = 0; p < NO / 2; ++p) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vb + 2 * uint32_t(v_lane + (h * KS + 16 * i) * C::kStride + 16 * p));
          mma_f16(o[2 * p], a, b[0], b[1]);
          mma_f16(o[2 * p + 1], a, b[2], b[3]);
        }
      }
    }
    if (more) stash((kt + 1) & 1, 1);
    __syncthreads();
  }
  if (!warp_active) return;

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (o_off[r] < 0) continue;
    const float inv = split.partial ? 1.f : 1.f / l[r];  // a range's O stays unnormalized for the merge
    float* dst = (split.partial ? split.partial : out) + o_off[r];
#pragma unroll
    for (int n = 0; n < NO; ++n) {
      dst[8 * n + 2 * t] = o[n][2 * r] * inv;
      dst[8 * n + 2 * t + 1] = o[n][2 * r + 1] * inv;
    }
    if (split.partial && t == 0) {
      dst[HD] = m[r];
      dst[HD + 1] = l[r];
    }
  }
}

// The merge of a split launch: grid (n_tiles, ⌈kAttentionTileTokens · n_head / 8⌉), 8 warps, a warp
// per (token, q head) row — independent rows, so their loads overlap (a warp looping over a tile's
// tokens made the merge a chain of dependent loads that cost more than the split saved). Lane z <
// the row's ranges holds range z's max and sum; each lane then sums HD / 32 consecutive output dims
// over the ranges, weighted by 2^(max_z − max).
constexpr int kMergeWarps = 8;
template <int HD>
__global__ void __launch_bounds__(kMergeWarps * 32)
    prefill_merge_kernel(StepView step, AttentionShape sh, SplitOut split, int32_t splits, float* out, int64_t os) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  constexpr int E = HD / 32;  // dims per lane: 2 or 4
  constexpr int64_t kRow = HD + kPrefillPartialStride;
  const int lane = threadIdx.x % 32;
  const int32_t w = int32_t(blockIdx.y) * kMergeWarps + int32_t(threadIdx.x / 32);
  const AttentionTile tile = step.tiles[blockIdx.x];
  const int32_t j = w / sh.n_head, head = w % sh.n_head;
  if (j >= tile.n_tokens) return;
  const DeviceSeq sq = step.seqs[tile.seq];
  const int32_t local = tile.first_local + j;
  const int64_t batch_row = sq.first_token + local;
  const int32_t ranges = min(splits, (sq.n_past + local) / split.split_keys + 1);  // those with a visible key
  const int64_t range_stride = int64_t(split.n_tokens) * sh.n_head * kRow;
  const float* row = split.partial + (batch_row * sh.n_head + head) * kRow;
  const float mz = lane < ranges ? row[lane * range_stride + HD] : -INFINITY;
  const float lz = lane < ranges ? row[lane * range_stride + HD + 1] : 0.f;
  float mx = mz;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float wz = lane < ranges ? exp2f(mz - mx) : 0.f;
  float sum = wz * lz;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  float acc[E] = {};
  for (int32_t z = 0; z < ranges; ++z) {
    const float weight = __shfl_sync(0xffffffffu, wz, z);
    const float* src = row + z * range_stride + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] += weight * src[e];
  }
  const float inv = 1.f / sum;
  float* dst = out + batch_row * os + int64_t(head) * HD + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) dst[e] = acc[e] * inv;
}

// Rows per block: a tile of a KV group of at most 2 (at most 64 rows) fits 4 warps.
int rows_per_block(int32_t group) { return kAttentionTileTokens * group <= 64 ? 64 : 128; }

template <int HD, int NW, class T>
void launch(const KvView<T>& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t qs, float* out,
            int64_t os, const AttentionShape& sh, int32_t group, const PrefillSplit& split, float* partial,
            int32_t n_tokens, cudaStream_t s) {
  constexpr int rows = F16Cfg<HD, NW>::kRows;
  const int32_t chunks = (kAttentionTileTokens * group + rows - 1) / rows;
  const bool splitting = split.splits > 1;
  const SplitOut so{splitting ? partial : nullptr, split.split_keys, n_tokens};
  const dim3 grid(unsigned(n_tiles), unsigned(sh.n_head_kv * chunks), unsigned(splitting ? split.splits : 1));
  launch_pdl(prefill_f16_kernel<HD, NW, T>, grid, dim3(NW * 32), 0, s, kv, step, q, qs, out, os, sh, group, chunks, so);
  CERA_CUDA_CHECK_LAUNCH();
  if (!splitting) return;
  const int32_t tile_rows = kAttentionTileTokens * sh.n_head;  // a warp per (token, q head)
  launch_pdl(prefill_merge_kernel<HD>, dim3(unsigned(n_tiles), unsigned((tile_rows + kMergeWarps - 1) / kMergeWarps)),
             dim3(kMergeWarps * 32), 0, s, step, sh, so, split.splits, out, os);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_prefill_f16_supported(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

int64_t attention_prefill_f16_blocks(int32_t n_tiles, const AttentionShape& sh) {
  const int32_t group = sh.n_head / sh.n_head_kv;
  const int rows = rows_per_block(group);
  return int64_t(n_tiles) * sh.n_head_kv * ((kAttentionTileTokens * group + rows - 1) / rows);
}

namespace {
// Resident blocks of a variant (registers and shared memory decide: 1 to 4 an SM) times the SMs,
// read once per variant: a process drives one kind of GPU.
template <int HD, int NW, class T>
int64_t wave_of() {
  static const int64_t w = [] {
    int per_sm = 0;
    CERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, prefill_f16_kernel<HD, NW, T>, NW * 32, 0));
    return int64_t(std::max(per_sm, 1)) * current_device_attribute(cudaDevAttrMultiProcessorCount);
  }();
  return w;
}
template <class T>
int64_t wave_of(int32_t head_dim, bool narrow) {
  if (head_dim == 64) return narrow ? wave_of<64, 4, T>() : wave_of<64, 8, T>();
  return narrow ? wave_of<128, 4, T>() : wave_of<128, 8, T>();
}
}  // namespace

int64_t attention_prefill_f16_wave(const AttentionShape& sh, bool kv_f16) {
  const bool narrow = rows_per_block(sh.n_head / sh.n_head_kv) == 64;
  return kv_f16 ? wave_of<__half>(sh.head_dim, narrow) : wave_of<float>(sh.head_dim, narrow);
}

void attention_prefill_f16(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t qs,
                           float* out, int64_t os, const AttentionShape& sh, cudaStream_t s, const PrefillSplit& split,
                           float* partial, int32_t n_tokens) {
  if (n_tiles <= 0) return;
  if (split.splits > 1 && (!partial || n_tokens <= 0 || split.splits > kPrefillSplitMax ||
                           split.split_keys <= 0 || split.split_keys % kPrefillSplitAlign != 0))
    throw Error(ErrorCode::Internal, "prefill attention: a key split without its scratch or with a bad range");
  const int32_t group = sh.n_head / sh.n_head_kv;
  const bool narrow = rows_per_block(group) == 64;
  with_kv_view(kv, [&](auto view) {
    if (sh.head_dim == 64) {
      if (narrow)
        launch<64, 4>(view, step, n_tiles, q, qs, out, os, sh, group, split, partial, n_tokens, s);
      else
        launch<64, 8>(view, step, n_tiles, q, qs, out, os, sh, group, split, partial, n_tokens, s);
    } else {
      if (narrow)
        launch<128, 4>(view, step, n_tiles, q, qs, out, os, sh, group, split, partial, n_tokens, s);
      else
        launch<128, 8>(view, step, n_tiles, q, qs, out, os, sh, group, split, partial, n_tokens, s);
    }
  });
}

}  // namespace cera::cuda
