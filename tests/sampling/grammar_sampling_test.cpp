// Grammar-constrained sampling over real vocabularies: the trie-walk mask against a token-by-token
// check, the masking cost (printed), and the acceptance test — 200 generations from a random-logit
// "model" under a nested JSON schema all parse and validate.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/grammar/json_grammar.h"
#include "sampling/grammar/json_schema.h"
#include "sampling/grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

using json = nlohmann::json;

// CPU time of this thread: the test machines are shared, and wall time mostly measures the others.
double thread_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

struct LoadedVocab {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<GrammarVocab> vocab;
};

// Token bytes as the engine would pass them: token_to_piece (control tokens give nothing, so the
// grammar never allows them), EOG ids from the tokenizer. limit > 0 keeps only the first ids.
const LoadedVocab& load(const std::string& name, int32_t limit = 0) {
  static std::map<std::string, LoadedVocab> cache;
  const std::string key = name + "/" + std::to_string(limit);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::string dir = std::string(CERA_FIXTURES_DIR) + "/tokenizers/" + name;
  LoadedVocab v;
  v.tokenizer = std::make_unique<Tokenizer>(vocab_from_hf(dir + "/tokenizer.json", dir + "/tokenizer_config.json"));
  const int32_t n = limit > 0 ? std::min(limit, v.tokenizer->n_vocab()) : v.tokenizer->n_vocab();
  std::vector<std::string> pieces;
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < n; ++id) {
    pieces.push_back(v.tokenizer->token_to_piece(id));
    if (v.tokenizer->is_eog(id)) eog.push_back(id);
  }
  const double t0 = thread_ms();
  v.vocab = std::make_shared<GrammarVocab>(std::move(pieces), std::move(eog));
  std::printf("[ vocab ] %s: %d tokens, trie of %u nodes built in %.0f ms CPU\n", name.c_str(), n, v.vocab->trie().n_nodes(),
              thread_ms() - t0);
  return cache.emplace(key, std::move(v)).first->second;
}

TEST(GrammarSampling, TrieMaskEqualsPerTokenCheck) {
  auto grammar = std::make_shared<Grammar>(json_grammar());
  // States: start, inside a key, inside a value string (where the subtree shortcut applies),
  // mid-number, after a value, a partial UTF-8 character pending, complete.
  for (const char* name : {"llama3", "qwen3"})
  for (const char* prefix : {"", "{\"na", "{\"name\": \"Al", "[1, -2.", "{\"a\": 1", "[\"\xE4\xBD", "{\"a\": [true]}"}) {
    const LoadedVocab& v = load(name);
    GrammarMatcher m(grammar, v.vocab);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    std::vector<uint8_t> mask;
    m.allowed_tokens(mask);
    int32_t n_allowed = 0, mismatches = 0;
    for (int32_t id = 0; id < v.vocab->n_vocab(); ++id) {
      n_allowed += mask[size_t(id)];
      if (bool(mask[size_t(id)]) != m.token_allowed(id) && ++mismatches <= 5)
        ADD_FAILURE() << "prefix '" << prefix << "' token " << id << " '" << v.vocab->bytes(id) << "'";
    }
    EXPECT_EQ(mismatches, 0) << prefix;
    EXPECT_GT(n_allowed, 0) << prefix;
    EXPECT_LT(n_allowed, v.vocab->n_vocab()) << prefix;
  }
}

double mask_ms(GrammarMatcher& m, int reps) {
  std::vector<float> logits(size_t(m.vocab().n_vocab()), 0.0f);
  const double t0 = thread_ms();
  for (int r = 0; r < reps; ++r) m.mask(logits);
  return (thread_ms() - t0) / reps;
}

TEST(GrammarSampling, MaskingCostOnLargeVocabularies) {
  auto grammar = std::make_shared<Grammar>(json_grammar());
  for (auto [name, limit] : {std::pair{"llama3", 65536}, std::pair{"llama3", 0}, std::pair{"qwen3", 0}}) {
    const LoadedVocab& v = load(name, limit);
    for (const char* prefix : {"{\"name\": \"Alice\", ", "{\"name\": \"Al"}) {
      GrammarMatcher m(grammar, v.vocab);
      ASSERT_TRUE(m.accept_bytes(prefix));
      const double cold = mask_ms(m, 1);  // fills the transition memo
      const double warm = mask_ms(m, 10);
      std::vector<uint8_t> mask;
      m.allowed_tokens(mask);
      std::printf("[ mask cost ] %-6s %6d tokens, after '%s' cold %6.2f ms, warm %6.2f ms/token CPU (%d allowed)\n", name,
                  v.vocab->n_vocab(), prefix, cold, warm,
                  int(std::count(mask.begin(), mask.end(), 1)));
      EXPECT_LT(warm, 200.0);  // generous: shared, loaded CI machines; the printout is the measurement
    }
  }
  // The slow case: inside a bounded string every character changes the state, so whole subtrees
  // cannot be accepted at once and the trie is walked in full.
  auto bounded = std::make_shared<Grammar>(
      json_schema_grammar(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 64}}})"));
  for (const char* name : {"llama3", "qwen3"}) {
    const LoadedVocab& v = load(name);
    GrammarMatcher m(bounded, v.vocab);
    ASSERT_TRUE(m.accept_bytes("{\"name\": \"Al"));
    const double cold = mask_ms(m, 1);
    const double warm = mask_ms(m, 10);
    std::printf("[ mask cost ] %-6s %6d tokens, inside a maxLength-64 string: cold %6.2f ms, warm %6.2f ms/token CPU\n", name,
                v.vocab->n_vocab(), cold, warm);
  }
}

// --- acceptance: random-logit generations validate against the schema ---

// A validator for the converter's subset, independent of the grammar code.
bool validate(const json& v, const json& s, const json& root, std::string& why);

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate_type(const json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

bool validate(const json& v, const json& s, const json& root, std::string& why) {
  auto fail = [&](const std::string& w) { why = w + " in " + v.dump(); return false; };
  if (s.contains("$ref")) return validate(v, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), root, why);
  if (s.contains("const") && v != s["const"]) return fail("const");
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return fail("enum");
  if (s.contains("anyOf")) {
    bool any = false;
    for (const json& sub : s["anyOf"]) any = any || validate(v, sub, root, why);
    if (!any) return fail("anyOf");
  }
  if (s.contains("oneOf")) {
    int hits = 0;
    for (const json& sub : s["oneOf"]) hits += validate(v, sub, root, why);
    if (hits != 1) return fail("oneOf matched " + std::to_string(hits));
  }
  if (s.contains("type") && !validate_type(v, s["type"])) return fail("type " + s["type"].get<std::string>());
  if (v.is_string()) {
    const size_t n = utf8_length(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return fail("minLength");
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return fail("maxLength");
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return fail("minItems");
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return fail("maxItems");
    if (s.contains("items"))
      for (const json& x : v)
        if (!validate(x, s["items"], root, why)) return false;
  }
  if (v.is_object() && s.contains("properties")) {
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return fail("required " + r.get<std::string>());
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) {
        if (!s.value("additionalProperties", true)) return fail("additional property " + k);
        continue;
      }
      if (!validate(x, s["properties"][k], root, why)) return false;
    }
  }
  return true;
}

// Every path through this schema is finite (strings have maxLength, arrays maxItems, numbers and
// whitespace are bounded by the grammar), so generation must end: the longest valid output is a
// few thousand code points and every token adds at least one byte — kMaxTokens is above that.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "role": {"enum": ["admin", "user", "guest"]},
    "nickname": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
    "address": {"$ref": "#/$defs/address"},
    "history": {"type": "array", "maxItems": 2, "items": {"type": "object",
      "properties": {"year": {"type": "integer"}, "event": {"type": "string", "maxLength": 10}},
      "required": ["year"], "additionalProperties": false}}
  },
  "required": ["name", "age", "tags", "address"],
  "additionalProperties": false,
  "$defs": {"address": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "zip": {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}]},
                   "kind": {"const": "home"}},
    "required": ["city"], "additionalProperties": false}}
})";
constexpr int kMaxTokens = 20000;

TEST(GrammarSampling, RandomLogitGenerationsValidateAgainstNestedSchema) {
  const LoadedVocab& v = load("llama3");
  const json schema = json::parse(kSchema);
  auto grammar = std::make_shared<Grammar>(json_schema_grammar(kSchema));
  const size_t n = size_t(v.vocab->n_vocab());
  std::random_device rd;
  std::vector<float> logits(n);
  double mask_total_ms = 0;
  long steps = 0;
  int ended_by_eog = 0;
  for (int g = 0; g < 200; ++g) {
    const uint64_t seed = (uint64_t(rd()) << 32) | rd();
    std::mt19937_64 rng(seed);
    uint64_t noise_state = seed;
    auto noise = [&] {  // splitmix64 -> uniform [0, 8): cheap enough for 128k logits per step
      uint64_t z = (noise_state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return float((z ^ (z >> 31)) >> 40) * (8.0f / 16777216.0f);
    };
    GrammarMatcher m(grammar, v.vocab);
    std::vector<int32_t> ids;
    bool eog = false;
    for (int step = 0; step < kMaxTokens && !m.is_exhausted(); ++step) {
      for (float& l : logits) l = noise();  // the "model": fresh random logits every step
      const double t0 = thread_ms();
      m.mask(logits);
      mask_total_ms += thread_ms() - t0;
      ++steps;
      // Temperature 1: softmax over what is left, then one draw.
      const float mx = *std::max_element(logits.begin(), logits.end());
      ASSERT_TRUE(std::isfinite(mx)) << "seed " << seed << ": every token masked after " << ids.size() << " tokens";
      double total = 0;
      for (float& l : logits) total += (l = std::exp(l - mx));
      double r = std::uniform_real_distribution<double>(0, total)(rng);
      int32_t id = 0;
      for (size_t i = 0; i < n; ++i) {
        if (logits[i] <= 0) continue;
        id = int32_t(i);
        if ((r -= logits[i]) <= 0) break;
      }
      m.accept_token(id);
      if (v.vocab->is_eog(id)) { eog = true; break; }
      ids.push_back(id);
    }
    ended_by_eog += eog;
    ASSERT_TRUE(m.is_complete() || eog) << "seed " << seed << ": no end after " << kMaxTokens << " tokens";
    const std::string text = v.tokenizer->decode(ids);
    json value;
    try {
      value = json::parse(text);
    } catch (const json::parse_error& e) {
      FAIL() << "seed " << seed << ": not JSON: " << e.what() << "\n" << text;
    }
    std::string why;
    EXPECT_TRUE(validate(value, schema, schema, why)) << "seed " << seed << ": " << why << "\n" << text;
    if (g < 3) std::printf("[ sample %d ] %zu tokens: %s\n", g, ids.size(), text.c_str());
  }
  std::printf("[ mask cost ] schema sampling, llama3 %zu tokens: %.2f ms/token CPU over %ld steps; %d/200 ended by EOG\n", n,
              mask_total_ms / double(steps), steps, ended_by_eog);
}

}  // namespace
}  // namespace cera
