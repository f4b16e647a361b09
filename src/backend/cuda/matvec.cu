// Decode matrix-vector product y[t] = W x[t] for 1..8 activation rows, weights in their GPU layout
// (quant_kernels.h: GGML's formats, Q4_0 in super-blocks).
//
// Memory-bound: the goal is to stream W once at close to HBM bandwidth. Layout of the work:
//  * a block owns R consecutive weight rows; its warps split k into tiles (warp w takes tiles
//    w, w+W, ...), so that even a 2048-row matrix gives every SM enough warps and bytes in flight;
//  * per tile a warp fetches the R rows' raw bytes with 16-byte, L1-bypassing loads from 16-byte
//    aligned addresses (rows of 18/22/34-byte blocks are only 2-byte aligned; an aligned 16-byte
//    load that holds at least one byte of the row cannot fault) into its own shared-memory
//    stage, then each lane decodes 8-element chunks from there, while the loads of the warp's
//    next tile are already in flight (software pipeline; the launch gives each warp several tiles
//    where the matrix is large enough to keep every SM busy). Float weights skip the stage and
//    are loaded straight into registers (rows are 16-byte aligned on that path);
//  * x is read through L1 (it is small and every block reads it) and each 8-element slice of x is
//    reused for all R rows from registers, which keeps L1 traffic below the weight stream's;
//  * per chunk the lane sums q_j * x_j and applies scale (and bias * Σx) once: 1 FMA per element;
//    quantized types (every one, int8_dot.cuh's has_int8_dot) instead round x to int8
//    (int8_dot.cuh): a lane pair takes a 32-element block of the tile, its integer dot products
//    (dp4a) scaled once per half block, its bytes loaded straight into registers (no stage);
//  * lanes reduce with shuffles, warps through shared memory, in a fixed order (deterministic).
// Fusions (MatvecFusion): the norm costs no pass of its own. W·(norm_w ⊙ x / rms(x)) is
// (W·(norm_w ⊙ x)) / rms(x), so each x slice is multiplied by norm_w as it is loaded, Σx² is summed
// from the same slices (the block's warps together read x exactly once), and the epilogue divides
// by rms(x). No prologue, no extra read of x, no kernel before the product. SwiGLU
// pairs gate row j with up row F + j in one block, so the epilogue can combine them; LFM2's short
// conv takes channels' B, C and X rows (c, D + c, 2D + c) into one block and convolves them with
// the sequence's conv state in the epilogue. One-row Q4_0 products can also hand their output to
// the next product already rounded to int8 (MatvecFusion::Int8X: the epilogue writes it, the next
// product's lanes load it instead of rounding x in every block).
// Launched with PDL: a block requests its first weight tile (with k ≤ 2048 all of its weights)
// before it waits for the previous kernel (pdl.h), so the weight stream does not stop between
// kernels.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "backend/cuda/check.h"
#include "backend/cuda/dequant_block.cuh"
#include "backend/cuda/device_attribute.h"
#include "backend/cuda/int8_dot.cuh"
#include "backend/cuda/pdl.h"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/warp_sum.cuh"
#include "cera/error.h"

namespace cera::cuda {
namespace {

using detail::Block;
using detail::Chunk8;
using detail::kIsFloat;

constexpr int kMaxWarps = 8;
// The short-conv epilogue: four channels per block (their B, C and X rows), so each x slice serves
// 12 rows (H200 tg128, LFM2-1.2B: BF16 1,208-1,252 → 1,246-1,264, Q4_0 1,425 → 1,450-1,460 against
// two channels); kernels of up to kMaxConvLen taps (LFM2: 3).
constexpr int kConvRows = 12;
constexpr int kMaxConvLen = 4;

template <GgmlType T, int NX = 1, bool kI8 = false>
struct MatvecShape {
  static constexpr bool kFloat = kIsFloat<T>;
  // kI8: int8 activations (int8_dot.cuh), a lane pair takes a 32-element block of each row per tile.
  static_assert(!kI8 || detail::kHasInt8Dot<T>, "int8 activations exist for detail::has_int8_dot types only");
  // Weight rows per block: each x slice a lane loads is reused for all of them, and a block keeps
  // R rows' loads in flight per warp. x (f32, read by every block) costs L1 bandwidth per weight
  // byte in inverse proportion. Float rows on the H200: 8 instead of 4 took the LFM2-1.2B BF16 decode
  // products, replayed as one graph, from 760 to 671 µs (80 → 90 % of 4 TB/s;
  // cera_bench_cuda_matvec chain), 4 instead of 2 gained 5-7 % before; with 3-4 rows of x they stay
  // at 4 and with 5-8 at 2 (more would spill registers). Quant rows decoded to f32: 4, bound by
  // their decode arithmetic, where 8 rows measured no better. Int8 rows (kI8): as many as float
  // rows, so each x slice (f32, the largest L1 traffic of a quant tile) serves 8 rows (H200,
  // LFM2-1.2B Q4_0 [gate; up] alone: 13.1 µs against 15.9 decoded to f32). A lane pair shares a
  // block: a lane owning a whole block of 8 rows took ~230 registers and ran decode 10 % slower.
  // (launch_rows takes 4 int8 rows for matrices too small for one block of 8 per SM, and 16 Q4_0
  // rows where that fits a large product in one wave: launch_wide.)
  static constexpr int kRows = !kFloat && !kI8 ? 4 : NX <= 2 ? 8 : NX <= 4 ? 4 : 2;
  static_assert(kRows != kConvRows, "the kernel tells the short-conv launch by its row count");
  static constexpr int kChunksPerLane = kFloat ? 1 : 2;  // 8-element chunks per lane per row per tile
  static constexpr int kTile = 256 * kChunksPerLane;  // elements of a row per warp step
};

template <GgmlType T, int kTile>
struct Stage {  // geometry of one row's staged tile (quant types)
  static constexpr int kTileBytes = kTile / Block<T>::kElems * Block<T>::kBytes;
  static constexpr int kVecs = (kTileBytes + 15) / 16 + 1;  // +1: the row may start mid-vector
  static constexpr int kSlot = kVecs * 16;
};

// Every int8 type (every quantized type the GPU reads) reads its GPU layout straight into registers
// (no stage; rows that are not 8-byte aligned decode to f32 instead, as with CERA_MATVEC_INT8=0).
// Q4_0 has its own path; the others take detail::DirectHalf. (Q8_0 and Q4_K staged their tiles through shared memory until they got
// GPU layouts: Q4_K through DirectHalf from GGML's layout, whose packed scales each lane had to load
// and unpack, measured slower than staged, H200 LFM2-1.2B Q4_K_M `--parallel 1` 1,365 -> 1,154; with
// its layout a lane shifts its scales out of one header load: 1,410 -> 1,988, docs/BENCHMARKS.md.)
template <GgmlType T, bool kI8>
inline constexpr bool kDirectQ4_0 = kI8 && T == GgmlType::Q4_0;
template <GgmlType T, bool kI8>
inline constexpr bool kDirectK = kI8 && T != GgmlType::Q4_0;  // kI8: kHasInt8Dot<T>

template <GgmlType T, int kTile, bool kI8>
constexpr int stage_slot() {  // staged bytes per row; float rows and direct loads are not staged
  if constexpr (kIsFloat<T> || kDirectQ4_0<T, kI8> || kDirectK<T, kI8>) return 0;
  else return Stage<T, kTile>::kSlot;
}

// Streamed once: keep it out of L1 so x stays there.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// How many stacked matrices W holds whose row j combine into output j: [gate; up] (SwiGLU) and
// [B; C; X] (the short conv) against one.
__host__ __device__ constexpr int stacked_parts(int out) {
  return out == int(MatvecFusion::Out::SwiGLU) ? 2 : out == int(MatvecFusion::Out::ShortConv) ? 3 : 1;
}

// Per-launch arguments that do not change the product's inner loop.
struct Fusion {
  const float* norm_w;   // null: no norm prologue
  float norm_eps;
  int out;               // MatvecFusion::Out
  float scale;
  bool early_weights;
  MatvecFusion::ShortConv conv;
  MatvecFusion::Int8X write_int8;  // SwiGLU / Accumulate: y also as int8 groups (q null: not)
  const float* write_norm_w;       // Accumulate: the next product's norm weights
  MatvecFusion::Int8X read_int8;   // x as int8 groups (matvec_kernel's kInt8X)
};

// inv[t] = 1 / sqrt(mean(x[t]²) + eps) for the first n_valid of NX rows (all threads get it).
// red: n_warps * NX floats of shared memory.
template <int NX>
__device__ void block_inv_rms(const float* x, int64_t x_stride, int64_t k, float eps, float inv[NX], float* red,
                              int n_valid = NX) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; t < n_valid && i < k; i += blockDim.x) {
      const float v = x[t * x_stride + i];
      ss = fmaf(v, v, ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp * NX + t] = ss;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    float ss = 0.f;
    for (int i = 0; i < n_warps; ++i) ss += red[i * NX + t];
    inv[t] = rsqrtf(ss / float(k) + eps);
  }
  __syncthreads();  // red is reused by the final reduction
}

// Eight floats p[0..8) through the read-only path (vec: p is 16-byte aligned).
__device__ __forceinline__ void load8(const float* p, bool vec, float v[8]) {
  if (vec) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __ldg(p + j);
  }
}

// x[t][e..e+8) for every row t; with the norm (kNorm), Σx² of the slice is added to ssq[t] and the
// slice is returned multiplied by norm_w (the division by rms(x) is left to the epilogue).
template <int NX, bool kNorm>
__device__ __forceinline__ void load_x8(const float* x, int64_t x_stride, int64_t e, bool x_vec, const float* norm_w,
                                        float xv[NX][8], float ssq[NX]) {
#pragma unroll
  for (int t = 0; t < NX; ++t) load8(x + t * x_stride + e, x_vec, xv[t]);
  if constexpr (kNorm) {
    float nw[8];
    load8(norm_w + e, x_vec && reinterpret_cast<uintptr_t>(norm_w) % 16 == 0, nw);
#pragma unroll
    for (int t = 0; t < NX; ++t)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        ssq[t] = fmaf(xv[t][j], xv[t][j], ssq[t]);
        xv[t][j] *= nw[j];
      }
  }
}

// A lane's half of block x[e..e+32) of one row (int8_dot.cuh: elements 8h..8h+7, 16+8h..16+8h+7),
// zeros where !valid; with the norm, Σx² of it is added to ssq and it is returned multiplied by
// norm_w (nw = norm_w + e).
template <bool kNorm>
__device__ __forceinline__ void load_x16(const float* x, int half, bool valid, bool x_vec, const float* nw,
                                         float v[16], float& ssq) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = 0.0f;
    return;
  }
  load8(x + 8 * half, x_vec, v);
  load8(x + 16 + 8 * half, x_vec, v + 8);
  if constexpr (kNorm) {
    const bool nw_vec = x_vec && reinterpret_cast<uintptr_t>(nw) % 16 == 0;
    float n[16];
    load8(nw + 8 * half, nw_vec, n);
    load8(nw + 16 + 8 * half, nw_vec, n + 8);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      ssq = fmaf(v[j], v[j], ssq);
      v[j] *= n[j];
    }
  }
}

// This lane's half of block x[t][e..e+32) of every row t, rounded to int8 (int8_dot.cuh), zeros
// where !valid; with the norm, multiplied by norm_w and Σx² added to ssq[t]. All 32 lanes call it
// together: the lane pair exchanges its max.
template <int NX, bool kNorm>
__device__ __forceinline__ void quantize_x_half(const float* x, int64_t x_stride, int64_t e, int half, bool valid,
                                                bool x_vec, const float* norm_w, float (&ssq)[NX],
                                                detail::XHalfI8 (&xq)[NX]) {
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    float v[16];
    load_x16<kNorm>(x + t * x_stride + e, half, valid, x_vec, norm_w + (kNorm ? e : 0), v, ssq[t]);
    detail::quantize_x16(v, xq[t]);
  }
}

// Eight float weights from the raw 16-byte vectors of a float row (exact conversions).
template <GgmlType T>
__device__ __forceinline__ void float_chunk(const uint4* raw, float w[8]) {
  if constexpr (T == GgmlType::F32) {
    const uint32_t u[8] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w, raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = __uint_as_float(u[j]);
  } else {
    const uint32_t u[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (T == GgmlType::F16) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[j]));
        w[2 * j] = f.x, w[2 * j + 1] = f.y;
      } else {
        w[2 * j] = __uint_as_float(u[j] << 16), w[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
      }
    }
  }
}

// The DirectHalf types' path (int8_dot.cuh): of tile `tile` of R rows, lane pair
// blk = lane >> 1 loads sub-block blk & 7 of the tile's super-block blk >> 3, each lane one half,
// into q (nothing past k).
template <GgmlType T, int R, int kTile>
__device__ __forceinline__ void fetch_direct_tile(detail::DirectHalf<T> (&q)[R], const uint8_t* const (&rows)[R],
                                               int64_t tile, int64_t k, int lane) {
  const int half = lane & 1, blk = lane >> 1;
  const int64_t b = tile * (kTile / 32) + blk;  // the block in the row
  if (32 * b >= k) return;
  const int64_t sb = (b >> 3) * Block<T>::kBytes;
#pragma unroll
  for (int r = 0; r < R; ++r) q[r] = detail::DirectHalf<T>::load(rows[r] + sb, blk & 7, half);
}

// Element i = 8g + j of an Int8X row: its level, value v rounded with its group's max|v| (amax,
// known to all 8 lanes of the group) as quantize_x16 rounds; lane j = 0 also writes the group's
// scale and, where the row has them, its Σx² (ss).
__device__ __forceinline__ void write_int8_group(const MatvecFusion::Int8X& out, int64_t i, float v, float amax,
                                                 float ss) {
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int64_t g = i / 8;
  const int64_t slot = (g >> 2) * 4 + (g & 1) * 2 + ((g >> 1) & 1);  // lane order: g0, g2, g1, g3
  out.q[slot * 8 + (i & 7)] = int8_t(detail::round_to_i8_bits(v, id) & 0xFFu);
  if ((i & 7) == 0) {
    out.d[slot] = d;
    if (out.ssq) out.ssq[slot] = ss;
  }
}

// A block owns one row group, as small as possible, so the grid spreads the weight stream over
// every SM from the first instruction. kNorm: the rms norm of x is folded in (see the top).
// R: weight rows per block (MatvecShape::kRows; kConvRows with the short-conv epilogue, which needs
// a channel's B, C and X rows together).
// kInt8X: x arrives as MatvecFusion::Int8X (f.read_int8; Q4_0, one x row; with kNorm its groups
// hold norm_w ⊙ x and their Σx²) and `x` is unused.
template <GgmlType T, int NX, bool kNorm, int R, bool kI8, bool kInt8X = false>
__global__ void __launch_bounds__(kMaxWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ w, int64_t n_rows, int64_t k, size_t row_bytes,
                  const float* __restrict__ x, int64_t x_stride, bool x_vec, float* __restrict__ y,
                  int64_t y_stride, Fusion f) {
  using S = MatvecShape<T, NX, kI8>;
  static_assert(!kInt8X || (kDirectQ4_0<T, kI8> && NX == 1), "int8 x: Q4_0, one row");
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const bool glu = f.out == int(MatvecFusion::Out::SwiGLU);
  constexpr bool conv = R == kConvRows;  // launched for Out::ShortConv only
  // W is `parts` stacked matrices (stacked_parts; conv is known at compile time here).
  const int parts = conv ? 3 : glu ? 2 : 1;
  const int64_t n_out = n_rows / parts;  // output columns
  const int per_group = R / parts;       // outputs per block

  // Shared memory: the warps' stages, the reduction, then (norm) the Σx² reduction.
  float* red = reinterpret_cast<float*>(smem) + size_t(n_warps) * R * stage_slot<T, S::kTile, kI8>() / sizeof(float);
  float* red_ss = red + size_t(n_warps) * R * NX;
  float ssq[NX];  // this lane's share of Σx² (kNorm)
#pragma unroll
  for (int t = 0; t < NX; ++t) ssq[t] = 0.0f;

  pdl_launch_dependents();
  const int64_t group = blockIdx.x;  // the grid has exactly one block per row group
  // The group's weight rows: per_group consecutive rows of each part (R consecutive ones when
  // there is one part). A tail group repeats the last row (its results are not stored).
  const int64_t row0 = group * per_group;
  // Accumulate: the output this thread adds to (thread r·NX + t: row r, x row t), read as soon as
  // the wait returns, so that its load overlaps the product instead of following it in the epilogue
  // (H200 tg128: LFM2-1.2B Q4_0 2,387 -> 2,418, Llama-3.2-1B Q4_0 2,049 -> 2,070, BF16 +0.5-0.8 %).
  const bool acc_thread = f.out == int(MatvecFusion::Out::Accumulate) && threadIdx.x < R * NX &&
                          row0 + threadIdx.x / NX < n_out;
  float* const acc_out = acc_thread ? y + (threadIdx.x % NX) * y_stride + row0 + threadIdx.x / NX : nullptr;
  // Accumulate writing Int8X for a norm: thread r's output's norm weight, loaded before the wait.
  const bool writes_normed = NX == 1 && (R == 8 || R == 16) && f.write_norm_w && threadIdx.x < R;
  const float next_norm_w = writes_normed ? __ldg(f.write_norm_w + row0 + threadIdx.x) : 0.0f;
  float y_in = 0.0f;
  bool waited = false;
  auto wait_for_inputs = [&] {  // after the first weights are in flight (pdl.h)
    if (!waited) {
      pdl_wait();
      if (acc_thread) y_in = *acc_out;
    }
    waited = true;
  };

  {
    const uint8_t* rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t j = min(row0 + r % per_group, n_out - 1);
      rows[r] = w + size_t((r / per_group) * n_out + j) * row_bytes;
    }
    // Short conv: thread (channel i, row t) loads its conv weights and its sequence's state now,
    // before the PDL wait: no kernel of this step writes them (the step's metadata was copied before
    // its first kernel; the state is this layer's, written only by this launch), and the chain of
    // dependent loads (token → sequence → slot → state) would otherwise add to every block's tail.
    float conv_w[kMaxConvLen], conv_st[kMaxConvLen];  // conv_st: the (len - 1) state entries
    float* conv_slot = nullptr;
    const int conv_i = threadIdx.x / NX, conv_t = threadIdx.x % NX;
    const bool conv_thread = conv && threadIdx.x < per_group * NX && row0 + conv_i < n_out;
    if (conv_thread) {
      const int64_t c = row0 + conv_i;
      const int32_t n_state = f.conv.len - 1;
      conv_slot = f.conv.state + int64_t(f.conv.seqs[f.conv.token_seq[conv_t]].conv_slot) * n_state * n_out + c;
#pragma unroll
      for (int j = 0; j < kMaxConvLen; ++j)
        if (j < f.conv.len) conv_w[j] = f.conv.w[c * f.conv.len + j];
#pragma unroll
      for (int j = 0; j < kMaxConvLen - 1; ++j)
        if (j < n_state) conv_st[j] = conv_slot[int64_t(j) * n_out];
    }
    float acc[R][NX];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NX; ++t) acc[r][t] = 0.0f;

    const int64_t n_tiles = (k + S::kTile - 1) / S::kTile;
    if constexpr (S::kFloat) {
      constexpr int kVecsPerChunk = T == GgmlType::F32 ? 2 : 1;
      constexpr int kElemBytes = T == GgmlType::F32 ? 4 : 2;
      uint4 raw[S::kChunksPerLane][R][kVecsPerChunk];
      // All of a tile's loads are issued together, so they are in flight at once.
      auto fetch = [&](int64_t tile) {
#pragma unroll
        for (int u = 0; u < S::kChunksPerLane; ++u) {
          const int64_t e = tile * S::kTile + 8 * (lane + 32 * u);
          if (e < k)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int v = 0; v < kVecsPerChunk; ++v)
                raw[u][r][v] = ld_stream(reinterpret_cast<const uint4*>(rows[r] + e * kElemBytes) + v);
        }
      };
      // The first tile's weights are requested before the PDL wait: with k ≤ 2048 that is all of
      // the block's weights, so a block resident during the previous kernel's tail has its
      // whole share in registers by the time x is ready.
      if (!f.early_weights) wait_for_inputs();
      if (warp < n_tiles) fetch(warp);
      wait_for_inputs();
      for (int64_t tile = warp; tile < n_tiles; tile += n_warps) {
        if (tile != warp) fetch(tile);
        const int64_t e_tile = tile * S::kTile;
#pragma unroll
        for (int u = 0; u < S::kChunksPerLane; ++u) {
          const int64_t e = e_tile + 8 * (lane + 32 * u);
          if (e >= k) continue;
          float xv[NX][8];
          load_x8<NX, kNorm>(x, x_stride, e, x_vec, f.norm_w, xv, ssq);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float wv[8];
            float_chunk<T>(raw[u][r], wv);
#pragma unroll
            for (int t = 0; t < NX; ++t)
#pragma unroll
              for (int j = 0; j < 8; ++j) acc[r][t] = fmaf(wv[j], xv[t][j], acc[r][t]);
          }
        }
      }
    } else if constexpr (kDirectQ4_0<T, kI8>) {
      // Q4_0 in its GPU layout (quant_kernels.h, dequant_block.cuh): lane pair `blk` takes block blk
      // of the tile (16 blocks of 32 elements), each lane one half (int8_dot.cuh): its 8 nibble
      // bytes of each row with one aligned load and the block's scale, straight into registers.
      // (H200, the layout probe of `466b129` against GGML blocks staged through shared memory:
      // [gate; up] 1.25×, down 1.30×, head 1.46× faster; docs/BENCHMARKS.md.) Not kept: each warp
      // copying all of its tiles into shared memory with cp.async before the PDL wait, so a block's
      // whole share is in flight without holding registers — H200 tg128 LFM2-1.2B Q4_0 2,386 →
      // 1,903, Llama-3.2-1B Q4_0 2,057 → 1,719 (same arithmetic, bit for bit the same outputs).
      const int half = lane & 1, blk = lane >> 1;
      uint2 nib[R];
      uint32_t scale[R];
      auto fetch = [&](int64_t tile) {
        const int64_t b = tile * (S::kTile / 32) + blk;  // the block in the row
        if (32 * b >= k) return;
        const int64_t sb = (b >> 3) * Block<T>::kBytes;
        const int s = int(b & 7);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          nib[r] = detail::ld_stream_u2(rows[r] + sb + 16 + 16 * s + 8 * half);
          scale[r] = __ldg(reinterpret_cast<const unsigned short*>(rows[r] + sb) + s);
        }
      };
      if (!f.early_weights) wait_for_inputs();
      if (warp < n_tiles) fetch(warp);
      wait_for_inputs();
      for (int64_t tile = warp; tile < n_tiles; tile += n_warps) {
        if (tile != warp) fetch(tile);
        const int64_t e = tile * S::kTile + 32 * blk;
        const bool valid = e < k;  // k is a multiple of 32: both halves of a block or neither
        if constexpr (kInt8X) {
          // This lane's half: groups h and 2 + h of the block (Int8X's lane order), a scale each.
          const uint4 q = valid ? __ldg(reinterpret_cast<const uint4*>(f.read_int8.q + e + 16 * half))
                                : make_uint4(0, 0, 0, 0);
          const float2 d = valid ? __ldg(reinterpret_cast<const float2*>(f.read_int8.d + e / 8 + 2 * half))
                                 : make_float2(0.f, 0.f);
          // Σ (level - 8) · q per group: the offsets from each group's Σq.
          const int off0 = -8 * __dp4a(int(q.y), 0x01010101, __dp4a(int(q.x), 0x01010101, 0));
          const int off1 = -8 * __dp4a(int(q.w), 0x01010101, __dp4a(int(q.z), 0x01010101, 0));
          if constexpr (kNorm) {  // the two groups' Σx² (the lanes and warps together see each group once)
            const float2 p = valid ? __ldg(reinterpret_cast<const float2*>(f.read_int8.ssq + e / 8 + 2 * half))
                                   : make_float2(0.f, 0.f);
            ssq[0] += p.x + p.y;
          }
          if (valid)
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const int s0 = __dp4a(int(nib[r].y & 0x0F0F0F0Fu), int(q.y),
                                    __dp4a(int(nib[r].x & 0x0F0F0F0Fu), int(q.x), off0));
              const int s1 = __dp4a(int((nib[r].y >> 4) & 0x0F0F0F0Fu), int(q.w),
                                    __dp4a(int((nib[r].x >> 4) & 0x0F0F0F0Fu), int(q.z), off1));
              acc[r][0] = fmaf(fmaf(float(s0), d.x, __fmul_rn(float(s1), d.y)), detail::h2f(scale[r]), acc[r][0]);
            }
          continue;
        }
        detail::XHalfI8 xq[NX];
        quantize_x_half<NX, kNorm>(x, x_stride, e, half, valid, x_vec, f.norm_w, ssq, xq);
        if (valid)
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NX; ++t)
              acc[r][t] = fmaf(float(detail::q4_0_half_dot(nib[r], xq[t])),
                               __fmul_rn(detail::h2f(scale[r]), xq[t].d), acc[r][t]);
      }
    } else if constexpr (kDirectK<T, kI8>) {
      // The other int8 types (super-blocks of 8 blocks on the GPU): lane pair `blk` takes block
      // blk & 7 of super-block blk >> 3 of the tile (the same sub-block in every tile: a tile is 2
      // super-blocks), each lane one half (int8_dot.cuh), its bytes straight into registers. (H200,
      // the Q6_K 65,536 × 2048 head through shared memory: 68 µs, 40 % of 4 TB/s, no faster than
      // decoding to f32; direct 50 µs.) Not kept: a warp requesting its next tile before computing
      // this one (twice the registers): tg128 LFM2-1.2B Q4_0 2,413 -> 2,341, Llama-3.2-1B Q4_0
      // 2,060 -> 1,954, Q4_K_M 1,396 -> 1,322.
      using D = detail::DirectHalf<T>;
      const int half = lane & 1, blk = lane >> 1, sub = blk & 7;
      D q[R];
      auto fetch = [&](int64_t tile) { fetch_direct_tile<T, R, S::kTile>(q, rows, tile, k, lane); };
      if (!f.early_weights) wait_for_inputs();
      if (warp < n_tiles) fetch(warp);
      wait_for_inputs();
      for (int64_t tile = warp; tile < n_tiles; tile += n_warps) {
        if (tile != warp) fetch(tile);
        const int64_t e = tile * S::kTile + 32 * blk;
        const bool valid = e < k;  // k is a multiple of 256
        detail::XHalfI8 xq[NX];
        quantize_x_half<NX, kNorm>(x, x_stride, e, half, valid, x_vec, f.norm_w, ssq, xq);
        if (valid)
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NX; ++t) D::add(q[r], sub, xq[t], acc[r][t]);
      }
    } else {
      static_assert(!kI8, "every int8 type takes a direct path");
      using B = Block<T>;
      using G = Stage<T, S::kTile>;
      // The R rows' staged tiles lie back to back in the warp's stage, kVecs 16-byte vectors each.
      uint8_t* stage = reinterpret_cast<uint8_t*>(smem) + size_t(warp) * R * G::kSlot;
      // A row's last block may be partial (Q4_0 rows are padded to whole super-blocks).
      const int64_t data_bytes = (k + B::kElems - 1) / B::kElems * B::kBytes;
      // The products of one staged tile into acc.
      auto compute = [&](int64_t tile, const uint8_t* tile_stage) {
        const int64_t e_tile = tile * S::kTile, off = tile * G::kTileBytes;
#pragma unroll
        for (int u = 0; u < S::kChunksPerLane; ++u) {
          const int c = lane + 32 * u;  // chunk within the tile
          const int64_t e = e_tile + 8 * c;
          if (e >= k) continue;
          float xv[NX][8];
          load_x8<NX, kNorm>(x, x_stride, e, x_vec, f.norm_w, xv, ssq);
          float xsum[NX];
          if constexpr (B::kHasBias) {
#pragma unroll
            for (int t = 0; t < NX; ++t)
              xsum[t] = ((xv[t][0] + xv[t][1]) + (xv[t][2] + xv[t][3])) +
                        ((xv[t][4] + xv[t][5]) + (xv[t][6] + xv[t][7]));
          }
          const int blk = (8 * c) / B::kElems, part = ((8 * c) % B::kElems) / 8;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const int phase = int(reinterpret_cast<uintptr_t>(rows[r] + off) & 15);
            Chunk8 ch;
            B::decode(tile_stage + r * G::kSlot + phase + blk * B::kBytes, part, ch);
#pragma unroll
            for (int t = 0; t < NX; ++t) {
              float s = 0.0f;
#pragma unroll
              for (int j = 0; j < 8; ++j) s = fmaf(ch.q[j], xv[t][j], s);
              acc[r][t] = fmaf(ch.scale, s, acc[r][t]);
              if constexpr (B::kHasBias) acc[r][t] = fmaf(ch.bias, xsum[t], acc[r][t]);
            }
          }
        }
      };
      // One tile at a time through registers, the next tile's loads in flight while this one is
      // decoded. (Staging up to 4 tiles per warp at once with cp.async measured slower on the H200:
      // LFM2-1.2B Q4_0 tg128 1,320 against 1,430, Q4_K_M 920-973 against 1,042-1,048.)
      if (!f.early_weights) wait_for_inputs();
      {
        constexpr int kPerLane = (G::kVecs + 31) / 32;
        static_assert(R * kPerLane <= 32, "the valid mask has 32 bits");
        uint4 raw[R][kPerLane];
        auto fetch_regs = [&](int64_t tile) {
          const int64_t off = tile * G::kTileBytes;
          const int64_t bytes = data_bytes - off < G::kTileBytes ? data_bytes - off : G::kTileBytes;
          uint32_t valid = 0;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uintptr_t a = reinterpret_cast<uintptr_t>(rows[r] + off);
            const int n_vec = int(((a & 15) + bytes + 15) >> 4);
#pragma unroll
            for (int q = 0; q < kPerLane; ++q) {
              const int v = lane + 32 * q;
              if (v < G::kVecs && v < n_vec) {
                raw[r][q] = ld_stream(reinterpret_cast<const uint4*>(a & ~uintptr_t(15)) + v);
                valid |= 1u << (r * kPerLane + q);
              }
            }
          }
          return valid;
        };
        uint32_t valid = warp < n_tiles ? fetch_regs(warp) : 0;
        wait_for_inputs();
        for (int64_t tile = warp; tile < n_tiles; tile += n_warps) {
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int q = 0; q < kPerLane; ++q)
              if (valid >> (r * kPerLane + q) & 1)
                reinterpret_cast<uint4*>(stage + r * G::kSlot)[lane + 32 * q] = raw[r][q];
          __syncwarp();
          if (tile + n_warps < n_tiles) valid = fetch_regs(tile + n_warps);
          compute(tile, stage);
          __syncwarp();  // the stage is overwritten by the next tile
        }
      }
    }

    // Lanes (warp_sum.cuh: value r·NX + t is acc[r][t]), then warps, in a fixed order, so results
    // do not depend on timing.
    {
      using Sum = detail::WarpSum<R * NX>;
      float v[R * NX];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NX; ++t) v[r * NX + t] = acc[r][t];
      Sum::run(v, lane);
      if (Sum::writer(lane))
#pragma unroll
        for (int i = 0; i < Sum::kKept; ++i) red[warp * R * NX + Sum::index(lane, i)] = v[i];
    }
    if constexpr (kNorm)
#pragma unroll
      for (int t = 0; t < NX; ++t) {
        float v = ssq[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red_ss[warp * NX + t] = v;
      }
    __syncthreads();
    // 1 / rms(x[t]) in f32 (rsqrtf, ≤ 2 ulp): double division and square root are slow-path
    // subroutines, and every block of this short kernel would pay their latency.
    auto inv_rms = [&](int t) {
      if constexpr (!kNorm) return 1.0f;
      float ss = 0.f;
      for (int i = 0; i < n_warps; ++i) ss += red_ss[i * NX + t];
      return rsqrtf(ss / float(k) + f.norm_eps);
    };
    auto total = [&](int r, int t) {
      float s = red[r * NX + t];
      for (int i = 1; i < n_warps; ++i) s += red[i * R * NX + r * NX + t];
      return kNorm ? s * inv_rms(t) : s;
    };
    if (glu && !conv) {
      if (threadIdx.x < (R / 2) * NX) {
        const int r = threadIdx.x / NX, t = threadIdx.x % NX;
        float v = 0.f;
        if (row0 + r < n_out) {
          const float g = total(r, t), u = total(r + R / 2, t);
          v = g / (1.f + expf(-g)) * u;
          y[t * y_stride + row0 + r] = v;
        }
        if (NX == 1 && R == 16 && f.write_int8.q) {
          // The block's 8 outputs (lanes 0-7 of warp 0) are one Int8X group (the host checked
          // n_out % 32 == 0): its max, then each lane's level (quantize_x16's arithmetic).
          float amax = fabsf(v);
#pragma unroll
          for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFu, amax, o));
          write_int8_group(f.write_int8, row0 + r, v, amax, 0.0f);
        }
      }
    } else if (conv) {
      // Thread (i, t) is the only reader and writer of its sequence's state for channel row0 + i.
      // Arithmetic as conv_decode_kernel (short_conv.cu), no contraction.
      if (conv_thread) {
        const int i = conv_i, t = conv_t;
        const int32_t n_state = f.conv.len - 1;
        const float bx = __fmul_rn(total(i, t), total(i + 2 * per_group, t));
        float a = 0.f;
#pragma unroll
        for (int j = 0; j < kMaxConvLen; ++j)
          if (j < f.conv.len) a = __fadd_rn(a, __fmul_rn(conv_w[j], j < n_state ? conv_st[j] : bx));
        y[t * y_stride + row0 + i] = __fmul_rn(total(i + per_group, t), a);
#pragma unroll
        for (int j = 0; j + 1 < kMaxConvLen; ++j)
          if (j + 1 < n_state) conv_slot[int64_t(j) * n_out] = conv_st[j + 1];
        if (n_state > 0) conv_slot[int64_t(n_state - 1) * n_out] = bx;
      }
    } else if (threadIdx.x < R * NX) {
      const int r = threadIdx.x / NX, t = threadIdx.x % NX;
      float v = 0.f;
      if (row0 + r < n_out) {
        const float s = total(r, t);
        float* out = y + t * y_stride + row0 + r;
        if (f.out == int(MatvecFusion::Out::Accumulate)) v = y_in + f.scale * s;  // out == acc_out
        else v = s;
        *out = v;
      }
      if (writes_normed) {
        // Each 8 outputs (lanes 8i..8i+7 of warp 0; the host checked n_out % 32 == 0) are one Int8X
        // group of norm_w ⊙ v, with their Σv² (a fixed butterfly: deterministic).
        const float z = __fmul_rn(next_norm_w, v);  // _rn: no contraction, so the host can repeat it
        float amax = fabsf(z), ss = __fmul_rn(v, v);
        constexpr unsigned kMask = R == 16 ? 0xFFFFu : 0xFFu;
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) {
          amax = fmaxf(amax, __shfl_xor_sync(kMask, amax, o));
          ss += __shfl_xor_sync(kMask, ss, o);
        }
        write_int8_group(f.write_int8, row0 + r, z, amax, ss);
      }
    }
  }
  wait_for_inputs();  // every block waits, even one with no tile (pdl.h)
}

// One row of x against a tall Q6_K matrix (the LM head of the Q4_0 / Q4_K_M mixes: 65,536+ rows
// of k = 1024-2048): the block's warps take different rows, each over the whole of k, so that x is
// rounded to int8 once per block, into shared memory, instead of once per warp and tile. (With
// 8-row, one-warp blocks of 4 tiles, Nsight Compute put the 65,536 × 2048 head of LFM2-1.2B at 44 µs
// alone, 55 % of HBM bandwidth, issuing 0.65 instructions a cycle per scheduler: bound by its
// instructions as much as by its loads, and rounding x was ~1/4 of them.) Weights and arithmetic
// per lane as matvec_kernel's Q6_K path (int8_dot.cuh, DirectHalf), tiles in order; outputs Store
// or Accumulate. H200: that head alone 44.0 -> 38.4 µs (63 % of HBM bandwidth); tg128 /
// `--parallel 1` LFM2-1.2B Q4_0 2,404 -> 2,456 / 2,427 -> 2,454, Llama-3.2-1B Q4_0 2,098 -> 2,143 /
// 1,998 -> 2,032, LFM2-1.2B Q4_K_M +0.9 %, Qwen3-0.6B Q4_0 +0.3-0.8 %. With Q6_K's lane-order GPU
// layout (quant_kernels.h) it takes 80 registers instead of 126 (6 blocks an SM, not 4); H100,
// Nsight Compute: LFM2-1.2B's head 48.0 -> 45.5 µs, Llama-3.2-1B's 87.3 -> 83.1 µs.
constexpr int kSharedXWarps = 4;
template <GgmlType T>
__global__ void __launch_bounds__(kSharedXWarps * 32)
    matvec_shared_x_kernel(const uint8_t* __restrict__ w, int64_t n_rows, int64_t k, size_t row_bytes,
                           const float* __restrict__ x, bool x_vec, float* __restrict__ y, Fusion f) {
  static_assert(T == GgmlType::Q6_K, "Q6_K's direct path only");
  using S = MatvecShape<T, 1, true>;
  constexpr int R = S::kRows;
  using Sum = detail::WarpSum<R>;
  static_assert(Sum::kKept == 1, "one row per writer lane");
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n_halves = k / 16;  // half blocks of x (k is a multiple of 256)
  uint4* const xs_q = smem;                                                 // [n_halves] int8 values
  float* const xs_d = reinterpret_cast<float*>(xs_q + n_halves);            // [n_halves] block scales
  int* const xs_sum = reinterpret_cast<int*>(xs_d + n_halves);              // [n_halves] Σq

  pdl_launch_dependents();
  const int64_t row0 = (int64_t(blockIdx.x) * kSharedXWarps + warp) * R;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = w + size_t(min(row0 + r, n_rows - 1)) * row_bytes;
  // The lane that writes row row0 + Sum::index(lane, 0) (a writer) also reads it, for Accumulate.
  const int64_t out_row = row0 + Sum::index(lane, 0);
  const bool writes = Sum::writer(lane) && out_row < n_rows;
  const bool accumulate = f.out == int(MatvecFusion::Out::Accumulate);

  using D = detail::DirectHalf<T>;
  const int half = lane & 1, blk = lane >> 1, sub = blk & 7;
  D q[R];
  auto fetch = [&](int64_t tile) { fetch_direct_tile<T, R, S::kTile>(q, rows, tile, k, lane); };
  const int64_t n_tiles = (k + S::kTile - 1) / S::kTile;
  fetch(0);  // before the wait (pdl.h), always: CERA_CUDA_EARLY_WEIGHTS=0 does not reach this kernel
  pdl_wait();
  const float y_in = writes && accumulate ? y[out_row] : 0.0f;

  // x to int8 (int8_dot.cuh), thread i taking halves i, i + blockDim, ...: a lane pair takes the two
  // halves of one block, as quantize_x16 requires.
  for (int64_t base = 0; base < n_halves; base += blockDim.x) {
    const int64_t h = base + threadIdx.x;
    const bool valid = h < n_halves;
    float v[16], ssq = 0.0f;
    load_x16<false>(x + (valid ? 16 * (h & ~int64_t(1)) : 0), int(h & 1), valid, x_vec, nullptr, v, ssq);
    detail::XHalfI8 xq;
    detail::quantize_x16(v, xq);
    if (valid) {
      xs_q[h] = make_uint4(xq.q[0], xq.q[1], xq.q[2], xq.q[3]);
      xs_d[h] = xq.d;
      xs_sum[h] = xq.sum;
    }
  }
  __syncthreads();

  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    if (tile != 0) fetch(tile);
    const int64_t b = tile * (S::kTile / 32) + blk;
    if (32 * b < k) {
      const int64_t h = 2 * b + half;
      const uint4 qv = xs_q[h];
      const detail::XHalfI8 xq{{qv.x, qv.y, qv.z, qv.w}, xs_d[h], xs_sum[h]};
#pragma unroll
      for (int r = 0; r < R; ++r) D::add(q[r], sub, xq, acc[r]);
    }
  }
  Sum::run(acc, lane);
  if (writes) y[out_row] = accumulate ? y_in + f.scale * acc[0] : acc[0];
}

// Whether a product takes matvec_shared_x_kernel: one x row, a tall Q6_K matrix, no fused norm or
// epilogue. CERA_CUDA_MATVEC_SHARED_X=0: never (read per call, for A/B runs and tests).
constexpr int64_t kSharedXMinRows = 16384, kSharedXMaxK = 16384;
bool shared_x_enabled() {
  const char* e = std::getenv("CERA_CUDA_MATVEC_SHARED_X");
  return !(e && std::strcmp(e, "0") == 0);
}

// Float rows that are not 16-byte aligned (or k % 8 != 0): one warp per row, scalar loads. Rare
// (real models have aligned rows); kept simple.
template <GgmlType T>
__global__ void matvec_float_fallback_kernel(const uint8_t* __restrict__ w, int64_t n_rows, int64_t k,
                                             size_t row_bytes, const float* __restrict__ x, int64_t x_stride,
                                             int32_t n_x_rows, float* __restrict__ y, int64_t y_stride, Fusion f) {
  __shared__ float red[32 * kMaxMatvecRows];
  pdl_launch_dependents();
  pdl_wait();
  float inv[kMaxMatvecRows];
  if (f.norm_w) block_inv_rms<kMaxMatvecRows>(x, x_stride, k, f.norm_eps, inv, red, n_x_rows);
  const bool glu = f.out == int(MatvecFusion::Out::SwiGLU);
  const int lane = threadIdx.x & 31;
  const int64_t n_out = glu ? n_rows / 2 : n_rows;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= n_out) return;
  float acc[2][kMaxMatvecRows] = {};
  for (int half = 0; half < (glu ? 2 : 1); ++half) {  // SwiGLU: the gate row, then the up row
    const uint8_t* wr = w + size_t(row + half * n_out) * row_bytes;
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = detail::float_elem<T>(wr, i);
#pragma unroll
      for (int t = 0; t < kMaxMatvecRows; ++t)
        if (t < n_x_rows) {
          const float xv = f.norm_w ? x[t * x_stride + i] * inv[t] * f.norm_w[i] : x[t * x_stride + i];
          acc[half][t] = fmaf(wv, xv, acc[half][t]);
        }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxMatvecRows; ++t) {
    float v = acc[0][t], u = acc[1][t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    for (int o = 16; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
    if (lane == 0 && t < n_x_rows) {
      float* out = y + t * y_stride + row;
      if (glu) *out = v / (1.f + expf(-v)) * u;
      else if (f.out == int(MatvecFusion::Out::Accumulate)) *out += f.scale * v;
      else *out = v;
    }
  }
}

// The vectorised kernel reads float rows 16 bytes at a time.
bool float_rows_aligned(const void* w, size_t row_bytes, int64_t k) {
  return reinterpret_cast<uintptr_t>(w) % 16 == 0 && row_bytes % 16 == 0 && k % 8 == 0;
}

int sm_count() { return current_device_attribute(cudaDevAttrMultiProcessorCount); }

// Warps per SM a quant product aims for when it splits k over a block's warps (launch_nx): fewer
// warps per block give each more tiles to pipeline. H200, tg128 `--parallel 1` of the LFM2-1.2B
// shape, warps per SM 12 / 24 / 48 / 96: Q4_0 1,776 / 1,842 / 1,798 / 1,798, Q4_K_M 1,214 /
// 1,293 / 1,207 / 1,208, Q8_0 (int8, staged 34-byte blocks) 1,275 / 1,193 / 1,061 / 1,057
// (4 / 6 / 8 / 16: 1,196 / 1,185 / 1,277 / 1,195).
// With their GPU layouts and direct loads (`CERA_EXP_WARPS_PER_SM` while tried, tg128 / `--parallel
// 1`): Q8_0 12 → 1,862 / 1,847, 24 → 1,792 / 1,777; Q4_K_M (its Q4_K and Q6_K products) 12 → 1,982 /
// 1,990, 24 → 1,879 / 1,883. Q4_0 keeps 24.
template <GgmlType T, bool kI8>
inline constexpr int64_t kWarpsPerSm = kI8 && T != GgmlType::Q4_0 ? 12 : 24;

// A product's launch: `blocks` blocks of `warps` warps, each with `smem` bytes of shared memory.
struct MatvecLaunch {
  int64_t blocks;
  int warps;
  size_t smem;
};

// The launch of R rows per block. `warps` > 0 fixes the warps per block (at most one per tile).
template <GgmlType T, int NX, int R, bool kI8>
MatvecLaunch plan_nx(int64_t n_rows, int64_t k, int parts, int warps_wanted = 0) {
  using S = MatvecShape<T, NX, kI8>;
  const int64_t n_tiles = (k + S::kTile - 1) / S::kTile;
  const int64_t out_per_group = R / parts;
  const int64_t blocks = (n_rows / parts + out_per_group - 1) / out_per_group;
  int warps = int(std::clamp<int64_t>(n_tiles, 1, kMaxWarps));
  if (warps_wanted > 0) {
    warps = std::min(warps, warps_wanted);
  } else if (!S::kFloat) {
    // Quant rows pipeline their tiles, which pays only when a warp has several: split k over the
    // fewest warps (a power of two) that still give every SM ~kWarpsPerSm warps.
    const int64_t want = int64_t(sm_count()) * kWarpsPerSm<T, kI8>;
    int wq = 1;
    while (wq < warps && blocks * wq < want) wq *= 2;
    warps = std::min(wq, warps);
  }
  const size_t smem = size_t(warps) * (R * (NX * sizeof(float) + stage_slot<T, S::kTile, kI8>()) + NX * sizeof(float));
  return {blocks, warps, smem};
}

template <GgmlType T, int NX, int R, bool kI8>
auto matvec_kernel_for(const Fusion& f) {
  if constexpr (kDirectQ4_0<T, kI8> && NX == 1)
    if (f.read_int8.q)  // matvec() checked the rest
      return f.norm_w ? matvec_kernel<T, 1, true, R, kI8, true> : matvec_kernel<T, 1, false, R, kI8, true>;
  return f.norm_w ? matvec_kernel<T, NX, true, R, kI8> : matvec_kernel<T, NX, false, R, kI8>;
}

// How many blocks of `kernel` launched as `plan` the device holds at once (cached per shape).
template <class Kernel>
int64_t resident_blocks(Kernel kernel, const MatvecLaunch& plan) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t, int>, int64_t> known;
  int dev = 0;
  CERA_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), plan.warps, plan.smem, dev);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int per_sm = 0;
  CERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, plan.warps * 32, plan.smem));
  return known[key] = int64_t(per_sm) * sm_count();
}

// Whether every block of `kernel` launched as `plan` is resident at once.
template <class Kernel>
bool fits_one_wave(Kernel kernel, const MatvecLaunch& plan) {
  return plan.blocks <= resident_blocks(kernel, plan);
}

// CERA_CUDA_MATVEC_REPORT=1: each distinct decode-product launch once on stderr, with how many
// waves of resident blocks it takes: where to look for a launch that pays twice for load latency.
template <class Kernel>
void report_launch(Kernel kernel, GgmlType type, int nx, int rows_per_block, bool i8, int64_t n_rows, int64_t k,
                   const Fusion& f, const MatvecLaunch& plan) {
  static const bool on = [] {
    const char* v = std::getenv("CERA_CUDA_MATVEC_REPORT");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (!on) return;
  static std::mutex mutex;
  static std::set<std::tuple<const void*, int64_t, int64_t, int>> seen;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!seen.emplace(reinterpret_cast<const void*>(kernel), n_rows, k, plan.warps).second) return;
  }
  const int64_t resident = resident_blocks(kernel, plan);
  std::fprintf(stderr,
               "cera: matvec %s%s %lld x %lld, %d x rows, out %d%s: %lld blocks of %d rows x %d warps, %lld "
               "resident (%.2f waves)\n",
               std::string(ggml_type_name(type)).c_str(), i8 ? " (int8 x)" : "", static_cast<long long>(n_rows),
               static_cast<long long>(k), nx, f.out, f.norm_w ? " +norm" : "", static_cast<long long>(plan.blocks),
               rows_per_block, plan.warps, static_cast<long long>(resident),
               resident > 0 ? double(plan.blocks) / double(resident) : 0.0);
}

template <GgmlType T, int NX, int R, bool kI8 = false>
void launch_nx(const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x, int64_t x_stride,
               float* y, int64_t y_stride, cudaStream_t stream, const Fusion& f,
               const MatvecLaunch* planned = nullptr) {
  const MatvecLaunch plan = planned ? *planned : plan_nx<T, NX, R, kI8>(n_rows, k, stacked_parts(f.out));
  report_launch(matvec_kernel_for<T, NX, R, kI8>(f), T, NX, R, kI8, n_rows, k, f, plan);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0;
  launch_pdl(matvec_kernel_for<T, NX, R, kI8>(f), dim3(unsigned(plan.blocks)), dim3(unsigned(plan.warps * 32)),
             plan.smem, stream, static_cast<const uint8_t*>(w), n_rows, k, row_bytes, x, x_stride, x_vec, y, y_stride,
             f);
}

// The launches below trade the usual shape for one whose blocks all fit the GPU at once, where
// the usual one needs more than one wave: the blocks of a second wave request their weights only
// once blocks of the first have left, so such a product pays for two rounds of load latency.
// CERA_CUDA_MATVEC_ONE_WAVE=0: never (read per call, for A/B runs and tests).
bool one_wave_enabled() {
  const char* e = std::getenv("CERA_CUDA_MATVEC_ONE_WAVE");
  return !(e && std::strcmp(e, "0") == 0);
}

// The short-conv products (12 rows of [B; C; X] per block): the float ones take 106 registers a
// thread, so 8-warp blocks (one 256-element tile each, k = 2048) fit 2 to an SM and LFM2-1.2B's 512
// blocks take two waves. Halving the warps while each takes at most 2 tiles, until the blocks fit
// in one: 4 warps of 2 tiles, 4 blocks an SM. H200 `--parallel 1` LFM2-1.2B BF16 1,337 -> 1,388
// (2 warps of 4 tiles: 1,376); the Q4_0 launch (4 warps of 1 tile) already fits.
template <GgmlType T, int NX, int R, bool kI8>
MatvecLaunch one_wave_launch(int64_t n_rows, int64_t k, const Fusion& f) {
  const int parts = stacked_parts(f.out);
  const MatvecLaunch usual = plan_nx<T, NX, R, kI8>(n_rows, k, parts);
  const auto kernel = matvec_kernel_for<T, NX, R, kI8>(f);
  if (!one_wave_enabled() || fits_one_wave(kernel, usual)) return usual;
  const int64_t n_tiles = (k + MatvecShape<T, NX, kI8>::kTile - 1) / MatvecShape<T, NX, kI8>::kTile;
  for (int w = usual.warps / 2; w >= 1 && (n_tiles + w - 1) / w <= 2; w /= 2) {
    const MatvecLaunch fewer = plan_nx<T, NX, R, kI8>(n_rows, k, parts, w);
    if (fits_one_wave(kernel, fewer)) return fewer;
  }
  return usual;
}

// Q4_0 with int8 activations, one row of x: blocks of 16 rows and 2 warps when the usual 8-row
// launch would take more than one wave of blocks and this one fits in one (H200: the LFM2-1.2B and
// Llama-3.2-1B [gate; up], 16,384 × 2048: 2,048 blocks of 8 rows, 1,584 resident; 1,024 blocks of
// 16 rows and 2 warps at 128 registers, 1,056 resident). Each x slice also serves twice the rows.
// `--parallel 1` LFM2-1.2B Q4_0 1,942 → 2,195, Llama-3.2-1B Q4_0 1,618 → 1,766 (16 rows of 4 warps,
// two waves: 2,037 / 1,644; of 1 warp and 4 tiles, one wave: 1,893 / 1,575).
template <GgmlType T, bool kI8>
inline constexpr bool kWideRows = kDirectQ4_0<T, kI8>;
constexpr int kWideRowCount = 16, kWideWarps = 2;

// Whether the usual launch would take more than one wave and the wide one fits in one.
template <GgmlType T, bool kI8>
bool wide_fits_one_wave(int64_t n_rows, int64_t k, const Fusion& f) {
  if (!one_wave_enabled()) return false;
  const int parts = stacked_parts(f.out);
  constexpr int R = MatvecShape<T, 1, kI8>::kRows;
  if (fits_one_wave(matvec_kernel_for<T, 1, R, kI8>(f), plan_nx<T, 1, R, kI8>(n_rows, k, parts))) return false;
  return fits_one_wave(matvec_kernel_for<T, 1, kWideRowCount, kI8>(f),
                       plan_nx<T, 1, kWideRowCount, kI8>(n_rows, k, parts, kWideWarps));
}

// A SwiGLU product that writes Int8X always takes these blocks: their 8 outputs are one group.
template <GgmlType T, bool kI8>
bool launch_wide(const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x, int64_t x_stride,
                 float* y, int64_t y_stride, cudaStream_t stream, const Fusion& f) {
  if constexpr (!kWideRows<T, kI8>) {
    return false;
  } else {
    const int parts = stacked_parts(f.out);
    const MatvecLaunch wide = plan_nx<T, 1, kWideRowCount, kI8>(n_rows, k, parts, kWideWarps);
    static_assert(kWideRowCount / 2 == 8, "a SwiGLU block's outputs are one Int8X group");
    if (f.write_int8.q && f.out == int(MatvecFusion::Out::SwiGLU)) {
      launch_nx<T, 1, kWideRowCount, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f, &wide);
      return true;
    }
    if (!wide_fits_one_wave<T, kI8>(n_rows, k, f)) return false;
    launch_nx<T, 1, kWideRowCount, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f, &wide);
    return true;
  }
}

// matvec_shared_x_kernel where it applies (one x row, int8 activations on aligned rows: the
// caller's checks): a tall Q6_K matrix, no fused norm, Store or Accumulate. Whether it launched.
template <GgmlType T>
bool launch_shared_x(const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x, float* y,
                     cudaStream_t stream, const Fusion& f) {
  if constexpr (T != GgmlType::Q6_K) {
    return false;
  } else {
    const bool plain_out = f.out == int(MatvecFusion::Out::Store) || f.out == int(MatvecFusion::Out::Accumulate);
    if (f.norm_w || !plain_out || n_rows < kSharedXMinRows || k > kSharedXMaxK || !shared_x_enabled()) return false;
    constexpr int64_t kBlockRows = kSharedXWarps * MatvecShape<T, 1, true>::kRows;
    const size_t smem = size_t(k / 16) * (sizeof(uint4) + sizeof(float) + sizeof(int));
    const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
    launch_pdl(matvec_shared_x_kernel<T>, dim3(unsigned((n_rows + kBlockRows - 1) / kBlockRows)),
               dim3(kSharedXWarps * 32), smem, stream, static_cast<const uint8_t*>(w), n_rows, k, row_bytes, x, x_vec,
               y, f);
    return true;
  }
}

std::atomic<int>& int8_flag() {
  static std::atomic<int> flag{[] {
    const char* v = std::getenv("CERA_MATVEC_INT8");
    return v && std::string(v) == "0" ? 0 : 1;
  }()};
  return flag;
}

template <GgmlType T, bool kI8>
void launch_rows(const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x, int64_t x_stride,
                 int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream, const Fusion& f) {
  if (f.out == int(MatvecFusion::Out::ShortConv)) {
    static_assert(kMaxShortConvMatvecRows == 2);
    if (n_x_rows == 1) {
      const MatvecLaunch plan = one_wave_launch<T, 1, kConvRows, kI8>(n_rows, k, f);
      return launch_nx<T, 1, kConvRows, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f, &plan);
    }
    return launch_nx<T, 2, kConvRows, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f);
  }
  if constexpr (kI8) {
    // 8 int8 rows per block halve the blocks of a small matrix: below one block per SM take 4.
    // H200, tg128: LFM2-1.2B Q4_0 1,395-1,406 with 8 rows everywhere, 1,240-1,256 with 4 for
    // its 2048-row products too (256 blocks of 8); Qwen3-0.6B Q4_0 (k/v, o and down have 1024
    // rows) 917-936 with 8 everywhere against 944-956 decoded to f32.
    if (n_x_rows == 1 && launch_wide<T, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f)) return;
    const int parts = stacked_parts(f.out);  // not the short conv: handled above
    const int64_t blocks8 = (n_rows / parts + 8 / parts - 1) / (8 / parts);
    // (An Accumulate product writing Int8X keeps 8 rows: a block's outputs are one group.)
    if (n_x_rows <= 2 && blocks8 < int64_t(sm_count()) && !f.write_int8.q) {
      static_assert(MatvecShape<T, 1, kI8>::kRows == 8 && MatvecShape<T, 2, kI8>::kRows == 8);
      if (n_x_rows == 1) return launch_nx<T, 1, 4, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f);
      return launch_nx<T, 2, 4, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, stream, f);
    }
  }
#define CERA_NX(N)                                                                                              \
  case N:                                                                                                       \
    return launch_nx<T, N, MatvecShape<T, N, kI8>::kRows, kI8>(w, n_rows, k, row_bytes, x, x_stride, y, y_stride, \
                                                               stream, f);
  switch (n_x_rows) {
    CERA_NX(1)
    CERA_NX(2)
    CERA_NX(3)
    CERA_NX(4)
    CERA_NX(5)
    CERA_NX(6)
    CERA_NX(7)
    CERA_NX(8)
    default: break;
  }
#undef CERA_NX
}

template <GgmlType T>
void launch(const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x, int64_t x_stride,
            int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream, const Fusion& f) {
  if constexpr (kIsFloat<T>) {
    if (!float_rows_aligned(w, row_bytes, k)) {
      constexpr int kWarps = 4;
      const int64_t n_out = n_rows / stacked_parts(f.out);
      launch_pdl(matvec_float_fallback_kernel<T>, dim3(unsigned((n_out + kWarps - 1) / kWarps)), dim3(kWarps * 32), 0,
                 stream, static_cast<const uint8_t*>(w), n_rows, k, row_bytes, x, x_stride, n_x_rows, y, y_stride, f);
      return;
    }
  }
  if constexpr (detail::kHasInt8Dot<T>) {
    // Direct loads need 8-byte aligned rows (the backend's are 16-aligned); others decode to f32.
    const bool aligned = !(kDirectQ4_0<T, true> || kDirectK<T, true>) ||
                         (reinterpret_cast<uintptr_t>(w) % 8 == 0 && row_bytes % 8 == 0);
    if (matvec_int8_enabled() && aligned) {
      if (n_x_rows == 1 && launch_shared_x<T>(w, n_rows, k, row_bytes, x, y, stream, f)) return;
      return launch_rows<T, true>(w, n_rows, k, row_bytes, x, x_stride, n_x_rows, y, y_stride, stream, f);
    }
  }
  launch_rows<T, false>(w, n_rows, k, row_bytes, x, x_stride, n_x_rows, y, y_stride, stream, f);
}

}  // namespace

void matvec_int8_enable(bool on) { int8_flag().store(on ? 1 : 0); }
bool matvec_int8_enabled() { return int8_flag().load() != 0; }
bool matvec_int8_activations(GgmlType type) {
  return matvec_int8_enabled() && detail::has_int8_dot(type);
}

// CERA_CUDA_INT8_HANDOFF: "0" never, "all" in every launch the types allow, else where the writer
// keeps its launch (read per call).
static const char* handoff_env() { return std::getenv("CERA_CUDA_INT8_HANDOFF"); }

bool matvec_int8_handoff(GgmlType producer, GgmlType consumer, int64_t n_out) {
  const char* e = handoff_env();
  return !(e && std::strcmp(e, "0") == 0) && matvec_int8_enabled() && producer == GgmlType::Q4_0 &&
         consumer == GgmlType::Q4_0 && n_out > 0 && n_out % 32 == 0;
}

bool matvec_int8_writer_keeps_launch(GgmlType type, int64_t n_rows, int64_t k, MatvecFusion::Out out) {
  if (type != GgmlType::Q4_0 || !matvec_int8_enabled() || k % 32 != 0) return false;
  if (const char* e = handoff_env(); e && std::strcmp(e, "all") == 0) return true;
  if (out == MatvecFusion::Out::Accumulate) return (n_rows + 7) / 8 >= int64_t(sm_count());  // launch_rows
  if (out != MatvecFusion::Out::SwiGLU) return false;
  // The launch without the hand-off: the norm folded (only its presence picks the kernel here).
  static const float any_norm = 0.f;
  Fusion f{};
  f.norm_w = &any_norm;
  f.out = int(out);
  return wide_fits_one_wave<GgmlType::Q4_0, true>(n_rows, k, f);
}

bool matvec_short_conv_supported(GgmlType type, const void* w, size_t row_bytes, int64_t k, int32_t conv_len) {
  const bool is_float = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
  return conv_len >= 1 && conv_len <= kMaxConvLen && (!is_float || float_rows_aligned(w, row_bytes, k));
}

void matvec(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x,
            int64_t x_stride, int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream,
            const MatvecFusion& fusion) {
  if (n_x_rows < 1 || n_x_rows > kMaxMatvecRows)
    throw Error(ErrorCode::InvalidArgument, "cuda matvec: n_x_rows must be 1.." + std::to_string(kMaxMatvecRows));
  if (n_rows <= 0 || k <= 0) return;
  if (k % ggml_traits(type).block_elems != 0)
    throw Error(ErrorCode::InvalidArgument, "cuda matvec: k is not a multiple of the block size");
  if (fusion.out == MatvecFusion::Out::SwiGLU && n_rows % 2 != 0)
    throw Error(ErrorCode::InvalidArgument, "cuda matvec: SwiGLU needs an even number of rows (gate; up)");
  if (fusion.out == MatvecFusion::Out::ShortConv) {
    if (n_rows % 3 != 0)
      throw Error(ErrorCode::InvalidArgument, "cuda matvec: the short-conv epilogue needs 3·D rows (B; C; X)");
    if (n_x_rows > kMaxShortConvMatvecRows)
      throw Error(ErrorCode::InvalidArgument, "cuda matvec: the short-conv epilogue takes at most " +
                                                  std::to_string(kMaxShortConvMatvecRows) + " rows of x");
    if (!matvec_short_conv_supported(type, w, row_bytes, k, fusion.conv.len))
      throw Error(ErrorCode::Unsupported, "cuda matvec: the short-conv epilogue needs 16-byte aligned float rows and "
                                          "a kernel of 1.." + std::to_string(kMaxConvLen) + " taps");
    if (!fusion.conv.w || !fusion.conv.state || !fusion.conv.seqs || !fusion.conv.token_seq)
      throw Error(ErrorCode::InvalidArgument, "cuda matvec: the short-conv epilogue needs its weights, state and step");
  }
  if (fusion.write_int8.q || fusion.read_int8.q) {
    using O = MatvecFusion::Out;
    const auto& wr = fusion.write_int8;
    const auto& rd = fusion.read_int8;
    // Writers: a SwiGLU product (no norm after it) or an accumulating one (the residual stream,
    // for a next norm: write_norm_w and ssq). Readers: any output; with a norm the row must carry
    // Σx².
    const bool write_ok = !wr.q || (wr.d && (fusion.out == O::SwiGLU ? !fusion.write_norm_w && !wr.ssq
                                                                     : fusion.out == O::Accumulate &&
                                                                           fusion.write_norm_w && wr.ssq));
    const bool read_ok = !rd.q || (rd.d && rd.q != wr.q && (!fusion.norm_w || rd.ssq));
    const int64_t n = wr.q ? n_rows / stacked_parts(int(fusion.out)) : k;  // the written row, else the read one
    if (!write_ok || !read_ok || n_x_rows != 1 || !matvec_int8_handoff(type, type, n) || (rd.q && k % 32 != 0) ||
        reinterpret_cast<uintptr_t>(w) % 8 != 0 || row_bytes % 8 != 0)
      throw Error(ErrorCode::InvalidArgument,
                  "cuda matvec: an int8 hand-off needs Q4_0 weights (8-byte aligned rows) with int8 activations, "
                  "one x row of 32·n elements with its scales (and sums of squares where a norm follows); the "
                  "writer a SwiGLU product or an accumulating one with the next norm's weights");
  }
  const Fusion f{fusion.norm_w,     fusion.norm_eps,     int(fusion.out),     fusion.scale, fusion.early_weights,
                 fusion.conv,       fusion.write_int8,   fusion.write_norm_w, fusion.read_int8};
  switch (type) {
#define CERA_MATVEC_CASE(T) \
  case GgmlType::T: launch<GgmlType::T>(w, n_rows, k, row_bytes, x, x_stride, n_x_rows, y, y_stride, stream, f); break;
    CERA_MATVEC_CASE(F32)
    CERA_MATVEC_CASE(F16)
    CERA_MATVEC_CASE(BF16)
    CERA_MATVEC_CASE(Q4_0)
    CERA_MATVEC_CASE(Q4_1)
    CERA_MATVEC_CASE(Q5_0)
    CERA_MATVEC_CASE(Q5_1)
    CERA_MATVEC_CASE(Q8_0)
    CERA_MATVEC_CASE(Q2_K)
    CERA_MATVEC_CASE(Q3_K)
    CERA_MATVEC_CASE(Q4_K)
    CERA_MATVEC_CASE(Q5_K)
    CERA_MATVEC_CASE(Q6_K)
#undef CERA_MATVEC_CASE
    default:
      throw Error(ErrorCode::Unsupported,
                  "cuda matvec: weight type " + std::string(ggml_type_name(type)) + " is not supported");
  }
  CERA_CUDA_CHECK_LAUNCH();
}

}  // namespace cera::cuda
