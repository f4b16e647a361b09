// AVX2 + FMA + F16C kernels (not yet implemented: the registry falls back to scalar).
#include "backend/cpu/kernels_internal.h"

namespace cera::cpu {

int detail::avx2_kernels(MatmulKernels* out, int cap) { return 0; }

}  // namespace cera::cpu
