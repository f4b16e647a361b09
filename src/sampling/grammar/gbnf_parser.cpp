// Grammar::parse: a recursive-descent reader for llama.cpp's GBNF dialect. Groups and repetitions
// become generated rules named "<rule>-<n>", so the Grammar that comes out has no operators left.
#include <cstdio>
#include <limits>
#include <map>
#include <unordered_map>

#include "cera/error.h"
#include "sampling/grammar/grammar.h"

namespace cera {
namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kMaxRepetition = 10000;  // {m,n} expands into ~n elements; keep that sane

using Seq = std::vector<GrammarElem>;

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  Grammar run() {
    skip(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip(true);
    }
    for (uint32_t r = 0; r < d_.names.size(); ++r)
      if (!defined_[r])
        fail_at(first_use_[r], "undefined rule '" + d_.names[r] + "'");
    auto root = ids_.find("root");
    if (root == ids_.end()) fail_at(src_.size(), "no 'root' rule (the start rule must be named root)");
    d_.root = root->second;
    return Grammar::from_draft(std::move(d_));
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') { ++line; col = 1; } else if ((uint8_t(src_[i]) & 0xC0) != 0x80) { ++col; }
    }
    throw Error(ErrorCode::InvalidArgument,
                "grammar " + std::to_string(line) + ":" + std::to_string(col) + ": " + what);
  }
  [[noreturn]] void expected(const std::string& what) const {
    std::string got = "end of input";
    if (pos_ < src_.size()) {
      const char c = src_[pos_];
      got = c == '\n' ? "end of line" : "'" + std::string(1, c) + "'";
    }
    fail_at(pos_, "expected " + what + ", got " + got);
  }

  bool at_end() const { return pos_ >= src_.size(); }
  char peek() const { return at_end() ? '\0' : src_[pos_]; }

  // Spaces, tabs and # comments; newlines too where a rule cannot end (inside a group, after
  // '::=' or '|').
  void skip(bool newlines) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && src_[pos_] != '\n') ++pos_;
      } else if (c == '\n' && newlines) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && name_char(src_[pos_])) ++pos_;
    if (pos_ == start) expected("a rule name");
    return std::string(src_.substr(start, pos_ - start));
  }

  // The id for a name the grammar text uses. If a generated rule already has that name, the text
  // means its own rule: the generated one is renamed out of the way.
  uint32_t rule_id(const std::string& name, size_t used_at) {
    auto found = ids_.find(name);
    if (found != ids_.end() && generated_flag_[found->second]) {
      const uint32_t gen = found->second;
      ids_.erase(found);
      std::string renamed;
      do renamed = name + "-" + std::to_string(++generated_[name]); while (ids_.count(renamed));
      d_.names[gen] = renamed;
      ids_[renamed] = gen;
    }
    auto [it, inserted] = ids_.emplace(name, uint32_t(d_.names.size()));
    if (inserted) {
      d_.names.push_back(name);
      d_.rules.emplace_back();
      defined_.push_back(false);
      generated_flag_.push_back(false);
      first_use_.push_back(used_at);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base) {
    std::string name;
    do name = base + "-" + std::to_string(++generated_[base]); while (ids_.count(name));
    const uint32_t id = rule_id(name, pos_);
    defined_[id] = true;
    generated_flag_[id] = true;
    return id;
  }

  uint32_t charset_id(CharSet cs) {
    cs.normalize();
    for (uint32_t i = 0; i < d_.charsets.size(); ++i)
      if (d_.charsets[i] == cs) return i;
    d_.charsets.push_back(std::move(cs));
    return uint32_t(d_.charsets.size() - 1);
  }

  GrammarElem single_char(uint32_t cp) { return {GrammarElem::Chars, charset_id({{{cp, cp}}, false})}; }

  void parse_rule() {
    const size_t name_at = pos_;
    current_ = parse_name();
    skip(false);
    if (src_.substr(pos_, 3) != "::=") expected("'::=' after rule name '" + current_ + "'");
    pos_ += 3;
    skip(true);
    const uint32_t id = rule_id(current_, name_at);
    if (defined_[id]) fail_at(name_at, "rule '" + current_ + "' is defined twice");
    defined_[id] = true;
    auto alts = parse_alternates(false);
    d_.rules[id] = std::move(alts);
    if (!at_end() && peek() != '\n') expected("'|', an element or the end of the line in rule '" + current_ + "'");
  }

  // Lenient extension: a rule may continue on a line that starts with '|'.
  bool continues_on_next_line() {
    size_t p = pos_;
    while (p < src_.size()) {
      const char c = src_[p];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') ++p;
      else if (c == '#') { while (p < src_.size() && src_[p] != '\n') ++p; }
      else break;
    }
    if (pos_ >= src_.size() || src_[pos_] != '\n' || p >= src_.size() || src_[p] != '|') return false;
    pos_ = p;
    return true;
  }

  std::vector<Seq> parse_alternates(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|' || (!nested && continues_on_next_line())) {
      ++pos_;
      skip(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    size_t last_start = 0;  // where the last item's elements begin in seq, for postfix operators
    bool have_item = false;
    while (!at_end()) {
      const char c = peek();
      const size_t item_at = pos_;
      if (c == '"') {
        last_start = seq.size();
        parse_literal(seq);
        have_item = true;
      } else if (c == '[') {
        last_start = seq.size();
        seq.push_back({GrammarElem::Chars, parse_class()});
        have_item = true;
      } else if (c == '.') {
        ++pos_;
        last_start = seq.size();
        seq.push_back({GrammarElem::Chars, charset_id({{}, true})});
        have_item = true;
      } else if (name_char(c)) {
        last_start = seq.size();
        const std::string name = parse_name();
        seq.push_back({GrammarElem::Rule, rule_id(name, item_at)});
        have_item = true;
      } else if (c == '(') {
        ++pos_;
        skip(true);
        const uint32_t group = new_rule(current_);
        auto alts = parse_alternates(true);
        if (peek() != ')') expected("')' to close the group opened at " + where(item_at));
        ++pos_;
        d_.rules[group] = std::move(alts);
        last_start = seq.size();
        seq.push_back({GrammarElem::Rule, group});
        have_item = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) fail_at(pos_, std::string("'") + c + "' must follow an element it repeats");
        uint32_t lo = 0, hi = kUnbounded;
        if (c == '*') { ++pos_; }
        else if (c == '+') { ++pos_; lo = 1; }
        else if (c == '?') { ++pos_; hi = 1; }
        else parse_braces(lo, hi);
        Seq item(seq.begin() + long(last_start), seq.end());
        seq.resize(last_start);
        repeat(seq, item, lo, hi, item_at);
      } else {
        break;
      }
      skip(nested);
    }
    return seq;
  }

  std::string where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; ++i) {
      if (src_[i] == '\n') { ++line; col = 1; } else if ((uint8_t(src_[i]) & 0xC0) != 0x80) { ++col; }
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }

  uint32_t parse_int() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepetition) fail_at(start, "repetition count above " + std::to_string(kMaxRepetition));
      ++pos_;
    }
    if (pos_ == start) expected("a number");
    return uint32_t(v);
  }

  void parse_braces(uint32_t& lo, uint32_t& hi) {
    const size_t open = pos_++;
    skip(false);
    lo = parse_int();
    skip(false);
    hi = lo;
    if (peek() == ',') {
      ++pos_;
      skip(false);
      hi = (peek() == '}') ? kUnbounded : parse_int();
      skip(false);
    }
    if (peek() != '}') expected("'}' to close the repetition opened at " + where(open));
    ++pos_;
    if (hi < lo) fail_at(open, "repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has max < min");
  }

  // item{lo,hi} -> item x lo, then either a self-recursive tail (unbounded) or hi-lo nested optionals.
  void repeat(Seq& seq, const Seq& item_seq, uint32_t lo, uint32_t hi, size_t at) {
    GrammarElem item = item_seq.size() == 1 ? item_seq[0] : GrammarElem{GrammarElem::Rule, 0};
    if (item_seq.size() != 1) {
      const uint32_t wrap = new_rule(current_);
      d_.rules[wrap] = {item_seq};
      item.value = wrap;
    }
    for (uint32_t i = 0; i < lo; ++i) seq.push_back(item);
    if (hi == kUnbounded) {
      const uint32_t tail = new_rule(current_);
      d_.rules[tail] = {{item, {GrammarElem::Rule, tail}}, {}};
      seq.push_back({GrammarElem::Rule, tail});
      return;
    }
    if (hi == lo) return;
    std::vector<uint32_t> opt;
    for (uint32_t i = lo; i < hi; ++i) opt.push_back(new_rule(current_));
    for (size_t i = 0; i < opt.size(); ++i) {
      Seq body{item};
      if (i + 1 < opt.size()) body.push_back({GrammarElem::Rule, opt[i + 1]});
      d_.rules[opt[i]] = {body, {}};
    }
    seq.push_back({GrammarElem::Rule, opt[0]});
  }

  // One source character, UTF-8 decoded, or an escape.
  uint32_t parse_char() {
    if (at_end()) expected("a character");
    const uint8_t b = uint8_t(src_[pos_]);
    if (b == '\\') return parse_escape();
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + size_t(len) > src_.size()) fail_at(pos_, "invalid UTF-8 in grammar");
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const uint8_t c = uint8_t(src_[pos_ + size_t(i)]);
      if ((c & 0xC0) != 0x80) fail_at(pos_, "invalid UTF-8 in grammar");
      cp = (cp << 6) | (c & 0x3F);
    }
    pos_ += size_t(len);
    return cp;
  }

  uint32_t parse_escape() {
    const size_t at = pos_++;
    if (at_end()) expected("an escape character after '\\'");
    const char c = src_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return uint32_t(c);
      case 'x': return parse_hex(2, at);
      case 'u': return parse_hex(4, at);
      case 'U': return parse_hex(8, at);
      default: fail_at(at, std::string("unknown escape '\\") + c + "' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH)");
    }
  }

  uint32_t parse_hex(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) expected(std::to_string(digits) + " hex digits for the escape at " + where(at));
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > 0x10FFFF) fail_at(at, "escape is above U+10FFFF");
    return v;
  }

  void parse_literal(Seq& seq) {
    const size_t open = pos_++;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') { pos_ = std::min(pos_, src_.size()); expected("'\"' to close the string opened at " + where(open)); }
      seq.push_back(single_char(parse_char()));
    }
    ++pos_;
  }

  uint32_t parse_class() {
    const size_t open = pos_++;
    CharSet cs;
    if (peek() == '^') { cs.negated = true; ++pos_; }
    while (peek() != ']') {
      if (at_end() || peek() == '\n') expected("']' to close the character class opened at " + where(open));
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
        const size_t dash = pos_++;
        hi = parse_char();
        if (hi < lo) fail_at(dash, "character range is reversed (end below start)");
      }
      cs.ranges.push_back({lo, hi});
    }
    ++pos_;
    return charset_id(std::move(cs));
  }

  std::string_view src_;
  size_t pos_ = 0;
  Grammar::Draft d_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<bool> generated_flag_;
  std::vector<size_t> first_use_;
  std::map<std::string, uint32_t> generated_;
  std::string current_;
};

}  // namespace

Grammar Grammar::parse(std::string_view gbnf) { return Parser(gbnf).run(); }

}  // namespace cera
