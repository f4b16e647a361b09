// The batched path of matmul (prefill, decode steps of more than 2 rows): y[T,N] = x[T,K] · W[N,K]ᵀ on
// the tensor cores. 16-bit weights go to cuBLAS as stored (x is converted to their type); Q4_0,
// Q8_0, Q4_K, Q5_K and Q6_K weights with up to mmq_max_rows() rows of x take mmq.h's int8 product,
// which reads them as stored; other quantized weights (and larger batches) are first dequantized to f16 into a scratch
// buffer (one weight at a time, so it is as large as the largest weight) for cuBLAS; F32 weights use
// plain F32 SGEMM (no TF32), for the F32 fixture files' precision.
#pragma once

#include <cublas_v2.h>

#include "backend/backend.h"
#include "backend/cuda/device_buffer.h"

namespace cera::cuda {

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Scratch must be large enough before a graph capture: call reserve() outside capture. Returns
  // whether a scratch buffer moved (graphs captured over the old one must be dropped).
  bool reserve(const Tensor& x, const Tensor& w);
  // y = alpha · x·wᵀ + beta · y (y is F32; beta = 1 accumulates, e.g. a residual add).
  void run(const Tensor& x, const Tensor& w, Tensor& y, float alpha = 1.f, float beta = 0.f);
  // The same with x already in the GEMM's activation type (bf16_activations(w.type) ? bf16 : f16),
  // dense [rows, cols(w)], e.g. written so by a fused norm or SwiGLU. Not for F32 weights.
  void run_converted(const void* x16, int64_t rows, const Tensor& w, Tensor& y, float alpha = 1.f, float beta = 0.f);
  static bool bf16_activations(GgmlType weight_type) { return weight_type == GgmlType::BF16; }
  // Whether a product of `rows` rows of x with w takes the int8 product (mmq.h) instead of cuBLAS.
  static bool takes_mmq(int64_t rows, const Tensor& w);
  // The dequantized-weight scratch for w, before a capture (as reserve); returns whether it moved.
  bool reserve_weight(const Tensor& w);

 private:
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer weight_scratch_;  // dequantized weight (f16)
  DeviceBuffer act_scratch_;     // x as f16 / bf16
  DeviceBuffer mmq_scratch_;     // x as int8 for mmq (kMmqMaxRows rows of the widest weight)
};

}  // namespace cera::cuda
