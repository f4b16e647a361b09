// GGUF reader: validates the whole header against the file size before exposing anything.
#include "format/gguf.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

namespace cera::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMinKvBytes = 8 + 4;                  // empty key length + value type
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length + n_dims + type + offset

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}
bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 || t == ValueType::UINT64;
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// Bytes a scalar of this type occupies; strings count their length prefix only (the minimum).
size_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 4 + 8;
  }
  return 1;
}

std::string type_description(const Value& v) {
  if (!v.is_array()) return std::string(value_type_name(v.type));
  return "array of " + std::string(value_type_name(v.elem_type));
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

// Shortest text that reads back to the same value; float32 values print as floats.
std::string format_float(double v, bool as_f32) {
  char buf[64];
  auto res = as_f32 ? std::to_chars(buf, buf + sizeof buf, float(v)) : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// Bounds-checked little-endian cursor over the file bytes. `context_` names the key or tensor
// being read so that every error can say where it happened.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_context(std::string ctx) { context_ = std::move(ctx); }

  [[noreturn]] void fail(ErrorCode code, const std::string& msg) const {
    throw Error(code, path_ + ": " + (context_.empty() ? "" : context_ + ": ") + msg);
  }

  void need(size_t n, std::string_view what) const {
    if (n > remaining()) {
      fail(ErrorCode::BadFormat, "truncated " + std::string(what) + " at offset " + std::to_string(pos_) +
                                     ": needs " + std::to_string(n) + " bytes, only " +
                                     std::to_string(remaining()) + " left (file size " + std::to_string(size_) +
                                     ")");
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail(ErrorCode::BadFormat, std::string(what) + " length " + std::to_string(len) + " at offset " +
                                     std::to_string(pos_ - 8) + " exceeds the " + std::to_string(remaining()) +
                                     " bytes left in the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

  bool read_bool(std::string_view what) {
    const uint8_t b = read<uint8_t>(what);
    if (b > 1) fail(ErrorCode::BadFormat, "bool value " + std::to_string(b) + " is neither 0 nor 1");
    return b != 0;
  }

  ValueType read_value_type(std::string_view what) {
    const uint32_t t = read<uint32_t>(what);
    if (t > uint32_t(ValueType::FLOAT64)) fail(ErrorCode::BadFormat, "invalid value type " + std::to_string(t));
    return ValueType(t);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
  std::string context_;
};

int64_t read_signed(Cursor& c, ValueType t) {
  switch (t) {
    case ValueType::INT8: return c.read<int8_t>("int8 value");
    case ValueType::INT16: return c.read<int16_t>("int16 value");
    case ValueType::INT32: return c.read<int32_t>("int32 value");
    default: return c.read<int64_t>("int64 value");
  }
}
uint64_t read_unsigned(Cursor& c, ValueType t) {
  switch (t) {
    case ValueType::UINT8: return c.read<uint8_t>("uint8 value");
    case ValueType::UINT16: return c.read<uint16_t>("uint16 value");
    case ValueType::UINT32: return c.read<uint32_t>("uint32 value");
    default: return c.read<uint64_t>("uint64 value");
  }
}
double read_float(Cursor& c, ValueType t) {
  if (t == ValueType::FLOAT32) return c.read<float>("float32 value");
  return c.read<double>("float64 value");
}

// The count was checked against the bytes left, but elements widen in memory (a u8 becomes 8
// bytes, a string 32+), so reserve only up to a cap and let a lying count fail on the data.
template <typename T, typename ReadOne>
std::vector<T> read_elements(uint64_t count, ReadOne read_one) {
  constexpr uint64_t kMaxReserve = uint64_t(1) << 20;
  std::vector<T> out;
  out.reserve(size_t(std::min(count, kMaxReserve)));
  for (uint64_t i = 0; i < count; ++i) out.push_back(read_one());
  return out;
}

Value read_value(Cursor& c, ValueType type) {
  Value v;
  v.type = type;
  if (type == ValueType::ARRAY) {
    const uint32_t elem = c.read<uint32_t>("array element type");
    if (elem == uint32_t(ValueType::ARRAY)) c.fail(ErrorCode::BadFormat, "arrays of arrays are not allowed");
    if (elem > uint32_t(ValueType::FLOAT64))
      c.fail(ErrorCode::BadFormat, "invalid array element type " + std::to_string(elem));
    v.elem_type = ValueType(elem);
    const uint64_t count = c.read<uint64_t>("array count");
    // Reject before reserving: a corrupt count must not turn into a huge allocation.
    const size_t min_size = min_encoded_size(v.elem_type);
    if (count > c.remaining() / min_size) {
      c.fail(ErrorCode::BadFormat, "array count " + std::to_string(count) + " of " +
                                       std::string(value_type_name(v.elem_type)) + " elements exceeds the " +
                                       std::to_string(c.remaining()) + " bytes left in the file (each needs at least " +
                                       std::to_string(min_size) + ")");
    }
    const ValueType et = v.elem_type;
    if (is_integer(et) && is_unsigned(et)) {
      v.data = read_elements<uint64_t>(count, [&] { return read_unsigned(c, et); });
    } else if (is_integer(et)) {
      v.data = read_elements<int64_t>(count, [&] { return read_signed(c, et); });
    } else if (is_float(et)) {
      v.data = read_elements<double>(count, [&] { return read_float(c, et); });
    } else if (et == ValueType::BOOL) {
      v.data = read_elements<bool>(count, [&] { return c.read_bool("bool array element"); });
    } else {
      v.data = read_elements<std::string>(count, [&] { return c.read_string("string array element"); });
    }
    return v;
  }
  if (is_integer(type) && is_unsigned(type)) {
    v.data = read_unsigned(c, type);
  } else if (is_integer(type)) {
    v.data = read_signed(c, type);
  } else if (is_float(type)) {
    v.data = read_float(c, type);
  } else if (type == ValueType::BOOL) {
    v.data = c.read_bool("bool value");
  } else {
    v.data = c.read_string("string value");
  }
  return v;
}

std::string tensor_name_for_error(const std::string& name) {
  return "tensor '" + name + "'";
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "invalid";
}

size_t Value::array_size() const {
  if (!is_array()) return 0;
  return std::visit(
      [](const auto& d) -> size_t {
        using D = std::decay_t<decltype(d)>;
        if constexpr (requires { d.size(); } && !std::is_same_v<D, std::string>) return d.size();
        return 0;
      },
      data);
}

std::string Value::to_display_string(size_t max_elems) const {
  const bool f32 = (is_array() ? elem_type : type) == ValueType::FLOAT32;
  auto one = [&](const auto& x) -> std::string {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::string>) return quoted(x);
    else if constexpr (std::is_same_v<X, bool>) return x ? "true" : "false";
    else if constexpr (std::is_same_v<X, double>) return format_float(x, f32);
    else return std::to_string(x);
  };
  return std::visit(
      [&](const auto& d) -> std::string {
        using D = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<D, std::vector<bool>> || std::is_same_v<D, std::vector<int64_t>> ||
                      std::is_same_v<D, std::vector<uint64_t>> || std::is_same_v<D, std::vector<double>> ||
                      std::is_same_v<D, std::vector<std::string>>) {
          std::string out = "[";
          const size_t shown = std::min(d.size(), max_elems);
          for (size_t i = 0; i < shown; ++i) {
            if (i) out += ", ";
            out += one(typename D::value_type(d[i]));
          }
          if (shown < d.size()) out += (shown ? ", ... (" : "... (") + std::to_string(d.size()) + " total)";
          return out + "]";
        } else {
          return one(d);
        }
      },
      data);
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File(MappedFile(path)));
  f->parse();
  return f;
}

std::unique_ptr<File> File::open_memory(const void* data, size_t size, std::string name) {
  std::unique_ptr<File> f(new File(MappedFile::borrow(data, size, std::move(name))));
  f->parse();
  return f;
}

std::unique_ptr<File> File::open_owned(std::vector<uint8_t> bytes, std::string name) {
  // The vector's buffer does not move when the vector is moved into the File.
  const uint8_t* data = bytes.data();
  const size_t size = bytes.size();
  std::unique_ptr<File> f(new File(MappedFile::borrow(data, size, std::move(name))));
  f->owned_ = std::move(bytes);
  f->parse();
  return f;
}

void File::fail(ErrorCode code, const std::string& message) const { throw Error(code, path() + ": " + message); }

void File::parse() {
  const uint8_t* base = map_.data();
  const size_t size = map_.size();
  Cursor c(base, size, map_.path());

  if (size < 4) c.fail(ErrorCode::BadFormat, "not a GGUF file: only " + std::to_string(size) + " bytes");
  if (c.read<uint32_t>("magic") != kMagic) c.fail(ErrorCode::BadFormat, "not a GGUF file: bad magic");
  version_ = c.read<uint32_t>("version");
  if ((version_ & 0xFFFF) == 0 && version_ != 0) {
    c.fail(ErrorCode::Unsupported, "GGUF version field " + std::to_string(version_) +
                                       " looks byte-swapped: big-endian files are not supported");
  }
  if (version_ != 2 && version_ != 3) {
    c.fail(ErrorCode::Unsupported, "GGUF version " + std::to_string(version_) + " is not supported (only 2 and 3)");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");

  // Counts that cannot fit in the rest of the file are rejected before anything is allocated.
  const size_t left = c.remaining();
  if (n_kv > left / kMinKvBytes)
    c.fail(ErrorCode::BadFormat, "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                                     std::to_string(left) + " bytes left (each entry needs at least 12)");
  if (n_tensors > left / kMinTensorInfoBytes)
    c.fail(ErrorCode::BadFormat, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                     std::to_string(left) + " bytes left (each tensor info needs at least 24)");
  if (n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > left)
    c.fail(ErrorCode::BadFormat, std::to_string(n_kv) + " metadata entries and " + std::to_string(n_tensors) +
                                     " tensor infos cannot fit in the " + std::to_string(left) + " bytes left");

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.set_context("metadata entry #" + std::to_string(i));
    std::string key = c.read_string("key");
    if (key.empty()) c.fail(ErrorCode::BadFormat, "empty key");
    c.set_context("key '" + key + "'");
    if (kv_index_.count(key)) c.fail(ErrorCode::BadFormat, "duplicate key");
    const ValueType type = c.read_value_type("value type");
    Value value = read_value(c, type);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(value));
  }
  c.set_context("");

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      fail(ErrorCode::BadFormat, "key 'general.alignment' has type " + type_description(*a) + ", expected uint32");
    const uint64_t align = std::get<uint64_t>(a->data);
    if (align == 0 || (align & (align - 1)) != 0)
      fail(ErrorCode::BadFormat, "key 'general.alignment' = " + std::to_string(align) +
                                     " is not a non-zero power of two");
    alignment_ = size_t(align);
  } else {
    alignment_ = kDefaultAlignment;
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.set_context("tensor info #" + std::to_string(i));
    TensorInfo t;
    t.name = c.read_string("tensor name");
    if (t.name.empty()) c.fail(ErrorCode::BadFormat, "empty tensor name");
    c.set_context(tensor_name_for_error(t.name));
    if (tensor_index_.count(t.name)) c.fail(ErrorCode::BadFormat, "duplicate tensor name");
    const uint32_t n_dims = c.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > 4)
      c.fail(ErrorCode::BadFormat, "n_dims " + std::to_string(n_dims) + " is outside 1..4");
    t.n_dims = int(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("dimension");
      if (ne > uint64_t(std::numeric_limits<int64_t>::max()))
        c.fail(ErrorCode::BadFormat, "ne[" + std::to_string(d) + "] = " + std::to_string(int64_t(ne)) +
                                         " is negative");
      t.ne[d] = int64_t(ne);
    }
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const auto traits = ggml_type_traits(type_id);
    if (!traits) c.fail(ErrorCode::Unsupported, "unknown ggml type id " + std::to_string(type_id));
    t.type = traits->type;
    t.offset = c.read<uint64_t>("tensor offset");

    if (t.ne[0] % traits->block_elems != 0)
      c.fail(ErrorCode::BadFormat, "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                                       std::string(traits->name) + " block size " +
                                       std::to_string(traits->block_elems));
    // Element count and byte size must both fit: a corrupt shape must not overflow later maths.
    int64_t elems = 1;
    uint64_t nbytes = uint64_t(t.ne[0] / traits->block_elems);
    bool overflow = __builtin_mul_overflow(nbytes, uint64_t(traits->block_bytes), &nbytes);
    for (int d = 0; d < 4; ++d) overflow |= __builtin_mul_overflow(elems, t.ne[d], &elems);
    for (int d = 1; d < 4; ++d) overflow |= __builtin_mul_overflow(nbytes, uint64_t(t.ne[d]), &nbytes);
    if (overflow) c.fail(ErrorCode::BadFormat, "shape overflows 64-bit element or byte counts");
    t.nbytes = size_t(nbytes);
    if (t.offset % alignment_ != 0)
      c.fail(ErrorCode::BadFormat, "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                       std::to_string(alignment_));
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  c.set_context("");

  // pos <= size and alignment < 2^32, so this cannot overflow on a 64-bit size_t.
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;

  for (TensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(uint64_t(data_offset_), t.offset, &begin))
      fail(ErrorCode::BadFormat, tensor_name_for_error(t.name) + " data offset " + std::to_string(t.offset) +
                                     " lies past the end of the file (size " + std::to_string(size) + ")");
    if (__builtin_add_overflow(begin, uint64_t(t.nbytes), &end) || end > size)
      fail(ErrorCode::BadFormat, tensor_name_for_error(t.name) + " data [offset " + std::to_string(begin) + ", " +
                                     std::to_string(t.nbytes) + " bytes] runs past the end of the file (size " +
                                     std::to_string(size) + ")");
    t.data = base + begin;
  }
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Value& File::require(std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw Error(ErrorCode::NotFound, path() + ": required key '" + std::string(key) + "' is missing");
  return *v;
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v, std::string_view expected) {
  throw Error(ErrorCode::BadFormat, path + ": key '" + std::string(key) + "' has type " + type_description(v) +
                                        ", expected " + std::string(expected));
}

int64_t checked_int(const std::string& path, std::string_view key, uint64_t u) {
  if (u > uint64_t(std::numeric_limits<int64_t>::max()))
    throw Error(ErrorCode::BadFormat,
                path + ": key '" + std::string(key) + "' value " + std::to_string(u) + " does not fit in int64");
  return int64_t(u);
}

}  // namespace

std::string File::get_string(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::STRING) wrong_type(path(), key, v, "string");
  return std::get<std::string>(v.data);
}

int64_t File::get_int(std::string_view key) const {
  const Value& v = require(key);
  if (!is_integer(v.type)) wrong_type(path(), key, v, "an integer");
  if (is_unsigned(v.type)) return checked_int(path(), key, std::get<uint64_t>(v.data));
  return std::get<int64_t>(v.data);
}

double File::get_float(std::string_view key) const {
  const Value& v = require(key);
  if (is_float(v.type)) return std::get<double>(v.data);
  if (is_integer(v.type))
    return is_unsigned(v.type) ? double(std::get<uint64_t>(v.data)) : double(std::get<int64_t>(v.data));
  wrong_type(path(), key, v, "a number");
}

bool File::get_bool(std::string_view key) const {
  const Value& v = require(key);
  if (v.type != ValueType::BOOL) wrong_type(path(), key, v, "bool");
  return std::get<bool>(v.data);
}

std::optional<std::string> File::get_string_opt(std::string_view key) const {
  return has(key) ? std::optional(get_string(key)) : std::nullopt;
}
std::optional<int64_t> File::get_int_opt(std::string_view key) const {
  return has(key) ? std::optional(get_int(key)) : std::nullopt;
}
std::optional<double> File::get_float_opt(std::string_view key) const {
  return has(key) ? std::optional(get_float(key)) : std::nullopt;
}
std::optional<bool> File::get_bool_opt(std::string_view key) const {
  return has(key) ? std::optional(get_bool(key)) : std::nullopt;
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Value& v = require(key);
  if (!v.is_array() || v.elem_type != ValueType::STRING) wrong_type(path(), key, v, "array of string");
  return std::get<std::vector<std::string>>(v.data);
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value& v = require(key);
  if (!v.is_array() || !is_integer(v.elem_type)) wrong_type(path(), key, v, "array of integers");
  if (!is_unsigned(v.elem_type)) return std::get<std::vector<int64_t>>(v.data);
  std::vector<int64_t> out;
  const auto& u = std::get<std::vector<uint64_t>>(v.data);
  out.reserve(u.size());
  for (uint64_t x : u) out.push_back(checked_int(path(), key, x));
  return out;
}

std::vector<double> File::get_float_array(std::string_view key) const {
  const Value& v = require(key);
  if (!v.is_array() || !(is_float(v.elem_type) || is_integer(v.elem_type)))
    wrong_type(path(), key, v, "array of numbers");
  if (is_float(v.elem_type)) return std::get<std::vector<double>>(v.data);
  std::vector<double> out;
  if (is_unsigned(v.elem_type)) {
    for (uint64_t x : std::get<std::vector<uint64_t>>(v.data)) out.push_back(double(x));
  } else {
    for (int64_t x : std::get<std::vector<int64_t>>(v.data)) out.push_back(double(x));
  }
  return out;
}

std::vector<int64_t> File::get_int_per_layer(std::string_view key, size_t n_layer) const {
  const Value& v = require(key);
  if (!v.is_array()) {
    if (!is_integer(v.type)) wrong_type(path(), key, v, "an integer or an array of integers");
    return std::vector<int64_t>(n_layer, get_int(key));
  }
  std::vector<int64_t> values = get_int_array(key);
  if (values.size() != n_layer)
    throw Error(ErrorCode::BadFormat, path() + ": key '" + std::string(key) + "' has " +
                                          std::to_string(values.size()) + " entries, expected one per layer (" +
                                          std::to_string(n_layer) + ")");
  return values;
}

std::vector<int64_t> File::get_int_per_layer_or(std::string_view key, size_t n_layer, int64_t fallback) const {
  if (!has(key)) return std::vector<int64_t>(n_layer, fallback);
  return get_int_per_layer(key, n_layer);
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(ErrorCode::NotFound, path() + ": tensor '" + std::string(name) + "' is missing");
  return *t;
}

}  // namespace cera::gguf
