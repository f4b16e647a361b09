// Where the reference fixtures live: $CERA_FIXTURES, else ../shared/fixtures next to the source tree.
#pragma once

#include <string>

namespace cera::test {

std::string fixtures_dir();                                   // fails the test if missing
std::string fixture_path(const std::string& relative);        // fixtures_dir() + "/" + relative
std::string source_path(const std::string& relative);         // project source tree
std::string read_text_file(const std::string& path);

}  // namespace cera::test
