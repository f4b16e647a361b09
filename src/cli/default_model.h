// The model `cera run` uses when -m is not given.
#pragma once

#include <string>

namespace cera::cli {

// $CERA_MODEL if set, else the default model shipped with this build.
std::string default_model_path();
std::string default_model_description();

}  // namespace cera::cli
