// The CUDA weight kernels (backend/cuda/quant_kernels.h) against the scalar reference dequantizer:
// dequantize_f32 and embed_rows bit-exact, dequantize_f16/bf16 equal to the reference rounded to
// that type, matvec within a bound of the exact (double) product (with f32 activations: the int8
// path of Q4_0/Q8_0/Q4_K/Q5_K/Q6_K is off here and has its own test, matvec_int8_test.cpp). Outputs are
// poisoned with 0xFF bytes (NaN in f32, f16 and bf16) before each launch, so an element the kernel
// never wrote fails, and padding between output rows must still hold the poison afterwards.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "common/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                           GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

using test::DevBuf;

using Weights = test::RandomWeights;

Weights make_weights(GgmlType type, int64_t n_rows, int64_t k, size_t pad, uint32_t seed) {
  return test::random_weights(type, n_rows, k, pad, seed, {4, true, 0xA5});
}

bool is_poison_f32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u == 0xFFFFFFFFu;
}

std::string label(GgmlType t, int64_t n_rows, int64_t k) {
  return std::string(ggml_type_name(t)) + " " + std::to_string(n_rows) + "x" + std::to_string(k);
}

// Shapes per type: odd row counts; k not a multiple of 256 for the 32-element formats and not of 8
// for the float formats (their unaligned path); float k = 2312 gives a warp a second tile of 8
// elements (the pipelined kernel's partial next tile).
std::vector<std::pair<int64_t, int64_t>> shapes_for(GgmlType t) {
  const int64_t blk = ggml_traits(t).block_elems;
  if (blk == 256) return {{1, 256}, {7, 768}, {257, 2048}, {1000, 512}, {33, 4096}};
  if (blk == 32) return {{1, 32}, {7, 96}, {257, 2080}, {1000, 544}, {33, 4096}};
  return {{1, 8}, {7, 13}, {257, 2048}, {1000, 520}, {33, 4096}, {9, 2312}, {5, 1001}};
}

TEST(QuantKernels, SupportsWeightTypes) {
  for (GgmlType t : kTypes) EXPECT_TRUE(cuda::supports_weight_type(t)) << ggml_type_name(t);
  EXPECT_FALSE(cuda::supports_weight_type(GgmlType::Q8_K));
  EXPECT_FALSE(cuda::supports_weight_type(GgmlType::Q8_1));
  EXPECT_FALSE(cuda::supports_weight_type(GgmlType::I32));
}

// dequantize_f32 bit-exact; f16 / bf16 equal to the reference value rounded (RNE) to that type.
TEST(QuantKernels, DequantizeMatchesReference) {
  CERA_REQUIRE_CUDA();
  int64_t checked = 0;
  for (GgmlType t : kTypes) {
    for (auto [n_rows, k] : shapes_for(t)) {
      const size_t pad = (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) ? 0 : 6;
      const Weights w = make_weights(t, n_rows, k, pad, uint32_t(n_rows * 131 + k));
      const size_t n = size_t(n_rows * k);
      DevBuf dw(w.bytes.size()), d32(n * 4), d16(n * 2), db16(n * 2);
      ASSERT_TRUE(dw.p && d32.p && d16.p && db16.p);
      CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
      CERA_CUDA_OK(cudaMemset(d32.p, 0xFF, n * 4));
      CERA_CUDA_OK(cudaMemset(d16.p, 0xFF, n * 2));
      CERA_CUDA_OK(cudaMemset(db16.p, 0xFF, n * 2));
      cuda::dequantize_f32(t, dw.p, n_rows, k, w.row_bytes, d32.as<float>(), nullptr);
      cuda::dequantize_f16(t, dw.p, n_rows, k, w.row_bytes, d16.as<__half>(), nullptr);
      cuda::dequantize_bf16(t, dw.p, n_rows, k, w.row_bytes, db16.as<__nv_bfloat16>(), nullptr);
      CERA_CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint32_t> o32(n);
      std::vector<uint16_t> o16(n), ob16(n);
      CERA_CUDA_OK(cudaMemcpy(o32.data(), d32.p, n * 4, cudaMemcpyDeviceToHost));
      CERA_CUDA_OK(cudaMemcpy(o16.data(), d16.p, n * 2, cudaMemcpyDeviceToHost));
      CERA_CUDA_OK(cudaMemcpy(ob16.data(), db16.p, n * 2, cudaMemcpyDeviceToHost));
      int bad = 0;
      for (size_t i = 0; i < n && bad < 5; ++i) {
        uint32_t want;
        std::memcpy(&want, &w.ref[i], 4);
        const uint16_t want16 = f32_to_f16(w.ref[i]), wantb = f32_to_bf16(w.ref[i]);
        if (o32[i] != want || o16[i] != want16 || ob16[i] != wantb) {
          ++bad;
          ADD_FAILURE() << label(t, n_rows, k) << " element " << i << ": f32 " << std::hex << o32[i] << " want "
                        << want << ", f16 " << o16[i] << " want " << want16 << ", bf16 " << ob16[i] << " want "
                        << wantb;
        }
      }
      checked += int64_t(n);
    }
  }
  EXPECT_GT(checked, 1000000);
}

// Embedding lookup: exact reference rows, repeated and out-of-order ids, a padded output stride.
TEST(QuantKernels, EmbedRowsExact) {
  CERA_REQUIRE_CUDA();
  for (GgmlType t : kTypes) {
    const int64_t k = ggml_traits(t).block_elems == 256 ? 512 : (ggml_traits(t).block_elems == 32 ? 160 : 77);
    const int64_t vocab = 300;
    const Weights w = make_weights(t, vocab, k, 4, 7u + uint32_t(t));  // F32 rows stay 4-byte aligned
    const std::vector<int32_t> tokens = {5, 299, 0, 5, 123, 42, 298, 1, 250};
    const int32_t n_tok = int32_t(tokens.size());
    const int64_t stride = k + 5;
    DevBuf dw(w.bytes.size()), dt(tokens.size() * 4), dout(size_t(n_tok * stride) * 4);
    ASSERT_TRUE(dw.p && dt.p && dout.p);
    CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    CERA_CUDA_OK(cudaMemcpy(dt.p, tokens.data(), tokens.size() * 4, cudaMemcpyHostToDevice));
    CERA_CUDA_OK(cudaMemset(dout.p, 0xFF, dout.bytes));
    cuda::embed_rows(t, dw.p, k, w.row_bytes, dt.as<int32_t>(), n_tok, dout.as<float>(), stride, nullptr);
    CERA_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> out(size_t(n_tok * stride));
    CERA_CUDA_OK(cudaMemcpy(out.data(), dout.p, dout.bytes, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int32_t i = 0; i < n_tok && bad < 5; ++i)
      for (int64_t j = 0; j < stride && bad < 5; ++j) {
        const float got = out[size_t(i * stride + j)];
        if (j >= k) {
          if (!is_poison_f32(got)) ++bad, ADD_FAILURE() << ggml_type_name(t) << ": wrote padding at " << i << "," << j;
          continue;
        }
        const float want = w.ref[size_t(tokens[size_t(i)] * k + j)];
        if (std::memcmp(&got, &want, 4) != 0)
          ++bad, ADD_FAILURE() << ggml_type_name(t) << " token " << i << " element " << j << ": " << got << " want "
                               << want;
      }
  }
}

// matvec against the exact product of the reference weights with x (in double).
//
// Tolerance: the kernel sums, per output, products q_j*x_j of exact small integers q_j with x in
// f32 (chunks of 8), scales each chunk sum once (scale*s + bias*Σx), accumulates the chunks of a
// lane in sequence, then reduces 32 lanes and up to 8 warps in trees. Every output is thus a sum
// whose longest chain of f32 roundings is at most 8 + k/256 + 2 + 5 + 8 ≤ 40 for k ≤ 4096, so
// |error| ≤ 40·2^-24·Σ|terms| ≈ 2.4e-6·Σ|terms|. The terms are bounded by (|scale·q_j| + |bias|)·|x_j|
// rather than |w_j·x_j|, and the reference w_j itself carries one rounding of scale·q_j + bias;
// for weights quantized from data (scale·q and bias of a block are both within about the block's
// range of |w|) that is at most ~3·Σ|w_j·x_j|, giving ~7e-6·Σ|w·x| in the worst case. Hence the
// tolerance 1e-5·Σ|w_j·x_j| per output; the typical error (random-walk) is orders smaller.
TEST(QuantKernels, MatvecMatchesReference) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope f32_activations(false);
  int64_t checked = 0;
  for (GgmlType t : kTypes) {
    const auto shapes = shapes_for(t);
    for (size_t si = 0; si < shapes.size(); ++si) {
      const auto [n_rows, k] = shapes[si];
      const bool flt = ggml_traits(t).block_elems == 1;
      // Float rows padded to keep 16-byte alignment (the vector path) except for odd k.
      const size_t pad = flt ? (ggml_row_bytes(t, k) % 16 ? 0 : 16) : 10;
      const Weights w = make_weights(t, n_rows, k, pad, uint32_t(si * 7919 + unsigned(t)));
      DevBuf dw(w.bytes.size());
      ASSERT_TRUE(dw.p);
      CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
      for (int nx = 1; nx <= cuda::kMaxMatvecRows; ++nx) {
        // Alternate x strides: k+4 (16-byte aligned rows: vector loads) and k+3 (scalar loads).
        const int64_t xs = k + ((nx + int(si)) % 2 ? 4 : 3), ys = n_rows + 5;
        std::mt19937 rng(uint32_t(nx * 1000 + si));
        std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
        std::vector<float> x(size_t(nx * xs));
        for (auto& v : x) v = ud(rng);
        DevBuf dx(x.size() * 4), dy(size_t(nx * ys) * 4);
        ASSERT_TRUE(dx.p && dy.p);
        CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        CERA_CUDA_OK(cudaMemset(dy.p, 0xFF, dy.bytes));
        cuda::matvec(t, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), xs, nx, dy.as<float>(), ys, nullptr);
        CERA_CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> y(size_t(nx * ys));
        CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int tx = 0; tx < nx && bad < 5; ++tx) {
          for (int64_t r = 0; r < ys && bad < 5; ++r) {
            const float got = y[size_t(tx * ys + r)];
            if (r >= n_rows) {
              if (!is_poison_f32(got)) ++bad, ADD_FAILURE() << label(t, n_rows, k) << ": wrote y padding";
              continue;
            }
            double exact = 0, mag = 0;
            for (int64_t j = 0; j < k; ++j) {
              const double p = double(w.ref[size_t(r * k + j)]) * double(x[size_t(tx * xs + j)]);
              exact += p;
              mag += std::fabs(p);
            }
            ASSERT_GT(mag, 0.0) << label(t, n_rows, k);  // the comparison must not be vacuous
            const double err = std::fabs(double(got) - exact);
            if (!(err <= 1e-5 * mag)) {  // also catches NaN (poison left in place)
              ++bad;
              ADD_FAILURE() << label(t, n_rows, k) << " nx=" << nx << " x row " << tx << " output " << r << ": got "
                            << got << " want " << exact << " (|error| " << err << ", Σ|w·x| " << mag << ")";
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

// Enough rows that the launch gives each warp several k-tiles (the software-pipelined path, with
// an uneven split: 6 tiles over 4 warps), every type, every row checked.
TEST(QuantKernels, MatvecLargeMatrix) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope f32_activations(false);
  for (GgmlType t : kTypes) {
    const int64_t n_rows = 4099, k = 3072;
    const Weights w = make_weights(t, n_rows, k, 0, 99u + unsigned(t));
    std::vector<float> x(static_cast<size_t>(k));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    for (auto& v : x) v = ud(rng);
    DevBuf dw(w.bytes.size()), dx(x.size() * 4), dy(size_t(n_rows) * 4);
    ASSERT_TRUE(dw.p && dx.p && dy.p);
    CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CERA_CUDA_OK(cudaMemset(dy.p, 0xFF, dy.bytes));
    cuda::matvec(t, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), k, 1, dy.as<float>(), n_rows, nullptr);
    CERA_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> y(static_cast<size_t>(n_rows));
    CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t r = 0; r < n_rows && bad < 5; ++r) {
      double exact = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double p = double(w.ref[size_t(r * k + j)]) * double(x[size_t(j)]);
        exact += p;
        mag += std::fabs(p);
      }
      const double err = std::fabs(double(y[size_t(r)]) - exact);
      if (!(err <= 1e-5 * mag))
        ++bad, ADD_FAILURE() << label(t, n_rows, k) << " row " << r << ": got " << y[size_t(r)] << " want " << exact;
    }
  }
}


// The norm folded into the matvec (MatvecFusion::norm_w), with the plain and the SwiGLU epilogue,
// for every type and 1..8 rows of x, against the exact product with x' = norm_w ⊙ x / rms(x)
// (double). The kernel computes (W·(norm_w ⊙ x)) / rms(x): two more f32 roundings per term than
// MatvecMatchesReference (norm_w · x, then the final scaling), well inside the same 1e-5·Σ|w·x'|
// bound. SwiGLU propagates the errors e_g, e_u of its two products: |silu'(g)| ≤ 1.1, so
// |error| ≤ 1.1·|u|·e_g + |silu(g)|·e_u, plus a few ulp of the result (expf, two products).
TEST(QuantKernels, MatvecFoldedNormMatchesReference) {
  CERA_REQUIRE_CUDA();
  test::MatvecInt8Scope f32_activations(false);
  const float eps = 1e-5f;
  int64_t checked = 0;
  for (GgmlType t : kTypes) {
    const int64_t blk = ggml_traits(t).block_elems;
    const int64_t F = 129, n_rows = 2 * F;  // [gate; up] for SwiGLU, odd F: a tail group
    for (const int64_t k : {blk == 1 ? int64_t(1001) : blk * (blk == 256 ? 8 : 65), blk == 1 ? int64_t(2048) : blk * 64}) {
      const Weights w = make_weights(t, n_rows, k, 0, uint32_t(k) * 31u + unsigned(t));
      DevBuf dw(w.bytes.size());
      ASSERT_TRUE(dw.p);
      CERA_CUDA_OK(cudaMemcpy(dw.p, w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
      std::mt19937 rng(uint32_t(k) + unsigned(t));
      std::uniform_real_distribution<float> ud(-3.0f, 3.0f), un(0.5f, 1.5f);
      std::vector<float> norm_w(static_cast<size_t>(k));
      for (auto& v : norm_w) v = un(rng);
      DevBuf dn(norm_w.size() * 4);
      ASSERT_TRUE(dn.p);
      CERA_CUDA_OK(cudaMemcpy(dn.p, norm_w.data(), dn.bytes, cudaMemcpyHostToDevice));
      for (const int nx : {1, 2, 3, 8}) {
        const int64_t xs = k + 4, ys = n_rows + 3;
        std::vector<float> x(size_t(nx * xs));
        for (auto& v : x) v = ud(rng);
        // x' in double and, per output row, the exact product and Σ|w·x'|.
        std::vector<double> exact(size_t(nx * n_rows)), mag(size_t(nx * n_rows));
        for (int tx = 0; tx < nx; ++tx) {
          const float* xr = x.data() + tx * xs;
          double ss = 0;
          for (int64_t j = 0; j < k; ++j) ss += double(xr[j]) * xr[j];
          const double inv = 1.0 / std::sqrt(ss / double(k) + eps);
          for (int64_t r = 0; r < n_rows; ++r) {
            double e = 0, m = 0;
            for (int64_t j = 0; j < k; ++j) {
              const double p = double(w.ref[size_t(r * k + j)]) * (double(norm_w[size_t(j)]) * xr[j] * inv);
              e += p, m += std::fabs(p);
            }
            exact[size_t(tx * n_rows + r)] = e, mag[size_t(tx * n_rows + r)] = m;
          }
        }
        DevBuf dx(x.size() * 4), dy(size_t(nx * ys) * 4);
        ASSERT_TRUE(dx.p && dy.p);
        CERA_CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        for (const bool glu : {false, true}) {
          cuda::MatvecFusion f;
          f.norm_w = dn.as<float>();
          f.norm_eps = eps;
          if (glu) f.out = cuda::MatvecFusion::Out::SwiGLU;
          CERA_CUDA_OK(cudaMemset(dy.p, 0xFF, dy.bytes));
          cuda::matvec(t, dw.p, n_rows, k, w.row_bytes, dx.as<float>(), xs, nx, dy.as<float>(), ys, nullptr, f);
          CERA_CUDA_OK(cudaDeviceSynchronize());
          std::vector<float> y(size_t(nx * ys));
          CERA_CUDA_OK(cudaMemcpy(y.data(), dy.p, dy.bytes, cudaMemcpyDeviceToHost));
          const int64_t n_out = glu ? F : n_rows;
          int bad = 0;
          for (int tx = 0; tx < nx && bad < 5; ++tx)
            for (int64_t r = 0; r < ys && bad < 5; ++r) {
              const float got = y[size_t(tx * ys + r)];
              if (r >= n_out) {
                if (!is_poison_f32(got)) ++bad, ADD_FAILURE() << label(t, n_rows, k) << ": wrote past the outputs";
                continue;
              }
              const double* e = &exact[size_t(tx * n_rows)];
              const double* m = &mag[size_t(tx * n_rows)];
              double want = e[r], tol = 1e-5 * m[r];
              if (glu) {
                const double g = e[r], u = e[F + r], silu = g / (1.0 + std::exp(-g));
                want = silu * u;
                tol = 1.1 * std::fabs(u) * 1e-5 * m[r] + std::fabs(silu) * 1e-5 * m[F + r] + 1e-6 * std::fabs(want);
              }
              ASSERT_GT(tol, 0.0) << label(t, n_rows, k);  // the comparison must not be vacuous
              if (!(std::fabs(double(got) - want) <= tol))
                ++bad, ADD_FAILURE() << label(t, n_rows, k) << (glu ? " swiglu" : "") << " nx=" << nx << " row " << tx
                                     << " output " << r << ": got " << got << " want " << want << " (tol " << tol << ")";
              ++checked;
            }
        }
      }
    }
  }
  EXPECT_GT(checked, 50000);
}

}  // namespace
}  // namespace cera
