// SentencePiece encoding on hand-built vocabularies: which pair merges first (score, ties leftmost,
// or HF merge rank), byte fallback, the space prefix, and decoding of '▁' and byte tokens.
#include <gtest/gtest.h>

#include "cera/error.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

const std::string kSp = "\xE2\x96\x81";  // U+2581

using Ids = std::vector<int32_t>;

// ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0xE4>, 4 <0xB8>, 5 <0xAD>, 6 <0x0A>, 7 ▁, 8 a, 9 b, 10 c,
// 11 ab, 12 bc, 13 ▁a, 14 ▁ab
VocabSpec tiny(float score_ab, float score_bc) {
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>", "<0xE4>", "<0xB8>", "<0xAD>", "<0x0A>", kSp, "a", "b", "c", "ab", "bc", kSp + "a", kSp + "ab"};
  const auto N = int32_t(TokenType::Normal), B = int32_t(TokenType::Byte);
  s.token_types = {int32_t(TokenType::Unknown), int32_t(TokenType::Control), int32_t(TokenType::Control), B, B, B, B,
                   N, N, N, N, N, N, N, N};
  s.scores = {0, 0, 0, 0, 0, 0, 0, -5, -10, -10, -10, score_ab, score_bc, -2, -1};
  s.bos = 1, s.eos = 2, s.unk = 0;
  s.add_bos = true;
  return s;
}

TEST(SpmTiny, HigherScoringPairMergesFirst) {
  EXPECT_EQ(Tokenizer(tiny(-3, -4)).encode("abc", false, false), (Ids{11, 10}));  // ab wins
  EXPECT_EQ(Tokenizer(tiny(-4, -3)).encode("abc", false, false), (Ids{8, 12}));   // bc wins
}

TEST(SpmTiny, EqualScoresMergeLeftmostFirst) {
  EXPECT_EQ(Tokenizer(tiny(-3, -3)).encode("abc", false, false), (Ids{11, 10}));
  EXPECT_EQ(Tokenizer(tiny(-3, -3)).encode("bcab", false, false), (Ids{12, 11}));
}

TEST(SpmTiny, MergedPiecesKeepMerging) {
  VocabSpec s = tiny(-3, -4);
  s.add_space_prefix = true;
  const Tokenizer tok(s);
  // ▁ a b c: ▁a (-2) and ab (-3) compete; ▁a wins, then ▁a+b = ▁ab (-1).
  EXPECT_EQ(tok.encode("abc", false, false), (Ids{14, 10}));
  EXPECT_EQ(tok.encode("abc", true, false), (Ids{1, 14, 10}));
  // Spaces become ▁; each fragment after a special token gets its own prefix.
  EXPECT_EQ(tok.encode("a b", false, false), (Ids{13, 7, 9}));
  EXPECT_EQ(tok.encode("a<s>b", false, true), (Ids{13, 1, 7, 9}));
  EXPECT_EQ(tok.encode("", true, true), (Ids{1}));
}

TEST(SpmTiny, UnknownCharactersFallBackToBytes) {
  const Tokenizer tok(tiny(-3, -4));
  EXPECT_EQ(tok.encode("a\xE4\xB8\xAD" "b", false, false), (Ids{8, 3, 4, 5, 9}));  // a中b
  EXPECT_EQ(tok.encode("\n", false, false), (Ids{6}));
  // é = C3 A9 has no byte tokens here: the whole character becomes <unk>.
  EXPECT_EQ(tok.encode("a\xC3\xA9", false, false), (Ids{8, 0}));
  // Byte and special tokens are never merge results, even when their text is spelled out.
  EXPECT_EQ(tok.encode("<s>", false, false).size(), 3u);
}

TEST(SpmTiny, MergeListRanksPairsWhenPresent) {
  // HF's byte_fallback BPE ranks pairs by the merge list, not by score: bc is listed first here
  // although ab scores higher.
  VocabSpec s = tiny(-3, -4);
  s.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(Tokenizer(s).encode("abc", false, false), (Ids{8, 12}));
}

TEST(SpmTiny, DecodesMetaspaceAndBytes) {
  VocabSpec s = tiny(-3, -4);
  s.add_space_prefix = true;
  const Tokenizer tok(s);
  EXPECT_EQ(tok.token_to_piece(13), " a");
  EXPECT_EQ(tok.token_to_piece(3), "\xE4");
  EXPECT_EQ(tok.decode(Ids{13, 7, 9}), "a b");
  EXPECT_EQ(tok.decode(Ids{7, 13}), " a");  // only one leading space is the prefix
  EXPECT_EQ(tok.decode(Ids{13, 3, 4, 5}), "a\xE4\xB8\xAD");
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.push(13), "a");
  EXPECT_EQ(stream.push(3), "");
  EXPECT_EQ(stream.push(4), "");
  EXPECT_EQ(stream.push(5), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.push(3), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end
  // Without add_space_prefix nothing is stripped.
  EXPECT_EQ(Tokenizer(tiny(-3, -4)).decode(Ids{13}), " a");
}

TEST(SpmTiny, OtherModelsAreStillRejected) {
  VocabSpec s = tiny(-3, -4);
  s.model = "t5";
  EXPECT_THROW(Tokenizer{s}, Error);
}

}  // namespace
}  // namespace cera
