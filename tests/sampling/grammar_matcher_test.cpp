#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cera/error.h"
#include "sampling/grammar/json_grammar.h"
#include "sampling/grammar/matcher.h"

namespace cera {
namespace {

std::shared_ptr<const GrammarVocab> empty_vocab() {
  static auto v = std::make_shared<GrammarVocab>(std::vector<std::string>{}, std::vector<int32_t>{});
  return v;
}

GrammarMatcher matcher(const std::string& gbnf, std::shared_ptr<const GrammarVocab> vocab = empty_vocab()) {
  return GrammarMatcher(std::make_shared<Grammar>(Grammar::parse(gbnf)), std::move(vocab));
}

// The whole input is consumed and the grammar can end there.
bool matches(const std::string& gbnf, std::string_view input) {
  GrammarMatcher m = matcher(gbnf);
  return m.accept_bytes(input) && m.is_complete();
}

TEST(GrammarMatcher, SequencesAlternativesRepetition) {
  const std::string g = "root ::= (\"ab\" | \"c\")+ [0-9]? \"!\"\n";
  EXPECT_TRUE(matches(g, "ab!"));
  EXPECT_TRUE(matches(g, "cabc7!"));
  EXPECT_FALSE(matches(g, "!"));
  EXPECT_FALSE(matches(g, "a!"));
  EXPECT_FALSE(matches(g, "ab77!"));
  EXPECT_FALSE(matches(g, "ab"));  // a prefix, not complete
  GrammarMatcher m = matcher(g);
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.is_complete());
  EXPECT_FALSE(m.accept_bytes("x"));  // refused, state kept
  EXPECT_TRUE(m.accept_bytes("!"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.is_exhausted());
}

TEST(GrammarMatcher, CountedRepetition) {
  const std::string g = "root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,}\n";
  EXPECT_TRUE(matches(g, "aabbc"));
  EXPECT_TRUE(matches(g, "aaabbccc"));
  EXPECT_FALSE(matches(g, "abbc"));
  EXPECT_FALSE(matches(g, "aaaabbc"));
  EXPECT_FALSE(matches(g, "aabc"));
  EXPECT_FALSE(matches(g, "aabbbc"));
  EXPECT_FALSE(matches(g, "aabb"));
}

TEST(GrammarMatcher, CharacterClassesAndUnicode) {
  EXPECT_TRUE(matches("root ::= [a-c0-2_]+\n", "a0_c2b"));
  EXPECT_FALSE(matches("root ::= [a-c0-2_]+\n", "a3"));
  EXPECT_TRUE(matches("root ::= [^a-c]+\n", "xyz\xC3\xA9"));
  EXPECT_FALSE(matches("root ::= [^a-c]+\n", "xbz"));
  // Greek lower case U+03B1..U+03C9, written literally and as \u escapes.
  EXPECT_TRUE(matches("root ::= [α-ω]+\n", "αβγω"));
  EXPECT_TRUE(matches("root ::= [\\u03B1-\\u03C9]+\n", "αβγω"));
  EXPECT_FALSE(matches("root ::= [α-ω]+\n", "αΩ"));  // U+03A9 is outside
  EXPECT_TRUE(matches("root ::= [\\U0001F600-\\U0001F64F]\n", "\xF0\x9F\x98\x80"));  // 😀
  EXPECT_FALSE(matches("root ::= [\\U0001F600-\\U0001F64F]\n", "\xF0\x9F\x8C\x80"));  // 🌀 U+1F300
  EXPECT_TRUE(matches("root ::= . . .\n", "a\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches("root ::= \"\\x41\\u00e9\"\n", "A\xC3\xA9"));
}

TEST(GrammarMatcher, InvalidUtf8IsNeverAccepted) {
  const std::string any = "root ::= .*\n";
  EXPECT_FALSE(matches(any, "\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(matches(any, "\xED\xA0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(matches(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(matches(any, "\x80"));              // stray continuation
  EXPECT_TRUE(matches(any, "\xED\x9F\xBF"));       // U+D7FF, just below the surrogates
}

TEST(GrammarMatcher, PartialUtf8Tokens) {
  GrammarMatcher m = matcher("root ::= [α-ω] \"!\"\n");  // α = CE B1, ω = CF 89
  EXPECT_TRUE(m.allowed("\xCE"));    // could still become α..ο
  EXPECT_TRUE(m.allowed("\xCF"));
  EXPECT_FALSE(m.allowed("\xCD"));   // U+0340..U+037F: none of them is Greek lower case here
  EXPECT_FALSE(m.allowed("\xE2"));   // three-byte characters are all outside
  EXPECT_FALSE(m.allowed("\xCE\xA9"));  // Ω, complete and outside
  ASSERT_TRUE(m.accept_bytes("\xCE"));
  EXPECT_FALSE(m.is_complete());
  EXPECT_FALSE(m.allowed("!"));      // the pending character must be finished first
  EXPECT_FALSE(m.allowed("\xB0"));   // CE B0 = ΰ U+03B0, just below α
  EXPECT_TRUE(m.allowed("\xB1!"));
  ASSERT_TRUE(m.accept_bytes("\xB1"));
  ASSERT_TRUE(m.accept_bytes("!"));
  EXPECT_TRUE(m.is_complete());
  // The first byte of a character restricts the second (E0 needs A0..BF): a three-byte class
  // holding only U+0100 cannot start with E0.
  EXPECT_FALSE(matcher("root ::= [\\u0100\\u0800]\n").allowed("\xE0\x9F"));
  EXPECT_TRUE(matcher("root ::= [\\u0100\\u0800]\n").allowed("\xE0"));
  EXPECT_FALSE(matcher("root ::= [\\u0100]\n").allowed("\xE0"));
}

TEST(GrammarMatcher, MaskAgreesWithPerTokenCheckAndHandlesEog) {
  const std::vector<std::string> pieces = {"a", "b", "ab", "abc", "\xCE", "\xB1", "\xCE\xB1", "c!", "!", "", "<eos>"};
  auto vocab = std::make_shared<GrammarVocab>(pieces, std::vector<int32_t>{10});
  GrammarMatcher m = matcher("root ::= (\"a\" | \"b\")* [α-ω]? \"c\"? \"!\"?\n", vocab);
  auto allowed_now = [&] {
    std::vector<float> logits(pieces.size() + 2, 1.0f);  // two padding entries past the vocab
    m.mask(logits);
    std::vector<int> ids;
    for (size_t i = 0; i < logits.size(); ++i)
      if (!std::isinf(logits[i])) ids.push_back(int(i));
    return ids;
  };
  // Initially: everything but the empty token ("abc" needs "c" after "ab": fine); EOS because
  // the grammar can end at once.
  EXPECT_EQ(allowed_now(), (std::vector<int>{0, 1, 2, 3, 4, 6, 7, 8, 10}));
  m.accept_token(4);  // half of α
  EXPECT_EQ(allowed_now(), (std::vector<int>{5}));
  m.accept_token(5);
  EXPECT_EQ(allowed_now(), (std::vector<int>{7, 8, 10}));
  EXPECT_THROW(m.accept_token(0), Error);
  m.accept_token(7);
  EXPECT_EQ(allowed_now(), (std::vector<int>{10}));
  EXPECT_TRUE(m.is_exhausted());
  m.accept_token(10);
  EXPECT_EQ(allowed_now(), (std::vector<int>{}));
}

TEST(GrammarMatcher, JsonGrammar) {
  const std::string g = json_gbnf();
  EXPECT_TRUE(matches(g, R"({"a": [1, -2.5e10, true, null, "x\n\u00e9\ud83d\ude00"], "b": {}})"));
  EXPECT_TRUE(matches(g, "[\n  1,\n  2\n]"));
  EXPECT_TRUE(matches(g, "\"caf\xC3\xA9\""));
  EXPECT_FALSE(matches(g, R"({"a": 01})"));
  EXPECT_FALSE(matches(g, R"({"a" 1})"));
  EXPECT_FALSE(matches(g, R"([1,])"));
  EXPECT_FALSE(matches(g, "\"tab\there\""));       // raw control character
  EXPECT_FALSE(matches(g, R"("\ud83d")"));          // lone high surrogate
  EXPECT_FALSE(matches(g, R"("\ude00")"));          // lone low surrogate
  EXPECT_FALSE(matches(g, R"({"a": 1)"));
}

}  // namespace
}  // namespace cera
