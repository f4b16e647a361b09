// Jinja tests (`value is name(args)`).
#include <cmath>

#include "chat/jinja/builtins.h"
#include "chat/jinja/text.h"

namespace cera::chat::jinja {

namespace {

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_number(const Value& v, const CallArgs&) { return v.is_number() || v.is_bool(); }  // Python: bool is a Number
bool t_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_dict(); }
bool t_iterable(const Value& v, const CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); }
bool t_sequence(const Value& v, const CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); }
bool t_callable(const Value& v, const CallArgs&) { return v.is_callable(); }
bool t_lower(const Value& v, const CallArgs&) { return v.is_string() && text::lower(v.as_string()) == v.as_string(); }
bool t_upper(const Value& v, const CallArgs&) { return v.is_string() && text::upper(v.as_string()) == v.as_string(); }

const Value& arg0(const CallArgs& a, const char* test) {
  if (a.positional.empty()) runtime_error(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}
bool t_eq(const Value& v, const CallArgs& a) { return values_equal(v, arg0(a, "eq")); }
bool t_ne(const Value& v, const CallArgs& a) { return !values_equal(v, arg0(a, "ne")); }
bool t_lt(const Value& v, const CallArgs& a) { return compare_values(v, arg0(a, "lt")) < 0; }
bool t_le(const Value& v, const CallArgs& a) { return compare_values(v, arg0(a, "le")) <= 0; }
bool t_gt(const Value& v, const CallArgs& a) { return compare_values(v, arg0(a, "gt")) > 0; }
bool t_ge(const Value& v, const CallArgs& a) { return compare_values(v, arg0(a, "ge")) >= 0; }
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_list()) return &v.as_list() == &o.as_list();
  if (v.is_dict()) return &v.as_dict() == &o.as_dict();
  return values_equal(v, o);
}
bool t_in(const Value& v, const CallArgs& a) {
  const Value& c = arg0(a, "in");
  if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
  if (c.is_dict()) return v.is_string() && c.as_dict().find(v.as_string()) != nullptr;
  for (const auto& x : iterate(c)) if (values_equal(v, x)) return true;
  return false;
}

int64_t need_int(const Value& v, const char* test) {
  if (!v.is_int() && !v.is_bool()) runtime_error(std::string("test '") + test + "' expects an integer");
  return v.as_int();
}
bool t_odd(const Value& v, const CallArgs&) { return need_int(v, "odd") % 2 != 0; }
bool t_even(const Value& v, const CallArgs&) { return need_int(v, "even") % 2 == 0; }
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const int64_t d = need_int(arg0(a, "divisibleby"), "divisibleby");
  if (d == 0) runtime_error("divisibleby 0");
  return need_int(v, "divisibleby") % d == 0;
}

struct Entry {
  const char* name;
  TestFn fn;
};
constexpr Entry kTests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},           {"even", t_even},
    {"false", t_false},     {"float", t_float},       {"ge", t_ge},           {"gt", t_gt},
    {"greaterthan", t_gt},  {"in", t_in},             {"integer", t_integer}, {"iterable", t_iterable},
    {"le", t_le},           {"lessthan", t_lt},       {"lower", t_lower},     {"lt", t_lt},
    {"mapping", t_mapping}, {"ne", t_ne},             {"none", t_none},       {"number", t_number},
    {"odd", t_odd},         {"sameas", t_sameas},     {"sequence", t_sequence}, {"string", t_string},
    {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& e : kTests)
    if (name == e.name) return e.fn;
  return nullptr;
}

}  // namespace cera::chat::jinja
