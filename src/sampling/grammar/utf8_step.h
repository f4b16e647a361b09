// Byte-at-a-time strict UTF-8 decoding for grammar matching. Tokens are byte strings that may end
// (or start) in the middle of a character, so the matcher carries this state between tokens.
// Strict (Unicode Table 3-7): no overlongs, no surrogates, nothing above U+10FFFF — otherwise an
// accepted prefix could have no valid completion and generation would get stuck.
#pragma once

#include <algorithm>
#include <cstdint>

namespace cera {

struct Utf8Step {
  uint32_t cp = 0;       // bits so far
  uint8_t need = 0;      // continuation bytes still to come; 0: at a character boundary
  uint8_t next_lo = 0x80, next_hi = 0xBF;  // allowed range of the next continuation byte

  // Feeds one byte. Returns false for an invalid byte (state is then unspecified). After true,
  // need == 0 means `cp` is a complete code point.
  bool push(uint8_t b) {
    if (need == 0) {
      next_lo = 0x80;
      next_hi = 0xBF;
      if (b < 0x80) { cp = b; return true; }
      if (b >= 0xC2 && b <= 0xDF) { cp = b & 0x1F; need = 1; return true; }
      if (b >= 0xE0 && b <= 0xEF) {
        cp = b & 0x0F;
        need = 2;
        if (b == 0xE0) next_lo = 0xA0;
        if (b == 0xED) next_hi = 0x9F;
        return true;
      }
      if (b >= 0xF0 && b <= 0xF4) {
        cp = b & 0x07;
        need = 3;
        if (b == 0xF0) next_lo = 0x90;
        if (b == 0xF4) next_hi = 0x8F;
        return true;
      }
      return false;
    }
    if (b < next_lo || b > next_hi) return false;
    cp = (cp << 6) | (b & 0x3F);
    --need;
    next_lo = 0x80;
    next_hi = 0xBF;
    return true;
  }

  // While need > 0: every code point this prefix can still become, as [lo, hi]. Exact, because
  // the byte ranges above already exclude overlongs, surrogates and > U+10FFFF... except right
  // after the lead byte, where the restricted next byte is folded in here.
  uint32_t range_lo() const {
    const uint32_t lo = cp << (6 * need);
    const uint32_t next = (uint32_t(next_lo) & 0x3F) << (6 * (need - 1));
    return lo | next;
  }
  uint32_t range_hi() const {
    const uint32_t hi = (cp << (6 * need)) | ((1u << (6 * (need - 1))) - 1);
    return hi | ((uint32_t(next_hi) & 0x3F) << (6 * (need - 1)));
  }
};

}  // namespace cera
