// The GPU layout of weight rows (quant_kernels.h): GGML's, except Q4_0 and Q8_0 in super-blocks of 8 blocks,
// Q4_K's and Q5_K's super-blocks reordered (scales into nibble planes, levels in Q4_0's block order)
// and Q6_K's super-blocks padded from 210 to 216 bytes.
#include <algorithm>
#include <cstring>

#include "backend/cuda/quant_kernels.h"

namespace cera::cuda {
namespace {

constexpr int64_t kSuperElems = 256;  // 8 blocks of 32

// Q4_0 and Q8_0: GGML blocks of an f16 scale and `level_bytes` of levels (16 nibble bytes, 32 int8)
// into super-blocks of 8: block b's scale at S·(b/8) + 2·(b%8), its levels (unchanged) at
// S·(b/8) + 16 + level_bytes·(b%8), S = 16 + 8·level_bytes (144, 272).
size_t super_block_bytes(size_t level_bytes) { return 16 + 8 * level_bytes; }
void repack_into_super_blocks(const uint8_t* src, int64_t k, size_t level_bytes, uint8_t* dst) {
  const size_t super = super_block_bytes(level_bytes);
  // A partial last super-block: zero blocks.
  std::memset(dst, 0, size_t((k + kSuperElems - 1) / kSuperElems) * super);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = src + size_t(b) * (2 + level_bytes);
    uint8_t* sb = dst + size_t(b / 8) * super;
    const size_t s = size_t(b % 8);
    std::memcpy(sb + 2 * s, blk, 2);
    std::memcpy(sb + 16 + level_bytes * s, blk + 2, level_bytes);
  }
}
size_t level_bytes(GgmlType type) { return type == GgmlType::Q4_0 ? 16 : 32; }  // Q4_0 or Q8_0

constexpr size_t kQ4_KBytes = 144;  // GGML and GPU alike: f16 d, f16 dmin, 12 bytes of scales, 128 of levels

// GGML's 6-bit scale and minimum of sub-block s from the 12 packed bytes q (get_scale_min_k4; Q4_K
// and Q5_K pack them alike).
void q4_k_scale_min(const uint8_t* q, int s, uint32_t& sc, uint32_t& mn) {
  if (s < 4) {
    sc = q[s] & 63u;
    mn = q[s + 4] & 63u;
  } else {
    sc = (q[s + 4] & 0x0Fu) | uint32_t(q[s - 4] >> 6) << 4;
    mn = uint32_t(q[s + 4] >> 4) | uint32_t(q[s] >> 6) << 4;
  }
}

// The K-quant header on the GPU (Q4_K, Q5_K): d and dmin, then the 6-bit scales and minimums of
// the 8 sub-blocks as three words of nibble planes (quant_kernels.h), from GGML's 12 packed bytes.
void repack_k_header(const uint8_t* in, uint8_t* out) {
  std::memcpy(out, in, 4);  // d, dmin
  uint32_t sc_lo = 0, mn_lo = 0, hi = 0;
  for (int s = 0; s < 8; ++s) {
    uint32_t sc, mn;
    q4_k_scale_min(in + 4, s, sc, mn);
    sc_lo |= (sc & 15u) << (4 * s);
    mn_lo |= (mn & 15u) << (4 * s);
    hi |= ((sc >> 4) | (mn >> 4) << 2) << (4 * s);
  }
  for (int i = 0; i < 4; ++i) {  // little-endian words
    out[4 + i] = uint8_t(sc_lo >> (8 * i));
    out[8 + i] = uint8_t(mn_lo >> (8 * i));
    out[12 + i] = uint8_t(hi >> (8 * i));
  }
}

// Sub-block s = 2g + u's low level bits are nibble u of GGML's bytes q[32g..32g+31]; on the GPU byte j
// of its 16 holds its element j (low nibble) and element 16 + j (high).
void repack_k_nibbles(const uint8_t* q, uint8_t* out) {
  for (int s = 0; s < 8; ++s) {
    const uint8_t* g = q + 32 * (s / 2);
    const int sh = 4 * (s % 2);
    for (int j = 0; j < 16; ++j) out[16 * s + j] = uint8_t(((g[j] >> sh) & 15) | ((g[16 + j] >> sh) & 15) << 4);
  }
}

void repack_q4_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* in = src + size_t(b) * kQ4_KBytes;
    uint8_t* out = dst + size_t(b) * kQ4_KBytes;
    repack_k_header(in, out);
    repack_k_nibbles(in + 16, out + 16);
  }
}

// Q5_K (GGML: d, dmin, 12 bytes of scales, qh[32], qs[128]; element j of sub-block s has its fifth
// bit at bit s of qh[j]): the header and nibbles as Q4_K's, then per sub-block one little-endian
// word whose bit j is element j's fifth bit.
constexpr size_t kQ5_KBytes = 176;
void repack_q5_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* in = src + size_t(b) * kQ5_KBytes;
    uint8_t* out = dst + size_t(b) * kQ5_KBytes;
    repack_k_header(in, out);
    repack_k_nibbles(in + 48, out + 16);
    for (int s = 0; s < 8; ++s) {
      uint32_t bits = 0;
      for (int j = 0; j < 32; ++j) bits |= uint32_t((in[16 + j] >> s) & 1) << j;
      for (int i = 0; i < 4; ++i) out[144 + 4 * s + i] = uint8_t(bits >> (8 * i));
    }
  }
}

constexpr size_t kQ6_KBytes = 210, kQ6_KDeviceBytes = 216;  // GGML's super-block; on the GPU

void pad_q6_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / kSuperElems; ++b) {
    std::memcpy(dst + size_t(b) * kQ6_KDeviceBytes, src + size_t(b) * kQ6_KBytes, kQ6_KBytes);
    std::memset(dst + size_t(b) * kQ6_KDeviceBytes + kQ6_KBytes, 0, kQ6_KDeviceBytes - kQ6_KBytes);
  }
}

}  // namespace

bool keeps_stored_layout(GgmlType type) {
  return type != GgmlType::Q4_0 && type != GgmlType::Q8_0 && type != GgmlType::Q4_K && type != GgmlType::Q5_K &&
         type != GgmlType::Q6_K;
}

size_t device_row_bytes(GgmlType type, int64_t k) {
  if (type == GgmlType::Q6_K) return size_t(k / 256) * kQ6_KDeviceBytes;  // k is a multiple of 256
  if (keeps_stored_layout(type) || type == GgmlType::Q4_K || type == GgmlType::Q5_K) return ggml_row_bytes(type, k);
  return size_t((k + kSuperElems - 1) / kSuperElems) * super_block_bytes(level_bytes(type));  // Q4_0, Q8_0
}

void to_device_layout(GgmlType type, const uint8_t* src, size_t src_row_bytes, int64_t n_rows, int64_t k,
                      uint8_t* dst, size_t dst_row_bytes) {
  const size_t row = device_row_bytes(type, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* s = src + size_t(r) * src_row_bytes;
    uint8_t* d = dst + size_t(r) * dst_row_bytes;
    if (keeps_stored_layout(type)) std::memcpy(d, s, row);
    else if (type == GgmlType::Q6_K) pad_q6_k_row(s, k, d);
    else if (type == GgmlType::Q4_K) repack_q4_k_row(s, k, d);
    else if (type == GgmlType::Q5_K) repack_q5_k_row(s, k, d);
    else repack_into_super_blocks(s, k, level_bytes(type), d);  // Q4_0, Q8_0
  }
}

}  // namespace cera::cuda
