// Small helpers shared by the chat tests.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cera/error.h"
#include "chat/chat_template.h"

namespace cera::chat::test {

inline std::string render(const std::string& tmpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return render_chat_template(tmpl, ctx);
}

// The message of the cera::Error that rendering throws, with its code checked.
inline std::string render_error(const std::string& tmpl, ErrorCode expected,
                                const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  try {
    render_chat_template(tmpl, ctx);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error from: " << tmpl;
  return "";
}

}  // namespace cera::chat::test
