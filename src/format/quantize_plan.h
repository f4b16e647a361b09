// The quantization plan: which GGML type each tensor of a model gets for a target mix such as
// Q4_K_M. The policy follows llama-quantize (llama.cpp src/llama-quant.cpp) for the mixes cera
// writes, so `cera quantize` and llama-quantize produce files with the same per-tensor types:
//   * only 2-D+ tensors named *.weight are quantized; norms, the LFM2 shortconv.conv kernel and a
//     few other small tensors keep their source type;
//   * the LM head (output.weight, or token_embd.weight when the embeddings are tied) gets Q6_K;
//   * _M/_S/_L mixes give attn_v / ffn_down / attn_output more bits in some layers;
//   * a tensor whose row length does not fit the block size falls back to a type that fits.
// Everything here is a pure function of names, shapes and a few hyper-parameters.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/ggml_type.h"

namespace cera::gguf {
class File;
}

namespace cera::quant {

// Target mixes; the values are llama.cpp's llama_ftype (written to general.file_type).
enum class Mix : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9,
  Q2_K = 10, Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15,
  Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18, BF16 = 32,
};

struct MixInfo {
  Mix mix;
  std::string_view name;  // as llama-quantize spells it: "Q4_K_M"
  GgmlType base;          // the type most tensors get
  std::string_view description;
};

const std::vector<MixInfo>& all_mixes();  // in the order `cera quantize --help` lists them
const MixInfo& mix_info(Mix mix);
// Case-insensitive; accepts llama-quantize's aliases Q3_K / Q4_K / Q5_K for the _M mixes.
std::optional<Mix> mix_from_name(std::string_view name);
std::string mix_names_joined();  // "Q8_0, Q6_K, ..." for error messages

// The model-wide facts the policy looks at.
struct ModelFacts {
  std::string arch;             // general.architecture
  int n_layer = 0;              // {arch}.block_count
  int n_head = 0;               // layer 0 (llama.cpp's n_gqa() looks at layer 0)
  int n_head_kv = 0;            // layer 0; 0 for an LFM2 conv layer
  int n_expert = 0;             // {arch}.expert_count, 0 when absent
  bool tied_embeddings = true;  // no output.weight: token_embd.weight is also the LM head
  int n_attn_v = 0;             // attn_v-like tensors (attn_v, attn_qkv, attn_kv_b) in the model

  int n_gqa() const { return n_head_kv == 0 ? 0 : n_head / n_head_kv; }
};

struct TensorShape {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  GgmlType type = GgmlType::F32;  // source type; kept by tensors that are not quantized
};

struct PlanOptions {
  Mix mix = Mix::Q8_0;
  bool pure = false;  // every quantizable tensor gets the base type (still subject to fallback)
};

struct PlannedTensor {
  GgmlType type;
  bool quantize;  // false: copied as is (not a quantizable tensor, or already the target type)
  bool fallback;  // the row length did not fit the chosen type, so another type was used
};

// Whether llama-quantize would touch this tensor at all.
bool is_quantizable(const TensorShape& t);

// Facts from tensor names only (tied embeddings, attn_v count); the rest the caller fills in.
ModelFacts facts_from_tensors(const std::vector<TensorShape>& tensors);
// Facts from a GGUF file's metadata and tensor list.
ModelFacts facts_from_gguf(const gguf::File& file);

// The plan for every tensor, in the input order. Layer-position rules (attn_v, ffn_down) count
// tensors in llama.cpp's load order (by layer number, then name), so the result does not depend
// on how the input file orders its tensors.
std::vector<PlannedTensor> make_plan(const std::vector<TensorShape>& tensors, const ModelFacts& facts,
                                     const PlanOptions& options);

}  // namespace cera::quant
