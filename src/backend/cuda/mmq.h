// Quantized-weight matrix products for batches of a few to ~128 rows of x (batched decode, short
// prefill chunks) on the int8 tensor cores: y[t][n] = alpha · Σ_k W[n][k] · x[t][k] (+ beta · y).
//
// Why: the GEMM path dequantizes a whole weight to f16 before cuBLAS, which for a Q4_0 matrix reads
// its 0.56 bytes a weight, writes 2 and reads 2 again: at a decode batch of 8 sequences that is
// most of a step. Here the weights are read once, as stored (the GPU layouts of quant_kernels.h of
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K: the Q4_0, Q8_0, Q4_K_M and Q5_K_M mixes, whose
// LM head and some layers are Q6_K, and where k is no multiple of 256 Q5_0 / Q5_1), and x is rounded
// to int8 per 32 elements, as the int8 matvec and llama.cpp do (int8_dot.cuh has the rounding): one
// int8 MMA per block of 16 weight rows and 8 rows of x that share a weight scale (32 elements; Q6_K
// 16), its integer sum scaled once by the two blocks' scales (and a minimum times x's Σ).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "format/ggml_type.h"

namespace cera::cuda {

// The most rows of x mmq() takes, and the most the backend gives it by default: larger batches
// dequantize for cuBLAS, where the weight's conversion is shared by enough rows to pay for itself
// (H200, LFM2-1.2B and Llama-3.2-1B Q4_0 batched decode: mmq 1.7× faster at 8 sequences, 1.04-1.08×
// at 32, 0.87-0.9× at 64; docs/BENCHMARKS.md).
inline constexpr int64_t kMmqMaxRows = 128;
inline constexpr int64_t kMmqDefaultRows = 32;

// Whether mmq() takes these weights: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K or Q5_K rows 16-byte aligned,
// or Q6_K rows 8-byte aligned (the backend's always are).
bool mmq_supported(GgmlType type, const void* w, size_t row_bytes);
// The rows of x up to which the backend takes mmq(): kMmqDefaultRows, or CERA_CUDA_MMQ_ROWS=N (at most
// kMmqMaxRows; 0: never; read per call, for A/B runs and tests). Only with int8 activations on
// (matvec_int8_enabled(), quant_kernels.h).
int64_t mmq_max_rows();
// Scratch bytes mmq() needs for `rows` rows of x of k elements (x rounded to int8 with its scales).
size_t mmq_scratch_bytes(int64_t rows, int64_t k);

// y[t][n] = alpha · Σ_k W[n][k] · x[t][k] + beta · y[t][n] for t < n_x_rows (≤ kMmqMaxRows), n < n_rows;
// beta = 0 does not read y. x: F32 (x_f16 false) or F16 rows x_stride elements apart; y: F32 rows
// y_stride apart. Two launches (x to int8 into `scratch`, then the product), both with PDL.
void mmq(GgmlType type, const void* w, int64_t n_rows, int64_t k, size_t row_bytes, const void* x, bool x_f16,
         int64_t x_stride, int64_t n_x_rows, float* y, int64_t y_stride, float alpha, float beta, void* scratch,
         cudaStream_t stream);

}  // namespace cera::cuda
