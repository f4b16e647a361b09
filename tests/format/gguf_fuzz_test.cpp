// Truncation and bit-flip fuzzing of real GGUF files: every outcome must be a clean open or a
// cera::Error — never another exception, a crash, or (under ASan) a read past the end.
#include <gtest/gtest.h>

#include <cctype>
#include <random>

#include "format/gguf.h"
#include "format/gguf_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CERA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CERA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CERA_POISON(p, n) ((void)(p), (void)(n))
#define CERA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cera::test {
namespace {

enum class Outcome { Opened, Rejected, Crashed };

// Opens the bytes and touches everything a loader would: every metadata value through the typed
// getters, and the first and last byte of every tensor.
Outcome exercise(const uint8_t* data, size_t size, const std::string& what) {
  try {
    auto f = gguf::File::open_memory(data, size, "fuzz.gguf");
    size_t sink = 0;
    for (const auto& [key, v] : f->metadata()) {
      sink += v.to_display_string(4).size() + v.array_size();
      // Wrong-type getters must fail as cera::Error too.
      for (int getter = 0; getter < 5; ++getter) {
        try {
          switch (getter) {
            case 0: sink += size_t(f->get_int(key)); break;
            case 1: sink += size_t(f->get_float(key)); break;
            case 2: sink += f->get_string(key).size(); break;
            case 3: sink += f->get_int_per_layer(key, v.is_array() ? v.array_size() : 6).size(); break;
            case 4: sink += f->get_string_array(key).size(); break;
          }
        } catch (const Error&) {
        }
      }
    }
    for (const auto& t : f->tensors()) {
      EXPECT_EQ(f->find_tensor(t.name), &t);
      sink += t.row_bytes() + size_t(t.n_elements());
      if (t.nbytes > 0) sink += t.data[0] + t.data[t.nbytes - 1];
    }
    volatile size_t keep = sink;
    (void)keep;
    return Outcome::Opened;
  } catch (const Error&) {
    return Outcome::Rejected;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": escaped as a non-cera exception: " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << ": escaped as a non-standard exception";
  }
  return Outcome::Crashed;
}

class GgufFuzz : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFuzz, TruncationsAreRejectedCleanly) {
  const std::string path = fixture_path(GetParam());
  std::vector<uint8_t> bytes = read_binary_file(path);
  ASSERT_EQ(exercise(bytes.data(), bytes.size(), "unmodified"), Outcome::Opened);
  auto f = gguf::File::open_memory(bytes.data(), bytes.size(), path);
  size_t data_end = 0;  // the last byte any tensor needs
  for (const auto& t : f->tensors()) data_end = std::max<size_t>(data_end, f->data_offset() + t.offset + t.nbytes);
  const size_t header_end = f->data_offset();
  f.reset();

  std::vector<size_t> cuts;
  for (size_t i = 0; i < std::min<size_t>(4096, bytes.size()); ++i) cuts.push_back(i);
  for (size_t i = 0; i < 100; ++i) cuts.push_back(4096 + (header_end - 4096) * i / 100);  // the rest of the header
  for (size_t i = 0; i < 100; ++i) cuts.push_back(header_end + (bytes.size() - header_end) * i / 100);
  cuts.push_back(data_end - 1);

  int rejected = 0;
  for (size_t cut : cuts) {
    const std::string what = "truncated at " + std::to_string(cut);
    Outcome o;
    if (cut <= 4096) {  // an exact-size copy: ASan catches a one-byte over-read
      std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + cut);
      o = exercise(prefix.data(), prefix.size(), what);
    } else {  // poison the tail instead of copying megabytes
      CERA_POISON(bytes.data() + cut, bytes.size() - cut);
      o = exercise(bytes.data(), cut, what);
      CERA_UNPOISON(bytes.data() + cut, bytes.size() - cut);
    }
    // Any cut before the end of the last tensor's data loses something the file promised.
    if (cut < data_end) {
      EXPECT_EQ(o, Outcome::Rejected) << what;
    }
    rejected += o == Outcome::Rejected;
  }
  EXPECT_GE(rejected, 4096 + 100);
}

TEST_P(GgufFuzz, BitFlipsNeverEscapeAsOtherErrors) {
  const std::string path = fixture_path(GetParam());
  std::vector<uint8_t> bytes = read_binary_file(path);
  const size_t header_end = gguf::File::open_memory(bytes.data(), bytes.size(), path)->data_offset();
  std::mt19937_64 rng(0xce7a + bytes.size());
  int outcomes[3] = {};
  for (int i = 0; i < 2000; ++i) {
    // Three quarters of the flips land in the metadata and tensor infos, where they matter most.
    const size_t limit = (rng() % 4 != 0) ? header_end : bytes.size();
    const size_t pos = size_t(rng() % limit);
    const uint8_t mask = uint8_t(1u << (rng() % 8));
    bytes[pos] ^= mask;
    outcomes[int(exercise(bytes.data(), bytes.size(), "bit flip at " + std::to_string(pos)))]++;
    bytes[pos] ^= mask;
  }
  EXPECT_EQ(outcomes[int(Outcome::Crashed)], 0);
  // Sanity: the fuzzer both broke files and left some loadable.
  EXPECT_GT(outcomes[int(Outcome::Rejected)], 50);
  EXPECT_GT(outcomes[int(Outcome::Opened)], 50);
}

std::vector<std::string> fuzz_files() {
  std::vector<std::string> files;
  for (const char* t : {"BF16", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
                        "Q6_K"})
    files.push_back(std::string("models/lfm2-tiny/gguf/lfm2-tiny-") + t + ".gguf");
  files.push_back("models/llama-tiny/gguf/llama-tiny-Q4_K_M.gguf");
  files.push_back("models/qwen2-tiny/gguf/qwen2-tiny-Q8_0.gguf");
  files.push_back("models/qwen3-tiny/gguf/qwen3-tiny-BF16.gguf");
  return files;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(info.param.rfind('/') + 1);
  name = name.substr(0, name.size() - 5);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFuzz, ::testing::ValuesIn(fuzz_files()), test_name);

}  // namespace
}  // namespace cera::test
