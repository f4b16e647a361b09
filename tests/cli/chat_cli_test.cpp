// `cera run --chat/--system/--tools` and `cera chat` without a terminal (stdin piped).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>

namespace cera {
namespace {

std::string model() { return std::string(CERA_SOURCE_DIR) + "/models/default.gguf"; }

std::string sh(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A grammar forces a Hermes tool call (the default model's template has no LFM2 tool list), so
// the parsing path runs end to end: the call comes out as one marked JSON line, not as text.
TEST(CliChat, RunWithToolsPrintsParsedToolCalls) {
  const std::string tools = write_temp(
      "tools.json", R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])");
  const std::string grammar = write_temp(
      "call.gbnf",
      R"(root ::= "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")");
  int rc = 0;
  const std::string out = sh(std::string(CERA_CLI_PATH) + " run -m " + model() + " -t 2 --temp 0 -n 300 --tools " +
                                 tools + " --grammar-file " + grammar + " -p 'Weather in Paris?' 2>/dev/null",
                             &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("Sure."), std::string::npos) << out;
  EXPECT_NE(out.find("[tool_call] {\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}"), std::string::npos) << out;
  EXPECT_EQ(out.find("<tool_call>"), std::string::npos) << "the call's markup must not leak as content: " << out;
}

// The prompt `run --chat` evaluates is the template's rendering, special tokens parsed.
TEST(CliChat, RunChatFeedsTheTemplate) {
  int rc = 0;
  const std::string rendered = write_temp(
      "rendered.json",
      R"(["<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"])");
  const std::string ids =
      sh(std::string(CERA_CLI_PATH) + " tokenize -m " + model() + " --parse-special --json-input " + rendered + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << ids;
  const size_t n_ids = size_t(std::count(ids.begin(), ids.end(), ',')) + 1;
  const std::string chat = sh(std::string(CERA_CLI_PATH) + " run -m " + model() +
                                  " -t 2 --temp 0 -n 1 --system 'Be brief.' -p Hi 2>&1 >/dev/null",
                              &rc);
  ASSERT_EQ(rc, 0) << chat;
  EXPECT_NE(chat.find("prompt " + std::to_string(n_ids) + " tokens"), std::string::npos) << ids << "\n" << chat;
}

TEST(CliChat, PipedConversationAndSave) {
  const std::string save = ::testing::TempDir() + "/conv.json";
  int rc = 0;
  const std::string out = sh("printf 'Hello\\n/system Be brief.\\nHi\\n/save " + save + "\\n/bogus\\n' | " +
                                 CERA_CLI_PATH + " chat -m " + model() + " -t 2 --temp 0 -n 8 2>/dev/null",
                             &rc);
  EXPECT_EQ(rc, 0) << "end of input leaves cleanly";
  EXPECT_NE(out.find("[system prompt set; conversation reset]"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown command /bogus"), std::string::npos) << out;
  std::ifstream in(save);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"Be brief.\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"Hi\""), std::string::npos) << text;
  EXPECT_EQ(text.find("\"Hello\""), std::string::npos) << "/system starts over: " << text;
}

}  // namespace
}  // namespace cera
