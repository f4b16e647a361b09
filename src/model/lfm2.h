#pragma once

#include <memory>

#include "model/model.h"

namespace cera {

std::unique_ptr<Model> make_lfm2_model(const gguf::File& file, Backend& backend, const ModelOptions& options);

}  // namespace cera
