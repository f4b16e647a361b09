#include "format/hf/model_source.h"

#include "format/hf/hf_convert.h"
#include "format/hf/hf_folder.h"

namespace cera {

std::unique_ptr<gguf::File> open_model_file(const std::string& path) {
  if (!hf::is_directory(path)) return gguf::File::open(path);
  return gguf::File::open_owned(hf::convert(path, hf::OutType::kKeep).to_bytes(), path);
}

}  // namespace cera
