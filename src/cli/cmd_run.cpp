// `cera run`: generate text from a prompt. stdout carries only the generated text (pipeable);
// logs and timings go to stderr.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/default_model.h"
#include "cera/structured_output.h"

namespace cera::cli {

namespace {
struct RunFlags {
  ModelFlags model;
  std::string prompt;
  std::string prompt_file;
  int32_t n_predict = 128;
  GenerateOptions gen;
  std::vector<std::string> logit_bias;
  std::string grammar, grammar_file, json_schema, json_schema_file;
  bool json = false;
  bool verbose = false;
  bool chat = false;  // -p is one user turn of the model's chat template
  std::string system, tools_file;
};
}  // namespace

Command add_run_command(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  add_model_flags(*cmd, f->model, /*model_required=*/false);
  cmd->add_option("-p,--prompt", f->prompt, "prompt text");
  cmd->add_option("-f,--file", f->prompt_file, "read the prompt from a file");
  cmd->add_option("-n,--n-predict", f->n_predict, "tokens to generate (-1: until end of text)")->capture_default_str();
  add_sampling_flags(*cmd, f->gen, f->logit_bias);
  cmd->add_flag("--chat", f->chat, "apply the model's chat template to the prompt (one user turn)");
  cmd->add_option("--system", f->system, "system prompt (implies --chat)");
  cmd->add_option("--tools", f->tools_file, "a JSON array of tools for the template (implies --chat); calls print as [tool_call] JSON lines");
  auto* g1 = cmd->add_option("--grammar", f->grammar, "constrain the output with a GBNF grammar (llama.cpp dialect)");
  auto* g2 = cmd->add_option("--grammar-file", f->grammar_file, "read the GBNF grammar from a file");
  auto* g3 = cmd->add_flag("--json", f->json, "the output is one JSON value");
  auto* g4 = cmd->add_option("-j,--json-schema", f->json_schema, "the output is JSON following this schema (see docs/STRUCTURED_OUTPUT.md)");
  auto* g5 = cmd->add_option("--json-schema-file", f->json_schema_file, "read the JSON schema from a file");
  for (auto* a : {g1, g2, g3, g4, g5})
    for (auto* b : {g1, g2, g3, g4, g5})
      if (a != b) a->excludes(b);
  cmd->add_flag("-v,--verbose", f->verbose, "print model and timing details to stderr");
  cmd->footer("Without -m, the embedded default model is used (" + default_model_description() + ").");

  return {cmd, [f]() {
            if (f->model.engine.model_path.empty()) f->model.engine.model_path = default_model_path();
            std::string prompt = f->prompt;
            if (!f->prompt_file.empty()) prompt = read_file(f->prompt_file);
            if (prompt.empty()) throw Error(ErrorCode::InvalidArgument, "no prompt given (use -p TEXT or -f FILE)");
            f->gen.max_tokens = f->n_predict;
            if (!f->grammar_file.empty()) f->grammar = read_file(f->grammar_file);
            if (!f->json_schema_file.empty()) f->json_schema = read_file(f->json_schema_file);
            if (!f->grammar.empty()) validate_grammar(f->grammar), f->gen.grammar = f->grammar;
            if (f->json) f->gen.grammar = json_grammar_gbnf();
            if (!f->json_schema.empty()) f->gen.grammar = json_schema_grammar_gbnf(f->json_schema);
            apply_logit_bias(f->logit_bias, f->gen.sampling);

            using clock = std::chrono::steady_clock;
            const auto t0 = clock::now();
            auto engine = load_engine(f->model.engine);
            if (f->verbose)
              std::fprintf(stderr, "cera: %s (%s, %d layers) on %s\n", engine->info().name.c_str(),
                           engine->info().arch.c_str(), engine->info().n_layer, engine->info().backend.c_str());
            const bool chat = f->chat || !f->system.empty() || !f->tools_file.empty();
            const nlohmann::ordered_json tools = load_tools_file(f->tools_file);
            std::optional<ToolCallPrinter> printer;
            std::vector<int32_t> ids;
            if (chat) {
              const ModelTemplate mt = load_model_template(f->model.engine.model_path);
              if (mt.source.empty()) throw Error(ErrorCode::NotFound, "the model has no chat template (drop --chat)");
              nlohmann::ordered_json messages = nlohmann::ordered_json::array();
              if (!f->system.empty()) messages.push_back({{"role", "system"}, {"content", f->system}});
              messages.push_back({{"role", "user"}, {"content", prompt}});
              // The rendering carries its own BOS and special tokens.
              ids = engine->tokenize(render_chat(mt, messages, tools), /*add_special=*/false, /*parse_special=*/true);
              if (!tools.is_null()) printer.emplace(mt.source), f->gen.render_special = true;
            } else {
              ids = engine->tokenize(prompt, /*add_special=*/true, /*parse_special=*/false);
            }
            auto session = engine->new_session();
            const auto t1 = clock::now();
            session->append(ids);
            (void)session->last_logits();  // waits for the prompt (an append returns once it is launched)
            const auto t2 = clock::now();
            int32_t generated = 0;
            const FinishReason reason = session->generate(f->gen, [&](int32_t token, std::string_view text) {
              if (token >= 0) ++generated;
              if (printer) return printer->push(text), true;
              std::fwrite(text.data(), 1, text.size(), stdout);
              std::fflush(stdout);
              return true;
            });
            if (printer) printer->finish();
            std::fputc('\n', stdout);
            std::fflush(stdout);  // the text's last line before the stats on stderr, also through a pipe
            const auto t3 = clock::now();
            auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
            std::fprintf(stderr, "cera: prompt %zu tokens in %.2f s (%.1f t/s), generated %d tokens in %.2f s (%.1f t/s)%s\n",
                         ids.size(), secs(t1, t2), double(ids.size()) / secs(t1, t2), generated, secs(t2, t3),
                         generated / std::max(1e-9, secs(t2, t3)),
                         reason == FinishReason::EndOfGeneration ? ", stopped at end of text"
                         : reason == FinishReason::StopString  ? ", stopped at a stop string"
                                                                : "");
            (void)t0;
            return 0;
          }};
}

}  // namespace cera::cli
