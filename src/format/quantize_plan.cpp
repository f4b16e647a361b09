// Type-selection policy for `cera quantize`; see quantize_plan.h. The rules restate llama-quantize's
// choices for the mixes listed in all_mixes() (IQ mixes and imatrix-dependent rules are left out).
#include "format/quantize_plan.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "cera/error.h"
#include "format/gguf.h"

namespace cera::quant {

const std::vector<MixInfo>& all_mixes() {
  static const std::vector<MixInfo> mixes = {
      {Mix::Q8_0, "Q8_0", GgmlType::Q8_0, "8.5 bpw, nearly lossless"},
      {Mix::Q6_K, "Q6_K", GgmlType::Q6_K, "6.56 bpw"},
      {Mix::Q5_K_M, "Q5_K_M", GgmlType::Q5_K, "Q5_K, Q6_K for attn_v/ffn_down in some layers"},
      {Mix::Q5_K_S, "Q5_K_S", GgmlType::Q5_K, "Q5_K everywhere but the LM head"},
      {Mix::Q5_1, "Q5_1", GgmlType::Q5_1, "6 bpw"},
      {Mix::Q5_0, "Q5_0", GgmlType::Q5_0, "5.5 bpw"},
      {Mix::Q4_K_M, "Q4_K_M", GgmlType::Q4_K, "Q4_K, Q6_K for attn_v/ffn_down in some layers"},
      {Mix::Q4_K_S, "Q4_K_S", GgmlType::Q4_K, "Q4_K, Q5_K for the first attn_v/ffn_down"},
      {Mix::Q4_1, "Q4_1", GgmlType::Q4_1, "5 bpw"},
      {Mix::Q4_0, "Q4_0", GgmlType::Q4_0, "4.5 bpw"},
      {Mix::Q3_K_L, "Q3_K_L", GgmlType::Q3_K, "Q3_K, Q5_K for attn_v/attn_output/ffn_down"},
      {Mix::Q3_K_M, "Q3_K_M", GgmlType::Q3_K, "Q3_K, Q4_K/Q5_K for attn_v/attn_output/ffn_down"},
      {Mix::Q3_K_S, "Q3_K_S", GgmlType::Q3_K, "Q3_K everywhere but the LM head"},
      {Mix::Q2_K, "Q2_K", GgmlType::Q2_K, "Q2_K, Q3_K for attn_v/attn_output/ffn_down"},
      {Mix::F16, "F16", GgmlType::F16, "16-bit float"},
      {Mix::BF16, "BF16", GgmlType::BF16, "bfloat16"},
      {Mix::F32, "F32", GgmlType::F32, "32-bit float"},
  };
  return mixes;
}

const MixInfo& mix_info(Mix mix) {
  for (const auto& m : all_mixes())
    if (m.mix == mix) return m;
  throw Error(ErrorCode::Internal, "mix_info: unknown mix " + std::to_string(uint32_t(mix)));
}

std::optional<Mix> mix_from_name(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  // llama-quantize's short names for the recommended _M variants.
  if (upper == "Q3_K") upper = "Q3_K_M";
  if (upper == "Q4_K") upper = "Q4_K_M";
  if (upper == "Q5_K") upper = "Q5_K_M";
  for (const auto& m : all_mixes())
    if (m.name == upper) return m.mix;
  return std::nullopt;
}

std::string mix_names_joined() {
  std::string out;
  for (const auto& m : all_mixes()) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

bool is_quantized_type(GgmlType t) { return ggml_traits(t).block_elems > 1; }

// Dimensions after dropping trailing size-1 axes, as ggml_n_dims counts them.
int effective_dims(const TensorShape& t) {
  int n = 1;
  for (int d = 1; d < 4; ++d)
    if (t.ne[size_t(d)] > 1) n = d + 1;
  return n;
}

// "blk.N." prefix -> N; -1 for tensors outside the layers.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  size_t i = 4;
  int n = 0;
  bool any = false;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) n = n * 10 + (name[i++] - '0'), any = true;
  return any ? n : -1;
}

enum class Category { TokenEmbd, Output, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  // Fused QKV and MLA's kv_b are treated like attn_v (the most quantization-sensitive projection).
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight"))
    return Category::AttnV;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

// llama.cpp's heuristic for which layers of a stack get extra bits: the first and last eighth,
// and every third layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

struct Counters {
  int i_attn_v = 0;
  int i_ffn_down = 0;
};

// The mix rules proper. `t` is the base type of the mix; the result may still need a fallback.
GgmlType mixed_type(const TensorShape& tensor, Category cat, GgmlType t, Mix mix, const ModelFacts& f, Counters& c) {
  const bool falcon = f.arch == "falcon";
  const bool is_70b = f.arch == "llama" && f.n_layer == 80 && f.n_head != f.n_head_kv;

  if (cat == Category::Output || (f.tied_embeddings && cat == Category::TokenEmbd)) {
    // The LM head decides every logit: Q6_K, or Q8_0 where a K-block does not fit a row.
    if (falcon || tensor.ne[0] % ggml_traits(t).block_elems != 0) return GgmlType::Q8_0;
    return t == GgmlType::Q8_0 ? t : GgmlType::Q6_K;
  }
  switch (cat) {
    case Category::AttnV: {
      if (mix == Mix::Q2_K) t = f.n_gqa() >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
      else if (mix == Mix::Q3_K_M) t = c.i_attn_v < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
      else if (mix == Mix::Q3_K_L) t = GgmlType::Q5_K;
      else if ((mix == Mix::Q4_K_M || mix == Mix::Q5_K_M) && use_more_bits(c.i_attn_v, f.n_attn_v)) t = GgmlType::Q6_K;
      else if (mix == Mix::Q4_K_S && c.i_attn_v < 4) t = GgmlType::Q5_K;
      // 70B shares each attn_v across 8 heads, so it is small and worth more bits.
      if (is_70b && (t == GgmlType::Q3_K || t == GgmlType::Q4_K)) t = GgmlType::Q5_K;
      if (f.n_expert == 8) t = GgmlType::Q8_0;
      ++c.i_attn_v;
      return t;
    }
    case Category::AttnK:
      return f.n_expert == 8 ? GgmlType::Q8_0 : t;
    case Category::FfnDown: {
      int i = c.i_ffn_down++;
      const int n = f.n_layer;
      if (std::max(1, f.n_expert) > 1) i = layer_of(tensor.name);  // experts are not stored layer by layer
      if (mix == Mix::Q2_K) return GgmlType::Q3_K;
      if (mix == Mix::Q3_K_M)
        return i < n / 16 ? GgmlType::Q5_K : (!falcon || use_more_bits(i, n)) ? GgmlType::Q4_K : GgmlType::Q3_K;
      if (mix == Mix::Q3_K_L) return falcon ? GgmlType::Q4_K : GgmlType::Q5_K;
      if (mix == Mix::Q4_K_M) {
        if (falcon) return i < n / 16 ? GgmlType::Q6_K : use_more_bits(i, n) ? GgmlType::Q5_K : GgmlType::Q4_K;
        return use_more_bits(i, n) ? GgmlType::Q6_K : t;
      }
      if (mix == Mix::Q5_K_M && use_more_bits(i, n)) return GgmlType::Q6_K;
      if (mix == Mix::Q4_K_S && !falcon && i < n / 8) return GgmlType::Q5_K;
      return t;
    }
    case Category::AttnOutput:
      if (falcon) return mix == Mix::Q3_K_L ? GgmlType::Q4_K : t;
      if (f.n_expert == 8) {
        const bool bump = mix == Mix::Q2_K || mix == Mix::Q3_K_S || mix == Mix::Q3_K_M || mix == Mix::Q4_K_S ||
                          mix == Mix::Q4_K_M;
        return bump ? GgmlType::Q5_K : t;
      }
      if (mix == Mix::Q2_K) return GgmlType::Q3_K;
      if (mix == Mix::Q3_K_M) return GgmlType::Q4_K;
      if (mix == Mix::Q3_K_L) return GgmlType::Q5_K;
      return t;
    default:
      return t;
  }
}

// A type whose block fits the row length: K-quants (256) step down to a 32-block type of about
// the same size, and F16 is the last resort for rows that are not a multiple of 32 either.
GgmlType fit_row(GgmlType t, int64_t ne0, bool& fell_back) {
  fell_back = false;
  if (ne0 % ggml_traits(t).block_elems == 0) return t;
  fell_back = true;
  GgmlType r = GgmlType::F16;
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: r = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: r = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: r = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: r = GgmlType::Q8_0; break;
    default: break;  // llama.cpp refuses here; F16 keeps the conversion going
  }
  return ne0 % ggml_traits(r).block_elems == 0 ? r : GgmlType::F16;
}

}  // namespace

bool is_quantizable(const TensorShape& t) {
  if (effective_dims(t) < 2) return false;
  const std::string_view name = t.name;
  if (!ends_with(name, "weight")) return false;
  // Small or precision-critical tensors llama-quantize keeps as they are.
  static constexpr std::string_view kKeep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
      "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
      "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
      "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
      "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
      "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
      "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
  };
  for (std::string_view k : kKeep)
    if (contains(name, k)) return false;
  return name != "position_embd.weight" && name != "token_types.weight";
}

ModelFacts facts_from_tensors(const std::vector<TensorShape>& tensors) {
  ModelFacts f;
  for (const auto& t : tensors) {
    const Category c = category_of(t.name);
    if (c == Category::Output) f.tied_embeddings = false;
    if (c == Category::AttnV) ++f.n_attn_v;
  }
  return f;
}

ModelFacts facts_from_gguf(const gguf::File& file) {
  std::vector<TensorShape> shapes;
  for (const auto& t : file.tensors()) shapes.push_back({t.name, t.n_dims, t.ne, t.type});
  ModelFacts f = facts_from_tensors(shapes);
  f.arch = file.get_string_opt("general.architecture").value_or("");
  const std::string p = f.arch + ".";
  f.n_layer = int(file.get_int_opt(p + "block_count").value_or(0));
  f.n_expert = int(file.get_int_opt(p + "expert_count").value_or(0));
  if (f.n_layer > 0 && file.has(p + "attention.head_count")) {
    f.n_head = int(file.get_int_per_layer(p + "attention.head_count", size_t(f.n_layer))[0]);
    f.n_head_kv = int(file.get_int_per_layer_or(p + "attention.head_count_kv", size_t(f.n_layer), f.n_head)[0]);
  }
  return f;
}

std::vector<PlannedTensor> make_plan(const std::vector<TensorShape>& tensors, const ModelFacts& facts,
                                     const PlanOptions& options) {
  const GgmlType base = mix_info(options.mix).base;
  // Visit in llama.cpp's load order so the position counters match its choices.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });

  std::vector<PlannedTensor> plan(tensors.size());
  Counters counters;
  for (size_t idx : order) {
    const TensorShape& t = tensors[idx];
    PlannedTensor& p = plan[idx];
    p = {t.type, false, false};
    if (!is_quantizable(t)) continue;
    GgmlType type = base;
    if (is_quantized_type(base)) {
      if (!options.pure) type = mixed_type(t, category_of(t.name), base, options.mix, facts, counters);
      type = fit_row(type, t.ne[0], p.fallback);
    }
    p.type = type;
    p.quantize = type != t.type;
  }
  return plan;
}

}  // namespace cera::quant
