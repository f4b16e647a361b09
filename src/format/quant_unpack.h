// Scale unpacking shared by the reference dequantizers and the scalar kernels. Generic code only:
// ISA-specific files (*_avx2.cpp, *_avx512.cpp) must not include this (inline functions there could
// be emitted as weak symbols compiled for that ISA).
#pragma once

#include <cstdint>

namespace cera::quant {

// Q4_K / Q5_K: the 8 six-bit scales and mins packed into 12 bytes (MODELS.md §2.2).
inline void unpack_scales_k4(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    mn[j] = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q3_K: 16 signed six-bit scales (MODELS.md §2.4).
inline void unpack_scales_q3k(const uint8_t* b, int8_t out[16]) {
  for (int s = 0; s < 16; ++s) {
    const int low4 = s < 8 ? (b[s] & 0xF) : (b[s - 8] >> 4);
    const int high2 = (b[8 + s % 4] >> (2 * (s / 4))) & 3;
    out[s] = int8_t((low4 | (high2 << 4)) - 32);
  }
}

}  // namespace cera::quant
