// Kernel registry: per weight type, the best implemented kernel set at or below the asked ISA.
#include <string>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"
#include "cera/error.h"

namespace cera::cpu {
namespace {

constexpr int kCap = 32;

struct Table {
  MatmulKernels sets[kCap];
  int count = 0;
  const MatmulKernels* find(GgmlType t) const {
    for (int i = 0; i < count; ++i)
      if (sets[i].weight_type == t) return &sets[i];
    return nullptr;
  }
};

struct Registry {
  static constexpr int kLevels = int(Isa::Neon) + 1;
  Table by_isa[kLevels];
  Registry() {
    by_isa[0].count = detail::scalar_kernels(by_isa[0].sets, kCap);
    by_isa[1].count = detail::avx2_kernels(by_isa[1].sets, kCap);
    by_isa[2].count = detail::avx512_kernels(by_isa[2].sets, kCap);
    by_isa[3].count = detail::neon_kernels(by_isa[3].sets, kCap);  // empty off AArch64
    for (int level = 1; level < kLevels; ++level) {
      for (int i = 0; i < by_isa[level].count; ++i) {
        MatmulKernels& k = by_isa[level].sets[i];
        const MatmulKernels* ref = by_isa[0].find(k.weight_type);
        if (ref == nullptr) continue;
        if (k.quantize_act == nullptr) k.quantize_act = ref->quantize_act;
        if (k.dequantize_row == nullptr) k.dequantize_row = ref->dequantize_row;
      }
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

}  // namespace

bool has_matmul_kernels(GgmlType weight_type) { return registry().by_isa[0].find(weight_type) != nullptr; }

const MatmulKernels& matmul_kernels(GgmlType weight_type, Isa isa) {
  // Never hand out kernels the CPU cannot run, whatever the caller asked for. (Tables of the other
  // architecture are empty, so walking down through them ends at scalar.)
  int level = int(isa) < int(detected_isa()) ? int(isa) : int(detected_isa());
  for (; level >= 0; --level)
    if (const MatmulKernels* k = registry().by_isa[level].find(weight_type)) return *k;
  throw Error(ErrorCode::Unsupported, "no CPU matmul kernels for tensor type " +
                                          std::string(ggml_type_name(weight_type)));
}

}  // namespace cera::cpu
