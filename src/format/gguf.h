// GGUF (v2/v3) reader over a memory map, and a writer. See ../shared/docs/MODELS.md §1.
//
// The reader validates everything before handing out a view: magic, version, counts, string
// lengths, value types, tensor dims/types/offsets/alignment and bounds. Any problem throws a
// cera::Error naming the file and the offending key or tensor; it never reads past the end.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cera/error.h"
#include "format/ggml_type.h"
#include "format/mapped_file.h"

namespace cera::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars are widened on read (integers to int64/uint64, floats to double);
// the stored type is kept so a writer can reproduce the file and `inspect` can print it.
struct Value {
  ValueType type = ValueType::UINT8;
  ValueType elem_type = ValueType::UINT8;  // for ARRAY
  std::variant<int64_t, uint64_t, double, bool, std::string,
               std::vector<int64_t>, std::vector<uint64_t>, std::vector<double>,
               std::vector<bool>, std::vector<std::string>>
      data;

  bool is_array() const { return type == ValueType::ARRAY; }
  size_t array_size() const;  // 0 for scalars
  std::string to_display_string(size_t max_elems = 8) const;  // for `cera inspect`
};

struct TensorInfo {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the contiguous axis
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;          // relative to the data blob
  const uint8_t* data = nullptr;  // into the map
  size_t nbytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return ggml_row_bytes(type, ne[0]); }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class File {
 public:
  // Opens and validates. Throws cera::Error (Io, NotFound, BadFormat, Unsupported).
  static std::unique_ptr<File> open(const std::string& path);
  // Parses bytes already in memory (tests, fuzzing). The caller keeps `data` alive as long as the
  // File; `name` stands in for the path in error messages.
  static std::unique_ptr<File> open_memory(const void* data, size_t size, std::string name);
  // Parses a GGUF image the File then owns (e.g. a Hugging Face folder converted in memory).
  static std::unique_ptr<File> open_owned(std::vector<uint8_t> bytes, std::string name);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return map_.size(); }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;  // nullptr if absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. The "required" forms throw Error(NotFound) naming the key when it is absent
  // and Error(BadFormat) when it has an incompatible type. Integer getters accept any integer
  // width (and reject values that do not fit); float getters accept f32/f64 and integers.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  std::optional<int64_t> get_int_opt(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;

  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  // A key that is either a scalar (same value for every layer) or an integer array of exactly
  // n_layer entries (llama.cpp get_key_or_arr): always returns n_layer values.
  std::vector<int64_t> get_int_per_layer(std::string_view key, size_t n_layer) const;
  std::vector<int64_t> get_int_per_layer_or(std::string_view key, size_t n_layer, int64_t fallback) const;

  // Tensors, in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent
  const TensorInfo& tensor(std::string_view name) const;       // throws Error(NotFound)

 private:
  explicit File(MappedFile map) : map_(std::move(map)) {}
  void parse();
  [[noreturn]] void fail(ErrorCode code, const std::string& message) const;  // prefixes the path
  const Value& require(std::string_view key) const;

  std::vector<uint8_t> owned_;  // the bytes map_ borrows, for open_owned
  MappedFile map_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes a GGUF v3 file: metadata in insertion order, tensors in insertion order, each tensor's
// data padded to the alignment (general.alignment if set as u32, else 32) — the layout llama.cpp's
// writer produces, so other tools load our files.
class Writer {
 public:
  void set(std::string key, Value value);  // replaces an existing key in place
  void set_string(std::string key, std::string v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string_array(std::string key, std::vector<std::string> v);
  void set_i32_array(std::string key, const std::vector<int32_t>& v);
  void set_f32_array(std::string key, const std::vector<float>& v);

  // data must hold ggml_row_bytes(type, ne[0]) * rows bytes; it is copied.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data, size_t nbytes);

  std::vector<uint8_t> to_bytes() const;      // the whole file; throws Error(InvalidArgument)
  void write(const std::string& path) const;  // throws Error(Io)

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace cera::gguf
