// The GPU layout of weight rows (quant_kernels.h): GGML's, except Q4_0 in super-blocks of 8 blocks
// and Q6_K's super-blocks padded from 210 to 216 bytes.
#include <algorithm>
#include <cstring>

#include "backend/cuda/quant_kernels.h"

namespace cera::cuda {
namespace {

constexpr int64_t kQ4_0SuperElems = 256;
constexpr size_t kQ4_0SuperBytes = 144;  // 8 f16 scales, then 8 × 16 bytes of nibbles
constexpr size_t kQ4_0BlockBytes = 18;   // GGML: f16 scale, 16 bytes of nibbles

// Block b's scale at 144·(b/8) + 2·(b%8), its nibbles (unchanged) at 144·(b/8) + 16 + 16·(b%8).
void repack_q4_0_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  std::memset(dst, 0, device_row_bytes(GgmlType::Q4_0, k));  // a partial last super-block: zero blocks
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = src + size_t(b) * kQ4_0BlockBytes;
    uint8_t* sb = dst + size_t(b / 8) * kQ4_0SuperBytes;
    const size_t s = size_t(b % 8);
    std::memcpy(sb + 2 * s, blk, 2);
    std::memcpy(sb + 16 + 16 * s, blk + 2, 16);
  }
}

constexpr size_t kQ6_KBytes = 210, kQ6_KDeviceBytes = 216;  // GGML's super-block; on the GPU

void pad_q6_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / 256; ++b) {
    std::memcpy(dst + size_t(b) * kQ6_KDeviceBytes, src + size_t(b) * kQ6_KBytes, kQ6_KBytes);
    std::memset(dst + size_t(b) * kQ6_KDeviceBytes + kQ6_KBytes, 0, kQ6_KDeviceBytes - kQ6_KBytes);
  }
}

}  // namespace

bool keeps_stored_layout(GgmlType type) { return type != GgmlType::Q4_0 && type != GgmlType::Q6_K; }

size_t device_row_bytes(GgmlType type, int64_t k) {
  if (type == GgmlType::Q6_K) return size_t(k / 256) * kQ6_KDeviceBytes;  // k is a multiple of 256
  if (keeps_stored_layout(type)) return ggml_row_bytes(type, k);
  return size_t((k + kQ4_0SuperElems - 1) / kQ4_0SuperElems) * kQ4_0SuperBytes;
}

void to_device_layout(GgmlType type, const uint8_t* src, size_t src_row_bytes, int64_t n_rows, int64_t k,
                      uint8_t* dst, size_t dst_row_bytes) {
  const size_t row = device_row_bytes(type, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* s = src + size_t(r) * src_row_bytes;
    uint8_t* d = dst + size_t(r) * dst_row_bytes;
    if (keeps_stored_layout(type)) std::memcpy(d, s, row);
    else if (type == GgmlType::Q6_K) pad_q6_k_row(s, k, d);
    else repack_q4_0_row(s, k, d);
  }
}

}  // namespace cera::cuda
