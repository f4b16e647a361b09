// Looks up a model's tensors in a GGUF file by name, checks their shapes, and hands them to the
// backend. Errors name the tensor and what was expected.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "format/gguf.h"

namespace cera {

class WeightLoader {
 public:
  // Tells the backend how many weight bytes are coming (Backend::reserve_weights).
  WeightLoader(const gguf::File& file, Backend& backend);

  // A tensor with shape ne (ggml order, ne[0] contiguous). A matrix {K, N} becomes N rows of K.
  Tensor get(const std::string& name, std::initializer_list<int64_t> ne) const;
  std::optional<Tensor> get_optional(const std::string& name, std::initializer_list<int64_t> ne) const;
  // Norm weights, conv kernels, biases: must be F32 (as every converter writes them).
  Tensor get_f32(const std::string& name, std::initializer_list<int64_t> ne) const;
  std::optional<Tensor> get_f32_optional(const std::string& name, std::initializer_list<int64_t> ne) const;
  // Optional F32 vectors (name, length) as one row, back to back, a missing one as zeros (qwen2's q,
  // k and v biases over the [q | k | v] product: one add instead of three); nullopt when all are
  // missing. `storage` holds the row's host copy and must outlive the tensor (the CPU backend reads
  // weights in place).
  std::optional<Tensor> get_f32_concat_optional(std::initializer_list<std::pair<std::string, int64_t>> parts,
                                                std::vector<float>& storage) const;

  const gguf::File& file() const { return file_; }

 private:
  // Tensor `name` if the file has it (nullptr otherwise), its shape checked against ne (missing
  // dimensions 1).
  const gguf::TensorInfo* find_checked(const std::string& name, std::initializer_list<int64_t> ne) const;
  // Throws unless tensor `name`'s type is F32.
  void require_f32(const std::string& name, GgmlType type) const;

  const gguf::File& file_;
  Backend& backend_;
};

}  // namespace cera
