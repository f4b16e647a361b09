#include "cera/structured_output.h"

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/json_grammar.h"
#include "sampling/grammar/json_schema.h"

namespace cera {

std::string json_grammar_gbnf() { return json_gbnf(); }

std::string json_schema_grammar_gbnf(std::string_view schema_json) { return json_schema_to_gbnf(schema_json); }

void validate_grammar(std::string_view gbnf) { (void)Grammar::parse(gbnf); }

}  // namespace cera
