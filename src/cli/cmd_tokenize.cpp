// `cera tokenize`: text -> token ids with the model's tokenizer (JSON array on stdout).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "format/hf/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace cera::cli {

namespace {
struct TokenizeFlags {
  ModelFlags model;
  std::string text;
  std::string json_input;
  bool add_special = false;
  bool parse_special = false;
  bool show_pieces = false;
};
}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  add_model_flags(*cmd, f->model);
  auto* t = cmd->add_option("text", f->text, "the text to tokenize");
  auto* j = cmd->add_option("--json-input", f->json_input,
                            "a JSON file holding an array of strings; prints an array of id arrays");
  t->excludes(j);
  cmd->add_flag("--add-special", f->add_special, "add BOS/EOS as the model's tokenizer says");
  cmd->add_flag("--parse-special", f->parse_special, "turn special-token text such as <|im_start|> into its token");
  cmd->add_flag("--pieces", f->show_pieces, "print [id, piece] pairs instead of bare ids");
  return {cmd, [f]() {
            // Only the tokenizer is needed. A folder without config.json holds just a tokenizer
            // (tokenizer.json + tokenizer_config.json): read it directly, no weights required.
            // Anything else loads the model (cheap: weights are mapped).
            const std::string& path = f->model.engine.model_path;
            std::unique_ptr<Tokenizer> tok;
            std::unique_ptr<Engine> engine;
            if (hf::is_directory(path) && !hf::is_file(path + "/config.json")) {
              const std::string tc = path + "/tokenizer_config.json";
              tok = std::make_unique<Tokenizer>(vocab_from_hf(path + "/tokenizer.json", hf::is_file(tc) ? tc : std::string()));
            } else {
              engine = load_engine(f->model.engine);
            }
            auto encode = [&](const std::string& s) {
              const auto ids = tok ? tok->encode(s, f->add_special, f->parse_special)
                                   : engine->tokenize(s, f->add_special, f->parse_special);
              nlohmann::json out = nlohmann::json::array();
              for (int32_t id : ids) {
                if (f->show_pieces) out.push_back({id, tok ? tok->token_to_piece(id) : engine->token_to_piece(id)});
                else out.push_back(id);
              }
              return out;
            };
            nlohmann::json result;
            if (!f->json_input.empty()) {
              nlohmann::json in;
              try {
                in = nlohmann::json::parse(read_file(f->json_input));
              } catch (const nlohmann::json::exception& e) {
                throw Error(ErrorCode::InvalidArgument, f->json_input + ": not valid JSON: " + e.what());
              }
              if (!in.is_array()) throw Error(ErrorCode::InvalidArgument, f->json_input + ": expected a JSON array of strings");
              result = nlohmann::json::array();
              for (const auto& s : in) {
                if (!s.is_string()) throw Error(ErrorCode::InvalidArgument, f->json_input + ": every element must be a string");
                result.push_back(encode(s.get<std::string>()));
              }
            } else {
              result = encode(f->text);
            }
            std::puts(result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
            return 0;
          }};
}

}  // namespace cera::cli
