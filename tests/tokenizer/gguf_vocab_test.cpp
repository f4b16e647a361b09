// The GGUF tokenizer of each tiny model must tokenize the reference prompts exactly as HF does.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace cera {
namespace {

using nlohmann::json;

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

class TinyModelGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyModelGguf, MatchesReferencePrompts) {
  const std::string dir = test::fixture_path("models/" + GetParam());
  const auto file = gguf::File::open(dir + "/gguf/" + GetParam() + "-BF16.gguf");
  const Tokenizer tok(vocab_from_gguf(*file));
  const json ref = json::parse(test::read_text_file(dir + "/ref/prompts.json"));
  ASSERT_FALSE(ref.at("prompts").empty());
  for (const json& p : ref.at("prompts")) {
    SCOPED_TRACE("prompt: " + p.at("text").get<std::string>());
    EXPECT_EQ(tok.encode(p.at("text").get<std::string>(), true, true), ids_of(p.at("ids")));
  }
  for (const json& c : ref.at("chat")) {
    if (!c.contains("ids")) continue;
    SCOPED_TRACE("chat: " + c.at("rendered").get<std::string>());
    EXPECT_EQ(tok.encode(c.at("rendered").get<std::string>(), false, true), ids_of(c.at("ids")));
  }
  for (const json& d : ref.at("decode")) {
    EXPECT_EQ(tok.decode(ids_of(d.at("ids"))), d.at("text").get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TinyModelGguf, ::testing::Values("lfm2-tiny", "llama-tiny", "qwen2-tiny", "qwen3-tiny"));

TEST(GgufVocab, Lfm2SpecialTokensAndEog) {
  const auto file = gguf::File::open(test::fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-BF16.gguf"));
  const VocabSpec spec = vocab_from_gguf(*file);
  EXPECT_EQ(spec.pre, "lfm2");
  EXPECT_TRUE(spec.ignore_merges);
  const Tokenizer tok(spec);
  EXPECT_EQ(tok.n_vocab(), 1024);
  EXPECT_EQ(tok.bos(), 1);  // <|startoftext|> (MODELS.md §7.1)
  EXPECT_EQ(tok.eos(), 7);  // <|im_end|>
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.token_text(6), "<|im_start|>");
  EXPECT_TRUE(tok.is_control(6));
  EXPECT_TRUE(tok.is_eog(7));
  EXPECT_TRUE(tok.is_eog(2));  // <|endoftext|>
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.is_eog(6));
  // CONTROL text is plain text unless parse_special.
  EXPECT_EQ(tok.encode("<|im_end|>", false, true), std::vector<int32_t>{7});
  EXPECT_NE(tok.encode("<|im_end|>", false, false), std::vector<int32_t>{7});
  EXPECT_EQ(tok.decode(std::vector<int32_t>{6, 7}, /*render_special=*/true), "<|im_start|><|im_end|>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{6, 7}), "");
}

TEST(GgufVocab, Qwen2HasNoBos) {
  const auto file = gguf::File::open(test::fixture_path("models/qwen2-tiny/gguf/qwen2-tiny-BF16.gguf"));
  const Tokenizer tok(vocab_from_gguf(*file));
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.eot(), 2);  // <|im_end|> detected by text
}

}  // namespace
}  // namespace cera
