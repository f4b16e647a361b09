// GPT-2's reversible byte <-> code point map used by byte-level BPE (MODELS.md §6.2), and small
// UTF-8 helpers shared by the tokenizer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cera::utf8 {

// Appends the UTF-8 encoding of cp.
void append(std::string& out, uint32_t cp);

// Length of the UTF-8 sequence a lead byte announces (1 for an invalid lead byte, so callers
// always make progress).
inline size_t sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[pos] (which must be valid UTF-8) and advances pos.
uint32_t decode_at(std::string_view s, size_t& pos);

enum class SeqStatus { Valid, Incomplete, Invalid };

// Classifies the UTF-8 sequence starting at s[pos]: Valid (len = its length), Incomplete (s ends
// inside a sequence that could still become valid), or Invalid (len = bytes to skip, >= 1).
// Rejects overlong forms, surrogates and code points past U+10FFFF.
SeqStatus check_sequence(std::string_view s, size_t pos, size_t& len);

bool is_valid(std::string_view s);

}  // namespace cera::utf8

namespace cera::byte_level {

// Code point that byte b is written as in a byte-level vocab (space -> U+0120 'Ġ').
uint32_t byte_to_codepoint(uint8_t b);

// UTF-8 text of that code point, per byte (computed once).
const std::array<std::string, 256>& byte_to_utf8();

// Inverse map: the byte a code point stands for, or -1 if it is not one of the 256.
int code_point_to_byte(uint32_t cp);

// Maps raw bytes to their byte-level text (what vocab entries look like).
void encode(std::string_view bytes, std::string& out);

// Maps byte-level text back to raw bytes; a code point outside the map is copied as UTF-8.
void decode(std::string_view text, std::string& out);

}  // namespace cera::byte_level
