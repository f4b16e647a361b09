// Chat templates: render a model's Jinja chat template (HF tokenizer_config.json `chat_template`,
// chat_template.jinja, or GGUF `tokenizer.chat_template`) into the prompt text, as transformers'
// apply_chat_template does (trim_blocks + lstrip_blocks, tojson with Python separators).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace cera::chat {

namespace jinja { struct Template; }

// A parsed template, reusable across renders. The constructor throws cera::Error(BadFormat) with
// "line L, column C" on a syntax error; render() throws cera::Error(InvalidArgument) when the
// template calls raise_exception() (with its message) or fails at run time.
class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source);
  // `context` is an object whose members become template variables. ordered_json keeps key order,
  // which `tojson` output depends on (tool schemas).
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
};

std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& context);
// Same, for callers holding nlohmann::json: its objects are key-sorted, so tojson output follows
// that order rather than the original one.
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& context);

struct ChatContextOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // e.g. {"enable_thinking": false}
};

// The variables apply_chat_template passes: messages, tools (null when none), add_generation_prompt,
// bos_token, eos_token, plus every member of options.extra.
nlohmann::ordered_json make_chat_context(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools = nullptr,
                                         const ChatContextOptions& options = {});

}  // namespace cera::chat
