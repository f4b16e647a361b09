// Decode matvec for Q4_0 / Q8_0 weights with int8 activations (dp4a), built to stream the weights at
// close to HBM bandwidth. Called first by cuda::matvec; a `false` return means "not handled, nothing
// launched" and the caller falls back to the general kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/quant_kernels.h"
#include "format/ggml_type.h"

namespace cera::cuda {

// Rows of x the fast kernel handles per launch (1..kMatvecFastMaxRows).
inline constexpr int kMatvecFastMaxRows = 4;

// Same contract as cuda::matvec (quant_kernels.h), including `fusion`, except for the activation
// rounding: each 32-element block of x' (x after the optional norm) is quantized to int8 as
//   d = max|x'| / 127 (f32),  q = roundf(x' · (d != 0 ? 1/d : 0)),
// and v = Σ_blocks f16(d_w) · d · Σ q_w · q (exact integer block sums, f32 scaling and accumulation).
// The norm is computed as the rms_norm kernel does: Σx² in double, inv = float(1/sqrt(Σx²/k + eps)),
// x' = norm_w · (x · inv) with two f32 roundings.
// Handles Q4_0 and Q8_0, 1 ≤ n_x_rows ≤ kMatvecFastMaxRows, k a multiple of 32, weights and
// row_bytes 2-byte aligned (every GGML file), SwiGLU with even n_rows; returns false otherwise.
bool matvec_quant_fast(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const float* x,
                       int64_t x_stride, int32_t n_x_rows, float* y, int64_t y_stride, cudaStream_t stream,
                       const MatvecFusion& fusion);

// Turns matvec_quant_fast off (it then returns false for everything) or back on, process-wide; the
// initial state is on unless the environment has CERA_MATVEC_FAST=0. For A/B runs and benchmarks.
// cuda::matvec calls it only when the environment opts in with CERA_MATVEC_FAST=1 (see matvec.cu).
void matvec_quant_fast_enable(bool on);
bool matvec_quant_fast_enabled();

}  // namespace cera::cuda
