// `cera`: run, inspect and benchmark LLMs. Every subcommand has --help.
#include <cstdio>
#include <cstring>
#include <vector>

#include "cera/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cera — a fast LLM inference engine (LFM2, llama, qwen, granite; GGUF)", "cera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cera 0.1.0");
  app.footer("Run `cera COMMAND --help` for the flags of a command.");
  const std::vector<cera::cli::Command> commands = {
      cera::cli::add_run_command(app),     cera::cli::add_logits_command(app),
      cera::cli::add_tokenize_command(app), cera::cli::add_inspect_command(app),
      cera::cli::add_bench_command(app),    cera::cli::add_quantize_command(app),
      cera::cli::add_template_command(app),  cera::cli::add_convert_command(app),
      cera::cli::add_perplexity_command(app),
      cera::cli::add_chat_command(app),      cera::cli::add_embed_command(app),
  };

  // llama.cpp spells some long flags with one dash (-ngl, -ctk, -ctv); CLI11 takes one-letter short
  // names only, so those are rewritten to their long form before parsing.
  std::vector<char*> args(argv, argv + argc);
  static char ngl_long[] = "--n-gpu-layers", ctk_long[] = "--cache-type-k", ctv_long[] = "--cache-type-v";
  for (auto& a : args) {
    if (std::strcmp(a, "-ngl") == 0) a = ngl_long;
    if (std::strcmp(a, "-ctk") == 0) a = ctk_long;
    if (std::strcmp(a, "-ctv") == 0) a = ctv_long;
  }
  try {
    app.parse(int(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const cera::Error& e) {
    std::fprintf(stderr, "cera: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cera: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
