#include "format/hf/hf_arch.h"

#include <cstdlib>
#include <map>

#include "cera/error.h"

namespace cera::hf {

namespace {

using nlohmann::json;

const json* find_hparam(const json& hp, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (hp.contains(k) && !hp[k].is_null()) return &hp[k];
  return nullptr;
}

int64_t need_int(const json& hp, std::initializer_list<const char*> keys, const std::string& what) {
  const json* v = find_hparam(hp, keys);
  if (!v || !v->is_number_integer()) throw Error(ErrorCode::BadFormat, "config.json: missing integer " + what);
  return v->get<int64_t>();
}

void set_default(json& hp, const char* key, json value) {
  if (!hp.contains(key) || hp[key].is_null()) hp[key] = std::move(value);
}

// Per-layer suffix tables (HF suffix after "model.layers.N." -> GGUF suffix after "blk.N.").
const std::map<std::string, std::string>& dense_layer_names() {
  static const std::map<std::string, std::string> m = {
      {"input_layernorm.weight", "attn_norm.weight"},       {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},         {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},         {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},             {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},             {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},          {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  return m;
}

const std::map<std::string, std::string>& lfm2_layer_names() {
  static const std::map<std::string, std::string> m = {
      {"operator_norm.weight", "attn_norm.weight"},          {"ffn_norm.weight", "ffn_norm.weight"},
      {"feed_forward.w1.weight", "ffn_gate.weight"},         {"feed_forward.w3.weight", "ffn_up.weight"},
      {"feed_forward.w2.weight", "ffn_down.weight"},         {"conv.in_proj.weight", "shortconv.in_proj.weight"},
      {"conv.conv.weight", "shortconv.conv.weight"},         {"conv.out_proj.weight", "shortconv.out_proj.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},          {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},          {"self_attn.out_proj.weight", "attn_output.weight"},
      {"self_attn.q_layernorm.weight", "attn_q_norm.weight"}, {"self_attn.k_layernorm.weight", "attn_k_norm.weight"},
  };
  return m;
}

bool is_attention_layer(const json& hp, int64_t i) {
  return hp.at("layer_types").at(size_t(i)).get<std::string>() != "conv";
}

}  // namespace

Arch arch_from_config(const json& config, const std::string& config_path) {
  Arch a;
  a.hp = config;
  if (config.contains("text_config") && config["text_config"].is_object())
    for (const auto& [k, v] : config["text_config"].items()) a.hp[k] = v;
  std::string hf_arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    hf_arch = config["architectures"][0].get<std::string>();
  if (hf_arch.empty()) throw Error(ErrorCode::BadFormat, config_path + ": no \"architectures\" entry");
  static const std::map<std::string, std::string> kArch = {
      {"Lfm2ForCausalLM", "lfm2"},   {"LFM2ForCausalLM", "lfm2"},   {"LlamaForCausalLM", "llama"},
      {"MistralForCausalLM", "llama"}, {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"},
      {"GraniteForCausalLM", "granite"},
  };
  const auto it = kArch.find(hf_arch);
  if (it == kArch.end())
    throw Error(ErrorCode::Unsupported, config_path + ": architecture '" + hf_arch +
                                            "' is not supported (supported: Lfm2ForCausalLM, LlamaForCausalLM, "
                                            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GraniteForCausalLM)");
  a.name = it->second;
  json& hp = a.hp;
  a.n_layer = need_int(hp, {"n_layers", "num_hidden_layers", "n_layer", "num_layers"}, "num_hidden_layers");
  a.n_head = need_int(hp, {"n_heads", "num_attention_heads"}, "num_attention_heads");

  // What transformers' config classes fill in when config.json leaves a field out (the Python
  // converter reads the config through AutoConfig, so it sees these defaults).
  if (a.name == "lfm2") {
    set_default(hp, "max_position_embeddings", 128000);
    set_default(hp, "norm_eps", 1e-5);
    set_default(hp, "conv_L_cache", 3);
    set_default(hp, "block_auto_adjust_ff_dim", true);
    set_default(hp, "block_ffn_dim_multiplier", 1.0);
    set_default(hp, "block_multiple_of", 256);
    set_default(hp, "num_key_value_heads", 8);
    if (!hp.contains("layer_types") || !hp["layer_types"].is_array()) {
      json types = json::array();
      const json idxs = hp.value("full_attn_idxs", json());
      for (int64_t i = 0; i < a.n_layer; ++i) {
        bool attn = true;
        if (idxs.is_array()) {
          attn = false;
          for (const auto& x : idxs) attn |= x.is_number_integer() && x.get<int64_t>() == i;
        }
        types.push_back(attn ? "full_attention" : "conv");
      }
      hp["layer_types"] = types;
    }
    if (hp["layer_types"].size() != size_t(a.n_layer))
      throw Error(ErrorCode::BadFormat, config_path + ": layer_types has " + std::to_string(hp["layer_types"].size()) +
                                            " entries for " + std::to_string(a.n_layer) + " layers");
  } else if (a.name == "llama" || a.name == "granite") {
    a.permute_qk = true;
    if (a.name == "llama") set_default(hp, "head_dim", need_int(hp, {"hidden_size"}, "hidden_size") / a.n_head);
    else hp.erase("head_dim");  // granite's converter drops it (d = D/H)
  } else if (a.name == "qwen3") {
    set_default(hp, "head_dim", 128);
  }
  set_default(hp, "num_key_value_heads", a.n_head);
  a.n_head_kv = need_int(hp, {"num_key_value_heads", "n_kv_heads"}, "num_key_value_heads");
  return a;
}

std::string Arch::gguf_name(const std::string& n) const {
  if (n.ends_with(".rotary_emb.inv_freq") || n.ends_with(".attention.masked_bias") || n.ends_with(".attention.bias"))
    return "";
  const bool lfm2 = name == "lfm2";
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "lm_head.weight") return "output.weight";
  if (lfm2 && n == "model.embedding_norm.weight") return "token_embd_norm.weight";
  if (!lfm2 && n == "model.norm.weight") return "output_norm.weight";
  const std::string prefix = "model.layers.";
  if (n.starts_with(prefix)) {
    const size_t dot = n.find('.', prefix.size());
    if (dot != std::string::npos) {
      const std::string num = n.substr(prefix.size(), dot - prefix.size());
      const auto& table = lfm2 ? lfm2_layer_names() : dense_layer_names();
      const auto it = table.find(n.substr(dot + 1));
      char* end = nullptr;
      const long bid = std::strtol(num.c_str(), &end, 10);
      if (it != table.end() && !num.empty() && *end == 0 && bid >= 0 && bid < n_layer)
        return "blk." + num + "." + it->second;
    }
  }
  throw Error(ErrorCode::Unsupported, "cannot map tensor " + n + " to a GGUF name for architecture " + name);
}

std::vector<std::string> Arch::required_tensors() const {
  std::vector<std::string> r = {"model.embed_tokens.weight"};
  const bool tied = hp.value("tie_word_embeddings", name == "lfm2" ? true : false) ||
                    hp.value("tie_embedding", false);
  if (!tied) r.push_back("lm_head.weight");
  r.push_back(name == "lfm2" ? "model.embedding_norm.weight" : "model.norm.weight");
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::vector<std::string> s;
    if (name == "lfm2") {
      s = {"operator_norm.weight", "ffn_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
           "feed_forward.w3.weight"};
      if (is_attention_layer(hp, i))
        for (const char* x : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                              "self_attn.out_proj.weight", "self_attn.q_layernorm.weight", "self_attn.k_layernorm.weight"})
          s.push_back(x);
      else
        for (const char* x : {"conv.in_proj.weight", "conv.conv.weight", "conv.out_proj.weight"}) s.push_back(x);
    } else {
      s = {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
           "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
           "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
      if (name == "qwen2")
        for (const char* x : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}) s.push_back(x);
      if (name == "qwen3")
        for (const char* x : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) s.push_back(x);
    }
    for (auto& x : s) r.push_back(p + x);
  }
  return r;
}

void Arch::write_keys(gguf::Writer& w, uint32_t file_type) const {
  const std::string a = name + ".";
  auto u32 = [&](const std::string& k, const json& v) { w.set_u32(a + k, uint32_t(v.get<int64_t>())); };
  auto f32 = [&](const std::string& k, const json& v) { w.set_f32(a + k, float(v.get<double>())); };

  // TextModel.set_gguf_parameters, in its order.
  w.set_u32(a + "block_count", uint32_t(n_layer));
  if (auto* v = find_hparam(hp, {"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"}))
    u32("context_length", *v);
  if (auto* v = find_hparam(hp, {"hidden_size", "n_embd", "dim"})) u32("embedding_length", *v);
  if (auto* v = find_hparam(hp, {"intermediate_size", "n_inner", "hidden_dim"})) u32("feed_forward_length", *v);
  w.set_u32(a + "attention.head_count", uint32_t(n_head));
  if (name == "lfm2") {
    std::vector<int32_t> kv;
    for (int64_t i = 0; i < n_layer; ++i) kv.push_back(is_attention_layer(hp, i) ? int32_t(n_head_kv) : 0);
    w.set_i32_array(a + "attention.head_count_kv", kv);
  } else {
    w.set_u32(a + "attention.head_count_kv", uint32_t(n_head_kv));
  }
  if (hp.contains("is_causal") && hp["is_causal"].is_boolean() && !hp["is_causal"].get<bool>())
    w.set_bool(a + "attention.causal", false);

  json rope = hp.contains("rope_parameters") && hp["rope_parameters"].is_object() ? hp["rope_parameters"]
              : hp.contains("rope_scaling") && hp["rope_scaling"].is_object() ? hp["rope_scaling"] : json::object();
  if (!rope.contains("rope_theta"))
    if (auto* v = find_hparam(hp, {"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"}))
      rope["rope_theta"] = *v;
  if (!rope.contains("rope_type") && rope.contains("type")) rope["rope_type"] = rope["type"];
  if (rope.contains("rope_type") && rope["rope_type"].is_string()) {
    const std::string t = rope["rope_type"].get<std::string>();
    const json factor = rope.value("factor", json());
    if (t == "linear" && factor.is_number()) {
      w.set_string(a + "rope.scaling.type", "linear");
      f32("rope.scaling.factor", factor);
    } else if (t == "yarn" && factor.is_number()) {
      w.set_string(a + "rope.scaling.type", "yarn");
      f32("rope.scaling.factor", factor);
      u32("rope.scaling.original_context_length", rope.at("original_max_position_embeddings"));
    } else if (t != "default" && t != "llama3") {
      throw Error(ErrorCode::Unsupported, "config.json: RoPE scaling '" + t + "' is not supported");
    }
  }
  if (rope.contains("rope_theta") && rope["rope_theta"].is_number()) f32("rope.freq_base", rope["rope_theta"]);
  if (auto* v = find_hparam(hp, {"rms_norm_eps", "norm_eps"})) f32("attention.layer_norm_rms_epsilon", *v);
  if (find_hparam(hp, {"num_local_experts", "num_experts"}))
    throw Error(ErrorCode::Unsupported, "config.json: mixture-of-experts models are not supported");
  if (hp.contains("head_dim") && hp["head_dim"].is_number_integer()) {
    u32("attention.key_length", hp["head_dim"]);
    u32("attention.value_length", hp["head_dim"]);
  }
  w.set_u32("general.file_type", file_type);

  // The architecture's own additions.
  if (name == "lfm2") {
    u32("vocab_size", hp.at("vocab_size"));
    u32("shortconv.l_cache", hp.at("conv_L_cache"));
    f32("attention.layer_norm_rms_epsilon", hp.at("norm_eps"));
    // FFN width rule (conversion/lfm2.py); replaces the generic value in place.
    int64_t ff = need_int(hp, {"block_ff_dim", "intermediate_size"}, "block_ff_dim");
    if (hp.at("block_auto_adjust_ff_dim").get<bool>()) {
      ff = int64_t(2 * ff / 3.0);
      if (!hp["block_ffn_dim_multiplier"].is_null()) ff = int64_t(hp["block_ffn_dim_multiplier"].get<double>() * double(ff));
      const int64_t m = hp.at("block_multiple_of").get<int64_t>();
      ff = m * ((ff + m - 1) / m);
    }
    w.set_u32(a + "feed_forward_length", uint32_t(ff));
  } else if (name == "llama" || name == "granite") {
    u32("vocab_size", hp.at("vocab_size"));
    const int64_t d = hp.contains("head_dim") && hp["head_dim"].is_number_integer()
                          ? hp["head_dim"].get<int64_t>() : need_int(hp, {"hidden_size"}, "hidden_size") / n_head;
    w.set_u32(a + "rope.dimension_count", uint32_t(d));
    if (name == "granite") {
      if (auto* v = find_hparam(hp, {"embedding_multiplier"})) f32("embedding_scale", *v);
      if (auto* v = find_hparam(hp, {"residual_multiplier"})) f32("residual_scale", *v);
      if (auto* v = find_hparam(hp, {"attention_multiplier"})) f32("attention.scale", *v);
      if (auto* v = find_hparam(hp, {"logits_scaling"})) f32("logit_scale", *v);
    }
  }
}

}  // namespace cera::hf
