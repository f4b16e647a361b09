#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/byte_unicode.h"

namespace cera {

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

bool mergeable(const VocabSpec& spec, size_t id) {
  if (spec.token_types.empty()) return true;
  const auto t = static_cast<TokenType>(spec.token_types[id]);
  // Only ordinary pieces are merge results: HF merge lists never produce <s> or <0xXX>, and
  // matching them by text here would let "<0x41>" typed in a prompt become a byte token.
  return t == TokenType::Normal || t == TokenType::Undefined;
}

}  // namespace

SpmEncoder::SpmEncoder(const VocabSpec& spec, const BpeModel& pieces)
    : use_merges_(!spec.merges.empty()), add_space_prefix_(spec.add_space_prefix), unk_(spec.unk) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_token_[b] = pieces.find(name);
  }
  if (use_merges_) return;
  // Dense ranks so that equal scores tie and the merge loop then prefers the leftmost pair.
  const size_t n = spec.tokens.size();
  std::vector<float> distinct;
  for (size_t id = 0; id < n && id < spec.scores.size(); ++id)
    if (mergeable(spec, id)) distinct.push_back(spec.scores[id]);
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  score_rank_.assign(n, -1);
  for (size_t id = 0; id < n && id < spec.scores.size(); ++id) {
    if (!mergeable(spec, id)) continue;
    const auto it = std::lower_bound(distinct.begin(), distinct.end(), spec.scores[id], std::greater<float>());
    score_rank_[id] = static_cast<int32_t>(it - distinct.begin());
  }
}

void SpmEncoder::encode(std::string_view text, const BpeModel& pieces, const std::vector<std::string>& tokens,
                        std::vector<int32_t>& out) const {
  if (text.empty()) return;  // HF skips empty sections: no lone '▁' between two special tokens
  std::string norm;
  norm.reserve(text.size() + 8);
  if (add_space_prefix_) norm += kMetaspace;
  for (char c : text) {
    if (c == ' ') {
      norm += kMetaspace;
    } else {
      norm += c;
    }
  }

  // One initial symbol per character; starts[i] is where character i begins in norm.
  std::vector<uint32_t> starts;
  std::vector<int32_t> symbols;
  for (size_t pos = 0; pos < norm.size();) {
    const size_t len = std::min(utf8::sequence_length(static_cast<uint8_t>(norm[pos])), norm.size() - pos);
    starts.push_back(static_cast<uint32_t>(pos));
    symbols.push_back(pieces.find(std::string_view(norm).substr(pos, len)));
    pos += len;
  }
  starts.push_back(static_cast<uint32_t>(norm.size()));

  MergeWorkspace ws;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  if (use_merges_) {
    ws.merge(symbols, [&](int32_t l, int32_t r) { return pieces.find_merge(l, r); }, &spans);
  } else {
    std::string joined;
    ws.merge(
        symbols,
        [&](int32_t l, int32_t r) -> std::optional<PairMerge> {
          joined.assign(tokens[l]);
          joined += tokens[r];
          const int32_t id = pieces.find(joined);
          if (id < 0 || score_rank_[id] < 0) return std::nullopt;
          return PairMerge{score_rank_[id], id};
        },
        &spans);
  }

  for (size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i] >= 0) {
      out.push_back(symbols[i]);
      continue;
    }
    // Unknown symbols never merge, so this is one character: emit its bytes, or <unk> if the
    // vocab lacks one of them (as HF does).
    const std::string_view ch = std::string_view(norm).substr(starts[spans[i].first],
                                                             starts[spans[i].second] - starts[spans[i].first]);
    bool all_bytes = true;
    for (char c : ch) all_bytes &= byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : ch) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
    } else if (unk_ >= 0) {
      out.push_back(unk_);
    }
  }
}

}  // namespace cera
