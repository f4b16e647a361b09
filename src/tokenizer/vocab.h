// VocabSpec: everything a Tokenizer needs, loaded from a GGUF file or a Hugging Face tokenizer.json.
// It is plain data so either loader (or a test) can build one; the Tokenizer validates it.
// See ../shared/docs/MODELS.md §6.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cera {

namespace gguf {
class File;
}

// Values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// HF added-token options that change how the special-token partition cuts the text.
struct AddedTokenFlags {
  bool lstrip = false;  // swallow whitespace to the left of the token
  bool rstrip = false;  // swallow whitespace to the right of the token
};

struct VocabSpec {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre name; ignored when pre_regexes is non-empty
  std::vector<std::string> pre_regexes;  // explicit Split(Isolated) regexes, e.g. from tokenizer.json

  std::vector<std::string> tokens;      // token text by id (byte-level-encoded for gpt2)
  std::vector<int32_t> token_types;     // TokenType per id; empty = all Normal
  // rank = index. For "llama" (HF byte_fallback BPE) merges, when present, rank pairs instead of scores.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<float> scores;            // SentencePiece piece scores (higher merges first)

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece only: prefix each fragment with ' '; decode drops it
  bool ignore_merges = false;     // a pre-token that is a whole vocab entry skips BPE (llama3, lfm2)
  bool normalize_nfc = false;     // HF normalizer NFC (Qwen2/3 tokenizer.json); llama.cpp skips it
  bool clean_spaces = false;      // HF clean_up_tokenization_spaces, applied by decode_text()

  std::unordered_map<int32_t, AddedTokenFlags> added_token_flags;
};

// tokenizer.ggml.* keys, with llama.cpp's defaults where keys are missing (MODELS.md §6.1).
VocabSpec vocab_from_gguf(const gguf::File& file);

// A Hugging Face tokenizer.json (BPE model with ByteLevel pre-tokenizer, or with byte_fallback and
// the SentencePiece '▁' normalizer as model "llama"), plus optionally its
// tokenizer_config.json (bos/eos/pad names, clean_up_tokenization_spaces). Throws cera::Error.
VocabSpec vocab_from_hf(const std::string& tokenizer_json_path,
                        const std::string& tokenizer_config_json_path = {});

}  // namespace cera
