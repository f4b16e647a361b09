// JSON Schema -> GBNF for the subset documented in docs/STRUCTURED_OUTPUT.md. Anything outside
// it throws cera::Error(Unsupported) naming the keyword and its JSON pointer; a malformed schema
// (wrong value types, bad JSON) throws Error(InvalidArgument).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sampling/grammar/grammar.h"

namespace cera {

// A complete GBNF grammar (root rule plus the json-* primitives) for values valid under `schema`.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::string json_schema_to_gbnf(std::string_view schema_json);

inline Grammar json_schema_grammar(std::string_view schema_json) {
  return Grammar::parse(json_schema_to_gbnf(schema_json));
}

}  // namespace cera
