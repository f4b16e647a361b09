// AVX-512 versions of the non-matmul hot loops: one token's attention for the q heads of a KV head,
// and SiLU·up.
// After the int8 prefill kernels, the scalar attention loop and libm expf were ~38% of a Q4_0 pp512.
// Same ODR rules as kernels_avx512.cpp: anonymous namespace, intrinsics only, plain exports.
#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "backend/cpu/ops_internal.h"

namespace cera::cpu::detail {

#if defined(__x86_64__) && defined(__AVX512F__)
namespace {

// e^x: x = n·ln2 + r with |r| <= ln2/2, degree-7 Taylor for e^r (relative error < 1e-8 before
// rounding), then ×2^n by vscalefps, which saturates to 0 / inf outside the float range.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 split in two
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u); }

}  // namespace

bool have_avx512_ops() { return true; }

namespace {

template <int NH>
void attention_rows(const AttentionRows& a) {
  const int32_t d = a.head_dim, n = a.n_keys;
  // 1. scores and their max, each key's row loaded once for the NH heads
  float m[NH];
  for (int g = 0; g < NH; ++g) m[g] = -__builtin_inff();
  for (int32_t pos = 0; pos < n; ++pos) {
    const int32_t blk = a.blocks[pos / a.block_size], slot = pos % a.block_size;
    const float* k = a.kv_base + size_t(blk) * 2 * a.block_size * a.kv_dim + a.head_offset + size_t(slot) * d;
    __m512 s[NH];
    for (int g = 0; g < NH; ++g) s[g] = _mm512_setzero_ps();
    for (int32_t i = 0; i < d; i += 16) {
      const __mmask16 mk = tail_mask(d - i);
      const __m512 kv = _mm512_maskz_loadu_ps(mk, k + i);
#pragma GCC unroll 4
      for (int g = 0; g < NH; ++g) s[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a.q + g * d + i), kv, s[g]);
    }
    for (int g = 0; g < NH; ++g) {
      const float sc = _mm512_reduce_add_ps(s[g]) * a.scale;
      a.scores[size_t(g) * n + pos] = sc;
      m[g] = sc > m[g] ? sc : m[g];
    }
  }
  // 2. e = exp(s - m), l = Σe, per head
  __m512 inv[NH];
  for (int g = 0; g < NH; ++g) {
    float* sg = a.scores + size_t(g) * n;
    __m512 lv = _mm512_setzero_ps();
    const __m512 mv = _mm512_set1_ps(m[g]);
    for (int32_t pos = 0; pos < n; pos += 16) {
      const __mmask16 mk = tail_mask(n - pos);
      const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sg + pos), mv));
      _mm512_mask_storeu_ps(sg + pos, mk, e);
      lv = _mm512_add_ps(lv, _mm512_maskz_mov_ps(mk, e));
    }
    inv[g] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(lv));
  }
  // 3. out = Σ e·v / l, 64 dims at a time in registers, each value row loaded once for the NH heads
  for (int32_t c0 = 0; c0 < d; c0 += 64) {
    __m512 acc[NH][4];
    for (int g = 0; g < NH; ++g)
      for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_setzero_ps();
    __mmask16 mk[4];
    for (int u = 0; u < 4; ++u) mk[u] = c0 + 16 * u < d ? tail_mask(d - c0 - 16 * u) : __mmask16(0);
    for (int32_t pos = 0; pos < n; ++pos) {
      const int32_t blk = a.blocks[pos / a.block_size], slot = pos % a.block_size;
      const float* v = a.kv_base + (size_t(blk) * 2 + 1) * a.block_size * a.kv_dim + a.head_offset + size_t(slot) * d + c0;
      __m512 vv[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) vv[u] = _mm512_maskz_loadu_ps(mk[u], v + 16 * u);
#pragma GCC unroll 4
      for (int g = 0; g < NH; ++g) {
        const __m512 e = _mm512_set1_ps(a.scores[size_t(g) * n + pos]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_fmadd_ps(e, vv[u], acc[g][u]);
      }
    }
    for (int g = 0; g < NH; ++g)
      for (int u = 0; u < 4; ++u)
        _mm512_mask_storeu_ps(a.out + g * d + c0 + 16 * u, mk[u], _mm512_mul_ps(acc[g][u], inv[g]));
  }
}

}  // namespace

void attention_rows_avx512(const AttentionRows& a) {
  switch (a.n_heads) {
    case 1: attention_rows<1>(a); break;
    case 2: attention_rows<2>(a); break;
    case 3: attention_rows<3>(a); break;
    default: attention_rows<4>(a); break;
  }
}

void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, up + i)));
  }
}

#else
bool have_avx512_ops() { return false; }
void attention_rows_avx512(const AttentionRows&) {}
void silu_mul_avx512(const float*, const float*, float*, int64_t) {}
#endif

}  // namespace cera::cpu::detail
