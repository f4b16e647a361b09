// quantize_model: output files have llama-quantize's per-tensor types for every fixture type,
// carry the source metadata, hold values close to the source, and every failure is a clear error
// that leaves no output behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "format/gguf.h"
#include "format/quant.h"
#include "format/quantize_model.h"
#include "format/gguf_test_util.h"

namespace cera::quant {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("cera_quantize_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string lfm2(const std::string& type) {
  return test::fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-" + type + ".gguf");
}

std::vector<float> dequantize(const gguf::TensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  for (int64_t r = 0; r < t.n_rows(); ++r)
    dequantize_row_ref(t.type, t.data + size_t(r) * t.row_bytes(), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

// Worst per-tensor relative RMS error a mix may add to a unit-variance random weight (the plan
// gives some tensors more bits; this bounds the base type).
double max_tensor_error(const std::string& type) {
  if (type == "Q8_0") return 0.01;
  if (type == "Q6_K") return 0.03;
  if (type.rfind("Q5", 0) == 0) return 0.06;
  if (type.rfind("Q4", 0) == 0) return 0.12;
  if (type.rfind("Q3", 0) == 0) return 0.25;
  return 0.45;  // Q2_K
}

class QuantizeFixtureType : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantizeFixtureType, SameTypesAsLlamaQuantizeAndCloseValues) {
  const std::string type = GetParam();
  TempDir dir;
  const std::string out_path = dir.file(type + ".gguf");
  QuantizeOptions o;
  o.mix = *mix_from_name(type);
  o.n_threads = 2;
  uint64_t last_done = 0, total = 0;
  size_t calls = 0;
  o.on_progress = [&](const QuantizeProgress& p) {
    EXPECT_GE(p.elements_done, last_done);  // monotonic
    last_done = p.elements_done;
    total = p.elements_total;
    ++calls;
  };
  std::vector<std::string> warnings;
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const QuantizeReport r = quantize_model(lfm2("BF16"), out_path, o);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_GT(calls, 56u);
  EXPECT_EQ(last_done, total);
  EXPECT_FALSE(fs::exists(out_path + ".part"));

  const auto src = gguf::File::open(lfm2("BF16"));
  const auto ref = gguf::File::open(lfm2(type));
  const auto out = gguf::File::open(out_path);
  EXPECT_EQ(r.output_bytes, out->file_size());
  EXPECT_EQ(r.input_bytes, src->file_size());
  ASSERT_EQ(out->tensors().size(), src->tensors().size());
  // llama-quantize lays tensors out in another order, so sizes match up to padding only.
  EXPECT_NEAR(double(out->file_size()), double(ref->file_size()), 32.0 * 64) << "file size vs llama-quantize";
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const auto& s = src->tensors()[i];
    const auto& o_t = out->tensors()[i];
    SCOPED_TRACE(s.name);
    ASSERT_EQ(o_t.name, s.name);
    EXPECT_EQ(ggml_type_name(o_t.type), ggml_type_name(ref->tensor(s.name).type));
    EXPECT_EQ(o_t.ne, s.ne);
    EXPECT_EQ(r.types[i], o_t.type);
    if (o_t.type == s.type) {
      EXPECT_EQ(0, std::memcmp(o_t.data, s.data, s.nbytes)) << "copied tensors are byte-identical";
    } else {
      EXPECT_LE(rel_rms(dequantize(o_t), dequantize(s)), max_tensor_error(type));
    }
  }
  // Metadata: the source's, with the mix's file type.
  EXPECT_EQ(out->get_int("general.file_type"), int64_t(*mix_from_name(type)));
  EXPECT_EQ(out->get_int("general.file_type"), ref->get_int("general.file_type"));
  EXPECT_EQ(out->get_int("general.quantization_version"), 2);
  for (const auto& [key, value] : src->metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version") continue;
    const auto* v = out->find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->to_display_string(1000000), value.to_display_string(1000000)) << key;
    EXPECT_EQ(v->type, value.type) << key;
  }
  EXPECT_EQ(out->metadata().size(), src->metadata().size() + (src->has("general.quantization_version") ? 0 : 1));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizeFixtureType,
                         ::testing::Values("Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q5_1", "Q4_K_M", "Q4_0", "Q4_1",
                                           "Q3_K_M", "Q2_K"),
                         [](const auto& info) { return std::string(info.param); });

TEST(QuantizeModel, ThreadCountDoesNotChangeTheOutput) {
  TempDir dir;
  QuantizeOptions o;
  o.mix = Mix::Q4_K_M;
  o.n_threads = 1;
  quantize_model(lfm2("BF16"), dir.file("a.gguf"), o);
  o.n_threads = 3;
  quantize_model(lfm2("BF16"), dir.file("b.gguf"), o);
  EXPECT_EQ(test::read_binary_file(dir.file("a.gguf")), test::read_binary_file(dir.file("b.gguf")));
}

TEST(QuantizeModel, F16SourceGivesTheSameTypes) {
  TempDir dir;
  QuantizeOptions o;
  o.mix = Mix::Q5_K_M;
  quantize_model(lfm2("F16"), dir.file("q.gguf"), o);
  const auto out = gguf::File::open(dir.file("q.gguf"));
  const auto ref = gguf::File::open(lfm2("Q5_K_M"));
  for (const auto& t : out->tensors()) EXPECT_EQ(t.type, ref->tensor(t.name).type) << t.name;
}

TEST(QuantizeModel, PureAndFloatTargets) {
  TempDir dir;
  QuantizeOptions o;
  o.mix = Mix::Q4_K_M;
  o.pure = true;
  quantize_model(lfm2("BF16"), dir.file("pure.gguf"), o);
  const auto pure = gguf::File::open(dir.file("pure.gguf"));
  for (const auto& t : pure->tensors())
    EXPECT_EQ(t.type, is_quantizable({t.name, t.n_dims, t.ne, t.type}) ? GgmlType::Q4_K : GgmlType::F32) << t.name;

  o.mix = Mix::F32;
  o.pure = false;
  quantize_model(lfm2("BF16"), dir.file("f32.gguf"), o);
  const auto src = gguf::File::open(lfm2("BF16"));
  const auto f32 = gguf::File::open(dir.file("f32.gguf"));
  EXPECT_EQ(f32->get_int("general.file_type"), 0);
  for (const auto& t : f32->tensors()) {
    ASSERT_EQ(t.type, GgmlType::F32) << t.name;
    EXPECT_EQ(dequantize(t), dequantize(src->tensor(t.name))) << t.name << ": BF16 -> F32 is exact";
  }
}

TEST(QuantizeModel, RequantizingNeedsTheFlag) {
  TempDir dir;
  const std::string out = dir.file("re.gguf");
  QuantizeOptions o;
  o.mix = Mix::Q4_0;
  test::expect_error([&] { quantize_model(lfm2("Q8_0"), out, o); }, ErrorCode::InvalidArgument,
                     {"already quantized", "q8_0", "--allow-requantize", "token_embd.weight"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".part"));

  o.allow_requantize = true;
  std::vector<std::string> warnings;
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const auto r = quantize_model(lfm2("Q8_0"), out, o);
  EXPECT_EQ(r.n_requantized, 35u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("requantized"), std::string::npos) << warnings[0];
  const auto f = gguf::File::open(out);
  const auto ref = gguf::File::open(lfm2("Q4_0"));
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, ref->tensor(t.name).type) << t.name;
}

TEST(QuantizeModel, MissingInputAndOverwritingTheInput) {
  TempDir dir;
  QuantizeOptions o;
  test::expect_error([&] { quantize_model(dir.file("nope.gguf"), dir.file("out.gguf"), o); }, ErrorCode::NotFound,
                     {"nope.gguf"});
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
  fs::copy_file(lfm2("BF16"), dir.file("in.gguf"));
  test::expect_error([&] { quantize_model(dir.file("in.gguf"), dir.file("in.gguf"), o); },
                     ErrorCode::InvalidArgument, {"overwrite the input"});
  EXPECT_EQ(fs::file_size(dir.file("in.gguf")), fs::file_size(lfm2("BF16")));
}

// A two-tensor model written with gguf::Writer.
void write_model(const std::string& path, GgmlType type, const std::vector<float>& weights, int64_t ne0) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  std::vector<uint8_t> data(ggml_row_bytes(type, ne0) * (weights.size() / size_t(ne0)));
  for (size_t r = 0; r < weights.size() / size_t(ne0); ++r)
    quantize_row_ref(type, weights.data() + r * size_t(ne0), data.data() + r * ggml_row_bytes(type, ne0), ne0);
  w.add_tensor("blk.0.attn_q.weight", type, {ne0, int64_t(weights.size()) / ne0}, data.data(), data.size());
  std::vector<float> norm(size_t(ne0), 1.0f);
  w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {ne0}, norm.data(), norm.size() * 4);
  w.write(path);
}

TEST(QuantizeModel, NonFiniteWeightsAreRejected) {
  TempDir dir;
  std::vector<float> w(256 * 4, 0.5f);
  w[300] = NAN;
  write_model(dir.file("nan.gguf"), GgmlType::F32, w, 256);
  QuantizeOptions o;
  o.mix = Mix::Q4_K_M;
  test::expect_error([&] { quantize_model(dir.file("nan.gguf"), dir.file("out.gguf"), o); }, ErrorCode::BadFormat,
                     {"blk.0.attn_q.weight", "row 1", "non-finite"});
  EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
  EXPECT_FALSE(fs::exists(dir.file("out.gguf.part")));
}

TEST(QuantizeModel, F32SourceAndFallbackWarning) {
  TempDir dir;
  std::vector<float> w(96 * 8);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 0.37f);
  write_model(dir.file("f32.gguf"), GgmlType::F32, w, 96);  // 96: not a multiple of 256
  QuantizeOptions o;
  o.mix = Mix::Q6_K;
  std::vector<std::string> warnings;
  o.on_warning = [&](const std::string& msg) { warnings.push_back(msg); };
  const auto r = quantize_model(dir.file("f32.gguf"), dir.file("q.gguf"), o);
  EXPECT_EQ(r.n_fallback, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("blk.0.attn_q.weight"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("q8_0"), std::string::npos) << warnings[0];
  const auto f = gguf::File::open(dir.file("q.gguf"));
  const auto& q = f->tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.type, GgmlType::Q8_0);
  EXPECT_LE(rel_rms(dequantize(q), w), 0.01);
  EXPECT_EQ(f->tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
}

TEST(QuantizeModel, UnconvertibleSourceType) {
  // An I32 "weight" the plan would quantize: there is no way to read it as numbers to quantize.
  TempDir dir;
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  std::vector<int32_t> ids(256 * 2, 1);
  w.add_tensor("blk.0.attn_q.weight", GgmlType::I32, {256, 2}, ids.data(), ids.size() * 4);
  w.write(dir.file("i32.gguf"));
  QuantizeOptions o;
  o.mix = Mix::Q8_0;
  test::expect_error([&] { quantize_model(dir.file("i32.gguf"), dir.file("out.gguf"), o); }, ErrorCode::Unsupported,
                     {"blk.0.attn_q.weight", "i32", "cannot be converted"});
}

}  // namespace
}  // namespace cera::quant
