// The template syntax tree. Expressions and statements are small tagged structs: the kind says
// which fields are meaningful, which keeps the interpreter a pair of switch statements.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/lexer.h"
#include "chat/jinja/value.h"

namespace cera::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    ListLit,    // args: items
    DictLit,    // args: key0, value0, key1, value1, ...
    Unary,      // name: "-", "+" or "not"; args[0]
    Binary,     // name: operator (+ - * / // % ** ~ and or in "not in"); args[0], args[1]
    Compare,    // args: operands; ops: one comparison operator between each pair (a < b < c chains)
    Ternary,    // args: then, condition, else (else may be null: undefined)
    Attr,       // args[0].name
    Subscript,  // args[0][args[1]]
    Slice,      // args[0][args[1]:args[2]:args[3]], absent parts null
    Call,       // args[0](args[1..], kwargs)
    Filter,     // args[0] | name(args[1..], kwargs)
    Test,       // args[0] is [not] name(args[1..]); negated
  };
  Kind kind;
  Pos pos;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  int height = 1;  // of this subtree; the parser bounds it

  Expr(Kind k, Pos p) : kind(k), pos(p) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches: (condition, body)...; else_body
    For,          // targets in expr [if filter]: body; else_body
    Set,          // targets (or ns.attr via attr) = expr
    SetBlock,     // {% set name %}body{% endset %}
    Macro,        // name(params with defaults): body
    CallBlock,    // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter name(args) %}body{% endfilter %}: expr is a Filter whose input is ignored
    Break,
    Continue,
  };
  Kind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;                      // Output, If (unused), For iterable, Set value, CallBlock call
  ExprPtr filter;                    // For: `if` filter
  std::vector<std::string> targets;  // For / Set / SetBlock variable names
  std::string attr;                  // Set: `set targets[0].attr = ...`
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro / CallBlock: name, default (or null)

  Stmt(Kind k, Pos p) : kind(k), pos(p) {}
};

struct Template {
  Body body;
};

}  // namespace cera::chat::jinja
