// A Hugging Face model folder on disk: config.json, tokenizer files and safetensors weights
// (one file, or shards listed by model.safetensors.index.json). Only reading lives here; turning
// it into GGUF is hf_convert.h.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace cera::hf {

// True when `path` is a directory (an HF folder is a directory; a GGUF model is a file).
bool is_directory(const std::string& path);
bool is_file(const std::string& path);

// Parses a JSON file. Throws Error(NotFound) if absent, Error(BadFormat) naming it if malformed.
nlohmann::json read_json(const std::string& path);

// config.json of the folder; throws Error(NotFound) "DIR has no config.json" when missing.
nlohmann::json read_config(const std::string& dir);

// The weights of a folder, in the order llama.cpp's converter visits them: shard files sorted by
// name, each file's tensors sorted by name.
class Weights {
 public:
  static Weights open(const std::string& dir);  // throws Error naming the missing file / tensor
  const std::vector<const safetensors::TensorView*>& tensors() const { return order_; }
  const safetensors::TensorView* find(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::vector<const safetensors::TensorView*> order_;
};

}  // namespace cera::hf
