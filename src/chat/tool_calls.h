// Tool calls in model output, for the two formats cera's chat templates produce:
//   LFM2:   <|tool_call_start|>[name(arg="v", n=3, flag=True, obj={"a": 1}), other()]<|tool_call_end|>
//           (a Python list of calls with keyword arguments and Python literals; a JSON list of
//           {"name", "arguments"} objects inside the markers is accepted too)
//   Hermes: <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>   (Qwen 2.5/3, Hermes)
//           ("arguments" may also be a string holding JSON, or be called "parameters")
// Text outside the markers is content. A block that does not parse is reported as an error and kept,
// markers included, in the content: never an exception, whatever the bytes.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace cera::chat {

enum class ToolCallFormat { Lfm2, Hermes };

struct ToolCall {
  std::string name;
  nlohmann::json arguments;  // always an object
  std::string raw;           // the call's own source text, e.g. `f(x=1)` or the JSON object
};

struct ToolCallError {
  size_t position;  // byte offset in the whole text where the problem was found
  std::string message;
};

struct ToolCallResult {
  std::string content;  // text outside the tool-call blocks (malformed blocks included verbatim)
  std::vector<ToolCall> calls;
  std::vector<ToolCallError> errors;
};

// The whole output at once; the same as one push() and finish() of the streaming parser.
ToolCallResult parse_tool_calls(std::string_view text, ToolCallFormat format);

// For streaming: feed text pieces as they are generated. Content comes out as soon as it cannot be
// the start of a tool-call marker (a partial marker is held back, never emitted); a call comes out
// when its end marker arrives.
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format);
  ToolCallResult push(std::string_view piece);
  // End of generation: held-back content, and an error for a block that was never closed (its text
  // goes to content).
  ToolCallResult finish();
  bool in_tool_call() const { return in_call_; }

 private:
  void drain(ToolCallResult& out);
  void handle_block(std::string_view inner, ToolCallResult& out);

  ToolCallFormat format_;
  std::string start_, end_;
  std::string buf_;        // unconsumed text: held content tail, or the open block after the marker
  size_t buf_offset_ = 0;  // absolute offset of buf_[0]
  size_t block_start_ = 0; // absolute offset of the open block's start marker
  size_t scanned_ = 0;     // inside a block: bytes of buf_ already searched for the end marker
  bool in_call_ = false;
};

// Python literal (str with ' " ''' """ and escapes, int, float, True/False/None, list, tuple, dict)
// at text[pos], as JSON; advances pos. Throws ToolCallError on bad input. Exposed for tests.
nlohmann::json parse_python_literal(std::string_view text, size_t& pos);

}  // namespace cera::chat
