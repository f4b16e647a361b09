// Matmul driver: y[T,N] = x[T,K] · W[N,K]ᵀ for W in any stored format.
//
// x is converted once to the kernels' activation format (f32 or Q8 blocks); then threads take
// chunks of weight rows and, inside a chunk, walk tiles of max_nw weight rows × max_nx tokens, so a
// weight block loaded into registers serves several tokens (prefill) while decode (T = 1) streams
// each weight row exactly once, in long chunks the kernels prefetch ahead of.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/prefetch.h"
#include "cera/error.h"

namespace cera::cpu {
namespace {

struct PreparedActivations {
  GgmlType act_type;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;
};

void prepare(ThreadPool& pool, const Tensor& x, const MatmulKernels& kern, PreparedActivations& out) {
  out.act_type = kern.act_type;
  out.row_bytes = ggml_row_bytes(kern.act_type, x.cols);
  out.data.resize(out.row_bytes * size_t(x.rows));
  pool.parallel_for(x.rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kern.quantize_act(x.row(r), out.data.data() + r * out.row_bytes, x.cols);
  });
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  std::vector<PreparedActivations> prepared;  // one per distinct activation format
  std::vector<size_t> which(ws.size());
  std::vector<const MatmulKernels*> kernels(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    const Tensor& w = ws[i];
    if (w.cols != x.cols)
      throw Error(ErrorCode::Internal, "matmul: weight has " + std::to_string(w.cols) + " columns, input " +
                                           std::to_string(x.cols));
    kernels[i] = &matmul_kernels(w.type);
    auto it = std::find_if(prepared.begin(), prepared.end(),
                           [&](const PreparedActivations& p) { return p.act_type == kernels[i]->act_type; });
    if (it == prepared.end()) {
      prepared.emplace_back();
      prepare(pool, x, *kernels[i], prepared.back());
      it = prepared.end() - 1;
    }
    which[i] = size_t(it - prepared.begin());
  }

  // One parallel region over the weight rows of all matrices, so small matrices share threads.
  std::vector<int64_t> row_start(ws.size() + 1, 0);
  for (size_t i = 0; i < ws.size(); ++i) row_start[i + 1] = row_start[i] + ws[i].rows;
  const int64_t total_rows = row_start.back();
  const int64_t T = x.rows;
  // A step of a few tokens reads each weight about once: a thread's rows should then be one long
  // stream, which the kernels prefetch ahead of (prefetch.h), yet a slow thread (a loaded machine,
  // an efficiency core) must not hold the others back: 4 contiguous chunks per thread, handed out
  // dynamically. (Dev machine, 2 threads, LFM2-350M, against chunks of 16 rows and no prefetch:
  // tg128 Q4_K_M 57 -> ~100 t/s, 4 sequences 159 -> 263; docs/BENCHMARKS.md.) Prefill takes 32-row
  // chunks: it reuses each weight over many tokens.
  const int64_t kChunksPerThread = 4;
  int64_t grain = 32;
  if (T <= detail::kPrefetchMaxTokens)
    grain = std::max<int64_t>(16, (total_rows + kChunksPerThread * pool.size() - 1) / (kChunksPerThread * pool.size()));
  grain = std::max<int64_t>(grain, int64_t(kernels[0]->max_nw));
  grain -= grain % kernels[0]->max_nw;

  pool.parallel_for(total_rows, grain, [&](int64_t r0, int64_t r1) {
    while (r0 < r1) {
      const size_t m = size_t(std::upper_bound(row_start.begin(), row_start.end(), r0) - row_start.begin() - 1);
      const int64_t end = std::min(r1, row_start[m + 1]);
      const MatmulKernels& kern = *kernels[m];
      const PreparedActivations& act = prepared[which[m]];
      const Tensor& w = ws[m];
      Tensor& y = ys[m];
      const auto* wbase = static_cast<const uint8_t*>(w.data);
      for (int64_t j = 0; j < T; j += kern.max_nx) {
        const int nx = int(std::min<int64_t>(kern.max_nx, T - j));
        for (int64_t i = r0 - row_start[m]; i < end - row_start[m]; i += kern.max_nw) {
          const int nw = int(std::min<int64_t>(kern.max_nw, end - row_start[m] - i));
          kern.dot_tile(x.cols, wbase + i * w.row_bytes, w.row_bytes, nw, act.data.data() + j * act.row_bytes,
                        act.row_bytes, nx, y.row(j) + i, y.row_bytes / sizeof(float));
        }
      }
      r0 = end;
    }
  });
}

}  // namespace cera::cpu
