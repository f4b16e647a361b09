// Structured output helpers: GBNF grammars for JSON and for a JSON Schema subset
// (docs/STRUCTURED_OUTPUT.md), to put in GenerateOptions::grammar.
#pragma once

#include <string>
#include <string_view>

namespace cera {

std::string json_grammar_gbnf();                                 // any JSON value
std::string json_schema_grammar_gbnf(std::string_view schema_json);  // throws Error for what is outside the subset
void validate_grammar(std::string_view gbnf);                    // throws Error(InvalidArgument) with line:column

}  // namespace cera
