#include "sampling/grammar/json_schema.h"

#include <cctype>
#include <map>
#include <set>
#include <vector>

#include "cera/error.h"
#include "sampling/grammar/json_grammar.h"

namespace cera {
namespace {

using json = nlohmann::ordered_json;

// Keywords that only annotate: accepted and ignored.
const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "$comment", "default",
                                            "examples", "deprecated", "readOnly", "writeOnly"};
// Keywords this converter understands (some only on the types they apply to).
const std::set<std::string> kSupported = {"type", "properties", "required", "additionalProperties", "items",
                                          "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
                                          "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions"};

std::string escape_pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    const std::string body = expr(root_, "root", "");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out + std::string(json_primitives_gbnf());
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what, const std::string& ptr) {
    throw Error(ErrorCode::Unsupported, "JSON schema: " + what + " at " + (ptr.empty() ? "/" : ptr) +
                                            " is not supported (see docs/STRUCTURED_OUTPUT.md)");
  }
  [[noreturn]] static void invalid(const std::string& what, const std::string& ptr) {
    throw Error(ErrorCode::InvalidArgument, "JSON schema: " + what + " at " + (ptr.empty() ? "/" : ptr));
  }

  std::string fresh_name(const std::string& hint) {
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
    if (base.empty()) base = "r";
    std::string name = base;
    for (int i = 2; used_.count(name); ++i) name = base + "-" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  // A named rule for `schema`; returns its name.
  std::string rule(const json& schema, const std::string& hint, const std::string& ptr) {
    const std::string name = fresh_name(hint);
    rules_[name] = "";  // reserve the name before recursing
    rules_[name] = expr(schema, name, ptr);
    return name;
  }

  static uint64_t count(const json& s, const char* key, const std::string& ptr) {
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) invalid(std::string("'") + key + "' must be a non-negative integer", ptr + "/" + key);
    return v.get<uint64_t>();
  }

  // A GBNF expression (usually one rule name) matching the values `schema` accepts.
  std::string expr(const json& schema, const std::string& name, const std::string& ptr) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return "json-value";
      unsupported("the schema 'false' (nothing is valid)", ptr);
    }
    if (!schema.is_object()) invalid("a schema must be an object or a boolean", ptr);
    for (const auto& [key, value] : schema.items()) {
      (void)value;
      if (!kAnnotations.count(key) && !kSupported.count(key)) unsupported("keyword '" + key + "'", ptr + "/" + escape_pointer_token(key));
    }
    if (schema.contains("$ref")) {
      for (const auto& [key, value] : schema.items()) {
        (void)value;
        if (key != "$ref" && key != "$defs" && key != "definitions" && !kAnnotations.count(key))
          unsupported("keyword '" + key + "' next to '$ref'", ptr + "/" + escape_pointer_token(key));
      }
      return ref(schema.at("$ref"), ptr + "/$ref");
    }
    if (schema.contains("const")) return literal(schema.at("const"));
    if (schema.contains("enum")) {
      const json& e = schema.at("enum");
      if (!e.is_array() || e.empty()) invalid("'enum' must be a non-empty array", ptr + "/enum");
      std::string out = "(";
      for (size_t i = 0; i < e.size(); ++i) out += (i ? " | " : " ") + literal(e[i]);
      return out + " )";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const json& alts = schema.at(key);
      if (!alts.is_array() || alts.empty()) invalid(std::string("'") + key + "' must be a non-empty array", ptr + "/" + key);
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i)
        out += (i ? " | " : " ") + rule(alts[i], name + "-" + std::to_string(i), ptr + "/" + key + "/" + std::to_string(i));
      return out + " )";
    }
    if (schema.contains("allOf")) {
      const json& all = schema.at("allOf");
      if (!all.is_array() || all.size() != 1)
        unsupported("'allOf' with other than exactly one subschema (merging schemas)", ptr + "/allOf");
      return expr(all[0], name, ptr + "/allOf/0");
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const json& t = schema.at("type");
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const json& x : t) {
          if (!x.is_string()) invalid("'type' entries must be strings", ptr + "/type");
          types.push_back(x.get<std::string>());
        }
      else invalid("'type' must be a string or a non-empty array of strings", ptr + "/type");
    } else if (schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
      types.push_back("array");
    } else if (schema.contains("minLength") || schema.contains("maxLength")) {
      types.push_back("string");
    } else {
      return "json-value";
    }
    if (types.size() == 1) return typed(schema, types[0], name, ptr);
    std::string out = "(";
    for (size_t i = 0; i < types.size(); ++i) out += (i ? " | " : " ") + typed(schema, types[i], name + "-" + types[i], ptr);
    return out + " )";
  }

  std::string typed(const json& s, const std::string& type, const std::string& name, const std::string& ptr) {
    if (type == "string") return string_expr(s, ptr);
    if (type == "number") return "json-number";
    if (type == "integer") return "json-integer";
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    if (type == "array") return array_expr(s, name, ptr);
    if (type == "object") return object_expr(s, name, ptr);
    invalid("unknown type '" + type + "'", ptr + "/type");
  }

  std::string string_expr(const json& s, const std::string& ptr) {
    if (!s.contains("minLength") && !s.contains("maxLength")) return "json-string";
    const uint64_t lo = s.contains("minLength") ? count(s, "minLength", ptr) : 0;
    std::string rep = "{" + std::to_string(lo) + ",";
    if (s.contains("maxLength")) {
      const uint64_t hi = count(s, "maxLength", ptr);
      if (hi < lo) invalid("'maxLength' is below 'minLength'", ptr + "/maxLength");
      rep += std::to_string(hi);
    }
    return "\"\\\"\" json-char" + rep + "} \"\\\"\" ws";
  }

  std::string array_expr(const json& s, const std::string& name, const std::string& ptr) {
    std::string item = "json-value";
    if (s.contains("items")) {
      if (s.at("items").is_array()) unsupported("'items' as an array (tuple validation)", ptr + "/items");
      item = rule(s.at("items"), name + "-item", ptr + "/items");
    }
    const uint64_t lo = s.contains("minItems") ? count(s, "minItems", ptr) : 0;
    const bool bounded = s.contains("maxItems");
    const uint64_t hi = bounded ? count(s, "maxItems", ptr) : 0;
    if (bounded && hi < lo) invalid("'maxItems' is below 'minItems'", ptr + "/maxItems");
    if (bounded && hi == 0) return "\"[\" ws \"]\" ws";
    const std::string more = "( \",\" ws " + item + " ){" + std::to_string(lo ? lo - 1 : 0) + "," +
                             (bounded ? std::to_string(hi - 1) : "") + "}";
    const std::string items = item + " " + more;
    return "\"[\" ws " + (lo ? items : "( " + items + " )?") + " \"]\" ws";
  }

  std::string object_expr(const json& s, const std::string& name, const std::string& ptr) {
    const bool has_props = s.contains("properties");
    if (has_props && !s.at("properties").is_object()) invalid("'properties' must be an object", ptr + "/properties");
    if (s.contains("additionalProperties")) {
      const json& ap = s.at("additionalProperties");
      if (!ap.is_boolean()) unsupported("'additionalProperties' with a schema (only false/true)", ptr + "/additionalProperties");
      if (ap.get<bool>() && has_props)
        unsupported("'additionalProperties': true together with 'properties'", ptr + "/additionalProperties");
    }
    if (!has_props) {
      if (s.contains("required") && !s.at("required").empty())
        unsupported("'required' without 'properties'", ptr + "/required");
      const bool closed = s.contains("additionalProperties") && !s.at("additionalProperties").get<bool>();
      return closed ? "\"{\" ws \"}\" ws" : "json-object";
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) invalid("'required' must be an array of strings", ptr + "/required");
      for (const json& x : r) {
        if (!x.is_string()) invalid("'required' must be an array of strings", ptr + "/required");
        if (!s.at("properties").contains(x.get<std::string>()))
          unsupported("required property '" + x.get<std::string>() + "' that is not in 'properties'", ptr + "/required");
        required.insert(x.get<std::string>());
      }
    }
    struct Prop { std::string kv; bool required; };
    std::vector<Prop> props;
    for (const auto& [key, sub] : s.at("properties").items()) {
      const std::string value = rule(sub, name + "-" + key, ptr + "/properties/" + escape_pointer_token(key));
      props.push_back({gbnf_literal(json(key).dump()) + " ws \":\" ws " + value, required.count(key) > 0});
    }
    // Properties come in declaration order; commas separate those present. after[i]: the rest
    // from i on when something was already written; first[i]: when nothing was yet.
    const size_t n = props.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    for (size_t i = n; i-- > 0;) {
      const std::string tail_after = after[i + 1].empty() ? "" : " " + after[i + 1];
      const std::string comma_kv = "\",\" ws " + props[i].kv;
      const std::string a = props[i].required ? comma_kv + tail_after : "( " + comma_kv + " )?" + tail_after;
      after[i] = fresh_name(name + "-after-" + std::to_string(i));
      rules_[after[i]] = a;
      const std::string with = props[i].kv + tail_after;
      const std::string f = props[i].required ? with : (first[i + 1].empty() ? "( " + with + " )?" : "( " + with + " | " + first[i + 1] + " )");
      first[i] = fresh_name(name + "-first-" + std::to_string(i));
      rules_[first[i]] = f;
    }
    return "\"{\" ws " + (n ? first[0] + " " : std::string()) + "\"}\" ws";
  }

  std::string ref(const json& r, const std::string& ptr) {
    if (!r.is_string()) invalid("'$ref' must be a string", ptr);
    const std::string target = r.get<std::string>();
    auto known = refs_.find(target);
    if (known != refs_.end()) return known->second;
    if (target != "#" && target.rfind("#/$defs/", 0) != 0 && target.rfind("#/definitions/", 0) != 0)
      unsupported("'$ref' to '" + target + "' (only '#', '#/$defs/...' and '#/definitions/...')", ptr);
    const std::string pointer = target.substr(1);
    const json* sub = nullptr;
    try {
      sub = &root_.at(json::json_pointer(pointer));
    } catch (const std::exception&) {
      invalid("'$ref' target '" + target + "' does not exist", ptr);
    }
    const std::string hint = target == "#" ? "root-ref" : "def" + pointer.substr(pointer.find('/', 1));
    const std::string name = fresh_name(hint);
    refs_[target] = name;  // before recursing, so recursive definitions refer back to the rule
    rules_[name] = "";
    rules_[name] = expr(*sub, name, pointer);
    return name;
  }

  static std::string literal(const json& v) { return gbnf_literal(v.dump()) + " ws"; }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  std::set<std::string> used_{"root", "ws"};
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

std::string json_schema_to_gbnf(std::string_view schema_json) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_json);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorCode::InvalidArgument, std::string("JSON schema is not valid JSON: ") + e.what());
  }
  return json_schema_to_gbnf(schema);
}

}  // namespace cera
