// GGUF v3 writer. Layout matches what llama.cpp and gguf-py write: header, metadata in insertion
// order, tensor infos, zero padding to the alignment, then each tensor's data zero-padded to the
// alignment (the last one too), offsets being the running padded sum.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "format/gguf.h"
#include "format/write_file.h"

namespace cera::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

[[noreturn]] void bad_value(const std::string& key, const std::string& why) {
  throw Error(ErrorCode::InvalidArgument, "gguf writer: key '" + key + "': " + why);
}

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}

  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) { out_.resize(align_up(out_.size(), alignment), 0); }

 private:
  std::vector<uint8_t>& out_;
};

// Writes one scalar of type t; `x` holds it widened (int64/uint64/double/bool/string).
class ValueEncoder {
 public:
  ValueEncoder(ByteSink& sink, const std::string& key) : sink_(sink), key_(key) {}

  void integer(ValueType t, int64_t s, uint64_t u, bool is_signed) {
    // Reject values that would silently wrap in the declared width.
    auto fits = [&](int64_t lo, uint64_t hi) {
      return is_signed ? (s >= lo && (s < 0 || uint64_t(s) <= hi)) : u <= hi;
    };
    auto as_u = [&] { return is_signed ? uint64_t(s) : u; };
    auto as_s = [&] { return is_signed ? s : int64_t(u); };
    switch (t) {
      case ValueType::UINT8: check(fits(0, 0xff)); sink_.put<uint8_t>(uint8_t(as_u())); break;
      case ValueType::INT8: check(fits(-128, 127)); sink_.put<int8_t>(int8_t(as_s())); break;
      case ValueType::UINT16: check(fits(0, 0xffff)); sink_.put<uint16_t>(uint16_t(as_u())); break;
      case ValueType::INT16: check(fits(-32768, 32767)); sink_.put<int16_t>(int16_t(as_s())); break;
      case ValueType::UINT32: check(fits(0, 0xffffffffu)); sink_.put<uint32_t>(uint32_t(as_u())); break;
      case ValueType::INT32:
        check(fits(std::numeric_limits<int32_t>::min(), uint64_t(std::numeric_limits<int32_t>::max())));
        sink_.put<int32_t>(int32_t(as_s()));
        break;
      case ValueType::UINT64: check(fits(0, std::numeric_limits<uint64_t>::max())); sink_.put<uint64_t>(as_u()); break;
      case ValueType::INT64:
        check(fits(std::numeric_limits<int64_t>::min(), uint64_t(std::numeric_limits<int64_t>::max())));
        sink_.put<int64_t>(as_s());
        break;
      default: bad_value(key_, "integer data for a " + std::string(value_type_name(t)) + " value");
    }
  }

  void scalar(ValueType t, const auto& x) {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, int64_t>) {
      integer(t, x, 0, true);
    } else if constexpr (std::is_same_v<X, uint64_t>) {
      integer(t, 0, x, false);
    } else if constexpr (std::is_same_v<X, double>) {
      if (t == ValueType::FLOAT32) sink_.put<float>(float(x));
      else if (t == ValueType::FLOAT64) sink_.put<double>(x);
      else bad_value(key_, "float data for a " + std::string(value_type_name(t)) + " value");
    } else if constexpr (std::is_same_v<X, bool>) {
      if (t != ValueType::BOOL) bad_value(key_, "bool data for a " + std::string(value_type_name(t)) + " value");
      sink_.put<uint8_t>(x ? 1 : 0);
    } else {
      if (t != ValueType::STRING) bad_value(key_, "string data for a " + std::string(value_type_name(t)) + " value");
      sink_.put_string(x);
    }
  }

  void value(const Value& v) {
    sink_.put<uint32_t>(uint32_t(v.type));
    if (!v.is_array()) {
      std::visit(
          [&](const auto& d) {
            using D = std::decay_t<decltype(d)>;
            if constexpr (requires { typename D::value_type; } && !std::is_same_v<D, std::string>)
              bad_value(key_, "array data for a scalar " + std::string(value_type_name(v.type)) + " value");
            else
              scalar(v.type, d);
          },
          v.data);
      return;
    }
    if (v.elem_type == ValueType::ARRAY) bad_value(key_, "arrays of arrays are not allowed");
    sink_.put<uint32_t>(uint32_t(v.elem_type));
    std::visit(
        [&](const auto& d) {
          using D = std::decay_t<decltype(d)>;
          if constexpr (requires { typename D::value_type; } && !std::is_same_v<D, std::string>) {
            sink_.put<uint64_t>(d.size());
            for (const auto& x : d) scalar(v.elem_type, typename D::value_type(x));
          } else {
            bad_value(key_, "scalar data for an array value");
          }
        },
        v.data);
  }

 private:
  void check(bool ok) {
    if (!ok) bad_value(key_, "integer value out of range for its type");
  }
  ByteSink& sink_;
  const std::string& key_;
};

}  // namespace

void Writer::set(std::string key, Value value) {
  if (key.empty()) throw Error(ErrorCode::InvalidArgument, "gguf writer: empty key");
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void Writer::set_string(std::string key, std::string v) {
  set(std::move(key), Value{ValueType::STRING, ValueType::UINT8, std::move(v)});
}
void Writer::set_u32(std::string key, uint32_t v) { set(std::move(key), Value{ValueType::UINT32, ValueType::UINT8, uint64_t(v)}); }
void Writer::set_i32(std::string key, int32_t v) { set(std::move(key), Value{ValueType::INT32, ValueType::UINT8, int64_t(v)}); }
void Writer::set_f32(std::string key, float v) { set(std::move(key), Value{ValueType::FLOAT32, ValueType::UINT8, double(v)}); }
void Writer::set_bool(std::string key, bool v) { set(std::move(key), Value{ValueType::BOOL, ValueType::UINT8, v}); }
void Writer::set_string_array(std::string key, std::vector<std::string> v) {
  set(std::move(key), Value{ValueType::ARRAY, ValueType::STRING, std::move(v)});
}
void Writer::set_i32_array(std::string key, const std::vector<int32_t>& v) {
  set(std::move(key), Value{ValueType::ARRAY, ValueType::INT32, std::vector<int64_t>(v.begin(), v.end())});
}
void Writer::set_f32_array(std::string key, const std::vector<float>& v) {
  set(std::move(key), Value{ValueType::ARRAY, ValueType::FLOAT32, std::vector<double>(v.begin(), v.end())});
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data, size_t nbytes) {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, "gguf writer: tensor '" + name + "': " + why);
  };
  if (name.empty()) fail("empty name");
  for (const auto& t : tensors_)
    if (t.name == name) fail("added twice");
  if (ne.empty() || ne.size() > 4) fail(std::to_string(ne.size()) + " dimensions (1..4 allowed)");
  const auto& traits = ggml_traits(type);
  uint64_t expected = 0;
  for (int64_t n : ne)
    if (n < 0) fail("negative dimension");
  if (ne[0] % traits.block_elems != 0) fail("ne[0] is not a multiple of the block size");
  bool overflow = __builtin_mul_overflow(uint64_t(ne[0] / traits.block_elems), uint64_t(traits.block_bytes), &expected);
  for (size_t d = 1; d < ne.size(); ++d) overflow |= __builtin_mul_overflow(expected, uint64_t(ne[d]), &expected);
  if (overflow || expected != nbytes)
    fail("got " + std::to_string(nbytes) + " bytes of data, the shape needs " + std::to_string(expected));
  const auto* bytes = static_cast<const uint8_t*>(data);
  tensors_.push_back({std::move(name), type, std::move(ne), std::vector<uint8_t>(bytes, bytes + nbytes)});
}

std::vector<uint8_t> Writer::to_bytes() const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, v] : kv_) {
    if (key != "general.alignment") continue;
    const uint64_t* a = std::get_if<uint64_t>(&v.data);
    if (v.type != ValueType::UINT32 || !a || *a == 0 || (*a & (*a - 1)) != 0)
      bad_value(key, "must be a uint32 non-zero power of two");
    alignment = *a;
  }

  std::vector<uint8_t> out;
  ByteSink sink(out);
  sink.put<uint32_t>(kMagic);
  sink.put<uint32_t>(kVersion);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    sink.put_string(key);
    ValueEncoder(sink, key).value(v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(uint32_t(t.ne.size()));
    for (int64_t n : t.ne) sink.put<uint64_t>(uint64_t(n));
    sink.put<uint32_t>(uint32_t(t.type));
    sink.put<uint64_t>(offset);
    offset += align_up(t.data.size(), alignment);
  }
  sink.pad_to(alignment);
  out.reserve(out.size() + offset);
  for (const auto& t : tensors_) {
    sink.put_bytes(t.data.data(), t.data.size());
    sink.pad_to(alignment);
  }
  return out;
}

void Writer::write(const std::string& path) const { write_file(path, to_bytes()); }

}  // namespace cera::gguf
