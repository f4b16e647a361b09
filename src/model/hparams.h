// Hyper-parameters common to the transformer families, read from `{arch}.*` GGUF keys with the
// defaults llama.cpp uses (MODELS.md §3.2, §4).
#pragma once

#include "format/gguf.h"
#include "model/model.h"

namespace cera {

ModelHparams read_common_hparams(const gguf::File& file, const std::string& arch);

}  // namespace cera
