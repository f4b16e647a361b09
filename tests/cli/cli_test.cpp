// The `cera` binary as a user meets it: exit codes, one-line errors, stdout carrying only the
// generated text, and each command's output format.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_backend.h"
#include "cera/engine.h"
#include "format/safetensors.h"
#include "support/fixture_models.h"
#include "support/fixtures.h"

namespace cera {
namespace {

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

// Runs `cera ARGS` through the shell, capturing stdout and stderr separately.
Result run_cera(const std::string& args) {
  // One file per call: ctest runs tests of this binary in parallel processes.
  static int calls = 0;
  const std::string err_path =
      ::testing::TempDir() + "/cera_stderr_" + std::to_string(getpid()) + "_" + std::to_string(++calls) + ".txt";
  const std::string cmd = std::string(CERA_CLI_PATH) + " " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = test::read_text_file(err_path);
  return r;
}

std::string bf16_model() { return test::fixture_gguf("lfm2-tiny", "BF16"); }

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"", "run", "logits", "tokenize", "inspect", "bench", "quantize"}) {
    const Result r = run_cera(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd << ": " << r.out;
  }
}

TEST(Cli, UnknownFlagIsANonZeroExitNamingIt) {
  const Result r = run_cera("run --no-such-flag");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-flag"), std::string::npos) << r.err;
}

// A refused command: exit 1 and one line on stderr that contains `needle` (what: the flags, for
// the failure message).
void expect_one_line_error(const Result& r, const std::string& needle, const std::string& what = "") {
  EXPECT_EQ(r.exit_code, 1) << what;
  EXPECT_EQ(count_lines(r.err), 1u) << what << ": " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": " << r.err;
}

TEST(Cli, MissingModelFileIsOneClearLine) {
  const Result r = run_cera("run -m /nonexistent/model.gguf -p hi");
  expect_one_line_error(r, "/nonexistent/model.gguf");
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, TruncatedModelFileIsOneClearLine) {
  const std::string bytes = test::read_text_file(bf16_model());
  const std::string path = ::testing::TempDir() + "/truncated.gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  expect_one_line_error(run_cera("run -m " + path + " -p hi"), "truncated.gguf");
}

// A run that asked for the GPU: text where there is one, else (CI) exit 1 with one line that
// carries the reason (no_gpu: cuda_unavailable_reason()).
void expect_gpu_run(const Result& r, const std::string& no_gpu, const std::string& flags) {
  if (no_gpu.empty()) {
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << flags;
  } else {
    expect_one_line_error(r, no_gpu, flags);
  }
}

// --device / -ngl: a GPU run where there is one, one clear line where there is none (CI), and
// contradictory or malformed choices refused before anything loads.
TEST(Cli, DeviceFlags) {
  const std::string m = " -m " + bf16_model() + " -p hi -n 4 --temp 0";
  const std::string no_gpu = cuda_unavailable_reason();
  for (const char* flags : {"--device cuda", "-ngl 99"})
    expect_gpu_run(run_cera("run" + m + " " + flags), no_gpu, flags);
  const Result contradiction = run_cera("run" + m + " --device cpu -ngl 99");
  EXPECT_EQ(contradiction.exit_code, 1);
  EXPECT_NE(contradiction.err.find("--device cuda"), std::string::npos) << contradiction.err;
  const Result unknown = run_cera("run" + m + " --device tpu");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("tpu"), std::string::npos) << unknown.err;
  expect_one_line_error(run_cera("run" + m + " --device cuda:99"), no_gpu.empty() ? "no CUDA device 99" : no_gpu);
}

// --cache-type-k/-v (llama.cpp's -ctk/-ctv): f32 anywhere, f16 on CUDA; anything else, K and V of
// different types, or f16 on the CPU refused in one line that says what to do.
TEST(Cli, CacheTypeFlags) {
  const std::string m = " -m " + bf16_model() + " -p hi -n 4 --temp 0";
  const Result f32 = run_cera("run" + m + " -ctk f32 -ctv f32");
  EXPECT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_FALSE(f32.out.empty());
  expect_one_line_error(run_cera("run" + m + " -ctk f16"), "--device cuda");
  const Result q8 = run_cera("run" + m + " --cache-type-k q8_0");
  EXPECT_EQ(q8.exit_code, 1);
  EXPECT_NE(q8.err.find("q8_0"), std::string::npos) << q8.err;
  const Result mixed = run_cera("run" + m + " -ctk f32 -ctv f16 --device cuda");
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_NE(mixed.err.find("same type"), std::string::npos) << mixed.err;
  expect_gpu_run(run_cera("run" + m + " --device cuda -ctv f16"), cuda_unavailable_reason(), "--device cuda -ctv f16");
}

TEST(Cli, BadTokenIdIsAClearError) {
  const Result r = run_cera("logits -m " + bf16_model() + " --token-ids 1,2,x -o /tmp/never.safetensors");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'x'"), std::string::npos) << r.err;
  const Result out_of_vocab = run_cera("logits -m " + bf16_model() + " --token-ids 1,99999 -o /tmp/never.safetensors");
  EXPECT_EQ(out_of_vocab.exit_code, 1);
  EXPECT_NE(out_of_vocab.err.find("99999"), std::string::npos) << out_of_vocab.err;
}

// Greedy `run` prints exactly the detokenized greedy continuation on stdout, nothing else.
TEST(Cli, RunStdoutIsOnlyTheGeneratedText) {
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  EngineOptions o;
  o.model_path = bf16_model();
  auto engine = Engine::load(o);
  const std::vector<int32_t> greedy(prompts[0].greedy.begin(), prompts[0].greedy.begin() + 8);
  const Result r = run_cera("run -m " + bf16_model() + " -p 'The capital of France is' -n 8 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, engine->detokenize(greedy) + "\n");
  EXPECT_NE(r.err.find("t/s"), std::string::npos) << "timings go to stderr: " << r.err;
}

TEST(Cli, TokenizePrintsTheFixtureIds) {
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  const Result r = run_cera("tokenize -m " + bf16_model() + " --add-special 'The capital of France is'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), prompts[0].ids);

  const std::string in = ::testing::TempDir() + "/strings.json";
  std::ofstream(in) << R"(["The capital of France is", "Hello world"])";
  const Result many = run_cera("tokenize -m " + bf16_model() + " --add-special --json-input " + in);
  ASSERT_EQ(many.exit_code, 0) << many.err;
  const auto ids = nlohmann::json::parse(many.out);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].get<std::vector<int32_t>>(), prompts[0].ids);
}

TEST(Cli, LogitsWritesEveryPosition) {
  const auto prompts = test::load_fixture_prompts("lfm2-tiny");
  std::string list;
  for (int32_t id : prompts[0].ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const std::string out = ::testing::TempDir() + "/logits.safetensors";
  const Result r = run_cera("logits -m " + bf16_model() + " --token-ids " + list + " --all-positions -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto f = safetensors::File::open(out);
  EXPECT_EQ(f->get("logits").shape, (std::vector<int64_t>{int64_t(prompts[0].ids.size()), 1024}));
  const auto ref = safetensors::File::open(test::fixture_path("models/lfm2-tiny/ref/hf.safetensors"))->get("p0.logits").to_f32();
  const auto ours = f->get("logits").to_f32();
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (ours[i] - ref[i]) * (ours[i] - ref[i]), den += ref[i] * ref[i];
  EXPECT_LE(std::sqrt(num / den), 1e-4);
}

TEST(Cli, InspectShowsMetadataAndTensors) {
  const Result r = run_cera("inspect " + bf16_model());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
}

TEST(Cli, BenchPrintsLlamaBenchRows) {
  const Result r = run_cera("bench -m " + bf16_model() + " -p 16 -n 4 -r 1 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| pp16 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| tg4 |"), std::string::npos) << r.out;
}

// A context past the model's training context runs, with a warning that names both (as llama.cpp).
TEST(Cli, ContextPastTheTrainingContextWarns) {
  Result r = run_cera("run -m " + bf16_model() + " -p hi -n 1 --temp 0 -c 8192");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("context size 8192 is longer than the model's training context (4096 tokens)"),
            std::string::npos)
      << r.err;
  r = run_cera("run -m " + bf16_model() + " -p hi -n 1 --temp 0 -c 4096");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("training context"), std::string::npos) << r.err;
}

// -o json / jsonl / csv as llama-bench: machine-readable rows with what each test ran.
TEST(Cli, BenchWritesJsonJsonlAndCsv) {
  const std::string common = "bench -m " + bf16_model() + " -p 8 -n 2 -d 0,16 -r 2 -t 1";
  Result r = run_cera(common + " -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_EQ(rows[0]["test"], "pp8");
  EXPECT_EQ(rows[0]["n_prompt"], 8);
  EXPECT_EQ(rows[3]["test"], "tg2 @ d16");
  EXPECT_EQ(rows[3]["n_gen"], 2);
  EXPECT_EQ(rows[3]["n_depth"], 16);
  for (const auto& row : rows) {
    EXPECT_EQ(row["samples_ts"].size(), 2u) << row;
    EXPECT_GT(row["avg_ts"].get<double>(), 0.0) << row;
  }
  EXPECT_GT(rows[1]["gb_s"].get<double>(), 0.0) << "decode rows report the weight bytes streamed";

  r = run_cera(common + " -o jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 4u) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["test"], "pp8");

  r = run_cera(common + " -o csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 5u) << r.out;
  EXPECT_EQ(r.out.rfind("model,arch,size_bytes,", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(",\"tg2 @ d16\",0,2,16,1,"), std::string::npos) << r.out;

  r = run_cera(common + " -o xml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("xml"), std::string::npos) << r.err;
}

// -d as in llama-bench: every test again after a context of D tokens, and the context sized for it.
TEST(Cli, BenchAtDepthPrintsARowPerDepth) {
  const Result r = run_cera("bench -m " + bf16_model() + " -p 8 -n 2 -d 0,40 -r 1 -t 1 -c 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* test : {"| pp8 |", "| tg2 |", "| pp8 @ d40 |", "| tg2 @ d40 |"})
    EXPECT_NE(r.out.find(test), std::string::npos) << test << " in " << r.out;
  EXPECT_NE(r.err.find("fills a 40-token context"), std::string::npos) << "the untimed fill is announced: " << r.err;
}

}  // namespace
}  // namespace cera

namespace cera {
namespace {

// `cera tokenize -m DIR` on a folder holding only tokenizer.json + tokenizer_config.json.
TEST(Cli, TokenizeATokenizerOnlyFolder) {
  for (const char* name : {"llama3", "qwen3"}) {
    const std::string dir = test::fixture_path(std::string("tokenizers/") + name);
    const auto cases = nlohmann::json::parse(test::read_text_file(dir + "/cases.json"))["cases"];
    const std::string strings_path = ::testing::TempDir() + "/tok_strings.json";
    nlohmann::json strings = nlohmann::json::array();
    for (const auto& c : cases) strings.push_back(c["text"]);
    std::ofstream(strings_path) << strings.dump();
    // HF tokenizers always match added tokens in text: that is --parse-special.
    const Result r = run_cera("tokenize -m " + dir + " --parse-special --json-input " + strings_path);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ids = nlohmann::json::parse(r.out);
    ASSERT_EQ(ids.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(ids[i], cases[i]["ids"]) << name << ": " << cases[i]["text"];
  }
}

// The documented path from a Hugging Face folder to a benchmarkable quantized GGUF.
TEST(Cli, ConvertThenQuantizeAHuggingFaceFolder) {
  const std::string bf16 = ::testing::TempDir() + "/converted-bf16.gguf";
  const std::string q4 = ::testing::TempDir() + "/converted-q4_0.gguf";
  Result r = run_cera("convert " + test::fixture_path("models/lfm2-tiny/hf") + " -o " + bf16);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_text_file(bf16), test::read_text_file(test::fixture_gguf("lfm2-tiny", "BF16")))
      << "the converted file is byte-identical to llama.cpp's";
  r = run_cera("quantize " + bf16 + " " + q4 + " Q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cera("run -m " + q4 + " -p 'The capital of France is' -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_cera("quantize " + bf16 + " /tmp/never.gguf Q9_X");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Q9_X"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cera
