// A float stored as a kernel's output type: f32 as is; f16 / bf16 rounded to nearest. The 16-bit
// conversion, the norm and SwiGLU kernels that write the GEMM's 16-bit input, and the dequantizer
// all round through it, so a fused "op, then 16-bit copy" equals the two steps bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace cera::cuda {

template <typename T>
__device__ __forceinline__ T store_as(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

}  // namespace cera::cuda
