// Round trip: quantize lfm2-tiny-BF16.gguf with `cera quantize`'s code to each fixture type, load
// the result through the public API, and hold its logits to both fixture criteria for quantized
// files: rel_rms vs the Hugging Face float32 reference ≤ 1.1 × llama.cpp's own (+0.002), and
// rel_rms vs llama.cpp's logits on its file ≤ 0.5 × llama.cpp's own. The second holds because our
// quantizers write the same bytes as llama-quantize (tests/format/quant_llamacpp_bytes_test.cpp
// proves that for every type here), so only the two engines' arithmetic differs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cera/engine.h"
#include "format/quantize_model.h"
#include "format/safetensors.h"
#include "support/fixtures.h"
#include "support/logits.h"

namespace cera {
namespace {

struct Case {
  const char* type;
  double llamacpp_rel_rms;  // llama.cpp's error vs HF on its own file (fixtures README table)
};

const Case kCases[] = {
    {"Q8_0", 6.25e-2}, {"Q6_K", 0.160},   {"Q5_K_M", 0.275}, {"Q5_0", 0.299}, {"Q5_1", 0.299},
    {"Q4_K_M", 0.476}, {"Q4_0", 0.556},   {"Q4_1", 0.513},   {"Q3_K_M", 0.808}, {"Q2_K", 1.137},
};

class QuantizeParity : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeParity, LogitsWithinFixtureBound) {
  const Case c = GetParam();
  const auto dir = std::filesystem::temp_directory_path() / ("cera_qparity_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (std::string(c.type) + ".gguf")).string();

  quant::QuantizeOptions qo;
  qo.mix = *quant::mix_from_name(c.type);
  quantize_model(test::fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-BF16.gguf"), path, qo);

  EngineOptions o;
  o.model_path = path;
  o.n_ctx = 512;
  auto engine = Engine::load(o);
  const auto hf = safetensors::File::open(test::fixture_path("models/lfm2-tiny/ref/hf.safetensors"));
  std::string lc_name = "models/lfm2-tiny/ref/llamacpp-";
  lc_name.append(c.type).append(".safetensors");
  const auto lc = safetensors::File::open(test::fixture_path(lc_name));
  const auto prompts =
      nlohmann::json::parse(test::read_text_file(test::fixture_path("models/lfm2-tiny/ref/prompts.json")))["prompts"];
  ASSERT_FALSE(prompts.empty());
  test::RelRms vs_hf, vs_llamacpp;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::string name = "p";  // (not "p" + ...: GCC 12 warns falsely, -Wrestrict bug 105329)
    name.append(std::to_string(i)).append(".logits");
    auto session = engine->new_session();
    session->append(prompts[i]["ids"].get<std::vector<int32_t>>(), /*all_logits=*/true);
    const auto ours = session->logits();
    const auto ref = hf->get(name).to_f32();
    ASSERT_EQ(ours.size(), ref.size()) << name;
    vs_hf.add(ours, ref);
    vs_llamacpp.add(ours, lc->get(name).to_f32());
  }
  engine.reset();
  std::filesystem::remove_all(dir);
  RecordProperty("rel_rms_vs_hf", std::to_string(vs_hf.value()));
  std::printf("[ %-6s ] ours vs HF %.3e (llama.cpp's file: %.3e), ours vs llama.cpp %.3e\n", c.type, vs_hf.value(),
              c.llamacpp_rel_rms, vs_llamacpp.value());
  EXPECT_LE(vs_hf.value(), 1.1 * c.llamacpp_rel_rms + 0.002);
  // Q8_0: the known deviation documented in fixture_parity_test.cpp — with 8-bit weights nearly all
  // of the error is the rounding of activations, where ours and llama.cpp's only partly agree — so
  // the same 0.7 × bound as there (the weight bytes are identical all the same).
  const double factor = std::string(c.type) == "Q8_0" ? 0.7 : 0.5;
  EXPECT_LE(vs_llamacpp.value(), factor * c.llamacpp_rel_rms);
}

INSTANTIATE_TEST_SUITE_P(Lfm2Tiny, QuantizeParity, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.type); });

}  // namespace
}  // namespace cera
