// Safetensors reader and writer. Layout: u64 header length N, N bytes of JSON, then the data
// section that every tensor's data_offsets index into.
#include "format/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "cera/error.h"
#include "common/fp16.h"
#include "format/write_file.h"

namespace cera::safetensors {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the Python library's limit

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::F64, "F64", 8}, {Dtype::F32, "F32", 4}, {Dtype::F16, "F16", 2}, {Dtype::BF16, "BF16", 2},
    {Dtype::I64, "I64", 8}, {Dtype::I32, "I32", 4}, {Dtype::I16, "I16", 2}, {Dtype::I8, "I8", 1},
    {Dtype::U8, "U8", 1},   {Dtype::BOOL, "BOOL", 1},
};

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the data section carries no alignment promise
  return v;
}

[[noreturn]] void fail_file(const std::string& path, ErrorCode code, const std::string& msg) {
  throw Error(code, path + ": " + msg);
}

}  // namespace

std::string_view dtype_name(Dtype d) {
  for (const auto& x : kDtypes)
    if (x.dtype == d) return x.name;
  return "?";
}

size_t dtype_size(Dtype d) {
  for (const auto& x : kDtypes)
    if (x.dtype == d) return x.size;
  return 0;
}

int64_t TensorView::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> TensorView::to_f32() const {
  const size_t n = nbytes / dtype_size(dtype);
  std::vector<float> out(n);
  switch (dtype) {
    case Dtype::F32: if (n) std::memcpy(out.data(), data, n * 4); break;
    case Dtype::F64: for (size_t i = 0; i < n; ++i) out[i] = float(load<double>(data + 8 * i)); break;
    case Dtype::F16: for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(data + 2 * i)); break;
    case Dtype::BF16: for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(data + 2 * i)); break;
    default:
      throw Error(ErrorCode::BadFormat, "safetensors tensor '" + name + "' has dtype " +
                                            std::string(dtype_name(dtype)) + ", expected a float dtype");
  }
  return out;
}

std::vector<int32_t> TensorView::to_i32() const {
  const size_t n = nbytes / dtype_size(dtype);
  std::vector<int32_t> out(n);
  switch (dtype) {
    case Dtype::I32: if (n) std::memcpy(out.data(), data, n * 4); break;
    case Dtype::I16: for (size_t i = 0; i < n; ++i) out[i] = load<int16_t>(data + 2 * i); break;
    case Dtype::I8: for (size_t i = 0; i < n; ++i) out[i] = load<int8_t>(data + i); break;
    case Dtype::U8: for (size_t i = 0; i < n; ++i) out[i] = data[i]; break;
    case Dtype::I64:
      for (size_t i = 0; i < n; ++i) {
        const int64_t v = load<int64_t>(data + 8 * i);
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
          throw Error(ErrorCode::OutOfRange, "safetensors tensor '" + name + "' element " + std::to_string(i) +
                                                 " = " + std::to_string(v) + " does not fit in int32");
        out[i] = int32_t(v);
      }
      break;
    default:
      throw Error(ErrorCode::BadFormat, "safetensors tensor '" + name + "' has dtype " +
                                            std::string(dtype_name(dtype)) + ", expected an integer dtype");
  }
  return out;
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

void File::parse() {
  using nlohmann::json;
  const std::string& path = map_.path();
  auto fail = [&](ErrorCode code, const std::string& msg) { fail_file(path, code, msg); };
  const size_t size = map_.size();
  if (size < 8) fail(ErrorCode::BadFormat, "too small for a safetensors file (" + std::to_string(size) + " bytes)");
  const uint64_t header_len = load<uint64_t>(map_.data());
  if (header_len > kMaxHeaderBytes)
    fail(ErrorCode::BadFormat, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail(ErrorCode::BadFormat, "header length " + std::to_string(header_len) + " exceeds the file size " +
                                   std::to_string(size));
  const char* header = reinterpret_cast<const char*>(map_.data() + 8);
  const uint8_t* data_section = map_.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  // nlohmann keeps the last of duplicate keys silently; a duplicate tensor name is a corrupt file.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json root;
  try {
    root = json::parse(header, header + header_len, on_event);
  } catch (const json::exception& e) {
    fail(ErrorCode::BadFormat, std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) fail(ErrorCode::BadFormat, "header is not a JSON object");
  if (!duplicate.empty()) fail(ErrorCode::BadFormat, "duplicate entry '" + duplicate + "' in the header");

  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(ErrorCode::BadFormat, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(ErrorCode::BadFormat, "__metadata__ value of '" + k + "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(ErrorCode::BadFormat, where + " entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || sh == entry.end() || off == entry.end())
      fail(ErrorCode::BadFormat, where + " needs dtype, shape and data_offsets");
    if (!dt->is_string()) fail(ErrorCode::BadFormat, where + " dtype is not a string");
    const auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) fail(ErrorCode::Unsupported, where + " has unsupported dtype '" + dt->get<std::string>() + "'");
    if (!sh->is_array()) fail(ErrorCode::BadFormat, where + " shape is not an array");
    TensorView t{name, *dtype, {}, nullptr, 0};
    uint64_t expected = dtype_size(*dtype);
    bool overflow = false;
    for (const auto& d : *sh) {
      // The parser stores non-negative integers as unsigned; anything else is not a valid extent.
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(ErrorCode::BadFormat, where + " shape has an entry that is not a non-negative integer");
      t.shape.push_back(int64_t(d.get<uint64_t>()));
      overflow |= __builtin_mul_overflow(expected, d.get<uint64_t>(), &expected);
    }
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      fail(ErrorCode::BadFormat, where + " data_offsets must be two non-negative integers");
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end)
      fail(ErrorCode::BadFormat, where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     "] begin after end");
    if (end > data_size)
      fail(ErrorCode::BadFormat, where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     "] run past the data section (" + std::to_string(data_size) + " bytes)");
    if (overflow || expected != end - begin)
      fail(ErrorCode::BadFormat, where + " holds " + std::to_string(end - begin) + " bytes but shape " + sh->dump() +
                                     " of " + std::string(dtype_name(*dtype)) + " needs " +
                                     (overflow ? std::string("more than 2^64") : std::to_string(expected)));
    t.data = data_section + begin;
    t.nbytes = size_t(end - begin);
    ranges.push_back({begin, end, tensors_.size()});
    tensors_.push_back(std::move(t));
  }

  // Present tensors in file order, and refuse tensors that share bytes.
  std::sort(ranges.begin(), ranges.end(), [&](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Empty tensors own no bytes, so they may sit anywhere.
  const Range* prev = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (prev && r.begin < prev->end)
      fail(ErrorCode::BadFormat, "tensors '" + tensors_[prev->index].name + "' and '" + tensors_[r.index].name +
                                     "' overlap");
    prev = &r;
  }
  std::vector<TensorView> ordered;
  ordered.reserve(tensors_.size());
  for (const Range& r : ranges) ordered.push_back(std::move(tensors_[r.index]));
  tensors_ = std::move(ordered);
}

const TensorView* File::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& File::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(ErrorCode::NotFound, path() + ": tensor '" + std::string(name) + "' is missing");
  return *t;
}

void Writer::add(std::string name, Dtype dtype, std::vector<int64_t> shape, const void* data, size_t nbytes) {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidArgument, "safetensors writer: tensor '" + name + "': " + why);
  };
  if (name == "__metadata__") fail("reserved name");
  for (const auto& e : entries_)
    if (e.name == name) fail("added twice");
  uint64_t expected = dtype_size(dtype);
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) fail("negative dimension");
    overflow |= __builtin_mul_overflow(expected, uint64_t(d), &expected);
  }
  if (overflow || expected != nbytes)
    fail("got " + std::to_string(nbytes) + " bytes, the shape needs " + std::to_string(expected));
  const auto* b = static_cast<const uint8_t*>(data);
  entries_.push_back({std::move(name), dtype, std::move(shape), std::vector<uint8_t>(b, b + nbytes)});
}

void Writer::add_f32(std::string name, std::vector<int64_t> shape, const float* data) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d < 0 ? 0 : d);
  add(std::move(name), Dtype::F32, std::move(shape), data, n * sizeof(float));
}

void Writer::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

std::vector<uint8_t> Writer::to_bytes() const {
  // Like the Python library: larger dtypes first, then by name, so every tensor starts at a
  // multiple of its element size (the data section itself starts 8-byte aligned).
  std::vector<const Entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    nlohmann::ordered_json entry;
    entry["dtype"] = std::string(dtype_name(e->dtype));
    entry["shape"] = e->shape;
    entry["data_offsets"] = {offset, offset + e->bytes.size()};
    header[e->name] = std::move(entry);
    offset += e->bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the Python library pads with spaces

  std::vector<uint8_t> out(8 + text.size());
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  out.reserve(out.size() + offset);
  for (const Entry* e : order) out.insert(out.end(), e->bytes.begin(), e->bytes.end());
  return out;
}

void Writer::write(const std::string& path) const { write_file(path, to_bytes()); }

}  // namespace cera::safetensors
