// A read-only memory map of a whole file. Model weights are read straight from the map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cera {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error(Io/NotFound)
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // A view of bytes the caller keeps alive for the object's lifetime (tests, fuzzing, data already
  // in memory). Nothing is mapped or freed; `name` stands in for the path in error messages.
  static MappedFile borrow(const void* data, size_t size, std::string name);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // true when data_ came from mmap and must be unmapped

  MappedFile() = default;
  void release() noexcept;
};

}  // namespace cera
