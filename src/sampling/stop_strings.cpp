#include "sampling/stop_strings.h"

#include <algorithm>

namespace cera {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) {
      max_len_ = std::max(max_len_, s.size());
      stops_.push_back(std::move(s));
    }
}

StopStringFilter::Out StopStringFilter::push(std::string_view piece) {
  Out out;
  if (stopped_) {
    out.stopped = true;
    out.matched = matched_;
    return out;
  }
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(piece);
  // Held text never contains a whole stop, so any match found here is new.
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const auto& s : stops_) {
    const size_t pos = buf.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &s;
    }
  }
  if (best) {
    stopped_ = true;
    matched_ = *best;
    out.text = buf.substr(0, best_pos);
    out.stopped = true;
    out.matched = matched_;
    return out;
  }
  // Longest suffix of buf that is a proper prefix of some stop: it might still become one.
  size_t hold = 0;
  for (size_t len = std::min(buf.size(), max_len_ > 0 ? max_len_ - 1 : 0); len > 0 && hold == 0; --len) {
    const std::string_view tail = std::string_view(buf).substr(buf.size() - len);
    for (const auto& s : stops_)
      if (s.size() > len && std::string_view(s).substr(0, len) == tail) {
        hold = len;
        break;
      }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  out.text = std::move(buf);
  return out;
}

std::string StopStringFilter::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : rest;
}

}  // namespace cera
