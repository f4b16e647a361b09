#include "support/fixture_models.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "format/quant.h"
#include "support/fixtures.h"

namespace cera::test {

std::vector<FixturePrompt> load_fixture_prompts(const std::string& model) {
  auto j = nlohmann::json::parse(read_text_file(fixture_path("models/" + model + "/ref/prompts.json")));
  std::vector<FixturePrompt> out;
  for (const auto& p : j["prompts"])
    out.push_back({p["ids"].get<std::vector<int32_t>>(), p["greedy"].get<std::vector<int32_t>>()});
  return out;
}

std::string fixture_gguf(const std::string& model, const std::string& type) {
  return fixture_path("models/" + model + "/gguf/" + model + "-" + type + ".gguf");
}

std::string dequantized_f32_copy(const std::string& path) {
  const auto src = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [key, value] : src->metadata()) w.set(key, value);
  for (const auto& t : src->tensors()) {
    std::vector<float> values(size_t(t.n_elements()));
    for (int64_t r = 0; r < t.n_rows(); ++r)
      quant::dequantize_row_ref(t.type, t.data + size_t(r) * t.row_bytes(), values.data() + r * t.ne[0], t.ne[0]);
    w.add_tensor(t.name, GgmlType::F32, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), values.data(),
                 values.size() * sizeof(float));
  }
  const std::string out = ::testing::TempDir() + "/" + std::filesystem::path(path).stem().string() + "-dequantized-f32.gguf";
  w.write(out);
  return out;
}

}  // namespace cera::test
