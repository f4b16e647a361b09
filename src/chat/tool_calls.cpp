#include "chat/tool_calls.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace cera::chat {

using nlohmann::json;

namespace {

// Deeper nesting than any real call; bounds recursion on hostile input.
constexpr int kMaxDepth = 64;

[[noreturn]] void fail(size_t pos, std::string message) { throw ToolCallError{pos, std::move(message)}; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void skip_space(std::string_view s, size_t& pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const auto d = uint8_t(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid (nlohmann's dump rejects them).
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;  // unpaired surrogate etc.
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class PyParser {
 public:
  PyParser(std::string_view s, size_t pos) : s_(s), pos_(pos) {}
  size_t pos() const { return pos_; }

  json value(int depth = 0) {
    if (depth > kMaxDepth) fail(pos_, "nesting too deep");
    skip_space(s_, pos_);
    if (pos_ >= s_.size()) fail(pos_, "expected a value, found the end");
    const char c = s_[pos_];
    if (c == '"' || c == '\'') return string();
    if (c == '[') return sequence(']', depth);
    if (c == '(') return sequence(')', depth);
    if (c == '{') return dict(depth);
    if (is_digit(c) || c == '-' || c == '+' || c == '.') return number();
    if (is_ident_start(c)) {
      const size_t start = pos_;
      std::string_view word = identifier();
      // Python's constants, and JSON's, which models mix in.
      if (word == "True" || word == "true") return true;
      if (word == "False" || word == "false") return false;
      if (word == "None" || word == "null") return nullptr;
      if (pos_ < s_.size() && (s_[pos_] == '"' || s_[pos_] == '\''))
        fail(start, "string prefixes (r, b, f, u) are not supported");
      fail(start, "unexpected name '" + std::string(word) + "' where a literal was expected");
    }
    if (c == '`' || uint8_t(c) >= 0x80) fail(pos_, "unknown quote or character at the start of a value");
    fail(pos_, std::string("unexpected character '") + c + "'");
  }

  std::string_view identifier() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_ident(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

 private:
  std::string string() {
    const size_t start = pos_;
    const char q = s_[pos_];
    const bool triple = s_.substr(pos_, 3) == std::string(3, q);
    pos_ += triple ? 3 : 1;
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail(start, "unterminated string");
      const char c = s_[pos_];
      if (c == q) {
        if (!triple) {
          ++pos_;
          break;
        }
        if (s_.substr(pos_, 3) == std::string(3, q)) {
          pos_ += 3;
          break;
        }
      }
      if (c == '\\') {
        escape(out);
        continue;
      }
      // A raw newline ends a one-line Python string; models do emit them inside values, so allow it.
      out += c;
      ++pos_;
    }
    if (!valid_utf8(out)) fail(start, "string is not valid UTF-8");
    return out;
  }

  uint32_t hex(size_t n) {
    if (pos_ + n > s_.size()) fail(pos_, "truncated escape");
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      const char c = s_[pos_ + i];
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail(pos_ + i, "bad hex digit in escape");
      v = v * 16 + uint32_t(d);
    }
    pos_ += n;
    return v;
  }

  void escape(std::string& out) {
    const size_t at = pos_;
    if (++pos_ >= s_.size()) fail(at, "unterminated string");
    const char e = s_[pos_++];
    switch (e) {
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'a': out += '\a'; break;
      case '\n': break;  // line continuation
      case 'x': append_utf8(out, hex(2)); break;
      case 'u': {
        uint32_t cp = hex(4);
        // A JSON-style surrogate pair (\ud83d\ude00); Python itself would keep the halves.
        if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
          const size_t save = pos_;
          pos_ += 2;
          const uint32_t lo = hex(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          else
            pos_ = save;
        }
        append_utf8(out, cp);
        break;
      }
      case 'U': append_utf8(out, hex(8)); break;
      default:
        if (e >= '0' && e <= '7') {  // octal, up to three digits
          uint32_t v = uint32_t(e - '0');
          for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i)
            v = v * 8 + uint32_t(s_[pos_++] - '0');
          append_utf8(out, v);
        } else {  // Python keeps an unknown escape as written
          out += '\\';
          out += e;
        }
    }
  }

  json number() {
    const size_t start = pos_;
    std::string digits;  // without sign '+' and '_' separators
    if (s_[pos_] == '+' || s_[pos_] == '-') {
      if (s_[pos_] == '-') digits += '-';
      ++pos_;
    }
    bool is_float = false, any_digit = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (is_digit(c)) {
        any_digit = true;
        digits += c;
      } else if (c == '_' && any_digit && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1])) {
      } else if (c == '.' && !is_float) {
        is_float = true;
        digits += c;
      } else if ((c == 'e' || c == 'E') && any_digit) {
        is_float = true;
        digits += c;
        if (pos_ + 1 < s_.size() && (s_[pos_ + 1] == '+' || s_[pos_ + 1] == '-')) digits += s_[++pos_];
        if (pos_ + 1 >= s_.size() || !is_digit(s_[pos_ + 1])) fail(pos_, "bad exponent");
      } else {
        break;
      }
      ++pos_;
    }
    if (!any_digit) fail(start, "bad number");
    if (pos_ < s_.size() && is_ident_start(s_[pos_])) fail(pos_, "bad number");
    const char* b = digits.data();
    const char* e = b + digits.size();
    if (!is_float) {
      if (digits.size() > 1 && digits[digits[0] == '-' ? 1 : 0] == '0' &&
          digits.find_first_not_of("-0") != std::string::npos)
        fail(start, "leading zeros in an integer");
      int64_t i;
      if (auto r = std::from_chars(b, e, i); r.ec == std::errc() && r.ptr == e) return i;
      uint64_t u;
      if (auto r = std::from_chars(b, e, u); r.ec == std::errc() && r.ptr == e) return u;
    }
    // Floats, and integers too big for 64 bits (JSON has no bigger integers anyway).
    double d;
    auto r = std::from_chars(b, e, d);
    if (r.ec == std::errc::result_out_of_range) fail(start, "number out of range");
    if (r.ec != std::errc() || r.ptr != e || !std::isfinite(d)) fail(start, "bad number");
    return d;
  }

  json sequence(char close, int depth) {
    ++pos_;  // [ or (
    json arr = json::array();
    for (;;) {
      skip_space(s_, pos_);
      if (pos_ >= s_.size()) fail(pos_, std::string("expected '") + close + "', found the end");
      if (s_[pos_] == close) {
        ++pos_;
        return arr;
      }
      arr.push_back(value(depth + 1));
      skip_space(s_, pos_);
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= s_.size() || s_[pos_] != close) {
        fail(pos_, std::string("expected ',' or '") + close + "'");
      }
    }
  }

  json dict(int depth) {
    ++pos_;  // {
    json obj = json::object();
    for (;;) {
      skip_space(s_, pos_);
      if (pos_ >= s_.size()) fail(pos_, "expected '}', found the end");
      if (s_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      const size_t key_pos = pos_;
      json key = value(depth + 1);
      std::string k;
      if (key.is_string())
        k = key.get<std::string>();
      else if (key.is_number() || key.is_boolean() || key.is_null())
        k = key.dump();  // JSON keys are strings; Python's 1 / True / None keys become their text
      else
        fail(key_pos, "dict key must be a string or a number");
      skip_space(s_, pos_);
      if (pos_ >= s_.size() || s_[pos_] != ':') fail(pos_, "expected ':' in dict");
      ++pos_;
      obj[k] = value(depth + 1);
      skip_space(s_, pos_);
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
      } else if (pos_ >= s_.size() || s_[pos_] != '}') {
        fail(pos_, "expected ',' or '}'");
      }
    }
  }

  std::string_view s_;
  size_t pos_;
};

// name(kw=value, ...) at pos; names may contain '.' and '-' (namespaced / MCP-style tools).
ToolCall parse_python_call(std::string_view s, size_t& pos) {
  const size_t start = pos;
  if (pos >= s.size() || !is_ident_start(s[pos])) fail(pos, "expected a function name");
  while (pos < s.size() && (is_ident(s[pos]) || s[pos] == '.' || s[pos] == '-')) ++pos;
  ToolCall call;
  call.name = std::string(s.substr(start, pos - start));
  call.arguments = json::object();
  skip_space(s, pos);
  if (pos >= s.size() || s[pos] != '(') fail(pos, "expected '(' after the function name");
  ++pos;
  for (;;) {
    skip_space(s, pos);
    if (pos >= s.size()) fail(pos, "expected ')', found the end");
    if (s[pos] == ')') {
      ++pos;
      break;
    }
    const size_t arg_pos = pos;
    PyParser p(s, pos);
    std::string key;
    if (is_ident_start(s[pos])) {
      key = std::string(p.identifier());
      pos = p.pos();
      skip_space(s, pos);
    }
    if (key.empty() || pos >= s.size() || s[pos] != '=')
      fail(arg_pos, "expected a keyword argument (name=value); positional arguments are not supported");
    ++pos;
    if (call.arguments.contains(key)) fail(arg_pos, "argument '" + key + "' given twice");
    PyParser v(s, pos);
    call.arguments[key] = v.value();
    pos = v.pos();
    skip_space(s, pos);
    if (pos < s.size() && s[pos] == ',')
      ++pos;
    else if (pos >= s.size() || s[pos] != ')')
      fail(pos, "expected ',' or ')' in the argument list");
  }
  call.raw = std::string(s.substr(start, pos - start));
  return call;
}

// {"name": ..., "arguments": ...}: arguments an object, a string holding one, or absent.
ToolCall call_from_json(const json& j, std::string raw, size_t pos) {
  if (!j.is_object()) fail(pos, "a tool call must be a JSON object");
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) fail(pos, "tool call without a string \"name\"");
  ToolCall call{name->get<std::string>(), json::object(), std::move(raw)};
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args != j.end() && !args->is_null()) {
    json a = *args;
    if (a.is_string()) {
      const std::string text = a.get<std::string>();
      a = json::parse(text, nullptr, false);
      if (a.is_discarded()) fail(pos, "\"arguments\" is a string but not valid JSON");
    }
    if (!a.is_object()) fail(pos, "\"arguments\" must be an object");
    call.arguments = std::move(a);
  }
  return call;
}

json parse_json_at(std::string_view s, size_t offset) {
  try {
    return json::parse(s);
  } catch (const json::parse_error& e) {
    fail(offset + (e.byte > 0 ? e.byte - 1 : 0), std::string("bad JSON: ") + e.what());
  }
}

std::string_view trim(std::string_view s, size_t& offset) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  offset += b;
  return s.substr(b, e - b);
}

// Calls from a JSON value: one object or a list of them.
void calls_from_json(std::string_view text, size_t offset, std::vector<ToolCall>& calls) {
  const json j = parse_json_at(text, offset);
  if (j.is_array()) {
    for (const auto& item : j) calls.push_back(call_from_json(item, item.dump(), offset));
  } else {
    calls.push_back(call_from_json(j, std::string(text), offset));
  }
  if (calls.empty()) fail(offset, "empty list of tool calls");
}

// The inside of an LFM2 block: [call, call, ...] (or one bare call, or JSON).
std::vector<ToolCall> parse_lfm2_block(std::string_view s, size_t base) {
  size_t off = base;
  std::string_view t = trim(s, off);
  std::vector<ToolCall> calls;
  size_t pos = 0;
  if (t.empty()) fail(off, "empty tool call");
  if (t[0] == '{' || (t[0] == '[' && [&] {
        size_t p = 1;
        skip_space(t, p);
        return p < t.size() && t[p] == '{';
      }())) {
    calls_from_json(t, off, calls);
    return calls;
  }
  try {
    if (t[0] != '[') {
      calls.push_back(parse_python_call(t, pos));
    } else {
      ++pos;
      for (;;) {
        skip_space(t, pos);
        if (pos >= t.size()) fail(pos, "expected ']', found the end");
        if (t[pos] == ']') {
          ++pos;
          break;
        }
        calls.push_back(parse_python_call(t, pos));
        skip_space(t, pos);
        if (pos < t.size() && t[pos] == ',')
          ++pos;
        else if (pos >= t.size() || t[pos] != ']')
          fail(pos, "expected ',' or ']' between calls");
      }
    }
    skip_space(t, pos);
    if (pos != t.size()) fail(pos, "unexpected text after the calls");
    if (calls.empty()) fail(0, "empty list of tool calls");
  } catch (ToolCallError& e) {
    e.position += off;  // block-relative -> absolute
    throw;
  }
  return calls;
}

std::vector<ToolCall> parse_hermes_block(std::string_view s, size_t base) {
  size_t off = base;
  std::string_view t = trim(s, off);
  if (t.empty()) fail(off, "empty tool call");
  std::vector<ToolCall> calls;
  calls_from_json(t, off, calls);
  return calls;
}

// Longest suffix of s that is a proper prefix of marker.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

json parse_python_literal(std::string_view text, size_t& pos) {
  PyParser p(text, pos);
  json v = p.value();
  pos = p.pos();
  return v;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format) : format_(format) {
  if (format == ToolCallFormat::Lfm2) {
    start_ = "<|tool_call_start|>";
    end_ = "<|tool_call_end|>";
  } else {
    start_ = "<tool_call>";
    end_ = "</tool_call>";
  }
}

void ToolCallStreamParser::handle_block(std::string_view inner, ToolCallResult& out) {
  const size_t inner_pos = block_start_ + start_.size();
  try {
    auto calls = format_ == ToolCallFormat::Lfm2 ? parse_lfm2_block(inner, inner_pos) : parse_hermes_block(inner, inner_pos);
    for (auto& c : calls) out.calls.push_back(std::move(c));
  } catch (const ToolCallError& e) {
    out.errors.push_back(e);
    out.content += start_;
    out.content += inner;
    out.content += end_;
  } catch (const std::exception& e) {  // nlohmann type errors and the like: still not a crash
    out.errors.push_back({inner_pos, e.what()});
    out.content += start_;
    out.content += inner;
    out.content += end_;
  }
}

void ToolCallStreamParser::drain(ToolCallResult& out) {
  for (;;) {
    if (!in_call_) {
      const size_t pos = buf_.find(start_);
      if (pos == std::string::npos) {
        const size_t hold = partial_marker(buf_, start_);
        out.content.append(buf_, 0, buf_.size() - hold);
        buf_offset_ += buf_.size() - hold;
        buf_.erase(0, buf_.size() - hold);
        return;
      }
      out.content.append(buf_, 0, pos);
      block_start_ = buf_offset_ + pos;
      buf_offset_ += pos + start_.size();
      buf_.erase(0, pos + start_.size());
      in_call_ = true;
      scanned_ = 0;
    } else {
      const size_t pos = buf_.find(end_, scanned_);
      if (pos == std::string::npos) {
        // The end marker may straddle this piece and the next: rescan its possible start.
        scanned_ = buf_.size() >= end_.size() ? buf_.size() - end_.size() + 1 : 0;
        return;
      }
      handle_block(std::string_view(buf_).substr(0, pos), out);
      buf_offset_ += pos + end_.size();
      buf_.erase(0, pos + end_.size());
      in_call_ = false;
    }
  }
}

ToolCallResult ToolCallStreamParser::push(std::string_view piece) {
  ToolCallResult out;
  buf_.append(piece);
  drain(out);
  return out;
}

ToolCallResult ToolCallStreamParser::finish() {
  ToolCallResult out;
  drain(out);
  if (in_call_) {
    out.errors.push_back({block_start_, "unterminated tool call (no " + end_ + ")"});
    out.content += start_;
  }
  out.content += buf_;
  buf_offset_ += buf_.size();
  buf_.clear();
  in_call_ = false;
  return out;
}

ToolCallResult parse_tool_calls(std::string_view text, ToolCallFormat format) {
  ToolCallStreamParser p(format);
  ToolCallResult out = p.push(text);
  ToolCallResult rest = p.finish();
  out.content += rest.content;
  for (auto& c : rest.calls) out.calls.push_back(std::move(c));
  for (auto& e : rest.errors) out.errors.push_back(std::move(e));
  return out;
}

}  // namespace cera::chat
