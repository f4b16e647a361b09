// Python str operations on UTF-8 strings, shared by filters and string methods. Case mapping is
// ASCII-only (non-ASCII letters pass through unchanged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cera::chat::jinja::text {

// strip/lstrip/rstrip: `chars` empty means whitespace; otherwise the set of code points to strip.
std::string strip(const std::string& s, const std::string& chars, bool left, bool right, bool whitespace);
std::string upper(std::string s);
std::string lower(std::string s);
std::string title(const std::string& s);       // "hello world" -> "Hello World"
std::string capitalize(const std::string& s);  // "hELLO" -> "Hello"
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1);
// str.split(): sep empty with whitespace=true splits on whitespace runs and drops empties.
std::vector<std::string> split(const std::string& s, const std::string& sep, bool whitespace, int64_t maxsplit = -1);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);
size_t length(const std::string& s);  // in code points

}  // namespace cera::chat::jinja::text
