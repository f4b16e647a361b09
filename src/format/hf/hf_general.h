// general.name and general.size_label as llama.cpp's converter derives them (gguf-py metadata.py,
// utility.py). Reproduced: the name from config.json "_name_or_path" (when it looks like a model
// id) or else the folder name, title-cased like Metadata.id_to_title; the size label from the
// parameter count. Not reproduced: README.md model-card fields, the basename / finetune / version
// / size-label split of the folder name, and generation_config.json sampling keys.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace cera::hf {

std::string id_to_title(const std::string& id);
std::string model_name(const std::string& dir, const nlohmann::json& config);
std::string size_label(uint64_t n_params);  // 4070000 -> "4.1M"

}  // namespace cera::hf
