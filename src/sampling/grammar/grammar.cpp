#include "sampling/grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "cera/error.h"

namespace cera {

bool CharSet::contains(uint32_t cp) const {
  // Ranges are sorted and disjoint: the last range starting at or before cp decides.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CharRange& r) { return v < r.lo; });
  const bool in = it != ranges.begin() && cp <= std::prev(it)->hi;
  return in != negated;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const CharRange& r : ranges)
      if (r.lo <= hi && lo <= r.hi) return true;
    return false;
  }
  // Negated: [lo, hi] must not be covered entirely by one merged range.
  for (const CharRange& r : ranges)
    if (r.lo <= lo && hi <= r.hi) return false;
  return true;
}

bool CharSet::covers(uint32_t lo, uint32_t hi) const {
  if (negated) {
    for (const CharRange& r : ranges)
      if (r.lo <= hi && lo <= r.hi) return false;
    return true;
  }
  for (const CharRange& r : ranges)
    if (r.lo <= lo && hi <= r.hi) return true;
  return false;
}

void CharSet::normalize() {
  std::sort(ranges.begin(), ranges.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> merged;
  for (const CharRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  ranges = std::move(merged);
}

namespace {

// Left recursion would make the matcher's rule expansion loop forever, so it is refused up front:
// a rule must not reach itself through a chain of leading elements that can all match nothing.
void check_left_recursion(const Grammar::Draft& d) {
  const size_t n = d.rules.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : d.rules[r]) {
        const bool all = std::all_of(alt.begin(), alt.end(), [&](const GrammarElem& e) {
          return e.kind == GrammarElem::Rule && nullable[e.value];
        });
        if (all) { nullable[r] = true; changed = true; break; }
      }
    }
  }
  // Edges r -> s: s can be the first thing r matches.
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& alt : d.rules[r])
      for (const GrammarElem& e : alt) {
        if (e.kind != GrammarElem::Rule) break;
        first[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
  // Iterative DFS with colours; a grey target closes a cycle, reported as a path of rule names.
  std::vector<uint8_t> colour(n, 0);
  std::vector<uint32_t> path;
  std::vector<size_t> next_edge;
  for (uint32_t start = 0; start < n; ++start) {
    if (colour[start]) continue;
    path = {start};
    next_edge = {0};
    colour[start] = 1;
    while (!path.empty()) {
      const uint32_t r = path.back();
      if (next_edge.back() == first[r].size()) {
        colour[r] = 2;
        path.pop_back();
        next_edge.pop_back();
        continue;
      }
      const uint32_t s = first[r][next_edge.back()++];
      if (colour[s] == 1) {
        std::string msg = "grammar: left recursion: ";
        auto it = std::find(path.begin(), path.end(), s);
        for (; it != path.end(); ++it) msg += d.names[*it] + " -> ";
        msg += d.names[s] +
               " (a rule reaches itself before matching any character; rewrite it with repetition, "
               "and make sure nothing repeated with * + {m,} can match the empty string)";
        throw Error(ErrorCode::InvalidArgument, msg);
      }
      if (colour[s] == 0) {
        colour[s] = 1;
        path.push_back(s);
        next_edge.push_back(0);
      }
    }
  }
}

void append_char(std::string& out, uint32_t cp, bool in_class) {
  if (cp == '"' && !in_class) { out += "\\\""; return; }
  if (in_class && (cp == ']' || cp == '-' || cp == '^')) { out += '\\'; out += char(cp); return; }
  if (cp == '\\') { out += "\\\\"; return; }
  if (cp == '\n') { out += "\\n"; return; }
  if (cp == '\t') { out += "\\t"; return; }
  if (cp == '\r') { out += "\\r"; return; }
  char buf[16];
  if (cp < 0x20 || cp == 0x7F) { std::snprintf(buf, sizeof buf, "\\x%02X", cp); out += buf; return; }
  if (cp < 0x80) { out += char(cp); return; }
  std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
  out += buf;
}

}  // namespace

Grammar Grammar::from_draft(Draft d) {
  check_left_recursion(d);
  Grammar g;
  g.names_ = std::move(d.names);
  g.charsets_ = std::move(d.charsets);
  g.root_ = d.root;
  g.rule_alts_.push_back(0);
  for (const auto& rule : d.rules) {
    for (size_t a = 0; a < rule.size(); ++a) {
      g.alt_starts_.push_back(uint32_t(g.elems_.size()));
      g.elems_.insert(g.elems_.end(), rule[a].begin(), rule[a].end());
      g.elems_.push_back({a + 1 == rule.size() ? GrammarElem::End : GrammarElem::Alt, 0});
    }
    g.rule_alts_.push_back(uint32_t(g.alt_starts_.size()));
  }
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  for (uint32_t r = 0; r < n_rules(); ++r) {
    out += names_[r] + " ::=";
    bool first_alt = true;
    for (uint32_t start : alternatives(r)) {
      if (!first_alt) out += " |";
      first_alt = false;
      // An empty alternative is written "" so that a trailing '|' does not run into the next line.
      if (elems_[start].kind == GrammarElem::End || elems_[start].kind == GrammarElem::Alt) out += " \"\"";
      for (uint32_t i = start; elems_[i].kind != GrammarElem::End && elems_[i].kind != GrammarElem::Alt; ++i) {
        out += ' ';
        const GrammarElem& e = elems_[i];
        if (e.kind == GrammarElem::Rule) { out += names_[e.value]; continue; }
        const CharSet& cs = charsets_[e.value];
        if (cs.negated && cs.ranges.empty()) { out += '.'; continue; }
        if (!cs.negated && cs.ranges.size() == 1 && cs.ranges[0].lo == cs.ranges[0].hi) {
          out += '"';
          append_char(out, cs.ranges[0].lo, false);
          out += '"';
          continue;
        }
        out += cs.negated ? "[^" : "[";
        for (const CharRange& cr : cs.ranges) {
          append_char(out, cr.lo, true);
          if (cr.hi != cr.lo) { out += '-'; append_char(out, cr.hi, true); }
        }
        out += ']';
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace cera
