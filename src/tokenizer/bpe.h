// The merge loop shared by byte-level BPE and (later) SentencePiece: a word starts as a sequence of
// symbol ids; the adjacent pair with the best (lowest) rank is merged, ties going to the leftmost,
// until no adjacent pair can merge. Everything runs on ids, so the inner loop does no string work:
// the caller supplies the pair -> (rank, merged id) lookup. Byte-level BPE looks pairs up in its
// merge table; SentencePiece can look up the concatenated piece and rank it by score.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cera {

struct PairMerge {
  int32_t rank = 0;  // lower merges first
  int32_t id = -1;   // id of the merged symbol
};

// Reusable scratch space, so encoding many words allocates once.
class MergeWorkspace {
 public:
  // symbols: initial ids (-1 = unknown symbol, which never merges). lookup(left, right) returns
  // std::optional<PairMerge> (nullopt = no merge). On return symbols holds the final ids, and
  // spans (if non-null) the [first, last) initial positions each final symbol covers (SentencePiece
  // needs them to byte-fall-back an unknown symbol).
  template <class Lookup>
  void merge(std::vector<int32_t>& symbols, Lookup&& lookup,
             std::vector<std::pair<uint32_t, uint32_t>>* spans = nullptr);

 private:
  struct Candidate {
    int32_t rank;
    uint32_t left;  // index of the left symbol (also its start, so it orders ties leftmost)
    int32_t left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<int32_t> next_, prev_;
  std::vector<Candidate> heap_;
};

template <class Lookup>
void MergeWorkspace::merge(std::vector<int32_t>& ids, Lookup&& lookup,
                           std::vector<std::pair<uint32_t, uint32_t>>* spans) {
  const auto n = static_cast<int32_t>(ids.size());
  if (n > 1) {
    next_.resize(n);
    prev_.resize(n);
    for (int32_t i = 0; i < n; ++i) {
      next_[i] = i + 1 < n ? i + 1 : -1;
      prev_[i] = i - 1;
    }
    heap_.clear();
    const auto greater = std::greater<Candidate>();
    auto push_pair = [&](int32_t left) {
      const int32_t right = next_[left];
      if (right < 0 || ids[left] < 0 || ids[right] < 0) return;
      if (const std::optional<PairMerge> m = lookup(ids[left], ids[right])) {
        heap_.push_back({m->rank, static_cast<uint32_t>(left), ids[left], ids[right], m->id});
        std::push_heap(heap_.begin(), heap_.end(), greater);
      }
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), greater);
      const Candidate c = heap_.back();
      heap_.pop_back();
      const auto left = static_cast<int32_t>(c.left);
      const int32_t right = next_[left];
      // Stale entry: one side was merged since it was pushed. A symbol only ever grows, so equal
      // ids at the same positions mean the pair is unchanged.
      if (ids[left] != c.left_id || right < 0 || ids[right] != c.right_id) continue;
      ids[left] = c.merged_id;
      ids[right] = -2;  // dead
      next_[left] = next_[right];
      if (next_[left] >= 0) prev_[next_[left]] = left;
      if (prev_[left] >= 0) push_pair(prev_[left]);
      push_pair(left);
    }
  }
  // Compact the survivors (dead symbols are -2).
  if (spans) spans->clear();
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] == -2) continue;
    if (spans) {
      const int32_t end = n > 1 && next_[i] >= 0 ? next_[i] : n;
      spans->emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(end));
    }
    ids[out++] = ids[i];
  }
  ids.resize(out);
}

// A byte-level BPE vocabulary: token text -> id and the merge table keyed by id pairs.
class BpeModel {
 public:
  BpeModel() = default;
  // tokens: text by id; merges: rank = index. Merges whose parts or result are not tokens are
  // skipped (they can never fire).
  BpeModel(const std::vector<std::string>& tokens,
           const std::vector<std::pair<std::string, std::string>>& merges);

  int32_t find(std::string_view text) const {
    auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
  }
  std::optional<PairMerge> find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find(pair_key(left, right));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  static uint64_t pair_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::unordered_map<uint64_t, PairMerge> merges_;
};

}  // namespace cera
