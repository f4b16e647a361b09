// Standalone check of the NEON matmul kernels, run under qemu-aarch64 by tools/cross/test_neon.sh
// (no GoogleTest: there is no arm64 libgtest cross package). Mirrors tests/backend/kernels_test.cpp:
// every NEON dot_tile against the scalar reference and the f64 dot of the dequantized operands,
// over tile shapes, padded row strides and a wide output stride; and bit-identical results
// whatever the tile width. Exits non-zero on any failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "cera/error.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

using namespace cera;
using namespace cera::cpu;

namespace {

int failures = 0, checks = 0;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    ++checks;                                             \
    if (!(cond)) {                                        \
      if (++failures <= 20) {                             \
        std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        std::printf(__VA_ARGS__);                         \
        std::printf("\n");                                \
      }                                                   \
    }                                                     \
  } while (0)

// The types kernels_neon.cpp implements: every weight type.
const GgmlType kNeonTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                               GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::string tn(GgmlType t) { return std::string(ggml_type_name(t)); }

struct Rows {
  std::vector<uint8_t> data;
  size_t stride = 0;
  const uint8_t* row(int i) const { return data.data() + stride * size_t(i); }
};

// Gaussian rows with a per-row offset (non-trivial mins), `pad` junk bytes after each row.
Rows make_rows(GgmlType type, int64_t n, int rows, size_t pad, std::mt19937& rng,
               void (*quantize)(const float*, void*, int64_t) = nullptr) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Rows r;
  r.stride = ggml_row_bytes(type, n) + pad;
  r.data.assign(r.stride * size_t(rows) + 64, 0xCD);
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < rows; ++i) {
    const float offset = 0.3f * dist(rng);
    for (auto& v : x) v = dist(rng) + offset;
    if (quantize) quantize(x.data(), r.data.data() + r.stride * size_t(i), n);
    else quant::quantize_row_ref(type, x.data(), r.data.data() + r.stride * size_t(i), n);
  }
  return r;
}

std::vector<double> dequant(GgmlType type, const uint8_t* row, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  quant::dequantize_row_ref(type, row, f.data(), n);
  return std::vector<double>(f.begin(), f.end());
}

std::vector<int64_t> sizes_for(GgmlType t) {
  if (ggml_traits(t).block_elems == 256) return {256, 768, 1024};
  if (ggml_traits(t).block_elems == 1) return {1, 7, 32, 37, 96, 1056};  // float tails: n % 4 != 0
  return {32, 96, 160, 256, 1056};
}

void test_registry() {
  CHECK(detected_isa() == Isa::Neon, "detected %s", std::string(isa_name(detected_isa())).c_str());
  CHECK(isa_name(Isa::Neon) == "neon", "name");
  const char* env = std::getenv("CERA_CPU_ISA");
  const std::string want_isa = env && *env ? env : "neon";
  if (want_isa == "scalar" || want_isa == "neon") {
    CHECK(isa_name(active_isa()) == want_isa, "active %s, env %s", std::string(isa_name(active_isa())).c_str(),
          want_isa.c_str());
    for (GgmlType t : kNeonTypes)
      CHECK(isa_name(matmul_kernels(t).isa) == want_isa, "%s default kernels", tn(t).c_str());
  } else {  // an x86 name on AArch64 must be refused, not silently ignored
    bool threw = false;
    try {
      (void)active_isa();
    } catch (const Error&) {
      threw = true;
    }
    CHECK(threw, "CERA_CPU_ISA=%s accepted", want_isa.c_str());
  }
  for (GgmlType t : kNeonTypes) {
    const auto& k = matmul_kernels(t, Isa::Neon);
    CHECK(k.isa == Isa::Neon, "%s has no NEON kernels", tn(t).c_str());
    CHECK(k.act_type == matmul_kernels(t, Isa::Scalar).act_type, "%s act type", tn(t).c_str());
    CHECK(k.quantize_act != nullptr && k.dequantize_row != nullptr && k.dot_tile != nullptr, "%s null fn",
          tn(t).c_str());
    CHECK(matmul_kernels(t, Isa::Scalar).isa == Isa::Scalar, "%s scalar", tn(t).c_str());
    // x86 levels hold nothing on AArch64: asking for them must end at scalar, never at x86 code.
    CHECK(matmul_kernels(t, Isa::Avx512).isa == Isa::Scalar, "%s avx512 on arm", tn(t).c_str());
  }
}

void test_tiles_match_scalar() {
  std::mt19937 rng(5);
  for (GgmlType t : kNeonTypes) {
    const auto& ref = matmul_kernels(t, Isa::Scalar);
    const auto& k = matmul_kernels(t, Isa::Neon);
    for (int64_t n : sizes_for(t))
      for (size_t pad : {size_t(0), size_t(4), size_t(6)})
        for (int nw = 1; nw <= k.max_nw + 3; ++nw)  // beyond max_nw: dot_tile itself must split
          for (int nx = 1; nx <= k.max_nx + 1; ++nx) {
            const Rows w = make_rows(t, n, nw, pad, rng);
            const Rows x = make_rows(k.act_type, n, nx, pad, rng, k.quantize_act);
            const size_t os = size_t(nw) + 3;
            std::vector<float> got(os * size_t(nx), -777.0f), want(got);
            k.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, got.data(), os);
            ref.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, want.data(), os);
            for (int j = 0; j < nx; ++j) {
              const auto xd = dequant(k.act_type, x.row(j), n);
              for (int i = 0; i < nw; ++i) {
                const auto wd = dequant(t, w.row(i), n);
                double exact = 0, mag = 0;
                for (size_t e = 0; e < wd.size(); ++e) {
                  exact += wd[e] * xd[e];
                  mag += std::fabs(wd[e] * xd[e]);
                }
                double tol = 2e-5 * mag + 1e-6;  // kernels_test.cpp's SIMD-vs-scalar tolerance
                if (k.act_type == GgmlType::Q8_1) {
                  // Q4_1 / Q5_1: the kernels (scalar too) take m · s, s = f16(Σq · d) with d the unrounded
                  // scale (as llama.cpp), where the dequantized x has f16 d: two f16 roundings, up to
                  // |m| · Σ|x| · 2^-10 per block more.
                  const size_t bs = t == GgmlType::Q4_1 ? sizeof(quant::BlockQ4_1) : sizeof(quant::BlockQ5_1);
                  for (int64_t b = 0; b < n / 32; ++b) {
                    const uint8_t* m = w.row(i) + size_t(b) * bs + 2;  // f16 d, then f16 m
                    double sx = 0;
                    for (int64_t e = 32 * b; e < 32 * b + 32; ++e) sx += std::fabs(xd[size_t(e)]);
                    tol += std::fabs(double(f16_to_f32(uint16_t(m[0] | m[1] << 8)))) * sx * std::ldexp(1.0, -10);
                  }
                }
                const float g = got[size_t(j) * os + size_t(i)];
                CHECK(std::fabs(g - want[size_t(j) * os + size_t(i)]) <= tol,
                      "%s n=%lld pad=%zu nw=%d nx=%d i=%d j=%d: neon %.9g scalar %.9g", tn(t).c_str(),
                      (long long)n, pad, nw, nx, i, j, g, want[size_t(j) * os + size_t(i)]);
                CHECK(std::fabs(g - exact) <= tol, "%s n=%lld nw=%d nx=%d i=%d j=%d: neon %.9g f64 %.9g",
                      tn(t).c_str(), (long long)n, nw, nx, i, j, g, exact);
              }
              for (size_t i = size_t(nw); i < os; ++i)
                CHECK(got[size_t(j) * os + i] == -777.0f, "%s wrote outside the tile", tn(t).c_str());
            }
          }
  }
}

// Prefill-equals-decode rests on this: a token's result is bit-identical whatever tile holds it.
void test_tile_width_independence() {
  std::mt19937 rng(9);
  for (GgmlType t : kNeonTypes) {
    const auto& k = matmul_kernels(t, Isa::Neon);
    const int64_t n = ggml_traits(t).block_elems == 256 ? 768 : 1056;
    const int nw = 7, nx = 5;  // odd counts: full and partial tiles of both shapes
    const Rows w = make_rows(t, n, nw, 0, rng);
    const Rows x = make_rows(k.act_type, n, nx, 0, rng, k.quantize_act);
    std::vector<float> wide(size_t(nw) * size_t(nx)), one(static_cast<size_t>(nw)), single(1);
    k.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, wide.data(), size_t(nw));
    for (int j = 0; j < nx; ++j) {
      k.dot_tile(n, w.data.data(), w.stride, nw, x.row(j), x.stride, 1, one.data(), size_t(nw));
      for (int i = 0; i < nw; ++i) {
        k.dot_tile(n, w.row(i), w.stride, 1, x.row(j), x.stride, 1, single.data(), 1);
        const float v = wide[size_t(j) * size_t(nw) + size_t(i)];
        CHECK(std::memcmp(&one[size_t(i)], &v, 4) == 0 && std::memcmp(&single[0], &v, 4) == 0,
              "%s i=%d j=%d: %.9g %.9g %.9g", tn(t).c_str(), i, j, v, one[size_t(i)], single[0]);
      }
    }
  }
}

}  // namespace

int main() {
  try {
    test_registry();
    if (std::getenv("CERA_CPU_ISA") == nullptr) {  // the kernel tests once per binary is enough
      test_tiles_match_scalar();
      test_tile_width_independence();
    }
  } catch (const std::exception& e) {
    std::printf("FAIL: exception %s\n", e.what());
    return 1;
  }
#if defined(__ARM_FEATURE_DOTPROD)
  const char* variant = "dotprod";
#else
  const char* variant = "plain NEON";
#endif
  std::printf("%s: %d checks, %d failures\n", variant, checks, failures);
  return failures == 0 ? 0 : 1;
}
