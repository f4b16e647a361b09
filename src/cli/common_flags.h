// Flags shared by the commands that load a model, named as in llama.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "cera/engine.h"

namespace cera::cli {

struct ModelFlags {
  EngineOptions engine;
};

void add_model_flags(CLI::App& cmd, ModelFlags& flags, bool model_required = true);
// Engine::load, and a warning on stderr when the context (-c) is longer than the model's training
// context (as llama.cpp warns): positions past it may still run, with no promise about quality.
std::unique_ptr<Engine> load_engine(const EngineOptions& options);
// Reads a text file whole (for -f); throws cera::Error(NotFound/Io).
std::string read_file(const std::string& path);
// "1,2,3" -> ids; throws cera::Error(InvalidArgument) naming the bad element.
std::vector<int32_t> parse_token_ids(const std::string& list);

// The sampling flags of `run` and `chat` (--temp, --top-k, ..., --stop, --ignore-eos). --logit-bias
// entries land in logit_bias; apply them with apply_logit_bias() after parsing.
void add_sampling_flags(CLI::App& cmd, GenerateOptions& gen, std::vector<std::string>& logit_bias);
// llama.cpp's TOKEN(+|-)BIAS entries ("15043+1", "2-inf") into s.logit_bias; throws InvalidArgument.
void apply_logit_bias(const std::vector<std::string>& entries, SamplingParams& s);

// A model's chat template and the special tokens its context names, from a GGUF
// (tokenizer.chat_template) or a Hugging Face folder (chat_template.jinja / tokenizer_config.json).
struct ModelTemplate {
  std::string source;
  std::string bos_token, eos_token;
};
ModelTemplate load_model_template(const std::string& model_path);
// The template rendered for `messages` with add_generation_prompt (tools: null or an array).
std::string render_chat(const ModelTemplate& t, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools);

// --tools FILE: a JSON array of tool definitions; null for an empty path.
nlohmann::ordered_json load_tools_file(const std::string& path);
// Streams a reply through the tool-call parser of the template's format (LFM2's when the template
// lists tools between <|tool_list_start|> markers, else Hermes): content to stdout as it comes,
// each call as a line "[tool_call] {"name":...,"arguments":{...}}", each bad block as
// "[tool_call_error] message".
class ToolCallPrinter {
 public:
  explicit ToolCallPrinter(const std::string& template_source);
  void push(std::string_view text);
  void finish();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cera::cli
