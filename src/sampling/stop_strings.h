// Stop strings over a stream of text pieces (detokenized tokens). A stop may be split across any
// number of pieces, so the filter holds back the longest tail of the text that could still grow into
// a stop and releases it only once it cannot: no byte of a stop that later completes is ever emitted.
//
// When several stops match, the one that completes first wins (ties: the one starting first, i.e.
// the longer), which is what a stream sees, so the result does not depend on how text is chunked.
// Bytes are compared as they are; with valid UTF-8 pieces and stops, text is only ever cut at a
// character boundary (a stop begins with a lead byte).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cera {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);  // empty strings are ignored

  struct Out {
    std::string text;      // safe to show now
    bool stopped = false;  // a stop matched: text is everything before it; later pushes return nothing
    std::string matched;   // the stop that matched
  };
  Out push(std::string_view piece);
  // At the end of generation: the held-back tail (no stop completed), or "" after a stop.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace cera
