#include "chat/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "cera/error.h"
#include "chat/jinja/builtins.h"

namespace cera::chat::jinja {

namespace {

// Variables visible at one point: a chain of frames. for loops and macro calls push a frame
// (so their `set`s stay local, as in Jinja); if/else does not.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

std::string where(Pos p) {
  return "chat template error at line " + std::to_string(p.line) + ", column " + std::to_string(p.column) + ": ";
}

// Python's floor division and modulo for ints (round toward negative infinity).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

class Interpreter {
 public:
  Interpreter(const Template& t, const RenderLimits& limits) : tmpl_(t), limits_(limits) {}

  std::string run(const Value& context) {
    stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    auto globals = std::make_shared<Scope>();
    const Value g = make_globals();
    for (const auto& [k, v] : g.as_dict().items) globals->vars[k] = v;
    root_ = std::make_shared<Scope>();
    root_->parent = globals;
    if (context.is_dict())
      for (const auto& [k, v] : context.as_dict().items) root_->vars[k] = v;
    scope_ = root_;
    std::string out;
    out_ = &out;
    exec_body(tmpl_.body);
    return out;
  }

 private:
  // --- statements ---
  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  void step(Pos p) {
    if (++steps_ > limits_.max_steps)
      throw Error(ErrorCode::InvalidArgument, where(p) + "template exceeded its execution budget (endless loop?)");
  }

  void emit(const std::string& s, Pos p) {
    out_->append(s);
    if (out_->size() > limits_.max_output_bytes)
      throw Error(ErrorCode::InvalidArgument, where(p) + "template output exceeds " +
                                                  std::to_string(limits_.max_output_bytes) + " bytes");
  }

  // Bounds the C++ recursion of exec/eval together: macro recursion times expression height
  // could otherwise outgrow the thread's stack.
  struct NestGuard {
    Interpreter& in;
    NestGuard(Interpreter& i, Pos p) : in(i) {
      const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      const uintptr_t used = in.stack_base_ > here ? in.stack_base_ - here : here - in.stack_base_;
      if (++in.nesting_ > in.limits_.max_nesting || used > in.limits_.max_stack_bytes)
        throw Error(ErrorCode::InvalidArgument, where(p) + "template evaluation nested too deeply (limit " +
                                                    std::to_string(in.limits_.max_nesting) + ")");
    }
    ~NestGuard() { --in.nesting_; }
  };

  Flow exec(const Stmt& s) {
    step(s.pos);
    NestGuard nest(*this, s.pos);
    try {
      return exec_inner(s);
    } catch (const RuntimeError& e) {
      throw Error(ErrorCode::InvalidArgument, where(s.pos) + e.what());
    }
  }

  Flow exec_inner(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::Text: emit(s.text, s.pos); return Flow::Normal;
      case Stmt::Kind::Output: emit(eval(*s.expr).str(), s.pos); return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond).truthy()) return exec_body(body);
        return exec_body(s.else_body);
      case Stmt::Kind::For: return exec_for(s);
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) {
          const Value* ns = scope_->lookup(s.targets[0]);
          if (!ns || !ns->is_namespace())
            runtime_error("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace()");
          ns->as_dict().set(s.attr, std::move(v));
        } else {
          assign(s.targets, v);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: scope_->vars[s.targets[0]] = Value(capture(s.body)); return Flow::Normal;
      case Stmt::Kind::Macro: scope_->vars[s.text] = make_macro(s, scope_); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        // caller() renders the block body in the scope of the call site.
        Value caller = make_macro(s, scope_);
        const Expr& call = *s.expr;
        Value fn = eval(*call.args[0]);
        CallArgs args = eval_args(call);
        args.named.emplace_back("caller", caller);
        emit(invoke(fn, args, call.args[0]->name).str(), s.pos);
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        Value v = Value(capture(s.body));
        emit(apply_filter_chain(*s.expr, v).str(), s.pos);
        return Flow::Normal;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // The filter chain of a {% filter %} block, with the body's text as the innermost input.
  Value apply_filter_chain(const Expr& f, const Value& input) {
    Value in = f.args[0]->kind == Expr::Kind::Filter ? apply_filter_chain(*f.args[0], input) : input;
    return call_filter(f, in);
  }

  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope_->vars[targets[0]] = v;
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size())
      runtime_error("cannot unpack " + std::to_string(items.size()) + " values into " +
                    std::to_string(targets.size()) + " variables");
    for (size_t i = 0; i < targets.size(); ++i) scope_->vars[targets[i]] = items[i];
  }

  struct ScopeGuard {
    Interpreter& in;
    ScopePtr saved;
    ScopeGuard(Interpreter& i, ScopePtr next) : in(i), saved(i.scope_) { in.scope_ = std::move(next); }
    ~ScopeGuard() { in.scope_ = saved; }
  };

  Flow exec_for(const Stmt& s) {
    Value iterable = eval(*s.expr);
    if (iterable.is_none()) runtime_error("cannot iterate over none");
    List items = iterate(iterable);
    auto frame = std::make_shared<Scope>();
    frame->parent = scope_;
    ScopeGuard guard(*this, frame);
    if (s.filter) {
      List kept;
      for (const auto& item : items) {
        step(s.pos);
        assign(s.targets, item);
        if (eval(*s.filter).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      ScopeGuard outer(*this, guard.saved);  // the else branch runs in the enclosing scope
      return exec_body(s.else_body);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.pos);
      assign(s.targets, items[i]);
      Value loop = Value::dict();
      Dict& d = loop.as_dict();
      d.items = {{"index", Value(i + 1)},
                 {"index0", Value(i)},
                 {"revindex", Value(n - i)},
                 {"revindex0", Value(n - i - 1)},
                 {"first", Value(i == 0)},
                 {"last", Value(i == n - 1)},
                 {"length", Value(n)},
                 {"depth", Value(1)},
                 {"depth0", Value(0)},
                 {"previtem", i > 0 ? items[i - 1] : Value()},
                 {"nextitem", i + 1 < n ? items[i + 1] : Value()}};
      auto cycle = std::make_shared<Callable>();
      cycle->name = "loop.cycle";
      cycle->fn = [i](CallArgs& a) -> Value {
        if (a.positional.empty()) runtime_error("loop.cycle() needs at least one argument");
        return a.positional[static_cast<size_t>(i) % a.positional.size()];
      };
      d.items.emplace_back("cycle", Value(cycle));
      frame->vars["loop"] = loop;
      const Flow f = exec_body(s.body);
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value make_macro(const Stmt& s, const ScopePtr& defined_in) {
    auto c = std::make_shared<Callable>();
    c->name = s.kind == Stmt::Kind::Macro ? s.text : "caller";
    std::weak_ptr<Scope> weak = defined_in;  // weak: the scope holds the macro, avoid a cycle
    const Stmt* stmt = &s;
    c->fn = [this, stmt, weak](CallArgs& args) -> Value {
      if (depth_ >= limits_.max_call_depth)
        runtime_error("macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                      " (endless recursion?)");
      auto frame = std::make_shared<Scope>();
      ScopePtr parent = weak.lock();
      frame->parent = parent ? parent : root_;
      const auto& params = stmt->params;
      if (args.positional.size() > params.size())
        runtime_error("macro '" + (stmt->kind == Stmt::Kind::Macro ? stmt->text : std::string("caller")) +
                      "' takes " + std::to_string(params.size()) + " arguments, got " +
                      std::to_string(args.positional.size()));
      ScopeGuard guard(*this, frame);
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& [name, def] = params[i];
        if (i < args.positional.size()) frame->vars[name] = args.positional[i];
        else frame->vars[name] = def ? eval(*def) : Value();
      }
      for (const auto& [k, v] : args.named) {
        bool known = k == "caller";
        for (const auto& p : params) known |= p.first == k;
        if (!known) runtime_error("macro '" + stmt->text + "' has no parameter '" + k + "'");
        frame->vars[k] = v;
      }
      ++depth_;
      std::string result;
      try {
        result = capture(stmt->body);
      } catch (...) {
        --depth_;
        throw;
      }
      --depth_;
      return Value(std::move(result));
    };
    return Value(c);
  }

  // --- expressions ---
  Value eval(const Expr& e) {
    NestGuard nest(*this, e.pos);
    try {
      return eval_inner(e);
    } catch (const RuntimeError& err) {
      throw Error(ErrorCode::InvalidArgument, where(e.pos) + err.what());
    }
  }

  CallArgs eval_args(const Expr& e, size_t first = 1) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.named.emplace_back(k, eval(*v));
    return a;
  }

  Value invoke(const Value& fn, CallArgs& args, const std::string& name) {
    if (!fn.is_callable()) {
      const std::string what = name.empty() ? std::string("a ") + fn.type_name() : "'" + name + "'";
      runtime_error(what + (fn.is_undefined() ? " is undefined" : " is not callable"));
    }
    return fn.as_callable().fn(args);
  }

  Value call_filter(const Expr& f, const Value& input) {
    CallArgs args = eval_args(f);
    return find_filter(f.name)(input, args);
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope_->lookup(e.name);
        return v ? *v : Value();
      }
      case Expr::Kind::ListLit: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return Value::list(std::move(l));
      }
      case Expr::Kind::DictLit: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          d.as_dict().set(k.is_string() ? k.as_string() : k.str(), eval(*e.args[i + 1]));
        }
        return d;
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_bool()) v = Value(static_cast<int64_t>(v.as_bool()));
        if (!v.is_number()) runtime_error(std::string("bad operand type for unary ") + e.name + ": " + v.type_name());
        if (e.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_float());
      }
      case Expr::Kind::Binary: {
        if (e.name == "and") {
          Value a = eval(*e.args[0]);
          return a.truthy() ? eval(*e.args[1]) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.args[0]);
          return a.truthy() ? a : eval(*e.args[1]);
        }
        return binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Ternary:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      case Expr::Kind::Attr: {
        Value obj = eval(*e.args[0]);
        if (obj.is_dict()) {
          const Value* v = obj.as_dict().find(e.name);
          return v ? *v : Value();
        }
        return Value();  // Jinja: a missing attribute is undefined, not an error
      }
      case Expr::Kind::Subscript: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::Slice: return slice(e);
      case Expr::Kind::Call: {
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::Kind::Attr) {
          Value obj = eval(*callee.args[0]);
          CallArgs args = eval_args(e);
          bool found = false;
          Value r = call_method(obj, callee.name, args, &found);
          if (found) return r;
          Value fn = obj.is_dict() ? get_item(obj, Value(callee.name)) : Value();
          if (!fn.is_callable())
            runtime_error(std::string(obj.type_name()) + " has no method '" + callee.name + "'");
          return invoke(fn, args, callee.name);
        }
        Value fn = eval(callee);
        CallArgs args = eval_args(e);
        return invoke(fn, args, callee.kind == Expr::Kind::Name ? callee.name : "");
      }
      case Expr::Kind::Filter: return call_filter(e, eval(*e.args[0]));
      case Expr::Kind::Test: {
        Value v = eval(*e.args[0]);
        CallArgs args = eval_args(e);
        const bool r = find_test(e.name)(v, args);
        return Value(e.negated ? !r : r);
      }
    }
    return Value();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    auto part = [&](const ExprPtr& p) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      Value v = eval(*p);
      if (v.is_none() || v.is_undefined()) return std::nullopt;
      if (!v.is_int() && !v.is_bool()) runtime_error("slice indices must be integers");
      return v.as_int();
    };
    const auto start = part(e.args[1]), stop = part(e.args[2]), step_v = part(e.args[3]);
    const int64_t step = step_v.value_or(1);
    if (step == 0) runtime_error("slice step cannot be zero");
    List src;
    std::vector<std::string> chars;
    if (obj.is_list()) src = obj.as_list();
    else if (obj.is_string()) chars = utf8_chars(obj.as_string());
    else runtime_error(std::string("cannot slice a ") + obj.type_name());
    const int64_t n = obj.is_list() ? static_cast<int64_t>(src.size()) : static_cast<int64_t>(chars.size());
    // Python's slice.indices()
    auto clamp = [&](std::optional<int64_t> v, int64_t def) {
      if (!v) return def;
      int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t lo = clamp(start, step > 0 ? 0 : n - 1), hi = clamp(stop, step > 0 ? n : -1);
    List out;
    std::string s;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      if (obj.is_list()) out.push_back(src[static_cast<size_t>(i)]);
      else s += chars[static_cast<size_t>(i)];
    }
    return obj.is_list() ? Value::list(std::move(out)) : Value(std::move(s));
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return values_equal(a, b);
    if (op == "!=") return !values_equal(a, b);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) runtime_error(std::string("'in <string>' requires a string, not ") + a.type_name());
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.is_list()) {
        for (const auto& x : b.as_list()) if (values_equal(a, x)) { found = true; break; }
      } else if (b.is_dict()) {
        found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
      } else if (b.is_undefined()) {
        found = false;
      } else {
        runtime_error(std::string("argument of type ") + b.type_name() + " is not iterable");
      }
      return op == "in" ? found : !found;
    }
    const int c = compare_values(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") return Value(a.str() + b.str());
    const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list()) {
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))) return repeat(a, b.as_int());
    if (op == "*" && ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))) return repeat(b, a.as_int());
    if (!an || !bn)
      runtime_error(std::string("unsupported operand types for ") + op + ": " + a.type_name() + " and " + b.type_name());
    const bool ints = !a.is_float() && !b.is_float();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_float(), fy = b.as_float();
    int64_t r = 0;
    if (op == "+") return ints && !__builtin_add_overflow(x, y, &r) ? Value(r) : Value(fx + fy);
    if (op == "-") return ints && !__builtin_sub_overflow(x, y, &r) ? Value(r) : Value(fx - fy);
    if (op == "*") return ints && !__builtin_mul_overflow(x, y, &r) ? Value(r) : Value(fx * fy);
    if (op == "/") {
      if (fy == 0) runtime_error("division by zero");
      return Value(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0) runtime_error(op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) return op == "//" ? Value(-fx) : Value(int64_t{0});
        return op == "//" ? Value(floor_div(x, y)) : Value(py_mod(x, y));
      }
      const double q = std::floor(fx / fy);
      return op == "//" ? Value(q) : Value(fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t acc = 1;
        bool overflow = false;
        for (int64_t i = 0; i < y && !overflow; ++i) {
          overflow = __builtin_mul_overflow(acc, x, &acc);
          if (acc == 0 || acc == 1) break;  // 0**n, 1**n: avoid looping to a huge n
          if (acc == -1) { acc = (y % 2) ? -1 : 1; break; }
        }
        if (!overflow) return Value(acc);
      }
      return Value(std::pow(fx, fy));
    }
    runtime_error("unknown operator " + op);
  }

  Value repeat(const Value& v, int64_t n) {
    if (n <= 0) return v.is_string() ? Value(std::string()) : Value::list();
    const size_t unit = v.is_string() ? v.as_string().size() : v.as_list().size();
    if (unit != 0 && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit)
      runtime_error("repetition result too large");
    if (v.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += v.as_string();
      return Value(std::move(s));
    }
    List l;
    for (int64_t i = 0; i < n; ++i) l.insert(l.end(), v.as_list().begin(), v.as_list().end());
    return Value::list(std::move(l));
  }

  const Template& tmpl_;
  RenderLimits limits_;
  ScopePtr root_;
  ScopePtr scope_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int nesting_ = 0;
  uintptr_t stack_base_ = 0;
};

}  // namespace

std::string render(const Template& tmpl, const Value& context, const RenderLimits& limits) {
  return Interpreter(tmpl, limits).run(context);
}

}  // namespace cera::chat::jinja
