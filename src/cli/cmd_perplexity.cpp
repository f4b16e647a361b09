// `cera perplexity`: perplexity of a model on a text file, with llama-perplexity's method so the numbers
// compare with llama.cpp's and with tools/default_model/train.py's torch evaluation:
//   * the whole text is tokenized once (BOS added if the model adds it);
//   * it is cut into floor(n_tokens / n_ctx) chunks of n_ctx tokens; each chunk is evaluated from an empty
//     context, its first token replaced by BOS (when the model adds BOS);
//   * only the second half is scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the tokens at
//     n_ctx/2+1 .. n_ctx-1 (the first half is context);
//   * PPL = exp(mean negative log-likelihood), log-softmax in double; a running estimate after every chunk,
//     then "Final estimate: PPL = X +/- Y" (Y from the standard error of the mean NLL).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/default_model.h"

namespace cera::cli {

namespace {
struct PerplexityFlags {
  ModelFlags model;
  std::string file;
};
}  // namespace

Command add_perplexity_command(CLI::App& app) {
  auto f = std::make_shared<PerplexityFlags>();
  f->model.engine.n_ctx = 512;
  f->model.engine.prefix_cache_mib = 0;  // every chunk starts from an empty context; nothing to reuse
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a model on a text file (llama-perplexity's method)");
  add_model_flags(*cmd, f->model, /*model_required=*/false);
  cmd->add_option("-f,--file", f->file, "text file to score")->required();
  cmd->footer("Chunks of -c tokens (default 512), each from an empty context; the second half of each chunk is scored.\n"
              "Without -m, the embedded default model is used (" + default_model_description() + ").");
  return {cmd, [f]() {
            if (f->model.engine.model_path.empty()) f->model.engine.model_path = default_model_path();
            const int32_t n_ctx = f->model.engine.n_ctx;
            if (n_ctx < 4) throw Error(ErrorCode::InvalidArgument, "the context (-c) must be at least 4 tokens");
            const std::string text = read_file(f->file);
            const auto t0 = std::chrono::steady_clock::now();
            auto engine = load_engine(f->model.engine);
            std::vector<int32_t> tokens = engine->tokenize(text, /*add_special=*/true, /*parse_special=*/false);
            // The model adds BOS iff tokenizing an empty text with special tokens yields a leading token.
            const std::vector<int32_t> probe = engine->tokenize("", true, false);
            const bool add_bos = !probe.empty();
            const int32_t bos = add_bos ? probe.front() : -1;
            const int64_t n_chunk = int64_t(tokens.size()) / n_ctx;
            if (n_chunk < 1)
              throw Error(ErrorCode::InvalidArgument, "the text has " + std::to_string(tokens.size()) +
                                                          " tokens, fewer than one chunk of -c " +
                                                          std::to_string(n_ctx) + " (use a smaller -c)");
            const int32_t first = n_ctx / 2;
            const int64_t V = engine->info().n_vocab;
            std::fprintf(stderr, "cera: %zu tokens, %lld chunks of %d (scoring the last %d tokens of each)\n",
                         tokens.size(), (long long)n_chunk, n_ctx, n_ctx - 1 - first);

            auto session = engine->new_session();
            double nll = 0, nll2 = 0;
            int64_t count = 0;
            for (int64_t c = 0; c < n_chunk; ++c) {
              std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
              if (add_bos) chunk[0] = bos;
              session->reset();
              session->append(chunk, /*all_logits=*/true);
              const std::span<const float> logits = session->logits();
              if (int64_t(logits.size()) != int64_t(n_ctx) * V)
                throw Error(ErrorCode::Internal, "perplexity: expected logits for every position of the chunk");
              for (int32_t i = first; i < n_ctx - 1; ++i) {
                const float* row = logits.data() + int64_t(i) * V;
                double mx = row[0];
                for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
                double sum = 0;
                for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
                const double lp = double(row[chunk[i + 1]]) - mx - std::log(sum);
                nll -= lp;
                nll2 += lp * lp;
                ++count;
              }
              std::printf("[%lld]%.4f,", (long long)(c + 1), std::exp(nll / double(count)));
              std::fflush(stdout);
            }
            std::printf("\n");
            const double mean = nll / double(count);
            const double var = nll2 / double(count) - mean * mean;
            const double ppl = std::exp(mean);
            const double err = (var > 0 && count > 1) ? std::sqrt(var / double(count - 1)) * ppl : 0.0;
            std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::fprintf(stderr, "cera: %lld scored tokens, %.2f s\n", (long long)count, secs);
            return 0;
          }};
}

}  // namespace cera::cli
