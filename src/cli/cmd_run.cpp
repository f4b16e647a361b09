// `cera run`: generate text from a prompt. stdout carries only the generated text (pipeable);
// logs and timings go to stderr.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

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
};
}  // namespace

Command add_run_command(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  add_model_flags(*cmd, f->model, /*model_required=*/false);
  cmd->add_option("-p,--prompt", f->prompt, "prompt text");
  cmd->add_option("-f,--file", f->prompt_file, "read the prompt from a file");
  cmd->add_option("-n,--n-predict", f->n_predict, "tokens to generate (-1: until end of text)")->capture_default_str();
  cmd->add_option("--temp", f->gen.sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", f->gen.sampling.top_k, "top-k sampling (0: off)")->capture_default_str();
  cmd->add_option("--top-p", f->gen.sampling.top_p, "top-p sampling (1.0: off)")->capture_default_str();
  cmd->add_option("--min-p", f->gen.sampling.min_p, "min-p sampling (0.0: off)")->capture_default_str();
  cmd->add_option("-s,--seed", f->gen.sampling.seed, "random seed (default: random)");
  cmd->add_option("--typical", f->gen.sampling.typical_p, "locally typical sampling (1.0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", f->gen.sampling.repeat_penalty, "penalize repeated tokens (1.0: off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", f->gen.sampling.repeat_last_n, "tokens the penalties look back over (-1: all)")->capture_default_str();
  cmd->add_option("--presence-penalty", f->gen.sampling.presence_penalty, "presence penalty (0.0: off)")->capture_default_str();
  cmd->add_option("--frequency-penalty", f->gen.sampling.frequency_penalty, "frequency penalty (0.0: off)")->capture_default_str();
  cmd->add_option("-l,--logit-bias", f->logit_bias, "TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 2-inf (repeatable)");
  cmd->add_option("-r,--reverse-prompt,--stop", f->gen.stop, "stop when this text is generated (repeatable)");
  cmd->add_flag("--ignore-eos", f->gen.ignore_eos, "never end at an end-of-text token");
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
            for (const std::string& lb : f->logit_bias) {
              // llama.cpp's form: TOKEN followed by a signed bias ("15043+1", "15043-1", "2-inf").
              const size_t sign = lb.find_first_of("+-", 1);
              int32_t id = 0;
              try {
                if (sign == std::string::npos) throw std::invalid_argument("no sign");
                id = std::stoi(lb.substr(0, sign));
                const std::string v = lb.substr(sign);
                f->gen.sampling.logit_bias[id] = (v == "-inf" ? -INFINITY : v == "+inf" ? INFINITY : std::stof(v));
              } catch (const std::exception&) {
                throw Error(ErrorCode::InvalidArgument, "bad --logit-bias '" + lb + "' (expected TOKEN_ID+BIAS or TOKEN_ID-BIAS)");
              }
            }

            using clock = std::chrono::steady_clock;
            const auto t0 = clock::now();
            auto engine = Engine::load(f->model.engine);
            if (f->verbose)
              std::fprintf(stderr, "cera: %s (%s, %d layers) on %s\n", engine->info().name.c_str(),
                           engine->info().arch.c_str(), engine->info().n_layer, engine->info().backend.c_str());
            const std::vector<int32_t> ids = engine->tokenize(prompt, /*add_special=*/true, /*parse_special=*/false);
            auto session = engine->new_session();
            const auto t1 = clock::now();
            session->append(ids);
            const auto t2 = clock::now();
            int32_t generated = 0;
            const FinishReason reason = session->generate(f->gen, [&](int32_t token, std::string_view text) {
              if (token >= 0) ++generated;
              std::fwrite(text.data(), 1, text.size(), stdout);
              std::fflush(stdout);
              return true;
            });
            std::fputc('\n', stdout);
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
