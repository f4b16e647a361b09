#pragma once

#include <memory>

#include "model/model.h"

namespace cera {

// The dense pre-norm transformer families of MODELS.md §4: llama, qwen2, qwen3, granite.
std::unique_ptr<Model> make_dense_model(const gguf::File& file, Backend& backend, const ModelOptions& options);

}  // namespace cera
