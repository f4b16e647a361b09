// Safetensors reader (mmap) and a small writer, used for reference logits, our own `cera logits`
// output and (later) Hugging Face weights. Header: u64 length + JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Validated like GGUF.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/mapped_file.h"

namespace cera::safetensors {

enum class Dtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
std::string_view dtype_name(Dtype d);
size_t dtype_size(Dtype d);

struct TensorView {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;  // PyTorch order (first = slowest)
  const uint8_t* data;
  size_t nbytes;
  int64_t n_elements() const;
  std::vector<float> to_f32() const;  // converts F32/F16/BF16/F64 (throws for integer dtypes)
  std::vector<int32_t> to_i32() const;  // converts I32/I64/I16/I8/U8
};

class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);  // throws cera::Error
  // Parses bytes already in memory (tests); the caller keeps `data` alive as long as the File.
  static std::unique_ptr<File> open_memory(const void* data, size_t size, std::string name);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;  // throws Error(NotFound)
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return map_.path(); }

 private:
  explicit File(MappedFile map) : map_(std::move(map)) {}
  void parse();
  MappedFile map_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes F32 (or any dtype given as raw bytes) tensors.
class Writer {
 public:
  void add(std::string name, Dtype dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  void add_f32(std::string name, std::vector<int64_t> shape, const float* data);
  void set_metadata(std::string key, std::string value);  // the "__metadata__" map
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws Error(Io)

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace cera::safetensors
