// Shared by the CUDA backend tests: skip without a device, and host <-> backend copies that work
// for both the CPU backend (host memory) and the CUDA backend (device memory).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/quant_kernels.h"
#include "common/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"

namespace cera::test {

// GTEST_SKIP()s the calling test (with the reason) when no CUDA device can be used.
#define CERA_REQUIRE_CUDA()                                                               \
  do {                                                                                    \
    const std::string cera_why = ::cera::cuda_unavailable_reason();                       \
    if (!cera_why.empty()) GTEST_SKIP() << "no CUDA device: " << cera_why;                \
  } while (0)

// Asserts that a CUDA runtime call succeeded, naming it.
#define CERA_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// Device memory owned by a test (null when the allocation failed).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// Sets (value non-null) or unsets an environment variable for the object's lifetime, then restores
// what was there: the CUDA backend reads its A/B switches (CERA_CUDA_*) from the environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A random weight matrix in `type`, in the GPU layout (cuda::to_device_layout: Q4_0 and Q4_K
// repacked), rows row_bytes apart (row_bytes may exceed the data: padding filled with junk the
// kernels must not read as weights), its rows as GGML stores them (references read those, not the
// GPU layout) and its reference f32 values from the scalar dequantizer. Row r is N(0, 1) times
// 2^e, e uniform in [-spread, spread], plus (with offset_rows) half that magnitude on every third
// row: scales, mins and f16 ranges vary.
struct RandomWeights {
  int64_t n_rows, k;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> stored;  // n_rows GGML rows, stored_row_bytes each
  size_t stored_row_bytes;
  std::vector<float> ref;  // n_rows x k, from dequantize_row_ref
  const uint8_t* stored_row(int64_t r) const { return stored.data() + size_t(r) * stored_row_bytes; }
};
struct WeightStyle {
  int spread;
  bool offset_rows;
  uint8_t junk;
};
inline RandomWeights random_weights(GgmlType type, int64_t n_rows, int64_t k, size_t pad, uint32_t seed,
                                    const WeightStyle& style) {
  RandomWeights w{n_rows, k, cuda::device_row_bytes(type, k) + pad, {}, {}, ggml_row_bytes(type, k), {}};
  w.bytes.assign(w.row_bytes * size_t(n_rows), style.junk);
  w.stored.resize(w.stored_row_bytes * size_t(n_rows));
  w.ref.resize(size_t(n_rows * k));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(k));
  std::vector<uint8_t> stored(ggml_row_bytes(type, k));  // one row as stored, before to_device_layout
  for (int64_t r = 0; r < n_rows; ++r) {
    const float mag = std::ldexp(1.0f, int(rng() % unsigned(2 * style.spread + 1)) - style.spread);
    const float shift = (r % 3 == 0) ? 0.5f * mag : 0.0f;
    for (auto& v : src) v = style.offset_rows ? nd(rng) * mag + shift : nd(rng) * mag;
    quant::quantize_row_ref(type, src.data(), stored.data(), k);
    quant::dequantize_row_ref(type, stored.data(), w.ref.data() + r * k, k);
    cuda::to_device_layout(type, stored.data(), stored.size(), 1, k, w.bytes.data() + size_t(r) * w.row_bytes,
                           w.row_bytes);
    std::copy(stored.begin(), stored.end(), w.stored.begin() + std::ptrdiff_t(size_t(r) * w.stored_row_bytes));
  }
  return w;
}

// A Q4_K or Q5_K 32-element sub-block `is` of the super-block at sb (GGML's layout): scale = d·sc and
// bias = -dmin·m (both exact in f32: an f16 times a 6-bit integer) and the level of element j (Q5_K:
// the nibble plus 16 · its bit `is` of qh[j]).
struct SubBlockQ4K {
  double scale, bias;
  int level[32];
};
inline SubBlockQ4K k_sub_block(GgmlType type, const uint8_t* sb, int is) {
  const uint8_t* s = sb + 4;
  uint32_t sc, mn;
  if (is < 4) {
    sc = s[is] & 63u, mn = s[is + 4] & 63u;
  } else {
    sc = (s[is + 4] & 0x0Fu) | (uint32_t(s[is - 4] >> 6) << 4);
    mn = (s[is + 4] >> 4) | (uint32_t(s[is] >> 6) << 4);
  }
  SubBlockQ4K r;
  r.scale = double(f16_to_f32(uint16_t(sb[0] | sb[1] << 8))) * sc;
  r.bias = -double(f16_to_f32(uint16_t(sb[2] | sb[3] << 8))) * mn;
  const bool q5 = type == GgmlType::Q5_K;
  const uint8_t* qs = sb + (q5 ? 48 : 16) + 32 * (is >> 1);
  for (int j = 0; j < 32; ++j) {
    r.level[j] = (qs[j] >> (4 * (is & 1))) & 0x0F;
    if (q5) r.level[j] += 16 * ((sb[16 + j] >> is) & 1);
  }
  return r;
}
inline SubBlockQ4K q4k_sub_block(const uint8_t* sb, int is) { return k_sub_block(GgmlType::Q4_K, sb, is); }
// Block b of a Q4_1 or Q5_1 row (GGML's layout) in the same terms: scale = d, bias = m (w_j = d·level_j
// + m; d·level exact in f32, the reference dequantizer rounds the sum once).
inline SubBlockQ4K min_block(GgmlType type, const uint8_t* row, int64_t b) {
  const bool q5 = type == GgmlType::Q5_1;
  const uint8_t* blk = row + size_t(b) * ggml_traits(type).block_bytes;
  SubBlockQ4K r;
  r.scale = double(f16_to_f32(uint16_t(blk[0] | blk[1] << 8)));
  r.bias = double(f16_to_f32(uint16_t(blk[2] | blk[3] << 8)));
  const uint8_t* qs = blk + (q5 ? 8 : 4);
  const uint32_t qh = q5 ? uint32_t(blk[4]) | uint32_t(blk[5]) << 8 | uint32_t(blk[6]) << 16 | uint32_t(blk[7]) << 24 : 0;
  for (int j = 0; j < 32; ++j) r.level[j] = ((qs[j & 15] >> (j < 16 ? 0 : 4)) & 15) + 16 * int((qh >> j) & 1);
  return r;
}

// One sequence of a test step: its tokens, past length and block table.
struct Seq {
  int32_t n_tokens, n_past;
  std::vector<int32_t> blocks;
  int32_t slot = -1;  // conv-state slot, -1: none
};

// The n block ids of a KV pool in a random order (sequences' blocks scattered and interleaved).
inline std::vector<int32_t> shuffled_blocks(int32_t n, uint32_t seed) {
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  return perm;
}

// A step of these sequences (token ids arbitrary, positions n_past.., every row an output row):
// `in` for set_step, and the vectors it points into, owned together (hence no copies).
struct Step {
  std::vector<int32_t> tokens, positions, out_rows;
  std::vector<StepSequence> sequences;
  StepInputs in;

  explicit Step(const std::vector<Seq>& seqs) {
    for (const auto& s : seqs) {
      StepSequence x;
      x.first_token = int32_t(tokens.size());
      x.n_tokens = s.n_tokens;
      x.n_past = s.n_past;
      x.conv_slot = s.slot;
      x.kv_blocks = s.blocks;
      sequences.push_back(x);
      for (int32_t t = 0; t < s.n_tokens; ++t) {
        out_rows.push_back(int32_t(tokens.size()));
        tokens.push_back(int32_t(tokens.size()) % 7);
        positions.push_back(s.n_past + t);
      }
    }
    in = {tokens, positions, sequences, out_rows};
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
  int64_t n_tokens() const { return int64_t(tokens.size()); }
};

inline bool is_cuda(Backend& b) { return b.name().rfind("cuda", 0) == 0; }

inline void write(Backend& b, const Tensor& t, const std::vector<float>& host) {
  ASSERT_EQ(host.size(), size_t(t.rows * t.cols));
  const size_t row = size_t(t.cols) * sizeof(float);
  if (is_cuda(b)) {
    ASSERT_EQ(cudaMemcpy2D(t.data, t.row_bytes, host.data(), row, row, size_t(t.rows), cudaMemcpyHostToDevice),
              cudaSuccess);
    // The copy ran on the legacy stream, which the backend's non-blocking stream does not wait for,
    // and from pageable memory it may return before its DMA lands: finish it before any kernel runs.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    for (int64_t r = 0; r < t.rows; ++r) std::memcpy(t.row(r), host.data() + r * t.cols, row);
  }
}

inline std::vector<float> read(Backend& b, const Tensor& t) {
  std::vector<float> out(size_t(t.rows * t.cols));
  b.read(t, out.data());
  return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ‖a − b‖ / ‖b‖; NaN anywhere gives infinity (so a NaN can never pass a bound).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Int8 activations of the Q4_0/Q8_0/Q4_K matvecs on or off for a scope (cuda::matvec_int8_enable),
// then as before: tests of the f32 arithmetic against exact weights turn it off.
struct MatvecInt8Scope {
  bool was = cuda::matvec_int8_enabled();
  explicit MatvecInt8Scope(bool on) { cuda::matvec_int8_enable(on); }
  ~MatvecInt8Scope() { cuda::matvec_int8_enable(was); }
  MatvecInt8Scope(const MatvecInt8Scope&) = delete;
  MatvecInt8Scope& operator=(const MatvecInt8Scope&) = delete;
};

}  // namespace cera::test
