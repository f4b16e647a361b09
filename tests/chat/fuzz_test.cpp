// Mutated real templates (deterministic byte flips, deletions, insertions of Jinja syntax) must
// either render or fail with cera::Error — never crash, hang or throw anything else.
#include <gtest/gtest.h>

#include <random>

#include "render_helpers.h"
#include "support/fixtures.h"

namespace {

TEST(JinjaFuzz, MutatedTemplatesFailCleanly) {
  const auto all = nlohmann::ordered_json::parse(cera::test::read_text_file(cera::test::fixture_path("chat/templates.json")));
  static const char* const kSnippets[] = {"{%", "%}", "{{", "}}", "{#", "(", ")", "[", "]", "'", "\"", "|", " is ",
                                          " not ", "-", "endfor", "endif", ".", ",", "**", "\\", "{%- endif %}"};
  std::mt19937 rng(1234);
  int rendered = 0, failed = 0;
  for (const auto& [name, entry] : all.at("models").items()) {
    const std::string base = entry.at("template").get<std::string>();
    const auto& ctx_case = entry.at("cases").back();  // tools + tool call: the most paths
    nlohmann::ordered_json ctx = ctx_case;
    ctx.erase("rendered");
    for (int iter = 0; iter < 400; ++iter) {
      std::string t = base;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !t.empty(); ++e) {
        const size_t at = rng() % t.size();
        switch (rng() % 3) {
          case 0: t.erase(at, 1 + rng() % 8); break;
          case 1: t.insert(at, kSnippets[rng() % std::size(kSnippets)]); break;
          default: t[at] = static_cast<char>(rng() % 256); break;
        }
      }
      try {
        cera::chat::render_chat_template(t, ctx);
        ++rendered;
      } catch (const cera::Error&) {
        ++failed;
      }
    }
  }
  EXPECT_EQ(rendered + failed, 800);
  EXPECT_GT(failed, 0);  // the mutations do break templates; the point is that they break cleanly
}

}  // namespace
