// SentencePiece-style encoding (tokenizer.ggml.model "llama": Llama 2, Mistral; MODELS.md §6.4).
// A text fragment (already cut at special tokens) gets a leading space if add_space_prefix, every
// space becomes U+2581 '▁', and the characters are merged pairwise into vocab pieces with the
// shared merge loop of bpe.h. Two ways to rank a pair:
//  * by the score of the merged piece (GGUF tokenizer.ggml.scores; llama.cpp's llm_tokenizer_spm),
//    higher first, ties leftmost;
//  * by the rank of the pair in a merge list (HF tokenizer.json "BPE with byte_fallback").
// A character that is not a piece falls back to its UTF-8 bytes as <0xXX> tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/vocab.h"

namespace cera {

class SpmEncoder {
 public:
  SpmEncoder() = default;
  // pieces: text -> id (and the merge table when spec.merges is non-empty) over spec.tokens.
  SpmEncoder(const VocabSpec& spec, const BpeModel& pieces);

  // Appends the ids of one fragment. pieces/tokens must be the ones the encoder was built from.
  void encode(std::string_view text, const BpeModel& pieces, const std::vector<std::string>& tokens,
              std::vector<int32_t>& out) const;

 private:
  bool use_merges_ = false;         // HF: rank pairs by merge list, else by piece score
  bool add_space_prefix_ = false;
  int32_t unk_ = -1;
  std::vector<int32_t> score_rank_;  // by id: dense rank of the score (0 = best); -1 = never merged into
  std::array<int32_t, 256> byte_token_{};  // id of <0xXX> per byte, -1 if missing
};

}  // namespace cera
