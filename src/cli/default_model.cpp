#include "cli/default_model.h"

#include <cstdlib>
#include <filesystem>

#include "cera/error.h"

#ifndef CERA_DEFAULT_MODEL
#define CERA_DEFAULT_MODEL ""
#endif

namespace cera::cli {

std::string default_model_path() {
  if (const char* env = std::getenv("CERA_MODEL"); env && *env) return env;
  const std::string path = CERA_DEFAULT_MODEL;
  if (path.empty() || !std::filesystem::exists(path))
    throw Error(ErrorCode::NotFound, "no model given and the default model was not found at '" + path +
                                         "' (pass one with -m MODEL.gguf, or set CERA_MODEL)");
  return path;
}

std::string default_model_description() {
  return std::string("$CERA_MODEL, else ") + CERA_DEFAULT_MODEL;
}

}  // namespace cera::cli
