// Core behaviour on hand-built vocabularies (merge order, fallbacks, errors) and the streaming
// detokenizer.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cera/error.h"
#include "support/fixtures.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

// All 256 byte tokens (ids 0..255, in byte order) plus extra tokens and merges.
VocabSpec byte_vocab(std::vector<std::string> extra, std::vector<std::pair<std::string, std::string>> merges,
                     const std::string& pre = "gpt2") {
  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = pre;
  for (const auto& s : byte_level::byte_to_utf8()) spec.tokens.push_back(s);
  for (auto& e : extra) spec.tokens.push_back(std::move(e));
  spec.merges = std::move(merges);
  return spec;
}

TEST(ByteLevel, MapIsTheGpt2One) {
  EXPECT_EQ(byte_level::byte_to_codepoint(' '), 0x120u);
  EXPECT_EQ(byte_level::byte_to_codepoint('\n'), 0x10Au);
  EXPECT_EQ(byte_level::byte_to_codepoint('\t'), 0x109u);
  EXPECT_EQ(byte_level::byte_to_codepoint('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(byte_level::byte_to_codepoint(0xAD), 0x143u);  // the last of the 68 moved bytes
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_level::code_point_to_byte(byte_level::byte_to_codepoint(b)), b);
}

TEST(Bpe, LowestRankFirstThenLeftmost) {
  // "abc": merges (b,c) rank 0 beats (a,b) rank 1 -> a + bc.
  Tokenizer t1(byte_vocab({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(t1.encode("abc", false, false), (std::vector<int32_t>{'a', 257}));
  Tokenizer t2(byte_vocab({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(t2.encode("abc", false, false), (std::vector<int32_t>{256, 'c'}));
  // "aaa" with one merge (a,a): the leftmost pair merges first -> aa + a.
  Tokenizer t3(byte_vocab({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(t3.encode("aaa", false, false), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t3.encode("aaaa", false, false), (std::vector<int32_t>{256, 256}));
}

TEST(Bpe, MergesChainAndIgnoreMergesShortcut) {
  // "abcd" -> ab, cd, abcd through three merges.
  VocabSpec spec = byte_vocab({"ab", "cd", "abcd", "xyz"}, {{"a", "b"}, {"c", "d"}, {"ab", "cd"}});
  Tokenizer t(spec);
  EXPECT_EQ(t.encode("abcd", false, false), std::vector<int32_t>{258});
  // "xyz" is a token but no merges build it: only ignore_merges emits it whole.
  EXPECT_EQ(t.encode("xyz", false, false), (std::vector<int32_t>{'x', 'y', 'z'}));
  spec.ignore_merges = true;
  EXPECT_EQ(Tokenizer(spec).encode("xyz", false, false), std::vector<int32_t>{259});
}

TEST(Bpe, SpacesStayOnTheFollowingWord) {
  // GPT-2 split of "a   b" is "a", "  ", " b" (\s+(?!\S) leaves the last space to the word).
  Tokenizer t(byte_vocab({"Ġb", "ĠĠ"}, {{"Ġ", "b"}, {"Ġ", "Ġ"}}));
  EXPECT_EQ(t.encode("a   b", false, false), (std::vector<int32_t>{'a', 257, 256}));
}

TEST(Bpe, MissingByteTokenFallsBackToUnk) {
  VocabSpec spec = byte_vocab({"<unk>"}, {});
  spec.tokens['q'] = "[PAD113]";  // the vocab can no longer spell 'q'
  spec.unk = 256;
  EXPECT_EQ(Tokenizer(spec).encode("aqa", false, false), (std::vector<int32_t>{'a', 256, 'a'}));
}

TEST(Special, LongestMatchWinsAndParseSpecialGatesControl) {
  VocabSpec spec = byte_vocab({"<s>", "<s>x", "<u>"}, {});
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types[256] = spec.token_types[257] = static_cast<int32_t>(TokenType::Control);
  spec.token_types[258] = static_cast<int32_t>(TokenType::UserDefined);
  spec.bos = 256;
  spec.add_bos = true;
  Tokenizer t(spec);
  EXPECT_EQ(t.encode("a<s>xb", false, true), (std::vector<int32_t>{'a', 257, 'b'}));
  EXPECT_EQ(t.encode("<s>", true, true), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(t.encode("<u><s>", false, false), (std::vector<int32_t>{258, '<', 's', '>'}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{256, 'a', 258}), "a<u>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{256, 'a', 258}, true), "<s>a<u>");
}

TEST(Special, LstripRstripSwallowWhitespace) {
  VocabSpec spec = byte_vocab({"<m>"}, {});
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types[256] = static_cast<int32_t>(TokenType::Control);
  spec.added_token_flags[256] = {true, true};
  EXPECT_EQ(Tokenizer(spec).encode("a  <m>  b", false, true), (std::vector<int32_t>{'a', 256, 'b'}));
}

TEST(Errors, UnknownPreTokenizerIsNamed) {
  try {
    Tokenizer t(byte_vocab({}, {}, "klingon-v2"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("klingon-v2"), std::string::npos) << e.what();
  }
}

TEST(Errors, UnknownModelIsNamed) {
  VocabSpec spec = byte_vocab({}, {});
  spec.model = "rwkv";
  try {
    Tokenizer t(spec);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("rwkv"), std::string::npos) << e.what();
  }
}

TEST(Errors, DecodeRejectsIdsOutOfRange) {
  Tokenizer t(byte_vocab({}, {}));
  EXPECT_THROW(t.decode(std::vector<int32_t>{'a', 256}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(t.token_to_piece(1000), Error);
  try {
    t.decode(std::vector<int32_t>{4096});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfRange);
    EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos);
  }
}

TEST(Errors, InvalidUtf8InputIsRejected) {
  Tokenizer t(byte_vocab({}, {}));
  EXPECT_THROW(t.encode("a\xC3", false, false), Error);
  EXPECT_THROW(t.encode("\xED\xA0\x80", false, false), Error);  // a surrogate
}

TEST(Errors, HfLoaderNamesUnsupportedPieces) {
  EXPECT_THROW(vocab_from_hf("/nonexistent/tokenizer.json"), Error);
}

TEST(CleanSpaces, FollowsTransformers) {
  EXPECT_EQ(clean_up_tokenization_spaces("a . b ? c ! d , e ' f don 't I 'm it 's we 've they 're x 'll"),
            "a. b? c! d, e'f don 't I'm it's we've they're x 'll");
}

// ---- streaming detokenizer ----

bool valid_utf8(const std::string& s) { return utf8::is_valid(s); }

TEST(Streaming, SplitEmojiIsHeldUntilComplete) {
  Tokenizer t(byte_vocab({}, {}));
  const std::string fox = "\xF0\x9F\xA6\x8A";  // U+1F98A, one byte token per byte
  const auto ids = t.encode("a" + fox + "b", false, false);
  ASSERT_EQ(ids.size(), 6u);
  StreamingDetokenizer d(t);
  EXPECT_EQ(d.push(ids[0]), "a");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.push(ids[2]), "");
  EXPECT_EQ(d.push(ids[3]), "");
  EXPECT_EQ(d.push(ids[4]), fox);
  EXPECT_EQ(d.push(ids[5]), "b");
  EXPECT_EQ(d.flush(), "");
}

TEST(Streaming, InvalidAndTruncatedBytesBecomeReplacementChars) {
  Tokenizer t(byte_vocab({}, {}));
  StreamingDetokenizer d(t);
  EXPECT_EQ(d.push(0xFF), "\xEF\xBF\xBD");  // never valid
  EXPECT_EQ(d.push(0xE6), "");
  EXPECT_EQ(d.push('x'), "\xEF\xBF\xBDx");  // the lead byte was not continued
  EXPECT_EQ(d.push(0xE6), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

TEST(Streaming, FixtureIdsOneByOne) {
  const std::string dir = test::fixture_path("tokenizers/qwen3");
  const Tokenizer t(vocab_from_hf(dir + "/tokenizer.json", dir + "/tokenizer_config.json"));
  const auto cases = nlohmann::json::parse(test::read_text_file(dir + "/cases.json")).at("cases");
  size_t held_back = 0;
  for (const auto& c : cases) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    for (bool render : {false, true}) {
      StreamingDetokenizer d(t, render);
      std::string all;
      for (int32_t id : ids) {
        const std::string piece = d.push(id);
        EXPECT_TRUE(valid_utf8(piece));
        if (piece.empty() && !t.token_to_piece(id, render).empty()) ++held_back;
        all += piece;
      }
      all += d.flush();
      EXPECT_EQ(all, t.decode(ids, render)) << c.at("text").get<std::string>();
    }
  }
  EXPECT_GT(held_back, 0u);  // the emoji / CJK cases do split characters across tokens
}

}  // namespace
}  // namespace cera
