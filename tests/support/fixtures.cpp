#include "support/fixtures.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cera::test {

std::string fixtures_dir() {
  const char* env = std::getenv("CERA_FIXTURES");
  std::string dir = env && *env ? env : CERA_FIXTURES_DIR;
  if (!std::filesystem::is_directory(dir)) {
    ADD_FAILURE() << "reference fixtures not found at " << dir
                  << " (set CERA_FIXTURES to the shared/fixtures folder)";
  }
  return dir;
}

std::string fixture_path(const std::string& relative) { return fixtures_dir() + "/" + relative; }

std::string source_path(const std::string& relative) { return std::string(CERA_SOURCE_DIR) + "/" + relative; }

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace cera::test
