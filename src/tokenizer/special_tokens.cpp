#include "tokenizer/special_tokens.h"

namespace cera {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const VocabSpec& spec) {
  nodes_.emplace_back();  // root
  flags_.resize(spec.tokens.size());
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const auto type = id < spec.token_types.size() ? static_cast<TokenType>(spec.token_types[id]) : TokenType::Normal;
    if (type != TokenType::Control && type != TokenType::Unknown && type != TokenType::UserDefined) continue;
    const std::string& text = spec.tokens[id];
    if (text.empty()) continue;
    int32_t node = 0;
    for (char ch : text) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(b, next);
        nodes_.emplace_back();
      }
      node = next;
    }
    // Two ids with the same text: keep the first, like a text -> id lookup would.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(id);
      nodes_[node].always = type == TokenType::UserDefined;
    }
    first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
  for (const auto& [id, f] : spec.added_token_flags) {
    if (id >= 0 && static_cast<size_t>(id) < flags_.size()) flags_[id] = {f.lstrip, f.rstrip};
  }
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes_[node].children)
    if (b == byte) return next;
  return -1;
}

size_t SpecialTokenMatcher::match_at(std::string_view text, size_t pos, bool parse_special,
                                     int32_t& token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    const Node& n = nodes_[node];
    if (n.token >= 0 && (parse_special || n.always)) {
      best = i + 1 - pos;
      token = n.token;
    }
  }
  return best;
}

void SpecialTokenMatcher::partition(std::string_view text, bool parse_special,
                                    std::vector<TextFragment>& out) const {
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t token = -1;
    const size_t len = first_byte_[static_cast<uint8_t>(text[pos])] ? match_at(text, pos, parse_special, token) : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t plain_end = pos;
    if (flags_[token].lstrip)
      while (plain_end > plain_start && is_space(text[plain_end - 1])) --plain_end;
    if (plain_end > plain_start) out.push_back({-1, text.substr(plain_start, plain_end - plain_start)});
    out.push_back({token, text.substr(pos, len)});
    pos += len;
    if (flags_[token].rstrip)
      while (pos < text.size() && is_space(text[pos])) ++pos;
    plain_start = pos;
  }
  if (plain_start < text.size()) out.push_back({-1, text.substr(plain_start)});
}

}  // namespace cera
