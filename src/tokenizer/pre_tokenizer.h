// Regex pre-tokenization (MODELS.md §6.3): each regex is applied to every piece produced by the
// previous one, keeping both the matches and the gaps between them (HF Split, behavior Isolated).
// Compiled once with PCRE2 (UTF + UCP, JIT); split() is const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cera {

// Regexes llama.cpp uses for a tokenizer.ggml.pre value; throws Error(Unsupported) naming an
// unknown value.
std::vector<std::string> pre_tokenizer_regexes(const std::string& pre);
// Pre types whose HF tokenizer sets ignore_merges (llama3 family).
bool pre_tokenizer_ignores_merges(const std::string& pre);
// Pre types for which llama.cpp adds BOS unless tokenizer.ggml.add_bos_token says otherwise.
bool pre_tokenizer_adds_bos(const std::string& pre);

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::vector<std::string>& patterns);  // throws Error(BadFormat)
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of text (views into text) to out. text must be valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace cera
