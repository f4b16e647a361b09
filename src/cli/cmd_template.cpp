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

nlohmann::ordered_json parse_json_file(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::InvalidArgument, path + ": not valid JSON: " + e.what());
  }
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
            else mt = load_model_template(f->model_path);
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
