// `cera template`: render a chat template with a JSON context and print the prompt text exactly
// (no newline added), for checking what a model will be fed.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cera/error.h"
#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "format/gguf.h"

namespace cera::cli {

namespace {

struct TemplateFlags {
  std::string template_path;
  std::string model_path;
  std::string context_path;
};

struct ModelTemplate {
  std::string source;
  std::string bos_token, eos_token;  // defaults for the context, when the model names them
};

nlohmann::ordered_json parse_json_file(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::InvalidArgument, path + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::string token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

ModelTemplate from_hf_folder(const std::string& dir) {
  ModelTemplate m;
  const std::string config_path = dir + "/tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_path)) config = parse_json_file(config_path);
  if (std::filesystem::exists(dir + "/chat_template.jinja")) {
    m.source = read_file(dir + "/chat_template.jinja");
  } else if (config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    if (t.is_string()) m.source = t.get<std::string>();
    // Some models ship several named templates; "default" is what apply_chat_template uses.
    if (t.is_array())
      for (const auto& named : t)
        if (named.value("name", "") == "default" && named.contains("template")) m.source = named["template"].get<std::string>();
  }
  if (m.source.empty())
    throw Error(ErrorCode::NotFound, dir + ": no chat template (chat_template.jinja or tokenizer_config.json chat_template)");
  m.bos_token = token_text(config.value("bos_token", nlohmann::ordered_json()));
  m.eos_token = token_text(config.value("eos_token", nlohmann::ordered_json()));
  return m;
}

ModelTemplate from_gguf(const std::string& path) {
  auto file = gguf::File::open(path);
  ModelTemplate m;
  m.source = file->get_string("tokenizer.chat_template");
  if (file->has("tokenizer.ggml.tokens")) {
    const auto tokens = file->get_string_array("tokenizer.ggml.tokens");
    auto token = [&](const char* key) -> std::string {
      const auto id = file->get_int_opt(key);
      return id && *id >= 0 && static_cast<size_t>(*id) < tokens.size() ? tokens[static_cast<size_t>(*id)] : "";
    };
    m.bos_token = token("tokenizer.ggml.bos_token_id");
    m.eos_token = token("tokenizer.ggml.eos_token_id");
  }
  return m;
}

}  // namespace

Command add_template_command(CLI::App& app) {
  auto f = std::make_shared<TemplateFlags>();
  CLI::App* cmd = app.add_subcommand("template", "render a chat template with a JSON context and print the prompt");
  auto* t = cmd->add_option("--template", f->template_path, "a Jinja chat template file");
  auto* m = cmd->add_option("--model", f->model_path,
                            "take the template from a GGUF (tokenizer.chat_template) or a Hugging Face folder");
  t->excludes(m);
  cmd->add_option("--context", f->context_path,
                  "a JSON object: messages, tools, add_generation_prompt, bos_token, eos_token, any extra variables")
      ->required();
  return {cmd, [f]() {
            ModelTemplate mt;
            if (!f->template_path.empty()) mt.source = read_file(f->template_path);
            else if (f->model_path.empty()) throw Error(ErrorCode::InvalidArgument, "give --template FILE or --model PATH");
            else if (std::filesystem::is_directory(f->model_path)) mt = from_hf_folder(f->model_path);
            else mt = from_gguf(f->model_path);
            nlohmann::ordered_json ctx = parse_json_file(f->context_path);
            if (!ctx.is_object()) throw Error(ErrorCode::InvalidArgument, f->context_path + ": expected a JSON object");
            // The model's special tokens unless the context sets them, as apply_chat_template does.
            if (!ctx.contains("bos_token")) ctx["bos_token"] = mt.bos_token;
            if (!ctx.contains("eos_token")) ctx["eos_token"] = mt.eos_token;
            const std::string out = chat::ChatTemplate(mt.source).render(ctx);
            std::fwrite(out.data(), 1, out.size(), stdout);
            return 0;
          }};
}

}  // namespace cera::cli
