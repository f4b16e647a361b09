#include "format/hf/hf_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cera/error.h"

namespace cera::hf {

namespace fs = std::filesystem;

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::NotFound, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(ErrorCode::BadFormat, path + " is not valid JSON");
  return j;
}

nlohmann::json read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!is_file(path)) throw Error(ErrorCode::NotFound, dir + ": not a model folder (no config.json)");
  auto j = read_json(path);
  if (!j.is_object()) throw Error(ErrorCode::BadFormat, path + ": expected a JSON object");
  return j;
}

Weights Weights::open(const std::string& dir) {
  Weights w;
  std::vector<std::string> parts;
  const std::string index_path = dir + "/model.safetensors.index.json";
  nlohmann::json weight_map;
  if (is_file(index_path)) {
    const auto index = read_json(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error(ErrorCode::BadFormat, index_path + ": no weight_map object");
    weight_map = index["weight_map"];
    std::set<std::string> unique;
    for (const auto& [name, file] : weight_map.items()) {
      if (!file.is_string()) throw Error(ErrorCode::BadFormat, index_path + ": weight_map[" + name + "] is not a file name");
      unique.insert(file.get<std::string>());
    }
    parts.assign(unique.begin(), unique.end());  // std::set: sorted, as the converter sorts them
    for (const auto& p : parts)
      if (!is_file(dir + "/" + p))
        throw Error(ErrorCode::NotFound, index_path + " lists weight file " + p + ", which is missing");
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("model") && n.ends_with(".safetensors")) parts.push_back(n);
    }
    std::sort(parts.begin(), parts.end());
    if (parts.empty()) throw Error(ErrorCode::NotFound, dir + ": no model*.safetensors weights");
  }
  for (const auto& p : parts) {
    w.files_.push_back(safetensors::File::open(dir + "/" + p));
    std::vector<const safetensors::TensorView*> ts;
    for (const auto& t : w.files_.back()->tensors()) ts.push_back(&t);
    std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->name < b->name; });
    w.order_.insert(w.order_.end(), ts.begin(), ts.end());
  }
  // Every tensor the index promises must be in its file (a truncated download shows up here).
  for (const auto& [name, file] : weight_map.items()) {
    const auto* t = w.find(name);
    if (!t) throw Error(ErrorCode::NotFound, index_path + " lists tensor " + name + " in " + file.get<std::string>() + ", but it is not there");
  }
  return w;
}

const safetensors::TensorView* Weights::find(const std::string& name) const {
  for (const auto* t : order_)
    if (t->name == name) return t;
  return nullptr;
}

}  // namespace cera::hf
