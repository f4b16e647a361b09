// GGUF reader: every fixture file, known lfm2-tiny facts, hand-built files for every value type and
// alignment, and one crafted file per validation rule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_test_util.h"

namespace cera::test {
namespace {

using gguf::File;
using gguf::ValueType;

std::string lfm2(const std::string& type) { return fixture_path("models/lfm2-tiny/gguf/lfm2-tiny-" + type + ".gguf"); }

// --- fixtures ------------------------------------------------------------------------------------

TEST(GgufReader, OpensEveryFixture) {
  const auto files = fixture_ggufs();
  ASSERT_GE(files.size(), 21u);  // 12 lfm2 + 3 × 3 others
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    std::unique_ptr<File> f;
    ASSERT_NO_THROW(f = File::open(path));
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->data_offset() % f->alignment(), 0u);
    EXPECT_EQ(f->file_size(), std::filesystem::file_size(path));
    EXPECT_FALSE(f->get_string("general.architecture").empty());
    ASSERT_FALSE(f->tensors().empty());
    const uint8_t* blob = f->tensors().front().data - f->tensors().front().offset;
    for (const auto& t : f->tensors()) {
      EXPECT_EQ(f->find_tensor(t.name), &t);
      EXPECT_EQ(t.nbytes, t.row_bytes() * size_t(t.n_rows())) << t.name;
      EXPECT_EQ(t.data, blob + t.offset) << t.name;
      EXPECT_LE(f->data_offset() + t.offset + t.nbytes, f->file_size()) << t.name;
    }
  }
}

TEST(GgufReader, Lfm2TinyMetadata) {
  auto f = File::open(lfm2("BF16"));
  EXPECT_EQ(f->get_string("general.architecture"), "lfm2");
  EXPECT_EQ(f->get_int("lfm2.block_count"), 6);
  EXPECT_EQ(f->get_int("lfm2.embedding_length"), 256);
  EXPECT_EQ(f->get_int("lfm2.feed_forward_length"), 512);
  EXPECT_EQ(f->get_int("lfm2.vocab_size"), 1024);
  EXPECT_EQ(f->get_int("lfm2.shortconv.l_cache"), 3);
  EXPECT_EQ(f->get_int_per_layer("lfm2.attention.head_count_kv", 6), (std::vector<int64_t>{0, 0, 2, 0, 2, 0}));
  EXPECT_EQ(f->get_int_per_layer("lfm2.attention.head_count", 6), std::vector<int64_t>(6, 4));  // a scalar
  EXPECT_EQ(f->get_int_per_layer_or("lfm2.no_such_key", 3, 7), std::vector<int64_t>(3, 7));
  EXPECT_DOUBLE_EQ(f->get_float("lfm2.rope.freq_base"), 1e6);
  EXPECT_FLOAT_EQ(float(f->get_float("lfm2.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 1024u);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")[1], "<|startoftext|>");
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 1024u);
  EXPECT_FALSE(f->get_string_array("tokenizer.ggml.merges").empty());
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(f->get_int_opt("tokenizer.ggml.no_such_id"), std::nullopt);
  EXPECT_EQ(f->get_bool_opt("tokenizer.ggml.add_sep_token"), std::optional<bool>(false));
  EXPECT_EQ(f->metadata().front().first, "general.architecture");  // file order

  const auto* head_kv = f->find("lfm2.attention.head_count_kv");
  ASSERT_NE(head_kv, nullptr);
  EXPECT_EQ(head_kv->type, ValueType::ARRAY);
  EXPECT_EQ(head_kv->elem_type, ValueType::INT32);
  EXPECT_EQ(head_kv->array_size(), 6u);
  EXPECT_EQ(head_kv->to_display_string(), "[0, 0, 2, 0, 2, 0]");
  EXPECT_EQ(head_kv->to_display_string(2), "[0, 0, ... (6 total)]");
}

TEST(GgufReader, Lfm2TinyTensors) {
  auto f = File::open(lfm2("BF16"));
  EXPECT_EQ(f->tensors().size(), 56u);
  const auto& emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.n_dims, 2);
  EXPECT_EQ(emb.ne, (std::array<int64_t, 4>{256, 1024, 1, 1}));
  EXPECT_EQ(emb.type, GgmlType::BF16);
  EXPECT_EQ(emb.nbytes, 256u * 1024u * 2u);
  EXPECT_EQ(emb.n_rows(), 1024);
  EXPECT_EQ(f->tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(f->tensor("blk.0.attn_norm.weight").n_dims, 1);
  EXPECT_EQ(f->tensor("blk.2.attn_k.weight").ne, (std::array<int64_t, 4>{256, 128, 1, 1}));
  EXPECT_EQ(f->tensor("blk.0.shortconv.conv.weight").ne, (std::array<int64_t, 4>{3, 256, 1, 1}));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied embeddings
  expect_error([&] { f->tensor("output.weight"); }, ErrorCode::NotFound, {"output.weight", "lfm2-tiny-BF16.gguf"});

  // Quantized files keep each tensor's own type (llama-quantize mixes them).
  auto q = File::open(lfm2("Q4_K_M"));
  EXPECT_EQ(q->tensor("token_embd.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(q->tensor("blk.0.ffn_up.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(q->tensor("blk.0.ffn_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(q->tensor("blk.0.ffn_up.weight").nbytes, 512u / 256u * 144u * 256u);
  auto q8 = File::open(lfm2("Q8_0"));
  EXPECT_EQ(q8->tensor("blk.0.ffn_up.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(q8->get_int("general.file_type"), 7);
}

TEST(GgufReader, GetterErrorsNameKeyAndTypes) {
  auto f = File::open(lfm2("Q8_0"));
  expect_error([&] { f->get_int("lfm2.missing"); }, ErrorCode::NotFound, {"lfm2.missing", "lfm2-tiny-Q8_0.gguf"});
  expect_error([&] { f->get_string("lfm2.block_count"); }, ErrorCode::BadFormat,
               {"lfm2.block_count", "uint32", "string"});
  expect_error([&] { f->get_int("general.architecture"); }, ErrorCode::BadFormat,
               {"general.architecture", "string", "integer"});
  expect_error([&] { f->get_int("tokenizer.ggml.add_bos_token"); }, ErrorCode::BadFormat, {"bool", "integer"});
  expect_error([&] { f->get_bool("lfm2.block_count"); }, ErrorCode::BadFormat, {"uint32", "bool"});
  expect_error([&] { f->get_float("general.name"); }, ErrorCode::BadFormat, {"general.name", "string"});
  expect_error([&] { f->get_string_array("tokenizer.ggml.token_type"); }, ErrorCode::BadFormat,
               {"tokenizer.ggml.token_type", "array of int32", "array of string"});
  expect_error([&] { f->get_int_array("tokenizer.ggml.tokens"); }, ErrorCode::BadFormat,
               {"array of string", "array of integers"});
  expect_error([&] { f->get_int_per_layer("lfm2.attention.head_count_kv", 5); }, ErrorCode::BadFormat,
               {"lfm2.attention.head_count_kv", "6 entries", "(5)"});
  expect_error([&] { f->get_int_per_layer("tokenizer.ggml.tokens", 1024); }, ErrorCode::BadFormat,
               {"array of string"});
  expect_error([&] { f->get_int_per_layer("general.name", 6); }, ErrorCode::BadFormat, {"string"});
  expect_error([&] { f->get_string_opt("lfm2.block_count"); }, ErrorCode::BadFormat, {"lfm2.block_count"});
}

// --- hand-built files ----------------------------------------------------------------------------

TEST(GgufReader, EveryScalarValueType) {
  GgufBytes b;
  b.header(0, 13, 2);  // version 2 has the same layout
  b.str("u8").u32(0).put<uint8_t>(200);
  b.str("i8").u32(1).put<int8_t>(-100);
  b.str("u16").u32(2).put<uint16_t>(60000);
  b.str("i16").u32(3).put<int16_t>(-30000);
  b.str("u32").u32(4).put<uint32_t>(4000000000u);
  b.str("i32").u32(5).put<int32_t>(-2000000000);
  b.str("f32").u32(6).put<float>(0.1f);
  b.str("bool").u32(7).put<uint8_t>(1);
  b.str("str").u32(8).str("h\xc3\xa9llo\n\"");
  b.str("u64").u32(10).put<uint64_t>(std::numeric_limits<uint64_t>::max());
  b.str("i64").u32(11).put<int64_t>(std::numeric_limits<int64_t>::min());
  b.str("f64").u32(12).put<double>(1.0 / 3.0);
  b.str("u64small").u32(10).put<uint64_t>(42);
  auto f = open_bytes(b.bytes);
  EXPECT_EQ(f->version(), 2u);
  ASSERT_EQ(f->metadata().size(), 13u);
  const ValueType types[] = {ValueType::UINT8, ValueType::INT8, ValueType::UINT16, ValueType::INT16,
                             ValueType::UINT32, ValueType::INT32, ValueType::FLOAT32, ValueType::BOOL,
                             ValueType::STRING, ValueType::UINT64, ValueType::INT64, ValueType::FLOAT64,
                             ValueType::UINT64};
  for (size_t i = 0; i < 13; ++i) {
    EXPECT_EQ(f->metadata()[i].second.type, types[i]) << f->metadata()[i].first;
    EXPECT_FALSE(f->metadata()[i].second.is_array());
    EXPECT_EQ(f->metadata()[i].second.array_size(), 0u);
  }
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("u32"), 4000000000LL);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get_int("u64small"), 42);
  expect_error([&] { f->get_int("u64"); }, ErrorCode::BadFormat, {"'u64'", "does not fit"});
  EXPECT_EQ(std::get<uint64_t>(f->find("u64")->data), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get_float("f32"), double(0.1f));
  EXPECT_EQ(f->get_float("f64"), 1.0 / 3.0);
  EXPECT_EQ(f->get_float("i16"), -30000.0);  // integers are accepted as floats
  EXPECT_EQ(f->get_float("u64"), 18446744073709551615.0);
  EXPECT_EQ(f->get_bool("bool"), true);
  EXPECT_EQ(f->get_string("str"), "h\xc3\xa9llo\n\"");
  expect_error([&] { f->get_int("bool"); }, ErrorCode::BadFormat, {"'bool'", "bool"});
  expect_error([&] { f->get_int("f32"); }, ErrorCode::BadFormat, {"float32"});

  EXPECT_EQ(f->find("u8")->to_display_string(), "200");
  EXPECT_EQ(f->find("i64")->to_display_string(), "-9223372036854775808");
  EXPECT_EQ(f->find("f32")->to_display_string(), "0.1");  // shortest float32 text, not 0.10000000149
  EXPECT_EQ(f->find("bool")->to_display_string(), "true");
  EXPECT_EQ(f->find("str")->to_display_string(), "\"h\xc3\xa9llo\\n\\\"\"");
  EXPECT_EQ(gguf::value_type_name(ValueType::FLOAT64), "float64");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufReader, ArraysOfEveryElementType) {
  GgufBytes b;
  b.header(0, 12);
  auto arr = [&](const std::string& key, uint32_t elem, uint64_t n) -> GgufBytes& {
    return b.str(key).u32(9).u32(elem).u64(n);
  };
  arr("u8", 0, 3).u8(1).u8(2).u8(255);
  arr("i8", 1, 2).put<int8_t>(-1).put<int8_t>(127);
  arr("u16", 2, 1).put<uint16_t>(65535);
  arr("i16", 3, 2).put<int16_t>(-32768).put<int16_t>(5);
  arr("u32", 4, 1).u32(7);
  arr("i32", 5, 3).put<int32_t>(0).put<int32_t>(-2).put<int32_t>(2);
  arr("f32", 6, 2).put<float>(1.5f).put<float>(-0.25f);
  arr("bool", 7, 3).u8(1).u8(0).u8(1);
  arr("str", 8, 3).str("a").str("").str("ccc");
  arr("u64", 10, 2).u64(1).u64(std::numeric_limits<uint64_t>::max());
  arr("i64", 11, 1).put<int64_t>(-5);
  arr("f64_empty", 12, 0);
  auto f = open_bytes(b.bytes);
  const ValueType elems[] = {ValueType::UINT8, ValueType::INT8, ValueType::UINT16, ValueType::INT16,
                             ValueType::UINT32, ValueType::INT32, ValueType::FLOAT32, ValueType::BOOL,
                             ValueType::STRING, ValueType::UINT64, ValueType::INT64, ValueType::FLOAT64};
  const size_t sizes[] = {3, 2, 1, 2, 1, 3, 2, 3, 3, 2, 1, 0};
  for (size_t i = 0; i < 12; ++i) {
    const auto& v = f->metadata()[i].second;
    EXPECT_EQ(v.type, ValueType::ARRAY);
    EXPECT_EQ(v.elem_type, elems[i]) << f->metadata()[i].first;
    EXPECT_EQ(v.array_size(), sizes[i]) << f->metadata()[i].first;
  }
  EXPECT_EQ(f->get_int_array("u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f->get_int_array("i8"), (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(f->get_int_array("u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f->get_int_array("i16"), (std::vector<int64_t>{-32768, 5}));
  EXPECT_EQ(f->get_int_array("u32"), (std::vector<int64_t>{7}));
  EXPECT_EQ(f->get_int_array("i32"), (std::vector<int64_t>{0, -2, 2}));
  EXPECT_EQ(f->get_int_array("i64"), (std::vector<int64_t>{-5}));
  expect_error([&] { f->get_int_array("u64"); }, ErrorCode::BadFormat, {"'u64'", "does not fit"});
  EXPECT_EQ(f->get_float_array("f32"), (std::vector<double>{1.5, -0.25}));
  EXPECT_EQ(f->get_float_array("i16"), (std::vector<double>{-32768, 5}));
  EXPECT_TRUE(f->get_float_array("f64_empty").empty());
  EXPECT_EQ(std::get<std::vector<bool>>(f->find("bool")->data), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f->get_string_array("str"), (std::vector<std::string>{"a", "", "ccc"}));
  expect_error([&] { f->get_float_array("bool"); }, ErrorCode::BadFormat, {"array of bool"});
  EXPECT_EQ(f->get_int_per_layer("i32", 3), (std::vector<int64_t>{0, -2, 2}));
  EXPECT_EQ(f->get_int_per_layer("u8", 3), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f->find("str")->to_display_string(), "[\"a\", \"\", \"ccc\"]");
  EXPECT_EQ(f->find("bool")->to_display_string(1), "[true, ... (3 total)]");
  EXPECT_EQ(f->find("f32")->to_display_string(), "[1.5, -0.25]");
  EXPECT_EQ(f->find("f64_empty")->to_display_string(), "[]");
  EXPECT_EQ(f->find("u64")->to_display_string(0), "[... (2 total)]");
}

// A file with two tensors at the given alignment; `set_key` false leaves the default (32).
std::vector<uint8_t> aligned_file(uint32_t alignment, bool set_key) {
  GgufBytes b;
  b.header(2, set_key ? 1 : 0);
  if (set_key) b.kv_u32("general.alignment", alignment);
  const uint64_t a = set_key ? alignment : 32;
  b.tensor_info("a", {3}, 0, 0);                                  // 12 bytes of f32
  b.tensor_info("b", {2, 2}, 1, (12 + a - 1) / a * a);            // 8 bytes of f16
  b.pad_to(a);
  for (float x : {1.0f, 2.0f, 3.0f}) b.put(x);
  b.pad_to(a);
  for (uint16_t x : {0x3c00, 0x4000, 0x4200, 0x4400}) b.put(x);
  return b.bytes;
}

TEST(GgufReader, AlignmentVariants) {
  for (uint32_t alignment : {1u, 2u, 8u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    const auto bytes = aligned_file(alignment, true);
    auto f = open_bytes(bytes);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    const auto& a = f->tensor("a");
    const auto& b = f->tensor("b");
    EXPECT_EQ(a.data, bytes.data() + f->data_offset());
    float first;
    std::memcpy(&first, a.data + 8, 4);
    EXPECT_EQ(first, 3.0f);
    EXPECT_EQ(b.ne, (std::array<int64_t, 4>{2, 2, 1, 1}));
    EXPECT_EQ(b.nbytes, 8u);
    EXPECT_EQ(b.data[6], 0x00);
    EXPECT_EQ(b.data[7], 0x44);
  }
  auto f = open_bytes(aligned_file(0, false));
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
}

TEST(GgufReader, ZeroTensorsAndZeroSizedTensor) {
  GgufBytes none;
  none.header(0, 0);
  auto f = open_bytes(none.bytes);
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());

  GgufBytes z;
  z.header(1, 0).tensor_info("empty", {0, 4}, 0, 0).pad_to(32);
  auto g = open_bytes(z.bytes);
  EXPECT_EQ(g->tensor("empty").nbytes, 0u);
  EXPECT_EQ(g->tensor("empty").n_elements(), 0);
}

// --- validation: one crafted file per rule ------------------------------------------------------

void expect_bad(const std::vector<uint8_t>& bytes, ErrorCode code, std::initializer_list<std::string> fragments) {
  expect_error([&] { open_bytes(bytes, "crafted.gguf"); }, code, fragments);
}

TEST(GgufValidation, MissingEmptyAndNonRegularFiles) {
  expect_error([] { File::open("/nonexistent/dir/model.gguf"); }, ErrorCode::NotFound,
               {"/nonexistent/dir/model.gguf", "No such file"});
  expect_error([] { File::open("/"); }, ErrorCode::Io, {"not a regular file"});
  const auto path = std::filesystem::temp_directory_path() / ("cera_empty_" + std::to_string(::getpid()) + ".gguf");
  { std::ofstream(path.string()); }
  {
    MappedFile m(path.string());
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.data(), nullptr);
  }
  expect_error([&] { File::open(path.string()); }, ErrorCode::BadFormat, {path.string(), "not a GGUF file"});
  std::filesystem::remove(path);
}

TEST(GgufValidation, MagicAndVersion) {
  expect_bad({'G', 'G'}, ErrorCode::BadFormat, {"crafted.gguf", "not a GGUF file"});
  GgufBytes wrong;
  wrong.bytes = {'G', 'G', 'M', 'L'};
  wrong.u32(3).u64(0).u64(0);
  expect_bad(wrong.bytes, ErrorCode::BadFormat, {"crafted.gguf", "magic"});
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    GgufBytes b;
    b.header(0, 0, v);
    expect_bad(b.bytes, ErrorCode::Unsupported, {"crafted.gguf", "version " + std::to_string(v)});
  }
  GgufBytes swapped;
  swapped.header(0, 0, 0x03000000u);
  expect_bad(swapped.bytes, ErrorCode::Unsupported, {"byte-swapped"});
  GgufBytes truncated;
  truncated.header(0, 0);
  truncated.bytes.resize(20);
  expect_bad(truncated.bytes, ErrorCode::BadFormat, {"crafted.gguf", "truncated", "metadata count"});
}

TEST(GgufValidation, AbsurdCountsRejectedBeforeAllocating) {
  GgufBytes kv;
  kv.header(0, uint64_t(1) << 60).zeros(100);
  expect_bad(kv.bytes, ErrorCode::BadFormat, {"metadata count 1152921504606846976", "100 bytes left"});
  GgufBytes t;
  t.header(uint64_t(1) << 62, 0).zeros(100);
  expect_bad(t.bytes, ErrorCode::BadFormat, {"tensor count", "24"});
  GgufBytes both;  // each count fits alone, together they do not
  both.header(3, 3).zeros(12 * 3 + 24 * 3 - 1);
  expect_bad(both.bytes, ErrorCode::BadFormat, {"3 metadata entries and 3 tensor infos"});
}

TEST(GgufValidation, Keys) {
  GgufBytes empty_key;
  empty_key.header(0, 1).str("").u32(4).u32(1);
  expect_bad(empty_key.bytes, ErrorCode::BadFormat, {"metadata entry #0", "empty key"});
  GgufBytes dup;
  dup.header(0, 2).kv_u32("general.x", 1).kv_u32("general.x", 2);
  expect_bad(dup.bytes, ErrorCode::BadFormat, {"key 'general.x'", "duplicate"});
  GgufBytes long_key;
  long_key.header(0, 1).u64(1000).zeros(20);
  expect_bad(long_key.bytes, ErrorCode::BadFormat, {"metadata entry #0", "key length 1000", "exceeds"});
  GgufBytes long_value;
  long_value.header(0, 1).str("general.name").u32(8).u64(uint64_t(-1)).zeros(4);
  expect_bad(long_value.bytes, ErrorCode::BadFormat, {"key 'general.name'", "string value length 18446744073709551615"});
  GgufBytes trunc_value;
  trunc_value.header(0, 1).str("general.v").u32(10).u32(7);  // a u64 with 4 bytes left
  expect_bad(trunc_value.bytes, ErrorCode::BadFormat, {"key 'general.v'", "truncated uint64 value"});
}

TEST(GgufValidation, ValueTypes) {
  GgufBytes bad_type;
  bad_type.header(0, 1).str("k.bad").u32(13).u32(0);
  expect_bad(bad_type.bytes, ErrorCode::BadFormat, {"key 'k.bad'", "invalid value type 13"});
  GgufBytes nested;
  nested.header(0, 1).str("k.nested").u32(9).u32(9).u64(1).u32(4).u64(1).u32(1);
  expect_bad(nested.bytes, ErrorCode::BadFormat, {"key 'k.nested'", "arrays of arrays"});
  GgufBytes bad_elem;
  bad_elem.header(0, 1).str("k.elem").u32(9).u32(77).u64(0);
  expect_bad(bad_elem.bytes, ErrorCode::BadFormat, {"key 'k.elem'", "invalid array element type 77"});
  GgufBytes bad_bool;
  bad_bool.header(0, 1).str("k.bool").u32(7).u8(2);
  expect_bad(bad_bool.bytes, ErrorCode::BadFormat, {"key 'k.bool'", "bool"});
}

TEST(GgufValidation, ArrayCountsCheckedAgainstFileSize) {
  GgufBytes huge;
  huge.header(0, 1).str("k.arr").u32(9).u32(11).u64(uint64_t(1) << 61).zeros(64);
  expect_bad(huge.bytes, ErrorCode::BadFormat, {"key 'k.arr'", "array count 2305843009213693952", "bytes left"});
  GgufBytes strings;  // 100 strings need at least 800 bytes
  strings.header(0, 1).str("k.strs").u32(9).u32(8).u64(100).zeros(799);
  expect_bad(strings.bytes, ErrorCode::BadFormat, {"key 'k.strs'", "array count 100"});
  GgufBytes short_elem;  // count fits the minimum but one string runs past the end
  short_elem.header(0, 1).str("k.s").u32(9).u32(8).u64(2).str("ok").u64(50).zeros(10);
  expect_bad(short_elem.bytes, ErrorCode::BadFormat, {"key 'k.s'", "string array element length 50"});
}

TEST(GgufValidation, Alignment) {
  GgufBytes wrong_type;
  wrong_type.header(0, 1).str("general.alignment").u32(10).u64(32);
  expect_bad(wrong_type.bytes, ErrorCode::BadFormat, {"general.alignment", "uint64", "uint32"});
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufBytes b;
    b.header(0, 1).kv_u32("general.alignment", a);
    expect_bad(b.bytes, ErrorCode::BadFormat, {"general.alignment", "power of two"});
  }
}

TEST(GgufValidation, TensorInfos) {
  auto one_tensor = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    GgufBytes b;
    b.header(1, 0).tensor_info(name, ne, type, offset).pad_to(32).zeros(4096);
    return b.bytes;
  };
  expect_bad(one_tensor("", {4}, 0, 0), ErrorCode::BadFormat, {"crafted.gguf", "tensor info #0", "empty tensor name"});
  expect_bad(one_tensor("t.zero_dims", {}, 0, 0), ErrorCode::BadFormat, {"tensor 't.zero_dims'", "n_dims 0"});
  expect_bad(one_tensor("t.five", {1, 1, 1, 1, 1}, 0, 0), ErrorCode::BadFormat, {"tensor 't.five'", "n_dims 5"});
  expect_bad(one_tensor("t.neg", {4, uint64_t(-3)}, 0, 0), ErrorCode::BadFormat, {"tensor 't.neg'", "ne[1] = -3"});
  expect_bad(one_tensor("t.big", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0), ErrorCode::BadFormat,
             {"tensor 't.big'", "overflow"});
  expect_bad(one_tensor("t.bytes", {uint64_t(1) << 62}, 0, 0), ErrorCode::BadFormat, {"tensor 't.bytes'", "overflow"});
  expect_bad(one_tensor("t.type", {4}, 99, 0), ErrorCode::Unsupported, {"tensor 't.type'", "type id 99"});
  expect_bad(one_tensor("t.retired", {32}, 4, 0), ErrorCode::Unsupported, {"tensor 't.retired'", "type id 4"});
  expect_bad(one_tensor("t.block", {48}, 2, 0), ErrorCode::BadFormat, {"tensor 't.block'", "ne[0] = 48", "32"});
  expect_bad(one_tensor("t.kblock", {128}, 12, 0), ErrorCode::BadFormat, {"tensor 't.kblock'", "256"});
  expect_bad(one_tensor("t.unaligned", {4}, 0, 16), ErrorCode::BadFormat,
             {"tensor 't.unaligned'", "offset 16", "alignment 32"});
  expect_bad(one_tensor("t.past_end", {2048}, 0, 0), ErrorCode::BadFormat,
             {"crafted.gguf: tensor 't.past_end' data [offset 96, 8192 bytes] runs past the end of the file (size 4192)"});
  expect_bad(one_tensor("t.far", {4}, 0, uint64_t(-32)), ErrorCode::BadFormat, {"tensor 't.far'", "past the end"});
  expect_bad(one_tensor("t.over", {4}, 0, uint64_t(1) << 62), ErrorCode::BadFormat, {"tensor 't.over'", "past the end"});

  GgufBytes dup;
  dup.header(2, 0).tensor_info("t.dup", {4}, 0, 0).tensor_info("t.dup", {4}, 0, 32).pad_to(32).zeros(64);
  expect_bad(dup.bytes, ErrorCode::BadFormat, {"tensor 't.dup'", "duplicate"});
  GgufBytes long_name;
  long_name.header(1, 0).u64(5000).zeros(40);
  expect_bad(long_name.bytes, ErrorCode::BadFormat, {"tensor info #0", "tensor name length 5000"});
  GgufBytes trunc_info;
  trunc_info.header(1, 0).str("t.cut").u32(2).u64(4);  // the file ends where ne[1] should be
  expect_bad(trunc_info.bytes, ErrorCode::BadFormat, {"tensor 't.cut'", "truncated dimension"});
}

TEST(GgufValidation, TruncatedFixtureNamesFirstTensorPastTheEnd) {
  auto bytes = read_binary_file(lfm2("Q8_0"));
  const auto full = open_bytes(bytes);
  const auto& last = full->tensors().back();
  const size_t cut = full->data_offset() + last.offset + last.nbytes - 1;
  bytes.resize(cut);
  expect_bad(bytes, ErrorCode::BadFormat,
             {"crafted.gguf: tensor '" + last.name + "' data [offset " + std::to_string(cut + 1 - last.nbytes),
              "runs past the end of the file (size " + std::to_string(cut) + ")"});
}

}  // namespace
}  // namespace cera::test
