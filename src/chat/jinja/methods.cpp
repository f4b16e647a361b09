// Item access, iteration and the Python methods templates call on str / dict / list values.
#include <cctype>
#include <cstdlib>

#include "chat/jinja/builtins.h"
#include "chat/jinja/text.h"

namespace cera::chat::jinja {

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!key.is_string()) {
      const Value* v = obj.as_dict().find(key.str());  // literal dicts stringify non-string keys
      return v ? *v : Value();
    }
    const Value* v = obj.as_dict().find(key.as_string());
    return v ? *v : Value();
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const auto chars = utf8_chars(obj.as_string());
    const int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return Value(chars[static_cast<size_t>(i)]);
  }
  return Value();
}

Value get_attribute_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t pos = 0;
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    char* end = nullptr;
    const long long idx = std::strtoll(part.c_str(), &end, 10);
    if (!part.empty() && *end == '\0' && cur.is_list()) cur = get_item(cur, Value(static_cast<int64_t>(idx)));
    else cur = get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.as_list();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& [k, x] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (auto& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default: runtime_error(std::string("a ") + v.type_name() + " is not iterable");
  }
}

namespace {

std::string str_arg(const CallArgs& a, size_t pos, const char* name, const char* method) {
  Value v = a.get(pos, name);
  if (!v.is_string()) runtime_error(std::string(method) + "() argument '" + name + "' must be a string, not " + v.type_name());
  return v.as_string();
}

// startswith/endswith accept a string or a tuple (list) of strings.
bool affix_match(const std::string& s, const Value& arg, bool prefix, const char* method) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) runtime_error(std::string(method) + "() argument must be a string or a list of strings");
    return prefix ? text::starts_with(s, x.as_string()) : text::ends_with(s, x.as_string());
  };
  if (arg.is_list()) {
    for (const auto& x : arg.as_list()) if (one(x)) return true;
    return false;
  }
  return one(arg);
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& a, bool* found) {
  *found = true;
  if (name == "startswith" || name == "endswith") return Value(affix_match(s, a.get(0, "prefix"), name == "startswith", name.c_str()));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Value chars = a.get(0, "chars");
    const bool ws = chars.is_undefined() || chars.is_none();
    if (!ws && !chars.is_string()) runtime_error(name + "() argument must be a string or none");
    return Value(text::strip(s, ws ? "" : chars.as_string(), name != "rstrip", name != "lstrip", ws));
  }
  if (name == "split" || name == "rsplit") {
    Value sep = a.get(0, "sep");
    Value maxsplit = a.get(1, "maxsplit", Value(int64_t{-1}));
    const bool ws = sep.is_undefined() || sep.is_none();
    if (!ws && (!sep.is_string() || sep.as_string().empty())) runtime_error("split() separator must be a non-empty string");
    if (name == "rsplit" && maxsplit.as_int() >= 0) runtime_error("rsplit() with maxsplit is not supported");
    List out;
    for (auto& p : text::split(s, ws ? "" : sep.as_string(), ws, maxsplit.as_int())) out.emplace_back(std::move(p));
    return Value::list(std::move(out));
  }
  if (name == "upper") return Value(text::upper(s));
  if (name == "lower") return Value(text::lower(s));
  if (name == "title") return Value(text::title(s));
  if (name == "capitalize") return Value(text::capitalize(s));
  if (name == "replace") {
    Value count = a.get(2, "count", Value(int64_t{-1}));
    return Value(text::replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"), count.as_int()));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string sub = str_arg(a, 0, "sub", name.c_str());
    const size_t hit = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (hit == std::string::npos) {
      if (name == "index") runtime_error("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(text::length(s.substr(0, hit))));
  }
  if (name == "count") {
    const std::string sub = str_arg(a, 0, "sub", "count");
    if (sub.empty()) return Value(static_cast<int64_t>(text::length(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& x : iterate(a.get(0, "iterable"))) {
      if (!first) out += s;
      first = false;
      if (!x.is_string()) runtime_error("join() expects strings, got " + std::string(x.type_name()));
      out += x.as_string();
    }
    return Value(std::move(out));
  }
  auto all_of = [&](auto pred) {
    if (s.empty()) return Value(false);
    for (char c : s) if (!pred(static_cast<unsigned char>(c))) return Value(false);
    return Value(true);
  };
  if (name == "isdigit") return all_of([](unsigned char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0; });
  if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0; });
  if (name == "isspace") return all_of([](unsigned char c) { return std::isspace(c) != 0; });
  if (name == "islower") return Value(s != text::upper(s) && s == text::lower(s));
  if (name == "isupper") return Value(s != text::lower(s) && s == text::upper(s));
  *found = false;
  return Value();
}

Value dict_method(const Value& d, const std::string& name, const CallArgs& a, bool* found) {
  *found = true;
  const Dict& dict = d.as_dict();
  if (name == "get") {
    Value key = a.get(0, "key");
    const Value* v = dict.find(key.is_string() ? key.as_string() : key.str());
    return v ? *v : a.get(1, "default", Value::none());
  }
  if (name == "items") {
    List out;
    for (const auto& [k, v] : dict.items) out.push_back(Value::list({Value(k), v}));
    return Value::list(std::move(out));
  }
  if (name == "keys") {
    List out;
    for (const auto& [k, v] : dict.items) out.emplace_back(k);
    return Value::list(std::move(out));
  }
  if (name == "values") {
    List out;
    for (const auto& [k, v] : dict.items) out.push_back(v);
    return Value::list(std::move(out));
  }
  *found = false;
  return Value();
}

}  // namespace

Value call_method(const Value& obj, const std::string& name, const CallArgs& args, bool* found) {
  *found = false;
  if (obj.is_string()) return string_method(obj.as_string(), name, args, found);
  if (obj.is_dict() && !obj.is_namespace()) return dict_method(obj, name, args, found);
  if (obj.is_list() && (name == "index" || name == "count")) {
    *found = true;
    const Value x = args.get(0, "value");
    int64_t n = 0;
    const auto& l = obj.as_list();
    for (size_t i = 0; i < l.size(); ++i) {
      if (!values_equal(l[i], x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") runtime_error("value is not in list");
    return Value(n);
  }
  return Value();
}

}  // namespace cera::chat::jinja
