// `cera bench`: llama-bench style speed rows — ppN (prompt processing of N tokens in batched
// steps) and tgN (N single-token decode steps, each waited for with its logits read, as llama-bench
// does) in tokens/s ± stddev over -r repetitions, plus the weight bytes streamed per second for
// decode (the bound on a CPU is memory bandwidth). With -d,
// each is also measured after a context of D tokens ("tg128 @ d4096", as llama-bench prints it).
// -o picks llama-bench's output formats: a markdown table (md), json, jsonl or csv.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common_flags.h"

namespace cera::cli {

namespace {
struct BenchFlags {
  ModelFlags model;
  std::vector<int32_t> n_prompt{512};
  std::vector<int32_t> n_gen{128};
  std::vector<int32_t> n_depth{0};  // tokens already in the context before each pp/tg test
  int32_t repetitions = 5;
  int32_t shared_prefix = 0;
  std::vector<int32_t> parallel;  // batched decode: sequences decoded together
  int32_t parallel_prompt = 128;
  std::string output = "md";
};

struct Stats {
  double mean = 0, stddev = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(s.stddev / double(v.size() - 1)) : 0;
  return s;
}

// One measured test: what it ran and its tokens/s per repetition.
struct Row {
  std::string test;  // "pp512", "tg128 @ d4096", "tg128 x8 seqs"
  int32_t n_prompt = 0, n_gen = 0, n_depth = 0, n_seqs = 1;
  std::vector<double> tps;
  bool decode = false;  // tgN of one sequence: every weight streamed once per token
};

std::string human_size(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / (1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1ull << 20));
  return buf;
}
}  // namespace

Command add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prompt processing (ppN) and generation (tgN) speed");
  add_model_flags(*cmd, f->model);
  cmd->add_option("-p,--n-prompt", f->n_prompt, "prompt lengths to test (0 to skip)")->delimiter(',')->capture_default_str();
  cmd->add_option("-n,--n-gen", f->n_gen, "generation lengths to test (0 to skip)")->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--n-depth", f->n_depth,
                  "context depths: each pp/tg test runs after a prompt of D tokens (not timed)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-r,--repetitions", f->repetitions, "repetitions of each test")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--shared-prefix", f->shared_prefix,
                  "also measure the prefix cache: a prompt of N+64 tokens, then another sharing its first N")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--parallel", f->parallel,
                  "batched decode: for each N, N sequences each get a prompt of --parallel-prompt tokens, then "
                  "generate the first -n length greedily together, one token per sequence per step (aggregate t/s)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--parallel-prompt", f->parallel_prompt,
                  "prompt tokens per sequence for --parallel (its context depth: -d applies to the pp/tg tests only)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("-o,--output", f->output, "output format: md (a markdown table), json, jsonl or csv, as llama-bench")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "json", "jsonl", "csv"}));
  return {cmd, [f]() {
            EngineOptions eo = f->model.engine;
            int32_t longest = 1, deepest = 0;
            for (int32_t d : f->n_depth) deepest = std::max(deepest, d);
            for (int32_t n : f->n_prompt) longest = std::max(longest, deepest + n);
            for (int32_t n : f->n_gen) longest = std::max(longest, deepest + n + 1);
            longest = std::max(longest, f->shared_prefix + 64);
            const int32_t gen_parallel = f->n_gen.empty() ? 128 : std::max(f->n_gen.front(), 1);
            if (!f->parallel.empty()) longest = std::max(longest, f->parallel_prompt + gen_parallel + 1);
            eo.n_ctx = std::max(eo.n_ctx, longest);
            for (int32_t n : f->parallel) eo.n_seq_max = std::max(eo.n_seq_max, n);
            // Raw prefill speed, as llama-bench measures it: with the prefix cache on, prompts are cut
            // into chunks that end at its checkpoints (-b would not be the step size).
            if (f->shared_prefix == 0) eo.prefix_cache_mib = 0;
            auto engine = load_engine(eo);
            const ModelInfo& info = engine->info();
            std::mt19937 rng(42);
            std::uniform_int_distribution<int32_t> any_token(0, info.n_vocab - 1);
            using clock = std::chrono::steady_clock;

            // Rows print as they are measured; json opens its array here and closes it at the end.
            const std::string& format = f->output;
            if (format == "md") {
              std::printf("| model | size | params | backend | test | t/s | GB/s |\n");
              std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
            } else if (format == "csv") {
              std::printf("model,arch,size_bytes,n_params,backend,test,n_prompt,n_gen,n_depth,n_seqs,avg_ts,stddev_ts,gb_s\n");
            } else if (format == "json") {
              std::printf("[");
            }
            bool first_row = true;
            auto emit = [&](const Row& r) {
              const Stats s = stats(r.tps);
              // Decode streams every weight once per token (the tied LM head included).
              const double gb_s = r.decode ? s.mean * double(info.weight_bytes) / 1e9 : 0.0;
              if (format == "md") {
                char gbs[32] = "";
                if (r.decode) std::snprintf(gbs, sizeof gbs, "%.1f", gb_s);
                std::printf("| %s %s | %s | %.2f M | %s | %s | %.2f ± %.2f | %s |\n", info.arch.c_str(), info.name.c_str(),
                            human_size(info.weight_bytes).c_str(), double(info.n_params) / 1e6, info.backend.c_str(),
                            r.test.c_str(), s.mean, s.stddev, gbs);
              } else if (format == "csv") {
                auto quoted = [](std::string v) {  // RFC 4180: quotes doubled inside quotes
                  for (size_t i = 0; (i = v.find('"', i)) != std::string::npos; i += 2) v.insert(i, 1, '"');
                  return "\"" + v + "\"";
                };
                std::printf("%s,%s,%llu,%llu,%s,%s,%d,%d,%d,%d,%.4f,%.4f,%.2f\n", quoted(info.name).c_str(),
                            quoted(info.arch).c_str(), static_cast<unsigned long long>(info.weight_bytes),
                            static_cast<unsigned long long>(info.n_params), quoted(info.backend).c_str(),
                            quoted(r.test).c_str(), r.n_prompt, r.n_gen, r.n_depth, r.n_seqs, s.mean, s.stddev, gb_s);
              } else {
                const nlohmann::json j = {{"model", info.name},     {"arch", info.arch},
                                          {"size_bytes", info.weight_bytes}, {"n_params", info.n_params},
                                          {"backend", info.backend}, {"test", r.test},
                                          {"n_prompt", r.n_prompt},  {"n_gen", r.n_gen},
                                          {"n_depth", r.n_depth},    {"n_seqs", r.n_seqs},
                                          {"avg_ts", s.mean},        {"stddev_ts", s.stddev},
                                          {"samples_ts", r.tps},     {"gb_s", gb_s}};
                if (format == "json") std::printf("%s\n  %s", first_row ? "" : ",", j.dump().c_str());
                else std::printf("%s\n", j.dump().c_str());
              }
              first_row = false;
              std::fflush(stdout);
            };

            // An append returns once its steps are launched; reading the logits waits for the device,
            // so every timed region ends with it (and untimed work is finished before one starts).
            auto finished = [](Session& session) { (void)session.last_logits(); };
            // A session holding `depth` random tokens (untimed), so a test starts at that context.
            auto session_at = [&](int32_t depth) {
              auto session = engine->new_session();
              if (depth > 0) {
                std::vector<int32_t> context(static_cast<size_t>(depth));
                for (auto& t : context) t = any_token(rng);
                session->append(context);
                finished(*session);
              }
              return session;
            };
            auto at_depth = [](std::string test, int32_t depth) {
              return depth > 0 ? test + " @ d" + std::to_string(depth) : test;
            };
            for (int32_t depth : f->n_depth) {
              // Filling the context is untimed but not free (on a CPU, seconds per repetition): say so.
              if (depth > 0)
                std::fprintf(stderr, "cera bench: each test at depth %d first fills a %d-token context (untimed)\n",
                             depth, depth);
              for (int32_t n : f->n_prompt) {
                if (n <= 0) continue;
                std::vector<int32_t> prompt(static_cast<size_t>(n));
                std::vector<double> tps;
                for (int32_t r = -1; r < f->repetitions; ++r) {  // r = -1: warm-up
                  // A fresh prompt each time: a repeated one would be restored from the prefix cache.
                  for (auto& t : prompt) t = any_token(rng);
                  auto session = session_at(depth);
                  const auto t0 = clock::now();
                  session->append(prompt);
                  finished(*session);
                  const double s = std::chrono::duration<double>(clock::now() - t0).count();
                  if (r >= 0) tps.push_back(n / s);
                }
                emit({at_depth("pp" + std::to_string(n), depth), n, 0, depth, 1, tps, false});
              }
              for (int32_t n : f->n_gen) {
                if (n <= 0) continue;
                std::vector<double> tps;
                for (int32_t r = -1; r < f->repetitions; ++r) {
                  auto session = session_at(depth);
                  int32_t token = any_token(rng);
                  const auto t0 = clock::now();
                  // As llama-bench's tg: random tokens, and each step is finished with its logits on
                  // the host before the next is appended (llama_decode copies them out and
                  // llama-bench calls llama_synchronize after every token), so the rows compare.
                  for (int32_t i = 0; i < n; ++i) {
                    session->append({&token, 1});
                    finished(*session);
                    token = any_token(rng);
                  }
                  const double s = std::chrono::duration<double>(clock::now() - t0).count();
                  if (r >= 0) tps.push_back(n / s);
                }
                emit({at_depth("tg" + std::to_string(n), depth), 0, n, depth, 1, tps, true});
              }
            }
            for (int32_t n_seq : f->parallel) {
              std::vector<double> tps;
              for (int32_t r = -1; r < f->repetitions; ++r) {
                std::vector<std::unique_ptr<Session>> sessions;
                std::vector<Session*> batch;
                for (int32_t i = 0; i < n_seq; ++i) {
                  std::vector<int32_t> prompt(static_cast<size_t>(f->parallel_prompt));
                  for (auto& t : prompt) t = any_token(rng);
                  sessions.push_back(engine->new_session());
                  sessions.back()->append(prompt);
                  batch.push_back(sessions.back().get());
                }
                finished(*sessions.back());  // the prompts (untimed) are done before the clock starts
                // Greedy generation of every sequence, the argmax taken where the model runs and (on
                // a GPU) fed back there, the host preparing each step while the previous one runs.
                std::vector<int32_t> tokens(static_cast<size_t>(n_seq));
                std::vector<int32_t> chosen(static_cast<size_t>(n_seq) * static_cast<size_t>(gen_parallel));
                for (auto& t : tokens) t = any_token(rng);
                const auto t0 = clock::now();
                engine->generate_greedy_batch(batch, tokens, gen_parallel, chosen);
                const double s = std::chrono::duration<double>(clock::now() - t0).count();
                if (r >= 0) tps.push_back(double(n_seq) * gen_parallel / s);
              }
              emit({"tg" + std::to_string(gen_parallel) + " x" + std::to_string(n_seq) + " seqs", f->parallel_prompt,
                    gen_parallel, 0, n_seq, tps, false});
            }
            if (f->shared_prefix > 0) {
              // Two prompts sharing their first N tokens: the second should evaluate only what follows
              // the last conv checkpoint before N.
              std::vector<int32_t> a(static_cast<size_t>(f->shared_prefix + 64)), b;
              for (auto& t : a) t = any_token(rng);
              b = a;
              for (size_t i = size_t(f->shared_prefix); i < b.size(); ++i) b[i] = any_token(rng);
              auto time_append = [&](const std::vector<int32_t>& prompt, int32_t& reused) {
                auto session = engine->new_session();
                const auto t0 = clock::now();
                session->append(prompt);
                finished(*session);
                reused = session->reused_tokens();
                return std::chrono::duration<double>(clock::now() - t0).count();
              };
              int32_t reused_a = 0, reused_b = 0;
              const double ta = time_append(a, reused_a);
              const double tb = time_append(b, reused_b);
              const double evaluated_b = double(b.size() - size_t(reused_b));
              // Outside the table's format: on stderr unless the output is the markdown table.
              std::fprintf(format == "md" ? stdout : stderr, "\nshared prefix of %d tokens: first prompt %zu tokens in %.2f s; second prompt %zu tokens "
                          "in %.2f s, %d restored from the prefix cache, %.0f evaluated (%.1f%% less prefill work, "
                          "%.1fx faster)\n",
                          f->shared_prefix, a.size(), ta, b.size(), tb, reused_b, evaluated_b,
                          100.0 * (1.0 - evaluated_b / double(a.size())), ta / tb);
            }
            if (format == "json") std::printf("\n]\n");
            return 0;
          }};
}

}  // namespace cera::cli
