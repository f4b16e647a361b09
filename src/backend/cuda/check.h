// Every CUDA and cuBLAS call is checked; a failure becomes a cera::Error naming the call and where.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "cera/error.h"

namespace cera::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(ErrorCode::Internal, std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                                       ") in " + what + " at " + file + ":" + std::to_string(line));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* what, const char* file, int line) {
  throw Error(ErrorCode::Internal, std::string("cuBLAS error ") + cublasGetStatusName(s) + " in " + what + " at " +
                                       file + ":" + std::to_string(line));
}

}  // namespace cera::cuda

#define CERA_CUDA_CHECK(expr)                                                                   \
  do {                                                                                          \
    const cudaError_t cera_cuda_e = (expr);                                                     \
    if (cera_cuda_e != cudaSuccess) ::cera::cuda::throw_cuda_error(cera_cuda_e, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the call that made them.
#define CERA_CUDA_CHECK_LAUNCH() CERA_CUDA_CHECK(cudaGetLastError())

#define CERA_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                            \
    const cublasStatus_t cera_cublas_s = (expr);                                                  \
    if (cera_cublas_s != CUBLAS_STATUS_SUCCESS)                                                   \
      ::cera::cuda::throw_cublas_error(cera_cublas_s, #expr, __FILE__, __LINE__);                 \
  } while (0)
