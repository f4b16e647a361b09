// Prefill attention on tensor cores, for head_dim 64 and 128: the same causal GQA flash attention
// over the paged F32 KV cache as attention.cu's SIMT prefill kernel (same tiles, same row mapping,
// same online softmax in fp32), with S = Q·Kᵀ and O += P·V done by mma.sync m16n8k8 TF32 in the
// 3xTF32 form: each f32 operand x is split into hi = tf32(x) and lo = tf32(x − hi), and a·b is
// accumulated as a_hi·b_hi + a_hi·b_lo + a_lo·b_hi in fp32 — about fp32 accuracy (the dropped
// a_lo·b_lo term and lo's own rounding are ~2⁻²² relative).
//
// Block: 4 warps × 16 rows = the same 64 (token, q head) rows of one KV group as the SIMT kernel.
// Keys go through shared memory 32 at a time, double-buffered with cp.async (zero-filled past the
// last key, so a partial tile contributes exact zeros). Per key tile each warp computes its
// 16 × 32 S block in registers, updates the running max / sum on the accumulator fragments (quad
// shuffles), and feeds P straight from the accumulator registers into the P·V mma. The block's Q
// rows sit in shared memory too: held in registers beside O and S they push HD 128 into spills.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32; g = lane / 4, t = lane % 4):
//   A 16×8:  a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
//   B 8×8:   b0 (t, g)  b1 (t+4, g)
//   C 16×8:  c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
// The k index of an mma is a summation index, so any relabelling applied to A's columns and B's rows
// alike leaves the product unchanged. Both products use the relabelling k = t ↔ 2t, k = t+4 ↔ 2t+1
// within each group of 8:
//   S: k runs over the head dim, so a lane's A (Q) and B (K) elements are the adjacent pair
//      d = 8s+2t, 8s+2t+1 — each of Q's and K's fragment pairs is one float2 load.
//   P·V: k runs over keys, and a lane's C fragment of S holds exactly keys 2t, 2t+1 of rows g, g+8,
//      i.e. P's A fragment is {c0, c2, c1, c3} of the same lane — no shuffles.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/ops.h"
#include "cera/error.h"

namespace cera::cuda {
namespace {

using detail::cp_async16;
using detail::cp_async16_zero;
using detail::cp_async_commit;
using detail::cp_async_wait;

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcRows = kTcWarps * 16;  // (token, q head) rows per block, as the SIMT kernel
constexpr int kTcKeys = 32;             // keys per shared-memory tile

// Shared-memory row strides (floats). K is read as float2 at (row g, col 2t): a half-warp covers
// rows g = 0..3, so a stride ≡ 8 (mod 32) puts their 8-float runs on disjoint banks. V is read as
// float at (row 2t or 2t+1, col g): rows 2t need 2t·stride mod 32 ∈ {0, 8, 16, 24}, so ≡ 4 (mod 32).
// Both keep rows 16-byte aligned for cp.async.
template <int HD>
struct TcLayout {
  static constexpr int kStrideK = HD + 8;
  static constexpr int kStrideV = HD + 4;
  static constexpr int kStageK = kTcKeys * kStrideK;  // floats per buffer
  static constexpr int kStageV = kTcKeys * kStrideV;
  static constexpr int kQ = kTcRows * kStrideK;  // the block's Q rows, read like K
  static constexpr size_t kSmemBytes = sizeof(float) * (2 * (kStageK + kStageV) + kQ);
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  lo = to_tf32(x - __uint_as_float(hi));  // exact: x and hi agree in sign and leading bits
}

// d += a · b, m16n8k8, TF32 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// grid (n_tiles, n_head_kv × row_chunks), kTcThreads threads, TcLayout<HD>::kSmemBytes dynamic smem.
template <int HD>
__global__ void __launch_bounds__(kTcThreads) prefill_tc_kernel(KvView<float> kv, StepView step, const float* q,
                                                                int64_t qs, float* out, int64_t os,
                                                                AttentionShape sh, int32_t group,
                                                                int32_t row_chunks) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  using L = TcLayout<HD>;
  constexpr int NS = HD / 8;        // k-steps of S over the head dim; n-tiles of O
  constexpr int NK = kTcKeys / 8;   // n-tiles of S over the keys; k-steps of P·V
  constexpr int C4 = HD / 4;        // 16-byte chunks per K or V row
  static_assert(kTcKeys * C4 % kTcThreads == 0, "the tile copy takes whole rounds of the block");
  extern __shared__ __align__(16) float smem[];
  float* const ks = smem;                 // [2][kTcKeys][kStrideK]
  float* const vs = smem + 2 * L::kStageK;  // [2][kTcKeys][kStrideV]
  float* const qsm = vs + 2 * L::kStageV;   // [kTcRows][kStrideK]

  const AttentionTile tile = step.tiles[blockIdx.x];
  const DeviceSeq sq = step.seqs[tile.seq];
  const int32_t* table = step.block_tables + sq.block_offset;
  const int32_t kvh = blockIdx.y / row_chunks;
  const int32_t row0 = (blockIdx.y % row_chunks) * kTcRows;  // the block's first row in the tile
  const int32_t n_rows = tile.n_tokens * group;
  if (row0 >= n_rows) return;  // the whole block is past the tile (uniform: before any barrier)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Keys the block needs: through the KV index of its last row's token.
  const int32_t base_pos = sq.n_past + tile.first_local;
  const int32_t n_keys = base_pos + (min(n_rows, row0 + kTcRows) - 1) / group + 1;
  // This warp's rows; a warp wholly past the tile still loads and syncs, but computes nothing.
  const int32_t wrow0 = row0 + warp * 16;
  const bool warp_active = wrow0 < n_rows;
  const int32_t warp_last_key = warp_active ? base_pos + (min(n_rows, wrow0 + 16) - 1) / group : -1;

  // The lane's two rows: g (r = 0) and g + 8 (r = 1). An idle row gets q_pos −1: every key masked.
  int32_t q_pos[2];
  int64_t o_off[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t row = wrow0 + g + 8 * r;
    const bool valid = row < n_rows;
    const int32_t local = tile.first_local + (valid ? row / group : 0);
    const int32_t head = kvh * group + (valid ? row % group : 0);
    const int64_t batch_row = sq.first_token + local;
    q_pos[r] = valid ? sq.n_past + local : -1;
    o_off[r] = valid ? batch_row * os + int64_t(head) * HD : -1;
  }
  // The block's Q rows into shared memory (zeros for idle rows); the loop's first barrier publishes them.
  for (int idx = threadIdx.x; idx < kTcRows * HD; idx += kTcThreads) {
    const int r = idx / HD, d = idx % HD;
    const int32_t row = row0 + r;
    float x = 0.f;
    if (row < n_rows) {
      const int64_t batch_row = sq.first_token + tile.first_local + row / group;
      x = q[batch_row * qs + int64_t(kvh * group + row % group) * HD + d];
    }
    qsm[r * L::kStrideK + d] = x;
  }
  const float* const qw = qsm + (warp * 16 + g) * L::kStrideK + 2 * t;  // row g, col 2t of the warp's Q

  // Starts copying key tile kt into buffer `buf`; keys at or past n_keys are zero-filled.
  auto load_tile = [&](int32_t kt, int buf) {
    const int32_t k0 = kt * kTcKeys;
    float* kd = ks + buf * L::kStageK;
    float* vd = vs + buf * L::kStageV;
#pragma unroll
    for (int i = 0; i < kTcKeys * C4 / kTcThreads; ++i) {
      const int idx = int(threadIdx.x) + i * kTcThreads;
      const int j = idx / C4, c = idx % C4;
      const int32_t pos = k0 + j;
      float* kdst = kd + j * L::kStrideK + 4 * c;
      float* vdst = vd + j * L::kStrideV + 4 * c;
      if (pos < n_keys) {
        const int32_t b = table[pos / kv.block_size];
        const float* src = kv.base + (int64_t(b) * 2 * kv.block_size + pos % kv.block_size) * kv.kv_dim +
                           int64_t(kvh) * HD + 4 * c;
        cp_async16(kdst, src);
        cp_async16(vdst, src + int64_t(kv.block_size) * kv.kv_dim);
      } else {
        cp_async16_zero(kdst, kv.base);
        cp_async16_zero(vdst, kv.base);
      }
    }
  };

  float o[NS][4];  // O's C fragments: o[n] = {(g, 8n+2t), (g, 8n+2t+1), (g+8, 8n+2t), (g+8, 8n+2t+1)}
#pragma unroll
  for (int n = 0; n < NS; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // this lane's share of the row sums (its columns); quad-summed at the end

  const int32_t n_kt = (n_keys + kTcKeys - 1) / kTcKeys;
  load_tile(0, 0);
  cp_async_commit();
  for (int32_t kt = 0; kt < n_kt; ++kt) {
    if (kt + 1 < n_kt) load_tile(kt + 1, (kt + 1) & 1);
    cp_async_commit();  // possibly empty: keeps "all but the newest group" = tile kt
    cp_async_wait<1>();
    __syncthreads();

    const int32_t k0 = kt * kTcKeys;
    if (warp_active && k0 <= warp_last_key) {  // else every key of the tile is masked for this warp
      const float* kb = ks + (kt & 1) * L::kStageK;
      const float* vb = vs + (kt & 1) * L::kStageV;

      // S = Q·Kᵀ: sacc[j] = S for keys k0 + 8j .. +7; the a·b correction terms go to scor (a second
      // dependency chain, added at the end).
      float sacc[NK][4], scor[NK][4];
#pragma unroll
      for (int j = 0; j < NK; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[j][e] = scor[j][e] = 0.f;
#pragma unroll 2  // fully unrolled, ptxas hoists too many loads: HD 64 spills
      for (int s = 0; s < NS; ++s) {
        // A = {Q[g][8s+2t], Q[g+8][8s+2t], Q[g][8s+2t+1], Q[g+8][8s+2t+1]}
        const float2 qlo = *reinterpret_cast<const float2*>(qw + 8 * s);
        const float2 qhi = *reinterpret_cast<const float2*>(qw + 8 * L::kStrideK + 8 * s);
        uint32_t ahi[4], alo[4];
        split_tf32(qlo.x, ahi[0], alo[0]);
        split_tf32(qhi.x, ahi[1], alo[1]);
        split_tf32(qlo.y, ahi[2], alo[2]);
        split_tf32(qhi.y, ahi[3], alo[3]);
#pragma unroll
        for (int j = 0; j < NK; ++j) {
          const float2 kk = *reinterpret_cast<const float2*>(kb + (8 * j + g) * L::kStrideK + 8 * s + 2 * t);
          uint32_t bhi[2], blo[2];
          split_tf32(kk.x, bhi[0], blo[0]);
          split_tf32(kk.y, bhi[1], blo[1]);
          mma_tf32(scor[j], alo, bhi);
          mma_tf32(scor[j], ahi, blo);
          mma_tf32(sacc[j], ahi, bhi);
        }
      }

      // Online softmax on the fragments: element e of sacc[j] is row g + 8·(e / 2), key k0 + 8j + 2t + e % 2.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NK; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int32_t key = k0 + 8 * j + 2 * t + e;
            float& x = sacc[j][2 * r + e];
            x = key <= q_pos[r] ? (x + scor[j][2 * r + e]) * sh.scale : -INFINITY;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet: p = 0
        const float corr = expf(m[r] - m_use);                  // 0 while m was −inf
        m[r] = m_new;
        l[r] *= corr;
#pragma unroll
        for (int n = 0; n < NS; ++n) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
#pragma unroll
        for (int j = 0; j < NK; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sacc[j][2 * r + e];
            x = expf(x - m_use);
            l[r] += x;
          }
      }

      // O += P·V: k-step j covers keys k0 + 8j .. +7 with k = t ↔ key 2t, k = t+4 ↔ key 2t+1.
#pragma unroll
      for (int j = 0; j < NK; ++j) {
        uint32_t ahi[4], alo[4];
        split_tf32(sacc[j][0], ahi[0], alo[0]);  // (g, key 2t)
        split_tf32(sacc[j][2], ahi[1], alo[1]);  // (g+8, key 2t)
        split_tf32(sacc[j][1], ahi[2], alo[2]);  // (g, key 2t+1)
        split_tf32(sacc[j][3], ahi[3], alo[3]);  // (g+8, key 2t+1)
        const float* v0 = vb + (8 * j + 2 * t) * L::kStrideV + g;  // V[key 2t][dim g]
#pragma unroll
        for (int n = 0; n < NS; ++n) {
          uint32_t bhi[2], blo[2];
          split_tf32(v0[8 * n], bhi[0], blo[0]);                  // (k = t, dim 8n+g)
          split_tf32(v0[L::kStrideV + 8 * n], bhi[1], blo[1]);    // (k = t+4: key 2t+1, dim 8n+g)
          mma_tf32(o[n], alo, bhi);
          mma_tf32(o[n], ahi, blo);
          mma_tf32(o[n], ahi, bhi);
        }
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
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
    const float inv = 1.f / l[r];
    float* dst = out + o_off[r];
#pragma unroll
    for (int n = 0; n < NS; ++n) {
      dst[8 * n + 2 * t] = o[n][2 * r] * inv;
      dst[8 * n + 2 * t + 1] = o[n][2 * r + 1] * inv;
    }
  }
}

template <int HD>
void launch(const KvView<float>& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t qs, float* out,
            int64_t os, const AttentionShape& sh, cudaStream_t s) {
  const int32_t group = sh.n_head / sh.n_head_kv;
  const int32_t chunks = (kAttentionTileTokens * group + kTcRows - 1) / kTcRows;
  const dim3 grid(unsigned(n_tiles), unsigned(sh.n_head_kv * chunks));
  constexpr size_t smem = TcLayout<HD>::kSmemBytes;
  // Above the 48 KiB default for HD 128; cheap, and per call so every device gets it.
  CERA_CUDA_CHECK(cudaFuncSetAttribute(prefill_tc_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_pdl(prefill_tc_kernel<HD>, dim3(grid), dim3(kTcThreads), smem, s, kv, step, q, qs, out, os, sh, group, chunks);
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_prefill_tc_supported(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

void attention_prefill_tc(const KvLayer& kv, const StepView& step, int32_t n_tiles, const float* q, int64_t qs,
                          float* out, int64_t os, const AttentionShape& sh, cudaStream_t s) {
  if (n_tiles <= 0) return;
  if (kv.f16) throw Error(ErrorCode::Internal, "the 3xTF32 prefill attention reads an f32 KV cache only");
  const KvView<float> view{static_cast<float*>(kv.base), kv.block_size, kv.kv_dim};
  if (sh.head_dim == 64)
    launch<64>(view, step, n_tiles, q, qs, out, os, sh, s);
  else
    launch<128>(view, step, n_tiles, q, qs, out, os, sh, s);
}

}  // namespace cera::cuda
