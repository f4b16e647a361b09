#include "model/hparams.h"

#include "cera/error.h"

namespace cera {

ModelHparams read_common_hparams(const gguf::File& f, const std::string& arch) {
  ModelHparams hp;
  hp.arch = arch;
  hp.name = f.get_string_opt("general.name").value_or(arch);
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0 || v > (int64_t(1) << 30))
      throw Error(ErrorCode::BadFormat, f.path() + ": key '" + key + "' has an unusable value " + std::to_string(v));
    return int32_t(v);
  };
  hp.n_layer = positive(p + "block_count", f.get_int(p + "block_count"));
  hp.n_embd = positive(p + "embedding_length", f.get_int(p + "embedding_length"));
  hp.n_head = positive(p + "attention.head_count", f.get_int(p + "attention.head_count"));
  hp.n_ctx_train = int32_t(f.get_int_opt(p + "context_length").value_or(4096));
  for (int64_t v : f.get_int_per_layer_or(p + "attention.head_count_kv", size_t(hp.n_layer), hp.n_head))
    hp.n_head_kv.push_back(int32_t(v));
  for (int64_t v : f.get_int_per_layer(p + "feed_forward_length", size_t(hp.n_layer)))
    hp.n_ff.push_back(positive(p + "feed_forward_length", v));
  hp.head_dim = int32_t(f.get_int_opt(p + "attention.key_length").value_or(hp.n_embd / hp.n_head));
  hp.norm_eps = float(f.get_float_opt(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp.rope_base = float(f.get_float_opt(p + "rope.freq_base").value_or(10000.0));
  for (int32_t kv : hp.n_head_kv)
    if (kv < 0 || (kv > 0 && hp.n_head % kv != 0))
      throw Error(ErrorCode::BadFormat, f.path() + ": head_count_kv " + std::to_string(kv) +
                                            " does not divide head_count " + std::to_string(hp.n_head));
  return hp;
}

}  // namespace cera
