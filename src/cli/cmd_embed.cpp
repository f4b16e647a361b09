// `cera embed`: the last layer's hidden states (after the final norm, the LM head's input) of a
// text, mean-pooled or per token, as JSON on stdout.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/default_model.h"

namespace cera::cli {

namespace {
struct EmbedFlags {
  ModelFlags model;
  std::string prompt;
  std::string prompt_file;
  std::string pooling = "mean";
  bool normalize = false;
};

void l2_normalize(std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  if (s <= 0) return;
  const float inv = float(1.0 / std::sqrt(s));
  for (float& x : v) x *= inv;
}
}  // namespace

Command add_embed_command(CLI::App& app) {
  auto f = std::make_shared<EmbedFlags>();
  CLI::App* cmd = app.add_subcommand("embed", "print a text's embedding (final-norm hidden states) as JSON");
  add_model_flags(*cmd, f->model, /*model_required=*/false);
  cmd->add_option("-p,--prompt", f->prompt, "text to embed");
  cmd->add_option("-f,--file", f->prompt_file, "read the text from a file");
  cmd->add_option("--pooling", f->pooling, "mean: one vector; none: one per token")
      ->check(CLI::IsMember({"mean", "none"}))
      ->capture_default_str();
  cmd->add_flag("--normalize", f->normalize, "scale each output vector to unit L2 norm");
  cmd->footer("Without -m, the embedded default model is used (" + default_model_description() + ").");
  return {cmd, [f]() {
            if (f->model.engine.model_path.empty()) f->model.engine.model_path = default_model_path();
            std::string text = f->prompt;
            if (!f->prompt_file.empty()) text = read_file(f->prompt_file);
            if (text.empty()) throw Error(ErrorCode::InvalidArgument, "no text given (use -p TEXT or -f FILE)");
            f->model.engine.embeddings = true;
            auto engine = load_engine(f->model.engine);
            const std::vector<int32_t> ids = engine->tokenize(text, /*add_special=*/true, /*parse_special=*/false);
            if (ids.empty()) throw Error(ErrorCode::InvalidArgument, "the text has no tokens");
            auto session = engine->new_session();
            session->append(ids, /*all_logits=*/true);  // every token's row
            const std::span<const float> h = session->embeddings();
            const size_t d = size_t(engine->info().n_embd);
            if (h.size() != ids.size() * d)
              throw Error(ErrorCode::Internal, "embed: got " + std::to_string(h.size()) + " values for " +
                                                   std::to_string(ids.size()) + " tokens of " + std::to_string(d));
            nlohmann::ordered_json out;
            out["model"] = engine->info().name;
            out["n_embd"] = d;
            out["n_tokens"] = ids.size();
            out["pooling"] = f->pooling;
            out["normalized"] = f->normalize;
            if (f->pooling == "mean") {
              std::vector<double> acc(d, 0.0);
              for (size_t t = 0; t < ids.size(); ++t)
                for (size_t j = 0; j < d; ++j) acc[j] += h[t * d + j];
              std::vector<float> v(d);
              for (size_t j = 0; j < d; ++j) v[j] = float(acc[j] / double(ids.size()));
              if (f->normalize) l2_normalize(v);
              out["embedding"] = v;
            } else {
              nlohmann::ordered_json rows = nlohmann::ordered_json::array();
              for (size_t t = 0; t < ids.size(); ++t) {
                std::vector<float> v(h.begin() + std::ptrdiff_t(t * d), h.begin() + std::ptrdiff_t((t + 1) * d));
                if (f->normalize) l2_normalize(v);
                rows.push_back({{"token", ids[t]}, {"embedding", v}});
              }
              out["tokens"] = rows;
            }
            const std::string s = out.dump();
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fputc('\n', stdout);
            return 0;
          }};
}

}  // namespace cera::cli
