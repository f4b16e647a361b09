// Failure behaviour: raise_exception, runtime guards and limits. Never a crash or a hang.
#include "chat/jinja/interpreter.h"

#include <gtest/gtest.h>

#include "chat/jinja/parser.h"
#include "render_helpers.h"

namespace {

using cera::ErrorCode;
using cera::chat::test::render;
using cera::chat::test::render_error;

TEST(JinjaErrors, RaiseExceptionCarriesTheTemplateMessage) {
  const std::string t = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}ok";
  EXPECT_EQ(render(t, {{"messages", {{{"role", "user"}}}}}), "ok");
  const auto msg = render_error(t, ErrorCode::InvalidArgument, {{"messages", {{{"role", "assistant"}}}}});
  EXPECT_NE(msg.find("Conversation roles must alternate user/assistant"), std::string::npos) << msg;
}

TEST(JinjaErrors, EndlessMacroRecursionIsStopped) {
  const auto msg = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
  // Mutual recursion through caller() is bounded the same way.
  render_error("{% macro a() %}{% call a() %}x{% endcall %}{% endmacro %}{{ a() }}", ErrorCode::InvalidArgument);
}

TEST(JinjaErrors, HugeLoopsHitTheStepBudget) {
  cera::chat::jinja::RenderLimits limits;
  limits.max_steps = 10000;
  const auto tmpl = cera::chat::jinja::parse_template("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}");
  EXPECT_THROW(cera::chat::jinja::render(tmpl, cera::chat::jinja::Value::dict(), limits), cera::Error);
  render_error("{{ range(100000000) | length }}", ErrorCode::InvalidArgument);
}

TEST(JinjaErrors, HugeOutputIsRefused) {
  render_error("{{ 'x' * 1000000000000 }}", ErrorCode::InvalidArgument);
  cera::chat::jinja::RenderLimits limits;
  limits.max_output_bytes = 1000;
  const auto tmpl = cera::chat::jinja::parse_template("{% for i in range(100) %}0123456789abcdef{% endfor %}");
  EXPECT_THROW(cera::chat::jinja::render(tmpl, cera::chat::jinja::Value::dict(), limits), cera::Error);
}

TEST(JinjaErrors, RuntimeErrorsNamePosition) {
  const auto msg = render_error("a\nb {{ messages | join(1, 2, 3) }}{{ 1 + 'x' }}", ErrorCode::InvalidArgument,
                                {{"messages", {"m"}}});
  EXPECT_NE(msg.find("line 2, column"), std::string::npos) << msg;
}

TEST(JinjaErrors, ContextMustBeAnObject) {
  EXPECT_THROW(cera::chat::render_chat_template("x", nlohmann::ordered_json::array()), cera::Error);
  // nlohmann::json (key-sorted objects) is accepted too.
  EXPECT_EQ(cera::chat::render_chat_template("{{ b }}{{ a }}", nlohmann::json{{"a", 1}, {"b", 2}}), "21");
}

}  // namespace

namespace {

TEST(JinjaErrors, DeepExpressionsInsideRecursionHitTheNestingGuard) {
  // 64 macro levels x ~150-deep expressions: either it fits or it is refused, never a stack overflow.
  std::string deep;
  for (int i = 0; i < 150; ++i) deep += "0 + (";
  deep += "f(n + 1)" + std::string(150, ')');
  const auto msg = cera::chat::test::render_error(
      "{% macro f(n) %}{{ " + deep + " }}{% endmacro %}{{ f(0) }}", cera::ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("nested"), std::string::npos) << msg;
}

}  // namespace
