// Lexer: token kinds, string escapes, numbers, whitespace control and syntax errors with positions.
#include "chat/jinja/lexer.h"

#include <gtest/gtest.h>

#include "render_helpers.h"

namespace {

using namespace cera::chat::jinja;
using cera::chat::test::render;
using cera::chat::test::render_error;

TEST(JinjaLexer, TokenKindsAndPositions) {
  const auto t = tokenize("ab\n{{ x.y + 12 }}{% if a >= 1.5 %}");
  ASSERT_EQ(t.size(), 15u);
  EXPECT_EQ(t[0].type, TokenType::Text);
  EXPECT_EQ(t[0].value, "ab\n");
  EXPECT_EQ(t[1].type, TokenType::VarBegin);
  EXPECT_EQ(t[1].pos.line, 2);
  EXPECT_EQ(t[1].pos.column, 1);
  EXPECT_EQ(t[2].type, TokenType::Name);
  EXPECT_EQ(t[2].value, "x");
  EXPECT_EQ(t[2].pos.column, 4);
  EXPECT_EQ(t[3].value, ".");
  EXPECT_EQ(t[5].value, "+");
  EXPECT_EQ(t[6].type, TokenType::Int);
  EXPECT_EQ(t[6].int_value, 12);
  EXPECT_EQ(t[7].type, TokenType::VarEnd);
  EXPECT_EQ(t[8].type, TokenType::BlockBegin);
  EXPECT_EQ(t[11].value, ">=");
  EXPECT_EQ(t[12].type, TokenType::Float);
  EXPECT_DOUBLE_EQ(t[12].float_value, 1.5);
  EXPECT_EQ(t[13].type, TokenType::BlockEnd);
  EXPECT_EQ(t[14].type, TokenType::End);
}

TEST(JinjaLexer, StringEscapes) {
  const auto t = tokenize(R"({{ 'a\nb\t\'q\' \\ \x41\u00e9' "d\"q" }})");
  ASSERT_EQ(t[1].type, TokenType::String);
  EXPECT_EQ(t[1].value, "a\nb\t'q' \\ A\xc3\xa9");
  EXPECT_EQ(t[2].value, "d\"q");
  EXPECT_EQ(render(R"({{ 'x\qy' }})"), "x\\qy");  // unknown escapes stay, as in Python
}

TEST(JinjaLexer, DictLiteralClosingBracesDoNotEndTag) {
  EXPECT_EQ(render("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");
}

TEST(JinjaWhitespace, DashStripsAllWhitespace) {
  EXPECT_EQ(render("a  \n {{- 'x' -}} \n\t b"), "axb");
  EXPECT_EQ(render("a \n{%- if true -%}\n  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a \n {#- c -#} \n b"), "ab");
}

TEST(JinjaWhitespace, TrimBlocksDropsOneNewlineAfterBlockTags) {
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");
  EXPECT_EQ(render("{# c #}\n\nx"), "\nx");
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");  // not after {{ }}
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaWhitespace, LstripBlocksOnlyAtLineStart) {
  EXPECT_EQ(render("  {% if true %}\n    x\n  {% endif %}\n"), "    x\n");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");  // not at line start: kept
  EXPECT_EQ(render("  {%+ if true %}b{% endif %}"), "  b");   // {%+ disables lstrip
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");                   // variables are not blocks
}

TEST(JinjaWhitespace, OneTrailingNewlineDropped) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(JinjaLexer, CommentsAndRaw) {
  EXPECT_EQ(render("a{# {{ not rendered }} #}b"), "ab");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{% raw -%}  {% if %} {%- endraw %}"), "{% if %}");
}

TEST(JinjaLexer, ErrorsCarryLineAndColumn) {
  auto msg = render_error("ab\ncd {{ x ", cera::ErrorCode::BadFormat);
  EXPECT_NE(msg.find("line 2, column 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unterminated"), std::string::npos) << msg;
  msg = render_error("x\n\n  {{ 'abc }}", cera::ErrorCode::BadFormat);
  EXPECT_NE(msg.find("unterminated string"), std::string::npos) << msg;
  msg = render_error("{# never closed", cera::ErrorCode::BadFormat);
  EXPECT_NE(msg.find("line 1, column 1"), std::string::npos) << msg;
  msg = render_error("{{ a $ b }}", cera::ErrorCode::BadFormat);
  EXPECT_NE(msg.find("line 1, column 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'$'"), std::string::npos) << msg;
  render_error("{% raw %} no end", cera::ErrorCode::BadFormat);
  render_error("{{ 99999999999999999999999 }}", cera::ErrorCode::BadFormat);
}

}  // namespace
