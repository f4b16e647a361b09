// `cera chat`: an interactive, streaming, multi-turn conversation with the model's chat template.
// One Session holds the conversation; each turn only the text the template added since the last
// turn is evaluated. Ctrl-C stops a reply, Ctrl-C at the prompt or Ctrl-D leaves.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/default_model.h"

namespace cera::cli {

namespace {

using ordered_json = nlohmann::ordered_json;

// Set by the SIGINT handler (only this: a handler may touch nothing else); read by the token
// callback, which then stops the reply, and by the prompt, which then ends the chat.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) { g_interrupted.store(true); }

struct ChatFlags {
  ModelFlags model;
  GenerateOptions gen;
  std::vector<std::string> logit_bias;
  int32_t n_predict = 512;
  std::string system;
  std::string tools_file;
};

// One line from stdin without its newline; nullopt at EOF or when Ctrl-C interrupted the read
// (SIGINT is installed without SA_RESTART, so the read fails with EINTR).
std::optional<std::string> read_line() {
  std::string line;
  char buf[4096];
  for (;;) {
    if (!std::fgets(buf, sizeof buf, stdin)) {
      if (g_interrupted || line.empty()) return std::nullopt;
      return line;  // a last line without a newline
    }
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
  }
}

void print_help() {
  std::printf(
      "  /help           this list\n"
      "  /reset          forget the conversation (keeps the system prompt)\n"
      "  /system TEXT    set the system prompt (starts the conversation over)\n"
      "  /save FILE      write the conversation as JSON\n"
      "  /set n N        tokens per reply (-1: until end of text); also /set temp T, /set ignore-eos on|off\n"
      "  /exit           leave (also Ctrl-D, or Ctrl-C at the prompt)\n"
      "  Ctrl-C while the model replies stops the reply.\n");
}

class Chat {
 public:
  Chat(ChatFlags& f, Engine& engine, ModelTemplate mt, ordered_json tools)
      : f_(f), mt_(std::move(mt)), tools_(std::move(tools)),
        session_(engine.new_session()) {
    set_system(f_.system);
  }

  void set_system(const std::string& text) {
    f_.system = text;
    messages_ = ordered_json::array();
    if (!text.empty()) messages_.push_back({{"role", "system"}, {"content", text}});
  }

  void reset() {
    set_system(f_.system);
    session_->reset();
  }

  void save(const std::string& path) const {
    ordered_json out = {{"messages", messages_}};
    if (!tools_.is_null()) out["tools"] = tools_;
    std::ofstream o(path, std::ios::binary);
    if (!o || !(o << out.dump(2) << '\n')) throw Error(ErrorCode::Io, "cannot write " + path);
  }

  // One user turn: the session renders the conversation with the model's template and evaluates
  // only what is new (Session::append_chat), then the reply streams.
  void turn(const std::string& user_text) {
    messages_.push_back({{"role", "user"}, {"content", user_text}});
    try {
      session_->append_chat(messages_.dump(), tools_.is_null() ? std::string() : tools_.dump());
    } catch (const Error&) {
      messages_.erase(messages_.end() - 1);
      session_->reset();
      throw;
    }

    GenerateOptions gen = f_.gen;
    gen.max_tokens = f_.n_predict;
    gen.render_special = !tools_.is_null();  // tool-call markers are special tokens in LFM2
    std::string reply;
    std::optional<ToolCallPrinter> printer;
    if (!tools_.is_null()) printer.emplace(mt_.source);
    const FinishReason reason = session_->generate(gen, [&](int32_t token, std::string_view text) {
      // Dropped: a token refused here is not fed back either (held-back text, token -1, was).
      if (token >= 0 && g_interrupted) return false;
      reply += text;
      if (printer) printer->push(text);
      else std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    if (printer) printer->finish();
    std::printf("\n");
    if (reason == FinishReason::Cancelled) std::printf("[reply stopped]\n");
    else if (reason == FinishReason::Length && f_.n_predict >= 0) std::printf("[reply cut at %d tokens]\n", f_.n_predict);
    std::fflush(stdout);
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
  }

 private:
  ChatFlags& f_;
  ModelTemplate mt_;  // its source also drives the tool-call printer
  ordered_json tools_;
  std::unique_ptr<Session> session_;
  ordered_json messages_;
};

// Splits "/cmd rest" into cmd and rest.
std::pair<std::string, std::string> split_command(const std::string& line) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos) return {line, ""};
  size_t b = sp;
  while (b < line.size() && line[b] == ' ') ++b;
  return {line.substr(0, sp), line.substr(b)};
}

int run_chat(ChatFlags& f) {
  if (f.model.engine.model_path.empty()) f.model.engine.model_path = default_model_path();
  apply_logit_bias(f.logit_bias, f.gen.sampling);
  ordered_json tools = load_tools_file(f.tools_file);
  ModelTemplate mt = load_model_template(f.model.engine.model_path);
  if (mt.source.empty())
    throw Error(ErrorCode::NotFound, f.model.engine.model_path + ": the model has no chat template");
  auto engine = load_engine(f.model.engine);
  Chat chat(f, *engine, std::move(mt), std::move(tools));

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: Ctrl-C must interrupt the blocking read at the prompt
  struct sigaction old {};
  sigaction(SIGINT, &sa, &old);

  std::fprintf(stderr, "cera chat: %s (%s). /help for commands; Ctrl-C stops a reply, Ctrl-D exits.\n",
               engine->info().name.c_str(), engine->info().arch.c_str());
  int rc = 0;
  for (;;) {
    g_interrupted = false;
    std::printf("> ");
    std::fflush(stdout);
    const auto line = read_line();
    if (!line) {
      std::printf("\n");
      break;
    }
    if (line->empty()) continue;
    try {
      if ((*line)[0] == '/') {
        const auto [cmd, arg] = split_command(*line);
        if (cmd == "/exit" || cmd == "/quit") break;
        if (cmd == "/help") print_help();
        else if (cmd == "/reset") chat.reset(), std::printf("[conversation reset]\n");
        else if (cmd == "/system") chat.set_system(arg), std::printf("[system prompt set; conversation reset]\n");
        else if (cmd == "/save") {
          if (arg.empty()) throw Error(ErrorCode::InvalidArgument, "/save needs a file name");
          chat.save(arg);
          std::printf("[saved to %s]\n", arg.c_str());
        } else if (cmd == "/set") {
          const auto [key, value] = split_command(arg);
          try {
            if (key == "n") f.n_predict = std::stoi(value);
            else if (key == "temp") f.gen.sampling.temperature = std::stof(value);
            else if (key == "ignore-eos" && (value == "on" || value == "off")) f.gen.ignore_eos = value == "on";
            else throw Error(ErrorCode::InvalidArgument, "/set knows n N, temp T, ignore-eos on|off");
          } catch (const std::logic_error&) {
            throw Error(ErrorCode::InvalidArgument, "/set " + key + ": bad value '" + value + "'");
          }
          std::printf("[%s = %s]\n", key.c_str(), value.c_str());
        } else {
          std::printf("unknown command %s (/help lists them)\n", cmd.c_str());
        }
        continue;
      }
      chat.turn(*line);
    } catch (const Error& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "cera: error: %s\n", e.what());
    }
  }
  sigaction(SIGINT, &old, nullptr);
  return rc;
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto f = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand("chat", "talk with a model interactively (its chat template, streaming)");
  add_model_flags(*cmd, f->model, /*model_required=*/false);
  cmd->add_option("-n,--n-predict", f->n_predict, "tokens per reply at most (-1: until end of text)")->capture_default_str();
  cmd->add_option("--system", f->system, "system prompt");
  cmd->add_option("--tools", f->tools_file, "a JSON array of tools offered through the template; calls are printed as [tool_call] JSON lines");
  add_sampling_flags(*cmd, f->gen, f->logit_bias);
  cmd->footer("Without -m, the embedded default model is used (" + default_model_description() +
              "). Type /help in the chat for its commands.");
  return {cmd, [f]() { return run_chat(*f); }};
}

}  // namespace cera::cli
