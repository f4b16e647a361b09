#include "format/hf/hf_convert.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>

#include "cera/error.h"
#include "format/hf/hf_arch.h"
#include "format/hf/hf_folder.h"
#include "format/hf/hf_general.h"
#include "format/hf/hf_tokenizer_keys.h"
#include "format/quant.h"

namespace cera::hf {

namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch order
  std::vector<float> data;
};

// GGUF row r of a llama Q/K projection is HF row (head, r%2 ? d/2 : 0) + r/2 within its head
// (LlamaModel.permute: reshape(n_head, 2, d/2, ...).swapaxes(1, 2)).
void permute_rows(Tensor& t, int64_t n_head) {
  const int64_t rows = t.shape[0];
  const int64_t cols = t.data.size() / size_t(rows);
  if (rows % (2 * n_head) != 0) throw Error(ErrorCode::BadFormat, t.name + ": rows not divisible into " + std::to_string(n_head) + " heads");
  const int64_t d = rows / n_head;
  std::vector<float> out(t.data.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = &t.data[size_t((h * d + j * (d / 2) + i) * cols)];
        std::copy(src, src + cols, &out[size_t((h * d + 2 * i + j) * cols)]);
      }
  t.data = std::move(out);
}

// Llama-3 RoPE scaling baked into rope_freqs.weight, computed in float32 like the converter's torch code.
Tensor llama3_rope_freqs(const Arch& a) {
  const nlohmann::json& rp = a.hp.contains("rope_parameters") && a.hp["rope_parameters"].is_object() ? a.hp["rope_parameters"] : a.hp["rope_scaling"];
  const double base = rp.contains("rope_theta") ? rp["rope_theta"].get<double>() : a.hp.value("rope_theta", 10000.0);
  const int64_t dim = a.hp.contains("head_dim") ? a.hp["head_dim"].get<int64_t>() : a.hp.at("hidden_size").get<int64_t>() / a.n_head;
  const float factor = float(rp.value("factor", 8.0));
  const float low = float(rp.value("low_freq_factor", 1.0));
  const float high = float(rp.value("high_freq_factor", 4.0));
  // The converter reads the top-level key, which transformers' config classes fill in from
  // rope_parameters (the llama-tiny fixture, original context 64, shows it).
  const nlohmann::json& top = a.hp.value("original_max_position_embeddings", nlohmann::json());
  const float old_ctx = float(top.is_number() ? top.get<double>() : rp.value("original_max_position_embeddings", 8192.0));
  const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  Tensor t{"rope_freqs.weight", {dim / 2}, {}};
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(base), float(i) / float(dim));
    const float wavelen = float(2 * std::numbers::pi) / freq;
    float ff;
    if (wavelen < high_wavelen) ff = 1.0f;
    else if (wavelen > low_wavelen) ff = factor;
    else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      ff = 1.0f / ((1.0f - smooth) / factor + smooth);
    }
    t.data.push_back(ff);
  }
  return t;
}

GgmlType ggml_type_of(OutType t) {
  switch (t) {
    case OutType::kF32: return GgmlType::F32;
    case OutType::kF16: return GgmlType::F16;
    case OutType::kBF16: return GgmlType::BF16;
    case OutType::kQ8_0: return GgmlType::Q8_0;
    default: break;
  }
  throw Error(ErrorCode::InvalidArgument, "no output type");
}

uint32_t file_type_of(OutType t) {
  switch (t) {
    case OutType::kF32: return 0;
    case OutType::kF16: return 1;
    case OutType::kQ8_0: return 7;
    default: return 32;
  }
}

}  // namespace

OutType parse_out_type(const std::string& s) {
  if (s == "f32") return OutType::kF32;
  if (s == "f16") return OutType::kF16;
  if (s == "bf16") return OutType::kBF16;
  if (s == "q8_0") return OutType::kQ8_0;
  if (s == "keep" || s.empty()) return OutType::kKeep;
  throw Error(ErrorCode::InvalidArgument, "unknown output type '" + s + "' (f32, f16, bf16, q8_0)");
}

gguf::Writer convert(const std::string& dir, OutType type) {
  if (!is_directory(dir)) throw Error(ErrorCode::NotFound, dir + ": not a directory");
  const nlohmann::json config = read_config(dir);
  const Arch arch = arch_from_config(config, dir + "/config.json");
  const Weights weights = Weights::open(dir);
  for (const auto& name : arch.required_tensors())
    if (!weights.find(name)) throw Error(ErrorCode::NotFound, dir + ": missing tensor " + name);

  if (type == OutType::kKeep) {
    type = OutType::kF16;  // the converter's fallback when no matrix says otherwise
    for (const auto* t : weights.tensors())
      if (t->shape.size() >= 2) {
        if (t->dtype == safetensors::Dtype::BF16) type = OutType::kBF16;
        else if (t->dtype == safetensors::Dtype::F32) type = OutType::kF32;
        break;
      }
  }

  const bool llama3_rope = [&] {
    if (!arch.permute_qk) return false;
    const auto& hp = arch.hp;
    const nlohmann::json rp = hp.contains("rope_parameters") && hp["rope_parameters"].is_object() ? hp["rope_parameters"]
                              : hp.contains("rope_scaling") && hp["rope_scaling"].is_object() ? hp["rope_scaling"] : nlohmann::json();
    return rp.is_object() && rp.value("rope_type", rp.value("type", std::string())) == "llama3";
  }();
  std::optional<Tensor> rope_freqs;
  if (llama3_rope) rope_freqs = llama3_rope_freqs(arch);

  // general.size_label counts every tensor written.
  uint64_t n_params = rope_freqs ? rope_freqs->data.size() : 0;
  for (const auto* v : weights.tensors())
    if (!arch.gguf_name(v->name).empty()) n_params += uint64_t(v->n_elements());

  gguf::Writer w;
  w.set_string("general.architecture", arch.name);
  w.set_string("general.type", "model");
  w.set_string("general.name", model_name(dir, config));
  if (n_params > 0) w.set_string("general.size_label", size_label(n_params));
  arch.write_keys(w, file_type_of(type));
  w.set_u32("general.quantization_version", 2);
  write_tokenizer_keys(dir, config, arch.name, w);

  auto emit = [&](Tensor t) {
    const std::string& name = t.name;
    GgmlType gt = ggml_type_of(type);
    const bool is_norm = name.ends_with("_norm.weight");
    if (t.shape.size() <= 1 || is_norm || name.find(".shortconv.conv.") != std::string::npos || !name.ends_with(".weight"))
      gt = GgmlType::F32;
    const int64_t ne0 = t.shape.back();
    if (gt == GgmlType::Q8_0 && ne0 % 32 != 0) gt = GgmlType::F16;  // gguf-py's fallback
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    const int64_t rows = int64_t(t.data.size()) / ne0;
    std::vector<uint8_t> bytes(ggml_row_bytes(gt, ne0) * size_t(rows));
    // gguf-py's quantizers round exactly like ggml's reference ones (quants.py says so for Q8_0).
    quant::quantize_row_ref(gt, t.data.data(), bytes.data(), int64_t(t.data.size()));
    w.add_tensor(name, gt, ne, bytes.data(), bytes.size());
  };

  if (rope_freqs) emit(std::move(*rope_freqs));  // generated tensors come first, as in the converter
  for (const auto* v : weights.tensors()) {
    const std::string gname = arch.gguf_name(v->name);
    if (gname.empty()) continue;
    if (v->dtype != safetensors::Dtype::F32 && v->dtype != safetensors::Dtype::F16 && v->dtype != safetensors::Dtype::BF16)
      throw Error(ErrorCode::Unsupported, v->name + ": dtype " + std::string(safetensors::dtype_name(v->dtype)) + " is not supported");
    Tensor t{gname, v->shape, v->to_f32()};
    if (t.shape.empty()) t.shape = {1};
    if (v->name.ends_with(".conv.conv.weight") && t.shape.size() == 3 && t.shape[1] == 1) t.shape = {t.shape[0], t.shape[2]};
    if (arch.permute_qk) {
      if (v->name.ends_with("q_proj.weight") || v->name.ends_with("q_proj.bias")) permute_rows(t, arch.n_head);
      if (v->name.ends_with("k_proj.weight") || v->name.ends_with("k_proj.bias")) permute_rows(t, arch.n_head_kv);
    }
    emit(std::move(t));
  }
  return w;
}

}  // namespace cera::hf
