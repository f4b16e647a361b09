#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "cera/error.h"
#include "sampling/grammar/json_schema.h"
#include "sampling/grammar/matcher.h"

namespace cera {
namespace {

class SchemaMatcher {
 public:
  explicit SchemaMatcher(const std::string& schema)
      : grammar_(std::make_shared<Grammar>(json_schema_grammar(schema))),
        vocab_(std::make_shared<GrammarVocab>(std::vector<std::string>{}, std::vector<int32_t>{})) {}
  bool operator()(std::string_view text) const {
    GrammarMatcher m(grammar_, vocab_);
    return m.accept_bytes(text) && m.is_complete();
  }

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
};

// The error's code and message, or "" if the schema converted.
std::string schema_error(const std::string& schema, ErrorCode expected = ErrorCode::Unsupported) {
  try {
    json_schema_grammar(schema);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  return "";
}

TEST(JsonSchema, Primitives) {
  SchemaMatcher s(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(s(R"("ab")"));
  EXPECT_TRUE(s(R"("a\n")"));            // an escape is one character
  EXPECT_TRUE(s(R"("\ud83d\ude00x")"));  // a surrogate pair is one character
  EXPECT_TRUE(s("\"\xC3\xA9t\xC3\xA9\""));
  EXPECT_FALSE(s(R"("a")"));
  EXPECT_FALSE(s(R"("abcd")"));
  EXPECT_FALSE(s("12"));
  SchemaMatcher i(R"({"type": "integer"})");
  EXPECT_TRUE(i("-12"));
  EXPECT_TRUE(i("0 "));
  EXPECT_FALSE(i("1.5"));
  EXPECT_FALSE(i("007"));
  SchemaMatcher n(R"({"type": "number"})");
  EXPECT_TRUE(n("-1.25e+10"));
  EXPECT_FALSE(n("1."));
  SchemaMatcher nullable(R"({"type": ["boolean", "null"]})");
  EXPECT_TRUE(nullable("true"));
  EXPECT_TRUE(nullable("null"));
  EXPECT_FALSE(nullable("0"));
}

TEST(JsonSchema, EnumConstAnyOf) {
  SchemaMatcher e(R"({"enum": ["red", "green", 3, null, {"a": [1]}]})");
  EXPECT_TRUE(e(R"("red")"));
  EXPECT_TRUE(e("3"));
  EXPECT_TRUE(e("null"));
  EXPECT_TRUE(e(R"({"a":[1]})"));
  EXPECT_FALSE(e(R"("blue")"));
  EXPECT_FALSE(e(R"("re")"));
  SchemaMatcher c(R"({"const": "x\"y"})");
  EXPECT_TRUE(c(R"("x\"y")"));
  EXPECT_FALSE(c(R"("xy")"));
  SchemaMatcher a(R"({"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})");
  EXPECT_TRUE(a("7"));
  EXPECT_TRUE(a(R"("q")"));
  EXPECT_FALSE(a(R"("qq")"));
}

TEST(JsonSchema, ObjectsRequiredOptionalAndOrder) {
  SchemaMatcher o(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"], "additionalProperties": false})");
  EXPECT_TRUE(o(R"({"b": "x"})"));
  EXPECT_TRUE(o(R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(o(R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(o("{\n  \"b\": \"x\",\n  \"c\": false\n}"));
  EXPECT_FALSE(o(R"({"a": 1})"));            // b is required
  EXPECT_FALSE(o(R"({"b": "x", "d": 1})"));  // no additional properties
  EXPECT_FALSE(o(R"({"b": "x",})"));
  EXPECT_FALSE(o(R"({"c": true, "b": "x"})"));  // declaration order
  SchemaMatcher all_optional(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})");
  EXPECT_TRUE(all_optional("{}"));
  EXPECT_TRUE(all_optional(R"({"b": 2})"));
  EXPECT_TRUE(all_optional(R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(all_optional(R"({, "b": 2})"));
  SchemaMatcher any_object(R"({"type": "object"})");
  EXPECT_TRUE(any_object(R"({"anything": [1, {"x": null}]})"));
}

TEST(JsonSchema, ArraysWithBounds) {
  SchemaMatcher a(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(a("[1]"));
  EXPECT_TRUE(a("[1, 2, 3]"));
  EXPECT_FALSE(a("[]"));
  EXPECT_FALSE(a("[1, 2, 3, 4]"));
  EXPECT_FALSE(a(R"([1, "x"])"));
  SchemaMatcher unbounded(R"({"type": "array"})");
  EXPECT_TRUE(unbounded("[]"));
  EXPECT_TRUE(unbounded(R"([1, "a", [], {}])"));
  SchemaMatcher empty_only(R"({"type": "array", "maxItems": 0})");
  EXPECT_TRUE(empty_only("[]"));
  EXPECT_FALSE(empty_only("[1]"));
}

TEST(JsonSchema, LocalRefsIncludingRecursion) {
  SchemaMatcher tree(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})");
  EXPECT_TRUE(tree(R"({"v": 1})"));
  EXPECT_TRUE(tree(R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]})"));
  EXPECT_FALSE(tree(R"({"v": 1, "kids": [{"kids": []}]})"));
  SchemaMatcher old_style(R"({"type": "array", "items": {"$ref": "#/definitions/x"}, "definitions": {"x": {"type": "null"}}})");
  EXPECT_TRUE(old_style("[null, null]"));
  EXPECT_FALSE(old_style("[1]"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPointer) {
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "^a"}}})"),
            "JSON schema: keyword 'pattern' at /properties/name/pattern is not supported (see docs/STRUCTURED_OUTPUT.md)");
  EXPECT_NE(schema_error(R"({"type": "string", "format": "date"})").find("'format' at /format"), std::string::npos);
  EXPECT_NE(schema_error(R"({"not": {"type": "null"}})").find("'not' at /not"), std::string::npos);
  EXPECT_NE(schema_error(R"({"if": {}, "then": {}})").find("'if' at /if"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "integer", "minimum": 0})").find("'minimum' at /minimum"), std::string::npos);
  EXPECT_NE(schema_error(R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})").find("'allOf' with other than exactly one subschema"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"items": {"$ref": "http://example.com/s.json"}})").find("at /items/$ref"), std::string::npos);
  EXPECT_NE(schema_error(R"({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}})")
                .find("'additionalProperties' with a schema"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "array", "items": [{"type": "integer"}]})").find("tuple"), std::string::npos);
  // Annotations are fine.
  EXPECT_EQ(schema_error(R"({"title": "t", "description": "d", "$schema": "x", "type": "null"})"), "");
}

TEST(JsonSchema, MalformedSchemas) {
  EXPECT_NE(schema_error("{", ErrorCode::InvalidArgument).find("not valid JSON"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "strang"})", ErrorCode::InvalidArgument).find("unknown type 'strang' at /type"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "string", "maxLength": -1})", ErrorCode::InvalidArgument).find("at /maxLength"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref": "#/$defs/missing"})", ErrorCode::InvalidArgument).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace cera
