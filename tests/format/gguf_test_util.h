// Helpers shared by the GGUF tests: a raw byte builder for hand-crafted (often broken) files, and
// the list of fixture GGUFs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cera/error.h"
#include "format/gguf.h"
#include "support/fixtures.h"

namespace cera::test {

// Appends little-endian fields; no validation, so tests can write anything.
class GgufBytes {
 public:
  std::vector<uint8_t> bytes;

  template <typename T>
  GgufBytes& put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return put(v); }
  GgufBytes& u32(uint32_t v) { return put(v); }
  GgufBytes& u64(uint64_t v) { return put(v); }
  GgufBytes& str(const std::string& s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  // magic, version, n_tensors, n_kv
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_string(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  GgufBytes& tensor_info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  GgufBytes& pad_to(size_t alignment, uint8_t fill = 0) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, fill);
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }
};

inline std::unique_ptr<gguf::File> open_bytes(const std::vector<uint8_t>& b, const std::string& name = "test.gguf") {
  return gguf::File::open_memory(b.data(), b.size(), name);
}

inline std::vector<std::string> fixture_ggufs() {
  std::vector<std::string> out;
  const std::filesystem::path models = fixtures_dir() + "/models";
  if (!std::filesystem::is_directory(models)) return out;
  for (const auto& model : std::filesystem::directory_iterator(models)) {
    const auto dir = model.path() / "gguf";
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& f : std::filesystem::directory_iterator(dir))
      if (f.path().extension() == ".gguf") out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<uint8_t> read_binary_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `fn`, expecting a cera::Error with `code` whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an error (" << error_code_name(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "got " << error_code_name(e.code()) << ": " << e.what();
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

}  // namespace cera::test
