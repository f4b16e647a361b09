// Run-time ISA detection: on x86, cpuid feature bits plus the OS's XCR0 state (the OS must save the
// wider registers, or the instructions fault even when cpuid lists them); on AArch64, always Neon.
#include <cstdlib>
#include <string>

#include "backend/cpu/kernels.h"
#include "cera/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace cera::cpu {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}

Isa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::Scalar;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
  if (!osxsave || !avx) return Isa::Scalar;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6) != 0x6) return Isa::Scalar;  // XMM + YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::Scalar;
  const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
  if (!(avx2 && fma && f16c && bmi2)) return Isa::Scalar;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  const bool zmm_state = (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  if (f && dq && bw && vl && vnni && zmm_state) return Isa::Avx512;
  return Isa::Avx2;
}
#elif defined(__aarch64__) && defined(__ARM_NEON)
Isa detect() { return Isa::Neon; }  // Advanced SIMD is mandatory on AArch64
#else
Isa detect() { return Isa::Scalar; }
#endif

Isa compute_active() {
  const Isa hw = detected_isa();
  const char* env = std::getenv("CERA_CPU_ISA");
  if (env == nullptr || *env == '\0') return hw;
  const std::string v(env);
  if (v == "scalar") return Isa::Scalar;
#if defined(__aarch64__)
  if (v == "neon") return hw;
  throw Error(ErrorCode::InvalidArgument, "CERA_CPU_ISA=" + v + " is not one of scalar, neon");
#else
  Isa cap;
  if (v == "avx2") cap = Isa::Avx2;
  else if (v == "avx512") cap = Isa::Avx512;
  else
    throw Error(ErrorCode::InvalidArgument,
                "CERA_CPU_ISA=" + v + " is not one of scalar, avx2, avx512");
  return int(cap) < int(hw) ? cap : hw;
#endif
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
  }
  return "?";
}

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  static const Isa isa = compute_active();
  return isa;
}

}  // namespace cera::cpu
