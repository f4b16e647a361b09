// The GPU layout of weight rows (quant_kernels.h): float rows as stored; the 32-element formats (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0) in super-blocks of 8 blocks with each field in a plane of its own; Q4_K's
// and Q5_K's super-blocks reordered (scales into nibble planes, levels in Q4_0's block order); Q3_K's
// scales into nibble planes (110 -> 112 bytes); Q6_K's levels in lane order (210 -> 216 bytes); Q2_K's
// super-blocks padded (84 -> 88).
#include <algorithm>
#include <bit>
#include <cstring>
#include <span>

#include "backend/cuda/quant_kernels.h"

namespace cera::cuda {
namespace {

constexpr int64_t kSuperElems = 256;  // 8 blocks of 32

// Little-endian words of a row's bytes: the repacks below work a word at a time (uploads of the
// 1B shapes' weights spent seconds here byte by byte).
static_assert(std::endian::native == std::endian::little, "the GPU layout's words are little-endian, as the host's");
uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// A GGML block of 32 elements as its fields' sizes in stored order: the f16 scale d, Q4_1's and
// Q5_1's f16 minimum m, Q5_0's and Q5_1's 32 fifth bits qh, then the levels (16 nibble bytes, or 32
// int8). Empty for the other types.
std::span<const size_t> block_fields(GgmlType type) {
  static constexpr size_t q4_0[] = {2, 16}, q4_1[] = {2, 2, 16}, q5_0[] = {2, 4, 16}, q5_1[] = {2, 2, 4, 16},
                          q8_0[] = {2, 32};
  switch (type) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::Q8_0: return q8_0;
    default: return {};
  }
}
bool has_planes(GgmlType type) { return !block_fields(type).empty(); }

// 8 blocks of a row into one super-block, field by field: field f of block s at
// 8·(the sizes of the fields before f) + size(f)·s, so each field's 8 copies form a plane and every
// plane starts 16-byte aligned (Q4_0 144 bytes: d at 0, levels at 16; Q8_0 272; Q4_1 160: m at 16,
// levels at 32; Q5_0 176: qh at 16, levels at 48; Q5_1 192: m at 16, qh at 32, levels at 64).
void repack_into_planes(GgmlType type, const uint8_t* src, int64_t k, uint8_t* dst) {
  const size_t block = ggml_traits(type).block_bytes, super = 8 * block;
  // A partial last super-block: zero blocks.
  std::memset(dst, 0, size_t((k + kSuperElems - 1) / kSuperElems) * super);
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* in = src + size_t(b) * block;
    uint8_t* sb = dst + size_t(b / 8) * super;
    const size_t s = size_t(b % 8);
    size_t plane = 0, at = 0;  // where this field's plane starts in the super-block / the block
    for (const size_t size : block_fields(type)) {
      std::memcpy(sb + plane + size * s, in + at, size);
      plane += 8 * size, at += size;
    }
  }
}

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

// A sub-block's 32 levels (low 4 bits), bits sh..sh+3 of the 32 bytes at g (element j in byte j), as
// the GPU holds them in 16 bytes: byte j is element j (low nibble) and element 16 + j (high) — Q4_0's
// order, which the Q4_K, Q5_K and Q6_K layouts share.
void pack_nibbles(const uint8_t* g, int sh, uint8_t* out) {
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0Full;
  for (int j = 0; j < 16; j += 8) {
    const uint64_t v = ((load_u64(g + j) >> sh) & kLow) | ((load_u64(g + 16 + j) >> sh) & kLow) << 4;
    std::memcpy(out + j, &v, 8);
  }
}

// Sub-block s = 2g + u's low level bits are nibble u of GGML's bytes q[32g..32g+31].
void repack_k_nibbles(const uint8_t* q, uint8_t* out) {
  for (int s = 0; s < 8; ++s) pack_nibbles(q + 32 * (s / 2), 4 * (s % 2), out + 16 * s);
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
      for (int j = 0; j < 32; j += 8)  // bit s of 8 bytes: the multiply moves byte i's bit to bit 56 + i
        bits |= uint32_t((((load_u64(in + 16 + j) >> s) & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56) << j;
      std::memcpy(out + 144 + 4 * s, &bits, 4);
    }
  }
}

// Q2_K (84 bytes: scales[16], qs[64], f16 d, f16 dmin) keeps GGML's bytes, padded with zeros to 88
// so that every super-block of an aligned row is 8-byte aligned.
constexpr size_t kQ2_KBytes = 84, kQ2_KDeviceBytes = 88;
void pad_super_blocks(const uint8_t* src, int64_t k, size_t bytes, size_t device_bytes, uint8_t* dst) {
  for (int64_t b = 0; b < k / kSuperElems; ++b) {
    std::memcpy(dst + size_t(b) * device_bytes, src + size_t(b) * bytes, bytes);
    std::memset(dst + size_t(b) * device_bytes + bytes, 0, device_bytes - bytes);
  }
}

// Q6_K (GGML, 210 bytes: ql[128], qh[64], int8 scales[16], f16 d; element e = 128n + 32qr + l has the
// low 4 bits of its 6-bit level in nibble qr >> 1 of ql[64n + 32(qr & 1) + l] and the top 2 at bits
// 2qr.. of qh[32n + l]) becomes 216, in the order a lane reads (quant_kernels.h): for sub-block s
// and half h, 8 nibble bytes at 16s + 8h (byte j: element 8h + j low, 16 + 8h + j high), then one
// word of top bits at 128 + 8s + 4h (bits 2w.. of byte j: element 8h + j for w = 0, 8h + 4 + j for
// 1, 16 + 8h + j for 2, 16 + 8h + 4 + j for 3), then the scales and d as stored, 6 zero bytes.
constexpr size_t kQ6_KBytes = 210, kQ6_KDeviceBytes = 216;
// Sub-block s = 4n + qr's 32 nibbles are nibble qr >> 1 of the ql bytes at 64n + 32(qr & 1), its top
// bit pairs bits 2qr.. of the qh bytes at 32n (a 128,256-row head took 0.8 s element by element).
void repack_q6_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / kSuperElems; ++b) {
    const uint8_t* in = src + size_t(b) * kQ6_KBytes;
    uint8_t* out = dst + size_t(b) * kQ6_KDeviceBytes;
    for (int s = 0; s < 8; ++s) {
      const int n = s / 4, qr = s % 4;
      pack_nibbles(in + 64 * n + 32 * (qr & 1), 4 * (qr >> 1), out + 16 * s);  // halves h at 16s + 8h
      const uint8_t* qh = in + 128 + 32 * n;
      for (int h = 0; h < 2; ++h) {
        uint32_t top = 0;
        const int first[4] = {8 * h, 8 * h + 4, 16 + 8 * h, 16 + 8 * h + 4};  // word w's 4 elements
        for (int w = 0; w < 4; ++w) top |= ((load_u32(qh + first[w]) >> (2 * qr)) & 0x03030303u) << (2 * w);
        std::memcpy(out + 128 + 8 * s + 4 * h, &top, 4);
      }
    }
    std::memcpy(out + 192, in + 192, 18);  // scales, d
    std::memset(out + 210, 0, kQ6_KDeviceBytes - 210);
  }
}

// Q3_K (110 bytes: hmask[32], qs[64], 12 bytes packing 16 six-bit scales, f16 d) becomes 112: hmask
// and qs as stored, then the scales as three little-endian words — the low 4 bits of scale i at bits
// 4i.. of the first (i < 8) or 4(i − 8).. of the second, its top 2 bits at bits 2i.. of the third —
// then d and two zero bytes.
constexpr size_t kQ3_KBytes = 110, kQ3_KDeviceBytes = 112;
void repack_q3_k_row(const uint8_t* src, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / kSuperElems; ++b) {
    const uint8_t* in = src + size_t(b) * kQ3_KBytes;
    uint8_t* out = dst + size_t(b) * kQ3_KDeviceBytes;
    std::memcpy(out, in, 96);  // hmask, qs
    const uint8_t* sc = in + 96;
    uint32_t lo[2] = {0, 0}, hi = 0;
    for (int i = 0; i < 16; ++i) {  // GGML's packing (MODELS.md §2)
      const uint32_t low4 = i < 8 ? sc[i] & 15u : uint32_t(sc[i - 8] >> 4);
      const uint32_t high2 = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3u;
      lo[i / 8] |= low4 << (4 * (i % 8));
      hi |= high2 << (2 * i);
    }
    const uint32_t words[3] = {lo[0], lo[1], hi};
    for (int w = 0; w < 3; ++w)
      for (int j = 0; j < 4; ++j) out[96 + 4 * w + j] = uint8_t(words[w] >> (8 * j));
    std::memcpy(out + 108, in + 108, 2);  // d
    out[110] = out[111] = 0;
  }
}

}  // namespace

bool keeps_stored_layout(GgmlType type) { return ggml_traits(type).block_elems == 1; }  // F32, F16, BF16

size_t device_row_bytes(GgmlType type, int64_t k) {
  // K-quant rows are whole super-blocks (k a multiple of 256)
  if (type == GgmlType::Q2_K) return size_t(k / kSuperElems) * kQ2_KDeviceBytes;
  if (type == GgmlType::Q3_K) return size_t(k / kSuperElems) * kQ3_KDeviceBytes;
  if (type == GgmlType::Q6_K) return size_t(k / kSuperElems) * kQ6_KDeviceBytes;
  if (has_planes(type)) return size_t((k + kSuperElems - 1) / kSuperElems) * 8 * ggml_traits(type).block_bytes;
  return ggml_row_bytes(type, k);  // float rows, Q4_K, Q5_K
}

void to_device_layout(GgmlType type, const uint8_t* src, size_t src_row_bytes, int64_t n_rows, int64_t k,
                      uint8_t* dst, size_t dst_row_bytes) {
  const size_t row = device_row_bytes(type, k);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* s = src + size_t(r) * src_row_bytes;
    uint8_t* d = dst + size_t(r) * dst_row_bytes;
    if (keeps_stored_layout(type)) std::memcpy(d, s, row);
    else if (type == GgmlType::Q2_K) pad_super_blocks(s, k, kQ2_KBytes, kQ2_KDeviceBytes, d);
    else if (type == GgmlType::Q3_K) repack_q3_k_row(s, k, d);
    else if (type == GgmlType::Q6_K) repack_q6_k_row(s, k, d);
    else if (type == GgmlType::Q4_K) repack_q4_k_row(s, k, d);
    else if (type == GgmlType::Q5_K) repack_q5_k_row(s, k, d);
    else repack_into_planes(type, s, k, d);
  }
}

}  // namespace cera::cuda
