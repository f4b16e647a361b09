#include "chat/tool_calls.h"

#include <gtest/gtest.h>

#include <random>

namespace cera::chat {
namespace {

using nlohmann::json;
const std::string S = "<|tool_call_start|>";
const std::string E = "<|tool_call_end|>";

ToolCallResult lfm2(const std::string& text) { return parse_tool_calls(text, ToolCallFormat::Lfm2); }
ToolCallResult hermes(const std::string& text) { return parse_tool_calls(text, ToolCallFormat::Hermes); }

TEST(ToolCallsLfm2, AllLiteralKinds) {
  auto r = lfm2(S + R"([get_weather(arg="v", n=3, neg=-2, f=1.5, e=1e3, flag=True, off=False, none=None, obj={"a": 1, 'b': [1, 2]}, lst=[1, 2], tup=(1, 'x'), big=1_000)])" + E);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  const json want = {{"arg", "v"},   {"n", 3},          {"neg", -2},         {"f", 1.5},
                     {"e", 1000.0},  {"flag", true},    {"off", false},      {"none", nullptr},
                     {"obj", {{"a", 1}, {"b", {1, 2}}}}, {"lst", {1, 2}},    {"tup", {1, "x"}},
                     {"big", 1000}};
  EXPECT_EQ(r.calls[0].arguments, want);
  EXPECT_TRUE(r.calls[0].arguments["n"].is_number_integer());
  EXPECT_TRUE(r.calls[0].arguments["e"].is_number_float());
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallsLfm2, SeveralCallsAndContent) {
  auto r = lfm2("Sure. " + S + "[a(x=1), b()]" + E + " Then " + S + "[c(s='q')]" + E + " done.");
  ASSERT_TRUE(r.errors.empty());
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.calls[0].raw, "a(x=1)");
  EXPECT_EQ(r.calls[1].name, "b");
  EXPECT_EQ(r.calls[1].arguments, json::object());
  EXPECT_EQ(r.calls[2].arguments, (json{{"s", "q"}}));
  EXPECT_EQ(r.content, "Sure.  Then  done.");
}

TEST(ToolCallsLfm2, Strings) {
  auto r = lfm2(S + R"([f(a='it\'s', b="say \"hi\"", c="line\nnext\ttab\\", d="\u00e9\x41\U0001F600", e='''tri'ple''', g="""x"y""", h="caf)" "\xC3\xA9" R"(", i="\ud83d\ude00", j="a\qb")])" + E);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.calls.size(), 1u);
  const json& a = r.calls[0].arguments;
  EXPECT_EQ(a["a"], "it's");
  EXPECT_EQ(a["b"], "say \"hi\"");
  EXPECT_EQ(a["c"], "line\nnext\ttab\\");
  EXPECT_EQ(a["d"], "\xC3\xA9" "A\xF0\x9F\x98\x80");
  EXPECT_EQ(a["e"], "tri'ple");
  EXPECT_EQ(a["g"], "x\"y");
  EXPECT_EQ(a["h"], "caf\xC3\xA9");
  EXPECT_EQ(a["i"], "\xF0\x9F\x98\x80");
  EXPECT_EQ(a["j"], "a\\qb");  // unknown escapes stay as written, as in Python
}

TEST(ToolCallsLfm2, JsonInsideMarkersAndBareCall) {
  auto r = lfm2(S + R"([{"name": "f", "arguments": {"x": 1}}])" + E);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, (json{{"x", 1}}));
  r = lfm2(S + "g(y='z')" + E);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "g");
}

void expect_malformed(const ToolCallResult& r, const std::string& text, const std::string& what) {
  EXPECT_TRUE(r.calls.empty()) << what;
  ASSERT_EQ(r.errors.size(), 1u) << what;
  EXPECT_EQ(r.content, text) << what;  // the text is kept as content
  EXPECT_LE(r.errors[0].position, text.size()) << what;
  EXPECT_FALSE(r.errors[0].message.empty()) << what;
}

TEST(ToolCallsLfm2, Malformed) {
  const std::vector<std::string> bad = {
      S + "[f(x=1)]",                   // unterminated block
      S + "[f(x=[1, 2)]" + E,           // unclosed list
      S + "[f(x=1]" + E,                // unclosed call
      S + "[f(x='abc)]" + E,            // unterminated string
      S + "[f(x=`abc`)]" + E,           // unknown quote style
      S + "[f(x=\xE2\x80\x9C" "abc\xE2\x80\x9D)]" + E,  // curly quotes
      S + "[f(x=r'abc')]" + E,          // string prefix
      S + "[f(1)]" + E,                 // positional argument
      S + "[f(x=1, x=2)]" + E,          // repeated argument
      S + "[f(x=foo)]" + E,             // a name is not a literal
      S + "[f(x=1e)]" + E,              // bad number
      S + "[f(x=\"\\x4\")]" + E,        // truncated escape
      S + "[f(x={[1]: 2})]" + E,        // unhashable key
      S + "[f(x=1) g()]" + E,           // missing comma
      S + "[]" + E,                     // no calls
      S + "   " + E,                    // empty
      S + "[f(x='\xFF')]" + E,          // invalid UTF-8 in a string
      S + "[{\"name\": 1}]" + E,        // JSON without a string name
  };
  for (const auto& text : bad) expect_malformed(lfm2(text), text, text);
}

TEST(ToolCallsLfm2, ErrorPositionIsAbsolute) {
  const std::string text = "ab" + S + "[f(x=@)]" + E;
  auto r = lfm2(text);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].position, text.find('@'));
  const std::string unterminated = "text " + S + "[f(";
  r = lfm2(unterminated);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].position, 5u);  // where the block starts
}

TEST(ToolCallsLfm2, GoodBlockAfterBadOne) {
  auto r = lfm2(S + "[f(x=)]" + E + S + "[g(y=2)]" + E);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "g");
  EXPECT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.content, S + "[f(x=)]" + E);
}

TEST(ToolCallsLfm2, DeepNestingIsAnErrorNotACrash) {
  const std::string text = S + "[f(x=" + std::string(100000, '[') + ")]" + E;
  auto r = lfm2(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST(ToolCallsHermes, Basic) {
  auto r = hermes("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>");
  ASSERT_TRUE(r.errors.empty());
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, (json{{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(r.calls[0].raw, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}");
  EXPECT_EQ(r.content, "Let me check.\n");
}

TEST(ToolCallsHermes, SeveralAndStringArguments) {
  auto r = hermes(
      "<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"parameters\": {\"y\": null}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"c\"}</tool_call>");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].message;
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].arguments, (json{{"x", {1, 2}}}));
  EXPECT_EQ(r.calls[1].arguments, (json{{"y", nullptr}}));
  EXPECT_EQ(r.calls[2].arguments, json::object());
  EXPECT_EQ(r.content, "\n\n");
}

TEST(ToolCallsHermes, Malformed) {
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n",                    // unterminated
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }}\n</tool_call>",  // bad JSON
      "<tool_call>\n{\"name\": \"a\", \"arguments\": \"{x: 1}\"}\n</tool_call>", // bad JSON in a string
      "<tool_call>\n{\"name\": \"a\", \"arguments\": [1]}\n</tool_call>",        // not an object
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                          // no name
      "<tool_call>\n{'name': 'a'}\n</tool_call>",                                // Python quotes
      "<tool_call>\n\n</tool_call>",                                              // empty
  };
  for (const auto& text : bad) expect_malformed(hermes(text), text, text);
  const std::string text = "<tool_call>{\"name\": @}</tool_call>";
  auto r = hermes(text);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].position, text.find('@'));
}

TEST(ToolCallsStream, NeverEmitsAPartialMarker) {
  ToolCallStreamParser p(ToolCallFormat::Lfm2);
  const std::string text = "Hello " + S + "[f(x=1)]" + E + " bye";
  std::string content;
  size_t calls = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    auto d = p.push(text.substr(i, 1));
    content += d.content;
    calls += d.calls.size();
    if (i >= 5 && i + 1 < text.find(E) + E.size()) {
      EXPECT_EQ(calls, 0u);
      EXPECT_EQ(content, "Hello ") << "after byte " << i;  // nothing of the marker or the call
    }
    if (i + 1 == text.find(E) + E.size()) {
      EXPECT_EQ(calls, 1u);  // as soon as the end marker is in
    }
  }
  content += p.finish().content;
  EXPECT_EQ(content, "Hello  bye");
}

TEST(ToolCallsStream, FalseMarkerIsReleased) {
  ToolCallStreamParser p(ToolCallFormat::Hermes);
  EXPECT_EQ(p.push("a <tool").content, "a ");
  EXPECT_EQ(p.push("box> b").content, "<toolbox> b");
  EXPECT_EQ(p.push("<to").content, "");
  EXPECT_EQ(p.finish().content, "<to");  // held tail at the end
}

// Streaming with any chunking gives what the batch parser gives.
ToolCallResult stream(ToolCallFormat f, const std::string& text, std::mt19937& gen) {
  ToolCallStreamParser p(f);
  ToolCallResult all;
  auto add = [&](ToolCallResult d) {
    all.content += d.content;
    for (auto& c : d.calls) all.calls.push_back(std::move(c));
    for (auto& e : d.errors) all.errors.push_back(std::move(e));
  };
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min<size_t>(text.size() - i, gen() % 7);
    add(p.push(std::string_view(text).substr(i, n)));
    i += n;
  }
  add(p.finish());
  return all;
}

void expect_same(const ToolCallResult& a, const ToolCallResult& b, const std::string& text) {
  ASSERT_EQ(a.content, b.content) << text;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << text;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name);
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments);
    EXPECT_EQ(a.calls[i].raw, b.calls[i].raw);
  }
  ASSERT_EQ(a.errors.size(), b.errors.size()) << text;
  for (size_t i = 0; i < a.errors.size(); ++i) EXPECT_EQ(a.errors[i].position, b.errors[i].position) << text;
}

const std::vector<std::pair<ToolCallFormat, std::string>>& seeds() {
  static const std::vector<std::pair<ToolCallFormat, std::string>> s = {
      {ToolCallFormat::Lfm2, "Sure. " + S + R"([get_weather(city="Paris", n=3, flag=True, obj={"a": 1}, lst=[1, 2.5, None], s='it\'s \u00e9'), b()])" + E + " ok"},
      {ToolCallFormat::Lfm2, S + R"([{"name": "f", "arguments": {"x": [1, {"y": "z"}]}}])" + E + S + "[g(t='''a\"b''')]" + E},
      {ToolCallFormat::Hermes, "Hi\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"\\u00e9\", \"n\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"k\\\": true}\"}\n</tool_call>"},
  };
  return s;
}

TEST(ToolCallsStream, AnyChunkingMatchesBatch) {
  std::mt19937 gen(5);
  for (const auto& [f, text] : seeds()) {
    const auto batch = parse_tool_calls(text, f);
    ASSERT_TRUE(batch.errors.empty()) << text;
    ASSERT_FALSE(batch.calls.empty());
    for (int i = 0; i < 200; ++i) expect_same(stream(f, text, gen), batch, text);
  }
}

// Truncations and byte flips of valid output never crash, never yield a non-object argument list or
// JSON that cannot be serialized, and lose no text: with no calls, the content is the input.
TEST(ToolCallsFuzz, TruncationsAndFlips) {
  std::mt19937 gen(2024);
  static const char kSpecials[] = "\"'\\[](){}<>|=,:.-_ \n\x00\xFF\xC3";
  const std::string specials(kSpecials, sizeof kSpecials - 1);  // the NUL included
  for (const auto& [f, text] : seeds()) {
    for (int trial = 0; trial < 1500; ++trial) {
      std::string t = text;
      if (trial % 2 == 0) t.resize(gen() % (t.size() + 1));
      const int flips = int(gen() % 4);
      for (int k = 0; k < flips && !t.empty(); ++k) {
        const size_t at = gen() % t.size();
        t[at] = gen() % 2 ? char(gen() % 256) : specials[gen() % specials.size()];
      }
      ToolCallResult r;
      ASSERT_NO_THROW(r = parse_tool_calls(t, f)) << t;
      for (const auto& c : r.calls) {
        ASSERT_TRUE(c.arguments.is_object());
        ASSERT_NO_THROW((void)c.arguments.dump()) << t;
      }
      for (const auto& e : r.errors) ASSERT_LE(e.position, t.size());
      if (r.calls.empty()) {
        ASSERT_EQ(r.content, t);
      }
      expect_same(stream(f, t, gen), r, t);
    }
  }
}

TEST(PythonLiteral, Values) {
  size_t pos = 0;
  EXPECT_EQ(parse_python_literal("[1, 'a', {\"k\": (True,)}]", pos), json::parse(R"([1, "a", {"k": [true]}])"));
  pos = 0;
  EXPECT_EQ(parse_python_literal("-0.5e-1 rest", pos), json(-0.05));
  EXPECT_EQ(pos, 7u);
  pos = 0;
  EXPECT_EQ(parse_python_literal("18446744073709551615", pos), json(18446744073709551615ull));
  pos = 0;
  EXPECT_TRUE(parse_python_literal("123456789012345678901234567890", pos).is_number_float());
  pos = 0;
  EXPECT_EQ(parse_python_literal("{1: 'x', None: 2}", pos), json::parse(R"({"1": "x", "null": 2})"));
  pos = 0;
  EXPECT_THROW(parse_python_literal("007", pos), ToolCallError);
  pos = 0;
  EXPECT_THROW(parse_python_literal("'abc", pos), ToolCallError);
  pos = 0;
  EXPECT_THROW(parse_python_literal("1e999", pos), ToolCallError);  // not representable in JSON
  pos = 0;
  EXPECT_THROW(parse_python_literal("-", pos), ToolCallError);
}

}  // namespace
}  // namespace cera::chat
