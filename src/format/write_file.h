// Writes a whole file at once; throws Error(Io) naming the path and the OS's reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace cera {

void write_file(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace cera
