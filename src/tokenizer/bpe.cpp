#include "tokenizer/bpe.h"

namespace cera {

BpeModel::BpeModel(const std::vector<std::string>& tokens,
                   const std::vector<std::pair<std::string, std::string>>& merges) {
  ids_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Duplicate texts (rare, in GGUF only): the last id wins, as in llama.cpp's text -> id map.
    ids_[tokens[i]] = static_cast<int32_t>(i);
  }
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t left = find(a), right = find(b);
    joined = a;
    joined += b;
    const int32_t merged = find(joined);
    if (left < 0 || right < 0 || merged < 0) continue;
    // A later duplicate of the same pair must not override the earlier (better) rank.
    merges_.try_emplace(pair_key(left, right), PairMerge{static_cast<int32_t>(rank), merged});
  }
}

}  // namespace cera
