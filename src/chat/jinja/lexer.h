// Template source -> flat token stream. Text between tags becomes Text tokens with whitespace
// control already applied ({%- -%}, {{- -}}, {#- -#}, and the trim_blocks / lstrip_blocks
// settings transformers renders chat templates with), so the parser never sees layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cera::chat::jinja {

struct Pos {
  int line = 1, column = 1;
};

enum class TokenType {
  Text,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifiers and keywords (if, in, not, true, ...)
  String,      // value: the unescaped string
  Int,
  Float,
  Op,          // value: the operator / punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  End,         // end of the source
};

struct Token {
  TokenType type;
  std::string value;
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexOptions {
  bool trim_blocks = true;            // drop the first newline after %} and #}
  bool lstrip_blocks = true;          // drop spaces/tabs before {% and {# at the start of a line
  bool keep_trailing_newline = false;  // Jinja drops one trailing newline of the source
};

// Throws cera::Error(BadFormat, "line L, column C: ...") on malformed input.
std::vector<Token> tokenize(const std::string& source, const LexOptions& options = {});

}  // namespace cera::chat::jinja
