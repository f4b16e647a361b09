// Unicode normalization some HF tokenizers apply to text before pre-tokenization (Qwen: NFC).
#pragma once

#include <string>
#include <string_view>

namespace cera {

// NFC of valid UTF-8 text (ASCII passes through without a copy into utf8proc).
std::string nfc(std::string_view text);

}  // namespace cera
