// The built-in JSON grammar (`--json`: any JSON value) and the primitive rules that JSON Schema
// conversion builds on. Whitespace is compact but tolerant: after each token either nothing, one
// space, or a newline with up to 20 spaces/tabs — bounded, so a bounded schema has bounded output.
#pragma once

#include <string>
#include <string_view>

#include "sampling/grammar/grammar.h"

namespace cera {

// Rules ws, json-value, json-object, json-array, json-string, json-char, json-number,
// json-integer, json-boolean, json-null (each value rule ends with ws). No root rule.
std::string_view json_primitives_gbnf();

// root ::= json-value, plus the primitives.
std::string json_gbnf();
Grammar json_grammar();

// A GBNF string literal (quotes included) matching exactly `utf8`.
std::string gbnf_literal(std::string_view utf8);

}  // namespace cera
