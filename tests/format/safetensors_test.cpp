// Safetensors: the reference fixtures, a writer -> reader round trip, one crafted header per
// validation rule, and truncation / header-mutation fuzzing.
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "common/fp16.h"

#include "format/gguf.h"
#include "format/gguf_test_util.h"

namespace cera::test {
namespace {

using safetensors::Dtype;
using safetensors::File;
using safetensors::Writer;

std::vector<int32_t> ints(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(Safetensors, ReadsReferenceLogits) {
  auto f = File::open(fixture_path("models/lfm2-tiny/ref/hf.safetensors"));
  const auto prompts = nlohmann::json::parse(read_text_file(fixture_path("models/lfm2-tiny/ref/prompts.json")));
  const size_t n_prompts = prompts["prompts"].size();
  ASSERT_GT(n_prompts, 0u);
  EXPECT_EQ(f->tensors().size(), 3 * n_prompts);
  for (size_t i = 0; i < n_prompts; ++i) {
    SCOPED_TRACE(i);
    const std::string p = "p" + std::to_string(i);
    const auto expected_ids = ints(prompts["prompts"][i]["ids"]);
    const int64_t T = int64_t(expected_ids.size());
    const auto& logits = f->get(p + ".logits");
    EXPECT_EQ(logits.dtype, Dtype::F32);
    EXPECT_EQ(logits.shape, (std::vector<int64_t>{T, 1024}));
    EXPECT_EQ(logits.nbytes, size_t(T) * 1024 * 4);
    const auto values = logits.to_f32();
    ASSERT_EQ(values.size(), size_t(T) * 1024);
    for (float v : values) ASSERT_TRUE(std::isfinite(v));
    const auto& ids = f->get(p + ".ids");
    EXPECT_EQ(ids.dtype, Dtype::I32);
    EXPECT_EQ(ids.shape, (std::vector<int64_t>{T}));
    EXPECT_EQ(ids.to_i32(), expected_ids);
    EXPECT_EQ(f->get(p + ".greedy").to_i32(), ints(prompts["prompts"][i]["greedy"]));
  }
  for (size_t i = 1; i < f->tensors().size(); ++i)  // file order
    EXPECT_LT(f->tensors()[i - 1].data, f->tensors()[i].data);
  EXPECT_EQ(f->find("p0.nothing"), nullptr);
  expect_error([&] { f->get("p0.nothing"); }, ErrorCode::NotFound, {"hf.safetensors", "p0.nothing"});
  expect_error([&] { f->get("p0.ids").to_f32(); }, ErrorCode::BadFormat, {"p0.ids", "I32"});
  expect_error([&] { f->get("p0.logits").to_i32(); }, ErrorCode::BadFormat, {"p0.logits", "F32"});
}

TEST(Safetensors, HfWeightsMatchTheBf16Gguf) {
  auto st = File::open(fixture_path("models/lfm2-tiny/hf/model.safetensors"));
  EXPECT_EQ(st->metadata().at("format"), "pt");
  const auto& emb = st->get("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype, Dtype::BF16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{1024, 256}));
  auto gg = gguf::File::open(fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-BF16.gguf"));
  const auto& tok = gg->tensor("token_embd.weight");
  ASSERT_EQ(tok.nbytes, emb.nbytes);
  EXPECT_EQ(std::memcmp(tok.data, emb.data, emb.nbytes), 0);  // the same bf16 weights
  const auto f32 = emb.to_f32();
  uint16_t raw;
  std::memcpy(&raw, emb.data + 2 * 1000, 2);
  EXPECT_EQ(f32[1000], bf16_to_f32(raw));
}

std::vector<uint8_t> sample_file() {
  Writer w;
  const float f32[6] = {1, -2, 3.5f, 0, 1e30f, -0.0f};
  w.add_f32("b.f32", {2, 3}, f32);
  const double f64[2] = {0.1, -2.5e10};
  w.add("f64", Dtype::F64, {2}, f64, sizeof f64);
  const uint16_t f16[3] = {0x3c00, 0xc000, 0x7c00};  // 1, -2, inf
  w.add("f16", Dtype::F16, {3}, f16, sizeof f16);
  const uint16_t bf16[2] = {0x3f80, 0x4049};  // 1, 3.140625
  w.add("bf16", Dtype::BF16, {1, 2}, bf16, sizeof bf16);
  const int64_t i64[2] = {-5, 2147483647};
  w.add("i64", Dtype::I64, {2}, i64, sizeof i64);
  const int32_t i32[1] = {-7};
  w.add("i32", Dtype::I32, {}, i32, sizeof i32);  // a scalar
  const int16_t i16[2] = {-32768, 12};
  w.add("i16", Dtype::I16, {2}, i16, sizeof i16);
  const int8_t i8[3] = {-128, 0, 127};
  w.add("i8", Dtype::I8, {3}, i8, sizeof i8);
  const uint8_t u8[1] = {255};
  w.add("u8", Dtype::U8, {1}, u8, 1);
  const uint8_t flags[3] = {1, 0, 1};
  w.add("flags", Dtype::BOOL, {3}, flags, 3);
  w.add("a.empty", Dtype::F32, {0, 4}, nullptr, 0);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcode \"quoted\"");
  return w.to_bytes();
}

TEST(Safetensors, WriterRoundTrip) {
  const auto bytes = sample_file();
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  EXPECT_NO_THROW(nlohmann::json::parse(header));  // trailing spaces are valid JSON whitespace
  EXPECT_EQ(header.front(), '{');

  auto f = File::open_memory(bytes.data(), bytes.size(), "sample.safetensors");
  EXPECT_EQ(f->tensors().size(), 11u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "ünïcode \"quoted\"");
  for (const auto& t : f->tensors()) {  // larger dtypes first keeps every tensor naturally aligned
    EXPECT_EQ(size_t(t.data - (bytes.data() + 8 + header_len)) % safetensors::dtype_size(t.dtype), 0u) << t.name;
    EXPECT_EQ(t.nbytes, size_t(t.n_elements()) * safetensors::dtype_size(t.dtype)) << t.name;
  }
  EXPECT_EQ(f->tensors().front().name, "f64");
  EXPECT_EQ(f->get("b.f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f->get("b.f32").to_f32(), (std::vector<float>{1, -2, 3.5f, 0, 1e30f, -0.0f}));
  EXPECT_EQ(f->get("f64").to_f32(), (std::vector<float>{0.1f, -2.5e10f}));
  EXPECT_EQ(f->get("f16").to_f32(), (std::vector<float>{1, -2, INFINITY}));
  EXPECT_EQ(f->get("bf16").to_f32(), (std::vector<float>{1, 3.140625f}));
  EXPECT_EQ(f->get("i64").to_i32(), (std::vector<int32_t>{-5, 2147483647}));
  EXPECT_EQ(f->get("i32").shape, std::vector<int64_t>{});
  EXPECT_EQ(f->get("i32").n_elements(), 1);
  EXPECT_EQ(f->get("i32").to_i32(), (std::vector<int32_t>{-7}));
  EXPECT_EQ(f->get("i16").to_i32(), (std::vector<int32_t>{-32768, 12}));
  EXPECT_EQ(f->get("i8").to_i32(), (std::vector<int32_t>{-128, 0, 127}));
  EXPECT_EQ(f->get("u8").to_i32(), (std::vector<int32_t>{255}));
  EXPECT_EQ(f->get("flags").dtype, Dtype::BOOL);
  EXPECT_EQ(f->get("a.empty").nbytes, 0u);
  EXPECT_TRUE(f->get("a.empty").to_f32().empty());
  expect_error([&] { f->get("flags").to_i32(); }, ErrorCode::BadFormat, {"flags", "BOOL"});

  // Through the file system too, and out-of-range narrowing is refused.
  const auto path = (std::filesystem::temp_directory_path() / ("cera_st_" + std::to_string(::getpid()))).string();
  Writer w;
  const int64_t big[1] = {int64_t(1) << 40};
  w.add("big", Dtype::I64, {1}, big, 8);
  w.write(path);
  auto g = File::open(path);
  expect_error([&] { g->get("big").to_i32(); }, ErrorCode::OutOfRange, {"big", "1099511627776"});
  std::filesystem::remove(path);
}

TEST(Safetensors, WriterRejectsBadInput) {
  Writer w;
  const float x[2] = {};
  expect_error([&] { w.add("t", Dtype::F32, {3}, x, 8); }, ErrorCode::InvalidArgument, {"'t'", "12"});
  expect_error([&] { w.add("t", Dtype::F32, {-1}, x, 0); }, ErrorCode::InvalidArgument, {"negative"});
  expect_error([&] { w.add("__metadata__", Dtype::F32, {2}, x, 8); }, ErrorCode::InvalidArgument, {"reserved"});
  w.add("t", Dtype::F32, {2}, x, 8);
  expect_error([&] { w.add("t", Dtype::F32, {2}, x, 8); }, ErrorCode::InvalidArgument, {"twice"});
  expect_error([&] { w.write("/nonexistent/dir/x.safetensors"); }, ErrorCode::Io, {"/nonexistent/dir/x.safetensors"});
  expect_error([] { File::open("/nonexistent/x.safetensors"); }, ErrorCode::NotFound, {"/nonexistent/x.safetensors"});
}

// A file from a literal JSON header and `data_bytes` zero bytes of data.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_bad(const std::vector<uint8_t>& bytes, ErrorCode code, std::initializer_list<std::string> fragments) {
  expect_error([&] { File::open_memory(bytes.data(), bytes.size(), "bad.safetensors"); }, code, fragments);
}

TEST(Safetensors, RejectsBadHeaders) {
  expect_bad({1, 2, 3}, ErrorCode::BadFormat, {"bad.safetensors", "too small"});
  auto too_long = raw_file("{}", 0);
  too_long[0] = 50;
  expect_bad(too_long, ErrorCode::BadFormat, {"bad.safetensors", "header length 50", "file size 10"});
  auto huge = raw_file("{}", 0);
  const uint64_t n = 200'000'000;
  std::memcpy(huge.data(), &n, 8);
  expect_bad(huge, ErrorCode::BadFormat, {"100 MB"});

  const std::string ok_entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_bad(raw_file("{\"a\":", 8), ErrorCode::BadFormat, {"bad.safetensors", "not valid JSON"});
  expect_bad(raw_file("[1,2]", 8), ErrorCode::BadFormat, {"not a JSON object"});
  expect_bad(raw_file(R"({"a":5})", 8), ErrorCode::BadFormat, {"tensor 'a'", "not an object"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), ErrorCode::BadFormat, {"tensor 'a'", "data_offsets"});
  expect_bad(raw_file(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "dtype"});
  expect_bad(raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", 8), ErrorCode::Unsupported,
             {"tensor 'a'", "F8_E4M3"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "shape"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "shape"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "shape"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "data_offsets"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), ErrorCode::BadFormat,
             {"tensor 'a'", "begin after end"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7), ErrorCode::BadFormat,
             {"tensor 'a'", "[0, 8]", "data section (7 bytes)"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12), ErrorCode::BadFormat,
             {"tensor 'a'", "holds 8 bytes", "needs 12"});
  expect_bad(raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
             ErrorCode::BadFormat, {"tensor 'a'", "2^64"});
  expect_bad(raw_file(R"({"a":)" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
             ErrorCode::BadFormat, {"'a'", "'b'", "overlap"});
  expect_bad(raw_file(R"({"a":)" + ok_entry + R"(,"a":)" + ok_entry + "}", 8), ErrorCode::BadFormat,
             {"duplicate", "'a'"});
  expect_bad(raw_file(R"({"__metadata__":{"k":1}})", 0), ErrorCode::BadFormat, {"__metadata__", "'k'"});
  expect_bad(raw_file(R"({"__metadata__":[]})", 0), ErrorCode::BadFormat, {"__metadata__"});

  // Valid corner cases: empty header, zero-size tensors sharing an offset, nested metadata name.
  EXPECT_NO_THROW(File::open_memory(raw_file("{}", 0).data(), 10, "x"));
  const auto zeros = raw_file(
      R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"z2":{"dtype":"I8","shape":[0,3],"data_offsets":[4,4]},"a":)" +
          ok_entry + "}",
      8);
  auto f = File::open_memory(zeros.data(), zeros.size(), "zeros");
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors().front().name, "a");
}

// Every outcome of a damaged file must be success or a cera::Error.
bool survives(const uint8_t* data, size_t size, const std::string& what) {
  try {
    auto f = File::open_memory(data, size, "fuzz.safetensors");
    for (const auto& t : f->tensors()) {
      if (t.nbytes) {
        EXPECT_GE(int(t.data[0] + t.data[t.nbytes - 1]), 0);
      }
      try {
        t.to_f32();
      } catch (const Error&) {
      }
      try {
        t.to_i32();
      } catch (const Error&) {
      }
    }
    return true;
  } catch (const Error&) {
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": escaped as " << e.what();
  }
  return false;
}

TEST(Safetensors, FuzzLite) {
  const auto sample = sample_file();
  for (size_t cut = 0; cut < sample.size(); ++cut) {  // every truncation, as an exact-size copy
    std::vector<uint8_t> prefix(sample.begin(), sample.begin() + cut);
    EXPECT_TRUE(survives(prefix.data(), prefix.size(), "cut " + std::to_string(cut)));
    if (cut >= 8 && cut < sample.size()) {  // the sample has no trailing slack: every cut loses data
      EXPECT_THROW(File::open_memory(prefix.data(), prefix.size(), "cut"), Error) << cut;
    }
  }
  auto ref = read_binary_file(fixture_path("models/lfm2-tiny/ref/hf.safetensors"));
  for (size_t i = 0; i < 100; ++i) {
    const size_t cut = ref.size() * i / 100;
    std::vector<uint8_t> prefix(ref.begin(), ref.begin() + cut);
    EXPECT_TRUE(survives(prefix.data(), prefix.size(), "ref cut " + std::to_string(cut)));
  }
  // Random byte changes inside the JSON header (printable characters keep the parser busy).
  uint64_t header_len;
  std::memcpy(&header_len, ref.data(), 8);
  std::mt19937 rng(1234);
  const char alphabet[] = "0123456789[]{}\",:-.eE aF";
  for (int i = 0; i < 1000; ++i) {
    const size_t pos = 8 + rng() % header_len;
    const uint8_t old = ref[pos];
    ref[pos] = uint8_t(rng() % 3 == 0 ? rng() % 256 : alphabet[rng() % (sizeof alphabet - 1)]);
    EXPECT_TRUE(survives(ref.data(), ref.size(), "byte " + std::to_string(pos)));
    ref[pos] = old;
  }
}

}  // namespace
}  // namespace cera::test
