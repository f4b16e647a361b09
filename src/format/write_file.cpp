#include "format/write_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cera/error.h"

namespace cera {

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(ErrorCode::Io, path + ": cannot create: " + std::strerror(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed)
    throw Error(ErrorCode::Io, path + ": write failed: " + std::strerror(wrote ? errno : saved));
}

}  // namespace cera
