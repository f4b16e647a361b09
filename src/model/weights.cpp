#include "model/weights.h"

#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "cera/error.h"

namespace cera {
namespace {

std::string shape_string(const int64_t* ne, size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

}  // namespace

WeightLoader::WeightLoader(const gguf::File& file, Backend& backend) : file_(file), backend_(backend) {
  size_t bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) bytes += backend_.weight_bytes(t.type, t.ne[1] * t.ne[2] * t.ne[3], t.ne[0]);
  backend_.reserve_weights(bytes, file.tensors().size());
}

const gguf::TensorInfo* WeightLoader::find_checked(const std::string& name, std::initializer_list<int64_t> ne) const {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (!info) return nullptr;
  std::vector<int64_t> want(ne);
  want.resize(4, 1);
  for (size_t i = 0; i < 4; ++i) {
    if (info->ne[i] != want[i])
      throw Error(ErrorCode::BadFormat, file_.path() + ": tensor '" + name + "' has shape " +
                                            shape_string(info->ne.data(), size_t(info->n_dims)) + ", expected " +
                                            shape_string(ne.begin(), ne.size()));
  }
  return info;
}

void WeightLoader::require_f32(const std::string& name, GgmlType type) const {
  if (type != GgmlType::F32)
    throw Error(ErrorCode::Unsupported, file_.path() + ": tensor '" + name + "' is " +
                                            std::string(ggml_type_name(type)) + ", expected f32");
}

std::optional<Tensor> WeightLoader::get_optional(const std::string& name, std::initializer_list<int64_t> ne) const {
  const gguf::TensorInfo* info = find_checked(name, ne);
  if (!info) return std::nullopt;
  if (!cpu::has_matmul_kernels(info->type))
    throw Error(ErrorCode::Unsupported, file_.path() + ": tensor '" + name + "' has type " +
                                            std::string(ggml_type_name(info->type)) +
                                            ", which cera cannot compute with yet");
  return backend_.upload_weight(info->type, info->ne[1] * info->ne[2] * info->ne[3], info->ne[0], info->data);
}

Tensor WeightLoader::get(const std::string& name, std::initializer_list<int64_t> ne) const {
  auto t = get_optional(name, ne);
  if (!t) throw Error(ErrorCode::NotFound, file_.path() + ": required tensor '" + name + "' is missing");
  return *t;
}

std::optional<Tensor> WeightLoader::get_f32_optional(const std::string& name,
                                                     std::initializer_list<int64_t> ne) const {
  auto t = get_optional(name, ne);
  if (t) require_f32(name, t->type);
  return t;
}

std::optional<Tensor> WeightLoader::get_f32_concat_optional(
    std::initializer_list<std::pair<std::string, int64_t>> parts, std::vector<float>& storage) const {
  int64_t n = 0;
  bool any = false;
  for (const auto& [name, len] : parts) {
    if (const gguf::TensorInfo* info = find_checked(name, {len})) {
      require_f32(name, info->type);
      any = true;
    }
    n += len;
  }
  if (!any) return std::nullopt;
  storage.assign(size_t(n), 0.0f);
  int64_t at = 0;
  for (const auto& [name, len] : parts) {
    if (const gguf::TensorInfo* info = file_.find_tensor(name))
      std::memcpy(storage.data() + at, info->data, size_t(len) * sizeof(float));
    at += len;
  }
  return backend_.upload_weight(GgmlType::F32, 1, n, storage.data());
}

Tensor WeightLoader::get_f32(const std::string& name, std::initializer_list<int64_t> ne) const {
  auto t = get_f32_optional(name, ne);
  if (!t) throw Error(ErrorCode::NotFound, file_.path() + ": required tensor '" + name + "' is missing");
  return *t;
}

}  // namespace cera
