#include "sampling/stop_strings.h"

#include <gtest/gtest.h>

#include <random>

namespace cera {
namespace {

struct Run {
  std::vector<std::string> texts;  // what each push released
  std::string all;                 // everything released, flush included
  bool stopped = false;
  std::string matched;
};

Run feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStringFilter f(stops);
  Run r;
  for (const auto& p : pieces) {
    auto o = f.push(p);
    r.texts.push_back(o.text);
    r.all += o.text;
    if (o.stopped) {
      r.stopped = true;
      r.matched = o.matched;
    }
  }
  r.all += f.flush();
  return r;
}

TEST(StopStrings, NoStopsPassesThrough) {
  auto r = feed({}, {"a", "bc", ""});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_FALSE(r.stopped);
}

TEST(StopStrings, SplitAcrossPieces) {
  auto r = feed({"</s>"}, {"Hello <", "/", "s", "> more"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"Hello ", "", "", ""}));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.matched, "</s>");
  EXPECT_EQ(r.all, "Hello ");
  r = feed({"STOP"}, {"ab S", "TOP"});  // two pieces
  EXPECT_EQ(r.texts, (std::vector<std::string>{"ab ", ""}));
  EXPECT_EQ(r.all, "ab ");
}

TEST(StopStrings, StopStartingInsideEarlierPiece) {
  auto r = feed({"STOP"}, {"foo ST", "O", "P bar"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"foo ", "", ""}));
  EXPECT_EQ(r.all, "foo ");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStrings, HeldTextReleasedWhenItCannotMatch) {
  auto r = feed({"STOP"}, {"x ST", "AR"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x ", "STAR"}));
  EXPECT_FALSE(r.stopped);
  // A held prefix that fails, with a stop starting again inside it.
  r = feed({"aab"}, {"a", "a", "a", "b"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.all, "a");
}

TEST(StopStrings, OverlappingCandidates) {
  // "ab" completes before "abc" can: it wins, and nothing of it leaks.
  auto r = feed({"abc", "ab"}, {"xa", "b", "c"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x", "", ""}));
  EXPECT_EQ(r.matched, "ab");
  // Same text in one piece: same answer (the earliest completion).
  r = feed({"abc", "ab"}, {"xabc"});
  EXPECT_EQ(r.matched, "ab");
  EXPECT_EQ(r.all, "x");
  // "bc" ends at byte 3, "abcd" only at 4: the earlier end wins even though "abcd" starts first.
  r = feed({"abcd", "bc"}, {"abcd"});
  EXPECT_EQ(r.matched, "bc");
  EXPECT_EQ(r.all, "a");
  // Same end: the longer one (starting first) wins.
  r = feed({"c", "abc"}, {"ab", "c"});
  EXPECT_EQ(r.matched, "abc");
  EXPECT_EQ(r.all, "");
}

TEST(StopStrings, Utf8) {
  auto r = feed({"终止"}, {"你好终", "止了"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"你好", ""}));
  EXPECT_TRUE(r.stopped);
  r = feed({"终止"}, {"你好终", "点"});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"你好", "终点"}));
  // A stop split inside a character's bytes.
  const std::string stop = "é!";  // C3 A9 21
  r = feed({stop}, {"caf\xC3", "\xA9", "!"});
  EXPECT_EQ(r.all, "caf");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStrings, FlushReturnsHeldText) {
  StopStringFilter f({"<|im_end|>"});
  EXPECT_EQ(f.push("done <|im").text, "done ");
  EXPECT_EQ(f.flush(), "<|im");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStrings, AfterStopNothingMore) {
  StopStringFilter f({"X"});
  EXPECT_TRUE(f.push("aXb").stopped);
  auto o = f.push("more");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(f.flush(), "");
}

// Reference: scan ends left to right; the first end where some stop ends wins (longest on ties).
std::pair<std::string, std::string> reference(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    const std::string* best = nullptr;
    for (const auto& s : stops)
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 && (!best || s.size() > best->size()))
        best = &s;
    if (best) return {text.substr(0, end - best->size()), *best};
  }
  return {text, ""};
}

// Any chunking gives the reference result, and the released text never runs past the stop.
TEST(StopStrings, RandomChunkingMatchesReference) {
  std::mt19937 gen(11);
  const std::vector<std::string> stops = {"abc", "ca", "bb", "cab"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int n = int(gen() % 12);
    for (int i = 0; i < n; ++i) text += char('a' + gen() % 3);
    const auto [want, want_stop] = reference(text, stops);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t len = std::min<size_t>(text.size() - i, gen() % 4);
      pieces.push_back(text.substr(i, len));
      i += len;
    }
    auto r = feed(stops, pieces);
    ASSERT_EQ(r.all, want) << text;
    ASSERT_EQ(r.matched, want_stop) << text;
    ASSERT_EQ(r.stopped, !want_stop.empty()) << text;
  }
}

}  // namespace
}  // namespace cera
