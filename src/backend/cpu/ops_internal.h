// Glue between the generic ops (attention.cpp, elementwise.cpp) and their AVX-512 versions in
// ops_avx512.cpp. Callers check use_avx512_ops() (compiled in, CPU has it, CERA_CPU_ISA allows it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cera::cpu::detail {

// One (token, head) of causal attention over the paged cache: keys/values at positions
// [0, n_keys), position p in block blocks[p / block_size], slot p % block_size; K of a block is
// [block_size][kv_dim] floats, V follows it. scores: scratch of n_keys floats.
struct AttentionRow {
  const float* q;
  const float* kv_base;
  const int32_t* blocks;
  int32_t block_size, kv_dim, head_offset, head_dim, n_keys;
  float scale;
  float* scores;
  float* out;
};

bool have_avx512_ops();  // false if this build has no AVX-512 code
void attention_row_avx512(const AttentionRow& a);
void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n);

}  // namespace cera::cpu::detail
