#include "format/hf/hf_general.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

namespace cera::hf {

namespace {

bool has_lower_only(const std::string& w) {  // Python str.islower() on ASCII
  bool cased = false;
  for (unsigned char c : w) {
    if (std::isupper(c)) return false;
    if (std::islower(c)) cased = true;
  }
  return cased;
}

bool is_version_or_number(const std::string& w) {  // ^(v\d+(?:\.\d+)*|\d.*)$
  if (!w.empty() && std::isdigit((unsigned char)w[0])) return true;
  if (w.size() < 2 || w[0] != 'v') return false;
  bool need_digit = true;
  for (size_t i = 1; i < w.size(); ++i) {
    if (std::isdigit((unsigned char)w[i])) need_digit = false;
    else if (w[i] == '.' && !need_digit) need_digit = true;
    else return false;
  }
  return !need_digit;
}

std::string title(const std::string& w) {  // Python str.title() on ASCII
  std::string out = w;
  bool prev_letter = false;
  for (auto& ch : out) {
    const unsigned char c = (unsigned char)ch;
    if (std::isalpha(c)) ch = char(prev_letter ? std::tolower(c) : std::toupper(c));
    prev_letter = std::isalpha(c);
  }
  return out;
}

}  // namespace

std::string id_to_title(const std::string& id) {
  std::string s = id;
  for (auto& c : s)
    if (c == '-') c = ' ';
  std::istringstream in(s);
  std::string w, out;
  while (in >> w) {
    if (!out.empty()) out += ' ';
    out += has_lower_only(w) && !is_version_or_number(w) ? title(w) : w;
  }
  return out;
}

std::string model_name(const std::string& dir, const nlohmann::json& config) {
  // The model-name component of an "org/name" id; a folder name is used the same way.
  auto component = [](const std::string& id) {
    if (id.find(' ') != std::string::npos) return id;
    const auto slash = id.find('/');
    return slash == std::string::npos ? id : id.substr(slash + 1);
  };
  if (config.contains("_name_or_path") && config["_name_or_path"].is_string()) {
    const std::string id = config["_name_or_path"].get<std::string>();
    if (std::count(id.begin(), id.end(), '/') <= 1 && !id.empty()) return id_to_title(component(id));
  }
  std::filesystem::path p(dir);
  std::string base = p.filename().string();
  if (base.empty()) base = p.parent_path().filename().string();  // "dir/" has an empty filename
  return id_to_title(component(base));
}

std::string size_label(uint64_t n) {
  const double count = double(n);
  double scaled;
  char suffix;
  if (count > 1e12) scaled = count * 1e-12, suffix = 'T';
  else if (count > 1e9) scaled = count * 1e-9, suffix = 'B';
  else if (count > 1e6) scaled = count * 1e-6, suffix = 'M';
  else scaled = count * 1e-3, suffix = 'K';
  // Python: fix = max(2 - len(str(round(scaled)).lstrip('0')), 0), round() being half-to-even.
  const long long r = std::llrint(scaled);
  const int digits = r == 0 ? 0 : int(std::to_string(r).size());
  const int fix = std::max(2 - digits, 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%c", fix, scaled, suffix);
  return buf;
}

}  // namespace cera::hf
