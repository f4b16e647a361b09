// cuda::matvec with int8 activations (every quantized type: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q2_K /
// Q3_K / Q4_K / Q5_K / Q6_K weights, int8_dot.cuh) against a double-precision
// host reference built from the scalar dequantizer (format/quant.h) and the activation rounding the
// kernel specifies (quant_kernels.h, int8_dot.cuh): x' = x (or norm_w ⊙ x, one f32 product, with the
// norm); per 32 elements d = max|x'|/127 in f32, id = 1/d in f32, q = x'·id rounded once to nearest
// even. The host repeats those operations (x'·id exactly in double, then rint), so the int8 values
// and block scales are the kernel's bit for bit.
//
// Bounds. Given identical d_x and q_x, the exact product is v = Σ_b Σ_h dw_b · dx_b · s_bh with
// s_bh the exact integer sum of half h of block b (two lanes share a block: elements 8h..8h+7 and
// 16+8h..16+8h+7); the kernel rounds c_b = dw_b·dx_b once, adds float(s_bh)·c_b into a lane
// accumulator with one fma per half block (≤ n_tiles = ceil(k/512) per lane), sums 32 lanes in a
// 5-level tree and ≤ 8 warps in a row. That is at most n_tiles + 15 roundings on any path, so
//   |v_gpu − v| ≤ (n_tiles + 15)·2^-24·Σ_bh |dw_b·dx_b·s_bh|  (+ second order);
// the tests use (n_tiles + 16)·2^-24·Σ|…|. Q4_1, Q5_1, Q2_K, Q4_K and Q5_K add two terms per half
// block (scale and minimum, see ref_dot; Q2_K's per-16 scales and minimums inside its two integer
// sums), and their reference weights carry one rounding each. Q3_K adds one term per half block (its
// two signed scales inside the integer sum) and its reference weights are exact. Q6_K adds one term per half
// block (its two 16-element scales meet in an exact integer sum), and its reference weights
// d·scale·(level - 32) carry one rounding each. With the norm the sum is multiplied by
// rsqrtf(Σx²/k + eps) (≤ 2 ulp; norm tests use x = m/64 · 2^e with |m| < 32, so Σx² is exact in f32
// in any order) and rounded once more: 8·2^-24·|v| on top. Accumulate adds |scale|·that plus one
// rounding of y; SwiGLU propagates both rows' bounds through silu(g)·u (|silu'| ≤ 1.1) plus 16 ulp
// of the result for expf (≤ 2 ulp), the add, the division and the product. Any wrong weight
// nibble, x block, scale or row (the typical bug) moves the result by far more than these bounds.
//
// Outputs are poisoned with 0xFF bytes (NaN) before Store / SwiGLU launches, so an unwritten
// element fails; the padding between output rows must still hold the poison afterwards.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "common/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

using Out = cuda::MatvecFusion::Out;

using test::DevBuf;

using Weights = test::RandomWeights;

Weights make_weights(GgmlType type, int64_t n_rows, int64_t k, size_t pad, uint32_t seed) {
  return test::random_weights(type, n_rows, k, pad, seed, {3, false, 0x5A});
}

// One activation row as the kernel quantizes it.
struct QuantX {
  std::vector<float> d;   // per 32 elements
  std::vector<int8_t> q;  // per element
};

QuantX quantize_x(const float* x, int64_t k, const float* norm_w) {
  std::vector<float> xp(x, x + k);
  if (norm_w)
    for (int64_t j = 0; j < k; ++j) xp[size_t(j)] = norm_w[j] * x[j];
  QuantX qx;
  qx.d.resize(size_t(k / 32));
  qx.q.resize(size_t(k));
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xp[size_t(32 * b + j)]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    qx.d[size_t(b)] = d;
    for (int j = 0; j < 32; ++j)  // the exact product, rounded once to nearest even
      qx.q[size_t(32 * b + j)] = int8_t(std::nearbyint(double(xp[size_t(32 * b + j)]) * double(id)));
  }
  return qx;
}

// 1 / rms(x) as the kernel means it, in double.
double inv_rms(const float* x, int64_t k, float eps) {
  double ss = 0;
  for (int64_t j = 0; j < k; ++j) ss += double(x[j]) * double(x[j]);
  return 1.0 / std::sqrt(ss / double(k) + double(eps));
}

using test::SubBlockQ4K;
using test::k_sub_block;

// v = Σ_b dx_b Σ_j w_j q_j exactly (the products and sums of a half block are exact in double), and
// the bound on the kernel's rounding error (see the top comment). Q4_0 / Q5_0 / Q8_0: w_j =
// dw·level is exact in f32 and the kernel adds one term per half block. Q4_1, Q5_1, Q4_K and Q5_K:
// the kernel adds (scale·dx)·Σ level·q + (bias·dx)·Σq, two terms per half block whose magnitudes
// bound its roundings, and the reference w_j = f32(scale·level + bias) is itself rounded once
// (2^-24·|w_j|).
struct RefDot {
  double v, bound;
};

// Q2_K's terms of element l (0..31) of 32-element sub-block s of the super-block at sb (GGML's
// layout): scale d·sc and bias −dmin·mn of its 16-element run, and its 2-bit level.
SubBlockQ4K q2_k_run(const uint8_t* sb, int s, int run) {
  const int n = s / 4, j = s % 4;
  const uint8_t sc = sb[2 * s + run];
  SubBlockQ4K r;
  r.scale = double(f16_to_f32(uint16_t(sb[80] | sb[81] << 8))) * (sc & 15);
  r.bias = -double(f16_to_f32(uint16_t(sb[82] | sb[83] << 8))) * (sc >> 4);
  for (int l = 0; l < 32; ++l) r.level[l] = (sb[16 + 32 * n + l] >> (2 * j)) & 3;
  return r;
}

RefDot ref_dot(GgmlType type, const uint8_t* raw /* GGML row */, const float* w, const QuantX& qx, int64_t k) {
  double v = 0, mag = 0, ref_err = 0;
  const bool k_min = type == GgmlType::Q4_K || type == GgmlType::Q5_K;  // scale and minimum per sub-block
  const bool block_min = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;  // per block
  const bool run_min = type == GgmlType::Q2_K;                              // per 16 elements
  const bool two_terms = k_min || block_min || run_min;
  for (int64_t b = 0; b < k / 32; ++b) {
    SubBlockQ4K sub[2]{};  // [run]
    const size_t sb_bytes = ggml_traits(type).block_bytes;
    if (k_min) sub[0] = sub[1] = k_sub_block(type, raw + (b / 8) * sb_bytes, int(b % 8));
    if (block_min) sub[0] = sub[1] = test::min_block(type, raw, b);
    if (run_min)
      for (int run = 0; run < 2; ++run) sub[run] = q2_k_run(raw + (b / 8) * sb_bytes, int(b % 8), run);
    for (int h = 0; h < 2; ++h) {
      double s = 0, s1[2] = {0, 0}, s2[2] = {0, 0};
      for (int run = 0; run < 2; ++run)
        for (int j = 0; j < 8; ++j) {
          const int64_t e = 32 * b + 16 * run + 8 * h + j;
          const double q = qx.q[size_t(e)];
          s += double(w[e]) * q;
          ref_err += std::fabs(double(w[e]) * q) * double(qx.d[size_t(b)]);
          if (two_terms) s1[run] += sub[run].level[16 * run + 8 * h + j] * q, s2[run] += q;
        }
      const double dx = qx.d[size_t(b)];
      v += s * dx;
      if (run_min)  // the kernel's two integer sums add the runs' scaled terms exactly
        mag += (std::fabs(sub[0].scale * s1[0] + sub[1].scale * s1[1]) +
                 std::fabs(sub[0].bias * s2[0] + sub[1].bias * s2[1])) * dx;
      else if (two_terms)
        mag += (std::fabs(sub[0].scale * (s1[0] + s1[1])) + std::fabs(sub[0].bias * (s2[0] + s2[1]))) * dx;
      else
        mag += std::fabs(s * dx);
    }
  }
  const int64_t n_tiles = (k + 511) / 512;
  const int per_half = two_terms ? 2 : 1;  // fmas per half block
  double bound = double(per_half * n_tiles + 16) * std::ldexp(1.0, -24) * mag;
  if (two_terms || type == GgmlType::Q6_K) bound += std::ldexp(1.0, -24) * ref_err;
  return {v, bound};
}

bool is_poison(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u == 0xFFFFFFFFu;
}

const char* mode_name(Out m) {
  return m == Out::Store ? "Store" : m == Out::Accumulate ? "Accumulate" : "SwiGLU";
}

struct Case {
  GgmlType type;
  int64_t n_rows, k;
  size_t pad;
  int nx;
  Out mode;
  bool norm;
};

std::string describe(const Case& c) {
  return std::string(ggml_type_name(c.type)) + " " + std::to_string(c.n_rows) + "x" + std::to_string(c.k) +
         " pad " + std::to_string(c.pad) + " nx=" + std::to_string(c.nx) + " " + mode_name(c.mode) +
         (c.norm ? " +norm" : "");
}

// Runs one case against the reference; returns the number of outputs checked.
int64_t run_case(const Case& c, const Weights& w, const DevBuf& dw, uint32_t seed) {
  const int64_t k = c.k, n_out = c.mode == Out::SwiGLU ? c.n_rows / 2 : c.n_rows;
  const int64_t xs = k + 5, ys = n_out + 3;  // strided rows; y padding must stay untouched
  std::mt19937 rng(seed);
  std::vector<float> x(size_t(c.nx * xs), 0.0f), nw;
  for (int t = 0; t < c.nx; ++t) {
    if (c.norm) {  // m/64 · 2^e, |m| < 32: Σx² exact in f32 whatever the order (see the top comment)
      const int e = int(rng() % 6) - 3;
      for (int64_t j = 0; j < k; ++j) x[size_t(t * xs + j)] = std::ldexp(float(int(rng() % 63) - 31) / 64.0f, e);
    } else {
      std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
      for (int64_t j = 0; j < k; ++j) x[size_t(t * xs + j)] = ud(rng);
    }
  }
  const float eps = 1e-5f, scale = -0.75f;
  if (c.norm) {
    std::uniform_real_distribution<float> ud(0.5f, 1.5f);
    nw.resize(size_t(k));
    for (auto& v : nw) v = ud(rng);
  }
  std::vector<float> y0(size_t(c.nx * ys));
  if (c.mode == Out::Accumulate) {
    std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
    for (auto& v : y0) v = ud(rng);
    for (int t = 0; t < c.nx; ++t)  // padding: poison, must stay
      for (int64_t j = n_out; j < ys; ++j) std::memset(&y0[size_t(t * ys + j)], 0xFF, 4);
  } else {
    std::memset(y0.data(), 0xFF, y0.size() * 4);
  }

  DevBuf dx(x.size() * 4), dy(y0.size() * 4), dn(std::max<size_t>(nw.size(), 1) * 4);
  EXPECT_TRUE(dx.p && dy.p && dn.p);
  if (!(dx.p && dy.p && dn.p)) return 0;
  EXPECT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dy.p, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  if (c.norm) {
    EXPECT_EQ(cudaMemcpy(dn.p, nw.data(), nw.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }

  cuda::MatvecFusion f;
  f.out = c.mode;
  f.scale = c.mode == Out::Accumulate ? scale : 1.0f;
  if (c.norm) f.norm_w = dn.as<float>(), f.norm_eps = eps;
  cuda::matvec(c.type, dw.p, c.n_rows, k, w.row_bytes, dx.as<float>(), xs, c.nx, dy.as<float>(), ys, nullptr, f);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << describe(c);
  std::vector<float> y(y0.size());
  EXPECT_EQ(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost), cudaSuccess);

  int bad = 0;
  int64_t checked = 0;
  for (int t = 0; t < c.nx && bad < 5; ++t) {
    const QuantX qx = quantize_x(&x[size_t(t * xs)], k, c.norm ? nw.data() : nullptr);
    const double inv = c.norm ? inv_rms(&x[size_t(t * xs)], k, eps) : 1.0;
    // v·inv, and the bound of the product times inv plus the norm's own rounding (see the top)
    auto normed = [&](RefDot a) {
      return RefDot{a.v * inv, a.bound * inv + (c.norm ? 8 * std::ldexp(std::fabs(a.v * inv), -24) : 0.0)};
    };
    for (int64_t j = 0; j < ys && bad < 5; ++j) {
      const float got = y[size_t(t * ys + j)];
      if (j >= n_out) {
        if (!is_poison(got)) ++bad, ADD_FAILURE() << describe(c) << ": wrote y padding (" << t << "," << j << ")";
        continue;
      }
      const RefDot a = normed(ref_dot(c.type, w.stored_row(j), &w.ref[size_t(j * k)], qx, k));
      double want = a.v, bound = a.bound;
      if (c.mode == Out::Accumulate) {
        const double y_in = y0[size_t(t * ys + j)];
        want = y_in + double(scale) * a.v;
        bound = std::fabs(double(scale)) * a.bound + std::ldexp(std::fabs(want), -24) * 1.01;
      } else if (c.mode == Out::SwiGLU) {
        const int64_t ju = j + n_out;  // the up row
        const RefDot u = normed(ref_dot(c.type, w.stored_row(ju), &w.ref[size_t(ju * k)], qx, k));
        const double sg = a.v / (1.0 + std::exp(-a.v));
        want = sg * u.v;
        bound = 1.1 * a.bound * std::fabs(u.v) + std::fabs(sg) * u.bound + 1.1 * a.bound * u.bound +
                16 * std::ldexp(std::fabs(want), -24);
      }
      bound += 1e-30;
      const double err = std::fabs(double(got) - want);
      if (!(err <= bound)) {  // also catches NaN (poison left in place)
        ++bad;
        ADD_FAILURE() << describe(c) << " x row " << t << " output " << j << ": got " << got << " want " << want
                      << " (|error| " << err << ", bound " << bound << ")";
      }
      ++checked;
    }
  }
  return checked;
}

// Each case against the reference (run_case: every output checked), its weights made from `seed`
// and uploaded once, then run with the next seed — under each of `values` of the environment
// variable `env` (nullptr: unset) when one is named.
void check_cases(std::span<const Case> cases, uint32_t seed, const char* env = nullptr,
                 std::initializer_list<const char*> values = {nullptr}) {
  for (const Case& c : cases) {
    const Weights w = make_weights(c.type, c.n_rows, c.k, c.pad, seed++);
    DevBuf dw(w.bytes.size());
    ASSERT_TRUE(dw.p);
    CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    const int64_t n_out = c.mode == Out::SwiGLU ? c.n_rows / 2 : c.n_rows;
    for (const char* value : values) {
      std::optional<test::ScopedEnv> scoped;
      if (env) scoped.emplace(env, value);
      EXPECT_EQ(run_case(c, w, dw, seed), n_out * c.nx)
          << describe(c) << (env ? std::string(", ") + env + "=" + (value ? value : "(unset)") : "");
    }
    ++seed;
  }
}

const GgmlType kInt8Types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                               GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Every type x n_x_rows 1..8 x output mode x norm on/off over shapes with odd row counts (tail row
// groups), k = 32 (one block), k not a multiple of the 512-element tile (24, 40 and 65 blocks),
// rows padded (row_bytes > data, a multiple of 8, as every int8 type's direct loads need: a
// misaligned matrix decodes to f32, which QuantKernels covers) or not, and x / y row strides
// larger than the rows. k = 32 and 2080 of the 32-element formats end in a partial (zero-padded)
// super-block.
TEST(MatvecInt8, MatchesReferenceAllModes) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const struct {
    int64_t n_rows, k;
  } shapes[] = {{2, 32}, {7, 32}, {38, 768}, {301, 1280}, {130, 2080}, {1001, 256}, {66, 8192}};
  int64_t checked = 0;
  uint32_t seed = 1;
  for (GgmlType type : kInt8Types) {
    for (const auto& s : shapes) {
      if (s.k % ggml_traits(type).block_elems != 0) continue;  // Q4_K: 256-element super-blocks
      for (size_t pad : {size_t(0), size_t(16)}) {  // direct loads: 8-byte aligned rows only
        const Weights w = make_weights(type, s.n_rows, s.k, pad, seed++);
        DevBuf dw(w.bytes.size());
        ASSERT_TRUE(dw.p);
        CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
        for (int nx = 1; nx <= cuda::kMaxMatvecRows; ++nx)
          for (Out mode : {Out::Store, Out::Accumulate, Out::SwiGLU})
            for (bool norm : {false, true}) {
              if (mode == Out::SwiGLU && s.n_rows % 2 != 0) continue;
              checked += run_case({type, s.n_rows, s.k, pad, nx, mode, norm}, w, dw, seed++);
              if (HasFailure()) return;
            }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

// The LFM2 head / FFN shapes (many row groups, k of 4 and 16 tiles split over warps), decode batch
// 1 and 2.
TEST(MatvecInt8, LargeMatrices) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const Case cases[] = {
      {GgmlType::Q4_0, 40001, 2048, 0, 1, Out::Store, true},
      {GgmlType::Q8_0, 40001, 2048, 0, 2, Out::Store, false},
      {GgmlType::Q4_0, 2 * 4099, 2048, 0, 2, Out::SwiGLU, true},
      {GgmlType::Q8_0, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q4_0, 2053, 8192, 0, 2, Out::Accumulate, false},
      {GgmlType::Q8_0, 2053, 8192, 8, 1, Out::Accumulate, false},  // padded rows, still 8-byte aligned
      {GgmlType::Q4_K, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q4_K, 2053, 8192, 0, 2, Out::Accumulate, false},
      {GgmlType::Q5_K, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q5_K, 2053, 8192, 16, 2, Out::Accumulate, false},
      {GgmlType::Q6_K, 40001, 2048, 0, 1, Out::Store, false},  // the LM head of the Q4_0 / Q4_K_M mixes
      {GgmlType::Q6_K, 2053, 8192, 0, 2, Out::Accumulate, true},
      // Q4_1 / Q5_0 / Q5_1 (Q5_0 and Q5_1 also stand in for Q4_K and Q5_K in llama-quantize's K mixes
      // wherever k is no multiple of 256: Qwen2.5-0.5B's k = 896, 3.5 super-blocks)
      {GgmlType::Q4_1, 40001, 2048, 0, 1, Out::Store, false},
      {GgmlType::Q5_0, 2 * 4864, 896, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q5_0, 2053, 8192, 8, 2, Out::Accumulate, false},
      {GgmlType::Q5_1, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q5_1, 1157, 896, 0, 1, Out::Accumulate, true},
      // Q2_K / Q3_K (the Q2_K and Q3_K_M mixes)
      {GgmlType::Q2_K, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q2_K, 2053, 8192, 8, 2, Out::Accumulate, false},
      {GgmlType::Q3_K, 40001, 2048, 0, 1, Out::Store, false},
      {GgmlType::Q3_K, 2 * 4099, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q3_K, 2053, 8192, 16, 2, Out::Accumulate, true},
  };
  check_cases(cases, 1000);
}

// Q4_0 products of one x row too large for one wave of 8-row blocks take 16-row blocks of 2 warps
// where those fit in one (matvec.cu, launch_wide; on the H200 the [gate; up] of LFM2-1.2B and
// Llama-3.2-1B, 16,384 × 2048, and the 16,001-row matrices here, whose last block has one row):
// each against the exact reference, with the wide blocks and without (CERA_CUDA_MATVEC_ONE_WAVE=0).
// A GPU of another SM count may take either launch for either; both are checked either way.
TEST(MatvecInt8, WideRowBlocksMatchReference) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const Case cases[] = {
      {GgmlType::Q4_0, 2 * 8192, 2048, 0, 1, Out::SwiGLU, true},
      {GgmlType::Q4_0, 16001, 2048, 0, 1, Out::Store, false},
      {GgmlType::Q4_0, 16001, 2048, 16, 1, Out::Accumulate, true},
  };
  check_cases(cases, 3000, "CERA_CUDA_MATVEC_ONE_WAVE", {nullptr, "0"});  // "0": the usual blocks
}

// Tall Q6_K products of one x row (the LM head of the Q4_0 / Q4_K_M mixes) take blocks whose warps
// split the rows and share x rounded once in shared memory (matvec.cu, matvec_shared_x_kernel): a
// last block with rows past the end, padded rows, Store and Accumulate, against the exact reference
// with that kernel and without it (CERA_CUDA_MATVEC_SHARED_X=0).
TEST(MatvecInt8, SharedXHeadMatchesReference) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const Case cases[] = {
      {GgmlType::Q6_K, 40001, 2048, 0, 1, Out::Store, false},
      {GgmlType::Q6_K, 16411, 1024, 16, 1, Out::Accumulate, false},
      {GgmlType::Q6_K, 16387, 4352, 0, 1, Out::Store, false},
  };
  check_cases(cases, 3000, "CERA_CUDA_MATVEC_SHARED_X", {nullptr, "0"});  // "0": the usual blocks
}

// The same launch twice gives bit-identical results (fixed reduction order, no atomics).
TEST(MatvecInt8, Deterministic) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const int64_t n_rows = 6144, k = 2048;
  for (GgmlType type : kInt8Types) {
    const Weights w = make_weights(type, n_rows, k, 0, 77);
    const std::vector<float> x = test::random_floats(size_t(2 * k), 3);
    DevBuf dw(w.bytes.size()), dx(x.size() * 4), dy1(size_t(2 * n_rows) * 4), dy2(size_t(2 * n_rows) * 4);
    ASSERT_TRUE(dw.p && dx.p && dy1.p && dy2.p);
    CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    for (DevBuf* dy : {&dy1, &dy2})
      cuda::matvec(type, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), k, 2, dy->as<float>(), n_rows, nullptr, {});
    CERA_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> a(size_t(2 * n_rows)), b(a.size());
    CERA_CUDA_OK(cudaMemcpy(a.data(), dy1.p, dy1.bytes, cudaMemcpyDeviceToHost));
    CERA_CUDA_OK(cudaMemcpy(b.data(), dy2.p, dy2.bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << ggml_type_name(type);
  }
}

// The switch picks the path: off, Q4_0 is decoded to f32 and matches the exact weights' product to
// f32 accuracy; on, x's 8-bit rounding shows (relative error ~1e-3, well above the f32 path's
// ~1e-6). Every quantized type reports int8 activations, no float type does.
TEST(MatvecInt8, SwitchSelectsThePath) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope on(true);  // whatever the environment says
  const int64_t n_rows = 256, k = 2048;
  const Weights w = make_weights(GgmlType::Q4_0, n_rows, k, 0, 5);
  const std::vector<float> x = test::random_floats(size_t(k), 9);
  DevBuf dw(w.bytes.size()), dx(x.size() * 4), dy(size_t(n_rows) * 4);
  ASSERT_TRUE(dw.p && dx.p && dy.p);
  CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
  CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  // Relative rms error of y against the exact-weight product in double.
  auto rel_error = [&] {
    cuda::matvec(GgmlType::Q4_0, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), k, 1, dy.as<float>(), n_rows, nullptr,
                 {});
    std::vector<float> y(static_cast<size_t>(n_rows));
    EXPECT_EQ(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    double num = 0, den = 0;
    for (int64_t j = 0; j < n_rows; ++j) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i) want += double(w.ref[size_t(j * k + i)]) * double(x[size_t(i)]);
      num += (y[size_t(j)] - want) * (y[size_t(j)] - want);
      den += want * want;
    }
    return std::sqrt(num / den);
  };
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q4_0));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q8_0));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q4_K));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q6_K));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q4_1));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q5_0));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q5_1));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q5_K));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q2_K));
  EXPECT_TRUE(cuda::matvec_int8_activations(GgmlType::Q3_K));
  EXPECT_FALSE(cuda::matvec_int8_activations(GgmlType::F16));
  EXPECT_FALSE(cuda::matvec_int8_activations(GgmlType::BF16));
  const double int8_err = rel_error();
  cuda::matvec_int8_enable(false);
  EXPECT_FALSE(cuda::matvec_int8_activations(GgmlType::Q4_0));
  const double f32_err = rel_error();
  EXPECT_LT(f32_err, 1e-5);
  EXPECT_GT(int8_err, 1e-4);
  EXPECT_LT(int8_err, 2e-2);
}

}  // namespace
}  // namespace cera
