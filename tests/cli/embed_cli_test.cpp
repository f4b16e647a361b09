// `cera embed`: JSON shape, mean pooling = the mean of the per-token rows, --normalize.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "support/fixture_models.h"

namespace cera {
namespace {

nlohmann::json run_embed(const std::string& args, int* exit_code = nullptr) {
  const std::string cmd = std::string(CERA_CLI_PATH) + " embed -m " + test::fixture_gguf("lfm2-tiny", "BF16") +
                          " -t 2 " + args + " 2>/dev/null";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 65536> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (exit_code) *exit_code = rc;
  if (rc != 0) return nullptr;
  return nlohmann::json::parse(out);
}

TEST(CliEmbed, MeanPoolingIsTheMeanOfTheTokenRows) {
  const nlohmann::json rows = run_embed("-p 'The capital of France is' --pooling none");
  const nlohmann::json mean = run_embed("-p 'The capital of France is'");
  ASSERT_TRUE(rows.is_object() && mean.is_object());
  const size_t d = rows["n_embd"].get<size_t>();
  ASSERT_EQ(rows["n_tokens"].get<size_t>(), 12u);  // the fixture's ids for this prompt (BOS included)
  ASSERT_EQ(rows["tokens"].size(), 12u);
  EXPECT_EQ(rows["tokens"][0]["token"].get<int>(), 1);
  ASSERT_EQ(mean["embedding"].size(), d);
  for (size_t j = 0; j < d; ++j) {
    double acc = 0;
    for (const auto& r : rows["tokens"]) {
      ASSERT_EQ(r["embedding"].size(), d);
      acc += r["embedding"][j].get<double>();
    }
    acc /= 12;
    EXPECT_NEAR(mean["embedding"][j].get<double>(), acc, 1e-5 * (1 + std::fabs(acc))) << j;
  }
}

TEST(CliEmbed, NormalizeGivesUnitVectorsInTheSameDirection) {
  const nlohmann::json raw = run_embed("-p 'hello world'");
  const nlohmann::json unit = run_embed("-p 'hello world' --normalize");
  ASSERT_TRUE(raw.is_object() && unit.is_object());
  double norm2 = 0, raw2 = 0;
  for (const auto& v : unit["embedding"]) norm2 += v.get<double>() * v.get<double>();
  for (const auto& v : raw["embedding"]) raw2 += v.get<double>() * v.get<double>();
  EXPECT_NEAR(norm2, 1.0, 1e-5);
  const double scale = std::sqrt(raw2);
  for (size_t j = 0; j < unit["embedding"].size(); ++j)
    EXPECT_NEAR(unit["embedding"][j].get<double>() * scale, raw["embedding"][j].get<double>(), 1e-4);
}

TEST(CliEmbed, BadPoolingIsAnError) {
  int rc = 0;
  run_embed("-p x --pooling max", &rc);
  EXPECT_NE(rc, 0);
}

}  // namespace
}  // namespace cera
