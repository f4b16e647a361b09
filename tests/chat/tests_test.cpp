// Every built-in Jinja test (`x is name`).
#include <gtest/gtest.h>

#include "render_helpers.h"

namespace {

using cera::chat::test::render;
using nlohmann::ordered_json;

std::string is(const std::string& expr, const ordered_json& ctx = ordered_json::object()) {
  return render("{{ 'T' if " + expr + " else 'F' }}", ctx);
}

TEST(JinjaTests, DefinedNone) {
  const ordered_json ctx = {{"n", nullptr}, {"s", "x"}};
  EXPECT_EQ(is("n is defined", ctx) + is("zz is defined", ctx) + is("zz is undefined", ctx) + is("s is undefined", ctx), "TFTF");
  EXPECT_EQ(is("n is none", ctx) + is("zz is none", ctx) + is("s is not none", ctx), "TFT");
}

TEST(JinjaTests, Types) {
  const ordered_json ctx = {{"l", {1}}, {"d", {{"a", 1}}}, {"s", "x"}, {"i", 3}, {"f", 1.5}, {"b", true}};
  EXPECT_EQ(is("s is string", ctx) + is("i is string", ctx), "TF");
  EXPECT_EQ(is("i is number", ctx) + is("f is number", ctx) + is("s is number", ctx) + is("b is number", ctx), "TTFT");
  EXPECT_EQ(is("i is integer", ctx) + is("f is float", ctx) + is("f is integer", ctx), "TTF");
  EXPECT_EQ(is("d is mapping", ctx) + is("l is mapping", ctx), "TF");
  EXPECT_EQ(is("l is iterable", ctx) + is("d is iterable", ctx) + is("s is iterable", ctx) + is("i is iterable", ctx), "TTTF");
  EXPECT_EQ(is("l is sequence", ctx) + is("i is sequence", ctx), "TF");
  EXPECT_EQ(is("b is boolean", ctx) + is("i is boolean", ctx), "TF");
  EXPECT_EQ(is("b is true", ctx) + is("b is false", ctx) + is("i is true", ctx) + is("false is false"), "TFFT");
  EXPECT_EQ(is("range is callable") + is("s is callable", ctx), "TF");
}

TEST(JinjaTests, Comparisons) {
  EXPECT_EQ(is("1 is equalto 1") + is("1 is eq(2)") + is("'a' is eq 'a'") + is("2 is ne 3"), "TFTT");
  EXPECT_EQ(is("3 is gt 2") + is("3 is lt 2") + is("2 is ge 2") + is("2 is le 1"), "TFTF");
  EXPECT_EQ(is("'b' is in 'abc'") + is("4 is in [1, 2]") + is("'k' is in {'k': 1}"), "TFT");
  EXPECT_EQ(is("3 is odd") + is("3 is even") + is("9 is divisibleby 3") + is("9 is divisibleby(2)"), "TFTF");
  EXPECT_EQ(is("'abc' is lower") + is("'ABC' is upper") + is("'aBc' is lower"), "TTF");
  EXPECT_EQ(is("none is sameas none") + is("1 is sameas 2"), "TF");
}

TEST(JinjaTests, NegationBindsToTest) {
  EXPECT_EQ(is("not 1 is string") + is("1 is not string and true"), "TT");
}

}  // namespace
