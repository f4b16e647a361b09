#include "tokenizer/tokenizer.h"

#include "cera/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/normalizer.h"

namespace cera {

namespace {

// Texts llama.cpp treats as end-of-generation whatever the eos id says (MODELS.md §6.1).
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "<end_of_turn>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|return|>", "<|call|>", "<end_of_utterance>",
};
// Texts that mark the end-of-turn token when the file does not say which it is.
constexpr const char* kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"};


}  // namespace

Tokenizer::Tokenizer(VocabSpec spec) : spec_(std::move(spec)) {
  if (spec_.model != "gpt2" && spec_.model != "llama") {
    throw Error(ErrorCode::Unsupported, "unsupported tokenizer model '" + spec_.model +
                                            "' (cera supports 'gpt2' byte-level BPE and 'llama' SentencePiece)");
  }
  const bool spm = spec_.model == "llama";
  if (spec_.tokens.empty()) throw Error(ErrorCode::BadFormat, "tokenizer vocabulary is empty");
  if (spec_.token_types.empty()) spec_.token_types.assign(spec_.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  if (spec_.token_types.size() != spec_.tokens.size()) {
    throw Error(ErrorCode::BadFormat, "tokenizer has " + std::to_string(spec_.tokens.size()) + " tokens but " +
                                          std::to_string(spec_.token_types.size()) + " token types");
  }
  if (!spm) splitter_ = RegexSplitter(spec_.pre_regexes.empty() ? pre_tokenizer_regexes(spec_.pre) : spec_.pre_regexes);
  // A special id outside the vocab would index past the tables; treat it as unset, as llama.cpp does.
  for (int32_t* id : {&spec_.bos, &spec_.eos, &spec_.eot, &spec_.eom, &spec_.unk, &spec_.pad})
    if (*id >= static_cast<int32_t>(spec_.tokens.size())) *id = -1;
  if (spec_.add_bos && spec_.bos < 0) spec_.add_bos = false;
  if (spec_.add_eos && spec_.eos < 0) spec_.add_eos = false;

  bpe_ = BpeModel(spec_.tokens, spec_.merges);
  specials_ = SpecialTokenMatcher(spec_);
  if (spm) spm_ = SpmEncoder(spec_, bpe_);

  const auto& byte_text = byte_level::byte_to_utf8();
  for (int b = 0; b < 256; ++b) byte_token_[b] = bpe_.find(byte_text[b]);

  const size_t n = spec_.tokens.size();
  pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = spec_.tokens[id];
    switch (static_cast<TokenType>(spec_.token_types[id])) {
      case TokenType::Normal:
      case TokenType::Undefined:
        if (spm) {
          // SentencePiece writes spaces as U+2581.
          for (size_t pos = 0, hit; pos <= text.size(); pos = hit + 3) {
            hit = text.find("\xE2\x96\x81", pos);
            pieces_[id].append(text, pos, hit == std::string::npos ? std::string::npos : hit - pos);
            if (hit == std::string::npos) break;
            pieces_[id] += ' ';
          }
        } else {
          byte_level::decode(text, pieces_[id]);
        }
        break;
      case TokenType::Byte:  // "<0xAB>"
        if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
          pieces_[id].push_back(static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
        } else {
          pieces_[id] = text;
        }
        break;
      default:  // USER_DEFINED is raw text; CONTROL etc. are raw text shown only on request
        pieces_[id] = text;
        break;
    }
  }

  if (spec_.eot < 0) {
    for (const char* t : kEotTexts) {
      if (auto id = find_token(t); id && static_cast<TokenType>(spec_.token_types[*id]) == TokenType::Control) {
        spec_.eot = *id;
        break;
      }
    }
  }
  eog_.assign(n, 0);
  for (int32_t id : {spec_.eos, spec_.eot, spec_.eom})
    if (id >= 0) eog_[id] = 1;
  for (const char* t : kEogTexts)
    if (auto id = find_token(t)) eog_[*id] = 1;
}

TokenType Tokenizer::type(int32_t id) const {
  check_id(id);
  return static_cast<TokenType>(spec_.token_types[id]);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return spec_.tokens[id];
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id]; }

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = bpe_.find(text);
  if (id < 0) return std::nullopt;
  return id;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    throw Error(ErrorCode::OutOfRange,
                "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(n_vocab()) + ")");
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  if (!utf8::is_valid(text)) throw Error(ErrorCode::InvalidArgument, "text to tokenize is not valid UTF-8");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && spec_.add_bos) out.push_back(spec_.bos);

  std::vector<TextFragment> fragments;
  specials_.partition(text, parse_special, fragments);
  for (const TextFragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else if (spec_.normalize_nfc) {
      encode_fragment(nfc(f.text), out);
    } else {
      encode_fragment(f.text, out);
    }
  }
  if (add_special && spec_.add_eos) out.push_back(spec_.eos);
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  if (spec_.model == "llama") return spm_.encode(text, bpe_, spec_.tokens, out);
  std::vector<std::string_view> words;
  splitter_.split(text, words);
  std::string mapped;
  std::vector<int32_t> symbols;
  MergeWorkspace ws;
  for (std::string_view word : words) encode_word(word, out, mapped, symbols, ws);
}

void Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out, std::string& mapped,
                           std::vector<int32_t>& symbols, MergeWorkspace& ws) const {
  if (spec_.ignore_merges) {
    mapped.clear();
    byte_level::encode(word, mapped);
    if (const int32_t id = bpe_.find(mapped); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // One initial symbol per byte: each byte is exactly one byte-level character.
  symbols.clear();
  for (char c : word) symbols.push_back(byte_token_[static_cast<uint8_t>(c)]);
  ws.merge(symbols, [this](int32_t l, int32_t r) { return bpe_.find_merge(l, r); });
  for (int32_t id : symbols) {
    if (id >= 0) {
      out.push_back(id);
    } else if (spec_.unk >= 0) {
      out.push_back(spec_.unk);  // a byte the vocab cannot spell (never happens for a full byte-level vocab)
    }
  }
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  check_id(id);
  switch (static_cast<TokenType>(spec_.token_types[id])) {
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::Unused:
      return render_special ? pieces_[id] : std::string();
    default:
      return pieces_[id];
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special, bool clean_spaces) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  if (strips_leading_space() && out.starts_with(' ')) out.erase(0, 1);
  return clean_spaces ? clean_up_tokenization_spaces(std::move(out)) : out;
}

std::string clean_up_tokenization_spaces(std::string text) {
  // The replacements of transformers' clean_up_tokenization, in its order.
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) {
    std::string result;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      result.append(text, pos, hit - pos);
      result += to;
    }
    if (pos == 0) continue;
    result.append(text, pos);
    text.swap(result);
  }
  return text;
}

}  // namespace cera
