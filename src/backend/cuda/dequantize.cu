// Dense dequantization (prefill: weights -> f16/bf16/f32 for the GEMM) and embedding lookup.
// Both are "write rows of dequantized values": one kernel, with the source row either n (dequantize)
// or tokens[n] (embedding). Quant types: one thread per 8-element chunk, the reference's arithmetic
// (dequant_block.cuh), so f32 output is bit-exact and f16/bf16 are that value rounded to nearest even.
// Float types: one thread per element (rows may have any length and alignment).
#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/pdl.h"
#include "backend/cuda/dequant_block.cuh"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/store_as.cuh"
#include "cera/error.h"

namespace cera::cuda {
namespace {

using detail::Block;
using detail::Chunk8;
using detail::kIsFloat;

constexpr int kThreads = 256;

// Eight outputs: one 16-byte store for 16-bit types, two for f32, when aligned.
template <class O>
__device__ __forceinline__ void store8(O* out, const float v[8], bool vec) {
  if (vec) {
    if constexpr (std::is_same_v<O, float>) {
      reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      O h[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) h[j] = store_as<O>(v[j]);
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(h);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = store_as<O>(v[j]);
  }
}

// out row n (stride out_stride) = dequantized source row ids ? ids[n] : n.
template <GgmlType T, class O>
__global__ void __launch_bounds__(kThreads)
    dequant_rows_kernel(const uint8_t* __restrict__ w, int64_t k, size_t row_bytes, const int32_t* __restrict__ ids,
                        int64_t n_rows, O* __restrict__ out, int64_t out_stride, bool vec) {
  pdl_launch_dependents();
  pdl_wait();  // pdl.h: nothing above reads inputs or writes
  const int64_t n = blockIdx.y + int64_t(blockIdx.z) * gridDim.y;
  if (n >= n_rows) return;
  const uint8_t* src = w + size_t(ids ? ids[n] : n) * row_bytes;
  O* dst = out + n * out_stride;
  if constexpr (kIsFloat<T>) {
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < k; i += int64_t(gridDim.x) * kThreads)
      dst[i] = store_as<O>(detail::float_elem<T>(src, i));
  } else {
    using B = Block<T>;
    constexpr int kParts = B::kElems / 8;
    for (int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x; c < k / 8; c += int64_t(gridDim.x) * kThreads) {
      Chunk8 ch;
      B::decode(src + (c / kParts) * B::kBytes, int(c % kParts), ch);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = detail::chunk_value<B::kHasBias>(ch, j);
      store8(dst + 8 * c, v, vec);
    }
  }
}

template <GgmlType T, class O>
void launch_rows(const void* w, int64_t k, size_t row_bytes, const int32_t* ids, int64_t n_rows, O* out,
                 int64_t out_stride, cudaStream_t stream) {
  if (n_rows <= 0 || k <= 0) return;
  const int64_t items = kIsFloat<T> ? k : k / 8;  // threads' work items per row
  // Rows on grid y/z (y is limited to 65535); along a row, enough blocks to cover it up to a cap
  // (the kernel strides), so short rows do not launch idle threads.
  const unsigned bx = unsigned(std::min<int64_t>((items + kThreads - 1) / kThreads, 64));
  const unsigned by = unsigned(std::min<int64_t>(n_rows, 65535));
  const unsigned bz = unsigned((n_rows + by - 1) / by);
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && (out_stride * int64_t(sizeof(O))) % 16 == 0;
  launch_pdl(dequant_rows_kernel<T, O>, dim3(bx, by, bz), dim3(kThreads), 0, stream, static_cast<const uint8_t*>(w), k, row_bytes,
                                                                        ids, n_rows, out, out_stride, vec);
  CERA_CUDA_CHECK_LAUNCH();
}

template <class O>
void dispatch(const char* what, GgmlType type, const void* w, int64_t k, size_t row_bytes, const int32_t* ids,
              int64_t n_rows, O* out, int64_t out_stride, cudaStream_t stream) {
  if (supports_weight_type(type) && k % ggml_traits(type).block_elems != 0)
    throw Error(ErrorCode::InvalidArgument, std::string("cuda ") + what + ": k is not a multiple of the block size");
  switch (type) {
#define CERA_DEQ_CASE(T) \
  case GgmlType::T: return launch_rows<GgmlType::T, O>(w, k, row_bytes, ids, n_rows, out, out_stride, stream);
    CERA_DEQ_CASE(F32)
    CERA_DEQ_CASE(F16)
    CERA_DEQ_CASE(BF16)
    CERA_DEQ_CASE(Q4_0)
    CERA_DEQ_CASE(Q4_1)
    CERA_DEQ_CASE(Q5_0)
    CERA_DEQ_CASE(Q5_1)
    CERA_DEQ_CASE(Q8_0)
    CERA_DEQ_CASE(Q2_K)
    CERA_DEQ_CASE(Q3_K)
    CERA_DEQ_CASE(Q4_K)
    CERA_DEQ_CASE(Q5_K)
    CERA_DEQ_CASE(Q6_K)
#undef CERA_DEQ_CASE
    default:
      throw Error(ErrorCode::Unsupported,
                  std::string("cuda ") + what + ": weight type " + std::string(ggml_type_name(type)) + " is not supported");
  }
}

}  // namespace

bool supports_weight_type(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_f16(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, __half* out,
                    cudaStream_t stream) {
  dispatch("dequantize_f16", type, w, k, row_bytes, nullptr, n_rows, out, k, stream);
}

void dequantize_bf16(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, __nv_bfloat16* out,
                     cudaStream_t stream) {
  dispatch("dequantize_bf16", type, w, k, row_bytes, nullptr, n_rows, out, k, stream);
}

void dequantize_f32(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, float* out,
                    cudaStream_t stream) {
  dispatch("dequantize_f32", type, w, k, row_bytes, nullptr, n_rows, out, k, stream);
}

void embed_rows(GgmlType type, const void* table, int64_t k, size_t row_bytes, const int32_t* tokens,
                int32_t n_tokens, float* out, int64_t out_stride, cudaStream_t stream) {
  dispatch("embed_rows", type, table, k, row_bytes, tokens, n_tokens, out, out_stride, stream);
}

}  // namespace cera::cuda
