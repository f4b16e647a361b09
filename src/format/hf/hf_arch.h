// Per-architecture knowledge for converting an HF folder: which GGUF architecture a config.json
// names, the {arch}.* keys llama.cpp's converter writes for it (MODELS.md §3.2, §4), and the HF ->
// GGUF tensor names (§3.3, §4). Supported: lfm2, llama (also Mistral dense), qwen2, qwen3, granite.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace cera::hf {

struct Arch {
  std::string name;            // GGUF architecture, e.g. "lfm2"
  nlohmann::json hp;           // config.json (text_config merged in) with the class defaults filled in
  int64_t n_layer = 0, n_head = 0, n_head_kv = 0;
  bool permute_qk = false;     // llama/granite: Q/K rows back to Meta's interleaved order

  // GGUF name of an HF tensor; "" for tensors the converter drops. Throws Error(Unsupported)
  // naming a tensor it cannot place.
  std::string gguf_name(const std::string& hf_name) const;
  // HF tensors the GGUF needs; a folder lacking one is rejected naming it.
  std::vector<std::string> required_tensors() const;
  // {arch}.* keys (TextModel.set_gguf_parameters + the arch's additions), general.file_type among them.
  void write_keys(gguf::Writer& w, uint32_t file_type) const;
};

// Reads config.json's "architectures" (throws Error(Unsupported) naming an unknown one).
Arch arch_from_config(const nlohmann::json& config, const std::string& config_path);

}  // namespace cera::hf
