// vocab_from_hf: a Hugging Face tokenizer.json (+ tokenizer_config.json) as a VocabSpec
// (MODELS.md §6.5). Only what byte-level BPE and SentencePiece-as-BPE (byte_fallback: Llama 2,
// Mistral) need is read; anything that would change the tokenization and is not handled throws
// Error(Unsupported) naming it rather than tokenizing wrongly.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "cera/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace cera {

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::NotFound, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw Error(ErrorCode::BadFormat, path + " is not valid JSON");
  return j;
}

std::string type_of(const json& j) { return j.is_object() ? j.value("type", std::string()) : std::string(); }

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::Unsupported, path + ": unsupported " + what);
}

struct PreTokenizerInfo {
  std::vector<std::string> regexes;
  bool byte_level = false;
};

void read_pre_tokenizer(const json& pt, const std::string& path, PreTokenizerInfo& info) {
  if (pt.is_null()) return;
  const std::string type = type_of(pt);
  if (type == "Sequence") {
    for (const json& p : pt.at("pretokenizers")) read_pre_tokenizer(p, path, info);
  } else if (type == "Split") {
    if (pt.value("behavior", std::string()) != "Isolated" || pt.value("invert", false)) {
      unsupported(path, "pre_tokenizer Split behavior '" + pt.value("behavior", std::string()) + "'" +
                            (pt.value("invert", false) ? " (inverted)" : ""));
    }
    const json& pattern = pt.at("pattern");
    if (pattern.contains("Regex")) {
      info.regexes.push_back(pattern.at("Regex").get<std::string>());
    } else {
      // A literal string: quote it for PCRE2.
      info.regexes.push_back("\\Q" + pattern.at("String").get<std::string>() + "\\E");
    }
  } else if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false)) unsupported(path, "ByteLevel pre_tokenizer with add_prefix_space");
    info.byte_level = true;
    if (pt.value("use_regex", true)) {
      for (auto& r : pre_tokenizer_regexes("gpt2")) info.regexes.push_back(r);
    }
  } else {
    unsupported(path, "pre_tokenizer '" + type + "'");
  }
}

// What the normalizer does: NFC (Qwen), or SentencePiece's Prepend "▁" + Replace " " -> "▁" (Llama 2).
struct NormalizerInfo {
  bool nfc = false;
  bool prepend_metaspace = false;
  bool spaces_to_metaspace = false;
};

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581

void read_normalizer(const json& n, const std::string& path, NormalizerInfo& info) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "NFC") {
    info.nfc = true;
  } else if (type == "Sequence") {
    for (const json& s : n.at("normalizers")) read_normalizer(s, path, info);
  } else if (type == "Prepend" && n.value("prepend", std::string()) == kMetaspace) {
    info.prepend_metaspace = true;
  } else if (type == "Replace" && n.at("pattern").value("String", std::string()) == " " &&
             n.value("content", std::string()) == kMetaspace) {
    info.spaces_to_metaspace = true;
  } else {
    unsupported(path, "normalizer '" + type + "'");
  }
}

// The SentencePiece-style decoder: Replace "▁" -> " ", ByteFallback, Fuse, then optionally
// Strip one leading space. Returns whether it strips; anything else is unsupported.
bool read_spm_decoder(const json& d, const std::string& path) {
  bool replace = false, byte_fallback = false, strip = false;
  for (const json& step : type_of(d) == "Sequence" ? d.at("decoders") : json::array({d})) {
    const std::string type = type_of(step);
    if (type == "Replace" && step.at("pattern").value("String", std::string()) == kMetaspace &&
        step.value("content", std::string()) == " ") {
      replace = true;
    } else if (type == "ByteFallback") {
      byte_fallback = true;
    } else if (type == "Fuse") {
    } else if (type == "Strip" && step.value("content", std::string()) == " " && step.value("start", 0) == 1 &&
               step.value("stop", 0) == 0) {
      strip = true;
    } else {
      unsupported(path, "decoder step '" + type + "' for a byte_fallback BPE");
    }
  }
  if (!replace || !byte_fallback) unsupported(path, "byte_fallback BPE decoder without Replace(U+2581) and ByteFallback");
  return strip;
}

// Token text named by a tokenizer_config.json entry: "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::nullopt;
}

// TemplateProcessing: special tokens before the sequence mean BOS, after it EOS.
void read_post_processor(const json& pp, VocabSpec& spec, const std::unordered_map<std::string, int32_t>& ids) {
  if (pp.is_null()) return;
  const std::string type = type_of(pp);
  if (type == "Sequence") {
    for (const json& p : pp.at("processors")) read_post_processor(p, spec, ids);
    return;
  }
  if (type != "TemplateProcessing") return;  // ByteLevel post-processing only fixes offsets
  bool seen_sequence = false;
  for (const json& piece : pp.at("single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) continue;
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    int32_t id = -1;
    if (pp.contains("special_tokens") && pp["special_tokens"].contains(name)) {
      const json& st = pp["special_tokens"][name];
      if (st.contains("ids") && !st["ids"].empty()) id = st["ids"][0].get<int32_t>();
    }
    if (id < 0) {
      auto it = ids.find(name);
      if (it != ids.end()) id = it->second;
    }
    if (id < 0) continue;
    if (!seen_sequence) {
      spec.add_bos = true;
      spec.bos = id;
    } else {
      spec.add_eos = true;
      if (spec.eos < 0) spec.eos = id;
    }
  }
}

}  // namespace

VocabSpec vocab_from_hf(const std::string& tokenizer_json_path, const std::string& tokenizer_config_json_path) {
  const std::string& path = tokenizer_json_path;
  const json tj = read_json(path);
  const json config = tokenizer_config_json_path.empty() ? json::object() : read_json(tokenizer_config_json_path);
  try {
    VocabSpec spec;
    const json& model = tj.at("model");
    const std::string model_type = model.value("type", std::string("BPE"));
    if (model_type != "BPE") unsupported(path, "tokenizer model '" + model_type + "'");
    if (!model.value("continuing_subword_prefix", json()).is_null() &&
        !model["continuing_subword_prefix"].get<std::string>().empty()) {
      unsupported(path, "BPE continuing_subword_prefix");
    }
    if (!model.value("end_of_word_suffix", json()).is_null() && !model["end_of_word_suffix"].get<std::string>().empty()) {
      unsupported(path, "BPE end_of_word_suffix");
    }

    NormalizerInfo norm;
    read_normalizer(tj.value("normalizer", json()), path, norm);
    const bool byte_fallback = model.value("byte_fallback", false);
    if (byte_fallback) {
      // SentencePiece converted to BPE (Llama 2, Mistral): characters, not bytes, are merged; spaces
      // become '▁' in the normalizer, and the text is not pre-split.
      if (!tj.value("pre_tokenizer", json()).is_null()) unsupported(path, "pre_tokenizer for a byte_fallback BPE");
      if (norm.nfc || !norm.spaces_to_metaspace) unsupported(path, "byte_fallback BPE without the Replace(' ', U+2581) normalizer");
      const bool strip = read_spm_decoder(tj.value("decoder", json()), path);
      if (strip != norm.prepend_metaspace) unsupported(path, "byte_fallback BPE whose decoder Strip does not undo the Prepend normalizer");
      spec.model = "llama";
      spec.add_space_prefix = norm.prepend_metaspace;
    } else {
      PreTokenizerInfo pre;
      read_pre_tokenizer(tj.value("pre_tokenizer", json()), path, pre);
      if (!pre.byte_level && type_of(tj.value("decoder", json())) != "ByteLevel") {
        unsupported(path, "BPE without a ByteLevel pre-tokenizer (only byte-level BPE is implemented)");
      }
      if (norm.prepend_metaspace || norm.spaces_to_metaspace) unsupported(path, "U+2581 normalizer for a byte-level BPE");
      spec.model = "gpt2";
      spec.pre = "tokenizer.json";
      spec.pre_regexes = std::move(pre.regexes);
      if (spec.pre_regexes.empty()) spec.pre_regexes.push_back("(?s).+");  // no splitting: one word
      spec.normalize_nfc = norm.nfc;
    }
    spec.ignore_merges = model.value("ignore_merges", false);

    // Vocab and added tokens; ids missing from both become unused placeholders, as in gguf-py.
    std::unordered_map<std::string, int32_t> ids;
    int32_t n = 0;
    for (const auto& [text, id] : model.at("vocab").items()) {
      ids[text] = id.get<int32_t>();
      n = std::max(n, id.get<int32_t>() + 1);
    }
    const json added = tj.value("added_tokens", json::array());
    for (const json& a : added) n = std::max(n, a.at("id").get<int32_t>() + 1);
    spec.tokens.assign(n, std::string());
    spec.token_types.assign(n, static_cast<int32_t>(TokenType::Unused));
    std::vector<bool> have(n, false);
    auto is_byte_token = [](const std::string& t) {
      return t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
             std::isxdigit(static_cast<unsigned char>(t[4]));
    };
    for (const auto& [text, id] : ids) {
      spec.tokens[id] = text;
      spec.token_types[id] = static_cast<int32_t>(byte_fallback && is_byte_token(text) ? TokenType::Byte : TokenType::Normal);
      have[id] = true;
    }
    for (const json& a : added) {
      const int32_t id = a.at("id").get<int32_t>();
      spec.tokens[id] = a.at("content").get<std::string>();
      spec.token_types[id] = static_cast<int32_t>(a.value("special", false) ? TokenType::Control : TokenType::UserDefined);
      have[id] = true;
      ids[spec.tokens[id]] = id;
      if (a.value("lstrip", false) || a.value("rstrip", false))
        spec.added_token_flags[id] = {a.value("lstrip", false), a.value("rstrip", false)};
    }
    for (int32_t id = 0; id < n; ++id)
      if (!have[id]) spec.tokens[id] = "[PAD" + std::to_string(id) + "]";

    for (const json& m : model.at("merges")) {
      if (m.is_array()) {
        spec.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      } else {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) throw Error(ErrorCode::BadFormat, path + ": merge '" + s + "' has no space");
        spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      }
    }

    auto id_of = [&](const std::optional<std::string>& text) -> int32_t {
      if (!text) return -1;
      auto it = ids.find(*text);
      return it == ids.end() ? -1 : it->second;
    };
    spec.bos = id_of(config_token(config, "bos_token"));
    spec.eos = id_of(config_token(config, "eos_token"));
    spec.pad = id_of(config_token(config, "pad_token"));
    spec.unk = id_of(config_token(config, "unk_token"));
    if (spec.unk < 0 && model.contains("unk_token") && model["unk_token"].is_string())
      spec.unk = id_of(model["unk_token"].get<std::string>());
    read_post_processor(tj.value("post_processor", json()), spec, ids);
    spec.clean_spaces = config.value("clean_up_tokenization_spaces", false);
    return spec;
  } catch (const json::exception& e) {
    throw Error(ErrorCode::BadFormat, path + ": unexpected structure: " + e.what());
  }
}

}  // namespace cera
