// Built-in filters, tests, methods of str/dict/list values and global functions. Each family lives
// in its own file (filters.cpp, tests.cpp, methods.cpp, globals.cpp); the interpreter looks them
// up by name and the parser uses has_filter/has_test to reject unknown names at parse time.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja/value.h"

namespace cera::chat::jinja {

using FilterFn = Value (*)(const Value& input, const CallArgs& args);
using TestFn = bool (*)(const Value& input, const CallArgs& args);

FilterFn find_filter(std::string_view name);  // null when unknown
TestFn find_test(std::string_view name);      // null when unknown
inline bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }
inline bool has_test(std::string_view name) { return find_test(name) != nullptr; }

// `obj.name(args)` for str, dict and list values; sets *found = false when there is no such method.
Value call_method(const Value& obj, const std::string& name, const CallArgs& args, bool* found);

// Jinja's getattr/getitem: d.key, d["key"], l[0], s[0] (negative indexes count from the end);
// missing -> undefined.
Value get_item(const Value& obj, const Value& key);
// obj.a.b style lookup used by map/selectattr/sort(attribute="a.b").
Value get_attribute_path(const Value& obj, const std::string& path);

// Items a for loop / filter iterates over: list items, dict keys, string characters.
List iterate(const Value& v);

}  // namespace cera::chat::jinja
