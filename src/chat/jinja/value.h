// The interpreter's value type. Mirrors Python/Jinja semantics closely enough for chat templates:
// undefined is distinct from none (`is defined` vs `is none`), ints stay ints (so `{{ 3 }}` prints
// "3", not "3.0"), and lists/dicts are shared by reference like Python objects so that namespace
// attribute assignment is visible through every alias.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cera::chat::jinja {

// A template runtime error (type mismatch, bad argument). The interpreter adds the source position
// and turns it into cera::Error(InvalidArgument).
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void runtime_error(const std::string& message);

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using CallablePtr = std::shared_ptr<Callable>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int i) : kind_(Kind::Int), int_(i) {}
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}
  Value(double f) : kind_(Kind::Float), float_(f) {}
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), str_(s) {}
  Value(ListPtr l) : kind_(Kind::List), list_(std::move(l)) {}
  Value(DictPtr d) : kind_(Kind::Dict), dict_(std::move(d)) {}
  Value(CallablePtr c) : kind_(Kind::Callable), callable_(std::move(c)) {}
  static Value list(List items = {}) { return Value(std::make_shared<List>(std::move(items))); }
  static Value dict();
  static Value namespace_();

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_namespace() const;

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_float() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  Callable& as_callable() const { return *callable_; }

  bool truthy() const;              // Python truthiness; undefined is false
  std::string str() const;          // Python str(): what {{ x }} prints
  std::string repr() const;         // Python repr(): how items print inside str(list)
  const char* type_name() const;

  // JSON in/out. ordered_json keeps key order (tool schemas must serialize as given).
  static Value from_json(const nlohmann::ordered_json& j);
  nlohmann::ordered_json to_json() const;
  // Python json.dumps(..., ensure_ascii=False) with separators (", ", ": "), or (",", ": ") plus
  // newlines when indent >= 0 — what transformers' and @huggingface/jinja's tojson produce.
  std::string dump_json(int indent = -1) const;

 private:
  Kind kind_ = Kind::Undefined;
  int64_t int_ = 0;  // Bool and Int
  double float_ = 0;
  std::string str_;
  ListPtr list_;
  DictPtr dict_;
  CallablePtr callable_;
};

// Insertion-ordered string-keyed map; linear lookup is fine at chat-template sizes.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // only namespace() objects accept `set ns.attr = ...`

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument at position `pos` or named `name`, else `fallback`. Python-style binding.
  Value get(size_t pos, std::string_view name, Value fallback = {}) const;
  size_t size() const { return positional.size() + named.size(); }
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

inline bool Value::is_namespace() const { return kind_ == Kind::Dict && dict_->is_namespace; }

bool values_equal(const Value& a, const Value& b);  // Python ==
int compare_values(const Value& a, const Value& b);  // <0, 0, >0; throws for unordered types
std::string python_float_repr(double f);

// UTF-8 helpers: Jinja indexes strings by code point.
std::vector<std::string> utf8_chars(const std::string& s);

}  // namespace cera::chat::jinja
