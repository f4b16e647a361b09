// GGUF writer: copying every fixture through Writer reproduces the llama.cpp-written file byte for
// byte; hand-built files read back with the same values; bad input is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_test_util.h"

namespace cera::test {
namespace {

using gguf::File;
using gguf::Value;
using gguf::ValueType;
using gguf::Writer;

Writer copy_of(const File& f) {
  Writer w;
  for (const auto& [key, value] : f.metadata()) w.set(key, value);
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);  // keep the stored n_dims
    w.add_tensor(t.name, t.type, ne, t.data, t.nbytes);
  }
  return w;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("cera_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(GgufWriter, RoundTripsEveryFixtureByteForByte) {
  const auto files = fixture_ggufs();
  ASSERT_FALSE(files.empty());
  const std::string out = temp_path("roundtrip.gguf");
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    auto f = File::open(path);
    copy_of(*f).write(out);
    const auto original = read_binary_file(path);
    const auto written = read_binary_file(out);
    ASSERT_EQ(written.size(), original.size());
    const auto diff = std::mismatch(original.begin(), original.end(), written.begin());
    EXPECT_TRUE(diff.first == original.end()) << "first difference at byte " << (diff.first - original.begin());
  }
  std::filesystem::remove(out);
}

TEST(GgufWriter, HandBuiltFileReadsBack) {
  Writer w;
  w.set_string("general.architecture", "test");
  w.set_u32("test.block_count", 3);
  w.set_i32("test.neg", -7);
  w.set_f32("test.eps", 1e-6f);
  w.set_bool("test.flag", true);
  w.set_string_array("test.words", {"a", "", "\xe2\x82\xac"});
  w.set_i32_array("test.per_layer", {1, 0, 2});
  w.set_f32_array("test.scores", {0.5f, -1.0f});
  w.set("test.u8", Value{ValueType::UINT8, ValueType::UINT8, uint64_t(255)});
  w.set("test.i64", Value{ValueType::INT64, ValueType::UINT8, std::numeric_limits<int64_t>::min()});
  w.set("test.u64", Value{ValueType::UINT64, ValueType::UINT8, std::numeric_limits<uint64_t>::max()});
  w.set("test.f64", Value{ValueType::FLOAT64, ValueType::UINT8, 0.1});
  w.set("test.u16s", Value{ValueType::ARRAY, ValueType::UINT16, std::vector<uint64_t>{1, 65535}});
  w.set("test.bools", Value{ValueType::ARRAY, ValueType::BOOL, std::vector<bool>{false, true}});
  w.set("test.empty", Value{ValueType::ARRAY, ValueType::INT8, std::vector<int64_t>{}});
  w.set_u32("test.block_count", 4);  // replaces in place, keeping the position
  const float a[6] = {1, 2, 3, 4, 5, 6};
  w.add_tensor("a", GgmlType::F32, {3, 2}, a, sizeof a);
  std::vector<uint8_t> q(34 * 2, 0x11);  // two Q8_0 blocks
  w.add_tensor("q", GgmlType::Q8_0, {64}, q.data(), q.size());

  const auto bytes = w.to_bytes();
  auto f = open_bytes(bytes);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), 15u);
  EXPECT_EQ(f->metadata()[1].first, "test.block_count");
  EXPECT_EQ(f->get_int("test.block_count"), 4);
  EXPECT_EQ(f->find("test.block_count")->type, ValueType::UINT32);
  EXPECT_EQ(f->get_int("test.neg"), -7);
  EXPECT_EQ(f->find("test.neg")->type, ValueType::INT32);
  EXPECT_EQ(f->get_float("test.eps"), double(1e-6f));
  EXPECT_EQ(f->get_bool("test.flag"), true);
  EXPECT_EQ(f->get_string_array("test.words"), (std::vector<std::string>{"a", "", "\xe2\x82\xac"}));
  EXPECT_EQ(f->get_int_per_layer("test.per_layer", 3), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(f->find("test.per_layer")->elem_type, ValueType::INT32);
  EXPECT_EQ(f->get_float_array("test.scores"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(f->get_int("test.u8"), 255);
  EXPECT_EQ(f->get_int("test.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<uint64_t>(f->find("test.u64")->data), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get_float("test.f64"), 0.1);
  EXPECT_EQ(f->find("test.u16s")->elem_type, ValueType::UINT16);
  EXPECT_EQ(f->get_int_array("test.u16s"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(std::get<std::vector<bool>>(f->find("test.bools")->data), (std::vector<bool>{false, true}));
  EXPECT_EQ(f->find("test.empty")->array_size(), 0u);

  EXPECT_EQ(f->alignment(), 32u);
  const auto& ta = f->tensor("a");
  EXPECT_EQ(ta.n_dims, 2);
  EXPECT_EQ(ta.ne, (std::array<int64_t, 4>{3, 2, 1, 1}));
  EXPECT_EQ(std::memcmp(ta.data, a, sizeof a), 0);
  const auto& tq = f->tensor("q");
  EXPECT_EQ(tq.offset, 32u);  // 24 bytes of "a" padded to 32
  EXPECT_EQ(tq.type, GgmlType::Q8_0);
  EXPECT_EQ(std::memcmp(tq.data, q.data(), q.size()), 0);
  EXPECT_EQ(bytes.size() % 32, 0u);  // the last tensor is padded too
  EXPECT_EQ(bytes.size(), f->data_offset() + 32 + 96);
}

TEST(GgufWriter, UsesGeneralAlignment) {
  for (uint32_t alignment : {1u, 8u, 256u}) {
    Writer w;
    w.set_u32("general.alignment", alignment);
    const uint8_t x[3] = {1, 2, 3};
    w.add_tensor("x", GgmlType::I8, {3}, x, 3);
    w.add_tensor("y", GgmlType::I8, {3}, x, 3);
    const auto bytes = w.to_bytes();
    auto f = open_bytes(bytes);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->tensor("y").offset, (3 + alignment - 1) / alignment * alignment);
    EXPECT_EQ(bytes.size() % alignment, 0u);
    EXPECT_EQ(f->tensor("y").data[2], 3);
  }
}

TEST(GgufWriter, RejectsBadInput) {
  const float d[4] = {};
  Writer w;
  expect_error([&] { w.add_tensor("t", GgmlType::F32, {4}, d, 12); }, ErrorCode::InvalidArgument, {"'t'", "16"});
  expect_error([&] { w.add_tensor("t", GgmlType::Q8_0, {16}, d, 16); }, ErrorCode::InvalidArgument, {"block size"});
  expect_error([&] { w.add_tensor("t", GgmlType::F32, {}, d, 0); }, ErrorCode::InvalidArgument, {"dimensions"});
  expect_error([&] { w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 4}, d, 16); }, ErrorCode::InvalidArgument,
               {"dimensions"});
  expect_error([&] { w.add_tensor("", GgmlType::F32, {4}, d, 16); }, ErrorCode::InvalidArgument, {"empty"});
  w.add_tensor("t", GgmlType::F32, {4}, d, 16);
  expect_error([&] { w.add_tensor("t", GgmlType::F32, {4}, d, 16); }, ErrorCode::InvalidArgument, {"twice"});
  expect_error([&] { w.set("", Value{}); }, ErrorCode::InvalidArgument, {"empty key"});

  Writer range;
  range.set("k.small", Value{ValueType::UINT8, ValueType::UINT8, uint64_t(256)});
  expect_error([&] { range.to_bytes(); }, ErrorCode::InvalidArgument, {"k.small", "out of range"});
  Writer neg;
  neg.set("k.neg", Value{ValueType::UINT32, ValueType::UINT8, int64_t(-1)});
  expect_error([&] { neg.to_bytes(); }, ErrorCode::InvalidArgument, {"k.neg", "out of range"});
  Writer mismatch;
  mismatch.set("k.m", Value{ValueType::STRING, ValueType::UINT8, int64_t(1)});
  expect_error([&] { mismatch.to_bytes(); }, ErrorCode::InvalidArgument, {"k.m", "integer data for a string"});
  Writer nested;
  nested.set("k.n", Value{ValueType::ARRAY, ValueType::ARRAY, std::vector<int64_t>{}});
  expect_error([&] { nested.to_bytes(); }, ErrorCode::InvalidArgument, {"k.n", "arrays of arrays"});
  Writer align;
  align.set_u32("general.alignment", 24);
  expect_error([&] { align.to_bytes(); }, ErrorCode::InvalidArgument, {"general.alignment", "power of two"});
  Writer align_type;
  align_type.set_i32("general.alignment", 32);
  expect_error([&] { align_type.to_bytes(); }, ErrorCode::InvalidArgument, {"general.alignment"});

  Writer ok;
  expect_error([&] { ok.write("/nonexistent/dir/out.gguf"); }, ErrorCode::Io, {"/nonexistent/dir/out.gguf"});
}

}  // namespace
}  // namespace cera::test
