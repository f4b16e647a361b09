// The `cera` subcommands. Each registers its flags on a CLI11 subcommand and returns the function
// that runs it; main() turns cera::Error into one line on stderr and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace cera::cli {

struct Command {
  CLI::App* app;              // the subcommand, with its flags
  std::function<int()> run;   // runs it after parsing; returns the exit code
};

Command add_run_command(CLI::App& app);
Command add_logits_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_template_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_perplexity_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_embed_command(CLI::App& app);

}  // namespace cera::cli
