#include "chat/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace cera::chat::jinja {

void runtime_error(const std::string& message) { throw RuntimeError(message); }

Value Value::dict() { return Value(std::make_shared<Dict>()); }

Value Value::namespace_() {
  auto d = std::make_shared<Dict>();
  d->is_namespace = true;
  return Value(std::move(d));
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) { old = std::move(v); return; }
  items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t pos, std::string_view name, Value fallback) const {
  if (pos < positional.size()) return positional[pos];
  for (const auto& [k, v] : named)
    if (k == name) return v;
  return fallback;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0.0;
    case Kind::String: return !str_.empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    case Kind::Callable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "none";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::List: return "list";
    case Kind::Dict: return dict_->is_namespace ? "namespace" : "dict";
    case Kind::Callable: return "callable";
  }
  return "?";
}

// Python's repr(float): the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), always with a ".0" when integral.
std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  // buf = [-]d.ddde[+-]XX
  std::string s = buf;
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t epos = s.find('e');
  int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += q; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  out += q;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& v, int indent, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined: case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double f = v.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(f);
      return;
    }
    case Value::Kind::String: json_string(out, v.as_string()); return;
    case Value::Kind::List: {
      const auto& l = v.as_list();
      if (l.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        dump(out, l[i], indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      const auto& items = v.as_dict().items;
      if (items.empty()) { out += "{}"; return; }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_string(out, items[i].first);
        out += ": ";
        dump(out, items[i].second, indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Callable: runtime_error("a " + std::string(v.type_name()) + " is not JSON serializable");
  }
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String: return repr_string(str_);
    case Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += repr_string(dict_->items[i].first) + ": " + dict_->items[i].second.repr();
      }
      return out + "}";
    }
    default: return str();
  }
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float_repr(float_);
    case Kind::String: return str_;
    case Kind::List: case Kind::Dict: return repr();
    case Kind::Callable: return "<callable " + callable_->name + ">";
  }
  return "";
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = dict();
      for (const auto& [k, e] : j.items()) d.as_dict().items.emplace_back(k, from_json(e));
      return d;
    }
    default: return Value();  // binary / discarded: nothing a template can use
  }
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return nullptr;
    case Kind::Bool: return int_ != 0;
    case Kind::Int: return int_;
    case Kind::Float: return float_;
    case Kind::String: return str_;
    case Kind::List: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : *list_) a.push_back(e.to_json());
      return a;
    }
    case Kind::Dict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, e] : dict_->items) o[k] = e.to_json();
      return o;
    }
    case Kind::Callable: runtime_error("a callable is not JSON serializable");
  }
  return nullptr;
}

std::string Value::dump_json(int indent) const {
  std::string out;
  dump(out, *this, indent, 0);
  return out;
}

bool values_equal(const Value& a, const Value& b) {
  // bool, int and float compare numerically, as in Python (True == 1).
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined: case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size() || x.is_namespace || y.is_namespace) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !values_equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::Callable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b) {
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (int c = compare_values(x[i], y[i])) return c;
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  runtime_error(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;  // truncated sequence: keep the byte alone
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace cera::chat::jinja
