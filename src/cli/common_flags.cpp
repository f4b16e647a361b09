#include "cli/common_flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "format/gguf.h"

namespace cera::cli {

void add_model_flags(CLI::App& cmd, ModelFlags& f, bool model_required) {
  auto* m = cmd.add_option("-m,--model", f.engine.model_path, "model file (GGUF)");
  if (model_required) m->required();
  cmd.add_option("-t,--threads", f.engine.n_threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  // The engine checks the name (one parser for the CLI, the C++ and the C API).
  cmd.add_option("--device", f.engine.device,
                 "where the model runs: cpu, cuda, or cuda:N for GPU N (default: cpu, or cuda with -ngl)");
  cmd.add_option("--n-gpu-layers", f.engine.n_gpu_layers,
                 "(or -ngl) layers on the GPU, as in llama.cpp: 0 = none, 99 = all (cera offloads all or none)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("-c,--ctx-size", f.engine.n_ctx, "context size in tokens")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("-b,--batch-size", f.engine.n_batch, "largest prompt chunk processed in one step (default: 512 on the CPU, 4096 on a GPU)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--cache-type-k", f.engine.cache_type_k,
                 "(or -ctk) KV cache type: f32 (default) or f16 (CUDA: half the KV memory); sets V too unless "
                 "--cache-type-v is given");
  cmd.add_option("--cache-type-v", f.engine.cache_type_v, "(or -ctv) as --cache-type-k; K and V share one type");
}

std::unique_ptr<Engine> load_engine(const EngineOptions& options) {
  auto engine = Engine::load(options);
  const int32_t trained = engine->info().n_ctx_train;
  if (trained > 0 && options.n_ctx > trained)
    std::fprintf(stderr,
                 "cera: warning: context size %d is longer than the model's training context (%d tokens); "
                 "text past %d tokens may degrade\n",
                 options.n_ctx, trained, trained);
  return engine;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::NotFound, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> parse_token_ids(const std::string& list) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      throw Error(ErrorCode::InvalidArgument, "bad token id '" + item + "' in --token-ids (expected e.g. 1,2,3)");
    ids.push_back(v);
    start = end + 1;
  }
  return ids;
}

void add_sampling_flags(CLI::App& cmd, GenerateOptions& gen, std::vector<std::string>& logit_bias) {
  SamplingParams& s = gen.sampling;
  cmd.add_option("--temp", s.temperature, "temperature (0: greedy)")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "top-k sampling (0: off)")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "top-p sampling (1.0: off)")->capture_default_str();
  cmd.add_option("--min-p", s.min_p, "min-p sampling (0.0: off)")->capture_default_str();
  cmd.add_option("-s,--seed", s.seed, "random seed (default: random)");
  cmd.add_option("--typical", s.typical_p, "locally typical sampling (1.0: off)")->capture_default_str();
  cmd.add_option("--repeat-penalty", s.repeat_penalty, "penalize repeated tokens (1.0: off)")->capture_default_str();
  cmd.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look back over (-1: all)")->capture_default_str();
  cmd.add_option("--presence-penalty", s.presence_penalty, "presence penalty (0.0: off)")->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty (0.0: off)")->capture_default_str();
  cmd.add_option("-l,--logit-bias", logit_bias, "TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 2-inf (repeatable)");
  cmd.add_option("-r,--reverse-prompt,--stop", gen.stop, "stop when this text is generated (repeatable)");
  cmd.add_flag("--ignore-eos", gen.ignore_eos, "never end at an end-of-text token");
}

void apply_logit_bias(const std::vector<std::string>& entries, SamplingParams& s) {
  for (const std::string& lb : entries) {
    // llama.cpp's form: TOKEN followed by a signed bias ("15043+1", "15043-1", "2-inf").
    const size_t sign = lb.find_first_of("+-", 1);
    try {
      if (sign == std::string::npos) throw std::invalid_argument("no sign");
      const int32_t id = std::stoi(lb.substr(0, sign));
      const std::string v = lb.substr(sign);
      s.logit_bias[id] = (v == "-inf" ? -INFINITY : v == "+inf" ? INFINITY : std::stof(v));
    } catch (const std::exception&) {
      throw Error(ErrorCode::InvalidArgument, "bad --logit-bias '" + lb + "' (expected TOKEN_ID+BIAS or TOKEN_ID-BIAS)");
    }
  }
}

namespace {

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

ModelTemplate load_model_template(const std::string& model_path) {
  return std::filesystem::is_directory(model_path) ? from_hf_folder(model_path) : from_gguf(model_path);
}

std::string render_chat(const ModelTemplate& t, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools) {
  chat::ChatContextOptions co;
  co.add_generation_prompt = true;
  co.bos_token = t.bos_token;
  co.eos_token = t.eos_token;
  return chat::render_chat_template(t.source, chat::make_chat_context(messages, tools, co));
}

nlohmann::ordered_json load_tools_file(const std::string& path) {
  if (path.empty()) return nullptr;
  nlohmann::ordered_json tools;
  try {
    tools = nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::InvalidArgument, path + ": not valid JSON: " + e.what());
  }
  if (!tools.is_array()) throw Error(ErrorCode::InvalidArgument, path + ": expected a JSON array of tools");
  return tools;
}

struct ToolCallPrinter::Impl {
  chat::ToolCallStreamParser parser;
  void show(const chat::ToolCallResult& r) {
    std::fwrite(r.content.data(), 1, r.content.size(), stdout);
    for (const auto& c : r.calls) {
      const nlohmann::json j = {{"name", c.name}, {"arguments", c.arguments}};
      std::printf("\n[tool_call] %s\n", j.dump().c_str());
    }
    for (const auto& e : r.errors) std::printf("\n[tool_call_error] %s\n", e.message.c_str());
    std::fflush(stdout);
  }
};

ToolCallPrinter::ToolCallPrinter(const std::string& template_source)
    : impl_(std::make_shared<Impl>(Impl{chat::ToolCallStreamParser(
          template_source.find("<|tool_list_start|>") != std::string::npos ? chat::ToolCallFormat::Lfm2
                                                                           : chat::ToolCallFormat::Hermes)})) {}

void ToolCallPrinter::push(std::string_view text) { impl_->show(impl_->parser.push(text)); }
void ToolCallPrinter::finish() { impl_->show(impl_->parser.finish()); }

}  // namespace cera::cli
