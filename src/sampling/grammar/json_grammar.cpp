#include "sampling/grammar/json_grammar.h"

#include <cstdio>

namespace cera {

// Strings exclude lone surrogate escapes (\uD800 alone is not valid JSON text for strict parsers)
// and count an escaped surrogate pair as one json-char, so {min,max} on json-char bounds the
// decoded length in code points as JSON Schema's minLength/maxLength do. Numbers are bounded
// (16 integer digits, 16 fraction digits, 2 exponent digits) so they always end.
std::string_view json_primitives_gbnf() {
  return R"(ws ::= | " " | "\n" [ \t]{0,20}
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-string ":" ws json-value ( "," ws json-string ":" ws json-value )* )? "}" ws
json-array ::= "[" ws ( json-value ( "," ws json-value )* )? "]" ws
json-string ::= "\"" json-char* "\"" ws
json-char ::= [^"\\\x00-\x1F\x7F] | "\\" json-escape
json-escape ::= ["\\/bfnrt] | "u" json-bmp | "u" [dD] [89abAB] json-hex json-hex "\\u" [dD] [c-fC-F] json-hex json-hex
json-bmp ::= [0-9a-cA-Ce-fE-F] json-hex json-hex json-hex | [dD] [0-7] json-hex json-hex
json-hex ::= [0-9a-fA-F]
json-int-part ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-number ::= json-int-part ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? ws
json-integer ::= json-int-part ws
json-boolean ::= ( "true" | "false" ) ws
json-null ::= "null" ws
)";
}

std::string json_gbnf() { return "root ::= json-value\n" + std::string(json_primitives_gbnf()); }

Grammar json_grammar() { return Grammar::parse(json_gbnf()); }

std::string gbnf_literal(std::string_view utf8) {
  std::string out = "\"";
  for (char ch : utf8) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') { out += '\\'; out += ch; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else out += ch;  // UTF-8 passes through; the parser decodes it
  }
  return out + "\"";
}

}  // namespace cera
