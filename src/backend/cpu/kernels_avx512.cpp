// AVX-512 F/BW/VL + VNNI kernels (not yet implemented: the registry falls back to scalar).
#include "backend/cpu/kernels_internal.h"

namespace cera::cpu {

int detail::avx512_kernels(MatmulKernels* out, int cap) { return 0; }

}  // namespace cera::cpu
