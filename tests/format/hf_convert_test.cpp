// `cera convert` against llama.cpp's convert_hf_to_gguf.py: the lfm2-tiny fixture GGUFs were written
// by it from hf/, so converting that folder must reproduce them byte for byte. The dense fixtures
// ship no weights, so their HF folder is rebuilt from the BF16 GGUF (inverse Q/K permutation for
// llama) and converted back. Plus the error paths a user can hit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cera/error.h"
#include "common/fp16.h"
#include "format/gguf.h"
#include "format/hf/hf_convert.h"
#include "format/hf/hf_general.h"
#include "format/quant.h"
#include "format/safetensors.h"
#include "support/fixtures.h"

namespace cera {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Same keys with the same type and value (order aside), same tensors (name, type, shape, bytes).
void expect_same_gguf(const gguf::File& ours, const gguf::File& ref) {
  EXPECT_EQ(ours.metadata().size(), ref.metadata().size());
  for (const auto& [key, v] : ref.metadata()) {
    const gguf::Value* o = ours.find(key);
    if (!o) { ADD_FAILURE() << "missing key " << key; continue; }
    EXPECT_EQ(o->type, v.type) << key;
    EXPECT_EQ(o->elem_type, v.elem_type) << key;
    EXPECT_TRUE(o->data == v.data) << key << ": ours " << o->to_display_string() << ", llama.cpp " << v.to_display_string();
  }
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const auto& r = ref.tensors()[i];
    const auto& o = ours.tensors()[i];
    EXPECT_EQ(o.name, r.name) << "tensor #" << i;
    EXPECT_EQ(o.type, r.type) << r.name;
    EXPECT_EQ(o.n_dims, r.n_dims) << r.name;
    EXPECT_EQ(o.ne, r.ne) << r.name;
    ASSERT_EQ(o.nbytes, r.nbytes) << r.name;
    EXPECT_EQ(0, std::memcmp(o.data, r.data, r.nbytes)) << r.name << " differs";
  }
}

class Lfm2Convert : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(Lfm2Convert, MatchesLlamaCppByteForByte) {
  const auto [type, file] = GetParam();
  const auto bytes = hf::convert(test::fixture_path("models/lfm2-tiny/hf"), hf::parse_out_type(type)).to_bytes();
  const std::string ref_path = test::fixture_path(std::string("models/lfm2-tiny/gguf/lfm2-tiny-") + file + ".gguf");
  auto ours = gguf::File::open_memory(bytes.data(), bytes.size(), "converted");
  auto ref = gguf::File::open(ref_path);
  expect_same_gguf(*ours, *ref);
  EXPECT_TRUE(bytes == read_bytes(ref_path)) << "whole file differs from " << ref_path;
}

INSTANTIATE_TEST_SUITE_P(Types, Lfm2Convert,
                         ::testing::Values(std::pair{"bf16", "BF16"}, std::pair{"f16", "F16"}, std::pair{"q8_0", "Q8_0"}));

// A scratch folder under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("cera-hf-test-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// GGUF name -> HF name for the dense families (the inverse of the converter's mapping).
std::string hf_name(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  static const std::map<std::string, std::string> layer = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},       {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},       {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},        {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  const size_t dot = g.find('.', 4);
  return "model.layers." + g.substr(4, dot - 4) + "." + layer.at(g.substr(dot + 1));
}

// Undoes LlamaModel.permute: HF row (h, j*d/2 + i) = GGUF row (h, 2i + j).
std::vector<float> unpermute(const std::vector<float>& x, int64_t rows, int64_t n_head) {
  const int64_t cols = int64_t(x.size()) / rows, d = rows / n_head;
  std::vector<float> out(x.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(&x[size_t((h * d + 2 * i + j) * cols)], cols, &out[size_t((h * d + j * (d / 2) + i) * cols)]);
  return out;
}

// Rebuilds <model>/hf with BF16 weights taken from the fixture BF16 GGUF.
void build_hf_folder(const std::string& model, const std::string& dir, int64_t n_head, int64_t n_head_kv, bool permuted) {
  const std::string src = test::fixture_path("models/" + model + "/hf");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"})
    fs::copy_file(src + "/" + f, dir + "/" + f);
  auto ref = gguf::File::open(test::fixture_path("models/" + model + "/gguf/" + model + "-BF16.gguf"));
  safetensors::Writer w;
  for (const auto& t : ref->tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // generated by the converter, not stored in HF
    std::vector<float> x(size_t(t.n_elements()));
    quant::dequantize_row_ref(t.type, t.data, x.data(), t.n_elements());
    std::vector<int64_t> shape;
    for (int i = t.n_dims - 1; i >= 0; --i) shape.push_back(t.ne[size_t(i)]);
    const std::string name = hf_name(t.name);
    if (permuted && name.ends_with("q_proj.weight")) x = unpermute(x, shape[0], n_head);
    if (permuted && name.ends_with("k_proj.weight")) x = unpermute(x, shape[0], n_head_kv);
    std::vector<uint16_t> bf(x.size());
    for (size_t i = 0; i < x.size(); ++i) bf[i] = f32_to_bf16(x[i]);
    w.add(name, safetensors::Dtype::BF16, shape, bf.data(), bf.size() * 2);
  }
  w.set_metadata("format", "pt");
  w.write(dir + "/model.safetensors");
}

struct DenseCase {
  const char* model;
  int64_t n_head, n_head_kv;
  bool permuted;
};

class DenseConvert : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseConvert, RebuiltFolderConvertsBackToTheFixture) {
  const auto c = GetParam();
  // The folder must be named hf/ like the fixture's: llama.cpp derives general.name from it.
  TempDir tmp(c.model);
  const std::string dir = tmp.str() + "/hf";
  fs::create_directories(dir);
  build_hf_folder(c.model, dir, c.n_head, c.n_head_kv, c.permuted);
  const auto bytes = hf::convert(dir, hf::OutType::kBF16).to_bytes();
  const std::string ref_path = test::fixture_path(std::string("models/") + c.model + "/gguf/" + c.model + "-BF16.gguf");
  auto ours = gguf::File::open_memory(bytes.data(), bytes.size(), "converted");
  auto ref = gguf::File::open(ref_path);
  expect_same_gguf(*ours, *ref);
  EXPECT_TRUE(bytes == read_bytes(ref_path)) << "whole file differs from " << ref_path;
}

INSTANTIATE_TEST_SUITE_P(Families, DenseConvert,
                         ::testing::Values(DenseCase{"llama-tiny", 4, 2, true}, DenseCase{"qwen2-tiny", 4, 2, false},
                                           DenseCase{"qwen3-tiny", 4, 2, false}),
                         [](const auto& info) { return std::string(info.param.model).substr(0, 5); });

// Runs convert and returns the cera::Error message (fails the test when nothing is thrown).
std::string convert_error(const std::string& dir) {
  try {
    hf::convert(dir, hf::OutType::kBF16);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "convert(" << dir << ") did not throw";
  return {};
}

void copy_lfm2_folder(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(test::fixture_path("models/lfm2-tiny/hf")))
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
}

TEST(HfConvertErrors, FolderWithoutConfig) {
  TempDir tmp("noconfig");
  EXPECT_NE(convert_error(tmp.str()).find("no config.json"), std::string::npos);
}

TEST(HfConvertErrors, UnknownArchitectureIsNamed) {
  TempDir tmp("arch");
  std::ofstream(tmp.str() + "/config.json") << R"({"architectures": ["FancyNetForCausalLM"], "num_hidden_layers": 2})";
  EXPECT_NE(convert_error(tmp.str()).find("FancyNetForCausalLM"), std::string::npos);
}

TEST(HfConvertErrors, MissingTensorIsNamed) {
  TempDir tmp("missing");
  copy_lfm2_folder(tmp.str());
  // Rewrite the weights without one layer-3 tensor.
  auto st = safetensors::File::open(test::fixture_path("models/lfm2-tiny/hf/model.safetensors"));
  safetensors::Writer w;
  for (const auto& t : st->tensors())
    if (t.name != "model.layers.3.feed_forward.w2.weight") w.add(t.name, t.dtype, t.shape, t.data, t.nbytes);
  fs::remove(tmp.str() + "/model.safetensors");
  w.write(tmp.str() + "/model.safetensors");
  EXPECT_NE(convert_error(tmp.str()).find("model.layers.3.feed_forward.w2.weight"), std::string::npos);
}

TEST(HfConvertErrors, ShardedIndexPointingToMissingFile) {
  TempDir tmp("shards");
  copy_lfm2_folder(tmp.str());
  fs::rename(tmp.path / "model.safetensors", tmp.path / "model-00001-of-00002.safetensors");
  auto st = safetensors::File::open(tmp.str() + "/model-00001-of-00002.safetensors");
  std::string map;
  for (const auto& t : st->tensors()) map += (map.empty() ? "" : ",") + ("\"" + t.name + "\": \"model-00001-of-00002.safetensors\"");
  map += ", \"model.extra.weight\": \"model-00002-of-00002.safetensors\"";
  std::ofstream(tmp.str() + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << map << "}}";
  EXPECT_NE(convert_error(tmp.str()).find("model-00002-of-00002.safetensors"), std::string::npos);
}

TEST(HfConvert, ShardedFolderGivesTheSameFile) {
  // Split lfm2-tiny into two shards with an index: the result must not change.
  TempDir tmp("split");
  copy_lfm2_folder(tmp.str());
  fs::remove(tmp.path / "model.safetensors");
  auto st = safetensors::File::open(test::fixture_path("models/lfm2-tiny/hf/model.safetensors"));
  safetensors::Writer a, b;
  std::string map;
  for (size_t i = 0; i < st->tensors().size(); ++i) {
    const auto& t = st->tensors()[i];
    const bool first = t.name < "model.layers.3";
    (first ? a : b).add(t.name, t.dtype, t.shape, t.data, t.nbytes);
    map += (map.empty() ? "" : ",") + ("\"" + t.name + "\": \"model-0000" + (first ? "1" : "2") + "-of-00002.safetensors\"");
  }
  a.write(tmp.str() + "/model-00001-of-00002.safetensors");
  b.write(tmp.str() + "/model-00002-of-00002.safetensors");
  std::ofstream(tmp.str() + "/model.safetensors.index.json") << "{\"weight_map\": {" << map << "}}";
  const auto ours = hf::convert(tmp.str(), hf::OutType::kBF16).to_bytes();
  const auto ref = hf::convert(test::fixture_path("models/lfm2-tiny/hf"), hf::OutType::kBF16).to_bytes();
  // general.name comes from the folder name, so compare everything but that key.
  auto o = gguf::File::open_memory(ours.data(), ours.size(), "sharded");
  auto r = gguf::File::open_memory(ref.data(), ref.size(), "single");
  ASSERT_EQ(o->tensors().size(), r->tensors().size());
  for (size_t i = 0; i < r->tensors().size(); ++i) {
    EXPECT_EQ(o->tensors()[i].name, r->tensors()[i].name);
    ASSERT_EQ(o->tensors()[i].nbytes, r->tensors()[i].nbytes);
    EXPECT_EQ(0, std::memcmp(o->tensors()[i].data, r->tensors()[i].data, r->tensors()[i].nbytes));
  }
}

TEST(HfGeneral, NamesAndSizeLabelsAsTheConverterWrites) {
  EXPECT_EQ(hf::id_to_title("hf"), "Hf");
  EXPECT_EQ(hf::id_to_title("lfm2-tiny"), "Lfm2 Tiny");
  EXPECT_EQ(hf::id_to_title("LFM2-350M"), "LFM2 350M");
  EXPECT_EQ(hf::id_to_title("qwen3-v1.5"), "Qwen3 v1.5");
  EXPECT_EQ(hf::size_label(4069632), "4.1M");
  EXPECT_EQ(hf::size_label(354483968), "354M");
  EXPECT_EQ(hf::size_label(1170340608), "1.2B");
  EXPECT_EQ(hf::size_label(999), "1.0K");
}

}  // namespace
}  // namespace cera
