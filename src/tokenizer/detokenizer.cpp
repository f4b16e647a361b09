// StreamingDetokenizer: hold back an unfinished UTF-8 character until its last byte arrives.
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace cera {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the valid part of pending into out, replacing invalid bytes; keeps only an incomplete
// trailing sequence in pending (or, when final, replaces it too).
void drain(std::string& pending, std::string& out, bool final) {
  size_t pos = 0;
  while (pos < pending.size()) {
    size_t len;
    const auto status = utf8::check_sequence(pending, pos, len);
    if (status == utf8::SeqStatus::Incomplete && !final) break;
    if (status == utf8::SeqStatus::Valid) {
      out.append(pending, pos, len);
    } else {
      out += kReplacement;
      if (status == utf8::SeqStatus::Incomplete) len = pending.size() - pos;
    }
    pos += len;
  }
  pending.erase(0, pos);
}

}  // namespace

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tokenizer_.token_to_piece(id, render_special_);
  if (at_start_ && !pending_.empty()) {
    at_start_ = false;  // the same single leading space decode() drops
    if (tokenizer_.strips_leading_space() && pending_[0] == ' ') pending_.erase(0, 1);
  }
  std::string out;
  drain(pending_, out, false);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  drain(pending_, out, true);
  return out;
}

}  // namespace cera
