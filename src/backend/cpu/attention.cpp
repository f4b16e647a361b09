// Causal GQA attention over the paged KV cache, one pass with an online softmax (flash-style), so
// memory stays O(head_dim) per (token, head) whatever the context length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_internal.h"

namespace cera::cpu {
namespace {

float dot(const float* a, const float* b, int32_t n) {
  float s = 0.f;
  for (int32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void attention(ThreadPool& pool, const KvLayerView& kv, std::span<const StepSequence> seqs, const Tensor& q,
               const Tensor& k, const Tensor& v, Tensor out, const AttentionParams& p) {
  const int32_t d = p.head_dim;
  const int32_t group = p.n_head / p.n_head_kv;
  const int32_t bs = kv.block_size;

  // 1. Append the new keys/values to each sequence's blocks.
  for (const auto& s : seqs) {
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      const int32_t pos = s.n_past + t;
      const int32_t block = s.kv_blocks[pos / bs];
      for (int32_t h = 0; h < p.n_head_kv; ++h) {
        float* kd = kv.k(block, pos % bs, h);
        float* vd = kv.v(block, pos % bs, h);
        std::memcpy(kd, k.row(s.first_token + t) + h * d, sizeof(float) * d);
        std::memcpy(vd, v.row(s.first_token + t) + h * d, sizeof(float) * d);
        if (kv.round_to_f16) {
          round_to_f16(kd, d);
          round_to_f16(vd, d);
        }
      }
    }
  }

  // 2. Work items: (sequence, token, KV head, a run of its q heads). The heads of a run share each
  // key's loads (a decode step reads its context once per run, not once per q head), so a run takes
  // as many of the group's heads as kMaxAttentionHeads allows while the items still outnumber the
  // threads. (Dev machine, 2 threads, tg32 after 4,096 tokens: LFM2-350M Q4_0 46-47 -> 53-55 t/s,
  // LFM2-1.2B 20.5-21.0 -> 21.6-21.7; docs/BENCHMARKS.md.)
  struct Item {
    int32_t seq, token;
  };
  std::vector<Item> items;
  for (int32_t si = 0; si < int32_t(seqs.size()); ++si)
    for (int32_t t = 0; t < seqs[si].n_tokens; ++t) items.push_back({si, t});
  int32_t run = std::min(group, detail::kMaxAttentionHeads);
  while (run > 1 && int64_t(items.size()) * p.n_head_kv * ((group + run - 1) / run) < pool.size()) run = (run + 1) / 2;
  const int32_t runs_per_kv = (group + run - 1) / run;

  const int64_t n_work = int64_t(items.size()) * p.n_head_kv * runs_per_kv;
  static const bool simd = active_isa() == Isa::Avx512 && detail::have_avx512_ops();
  pool.parallel_for(n_work, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d);
    std::vector<float> scores;
    for (int64_t w = begin; w < end; ++w) {
      const Item& it = items[w / (int64_t(p.n_head_kv) * runs_per_kv)];
      const int32_t kvh = int32_t(w / runs_per_kv % p.n_head_kv);
      const int32_t h0 = kvh * group + int32_t(w % runs_per_kv) * run;
      const int32_t nh = std::min(run, (kvh + 1) * group - h0);
      const StepSequence& s = seqs[it.seq];
      const int32_t row = s.first_token + it.token;
      const int32_t n_keys = s.n_past + it.token + 1;  // causal: keys at positions <= own
      if (simd) {  // two-pass softmax, vectorised (a token's result still depends only on its own keys)
        scores.resize(size_t(nh) * size_t(n_keys));
        detail::attention_rows_avx512({q.row(row) + h0 * d, kv.base, s.kv_blocks.data(), bs, kv.kv_dim, kvh * bs * d,
                                       d, n_keys, p.scale, scores.data(), out.row(row) + h0 * d, nh});
        continue;
      }
      for (int32_t h = h0; h < h0 + nh; ++h) {
        const float* qh = q.row(row) + h * d;
        float m = -INFINITY, l = 0.f;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int32_t pos = 0; pos < n_keys; ++pos) {
          const int32_t block = s.kv_blocks[pos / bs];
          const float* kp = kv.k(block, pos % bs, kvh);
          const float* vp = kv.v(block, pos % bs, kvh);
          const float score = dot(qh, kp, d) * p.scale;
          if (score > m) {
            const float correction = std::exp(m - score);
            for (int32_t i = 0; i < d; ++i) acc[i] *= correction;
            l *= correction;
            m = score;
          }
          const float e = std::exp(score - m);
          l += e;
          for (int32_t i = 0; i < d; ++i) acc[i] += e * vp[i];
        }
        float* o = out.row(row) + h * d;
        const float inv = 1.f / l;
        for (int32_t i = 0; i < d; ++i) o[i] = acc[i] * inv;
      }
    }
  });
}

}  // namespace cera::cpu
