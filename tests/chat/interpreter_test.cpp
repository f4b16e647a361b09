// Interpreter: statements, loop variables, scoping, namespaces, macros, operators, access.
#include "chat/jinja/interpreter.h"

#include <gtest/gtest.h>

#include "render_helpers.h"

namespace {

using cera::ErrorCode;
using cera::chat::test::render;
using cera::chat::test::render_error;
using nlohmann::ordered_json;

TEST(JinjaInterpreter, IfElifElse) {
  const std::string t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 7}}), "many");
}

TEST(JinjaInterpreter, ForLoopVariables) {
  const std::string t =
      "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
      "{{ loop.length }}{{ 'F' if loop.first }}{{ 'L' if loop.last }}{{ loop.previtem }}>{{ loop.nextitem }};{% endfor %}";
  EXPECT_EQ(render(t, {{"xs", {"a", "b", "c"}}}), "10323F>b;21213a>c;32103Lb>;");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.cycle('o', 'e') }}{% endfor %}", {{"xs", {1, 2, 3}}}), "oeo");
}

TEST(JinjaInterpreter, ForFilterElseAndUnpacking) {
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }},{% endfor %}", {{"xs", {1, 2, 3}}}),
            "212,322,");
  EXPECT_EQ(render("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {{"xs", ordered_json::array()}}), "empty");
  EXPECT_EQ(render("{% for x in xs if x > 5 %}{{ x }}{% else %}none{% endfor %}", {{"xs", {1}}}), "none");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b=1;a=2;");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", {{"d", {{"z", 1}, {"y", 2}}}}), "zy");
  EXPECT_EQ(render("{% for c in 'h\xc3\xa9' %}[{{ c }}]{% endfor %}"), "[h][\xc3\xa9]");
  EXPECT_EQ(render("{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
}

TEST(JinjaInterpreter, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
}

TEST(JinjaInterpreter, SetScopingAndNamespace) {
  // A set inside a loop does not leak out of it; a namespace attribute does.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"), "4");
  // if does not open a scope.
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t %}hi {{ 1 + 1 }}{% endset %}[{{ t }}]"), "[hi 2]");
  EXPECT_EQ(render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}"), "12False");
  auto msg = render_error("{% set d = {} %}{% set d.x = 1 %}", ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("not a namespace"), std::string::npos) << msg;
}

TEST(JinjaInterpreter, ContextVariablesCanBeRebound) {
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages|length }}", {{"messages", {1, 2, 3}}}), "2");
}

TEST(JinjaInterpreter, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro greet(name, p='!') %}hi {{ name }}{{ p }}{% endmacro %}{{ greet('a') }} {{ greet('b', p='?') }}"),
            "hi a! hi b?");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}"), "<body>");
  EXPECT_EQ(render("{% macro m(xs) %}{% for x in xs %}{{ x }}{% endfor %}{% endmacro %}{{ m([1, 2]) ~ m([3]) }}"), "123");
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}"), "G");
  // Recursion within the guard works.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
  render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", ErrorCode::InvalidArgument);
  render_error("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", ErrorCode::InvalidArgument);
}

TEST(JinjaInterpreter, FilterBlock) {
  EXPECT_EQ(render("{% filter upper %}ab{{ 'c' }}{% endfilter %}"), "ABC");
}

TEST(JinjaInterpreter, Arithmetic) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
            "3.5 3 -4 1 2 1024 0.5");
  EXPECT_EQ(render("{{ 1 + 2.5 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }}"),
            "3.5 2.0 0.30000000000000004 1e+20 1.5e-07");
  EXPECT_EQ(render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }}"), "ababab [1, 1] [1, 2] ab");
  EXPECT_EQ(render("{{ 'n=' ~ 3 ~ none ~ true }}"), "n=3NoneTrue");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"), "9.223372036854776e+18");  // no signed overflow
  render_error("{{ 1 / 0 }}", ErrorCode::InvalidArgument);
  render_error("{{ 1 // 0 }}", ErrorCode::InvalidArgument);
  auto msg = render_error("\n  {{ 'a' + 1 }}", ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("string and int"), std::string::npos) << msg;
}

TEST(JinjaInterpreter, Comparisons) {
  EXPECT_EQ(render("{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ none == none }}"),
            "TrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'k' in {'k': 1} }}{{ 3 in [1, 2] }}{{ 'x' in y }}"), "TrueFalseFalse");
  render_error("{{ 1 < 'a' }}", ErrorCode::InvalidArgument);
}

TEST(JinjaInterpreter, AndOrReturnOperands) {
  EXPECT_EQ(render("{{ '' or 'b' }}{{ 'a' and 'c' }}{{ 0 and 1 }}"), "bc0");
  // Short-circuit: the right side is not evaluated.
  EXPECT_EQ(render("{{ false and raise_exception('no') }}"), "False");
}

TEST(JinjaInterpreter, AttributeSubscriptAndSlice) {
  const ordered_json ctx = {{"m", {{"role", "user"}, {"items", {1, 2, 3, 4, 5}}}}};
  EXPECT_EQ(render("{{ m.role }}{{ m['role'] }}{{ m.items[0] }}{{ m.items[-1] }}{{ m.items.1 }}", ctx), "useruser152");
  EXPECT_EQ(render("{{ m.items[1:3] }}{{ m.items[::-1] }}{{ m.items[::2] }}{{ m.items[-2:] }}{{ m.items[:-3] }}", ctx),
            "[2, 3][5, 4, 3, 2, 1][1, 3, 5][4, 5][1, 2]");
  EXPECT_EQ(render("{{ 'h\xc3\xa9llo'[1] }}{{ 'hello'[1:3] }}{{ 'abc'[::-1] }}"), "\xc3\xa9" "elcba");
  EXPECT_EQ(render("[{{ m.missing }}][{{ m['x'] }}][{{ m.items[10] }}][{{ nothing.at.all }}]", ctx), "[][][][]");
}

TEST(JinjaInterpreter, PrintsPythonStyle) {
  const ordered_json ctx = {{"v", {{"a", nullptr}, {"b", true}, {"c", "it's"}, {"d", 1.0}}}};
  EXPECT_EQ(render("{{ v }}", ctx), "{'a': None, 'b': True, 'c': \"it's\", 'd': 1.0}");
  EXPECT_EQ(render("{{ none }}|{{ undefined_name }}|{{ 3 }}|{{ 3.0 }}|{{ false }}"), "None||3|3.0|False");
}

TEST(JinjaInterpreter, CallingUndefinedOrNonCallable) {
  auto msg = render_error("{{ nope() }}", ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("'nope' is undefined"), std::string::npos) << msg;
  msg = render_error("{{ 'abc'.nomethod() }}", ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("nomethod"), std::string::npos) << msg;
  render_error("{% for x in none %}{% endfor %}", ErrorCode::InvalidArgument);
  render_error("{% for x in 5 %}{% endfor %}", ErrorCode::InvalidArgument);
}

TEST(JinjaInterpreter, Globals) {
  EXPECT_EQ(render("{{ range(3) }}{{ range(1, 7, 2) }}{{ range(3, 0, -1) }}"), "[0, 1, 2][1, 3, 5][3, 2, 1]");
  EXPECT_EQ(render("{{ dict(a=1, b='x') | tojson }}"), "{\"a\": 1, \"b\": \"x\"}");
  const std::string year = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

}  // namespace
