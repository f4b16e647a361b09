// Functions every template can call: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>

#include "cera/error.h"
#include "chat/jinja/interpreter.h"

namespace cera::chat::jinja {

namespace {

constexpr int64_t kMaxRange = 1 << 20;  // range() results are materialized; keep them bounded

Value fn(const char* name, std::function<Value(CallArgs&)> f) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->fn = std::move(f);
  return Value(c);
}

Value range(CallArgs& a) {
  for (const auto& v : a.positional)
    if (!v.is_int() && !v.is_bool()) runtime_error("range() arguments must be integers");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) stop = a.positional[0].as_int();
  else if (a.positional.size() == 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
  else if (a.positional.size() == 3) start = a.positional[0].as_int(), stop = a.positional[1].as_int(), step = a.positional[2].as_int();
  else runtime_error("range() takes 1 to 3 arguments");
  if (step == 0) runtime_error("range() step must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) runtime_error("range() too large");
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

}  // namespace

Value make_globals() {
  Value g = Value::dict();
  Dict& d = g.as_dict();
  d.set("range", fn("range", range));
  d.set("namespace", fn("namespace", [](CallArgs& a) {
          Value ns = Value::namespace_();
          for (const auto& p : a.positional) {
            if (!p.is_dict()) runtime_error("namespace() takes a mapping or keyword arguments");
            for (const auto& [k, v] : p.as_dict().items) ns.as_dict().set(k, v);
          }
          for (const auto& [k, v] : a.named) ns.as_dict().set(k, v);
          return ns;
        }));
  d.set("dict", fn("dict", [](CallArgs& a) {
          Value out = Value::dict();
          for (const auto& p : a.positional)
            if (p.is_dict())
              for (const auto& [k, v] : p.as_dict().items) out.as_dict().set(k, v);
          for (const auto& [k, v] : a.named) out.as_dict().set(k, v);
          return out;
        }));
  // Not a RuntimeError: the template's own message is the whole error, no position prefix.
  d.set("raise_exception", fn("raise_exception", [](CallArgs& a) -> Value {
          throw Error(ErrorCode::InvalidArgument, "chat template raised an exception: " + a.get(0, "message").str());
        }));
  d.set("strftime_now", fn("strftime_now", [](CallArgs& a) {
          const std::string format = a.get(0, "format").str();
          const std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace cera::chat::jinja
