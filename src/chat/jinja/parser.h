// Token stream -> syntax tree (recursive descent, precedence as in Jinja2's parser).
#pragma once

#include <string>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"

namespace cera::chat::jinja {

// Throws cera::Error(BadFormat, "... line L, column C: ...") on a syntax error, an unknown tag,
// filter or test, or nesting deeper than the guard allows.
Template parse(const std::vector<Token>& tokens);
Template parse_template(const std::string& source, const LexOptions& options = {});

}  // namespace cera::chat::jinja
