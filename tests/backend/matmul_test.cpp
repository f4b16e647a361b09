// The threaded matmul driver: however the rows are split among threads (decode steps take a few
// long chunks a thread, prefill 32-row ones) and whatever the step's token count, every output is
// the kernels' own (row, token) result, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "format/quant.h"

namespace cera::cpu {
namespace {

struct Matrix {
  std::vector<uint8_t> data;
  Tensor t;
};

Matrix random_matrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m;
  const size_t rb = ggml_row_bytes(type, cols);
  m.data.resize(rb * size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    quant::quantize_row_ref(type, row.data(), m.data.data() + rb * size_t(r), cols);
  }
  m.t = Tensor{m.data.data(), type, rows, cols, rb};
  return m;
}

// y[j][i] of one weight row i and one token j, through the kernels alone (one 1 × 1 tile).
float one_output(const Tensor& w, const float* x, int64_t i) {
  const MatmulKernels& k = matmul_kernels(w.type);
  std::vector<uint8_t> act(ggml_row_bytes(k.act_type, w.cols));
  k.quantize_act(x, act.data(), w.cols);
  float out = 0.0f;
  k.dot_tile(w.cols, static_cast<const uint8_t*>(w.data) + size_t(i) * w.row_bytes, w.row_bytes, 1, act.data(),
             act.size(), 1, &out, 1);
  return out;
}

TEST(Matmul, EveryOutputIsTheKernelsWhateverTheThreadsAndTokens) {
  std::mt19937 rng(7);
  const int64_t cols = 512;
  // Two matrices in one call (as q/k/v or gate/up are), of row counts no chunk size divides; the
  // float and row-lane types take other tile widths than the K-quants.
  const GgmlType pairs[][2] = {{GgmlType::Q4_K, GgmlType::Q6_K},
                               {GgmlType::Q4_0, GgmlType::Q8_0},
                               {GgmlType::BF16, GgmlType::F16}};
  for (const auto& types : pairs) {
    Matrix a = random_matrix(types[0], 301, cols, rng), b = random_matrix(types[1], 37, cols, rng);
    const Tensor ws[] = {a.t, b.t};
    for (int64_t T : {1, 2, 3, 4, 5, 9}) {
      std::vector<float> x(size_t(T * cols));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (auto& v : x) v = dist(rng);
      const Tensor xt{x.data(), GgmlType::F32, T, cols, sizeof(float) * size_t(cols)};
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> ya(size_t(T * a.t.rows), -1.0f), yb(size_t(T * b.t.rows), -1.0f);
        Tensor ys[] = {{ya.data(), GgmlType::F32, T, a.t.rows, sizeof(float) * size_t(a.t.rows)},
                       {yb.data(), GgmlType::F32, T, b.t.rows, sizeof(float) * size_t(b.t.rows)}};
        matmul(pool, xt, ws, ys);
        for (int m = 0; m < 2; ++m)
          for (int64_t j = 0; j < T; ++j)
            for (int64_t i = 0; i < ws[m].rows; ++i) {
              const float want = one_output(ws[m], x.data() + j * cols, i);
              const float got = ys[m].row(j)[i];
              ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
                  << ggml_type_name(ws[m].type) << " T=" << T << " threads=" << threads << " row " << i
                  << " token " << j << ": " << got << " vs " << want;
            }
      }
    }
  }
}

}  // namespace
}  // namespace cera::cpu
