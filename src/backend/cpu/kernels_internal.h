// Glue between the kernel registry (kernels.cpp) and the per-ISA kernel files. The ISA files export
// only these functions; everything else in them has internal linkage.
#pragma once

#include "backend/cpu/kernels.h"

namespace cera::cpu::detail {

// Each fills out[0..) with the kernel sets it implements (at most cap) and returns the count.
// quantize_act and dequantize_row may be left null; the registry then uses the scalar ones.
int scalar_kernels(MatmulKernels* out, int cap);
int avx2_kernels(MatmulKernels* out, int cap);
int avx512_kernels(MatmulKernels* out, int cap);
int neon_kernels(MatmulKernels* out, int cap);

}  // namespace cera::cpu::detail
