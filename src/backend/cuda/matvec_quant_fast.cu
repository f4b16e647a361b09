// Decode matvec for Q4_0 / Q8_0 weights at close to HBM bandwidth (see matvec_quant_fast.h).
//
// Why this shape (the general kernel in matvec.cu decodes every weight to f32 and is compute-bound
// at 20-40 % of HBM speed; an H200 SM must consume ~15 weight bytes per cycle to keep up):
//  * int8 dot products. Each block of the grid first quantizes its x rows (after the fused norm)
//    to int8 per 32 elements (d = max|x|/127, the block sum kept for Q4_0's -8 offset) into shared
//    memory, once, and then streams many weight rows against them: per 32 weights and x row that is
//    8 dp4a, two 16-byte shared loads and a handful of integer ops instead of 32+ FMAs;
//  * weights go global -> shared with cp.async (16-byte, L2-only, from 16-byte aligned addresses:
//    GGML blocks are 18/34 bytes and only 2-byte aligned; an aligned 16-byte vector that holds at
//    least one byte of the row cannot fault) into a per-warp ring of kStages slots of one "unit"
//    (32 consecutive blocks of one row, one block per lane). kStages - 1 units per warp are in
//    flight all the time (~3 KB per warp, ~50 KB per SM) without costing registers, and the first
//    of them are issued before pdl_wait(), so they overlap the previous kernel's tail and this
//    kernel's x staging;
//  * one warp owns a whole output row (both rows j and F + j with SwiGLU), so there is no
//    cross-warp reduction and no __syncthreads after the prologue; rows are dealt round-robin to
//    all warps of a grid of about one 512-thread block per SM;
//  * results are deterministic: each lane accumulates its blocks in a fixed order, then a fixed
//    xor-shuffle tree; the grid depends only on the shape and the SM count.
#include "backend/cuda/matvec_quant_fast.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/device_attribute.h"
#include "backend/cuda/pdl.h"

namespace cera::cuda {
namespace {

constexpr int kSeg = 32;        // weight blocks per unit: one per lane
constexpr int kMaxWarps = 16;   // warps per block
constexpr int kMinWarps = 4;

template <GgmlType T>
struct Fmt;
template <>
struct Fmt<GgmlType::Q4_0> {
  static constexpr int kBytes = 18;   // f16 d, 16 bytes of nibbles
  static constexpr int kStages = 6;   // 5 units (2.9 KB) in flight per warp
};
template <>
struct Fmt<GgmlType::Q8_0> {
  static constexpr int kBytes = 34;   // f16 d, 32 int8
  static constexpr int kStages = 4;   // 3 units (3.3 KB) in flight per warp
};

// Bytes of one stage slot: a unit's bytes from its 16-byte aligned start (phase ≤ 14).
template <GgmlType T>
constexpr int slot_bytes() {
  return (14 + kSeg * Fmt<T>::kBytes + 15) / 16 * 16;
}

// Shared-memory layout of the quantized x rows (nb = k / 32 blocks per row):
//   xlo [NX][nb] uint4  int8 elements 0..15 of each block
//   xhi [NX][nb] uint4  int8 elements 16..31
//   xds [NX][nb] int2   (bits of f32 d, Σ q)
//   red [32] double     norm reduction
// then the warps' stage rings (16-byte aligned).
__host__ __device__ constexpr size_t xds_offset(int nx, int64_t nb) { return size_t(nx) * size_t(nb) * 32; }
__host__ __device__ constexpr size_t red_offset(int nx, int64_t nb) {
  return xds_offset(nx, nb) + (size_t(nx) * size_t(nb) * 8 + 15) / 16 * 16;
}
__host__ __device__ constexpr size_t stage_offset(int nx, int64_t nb) { return red_offset(nx, nb) + 32 * 8; }

struct Params {
  const uint8_t* w;
  int64_t k;
  size_t row_bytes;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  const float* norm_w;
  float norm_eps;
  int out;  // MatvecFusion::Out
  float scale;
  int64_t n_items;   // output rows (F with SwiGLU)
  int64_t row2_off;  // SwiGLU: the up row of item j is j + row2_off
};

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int NX>
__device__ void stage_x(const Params& p, int nb, uint4* xlo, uint4* xhi, int2* xds, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int t = 0; t < NX; ++t) {
    const float* xr = p.x + t * p.x_stride;
    float inv = 1.0f;
    if (p.norm_w) {
      // As rms_norm_kernel: Σx² in double (fixed order), inv rounded once to f32.
      double s = 0;
#pragma unroll 8
      for (int64_t i = threadIdx.x; i < p.k; i += blockDim.x) {
        const double v = xr[i];
        s += v * v;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) red[warp] = s;
      __syncthreads();
      double total = 0;
      for (int i = 0; i < n_warps; ++i) total += red[i];
      __syncthreads();  // red is reused by the next row
      inv = float(1.0 / sqrt(total / double(p.k) + double(p.norm_eps)));
    }
    // Blocks b = warp, warp + n_warps, ...: loads in batches of 8 so they are in flight together.
    constexpr int kBatch = 8;
    for (int b0 = warp; b0 < nb; b0 += kBatch * n_warps) {
      float v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int b = b0 + u * n_warps;
        v[u] = 0.0f;
        if (b < nb) {
          const int64_t i = int64_t(b) * 32 + lane;
          v[u] = xr[i];
          if (p.norm_w) v[u] = __fmul_rn(p.norm_w[i], __fmul_rn(v[u], inv));
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int b = b0 + u * n_warps;
        if (b >= nb) break;  // warp-uniform
        float amax = fabsf(v[u]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const int q = int(roundf(__fmul_rn(v[u], id)));
        int sum = q;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const size_t xb = size_t(t) * nb + b;
        reinterpret_cast<int8_t*>(lane < 16 ? &xlo[xb] : &xhi[xb])[lane & 15] = int8_t(q);
        if (lane == 0) xds[xb] = make_int2(__float_as_int(d), sum);
      }
    }
  }
}

// One unit's contribution of this lane's block (block `b` of the row, staged at `blk`) to acc[t].
template <GgmlType T, int NX>
__device__ __forceinline__ void dot_block(const uint8_t* blk, int nb, int b, const uint4* xlo, const uint4* xhi,
                                          const int2* xds, float (&acc)[NX]) {
  const float dw = __half2float(*reinterpret_cast<const __half*>(blk));  // blocks are 2-byte aligned
  const uint8_t* qs = blk + 2;
  const uint32_t* wp = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(qs) & ~uintptr_t(3));
  const unsigned sh = unsigned(reinterpret_cast<uintptr_t>(qs) & 3) * 8;  // 0 or 16
  constexpr int kWords = T == GgmlType::Q4_0 ? 4 : 8;
  uint32_t raw[kWords + 1];
#pragma unroll
  for (int i = 0; i < kWords; ++i) raw[i] = wp[i];
  raw[kWords] = sh ? wp[kWords] : 0u;  // the last word holds block bytes only when shifted
  uint32_t q[kWords];
#pragma unroll
  for (int i = 0; i < kWords; ++i) q[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    const size_t xb = size_t(t) * nb + b;
    const uint4 lo = xlo[xb], hi = xhi[xb];
    const int2 ds = xds[xb];
    int s = 0;
    if constexpr (T == GgmlType::Q4_0) {
      // Element j < 16 is the low nibble of byte j, element j + 16 its high nibble; levels 0..15
      // are offset by -8, applied once through the x block sum.
      s = __dp4a(int(q[0] & 0x0F0F0F0Fu), int(lo.x), s);
      s = __dp4a(int(q[1] & 0x0F0F0F0Fu), int(lo.y), s);
      s = __dp4a(int(q[2] & 0x0F0F0F0Fu), int(lo.z), s);
      s = __dp4a(int(q[3] & 0x0F0F0F0Fu), int(lo.w), s);
      s = __dp4a(int((q[0] >> 4) & 0x0F0F0F0Fu), int(hi.x), s);
      s = __dp4a(int((q[1] >> 4) & 0x0F0F0F0Fu), int(hi.y), s);
      s = __dp4a(int((q[2] >> 4) & 0x0F0F0F0Fu), int(hi.z), s);
      s = __dp4a(int((q[3] >> 4) & 0x0F0F0F0Fu), int(hi.w), s);
      s -= 8 * ds.y;
    } else {
      s = __dp4a(int(q[0]), int(lo.x), s);
      s = __dp4a(int(q[1]), int(lo.y), s);
      s = __dp4a(int(q[2]), int(lo.z), s);
      s = __dp4a(int(q[3]), int(lo.w), s);
      s = __dp4a(int(q[4]), int(hi.x), s);
      s = __dp4a(int(q[5]), int(hi.y), s);
      s = __dp4a(int(q[6]), int(hi.z), s);
      s = __dp4a(int(q[7]), int(hi.w), s);
    }
    acc[t] = fmaf(float(s), __fmul_rn(dw, __int_as_float(ds.x)), acc[t]);
  }
}

template <GgmlType T, int NX, int R>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) matvec_fast_kernel(const Params p) {
  constexpr int BS = Fmt<T>::kBytes, NS = Fmt<T>::kStages, SLOT = slot_bytes<T>();
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int nb = int(p.k / 32);
  const int n_seg = (nb + kSeg - 1) / kSeg;
  uint8_t* base = reinterpret_cast<uint8_t*>(smem);
  uint4* xlo = reinterpret_cast<uint4*>(base);
  uint4* xhi = xlo + size_t(NX) * nb;
  int2* xds = reinterpret_cast<int2*>(base + xds_offset(NX, nb));
  double* red = reinterpret_cast<double*>(base + red_offset(NX, nb));
  uint8_t* stage = base + stage_offset(NX, nb) + size_t(warp) * NS * SLOT;

  // This warp's items (output rows) are gw, gw + tw, ...; each is R rows of n_seg units.
  const int64_t gw = int64_t(blockIdx.x) * n_warps + warp, tw = int64_t(gridDim.x) * n_warps;
  const int64_t my_items = gw < p.n_items ? (p.n_items - 1 - gw) / tw + 1 : 0;
  const int64_t n_units = my_items * R * n_seg;

  // Position of a unit: item (index into this warp's items), row of the item, segment of the row.
  struct Cursor {
    int64_t item = 0;
    int r = 0, seg = 0;
  };
  auto advance = [&](Cursor& c) {
    if (++c.seg == n_seg) {
      c.seg = 0;
      if (++c.r == R) c.r = 0, ++c.item;
    }
  };
  // Where a unit's bytes start in global memory, and how many blocks it has.
  auto unit_src = [&](const Cursor& c, int& cnt) -> uintptr_t {
    const int64_t row = gw + c.item * tw + (c.r ? p.row2_off : 0);
    cnt = min(kSeg, nb - c.seg * kSeg);
    return reinterpret_cast<uintptr_t>(p.w + size_t(row) * p.row_bytes + size_t(c.seg) * kSeg * BS);
  };
  Cursor ci;              // next unit to issue
  int64_t ui = 0;         // its index
  int slot_i = 0;         // its stage slot (ui % NS)
  auto issue = [&]() {
    if (ui < n_units) {
      int cnt;
      const uintptr_t a = unit_src(ci, cnt);
      const int n_vec = int(((a & 15) + size_t(cnt) * BS + 15) >> 4);
      const uint8_t* src = reinterpret_cast<const uint8_t*>(a & ~uintptr_t(15));
      uint8_t* dst = stage + slot_i * SLOT;
      for (int v = lane; v < n_vec; v += 32) cp_async16(dst + 16 * v, src + 16 * v);
      advance(ci);
    }
    cp_async_commit();  // always, so that commit group i is unit i
    ++ui;
    slot_i = slot_i + 1 == NS ? 0 : slot_i + 1;
  };

  // Before pdl_wait: only weight reads (into this block's shared memory).
#pragma unroll
  for (int u = 0; u < NS - 1; ++u) issue();
  pdl_launch_dependents();
  pdl_wait();

  stage_x<NX>(p, nb, xlo, xhi, xds, red);
  __syncthreads();

  float acc[NX], v[R][NX];
#pragma unroll
  for (int t = 0; t < NX; ++t) {
    acc[t] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) v[r][t] = 0.0f;
  }
  Cursor cc;  // unit being computed
  int slot_c = 0;
  for (int64_t u = 0; u < n_units; ++u) {
    cp_async_wait<NS - 2>();  // unit u has landed (this lane's copies) ...
    __syncwarp();             // ... and every lane's; slot (u - 1) % NS is free again
    issue();                  // unit u + NS - 1
    int cnt;
    const uintptr_t a = unit_src(cc, cnt);
    if (lane < cnt)
      dot_block<T, NX>(stage + slot_c * SLOT + (a & 15) + lane * BS, nb, cc.seg * kSeg + lane, xlo, xhi, xds, acc);
    slot_c = slot_c + 1 == NS ? 0 : slot_c + 1;
    if (cc.seg + 1 == n_seg) {  // end of a row: reduce (fixed tree), keep as v[r]
#pragma unroll
      for (int t = 0; t < NX; ++t) {
        float s = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (r == cc.r) v[r][t] = s;
        acc[t] = 0.0f;
      }
      if (cc.r + 1 == R) {  // end of an item: write its outputs
        const int64_t j = gw + cc.item * tw;
#pragma unroll
        for (int t = 0; t < NX; ++t) {
          if (lane != t) continue;
          float* yp = p.y + t * p.y_stride + j;
          const float g = v[0][t];
          if (p.out == int(MatvecFusion::Out::Store)) {
            *yp = g;
          } else if (p.out == int(MatvecFusion::Out::Accumulate)) {
            *yp = fmaf(p.scale, g, *yp);
          } else {
            *yp = g / (1.0f + expf(-g)) * v[R - 1][t];
          }
        }
      }
    }
    advance(cc);
  }
  cp_async_wait<0>();
}

int sm_count_cached() { return current_device_attribute(cudaDevAttrMultiProcessorCount); }
int max_smem_optin() { return current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin); }

template <GgmlType T, int NX, int R>
bool launch(const Params& p, cudaStream_t stream) {
  const int64_t nb = p.k / 32;
  const int sms = sm_count_cached();
  // Warps per block: as many as keep all SMs busy (ceil(items / SMs)), 4..16; blocks share an SM
  // when they are small.
  const int warps = int(std::clamp<int64_t>((p.n_items + sms - 1) / sms, kMinWarps, kMaxWarps));
  const size_t smem = stage_offset(NX, nb) + size_t(warps) * Fmt<T>::kStages * slot_bytes<T>();
  if (smem > size_t(max_smem_optin())) return false;
  const int64_t per_sm = std::max(1, kMaxWarps / warps);
  const int64_t blocks = std::min((p.n_items + warps - 1) / warps, int64_t(sms) * per_sm);
  auto* kernel = matvec_fast_kernel<T, NX, R>;
  // Raise the dynamic shared-memory limit when this instantiation needs more than it was given on
  // this device (once per size in practice, so decode steps make no extra API call).
  static std::atomic<int> granted[64] = {};
  int dev = 0;
  CERA_CUDA_CHECK(cudaGetDevice(&dev));
  std::atomic<int>& g = granted[dev >= 0 && dev < 64 ? dev : 0];
  if (dev < 0 || dev >= 64 || size_t(g.load()) < smem) {
    CERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    if (dev >= 0 && dev < 64) g.store(int(smem));
  }
  launch_pdl(kernel, dim3(unsigned(blocks)), dim3(unsigned(warps * 32)), smem, stream, p);
  CERA_CUDA_CHECK_LAUNCH();
  return true;
}

template <GgmlType T, int R>
bool launch_nx(int32_t nx, const Params& p, cudaStream_t stream) {
  switch (nx) {
    case 1: return launch<T, 1, R>(p, stream);
    case 2: return launch<T, 2, R>(p, stream);
    case 3: return launch<T, 3, R>(p, stream);
    case 4: return launch<T, 4, R>(p, stream);
    default: return false;
  }
}

template <GgmlType T>
bool launch_type(int32_t nx, bool swiglu, const Params& p, cudaStream_t stream) {
  return swiglu ? launch_nx<T, 2>(nx, p, stream) : launch_nx<T, 1>(nx, p, stream);
}

std::atomic<int>& enabled_flag() {
  static std::atomic<int> flag{[] {
    const char* v = std::getenv("CERA_MATVEC_FAST");
    return v && std::strcmp(v, "0") == 0 ? 0 : 1;
  }()};
  return flag;
}

}  // namespace

void matvec_quant_fast_enable(bool on) { enabled_flag().store(on ? 1 : 0); }
bool matvec_quant_fast_enabled() { return enabled_flag().load() != 0; }

bool matvec_quant_fast(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x,
                       int64_t x_stride, int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream,
                       const MatvecFusion& fusion) {
  if (!matvec_quant_fast_enabled()) return false;
  if (type != GgmlType::Q4_0 && type != GgmlType::Q8_0) return false;
  if (n_x_rows < 1 || n_x_rows > kMatvecFastMaxRows) return false;
  if (n_rows <= 0 || k <= 0 || k % 32 != 0 || k / 32 > (int64_t(1) << 24)) return false;
  if ((reinterpret_cast<uintptr_t>(w) & 1) != 0 || row_bytes % 2 != 0 || row_bytes < ggml_row_bytes(type, k))
    return false;
  const bool swiglu = fusion.out == MatvecFusion::Out::SwiGLU;
  if (swiglu && n_rows % 2 != 0) return false;
  Params p{};
  p.w = static_cast<const uint8_t*>(w);
  p.k = k;
  p.row_bytes = row_bytes;
  p.x = x;
  p.x_stride = x_stride;
  p.y = y;
  p.y_stride = y_stride;
  p.norm_w = fusion.norm_w;
  p.norm_eps = fusion.norm_eps;
  p.out = int(fusion.out);
  p.scale = fusion.scale;
  p.n_items = swiglu ? n_rows / 2 : n_rows;
  p.row2_off = swiglu ? n_rows / 2 : 0;
  if (type == GgmlType::Q4_0) return launch_type<GgmlType::Q4_0>(n_x_rows, swiglu, p, stream);
  return launch_type<GgmlType::Q8_0>(n_x_rows, swiglu, p, stream);
}

}  // namespace cera::cuda
