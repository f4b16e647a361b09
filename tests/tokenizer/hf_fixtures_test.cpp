// Byte-level BPE against the Hugging Face oracle: the real Llama 3 / Qwen3 tokenizers on 111
// strings, and the tiny models' tokenizer.json on their prompts, chat renderings and decodes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cera/error.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

using nlohmann::json;

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

const Tokenizer& real_tokenizer(const std::string& name) {
  // Loading the 128k/151k vocabularies takes a moment; share one per name across tests.
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    const std::string dir = test::fixture_path("tokenizers/" + name);
    slot = std::make_unique<Tokenizer>(vocab_from_hf(dir + "/tokenizer.json", dir + "/tokenizer_config.json"));
  }
  return *slot;
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenizer, EncodesAndDecodesEveryCase) {
  const Tokenizer& tok = real_tokenizer(GetParam());
  const json cases = json::parse(test::read_text_file(test::fixture_path("tokenizers/" + GetParam() + "/cases.json")));
  ASSERT_GE(cases.at("cases").size(), 100u);
  for (const json& c : cases.at("cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: " + text);
    // HF always splits added tokens out of the text, i.e. parse_special = true.
    EXPECT_EQ(tok.encode(text, /*add_special=*/false, /*parse_special=*/true), ids_of(c.at("ids")));
    EXPECT_EQ(tok.encode(text, /*add_special=*/true, /*parse_special=*/true), ids_of(c.at("ids_with_special")));
    const auto ids = ids_of(c.at("ids"));
    EXPECT_EQ(tok.decode(ids, /*render_special=*/true, tok.clean_spaces()), c.at("decoded").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealTokenizer, ::testing::Values("llama3", "qwen3"));

TEST(RealTokenizer, Llama3Specials) {
  const Tokenizer& tok = real_tokenizer("llama3");
  EXPECT_EQ(tok.n_vocab(), 128256);
  EXPECT_EQ(tok.bos(), 128000);
  EXPECT_EQ(tok.eos(), 128001);
  EXPECT_FALSE(tok.add_bos());  // this tokenizer.json's post_processor is ByteLevel only
  EXPECT_TRUE(tok.is_eog(*tok.find_token("<|eot_id|>")));
  EXPECT_TRUE(tok.is_eog(128001));
  EXPECT_FALSE(tok.is_eog(9906));
  EXPECT_TRUE(tok.is_control(128006));
  // Without parse_special the header token text is ordinary text.
  EXPECT_EQ(tok.encode("<|start_header_id|>", false, false), (std::vector<int32_t>{27, 91, 2527, 8932, 851, 91, 29}));
}

TEST(RealTokenizer, Qwen3UserDefinedTokensMatchEvenWithoutParseSpecial) {
  const Tokenizer& tok = real_tokenizer("qwen3");
  // <think> is a non-special added token (USER_DEFINED): always matched; <|im_start|> is CONTROL.
  const auto ids = tok.encode("<think><|im_start|>", false, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 151667);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151644), 0);
  EXPECT_EQ(tok.encode("<think><|im_start|>", false, true), (std::vector<int32_t>{151667, 151644}));
}

class TinyModelHf : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModelHf, MatchesReferencePrompts) {
  const std::string dir = test::fixture_path("models/" + GetParam());
  const Tokenizer tok(vocab_from_hf(dir + "/hf/tokenizer.json", dir + "/hf/tokenizer_config.json"));
  const json ref = json::parse(test::read_text_file(dir + "/ref/prompts.json"));
  ASSERT_FALSE(ref.at("prompts").empty());
  for (const json& p : ref.at("prompts")) {
    SCOPED_TRACE("prompt: " + p.at("text").get<std::string>());
    EXPECT_EQ(tok.encode(p.at("text").get<std::string>(), true, true), ids_of(p.at("ids")));
  }
  for (const json& c : ref.at("chat")) {
    if (!c.contains("ids")) continue;
    SCOPED_TRACE("chat: " + c.at("rendered").get<std::string>());
    // The rendering already holds BOS where the template writes it.
    EXPECT_EQ(tok.encode(c.at("rendered").get<std::string>(), false, true), ids_of(c.at("ids")));
  }
  for (const json& d : ref.at("decode")) {
    EXPECT_EQ(tok.decode(ids_of(d.at("ids"))), d.at("text").get<std::string>());
    EXPECT_EQ(tok.encode(d.at("text").get<std::string>(), true, true), ids_of(d.at("ids")));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TinyModelHf, ::testing::Values("lfm2-tiny", "llama-tiny", "qwen2-tiny", "qwen3-tiny"));

}  // namespace
}  // namespace cera
