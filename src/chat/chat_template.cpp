#include "chat/chat_template.h"

#include "cera/error.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/parser.h"

namespace cera::chat {

ChatTemplate::ChatTemplate(const std::string& source)
    : tmpl_(std::make_shared<const jinja::Template>(jinja::parse_template(source))) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null())
    throw Error(ErrorCode::InvalidArgument, "chat template context must be a JSON object");
  return jinja::render(*tmpl_, jinja::Value::from_json(context));
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& context) {
  return ChatTemplate(tmpl).render(context);
}

std::string render_chat_template(const std::string& tmpl, const nlohmann::json& context) {
  return ChatTemplate(tmpl).render(nlohmann::ordered_json(context));
}

nlohmann::ordered_json make_chat_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                         const ChatContextOptions& options) {
  if (!messages.is_array()) throw Error(ErrorCode::InvalidArgument, "chat messages must be a JSON array");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = (tools.is_array() && tools.empty()) ? nlohmann::ordered_json(nullptr) : tools;
  ctx["add_generation_prompt"] = options.add_generation_prompt;
  ctx["bos_token"] = options.bos_token;
  ctx["eos_token"] = options.eos_token;
  if (options.extra.is_object())
    for (const auto& [k, v] : options.extra.items()) ctx[k] = v;
  return ctx;
}

}  // namespace cera::chat
