// Every built-in filter and the str/dict methods.
#include <gtest/gtest.h>

#include "render_helpers.h"

namespace {

using cera::ErrorCode;
using cera::chat::test::render;
using cera::chat::test::render_error;
using nlohmann::ordered_json;

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("[{{ '  a b \n' | trim }}][{{ 'xxaxx' | trim('x') }}]"), "[a b][a]");
  EXPECT_EQ(render("{{ 'aBc' | upper }}{{ 'aBc' | lower }}"), "ABCabc");
  EXPECT_EQ(render("{{ 'hello wORLD' | capitalize }}|{{ 'hello wORLD-x2y' | title }}"), "Hello world|Hello World-X2Y");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }}{{ 'a-b-c' | replace('-', '', 1) }}"), "a+b+cab-c");
  EXPECT_EQ(render("{{ 12 | string ~ 'x' }}{{ none | string }}"), "12xNone");
  EXPECT_EQ(render("{{ 'line1\nline2\n\nline3' | indent(2) }}"), "line1\n  line2\n\n  line3");
  EXPECT_EQ(render("{{ 'x' | indent(2, true) }}"), "  x");
  EXPECT_EQ(render("{{ '<a href=\"x\">&' | e }}"), "&lt;a href=&#34;x&#34;&gt;&amp;");
  EXPECT_EQ(render("{{ 'one two  three' | wordcount }}"), "3");
  EXPECT_EQ(render("{{ 'abc' | safe }}"), "abc");
}

TEST(JinjaFilters, ToJsonMatchesPythonSeparators) {
  const ordered_json ctx = {{"v", {{"z", 1}, {"a", {true, nullptr, 1.5, "q\"\n\xc3\xa9"}}, {"e", ordered_json::object()}}}};
  EXPECT_EQ(render("{{ v | tojson }}", ctx), R"({"z": 1, "a": [true, null, 1.5, "q\"\né"], "e": {}})");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}", ctx),
            "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    1.5,\n    \"q\\\"\\n\xc3\xa9\"\n  ],\n  \"e\": {}\n}");
  EXPECT_EQ(render("{{ [] | tojson(4) }}{{ 'tab\t\x01' | tojson }}{{ 2.0 | tojson }}"), "[]\"tab\\t\\u0001\"2.0");
}

TEST(JinjaFilters, Sequences) {
  const ordered_json ctx = {{"xs", {3, 1, 2}}, {"d", {{"b", 2}, {"a", 1}}}};
  EXPECT_EQ(render("{{ xs | length }}{{ 'h\xc3\xa9' | length }}{{ d | length }}{{ xs | count }}", ctx), "3223");
  EXPECT_EQ(render("{{ xs | join(', ') }}|{{ xs | join }}", ctx), "3, 1, 2|312");
  EXPECT_EQ(render("{{ xs | first }}{{ xs | last }}{{ 'abc' | first }}{{ 'abc' | last }}", ctx), "32ac");
  EXPECT_EQ(render("{{ 'ab' | list }}{{ d | list }}{{ xs | reverse | list }}", ctx), "['a', 'b']['b', 'a'][2, 1, 3]");
  EXPECT_EQ(render("{{ d | items | list }}", ctx), "[['b', 2], ['a', 1]]");
  EXPECT_EQ(render("{{ xs | sort }}{{ xs | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}", ctx), "[1, 2, 3][3, 2, 1]['A', 'b', 'c']");
  EXPECT_EQ(render("{{ d | dictsort }}", ctx), "[['a', 1], ['b', 2]]");
  EXPECT_EQ(render("{{ [1, 2, 1, 3, 2] | unique | list }}"), "[1, 2, 3]");
  EXPECT_EQ(render("{{ xs | min }}{{ xs | max }}{{ xs | sum }}{{ [1.5, 2] | sum }}", ctx), "1363.5");
}

TEST(JinjaFilters, DefaultAndConversions) {
  EXPECT_EQ(render("{{ missing | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ none | d('x') }}"),
            "dflt||dflt|None");
  EXPECT_EQ(render("{{ '42' | int + 1 }} {{ 3.9 | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '2.5' | int }}"), "43 3 0 7 2");
  EXPECT_EQ(render("{{ '2.5' | float }} {{ 3 | float }} {{ 'no' | float }}"), "2.5 3.0 0.0");
  EXPECT_EQ(render("{{ -3 | abs }} {{ -2.5 | abs }}"), "3 2.5");
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 7 | round }}"), "3.0 3.14 3.0 7.0");
}

TEST(JinjaFilters, SelectRejectMap) {
  const ordered_json ctx = {{"ms", {{{"role", "user"}, {"n", 1}},
                                     {{"role", "system"}, {"n", 2}},
                                     {{"role", "user"}, {"n", 3}, {"tool_calls", {1}}}}}};
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }}", ctx), "[1, 3]");
  EXPECT_EQ(render("{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='n') | join(',') }}", ctx), "2");
  EXPECT_EQ(render("{{ ms | selectattr('tool_calls') | map(attribute='n') | list }}", ctx), "[3]");
  EXPECT_EQ(render("{{ ms | selectattr('tool_calls', 'defined') | list | length }}", ctx), "1");
  EXPECT_EQ(render("{{ ms | map(attribute='missing', default='-') | join }}", ctx), "---");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 0, 2] | reject | list }}"),
            "AB[1, 3][0]");
  EXPECT_EQ(render("{{ ms | map(attribute='role') | unique | list }}", ctx), "['user', 'system']");
}

TEST(JinjaFilters, TypeErrors) {
  render_error("{{ 5 | items }}", ErrorCode::InvalidArgument);
  render_error("{{ 5 | length }}", ErrorCode::InvalidArgument);
  render_error("{{ 'a' | round }}", ErrorCode::InvalidArgument);
  render_error("{{ [1] | map('nosuchfilter') | list }}", ErrorCode::InvalidArgument);
}

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('x') }}"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(render("[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ '\n\nx\n'.strip('\n') }}]"),
            "[a][a  ][  a][x]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.split(',', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b,c']");
  EXPECT_EQ(render("{{ 'x</think>y'.split('</think>')[-1] }}{{ 'aB'.upper() }}{{ 'aB'.lower() }}{{ 'ab cd'.title() }}"),
            "yABabAb Cd");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abab'.count('ab') }}"),
            "bba2-12");
  EXPECT_EQ(render("{{ '-'.join(['a', 'b']) }}{{ '12'.isdigit() }}{{ 'ab'.capitalize() }}"), "a-bTrueAb");
}

TEST(JinjaMethods, DictMethods) {
  const ordered_json ctx = {{"d", {{"k", "v"}, {"n", 1}}}};
  EXPECT_EQ(render("{{ d.get('k') }}{{ d.get('zz') }}{{ d.get('zz', 'def') }}", ctx), "vNonedef");
  EXPECT_EQ(render("{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}", ctx),
            "['k', 'n']['v', 1][['k', 'v'], ['n', 1]]");
}

}  // namespace
