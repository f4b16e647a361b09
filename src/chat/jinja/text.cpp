#include "chat/jinja/text.h"

#include "chat/jinja/value.h"

namespace cera::chat::jinja::text {

namespace {
bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char to_up(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char to_low(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
}  // namespace

std::string strip(const std::string& s, const std::string& chars, bool left, bool right, bool whitespace) {
  if (whitespace) {
    size_t b = 0, e = s.size();
    if (left) while (b < e && ascii_space(s[b])) ++b;
    if (right) while (e > b && ascii_space(s[e - 1])) --e;
    return s.substr(b, e - b);
  }
  const auto set = utf8_chars(chars);
  auto in_set = [&](const std::string& c) {
    for (const auto& x : set) if (x == c) return true;
    return false;
  };
  auto cps = utf8_chars(s);
  size_t b = 0, e = cps.size();
  if (left) while (b < e && in_set(cps[b])) ++b;
  if (right) while (e > b && in_set(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = to_up(c);
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = to_low(c);
  return s;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (ascii_alpha(c)) {
      c = prev_cased ? to_low(c) : to_up(c);
      prev_cased = true;
    } else {
      // Python treats any non-cased character (including digits, non-ASCII bytes) as a boundary.
      prev_cased = false;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = to_up(out[0]);
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {  // Python inserts `to` between every character (and at both ends)
    std::string out;
    int64_t n = 0;
    for (const auto& c : utf8_chars(s)) {
      if (count < 0 || n < count) { out += to; ++n; }
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> split(const std::string& s, const std::string& sep, bool whitespace, int64_t maxsplit) {
  std::vector<std::string> out;
  if (whitespace) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && ascii_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && ascii_space(s[e - 1])) --e;
        out.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !ascii_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) break;
    out.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0 && s.size() >= p.size(); }
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

size_t length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace cera::chat::jinja::text
