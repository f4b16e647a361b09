// Where a model comes from: `-m` takes a GGUF file or a Hugging Face folder. A folder is converted
// in memory (stored float type kept) into the GGUF image llama.cpp's converter would write, so
// everything downstream loads one format.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"

namespace cera {

// Throws cera::Error naming the problem (missing file, not a model folder, conversion errors).
std::unique_ptr<gguf::File> open_model_file(const std::string& path);

}  // namespace cera
