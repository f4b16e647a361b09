// Flags shared by the commands that load a model, named as in llama.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cera/engine.h"

namespace cera::cli {

struct ModelFlags {
  EngineOptions engine;
};

void add_model_flags(CLI::App& cmd, ModelFlags& flags, bool model_required = true);
// Reads a text file whole (for -f); throws cera::Error(NotFound/Io).
std::string read_file(const std::string& path);
// "1,2,3" -> ids; throws cera::Error(InvalidArgument) naming the bad element.
std::vector<int32_t> parse_token_ids(const std::string& list);

}  // namespace cera::cli
