// vocab_from_gguf: tokenizer.ggml.* keys as a VocabSpec, with llama.cpp's defaults (MODELS.md §6.1).
#include "cera/error.h"
#include "format/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace cera {

VocabSpec vocab_from_gguf(const gguf::File& file) {
  VocabSpec spec;
  spec.model = file.get_string("tokenizer.ggml.model");
  spec.tokens = file.get_string_array("tokenizer.ggml.tokens");
  const auto n = static_cast<int64_t>(spec.tokens.size());

  if (file.has("tokenizer.ggml.token_type")) {
    const auto types = file.get_int_array("tokenizer.ggml.token_type");
    if (static_cast<int64_t>(types.size()) != n) {
      throw Error(ErrorCode::BadFormat, file.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                            " entries for " + std::to_string(n) + " tokens");
    }
    spec.token_types.assign(types.begin(), types.end());
  }
  if (file.has("tokenizer.ggml.scores")) {
    const auto scores = file.get_float_array("tokenizer.ggml.scores");
    spec.scores.assign(scores.begin(), scores.end());
  }
  if (file.has("tokenizer.ggml.merges")) {
    for (const std::string& m : file.get_string_array("tokenizer.ggml.merges")) {
      // Split at the first space at index >= 1, so a merge whose left part is " " still parses.
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos) {
        throw Error(ErrorCode::BadFormat, file.path() + ": tokenizer.ggml.merges entry '" + m + "' has no space");
      }
      spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
  }

  if (spec.model == "gpt2") {
    spec.pre = file.get_string_opt("tokenizer.ggml.pre").value_or("default");
    spec.bos = spec.eos = 11;  // llama.cpp's GPT-2 legacy default; files override it
    spec.add_bos = pre_tokenizer_adds_bos(spec.pre);
    spec.ignore_merges = pre_tokenizer_ignores_merges(spec.pre);
  } else if (spec.model == "llama") {
    spec.bos = 1;
    spec.eos = 2;
    spec.unk = 0;
    spec.add_bos = true;
    spec.add_space_prefix = true;
  }

  auto read_id = [&](const char* key, int32_t& id) {
    if (auto v = file.get_int_opt(key)) id = (*v >= 0 && *v < n) ? static_cast<int32_t>(*v) : -1;
  };
  read_id("tokenizer.ggml.bos_token_id", spec.bos);
  read_id("tokenizer.ggml.eos_token_id", spec.eos);
  read_id("tokenizer.ggml.eot_token_id", spec.eot);
  read_id("tokenizer.ggml.eom_token_id", spec.eom);
  read_id("tokenizer.ggml.unknown_token_id", spec.unk);
  read_id("tokenizer.ggml.padding_token_id", spec.pad);
  spec.add_bos = file.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(spec.add_bos);
  spec.add_eos = file.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(spec.add_eos);
  spec.add_space_prefix = file.get_bool_opt("tokenizer.ggml.add_space_prefix").value_or(spec.add_space_prefix);
  return spec;
}

}  // namespace cera
