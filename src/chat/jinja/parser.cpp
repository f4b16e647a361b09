#include "chat/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "cera/error.h"
#include "chat/jinja/builtins.h"

namespace cera::chat::jinja {

namespace {

// Nesting guard: a hostile template like "((((((...", 10k nested ifs or a 10k-term sum must not
// overflow the parser's or the interpreter's stack.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Template run() {
    Template tmpl;
    std::string end;
    tmpl.body = parse_body({}, &end, Pos{});
    return tmpl;
  }

 private:
  // --- token helpers ---
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() { if (i_ + 1 < t_.size()) ++i_; }
  bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::Name && cur().value == n; }
  bool accept_op(const char* op) { if (is_op(op)) { advance(); return true; } return false; }
  bool accept_name(const char* n) { if (is_name(n)) { advance(); return true; } return false; }

  [[noreturn]] void fail(Pos p, const std::string& msg) const {
    throw Error(ErrorCode::BadFormat, "chat template syntax error at line " + std::to_string(p.line) +
                                          ", column " + std::to_string(p.column) + ": " + msg);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::End: return "end of template";
      case TokenType::Text: return "template text";
      case TokenType::VarBegin: return "'{{'";
      case TokenType::VarEnd: return "'}}'";
      case TokenType::BlockBegin: return "'{%'";
      case TokenType::BlockEnd: return "'%}'";
      case TokenType::String: return "string literal";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(cur().pos, std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name(const char* what) {
    if (cur().type != TokenType::Name) fail(cur().pos, std::string("expected ") + what + ", got " + describe(cur()));
    std::string n = cur().value;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail(cur().pos, "expected '%}', got " + describe(cur()));
    advance();
  }

  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, Pos pos) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(pos, "template nested too deeply (limit " + std::to_string(kMaxDepth) + ")");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr node(Expr::Kind k, Pos p, std::vector<ExprPtr> args = {}) {
    auto e = std::make_unique<Expr>(k, p);
    e->args = std::move(args);
    return e;
  }
  // Bounds the tree height (not just the parser recursion): a left-deep chain of 10k '+' is built
  // iteratively but evaluated recursively.
  ExprPtr finish(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args) if (a) h = std::max(h, height(*a));
    for (const auto& [k, a] : e->kwargs) if (a) h = std::max(h, height(*a));
    e->height = h + 1;
    if (h + 1 > kMaxDepth) fail(e->pos, "expression nested too deeply (limit " + std::to_string(kMaxDepth) + ")");
    return e;
  }
  static int height(const Expr& e) { return e.height; }

  // --- statements ---
  // Parses statements until `{% <one of ends> ...`; leaves the cursor on that tag's name.
  Body parse_body(std::initializer_list<const char*> ends, std::string* found, Pos opened) {
    Body body;
    for (;;) {
      const Token& tk = cur();
      if (tk.type == TokenType::End) {
        if (ends.size() == 0) { *found = ""; return body; }
        fail(opened, std::string("unclosed block: expected '") + *(ends.end() - 1) + "' before the end of the template");
      }
      if (tk.type == TokenType::Text) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Text, tk.pos);
        s->text = tk.value;
        body.push_back(std::move(s));
        advance();
      } else if (tk.type == TokenType::VarBegin) {
        advance();
        auto s = std::make_unique<Stmt>(Stmt::Kind::Output, tk.pos);
        s->expr = parse_expression();
        if (cur().type != TokenType::VarEnd) fail(cur().pos, "expected '}}', got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (tk.type == TokenType::BlockBegin) {
        const Token& nm = peek();
        if (nm.type == TokenType::Name)
          for (const char* e : ends)
            if (nm.value == e) { advance(); *found = e; return body; }
        const Pos tag_pos = tk.pos;
        advance();
        parse_statement(body, tag_pos);
      } else {
        fail(tk.pos, "unexpected " + describe(tk));
      }
    }
  }

  void parse_statement(Body& out, Pos pos) {
    DepthGuard guard(*this, pos);
    const std::string tag = expect_name("a statement name");
    if (tag == "if") return out.push_back(parse_if(pos));
    if (tag == "for") return out.push_back(parse_for(pos));
    if (tag == "set") return out.push_back(parse_set(pos));
    if (tag == "macro") return out.push_back(parse_macro(pos));
    if (tag == "call") return out.push_back(parse_call_block(pos));
    if (tag == "filter") return out.push_back(parse_filter_block(pos));
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(pos, "'" + tag + "' outside of a for loop");
      expect_block_end();
      return out.push_back(std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, pos));
    }
    if (tag == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
      expect_block_end();
      std::string found;
      Body b = parse_body({"endgeneration"}, &found, pos);
      advance();
      expect_block_end();
      for (auto& s : b) out.push_back(std::move(s));
      return;
    }
    static const char* const known_ends[] = {"endif", "elif", "else", "endfor", "endset", "endmacro",
                                             "endcall", "endfilter", "endgeneration", "endraw"};
    for (const char* e : known_ends)
      if (tag == e) fail(pos, "unexpected '" + tag + "'");
    fail(pos, "unknown statement '" + tag + "'");
  }

  StmtPtr parse_if(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, pos);
    ExprPtr cond = parse_expression();
    expect_block_end();
    for (;;) {
      std::string found;
      Body b = parse_body({"elif", "else", "endif"}, &found, pos);
      advance();
      s->branches.emplace_back(std::move(cond), std::move(b));
      if (found == "elif") {
        cond = parse_expression();
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (found == "else") {
        s->else_body = parse_body({"endif"}, &found, pos);
        advance();
        expect_block_end();
      }
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do {
      names.push_back(expect_name("a variable name"));
    } while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, pos);
    s->targets = parse_targets();
    if (!accept_name("in")) fail(cur().pos, "expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_expression(false);
    if (accept_name("if")) s->filter = parse_expression(false);
    if (is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string found;
    s->body = parse_body({"else", "endfor"}, &found, pos);
    --loop_depth_;
    advance();
    expect_block_end();
    if (found == "else") {
      s->else_body = parse_body({"endfor"}, &found, pos);
      advance();
      expect_block_end();
    }
    return s;
  }

  StmtPtr parse_set(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Set, pos);
    s->targets.push_back(expect_name("a variable name"));
    if (accept_op(".")) {
      s->attr = expect_name("an attribute name");
    } else {
      while (accept_op(",")) s->targets.push_back(expect_name("a variable name"));
    }
    if (cur().type == TokenType::BlockEnd) {
      if (!s->attr.empty() || s->targets.size() != 1) fail(cur().pos, "expected '='");
      advance();
      s->kind = Stmt::Kind::SetBlock;
      std::string found;
      s->body = parse_body({"endset"}, &found, pos);
      advance();
      expect_block_end();
      return s;
    }
    expect_op("=");
    s->expr = parse_tuple_or_expression();
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!is_op(")")) {
      std::string name = expect_name("a parameter name");
      ExprPtr def;
      if (accept_op("=")) def = parse_expression();
      else if (!params.empty() && params.back().second) fail(cur().pos, "parameter without default after one with a default");
      params.emplace_back(std::move(name), std::move(def));
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  StmtPtr parse_macro(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, pos);
    s->text = expect_name("a macro name");
    parse_params(s->params);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string found;
    s->body = parse_body({"endmacro"}, &found, pos);
    loop_depth_ = saved;
    advance();
    if (cur().type == TokenType::Name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, pos);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) fail(s->expr->pos, "expected a call after 'call'");
    expect_block_end();
    std::string found;
    s->body = parse_body({"endcall"}, &found, pos);
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(Pos pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, pos);
    ExprPtr input = node(Expr::Kind::Literal, pos);  // replaced by the rendered body at run time
    s->expr = parse_filter(std::move(input));
    while (accept_op("|")) s->expr = parse_filter(std::move(s->expr));
    expect_block_end();
    std::string found;
    s->body = parse_body({"endfilter"}, &found, pos);
    advance();
    expect_block_end();
    return s;
  }

  // --- expressions ---
  ExprPtr parse_tuple_or_expression() {
    const Pos pos = cur().pos;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    std::vector<ExprPtr> items;
    items.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().type == TokenType::BlockEnd) break;
      items.push_back(parse_expression());
    }
    return finish(node(Expr::Kind::ListLit, pos, std::move(items)));
  }

  ExprPtr parse_expression(bool with_ternary = true) {
    DepthGuard guard(*this, cur().pos);
    ExprPtr e = parse_or();
    while (with_ternary && is_name("if")) {
      const Pos pos = cur().pos;
      advance();
      std::vector<ExprPtr> args;
      args.push_back(std::move(e));
      args.push_back(parse_or());
      args.push_back(accept_name("else") ? parse_expression() : nullptr);
      e = finish(node(Expr::Kind::Ternary, pos, std::move(args)));
    }
    return e;
  }

  ExprPtr binary(const std::string& op, Pos pos, ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> args;
    args.push_back(std::move(a));
    args.push_back(std::move(b));
    auto e = node(Expr::Kind::Binary, pos, std::move(args));
    e->name = op;
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Pos p = cur().pos;
      advance();
      e = binary("or", p, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Pos p = cur().pos;
      advance();
      e = binary("and", p, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Pos p = cur().pos;
      DepthGuard guard(*this, p);
      advance();
      std::vector<ExprPtr> args;
      args.push_back(parse_not());
      auto e = node(Expr::Kind::Unary, p, std::move(args));
      e->name = "not";
      return finish(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Pos pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    for (;;) {
      std::string op;
      if (cur().type == TokenType::Op &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::Name && peek().value == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (operands.empty()) operands.push_back(std::move(first));
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (operands.empty()) return first;
    auto e = node(Expr::Kind::Compare, pos, std::move(operands));
    e->ops = std::move(ops);
    return finish(std::move(e));
  }

  template <typename Next>
  ExprPtr left_assoc(std::initializer_list<const char*> ops, Next next) {
    ExprPtr e = (this->*next)();
    for (;;) {
      const char* matched = nullptr;
      for (const char* op : ops)
        if (is_op(op)) matched = op;
      if (!matched) return e;
      const Pos p = cur().pos;
      advance();
      e = binary(matched, p, std::move(e), (this->*next)());
    }
  }
  ExprPtr parse_math1() { return left_assoc({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return left_assoc({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return left_assoc({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const Pos p = cur().pos;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      DepthGuard guard(*this, p);
      std::string op = cur().value;
      advance();
      std::vector<ExprPtr> args;
      args.push_back(parse_unary(false));
      e = node(Expr::Kind::Unary, p, std::move(args));
      e->name = op;
      e = finish(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tk = cur();
    const Pos p = tk.pos;
    switch (tk.type) {
      case TokenType::Name: {
        const std::string& n = tk.value;
        auto lit = [&](Value v) { auto e = node(Expr::Kind::Literal, p); e->value = std::move(v); advance(); return finish(std::move(e)); };
        if (n == "true" || n == "True") return lit(Value(true));
        if (n == "false" || n == "False") return lit(Value(false));
        if (n == "none" || n == "None") return lit(Value::none());
        auto e = node(Expr::Kind::Name, p);
        e->name = n;
        advance();
        return finish(std::move(e));
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) {  // "a" "b" concatenates, as in Python
          s += cur().value;
          advance();
        }
        auto e = node(Expr::Kind::Literal, p);
        e->value = Value(std::move(s));
        return finish(std::move(e));
      }
      case TokenType::Int: case TokenType::Float: {
        auto e = node(Expr::Kind::Literal, p);
        e->value = tk.type == TokenType::Int ? Value(tk.int_value) : Value(tk.float_value);
        advance();
        return finish(std::move(e));
      }
      case TokenType::Op:
        if (tk.value == "(") {
          advance();
          if (accept_op(")")) return finish(node(Expr::Kind::ListLit, p));  // () -> empty tuple
          ExprPtr e = parse_expression();
          if (is_op(",")) {  // a tuple, which behaves as a list here
            std::vector<ExprPtr> items;
            items.push_back(std::move(e));
            while (accept_op(",")) {
              if (is_op(")")) break;
              items.push_back(parse_expression());
            }
            e = finish(node(Expr::Kind::ListLit, p, std::move(items)));
          }
          expect_op(")");
          return e;
        }
        if (tk.value == "[") {
          advance();
          std::vector<ExprPtr> items;
          while (!is_op("]")) {
            items.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return finish(node(Expr::Kind::ListLit, p, std::move(items)));
        }
        if (tk.value == "{") {
          advance();
          std::vector<ExprPtr> items;
          while (!is_op("}")) {
            items.push_back(parse_expression());
            expect_op(":");
            items.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return finish(node(Expr::Kind::DictLit, p, std::move(items)));
        }
        break;
      default: break;
    }
    fail(p, "unexpected " + describe(tk) + " in expression");
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail(cur().pos, "positional argument after keyword argument");
        call.args.push_back(parse_expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const Pos p = cur().pos;
      if (accept_op(".")) {
        if (cur().type == TokenType::Int) {  // foo.0 == foo[0]
          auto idx = node(Expr::Kind::Literal, cur().pos);
          idx->value = Value(cur().int_value);
          advance();
          std::vector<ExprPtr> args;
          args.push_back(std::move(e));
          args.push_back(finish(std::move(idx)));
          e = finish(node(Expr::Kind::Subscript, p, std::move(args)));
          continue;
        }
        auto a = node(Expr::Kind::Attr, p);
        a->name = expect_name("an attribute name");
        a->args.push_back(std::move(e));
        e = finish(std::move(a));
      } else if (accept_op("[")) {
        std::vector<ExprPtr> args;
        args.push_back(std::move(e));
        ExprPtr start = is_op(":") ? nullptr : parse_expression();
        if (accept_op(":")) {
          ExprPtr stop = (is_op(":") || is_op("]")) ? nullptr : parse_expression();
          ExprPtr step;
          if (accept_op(":")) step = is_op("]") ? nullptr : parse_expression();
          args.push_back(std::move(start));
          args.push_back(std::move(stop));
          args.push_back(std::move(step));
          expect_op("]");
          e = finish(node(Expr::Kind::Slice, p, std::move(args)));
        } else {
          args.push_back(std::move(start));
          expect_op("]");
          e = finish(node(Expr::Kind::Subscript, p, std::move(args)));
        }
      } else if (is_op("(")) {
        auto c = node(Expr::Kind::Call, p);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = finish(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr input) {
    const Pos p = cur().pos;
    auto f = node(Expr::Kind::Filter, p);
    f->name = expect_name("a filter name");
    if (!has_filter(f->name)) fail(p, "unknown filter '" + f->name + "'");
    f->args.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*f);
    return finish(std::move(f));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        const Pos p = cur().pos;
        advance();
        auto t = node(Expr::Kind::Test, p);
        t->negated = accept_name("not");
        const Pos np = cur().pos;
        t->name = expect_name("a test name");
        if (!has_test(t->name)) fail(np, "unknown test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == TokenType::Name && !is_name("else") && !is_name("or") && !is_name("and") &&
                    !is_name("if") && !is_name("is") && !is_name("in") && !is_name("not")) ||
                   cur().type == TokenType::String || cur().type == TokenType::Int ||
                   cur().type == TokenType::Float || is_op("[") || is_op("{")) {
          t->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        e = finish(std::move(t));
      } else if (is_op("(")) {
        e = parse_postfix(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse(const std::vector<Token>& tokens) {
  if (tokens.empty() || tokens.back().type != TokenType::End)
    throw Error(ErrorCode::Internal, "jinja parser: token stream without End token");
  return Parser(tokens).run();
}

Template parse_template(const std::string& source, const LexOptions& options) {
  return parse(tokenize(source, options));
}

}  // namespace cera::chat::jinja
