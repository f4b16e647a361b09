#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "cera/error.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/json_grammar.h"

namespace cera {
namespace {

// The message of the Error parse() throws, or "" if it parsed.
std::string parse_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(GrammarParser, ParsesTheDialect) {
  const Grammar g = Grammar::parse(R"(
# a comment line
root ::= greeting " " name ("!" | "?")* [0-9]{2,3} tail   # trailing comment
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]+ .?
tail ::=
  ( "\n" | "\t" | "\\" | "\"" | "\x41" | "\u00e9" | "\U0001F600" )
  | [^a-z\]\-]
)");
  EXPECT_EQ(g.rule_name(g.root()), "root");
  // Rules from the source plus generated ones for groups and repetitions.
  EXPECT_GT(g.n_rules(), 4u);
  const std::string text = g.to_string();
  EXPECT_NE(text.find("greeting ::= \"h\" \"e\" \"l\" \"l\" \"o\" | \"h\" \"i\""), std::string::npos) << text;
  EXPECT_NE(text.find("\\U0001F600"), std::string::npos) << text;
}

TEST(GrammarParser, ToStringRoundTrips) {
  const Grammar g = Grammar::parse(json_gbnf());
  const Grammar again = Grammar::parse(g.to_string());
  // Same rules (to_string has no operators left, so no new generated rules); rule order follows
  // first mention, so compare as sets of lines.
  auto lines = [](const std::string& s) {
    std::multiset<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.insert(l);
    return out;
  };
  EXPECT_EQ(again.n_rules(), g.n_rules());
  EXPECT_EQ(lines(again.to_string()), lines(g.to_string()));
}

TEST(GrammarParser, ErrorsNamePositionAndExpectation) {
  EXPECT_EQ(parse_error("root ::= \"a\"\n"), "");
  EXPECT_EQ(parse_error("root = \"a\"\n"), "grammar 1:6: expected '::=' after rule name 'root', got '='");
  EXPECT_EQ(parse_error("root ::= \"abc\n"), "grammar 1:14: expected '\"' to close the string opened at 1:10, got end of line");
  EXPECT_EQ(parse_error("root ::= [a-z\n"), "grammar 1:14: expected ']' to close the character class opened at 1:10, got end of line");
  EXPECT_EQ(parse_error("root ::= (\"a\" | \"b\"\n"), "grammar 2:1: expected ')' to close the group opened at 1:10, got end of input");
  EXPECT_EQ(parse_error("root ::= \"a\" ) \n"), "grammar 1:14: expected '|', an element or the end of the line in rule 'root', got ')'");
  EXPECT_EQ(parse_error("root ::= * \"a\"\n"), "grammar 1:10: '*' must follow an element it repeats");
  EXPECT_EQ(parse_error("root ::= \"a\"{2,1}\n"), "grammar 1:13: repetition {2,1} has max < min");
  EXPECT_EQ(parse_error("root ::= \"a\"{3\n"), "grammar 1:15: expected '}' to close the repetition opened at 1:13, got end of line");
  EXPECT_EQ(parse_error("root ::= \"\\q\"\n"),
            "grammar 1:11: unknown escape '\\q' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)");
  EXPECT_EQ(parse_error("root ::= \"\\x4\"\n"), "grammar 1:14: expected 2 hex digits for the escape at 1:11, got '\"'");
  EXPECT_EQ(parse_error("root ::= [z-a]\n"), "grammar 1:12: character range is reversed (end below start)");
  // Columns count characters, not bytes.
  EXPECT_EQ(parse_error("root ::= \"é\" ]\n"), "grammar 1:14: expected '|', an element or the end of the line in rule 'root', got ']'");
}

TEST(GrammarParser, UserRulesMayUseGeneratedLookingNames) {
  // The group in root is generated first as "root-1"; the text's own root-1 must win.
  const Grammar g = Grammar::parse("root ::= (\"a\" | \"b\") root-1\nroot-1 ::= \"c\"\n");
  const std::string text = g.to_string();
  EXPECT_NE(text.find("root-1 ::= \"c\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"a\" | \"b\""), std::string::npos) << text;
}

TEST(GrammarParser, RuleLevelErrors) {
  EXPECT_EQ(parse_error("root ::= item\nitem ::= \"x\" other\n"), "grammar 2:14: undefined rule 'other'");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), "grammar 2:1: rule 'root' is defined twice");
  EXPECT_EQ(parse_error("start ::= \"a\"\n"), "grammar 2:1: no 'root' rule (the start rule must be named root)");
}

TEST(GrammarParser, LeftRecursionIsReportedNotLooped) {
  const std::string direct = parse_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n");
  EXPECT_NE(direct.find("left recursion: expr -> expr"), std::string::npos) << direct;
  // Through a nullable prefix and another rule.
  const std::string indirect = parse_error("root ::= a\na ::= opt b\nb ::= a \"x\" | \"y\"\nopt ::= \"z\"?\n");
  EXPECT_NE(indirect.find("left recursion: a -> b -> a"), std::string::npos) << indirect;
  // Repeating something that can match nothing would loop too.
  const std::string star = parse_error("root ::= (\"a\"?)*\n");
  EXPECT_NE(star.find("left recursion"), std::string::npos) << star;
  // Right recursion is fine.
  EXPECT_EQ(parse_error("root ::= \"a\" root | \"b\"\n"), "");
}

}  // namespace
}  // namespace cera
