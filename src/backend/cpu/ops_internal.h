// Glue between the generic ops (attention.cpp, elementwise.cpp) and their AVX-512 versions in
// ops_avx512.cpp. Callers check use_avx512_ops() (compiled in, CPU has it, CERA_CPU_ISA allows it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cera::cpu::detail {

// Up to kMaxAttentionHeads q heads of one KV head, for one token, of causal attention over the paged
// cache: keys/values at positions [0, n_keys), position p in block blocks[p / block_size], slot
// p % block_size; a block is 2 × block_size × kv_dim floats, K then V, the KV head's keys head_dim
// apart from head_offset (its run: KvLayerView's layout) in K, and as far into V. The heads' q (and
// their outputs) are head_dim apart from q (out). Each key is loaded once for all the heads; each
// head's arithmetic is the same as alone, so its output does not depend on n_heads.
// scores: scratch of n_heads × n_keys floats.
inline constexpr int32_t kMaxAttentionHeads = 4;
struct AttentionRows {
  const float* q;
  const float* kv_base;
  const int32_t* blocks;
  int32_t block_size, kv_dim, head_offset, head_dim, n_keys;
  float scale;
  float* scores;
  float* out;
  int32_t n_heads = 1;
};

bool have_avx512_ops();  // false if this build has no AVX-512 code
void attention_rows_avx512(const AttentionRows& a);
void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n);

}  // namespace cera::cpu::detail
