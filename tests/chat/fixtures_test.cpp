// Real chat templates against their reference renderings: chat/templates.json (rendered by
// @huggingface/jinja) and each fixture model's chat_template.jinja against ref/prompts.json `chat`
// (rendered by transformers).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cera/error.h"
#include "chat/chat_template.h"
#include "support/fixtures.h"

namespace {

using nlohmann::ordered_json;
using cera::chat::ChatTemplate;

ordered_json load_json(const std::string& path) { return ordered_json::parse(cera::test::read_text_file(path)); }

TEST(ChatFixtures, TemplatesJsonRendersByteIdentical) {
  const ordered_json all = load_json(cera::test::fixture_path("chat/templates.json"));
  int rendered = 0, raised = 0;
  for (const auto& [model, entry] : all.at("models").items()) {
    const ChatTemplate tmpl(entry.at("template").get<std::string>());
    int i = 0;
    for (const auto& c : entry.at("cases")) {
      SCOPED_TRACE(model + " case " + std::to_string(i++));
      ordered_json ctx = c;
      ctx.erase("rendered");
      ctx.erase("error");
      if (c.contains("error")) {
        EXPECT_THROW(tmpl.render(ctx), cera::Error);
        ++raised;
      } else {
        EXPECT_EQ(tmpl.render(ctx), c.at("rendered").get<std::string>());
        ++rendered;
      }
    }
  }
  EXPECT_EQ(rendered + raised, 20);  // 2 templates x 5 conversations x add_generation_prompt on/off
}

TEST(ChatFixtures, ModelTemplatesMatchPromptsJson) {
  int checked = 0;
  for (const char* model : {"lfm2-tiny", "llama-tiny", "qwen2-tiny", "qwen3-tiny"}) {
    SCOPED_TRACE(model);
    const std::string dir = cera::test::fixture_path(std::string("models/") + model);
    const ChatTemplate tmpl(cera::test::read_text_file(dir + "/hf/chat_template.jinja"));
    const ordered_json tok_config = load_json(dir + "/hf/tokenizer_config.json");
    const ordered_json prompts = load_json(dir + "/ref/prompts.json");
    auto token = [&](const char* key) {
      const auto& v = tok_config.value(key, ordered_json());
      return v.is_string() ? v.get<std::string>() : std::string();
    };
    for (const auto& c : prompts.at("chat")) {
      cera::chat::ChatContextOptions opt;
      opt.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
      opt.bos_token = token("bos_token");
      opt.eos_token = token("eos_token");
      const ordered_json ctx = cera::chat::make_chat_context(c.at("messages"), nullptr, opt);
      EXPECT_EQ(tmpl.render(ctx), c.at("rendered").get<std::string>());
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
