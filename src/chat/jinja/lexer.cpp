#include "chat/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "cera/error.h"

namespace cera::chat::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(const std::string& src, const LexOptions& opt) : src_(src), opt_(opt) {
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') {
      src_.pop_back();
      if (!src_.empty() && src_.back() == '\r') src_.pop_back();
    }
  }

  std::vector<Token> run() {
    while (i_ < src_.size()) lex_text();
    flush_text();
    push(TokenType::End, "", pos_at(src_.size()));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    const Pos p = pos_at(at);
    throw Error(ErrorCode::BadFormat, "chat template syntax error at line " + std::to_string(p.line) +
                                          ", column " + std::to_string(p.column) + ": " + msg);
  }

  // Line/column of a byte offset; computed incrementally since offsets mostly grow.
  Pos pos_at(size_t at) const {
    if (at < line_scan_) line_scan_ = line_start_ = 0, line_ = 1;  // an error pointing back: rescan
    while (line_scan_ < at && line_scan_ < src_.size()) {
      if (src_[line_scan_] == '\n') { ++line_; line_start_ = line_scan_ + 1; }
      ++line_scan_;
    }
    return Pos{line_, static_cast<int>(at - line_start_) + 1};
  }

  void push(TokenType t, std::string v, Pos p) { tokens_.push_back(Token{t, std::move(v), p}); }

  void flush_text() {
    if (!text_.empty()) push(TokenType::Text, std::move(text_), text_pos_);
    text_.clear();
  }

  // After a closing tag: apply `-` (strip all whitespace) or trim_blocks (one newline).
  void after_close(char modifier, bool is_block_or_comment) {
    if (modifier == '-') {
      while (i_ < src_.size() && is_space(src_[i_])) ++i_;
    } else if (modifier != '+' && is_block_or_comment && opt_.trim_blocks) {
      if (i_ < src_.size() && src_[i_] == '\n') ++i_;
      else if (i_ + 1 < src_.size() && src_[i_] == '\r' && src_[i_ + 1] == '\n') i_ += 2;
    }
  }

  // Before an opening tag at src_[tag]: apply `-` or lstrip_blocks to the pending text.
  void before_open(size_t tag, char kind, char modifier) {
    if (modifier == '-') {
      while (!text_.empty() && is_space(text_.back())) text_.pop_back();
    } else if (modifier != '+' && kind != '{' && opt_.lstrip_blocks) {
      size_t q = tag;
      while (q > 0 && (src_[q - 1] == ' ' || src_[q - 1] == '\t')) --q;
      if (q == 0 || src_[q - 1] == '\n') {
        const size_t n = tag - q;
        if (n <= text_.size()) text_.resize(text_.size() - n);
      }
    }
  }

  void lex_text() {
    while (i_ < src_.size()) {
      const size_t open = src_.find('{', i_);
      if (open == std::string::npos || open + 1 >= src_.size()) {
        if (text_.empty()) text_pos_ = pos_at(i_);
        text_.append(src_, i_, std::string::npos);
        i_ = src_.size();
        return;
      }
      const char kind = src_[open + 1];
      if (kind != '{' && kind != '%' && kind != '#') {
        if (text_.empty()) text_pos_ = pos_at(i_);
        text_.append(src_, i_, open + 2 - i_);
        i_ = open + 2;
        continue;
      }
      if (text_.empty()) text_pos_ = pos_at(i_);
      text_.append(src_, i_, open - i_);
      const char mod = open + 2 < src_.size() ? src_[open + 2] : '\0';
      const char open_mod = (mod == '-' || mod == '+') ? mod : '\0';
      before_open(open, kind, open_mod);
      i_ = open + 2 + (open_mod ? 1 : 0);
      if (kind == '#') {
        lex_comment(open);
      } else {
        flush_text();
        lex_tag(open, kind);
      }
      return;
    }
  }

  void lex_comment(size_t open) {
    const size_t close = src_.find("#}", i_);
    if (close == std::string::npos) fail(open, "unterminated comment");
    const char mod = close > i_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    i_ = close + 2;
    after_close(mod, true);
  }

  void lex_tag(size_t open, char kind) {
    const bool block = kind == '%';
    push(block ? TokenType::BlockBegin : TokenType::VarBegin, block ? "{%" : "{{", pos_at(open));
    const char close_ch = block ? '%' : '}';
    const size_t first_token = tokens_.size();
    int depth = 0;  // bracket nesting: `}}` inside a dict literal does not close the tag
    for (;;) {
      while (i_ < src_.size() && is_space(src_[i_])) ++i_;
      if (i_ >= src_.size()) fail(open, std::string("unterminated '") + (block ? "{%" : "{{") + "' tag");
      const char c = src_[i_];
      if (depth == 0) {
        char mod = '\0';
        size_t at = i_;
        if ((c == '-' || c == '+') && i_ + 2 < src_.size() && src_[i_ + 1] == close_ch && src_[i_ + 2] == '}') {
          mod = c;
          at = i_ + 1;
        }
        if (src_[at] == close_ch && at + 1 < src_.size() && src_[at + 1] == '}') {
          push(block ? TokenType::BlockEnd : TokenType::VarEnd, block ? "%}" : "}}", pos_at(i_));
          i_ = at + 2;
          after_close(mod, block);
          if (block && tokens_.size() == first_token + 2 && tokens_[first_token].value == "raw") lex_raw(open);
          return;
        }
      }
      const Pos p = pos_at(i_);
      if (c == '\'' || c == '"') {
        lex_string(p);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(p);
      } else if (is_ident_start(c)) {
        const size_t s = i_;
        while (i_ < src_.size() && is_ident(src_[i_])) ++i_;
        push(TokenType::Name, src_.substr(s, i_ - s), p);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(i_, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
            fail(i_, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        i_ += op.size();
        push(TokenType::Op, op, p);
      }
    }
  }

  // {% raw %}...{% endraw %}: everything in between is text.
  void lex_raw(size_t open) {
    tokens_.resize(tokens_.size() - 3);  // drop `{% raw %}`
    for (size_t search = i_;;) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail(open, "unterminated raw block, expected 'endraw'");
      size_t j = tag + 2;
      char open_mod = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) open_mod = src_[j++];
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) { search = tag + 2; continue; }
      j += 6;
      while (j < src_.size() && is_space(src_[j])) ++j;
      char close_mod = '\0';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) close_mod = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) { search = tag + 2; continue; }
      text_pos_ = pos_at(i_);
      text_.assign(src_, i_, tag - i_);
      before_open(tag, '%', open_mod);
      flush_text();
      i_ = j + 2;
      after_close(close_mod, true);
      return;
    }
  }

  void lex_string(Pos p) {
    const char quote = src_[i_++];
    std::string out;
    for (;;) {
      if (i_ >= src_.size()) fail(src_.size(), "unterminated string literal");
      const char c = src_[i_++];
      if (c == quote) break;
      if (c != '\\') { out += c; continue; }
      if (i_ >= src_.size()) fail(src_.size(), "unterminated string literal");
      const char e = src_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + n > src_.size()) fail(i_, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[i_ + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(i_ + k, "bad hex digit in escape");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) fail(i_, "escape beyond U+10FFFF");
          i_ += n;
          append_utf8(out, cp);
          break;
        }
        default: out += '\\'; out += e;  // Python keeps unknown escapes verbatim
      }
    }
    push(TokenType::String, std::move(out), p);
  }

  void lex_number(Pos p) {
    const size_t s = i_;
    bool is_float = false;
    auto digits = [&] {
      while (i_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[i_])) || src_[i_] == '_')) ++i_;
    };
    digits();
    if (i_ + 1 < src_.size() && src_[i_] == '.' && std::isdigit(static_cast<unsigned char>(src_[i_ + 1]))) {
      is_float = true;
      ++i_;
      digits();
    }
    if (i_ < src_.size() && (src_[i_] == 'e' || src_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) {
        is_float = true;
        i_ = j;
        digits();
      }
    }
    std::string text;
    for (size_t k = s; k < i_; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t{is_float ? TokenType::Float : TokenType::Int, text, p};
    errno = 0;
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(s, "integer literal out of range: " + text);
    }
    tokens_.push_back(std::move(t));
  }

  std::string src_;
  LexOptions opt_;
  size_t i_ = 0;
  std::string text_;
  Pos text_pos_;
  std::vector<Token> tokens_;
  mutable size_t line_scan_ = 0, line_start_ = 0;
  mutable int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace cera::chat::jinja
