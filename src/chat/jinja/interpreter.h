// Tree-walking evaluation of a parsed template against a context of variables.
#pragma once

#include <string>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace cera::chat::jinja {

struct RenderLimits {
  int max_call_depth = 64;                    // nested macro calls (recursion guard)
  int max_nesting = 2000;                     // nested statement + expression evaluation
  size_t max_stack_bytes = 2u << 20;          // C++ stack the evaluation may use (frames are ~1 KB,
                                              // ~9 KB under ASan); lower it on small-stack threads
  uint64_t max_steps = 50'000'000;            // statements + loop iterations: no runaway loops
  size_t max_output_bytes = 256u << 20;       // a template cannot build unbounded strings
};

// Renders `tmpl` with the variables of `context` (a dict; other kinds mean no variables).
// Errors: cera::Error(InvalidArgument) for raise_exception() (its message) and for runtime errors
// (type mismatches, calling an undefined name, limits), prefixed with the template position.
std::string render(const Template& tmpl, const Value& context, const RenderLimits& limits = {});

// The globals every template sees: range, namespace, dict, raise_exception, strftime_now.
Value make_globals();

}  // namespace cera::chat::jinja
