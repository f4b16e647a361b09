#include "tokenizer/byte_unicode.h"

namespace cera::utf8 {

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t decode_at(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const size_t n = sequence_length(b0);
  if (n == 1 || pos + n > s.size()) {
    ++pos;
    return b0;
  }
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

SeqStatus check_sequence(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  len = 1;
  if (b0 < 0x80) return SeqStatus::Valid;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return SeqStatus::Invalid;
  }
  for (size_t i = 1; i < n; ++i) {
    if (pos + i >= s.size()) return SeqStatus::Incomplete;
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      len = i;  // resynchronise at the offending byte
      return SeqStatus::Invalid;
    }
  }
  len = n;
  return SeqStatus::Valid;
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t len;
    if (check_sequence(s, pos, len) != SeqStatus::Valid) return false;
    pos += len;
  }
  return true;
}

}  // namespace cera::utf8

namespace cera::byte_level {

namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 324> from_cp{};  // every mapped code point is < 0x100 + 68

  Tables() {
    from_cp.fill(-1);
    uint32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes keep their value; the other 68 are moved past U+00FF in order.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next_extra++;
      to_cp[b] = cp;
      from_cp[cp] = static_cast<int16_t>(b);
      utf8::append(to_utf8[b], cp);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

const std::array<std::string, 256>& byte_to_utf8() { return tables().to_utf8; }

int code_point_to_byte(uint32_t cp) { return cp < tables().from_cp.size() ? tables().from_cp[cp] : -1; }

void encode(std::string_view bytes, std::string& out) {
  const auto& t = tables().to_utf8;
  for (char c : bytes) out += t[static_cast<uint8_t>(c)];
}

void decode(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8::decode_at(text, pos);
    const int b = code_point_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
}

}  // namespace cera::byte_level
