#include "backend/cuda/gemm.h"

#include "backend/cuda/mmq.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"

namespace cera::cuda {
namespace {

bool is_16bit(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }

}  // namespace

Gemm::Gemm(cudaStream_t stream) : stream_(stream), workspace_(size_t(32) << 20) {
  CERA_CUBLAS_CHECK(cublasCreate(&handle_));
  CERA_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  // An explicit workspace keeps cuBLAS from allocating inside a graph capture.
  CERA_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()));
  CERA_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));  // F32 stays F32 (no TF32)
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

bool Gemm::takes_mmq(int64_t rows, const Tensor& w) {
  // Int8 activations off (cuda::matvec_int8_enable(false): tests that want exact weights) means
  // here too: dequantize for cuBLAS.
  return rows <= mmq_max_rows() && matvec_int8_enabled() && mmq_supported(w.type, w.data, w.row_bytes);
}

bool Gemm::reserve(const Tensor& x, const Tensor& w) {
  if (w.type == GgmlType::F32) return false;
  bool moved = act_scratch_.ensure(size_t(x.rows) * size_t(x.cols) * 2);
  if (!is_16bit(w.type)) moved |= reserve_weight(w);
  return moved;
}

void Gemm::run(const Tensor& x, const Tensor& w, Tensor& y, float alpha, float beta) {
  const int ldx = int(x.row_bytes / sizeof(float)), ldy = int(y.row_bytes / sizeof(float));
  if (w.type == GgmlType::F32) {
    // Column-major view: Yᵀ[N×T] = op(W)[N×K] · Xᵀ[K×T], with W stored as a K×N column-major matrix.
    const int m = int(w.rows), n = int(x.rows), k = int(w.cols);
    CERA_CUBLAS_CHECK(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, static_cast<const float*>(w.data),
                                  int(w.row_bytes / sizeof(float)), x.f32(), ldx, &beta, y.f32(), ldy));
    return;
  }
  reserve(x, w);
  if (takes_mmq(x.rows, w)) {  // x straight from f32, no f16 copy
    mmq(w.type, w.data, w.rows, w.cols, w.row_bytes, x.data, false, ldx, x.rows, y.f32(), ldy, alpha, beta,
        mmq_scratch_.get(), stream_);
    return;
  }
  if (bf16_activations(w.type))
    to_bf16(x.f32(), ldx, int32_t(x.rows), int32_t(x.cols), act_scratch_.as<__nv_bfloat16>(), stream_);
  else
    to_f16(x.f32(), ldx, int32_t(x.rows), int32_t(x.cols), act_scratch_.as<__half>(), stream_);
  run_converted(act_scratch_.get(), x.rows, w, y, alpha, beta);
}

bool Gemm::reserve_weight(const Tensor& w) {
  if (w.type == GgmlType::F32 || is_16bit(w.type)) return false;
  bool moved = weight_scratch_.ensure(size_t(w.rows) * size_t(w.cols) * 2);
  // Sized for the most rows mmq takes, whatever mmq_max_rows() says now: a captured step's product
  // may take it later with more rows than this one.
  if (mmq_supported(w.type, w.data, w.row_bytes)) moved |= mmq_scratch_.ensure(mmq_scratch_bytes(kMmqMaxRows, w.cols));
  return moved;
}

void Gemm::run_converted(const void* x16, int64_t rows, const Tensor& w, Tensor& y, float alpha, float beta) {
  // Column-major view: Yᵀ[N×T] = op(W)[N×K] · Xᵀ[K×T], with W stored as a K×N column-major matrix.
  const int m = int(w.rows), n = int(rows), k = int(w.cols);
  const int ldy = int(y.row_bytes / sizeof(float));
  const void* a = w.data;
  int lda = int(w.row_bytes / 2);
  const cudaDataType_t type = bf16_activations(w.type) ? CUDA_R_16BF : CUDA_R_16F;
  if (!is_16bit(w.type)) reserve_weight(w);
  if (takes_mmq(rows, w)) {  // x16 is f16: bf16 activations are for BF16 weights only
    mmq(w.type, w.data, w.rows, w.cols, w.row_bytes, x16, true, k, rows, y.f32(), ldy, alpha, beta,
        mmq_scratch_.get(), stream_);
    return;
  }
  if (!is_16bit(w.type)) {
    dequantize_f16(w.type, w.data, w.rows, w.cols, w.row_bytes, weight_scratch_.as<__half>(), stream_);
    a = weight_scratch_.get();
    lda = k;
  }
  CERA_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, type, lda, x16, type, k, &beta,
                                 y.f32(), CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace cera::cuda
