// The tokenizer.ggml.* / tokenizer.chat_template keys llama.cpp's convert_hf_to_gguf.py writes
// for a byte-level BPE tokenizer.json (its _set_vocab_gpt2 + gguf-py SpecialVocab), rebuilt from
// the folder's files without Python; and for a SentencePiece-style one (byte_fallback BPE, Llama 2 /
// Mistral: its _set_vocab_llama_hf, but with scores from the merge order so that llama.cpp's
// score-ranked merging reproduces HF). See MODELS.md §6.1, §6.4 and §6.5.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "format/gguf.h"

namespace cera::hf {

// Appends the tokenizer keys to `w` in the converter's order. `config` is config.json (vocab_size
// and *_token_id fallbacks); `arch` is the GGUF architecture (it names the pre-tokenizer of LFM2).
// Throws Error(NotFound) without tokenizer.json, Error(Unsupported) for a tokenizer that is neither
// byte-level nor SentencePiece-style BPE, or whose pre-tokenizer llama.cpp would not recognise.
void write_tokenizer_keys(const std::string& dir, const nlohmann::json& config, const std::string& arch,
                          gguf::Writer& w);

// llama.cpp's tokenizer.ggml.pre name for a tokenizer.json. llama.cpp hashes the encoding of a
// probe text; we recognise the pre-tokenizer regex instead (the hash needs the real vocabulary):
// the Llama-3 regex gives "llama-bpe" ("lfm2" for arch lfm2), the Qwen2 regex "qwen2", the plain
// GPT-2 ByteLevel regex "gpt-2". Anything else throws Error(Unsupported).
std::string pre_tokenizer_name(const nlohmann::json& tokenizer_json, const std::string& arch);

}  // namespace cera::hf
