// Text <-> token ids for the models cera runs (MODELS.md §6): byte-level BPE (tokenizer.ggml.model
// "gpt2": Llama 3, LFM2, Qwen2/3) and SentencePiece ("llama": Llama 2, Mistral; see spm.h).
//
// A Tokenizer is immutable after construction; every const method is safe to call from several
// threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace cera {

class Tokenizer {
 public:
  // Throws cera::Error(Unsupported) naming an unknown model or pre-tokenizer, Error(BadFormat) for
  // an inconsistent spec (e.g. token_types of the wrong length, special ids out of range).
  explicit Tokenizer(VocabSpec spec);

  // add_special: BOS/EOS as the vocab asks (add_bos / add_eos). parse_special: recognise CONTROL
  // token text (e.g. "<|im_start|>") in the input — only for trusted text such as a rendered chat
  // template; USER_DEFINED tokens are always recognised. HF tokenizers behave like
  // parse_special = true. Throws Error(InvalidArgument) if text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The raw bytes a token stands for (may be part of a UTF-8 character). CONTROL / UNKNOWN /
  // UNUSED tokens give their text only when render_special, else nothing. Throws
  // Error(OutOfRange) for an id outside [0, n_vocab).
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  // Concatenated pieces (raw bytes: a truncated sequence may end mid-character). clean_spaces
  // applies HF's clean_up_tokenization_spaces (" ." -> ".", " 's" -> "'s", ...). SentencePiece
  // vocabs with add_space_prefix drop one leading space (the prefix encode added; HF Strip).
  std::string decode(std::span<const int32_t> ids, bool render_special = false,
                     bool clean_spaces = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(spec_.tokens.size()); }
  int32_t bos() const { return spec_.bos; }
  int32_t eos() const { return spec_.eos; }
  int32_t eot() const { return spec_.eot; }
  int32_t pad() const { return spec_.pad; }
  bool add_bos() const { return spec_.add_bos; }
  bool add_eos() const { return spec_.add_eos; }
  bool clean_spaces() const { return spec_.clean_spaces; }  // what the HF config asks decode for
  bool strips_leading_space() const { return spec_.model == "llama" && spec_.add_space_prefix; }
  const VocabSpec& spec() const { return spec_; }

  bool is_eog(int32_t id) const;  // end of generation: eos, eot, eom and known end-of-turn texts
  bool is_control(int32_t id) const { return type(id) == TokenType::Control; }
  TokenType type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // as stored in the vocab (byte-level form)
  std::optional<int32_t> find_token(std::string_view text) const;  // exact vocab text

 private:
  void check_id(int32_t id) const;
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::string& mapped,
                   std::vector<int32_t>& symbols, MergeWorkspace& ws) const;

  VocabSpec spec_;
  BpeModel bpe_;
  SpmEncoder spm_;  // model "llama" only
  RegexSplitter splitter_{{}};
  SpecialTokenMatcher specials_;
  std::vector<std::string> pieces_;   // decoded bytes per id (text for special types)
  std::vector<uint8_t> eog_;          // per id
  std::array<int32_t, 256> byte_token_{};  // id of each single byte's token (-1 if none)
};

// Turns a stream of generated ids into text without ever emitting half a UTF-8 character: bytes
// of an unfinished character are held back until it completes. Invalid bytes become U+FFFD, so
// every returned string is valid UTF-8.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  std::string push(int32_t id);  // the text that became complete with this token (maybe empty)
  std::string flush();           // whatever is held back (an unfinished character -> U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool at_start_ = true;  // nothing produced yet: the leading space decode() strips is still due
  std::string pending_;
};

// HF clean_up_tokenization_spaces.
std::string clean_up_tokenization_spaces(std::string text);

}  // namespace cera
