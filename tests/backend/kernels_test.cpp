// Matmul kernels: every ISA's dot_tile against the scalar reference, and the scalar reference
// against an independent f64 dot of the dequantized operands.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "cera/error.h"
#include "common/fp16.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace cera::cpu {
namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                 GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::vector<Isa> available_isas() {
  std::vector<Isa> v{Isa::Scalar};
  const Isa best = detected_isa();
  if (best == Isa::Neon) {  // AArch64: Neon is not "above" the x86 levels, it is another family
    v.push_back(Isa::Neon);
    return v;
  }
  if (int(best) >= int(Isa::Avx2)) v.push_back(Isa::Avx2);
  if (int(best) >= int(Isa::Avx512)) v.push_back(Isa::Avx512);
  return v;
}

// Rows of `type` with a padded stride (row bytes + pad), from gaussian values with a per-row offset
// so that asymmetric formats get non-trivial mins.
struct Rows {
  std::vector<uint8_t> data;
  size_t stride = 0;
};

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

double abs_dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += std::fabs(a[k] * b[k]);
  return s;
}

std::vector<int64_t> sizes_for(GgmlType t) {
  if (ggml_traits(t).block_elems == 256) return {256, 768, 1024};
  return {32, 96, 160, 256, 1056};  // odd block counts exercise the tails of paired-block loops
}

TEST(Kernels, RegistryCoversEveryWeightTypeAndIsa) {
  for (GgmlType t : kWeightTypes) {
    EXPECT_TRUE(has_matmul_kernels(t)) << ggml_type_name(t);
    for (Isa isa : available_isas()) {
      const auto& k = matmul_kernels(t, isa);
      EXPECT_EQ(k.weight_type, t);
      EXPECT_LE(int(k.isa), int(isa));
      EXPECT_GE(k.max_nw, 1);
      EXPECT_GE(k.max_nx, 1);
      EXPECT_NE(k.quantize_act, nullptr);
      EXPECT_NE(k.dot_tile, nullptr);
      EXPECT_NE(k.dequantize_row, nullptr);
    }
  }
  EXPECT_EQ(matmul_kernels(GgmlType::F16).act_type, GgmlType::F32);
  EXPECT_EQ(matmul_kernels(GgmlType::Q4_0).act_type, GgmlType::Q8_0);
  EXPECT_EQ(matmul_kernels(GgmlType::Q5_1).act_type, GgmlType::Q8_1);
  EXPECT_EQ(matmul_kernels(GgmlType::Q6_K).act_type, GgmlType::Q8_K);
  EXPECT_FALSE(has_matmul_kernels(GgmlType::I32));
  EXPECT_THROW(matmul_kernels(GgmlType::I32), Error);
  EXPECT_EQ(isa_name(Isa::Avx512), "avx512");
  EXPECT_LE(int(active_isa()), int(detected_isa()));
}

TEST(Kernels, QuantizeActMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(1024);
  for (auto& v : x) v = dist(rng);
  for (GgmlType t : kWeightTypes)
    for (Isa isa : available_isas()) {
      const auto& k = matmul_kernels(t, isa);
      std::vector<uint8_t> got(ggml_row_bytes(k.act_type, 1024)), want(got.size());
      k.quantize_act(x.data(), got.data(), 1024);
      quant::quantize_row_ref(k.act_type, x.data(), want.data(), 1024);
      EXPECT_EQ(got, want) << ggml_type_name(t) << " " << isa_name(isa);
    }
}

// Rounding ties, zero blocks and equal ±extremes, where a SIMD quantizer most easily departs from
// the reference (roundf rounds halves away from zero, Q8_K's lrintf to even; Q8_K keeps the first
// extreme's sign).
TEST(Kernels, QuantizeActEdgeCasesMatchReference) {
  std::vector<float> x(1024, 0.0f);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = float(i % 17) - 8.5f;  // halves after scaling by 1
  x[0] = 127.0f;                                                       // d = 1 for Q8_0 block 0
  x[32] = -127.0f;
  for (int i = 33; i < 64; ++i) x[size_t(i)] = 0.5f * float(i - 48);
  // block 256..511 stays zero; 512..767: -5 first, then +5 (equal |x|)
  x[520] = -5.0f;
  x[600] = 5.0f;
  x[530] = 2.5f;
  for (int i = 768; i < 1024; ++i) x[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * float(i - 768) / 2.0f;
  x[768] = -127.0f;
  for (GgmlType t : kWeightTypes)
    for (Isa isa : available_isas()) {
      const auto& k = matmul_kernels(t, isa);
      std::vector<uint8_t> got(ggml_row_bytes(k.act_type, 1024)), want(got.size());
      k.quantize_act(x.data(), got.data(), 1024);
      quant::quantize_row_ref(k.act_type, x.data(), want.data(), 1024);
      EXPECT_EQ(got, want) << ggml_type_name(t) << " " << isa_name(isa);
    }
}

// (d) The integer formulation of the scalar kernels equals the f64 dot of the dequantized operands.
TEST(Kernels, ScalarMatchesDequantizedDot) {
  std::mt19937 rng(11);
  for (GgmlType t : kWeightTypes) {
    const auto& k = matmul_kernels(t, Isa::Scalar);
    for (int64_t n : sizes_for(t)) {
      const Rows w = make_rows(t, n, 3, 0, rng);
      const Rows x = make_rows(k.act_type, n, 2, 0, rng, k.quantize_act);
      float out[6];
      k.dot_tile(n, w.data.data(), w.stride, 3, x.data.data(), x.stride, 2, out, 3);
      for (int j = 0; j < 2; ++j) {
        const auto xd = dequant(k.act_type, x.data.data() + x.stride * j, n);
        for (int i = 0; i < 3; ++i) {
          const auto wd = dequant(t, w.data.data() + w.stride * i, n);
          double want = 0;
          for (int64_t e = 0; e < n; ++e) want += wd[size_t(e)] * xd[size_t(e)];
          double tol = 1e-5 * abs_dot(wd, xd) + 1e-6;
          if (k.act_type == GgmlType::Q8_1) {
            // The kernel uses the stored s = f16(d·Σq); the dequantized row uses f16(d)·q. Allow
            // exactly that per-block difference, times the block's |m|.
            const auto* xb = reinterpret_cast<const quant::BlockQ8_1*>(x.data.data() + x.stride * j);
            const uint8_t* wrow = w.data.data() + w.stride * i;
            const size_t wblk = ggml_traits(t).block_bytes;
            for (int64_t b = 0; b < n / 32; ++b) {
              uint16_t m16;
              std::memcpy(&m16, wrow + size_t(b) * wblk + 2, 2);  // m follows d in Q4_1 / Q5_1
              int sumq = 0;
              for (int e = 0; e < 32; ++e) sumq += xb[b].qs[e];
              tol += std::fabs(f16_to_f32(m16)) *
                     std::fabs(double(f16_to_f32(xb[b].s)) - double(f16_to_f32(xb[b].d)) * sumq);
            }
          }
          EXPECT_NEAR(out[j * 3 + i], want, tol) << ggml_type_name(t) << " n=" << n << " i=" << i << " j=" << j;
        }
      }
    }
  }
}

// (c) Every ISA's tile kernel against the scalar one, over tile shapes up to the maximum, padded
// row strides and an output stride wider than the tile.
TEST(Kernels, SimdTilesMatchScalar) {
  std::mt19937 rng(5);
  for (GgmlType t : kWeightTypes) {
    const auto& ref = matmul_kernels(t, Isa::Scalar);
    for (Isa isa : available_isas()) {
      const auto& k = matmul_kernels(t, isa);
      if (k.isa == Isa::Scalar && isa != Isa::Scalar) continue;  // falls back: nothing new to test
      for (int64_t n : sizes_for(t)) {
        for (int nw : {1, 2, k.max_nw - 1, k.max_nw}) {
          for (int nx : {1, 3, k.max_nx}) {
            if (nw < 1 || nx < 1 || nx > k.max_nx) continue;
            const Rows w = make_rows(t, n, nw, 4, rng);
            const Rows x = make_rows(k.act_type, n, nx, 4, rng, k.quantize_act);
            const size_t os = size_t(nw) + 3;
            std::vector<float> got(os * size_t(nx), -777.0f), want(got);
            k.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, got.data(), os);
            ref.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, want.data(), os);
            for (int j = 0; j < nx; ++j) {
              const auto xd = dequant(k.act_type, x.data.data() + x.stride * j, n);
              for (int i = 0; i < nw; ++i) {
                const auto wd = dequant(t, w.data.data() + w.stride * i, n);
                const double tol = 2e-5 * abs_dot(wd, xd) + 1e-6;
                ASSERT_NEAR(got[j * os + i], want[j * os + i], tol)
                    << ggml_type_name(t) << " " << isa_name(k.isa) << " n=" << n << " nw=" << nw << " nx=" << nx
                    << " i=" << i << " j=" << j;
              }
              for (size_t i = size_t(nw); i < os; ++i) ASSERT_EQ(got[j * os + i], -777.0f) << "wrote outside the tile";
            }
          }
        }
      }
    }
  }
}

// The model's prefill-equals-decode guarantee rests on this: a token's results do not depend on
// how many other tokens share the tile (bit-identical, not merely close).
TEST(Kernels, TileResultsDoNotDependOnTileWidth) {
  std::mt19937 rng(9);
  for (GgmlType t : kWeightTypes)
    for (Isa isa : available_isas()) {
      const auto& k = matmul_kernels(t, isa);
      const int64_t n = ggml_traits(t).block_elems == 256 ? 768 : 1056;
      const int nw = k.max_nw, nx = k.max_nx < 37 ? k.max_nx : 37;
      const Rows w = make_rows(t, n, nw, 0, rng);
      const Rows x = make_rows(k.act_type, n, nx, 0, rng, k.quantize_act);
      std::vector<float> wide(size_t(nw) * size_t(nx));
      std::vector<float> one(static_cast<size_t>(nw));
      k.dot_tile(n, w.data.data(), w.stride, nw, x.data.data(), x.stride, nx, wide.data(), size_t(nw));
      for (int j = 0; j < nx; ++j) {
        k.dot_tile(n, w.data.data(), w.stride, nw, x.data.data() + x.stride * size_t(j), x.stride, 1, one.data(),
                   size_t(nw));
        for (int i = 0; i < nw; ++i)
          ASSERT_EQ(one[size_t(i)], wide[size_t(j) * size_t(nw) + size_t(i)])
              << ggml_type_name(t) << " " << isa_name(isa) << " i=" << i << " j=" << j;
      }
    }
}

}  // namespace
}  // namespace cera::cpu
