// The LFM2 template of MODELS.md §7.2 (tests/chat/data/lfm2_tools.jinja) with tool lists, tool
// calls and tool responses, against strings derived by hand from §7.2's rules.
#include <gtest/gtest.h>

#include "render_helpers.h"
#include "support/fixtures.h"

namespace {

using nlohmann::ordered_json;

class Lfm2Template : public ::testing::Test {
 protected:
  std::string render(const ordered_json& messages, const ordered_json& tools, bool add_generation_prompt) {
    cera::chat::ChatContextOptions opt;
    opt.add_generation_prompt = add_generation_prompt;
    opt.bos_token = "<|startoftext|>";
    opt.eos_token = "<|im_end|>";
    static const cera::chat::ChatTemplate tmpl(
        cera::test::read_text_file(cera::test::source_path("tests/chat/data/lfm2_tools.jinja")));
    return tmpl.render(cera::chat::make_chat_context(messages, tools, opt));
  }
  const ordered_json tools_ = ordered_json::parse(R"([
    {"name": "get_weather", "description": "Get the weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"name": "get_time", "parameters": {}}])");
  const std::string tool_list_ =
      "List of tools: <|tool_list_start|>[{\"name\": \"get_weather\", \"description\": \"Get the weather\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
      "[\"city\"]}}, {\"name\": \"get_time\", \"parameters\": {}}]<|tool_list_end|>";
};

TEST_F(Lfm2Template, ModelsMdExample) {
  const auto messages = ordered_json::parse(
      R"([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(render(messages, nullptr, true),
            "<|startoftext|><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(Lfm2Template, NoSystemNoToolsMeansNoSystemTurn) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(render(messages, nullptr, false), "<|startoftext|><|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(render(messages, ordered_json::array(), false), "<|startoftext|><|im_start|>user\nHi<|im_end|>\n");
}

TEST_F(Lfm2Template, ToolsWithoutSystemPrompt) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Time?"}])");
  EXPECT_EQ(render(messages, tools_, true),
            "<|startoftext|><|im_start|>system\n" + tool_list_ + "<|im_end|>\n"
            "<|im_start|>user\nTime?<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(Lfm2Template, ToolCallAndResponseConversation) {
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>Checking."},
    {"role": "tool", "content": {"temp": 21, "unit": "C"}},
    {"role": "tool", "content": "[\"ok\"]"},
    {"role": "assistant", "content": "It is 21 C."}])");
  EXPECT_EQ(render(messages, tools_, true),
            "<|startoftext|><|im_start|>system\nYou are a helpful assistant.\n" + tool_list_ + "<|im_end|>\n"
            "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|>Checking.<|im_end|>\n"
            "<|im_start|>tool\n<|tool_response_start|>{\"temp\": 21, \"unit\": \"C\"}<|tool_response_end|><|im_end|>\n"
            "<|im_start|>tool\n<|tool_response_start|>[\"ok\"]<|tool_response_end|><|im_end|>\n"
            "<|im_start|>assistant\nIt is 21 C.<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(Lfm2Template, NonStringContentIsJsonSerialized) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])");
  EXPECT_EQ(render(messages, nullptr, false),
            "<|startoftext|><|im_start|>user\n[{\"type\": \"text\", \"text\": \"x\"}]<|im_end|>\n");
}

}  // namespace
