// Jinja filters (`value | name(args)`), the subset real chat templates use.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "chat/jinja/builtins.h"
#include "chat/jinja/text.h"

namespace cera::chat::jinja {

namespace {

const std::string& need_string(const Value& v, const char* filter) {
  if (!v.is_string()) runtime_error(std::string("filter '") + filter + "' expects a string, got " + v.type_name());
  return v.as_string();
}

Value f_trim(const Value& in, const CallArgs& a) {
  Value chars = a.get(0, "chars");
  const bool ws = chars.is_undefined() || chars.is_none();
  return Value(text::strip(in.str(), ws ? "" : need_string(chars, "trim"), true, true, ws));
}
Value f_upper(const Value& in, const CallArgs&) { return Value(text::upper(in.str())); }
Value f_lower(const Value& in, const CallArgs&) { return Value(text::lower(in.str())); }
Value f_title(const Value& in, const CallArgs&) { return Value(text::title(in.str())); }
Value f_capitalize(const Value& in, const CallArgs&) { return Value(text::capitalize(in.str())); }
Value f_string(const Value& in, const CallArgs&) { return Value(in.str()); }
Value f_safe(const Value& in, const CallArgs&) { return in; }

Value f_tojson(const Value& in, const CallArgs& a) {
  Value indent = a.get(0, "indent");
  int n = -1;
  if (indent.is_int()) n = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  else if (!indent.is_undefined() && !indent.is_none()) runtime_error("tojson indent must be an integer");
  return Value(in.dump_json(n));
}

Value f_length(const Value& in, const CallArgs&) {
  switch (in.kind()) {
    case Value::Kind::String: return Value(static_cast<int64_t>(text::length(in.as_string())));
    case Value::Kind::List: return Value(static_cast<int64_t>(in.as_list().size()));
    case Value::Kind::Dict: return Value(static_cast<int64_t>(in.as_dict().items.size()));
    case Value::Kind::Undefined: return Value(int64_t{0});
    default: runtime_error(std::string("object of type ") + in.type_name() + " has no length");
  }
}

Value f_join(const Value& in, const CallArgs& a) {
  Value sep = a.get(0, "d", Value(""));
  Value attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& x : iterate(in)) {
    if (!first) out += sep.str();
    first = false;
    out += (attr.is_undefined() ? x : get_attribute_path(x, attr.str())).str();
  }
  return Value(std::move(out));
}

Value f_replace(const Value& in, const CallArgs& a) {
  Value count = a.get(2, "count", Value::none());
  return Value(text::replace(in.str(), a.get(0, "old").str(), a.get(1, "new").str(),
                             count.is_int() ? count.as_int() : -1));
}

Value f_default(const Value& in, const CallArgs& a) {
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (in.is_undefined() || (boolean && !in.truthy())) return a.get(0, "default_value", Value(""));
  return in;
}

Value f_items(const Value& in, const CallArgs&) {
  if (in.is_undefined()) return Value::list();
  if (!in.is_dict()) runtime_error(std::string("filter 'items' expects a mapping, got ") + in.type_name());
  List out;
  for (const auto& [k, v] : in.as_dict().items) out.push_back(Value::list({Value(k), v}));
  return Value::list(std::move(out));
}

Value f_first(const Value& in, const CallArgs&) {
  List l = iterate(in);
  return l.empty() ? Value() : l.front();
}
Value f_last(const Value& in, const CallArgs&) {
  List l = iterate(in);
  return l.empty() ? Value() : l.back();
}
Value f_list(const Value& in, const CallArgs&) { return Value::list(iterate(in)); }
Value f_reverse(const Value& in, const CallArgs&) {
  if (in.is_string()) {
    auto c = utf8_chars(in.as_string());
    std::string out;
    for (auto it = c.rbegin(); it != c.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  List l = iterate(in);
  std::reverse(l.begin(), l.end());
  return Value::list(std::move(l));
}

Value f_int(const Value& in, const CallArgs& a) {
  Value def = a.get(0, "default", Value(int64_t{0}));
  switch (in.kind()) {
    case Value::Kind::Int: return in;
    case Value::Kind::Bool: return Value(in.as_int());
    case Value::Kind::Float: return std::isfinite(in.as_float()) ? Value(static_cast<int64_t>(in.as_float())) : def;
    case Value::Kind::String: {
      const std::string s = text::strip(in.as_string(), "", true, true, true);
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(v));
      const double d = std::strtod(s.c_str(), &end);  // Jinja's int() accepts "3.7" too
      if (!s.empty() && *end == '\0' && std::isfinite(d)) return Value(static_cast<int64_t>(d));
      return def;
    }
    default: return def;
  }
}

Value f_float(const Value& in, const CallArgs& a) {
  Value def = a.get(0, "default", Value(0.0));
  if (in.is_number() || in.is_bool()) return Value(in.as_float());
  if (in.is_string()) {
    const std::string s = text::strip(in.as_string(), "", true, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return def;
}

Value f_abs(const Value& in, const CallArgs&) {
  if (in.is_int() || in.is_bool()) return in.as_int() == INT64_MIN ? Value(-in.as_float()) : Value(static_cast<int64_t>(std::llabs(in.as_int())));
  if (in.is_float()) return Value(std::fabs(in.as_float()));
  runtime_error(std::string("bad operand type for abs(): ") + in.type_name());
}

Value f_round(const Value& in, const CallArgs& a) {
  if (!in.is_number() && !in.is_bool()) runtime_error(std::string("filter 'round' expects a number, got ") + in.type_name());
  const int64_t precision = a.get(0, "precision", Value(int64_t{0})).as_int();
  const std::string method = a.get(1, "method", Value("common")).str();
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = in.as_float() * scale;
  double r;
  if (method == "common") r = std::round(x);  // half away from zero, as Jinja's 'common'
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else runtime_error("round method must be 'common', 'ceil' or 'floor'");
  return Value(r / scale);
}

// select/reject/selectattr/rejectattr share the test application.
bool apply_test(const Value& v, const CallArgs& a, size_t test_pos, const char* filter) {
  Value test = a.get(test_pos, "test_name");
  if (test.is_undefined()) return v.truthy();
  if (!test.is_string()) runtime_error(std::string("filter '") + filter + "' expects a test name");
  TestFn fn = find_test(test.as_string());
  if (!fn) runtime_error("unknown test '" + test.as_string() + "'");
  CallArgs rest;
  for (size_t i = test_pos + 1; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
  return fn(v, rest);
}

Value select_impl(const Value& in, const CallArgs& a, bool by_attr, bool keep, const char* filter) {
  List out;
  std::string attr;
  if (by_attr) {
    Value at = a.get(0, "attribute");
    if (!at.is_string()) runtime_error(std::string("filter '") + filter + "' needs an attribute name");
    attr = at.as_string();
  }
  for (const auto& x : iterate(in)) {
    const Value v = by_attr ? get_attribute_path(x, attr) : x;
    if (apply_test(v, a, by_attr ? 1 : 0, filter) == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& in, const CallArgs& a) { return select_impl(in, a, false, true, "select"); }
Value f_reject(const Value& in, const CallArgs& a) { return select_impl(in, a, false, false, "reject"); }
Value f_selectattr(const Value& in, const CallArgs& a) { return select_impl(in, a, true, true, "selectattr"); }
Value f_rejectattr(const Value& in, const CallArgs& a) { return select_impl(in, a, true, false, "rejectattr"); }

Value f_map(const Value& in, const CallArgs& a) {
  List out;
  Value attr = a.get(99, "attribute");
  if (attr.is_string()) {
    Value def = a.get(99, "default");
    for (const auto& x : iterate(in)) {
      Value v = get_attribute_path(x, attr.as_string());
      out.push_back(v.is_undefined() && !def.is_undefined() ? def : v);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) runtime_error("filter 'map' needs a filter name or attribute=");
  FilterFn fn = find_filter(a.positional[0].as_string());
  if (!fn) runtime_error("unknown filter '" + a.positional[0].as_string() + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const auto& x : iterate(in)) out.push_back(fn(x, rest));
  return Value::list(std::move(out));
}

Value f_unique(const Value& in, const CallArgs& a) {
  Value attr = a.get(1, "attribute");
  List out, keys;
  for (const auto& x : iterate(in)) {
    Value k = attr.is_string() ? get_attribute_path(x, attr.as_string()) : x;
    bool seen = false;
    for (const auto& y : keys) if (values_equal(k, y)) { seen = true; break; }
    if (!seen) { keys.push_back(k); out.push_back(x); }
  }
  return Value::list(std::move(out));
}

Value f_sort(const Value& in, const CallArgs& a) {
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attr = a.get(2, "attribute");
  List l = iterate(in);
  auto key = [&](const Value& x) {
    Value k = attr.is_string() ? get_attribute_path(x, attr.as_string()) : x;
    if (!case_sensitive && k.is_string()) return Value(text::lower(k.as_string()));
    return k;
  };
  std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(key(x), key(y));
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(l));
}

Value f_dictsort(const Value& in, const CallArgs& a) {
  if (!in.is_dict()) runtime_error("filter 'dictsort' expects a mapping");
  const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  const bool by_value = a.get(1, "by", Value("key")).str() == "value";
  const bool reverse = a.get(2, "reverse", Value(false)).truthy();
  List l = f_items(in, {}).as_list();
  std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
    Value kx = x.as_list()[by_value ? 1 : 0], ky = y.as_list()[by_value ? 1 : 0];
    if (!case_sensitive && kx.is_string() && ky.is_string()) kx = Value(text::lower(kx.as_string())), ky = Value(text::lower(ky.as_string()));
    const int c = compare_values(kx, ky);
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(l));
}

Value minmax(const Value& in, const CallArgs& a, bool want_max) {
  List l = iterate(in);
  if (l.empty()) return Value();
  Value attr = a.get(1, "attribute");
  auto key = [&](const Value& x) { return attr.is_string() ? get_attribute_path(x, attr.as_string()) : x; };
  Value best = l[0];
  for (const auto& x : l) {
    const int c = compare_values(key(x), key(best));
    if (want_max ? c > 0 : c < 0) best = x;
  }
  return best;
}
Value f_min(const Value& in, const CallArgs& a) { return minmax(in, a, false); }
Value f_max(const Value& in, const CallArgs& a) { return minmax(in, a, true); }

Value f_sum(const Value& in, const CallArgs& a) {
  Value attr = a.get(0, "attribute");
  Value acc = a.get(1, "start", Value(int64_t{0}));
  for (const auto& x : iterate(in)) {
    Value v = attr.is_string() ? get_attribute_path(x, attr.as_string()) : x;
    if (!v.is_number() && !v.is_bool()) runtime_error(std::string("filter 'sum' cannot add a ") + v.type_name());
    acc = (acc.is_float() || v.is_float()) ? Value(acc.as_float() + v.as_float()) : Value(acc.as_int() + v.as_int());
  }
  return acc;
}

Value f_indent(const Value& in, const CallArgs& a) {
  Value width = a.get(0, "width", Value(int64_t{4}));
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  const std::string pad = width.is_string() ? width.as_string()
                                            : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  const auto lines = text::split(in.str(), "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool indent_this = (i > 0 || first) && (blank || !text::strip(lines[i], "", true, true, true).empty());
    if (indent_this) out += pad;
    out += lines[i];
  }
  return Value(std::move(out));
}

Value f_escape(const Value& in, const CallArgs&) {
  std::string out;
  for (char c : in.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_wordcount(const Value& in, const CallArgs&) {
  return Value(static_cast<int64_t>(text::split(in.str(), "", true).size()));
}

struct Entry {
  const char* name;
  FilterFn fn;
};
constexpr Entry kFilters[] = {
    {"abs", f_abs},           {"capitalize", f_capitalize}, {"count", f_length},     {"d", f_default},
    {"default", f_default},   {"dictsort", f_dictsort},     {"e", f_escape},         {"escape", f_escape},
    {"first", f_first},       {"float", f_float},           {"indent", f_indent},    {"int", f_int},
    {"items", f_items},       {"join", f_join},             {"last", f_last},        {"length", f_length},
    {"list", f_list},         {"lower", f_lower},           {"map", f_map},          {"max", f_max},
    {"min", f_min},           {"reject", f_reject},         {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse},   {"round", f_round},           {"safe", f_safe},        {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort},         {"string", f_string},    {"sum", f_sum},
    {"title", f_title},       {"tojson", f_tojson},         {"trim", f_trim},        {"unique", f_unique},
    {"upper", f_upper},       {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& e : kFilters)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace cera::chat::jinja
