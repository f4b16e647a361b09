// CPU matmul kernels per weight type, chosen at run time for the best ISA the CPU has.
//
// A matmul y[T,N] = x[T,K] · W[N,K]ᵀ runs in two steps: each activation row is converted once to
// the weight type's activation format (f32 for float weights; Q8_0/Q8_1/Q8_K blocks for quantized
// weights, exactly as llama.cpp does, so our quantization noise matches its), then dot_tile
// computes tiles of nw weight rows × nx activation rows straight from the stored blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/ggml_type.h"

namespace cera::cpu {

// Neon (AArch64) is last only so the registry can index it; its order against the x86 ISAs means
// nothing (each architecture's kernel tables are empty on the other).
enum class Isa { Scalar, Avx2, Avx512, Neon };
std::string_view isa_name(Isa isa);
Isa detected_isa();  // the best this CPU supports (x86: cpuid + OS xsave state; AArch64: Neon)
// The ISA kernels use: detected_isa(), capped by env CERA_CPU_ISA=scalar|avx2|avx512 (x86) or
// scalar|neon (AArch64) if set.
Isa active_isa();

struct MatmulKernels {
  GgmlType weight_type;
  GgmlType act_type;  // F32, Q8_0, Q8_1 or Q8_K
  Isa isa;
  int max_nw;  // dot_tile limits on nw / nx (>= 1)
  int max_nx;
  // dst = x[0..n) in act_type (n a multiple of the weight type's block size).
  void (*quantize_act)(const float* x, void* dst, int64_t n);
  // out[j*out_stride + i] = Σ_k W[i][k]·x[j][k] for i < nw, j < nx; rows are w_row_bytes /
  // x_row_bytes apart.
  void (*dot_tile)(int64_t n, const void* w, size_t w_row_bytes, int nw,
                   const void* x, size_t x_row_bytes, int nx, float* out, size_t out_stride);
  // dst[0..n) = dequantized weight row (for embeddings and tests).
  void (*dequantize_row)(const void* src, float* dst, int64_t n);
};

bool has_matmul_kernels(GgmlType weight_type);
// Throws Error(Unsupported) naming the type if cera cannot multiply with it.
const MatmulKernels& matmul_kernels(GgmlType weight_type, Isa isa = active_isa());

}  // namespace cera::cpu
