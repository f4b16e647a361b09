#include "format/hf/hf_tokenizer_keys.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

#include "cera/error.h"
#include "format/hf/hf_folder.h"

namespace cera::hf {

namespace {

using nlohmann::json;

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string type_of(const json& j) { return j.is_object() ? j.value("type", std::string()) : std::string(); }

// Split regexes and whether a ByteLevel step applies the GPT-2 regex itself.
void collect_pre(const json& pt, std::vector<std::string>& regexes, bool& gpt2_regex) {
  const std::string t = type_of(pt);
  if (t == "Sequence") {
    for (const auto& p : pt.value("pretokenizers", json::array())) collect_pre(p, regexes, gpt2_regex);
  } else if (t == "Split" && pt.contains("pattern") && pt["pattern"].contains("Regex")) {
    regexes.push_back(pt["pattern"]["Regex"].get<std::string>());
  } else if (t == "ByteLevel" && pt.value("use_regex", true)) {
    gpt2_regex = true;
  }
}

// What looks like a control token although not flagged special (TextModel.does_token_look_special).
bool looks_special(const std::string& s) {
  auto wrapped = [&](std::string_view a, std::string_view b) { return s.size() >= a.size() + b.size() && s.starts_with(a) && s.ends_with(b); };
  return s == "<pad>" || s == "<mask>" || s == "<2mass>" || s == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// A *_token entry of tokenizer_config.json: a string or {content: ...}.
std::optional<std::string> token_content(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) return entry["content"].get<std::string>();
  return std::nullopt;
}

// gguf-py SpecialVocab: special ids, add_*_token flags and the chat template, in its key order.
struct SpecialVocab {
  std::vector<std::pair<std::string, uint32_t>> ids;  // insertion order
  std::vector<std::pair<std::string, bool>> add;      // insertion order
  std::optional<std::string> chat_template;
  int64_t n_vocab = -1;

  void set_id(const std::string& typ, const json& v) {
    if (!v.is_number_integer()) return;
    const int64_t id = v.get<int64_t>();
    if (id < 0) throw Error(ErrorCode::BadFormat, "invalid id for special token " + typ + ": " + std::to_string(id));
    if (n_vocab >= 0 && id >= n_vocab) return;
    for (const auto& [t, _] : ids)
      if (t == typ) return;
    ids.emplace_back(typ, uint32_t(id));
  }
  void set_add(const std::string& typ, bool v) {
    for (auto& [t, val] : add)
      if (t == typ) { val = v; return; }
    add.emplace_back(typ, v);
  }
};

// The crude TemplateProcessing reading of SpecialVocab._try_load_from_tokenizer_json: which of
// bos / eos / sep the post-processor adds.
void read_post_processor(const json& pp, json& tc, bool have_tc, std::vector<std::string>& types, SpecialVocab& sv) {
  auto special_id = [](const json& item) -> std::optional<std::string> {
    if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].contains("id"))
      return item["SpecialToken"]["id"].get<std::string>();
    return std::nullopt;
  };
  auto tc_str = [&](const char* k) -> std::optional<std::string> {
    if (have_tc && tc.contains(k)) return token_content(tc[k]);
    return std::nullopt;
  };
  auto special_bos = tc_str("bos_token"), special_cls = tc_str("cls_token");
  auto special_eos = tc_str("eos_token"), special_sep = tc_str("sep_token");
  if (!special_bos && special_cls && have_tc) tc["bos_token"] = *(special_bos = special_cls);
  if (!special_eos && special_sep && have_tc) tc["eos_token"] = *(special_eos = special_sep);
  const json processors = pp.contains("processors") ? pp["processors"] : json::array({pp});
  for (const auto& proc : processors) {
    const std::string t = type_of(proc);
    if (t == "RobertaProcessing") {
      sv.set_add("bos", true), sv.set_add("eos", true), sv.set_add("sep", true);
      continue;  // (its cls/sep names only matter for BERT-style models, which we do not convert)
    }
    if (t != "TemplateProcessing") continue;
    const json single = proc.value("single", json::array());
    json pair = proc.value("pair", json::array());
    std::optional<std::string> first, last;
    if (single.size() > 1) {
      if ((first = special_id(single.front()))) {
        if (!have_tc) special_bos = first;
        sv.set_add("bos", first == special_bos || first == special_cls);
      }
      if ((last = special_id(single.back()))) {
        if (!have_tc) {
          special_eos = last;
        } else if (last != special_eos) {
          // The template ends with another token than eos: eos moves to eot (or eom).
          const char* extra = nullptr;
          if (std::find(types.begin(), types.end(), "eot") == types.end()) extra = "eot";
          else if (std::find(types.begin(), types.end(), "eom") == types.end()) extra = "eom";
          if (extra) {
            types.push_back(extra);
            if (special_eos) tc[std::string(extra) + "_token"] = *special_eos;
          }
          tc["eos_token"] = *last;
          special_eos = last;
        }
        sv.set_add("eos", last == special_eos);
      }
    }
    if (pair.empty()) continue;
    size_t start = (first && special_id(pair.front()) == first) ? 1 : 0;
    size_t stop = pair.size() - ((last && special_id(pair.back()) == last) ? 1 : 0);
    if (start >= stop) continue;
    json mid(json::array());
    for (size_t i = start; i < stop; ++i) mid.push_back(pair[i]);
    auto seq_id = [](const json& item) -> std::string {
      return item.is_object() && item.contains("Sequence") ? item["Sequence"].value("id", std::string()) : std::string();
    };
    if (seq_id(mid.front()) != "A" || seq_id(mid.back()) != "B" || mid.size() <= 2) continue;
    bool add_sep = false;
    if (auto e = special_id(mid[1]))
      if ((e == special_sep || e == special_eos) && !last) add_sep = true;
    if (mid.size() == 4)
      if (auto e = special_id(mid[2]))
        if (e == special_sep || e == special_eos) add_sep = true;
    sv.set_add("sep", add_sep);
    if (add_sep && !special_sep && have_tc && special_eos) tc["sep_token"] = *special_eos;
  }
}

}  // namespace

std::string pre_tokenizer_name(const json& tj, const std::string& arch) {
  std::vector<std::string> regexes;
  bool gpt2 = false;
  collect_pre(tj.value("pre_tokenizer", json()), regexes, gpt2);
  if (regexes.size() == 1 && !gpt2) {
    if (regexes[0] == kLlama3Regex) return arch == "lfm2" ? "lfm2" : "llama-bpe";
    if (regexes[0] == kQwen2Regex) return "qwen2";
  }
  if (regexes.empty() && gpt2) return "gpt-2";
  throw Error(ErrorCode::Unsupported,
              "tokenizer.json: pre-tokenizer not recognised (known: the Llama-3/LFM2, Qwen2 and GPT-2 regexes)");
}

void write_tokenizer_keys(const std::string& dir, const json& config, const std::string& arch, gguf::Writer& w) {
  const std::string tj_path = dir + "/tokenizer.json";
  if (!is_file(tj_path)) throw Error(ErrorCode::NotFound, dir + ": no tokenizer.json");
  const json tj = read_json(tj_path);
  const json model = tj.value("model", json());
  // SentencePiece converted to BPE (Llama 2, Mistral): byte_fallback with a Sequence decoder, as
  // gguf-py's LlamaHfVocab recognises it; written as tokenizer.ggml.model "llama".
  const bool spm = type_of(model) == "BPE" && model.value("byte_fallback", false) &&
                   type_of(tj.value("decoder", json())) == "Sequence";
  if (!spm && (type_of(model) != "BPE" || model.value("byte_fallback", false) ||
               type_of(tj.value("decoder", json())) != "ByteLevel"))
    throw Error(ErrorCode::Unsupported, tj_path + ": only byte-level BPE and SentencePiece-style BPE tokenizers are supported");
  const std::string unk_text = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
  const json vocab = model.value("vocab", json::object());
  const json added = tj.value("added_tokens", json::array());

  // Token text by id: the model vocab, then the added tokens (which may lie outside it).
  std::vector<std::optional<std::string>> by_id;
  auto put = [&](int64_t id, const std::string& text) {
    if (id < 0) throw Error(ErrorCode::BadFormat, tj_path + ": negative token id for '" + text + "'");
    if (size_t(id) >= by_id.size()) by_id.resize(size_t(id) + 1);
    by_id[size_t(id)] = text;
  };
  for (const auto& [text, id] : vocab.items()) put(id.get<int64_t>(), text);
  struct Added { bool special; };
  std::vector<std::optional<Added>> added_by_id;
  for (const auto& a : added) {
    const int64_t id = a.at("id").get<int64_t>();
    put(id, a.at("content").get<std::string>());
    if (size_t(id) >= added_by_id.size()) added_by_id.resize(size_t(id) + 1);
    added_by_id[size_t(id)] = Added{a.value("special", false)};
  }
  const int64_t n_vocab = config.contains("vocab_size") && config["vocab_size"].is_number_integer()
                              ? config["vocab_size"].get<int64_t>() : int64_t(by_id.size());
  if (int64_t(by_id.size()) > n_vocab)
    throw Error(ErrorCode::BadFormat, tj_path + ": token id " + std::to_string(by_id.size() - 1) +
                                          " is outside vocab_size " + std::to_string(n_vocab));

  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const bool known = size_t(i) < by_id.size() && by_id[size_t(i)];
    if (!known) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
      continue;
    }
    std::string text = *by_id[size_t(i)];
    const auto& a = size_t(i) < added_by_id.size() ? added_by_id[size_t(i)] : std::nullopt;
    if (!a) {
      types.push_back(spm && is_byte_token(text) ? kByte : kNormal);
    } else if (spm && a->special && text == unk_text) {
      types.push_back(kUnknown);  // what a tokenizer.model-based conversion marks <unk> as
    } else if (a->special || looks_special(text)) {
      types.push_back(kControl);
    } else {
      text = replace_all(text, "\xE2\x96\x81", " ");  // user-defined tokens are stored pre-normalized
      types.push_back(kUserDefined);
    }
    tokens.push_back(std::move(text));
  }

  std::vector<std::string> merges;
  for (const auto& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      // Pair form: a literal space inside a part is written as U+0120, as gguf-py does.
      merges.push_back(replace_all(m[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                       replace_all(m[1].get<std::string>(), " ", "\xC4\xA0"));
    } else {
      throw Error(ErrorCode::BadFormat, tj_path + ": unknown merges format");
    }
  }

  if (spm) {
    // Piece scores for llama.cpp's score-ranked merging. gguf-py's LlamaHfVocab writes -1000 for
    // every piece, which makes llama.cpp merge leftmost-first; instead a piece scores minus the
    // rank of the first merge producing it, so score order is merge order. Pieces no merge
    // produces (single characters) rank after all of them; special and byte tokens score 0.
    std::unordered_map<std::string, size_t> id_of;
    for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], i);
    std::vector<float> scores(tokens.size(), 0.0f);
    std::vector<bool> scored(tokens.size(), false);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos) continue;
      auto it = id_of.find(m.substr(0, space) + m.substr(space + 1));
      if (it == id_of.end() || scored[it->second]) continue;
      scores[it->second] = -float(rank);
      scored[it->second] = true;
    }
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!scored[i] && types[i] == kNormal) scores[i] = -float(merges.size() + i);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_string_array("tokenizer.ggml.tokens", std::move(tokens));
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
  } else {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre_tokenizer_name(tj, arch));
    w.set_string_array("tokenizer.ggml.tokens", std::move(tokens));
    w.set_i32_array("tokenizer.ggml.token_type", types);
    if (!merges.empty()) w.set_string_array("tokenizer.ggml.merges", std::move(merges));
  }

  SpecialVocab sv;
  std::vector<std::string> special_types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  const std::string tc_path = dir + "/tokenizer_config.json";
  json tc = is_file(tc_path) ? read_json(tc_path) : json();
  const bool have_tc = tc.is_object() && !tc.empty();
  if (tj.contains("post_processor") && tj["post_processor"].is_object())
    read_post_processor(tj["post_processor"], tc, have_tc, special_types, sv);
  if (have_tc) {
    std::optional<std::string> alt;
    if (is_file(dir + "/chat_template.jinja")) {
      std::ifstream in(dir + "/chat_template.jinja", std::ios::binary);
      alt = std::string(std::istreambuf_iterator<char>(in), {});
    } else if (is_file(dir + "/chat_template.json")) {
      const json ct = read_json(dir + "/chat_template.json");
      if (ct.contains("chat_template") && ct["chat_template"].is_string()) alt = ct["chat_template"].get<std::string>();
    }
    if (tc.contains("chat_template") && tc["chat_template"].is_string()) sv.chat_template = tc["chat_template"].get<std::string>();
    else if (!tc.contains("chat_template")) sv.chat_template = alt;
    for (const auto& typ : special_types) {
      const json add = tc.value("add_" + typ + "_token", json());
      if (add.is_boolean()) sv.set_add(typ, add.get<bool>());
      const auto content = token_content(tc.value(typ + "_token", json()));
      if (!content) continue;
      for (const auto& a : added)
        if (a.value("content", std::string()) == *content) { sv.set_id(typ, a.at("id")); break; }
    }
  }
  for (const auto& typ : special_types) sv.set_id(typ, config.value(typ + "_token_id", json()));

  // gguf-py key names; "pad" is padding_token_id, "sep" keeps llama.cpp's spelling.
  auto id_key = [](const std::string& typ) -> std::string {
    if (typ == "pad") return "tokenizer.ggml.padding_token_id";
    if (typ == "unk") return "tokenizer.ggml.unknown_token_id";
    if (typ == "sep") return "tokenizer.ggml.seperator_token_id";
    return "tokenizer.ggml." + typ + "_token_id";
  };
  for (const auto& [typ, id] : sv.ids) w.set_u32(id_key(typ), id);
  for (const auto& [typ, v] : sv.add) w.set_bool("tokenizer.ggml.add_" + typ + "_token", v);
  if (sv.chat_template) w.set_string("tokenizer.chat_template", *sv.chat_template);
}

}  // namespace cera::hf
