// `cera logits`: evaluate tokens and write their logits to a safetensors file (tensor `logits`,
// F32 [T, V] with --all-positions, else [1, V]) — the interface parity checks use.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "format/safetensors.h"

namespace cera::cli {

namespace {
struct LogitsFlags {
  ModelFlags model;
  std::string token_ids;
  std::string prompt;
  bool all_positions = false;
  std::string output;
};
}  // namespace

Command add_logits_command(CLI::App& app) {
  auto f = std::make_shared<LogitsFlags>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits of a token sequence to a safetensors file");
  add_model_flags(*cmd, f->model);
  auto* ids = cmd->add_option("--token-ids", f->token_ids, "comma-separated token ids, e.g. 1,2,3");
  auto* p = cmd->add_option("-p,--prompt", f->prompt, "text to tokenize instead of --token-ids (BOS added as the model says)");
  ids->excludes(p);
  cmd->add_flag("--all-positions", f->all_positions, "logits of every position (default: only the last)");
  cmd->add_option("-o,--output", f->output, "output .safetensors file")->required();
  return {cmd, [f]() {
            auto engine = load_engine(f->model.engine);
            std::vector<int32_t> tokens;
            if (!f->token_ids.empty()) tokens = parse_token_ids(f->token_ids);
            else if (!f->prompt.empty()) tokens = engine->tokenize(f->prompt, true, false);
            else throw Error(ErrorCode::InvalidArgument, "give the tokens with --token-ids or a text with -p");
            auto session = engine->new_session();
            session->append(tokens, f->all_positions);
            const auto logits = session->logits();
            const int64_t V = engine->info().n_vocab;
            safetensors::Writer w;
            w.add_f32("logits", {int64_t(logits.size()) / V, V}, logits.data());
            w.write(f->output);
            std::fprintf(stderr, "cera: wrote logits [%lld, %lld] to %s\n", (long long)(logits.size() / V),
                         (long long)V, f->output.c_str());
            return 0;
          }};
}

}  // namespace cera::cli
