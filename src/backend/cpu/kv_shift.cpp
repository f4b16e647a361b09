// Context shift: drop a span of the KV cache by moving later positions down. RoPE angles are linear
// in the position, so K at the new position is the stored K rotated by the angle of -delta.
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"

namespace cera::cpu {

void shift_kv(const KvLayerView& kv, std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta,
              const RopeParams* rope) {
  const int32_t bs = kv.block_size;
  std::vector<double> inv_freq;
  std::vector<float> cos_t, sin_t;
  if (rope) {
    inv_freq.resize(size_t(rope->n_rot / 2));
    cos_t.resize(inv_freq.size());
    sin_t.resize(inv_freq.size());
    rope_inv_freq(*rope, inv_freq.data());
    rope_cos_sin(inv_freq.data(), rope->n_rot, -delta, cos_t.data(), sin_t.data());
  }
  // Ascending order: a destination is always below its source, so nothing is overwritten early.
  for (int32_t p = first; p < first + count; ++p) {
    const int32_t q = p - delta;
    const int32_t sb = blocks[size_t(p / bs)], db = blocks[size_t(q / bs)];
    for (int32_t h = 0; h < kv.n_kv_heads(); ++h) {
      float* k = kv.k(db, q % bs, h);
      std::memcpy(k, kv.k(sb, p % bs, h), sizeof(float) * size_t(kv.head_dim));
      std::memcpy(kv.v(db, q % bs, h), kv.v(sb, p % bs, h), sizeof(float) * size_t(kv.head_dim));
      if (rope) {
        rope_apply(k, cos_t.data(), sin_t.data(), rope->n_rot, rope->neox);
        if (kv.round_to_f16) round_to_f16(k, kv.head_dim);  // V moved as stored, already rounded
      }
    }
  }
}

}  // namespace cera::cpu
