#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "cera/error.h"

namespace cera {

namespace {

// llama.cpp writes HF's (?i:'s|'t|...) case-explicitly; PCRE2 would accept either.
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

bool is_llama3_family(const std::string& pre) {
  return is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "lfm2", "falcon3", "pixtral"});
}

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buf{};
  pcre2_get_error_message(code, buf.data(), buf.size());
  return reinterpret_cast<const char*>(buf.data());
}

}  // namespace

std::vector<std::string> pre_tokenizer_regexes(const std::string& pre) {
  if (is_llama3_family(pre)) return {kLlama3};
  if (is_one_of(pre, {"qwen2", "deepseek-r1-qwen", "megrez"})) return {kQwen2};
  if (is_one_of(pre, {"gpt-2", "gpt2", "phi-2"})) return {kGpt2};
  if (pre.empty() || pre == "default") {
    // llama.cpp's degraded fallback for GGUFs written before tokenizer.ggml.pre existed.
    return {"[\\p{P}\\$\\+<=>\\^~\\|]+",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
            "\\p{N}+", "[0-9][0-9][0-9]"};
  }
  throw Error(ErrorCode::Unsupported, "unsupported tokenizer pre-tokenizer '" + pre +
                                          "' (supported: llama-bpe/llama3/lfm2, qwen2, gpt-2)");
}

bool pre_tokenizer_ignores_merges(const std::string& pre) { return is_llama3_family(pre); }

bool pre_tokenizer_adds_bos(const std::string& pre) { return is_llama3_family(pre); }

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns) {
  for (const auto& pattern : patterns) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (!c->code) {
      throw Error(ErrorCode::BadFormat, "pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                                            std::to_string(err_offset) + ": " + pcre2_message(err));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // if JIT is unavailable the interpreter runs
    regexes_.push_back(std::move(c));
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  for (const auto& re : regexes_) {
    // Match data per call keeps split() thread-safe.
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      PCRE2_SIZE pos = 0, gap_start = 0;
      // The caller validated the UTF-8 once; re-checking on every call would be quadratic.
      while (pos < piece.size()) {
        const int rc = pcre2_match(re->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          throw Error(ErrorCode::Internal, "pre-tokenizer regex failed: " + pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const PCRE2_SIZE start = ov[0], end = ov[1];
        if (start > gap_start) next.push_back(piece.substr(gap_start, start - gap_start));
        if (end > start) {
          next.push_back(piece.substr(start, end - start));
          pos = end;
          gap_start = end;
        } else {
          // An empty match splits nothing; step over one character.
          pos = start + 1;
          while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
        }
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(md);
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace cera
