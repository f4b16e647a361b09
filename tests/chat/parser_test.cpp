// Parser: operator precedence (checked through rendering), literals, and syntax errors.
#include "chat/jinja/parser.h"

#include <gtest/gtest.h>

#include "render_helpers.h"

namespace {

using cera::ErrorCode;
using cera::chat::test::render;
using cera::chat::test::render_error;

TEST(JinjaParser, BuildsStatementTree) {
  const auto t = cera::chat::jinja::parse_template("a{% if x %}b{% elif y %}c{% else %}d{% endif %}{{ z }}");
  ASSERT_EQ(t.body.size(), 3u);
  EXPECT_EQ(t.body[0]->kind, cera::chat::jinja::Stmt::Kind::Text);
  EXPECT_EQ(t.body[1]->kind, cera::chat::jinja::Stmt::Kind::If);
  EXPECT_EQ(t.body[1]->branches.size(), 2u);
  EXPECT_EQ(t.body[1]->else_body.size(), 1u);
  EXPECT_EQ(t.body[2]->kind, cera::chat::jinja::Stmt::Kind::Output);
  EXPECT_EQ(t.body[2]->expr->kind, cera::chat::jinja::Expr::Kind::Name);
}

TEST(JinjaParser, ArithmeticPrecedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(render("{{ (1 + 2) * 3 }}"), "9");
  EXPECT_EQ(render("{{ 2 ** 3 }}|{{ -2 ** 2 }}"), "8|4");  // unary minus binds tighter, as in Jinja
  EXPECT_EQ(render("{{ 1 ~ 2 * 3 }}"), "16");               // * binds tighter than ~
  render_error("{{ 'x' ~ 1 + 2 }}", ErrorCode::InvalidArgument);  // ~ tighter than +: 'x1' + 2
  EXPECT_EQ(render("{{ 10 - 2 - 3 }}"), "5");
}

TEST(JinjaParser, FilterBindsTighterThanArithmetic) {
  EXPECT_EQ(render("{{ xs|length - 1 }}", {{"xs", {1, 2, 3}}}), "2");
  EXPECT_EQ(render("{{ 'a' + ' b '|trim }}"), "ab");
  EXPECT_EQ(render("{{ -3|abs }}"), "3");
}

TEST(JinjaParser, BooleanPrecedenceAndComparisonChains) {
  EXPECT_EQ(render("{{ true or false and false }}"), "True");
  EXPECT_EQ(render("{{ not true or true }}"), "True");
  EXPECT_EQ(render("{{ not (true or true) }}"), "False");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}"), "True|False");
  EXPECT_EQ(render("{{ 'a' not in 'abc' }}|{{ 2 in [1, 2] }}"), "False|True");
  EXPECT_EQ(render("{{ x is not none and x is defined }}", {{"x", 1}}), "True");
}

TEST(JinjaParser, TernaryAndLiterals) {
  EXPECT_EQ(render("{{ 'y' if 1 > 0 else 'n' }}{{ 'y' if false }}."), "y.");
  EXPECT_EQ(render("{{ [1, 'a', none, True, 2.5] }}"), "[1, 'a', None, True, 2.5]");
  EXPECT_EQ(render("{{ {'k': [1, 2], \"q\": {}} }}"), "{'k': [1, 2], 'q': {}}");
  EXPECT_EQ(render("{{ (1, 2) }}{{ () }}"), "[1, 2][]");
  EXPECT_EQ(render("{{ 'ab' 'cd' }}"), "abcd");
  EXPECT_EQ(render("{{ 1_000 + 1e3 }}"), "2000.0");
}

TEST(JinjaParser, SyntaxErrorsNamePosition) {
  auto msg = render_error("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("line 3, column 8"), std::string::npos) << msg;
  msg = render_error("{% if x %}never closed", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("endif"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 1, column 1"), std::string::npos) << msg;
  msg = render_error("{% endfor %}", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("unexpected 'endfor'"), std::string::npos) << msg;
  msg = render_error("{% frobnicate %}", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("unknown statement 'frobnicate'"), std::string::npos) << msg;
  msg = render_error("{{ x | nosuchfilter }}", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("unknown filter 'nosuchfilter'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column 8"), std::string::npos) << msg;
  msg = render_error("{% if x is nosuchtest %}{% endif %}", ErrorCode::BadFormat);
  EXPECT_NE(msg.find("unknown test 'nosuchtest'"), std::string::npos) << msg;
  render_error("{% break %}", ErrorCode::BadFormat);
  render_error("{{ [1, 2 }}", ErrorCode::BadFormat);
  render_error("{{ }}", ErrorCode::BadFormat);
  render_error("{% for in x %}{% endfor %}", ErrorCode::BadFormat);
  render_error("{% set = 1 %}", ErrorCode::BadFormat);
}

TEST(JinjaParser, UnknownFilterInUntakenBranchStillFails) {
  render_error("{% if false %}{{ x | bogus }}{% endif %}", ErrorCode::BadFormat);
}

TEST(JinjaParser, DeepNestingIsRejectedNotACrash) {
  const std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto msg = render_error(parens, ErrorCode::BadFormat);
  EXPECT_NE(msg.find("nested too deeply"), std::string::npos) << msg;
  std::string sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) sum += " + 1";
  render_error(sum + " }}", ErrorCode::BadFormat);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  render_error(ifs, ErrorCode::BadFormat);
  render_error("{{ " + std::string(5000, '-') + "1 }}", ErrorCode::BadFormat);
  render_error("{{ " + std::string(5000, '[') + " }}", ErrorCode::BadFormat);
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

TEST(JinjaParser, TruncatedInputsNeverCrash) {
  const std::string src =
      "{%- set ns = namespace(a=[1, {'k': 'v'}]) -%}{% for m in messages if m.role != 'x' %}"
      "{{ m['content'] | trim ~ (loop.index0 * 2) }}{% else %}none{% endfor %}{# end #}";
  for (size_t n = 0; n <= src.size(); ++n) {
    try {
      render(src.substr(0, n), {{"messages", nlohmann::ordered_json::array()}});
    } catch (const cera::Error&) {
      // fine: every prefix either renders or fails cleanly
    }
  }
}

}  // namespace
