// `cera quantize IN.gguf OUT.gguf TYPE`: write a quantized copy of a GGUF model, choosing
// per-tensor types the way llama-quantize does for the same TYPE.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cera/error.h"
#include "cli/commands.h"
#include "format/quantize_model.h"

namespace cera::cli {

namespace {

struct QuantizeFlags {
  std::string input, output, type;
  bool pure = false;
  bool allow_requantize = false;
  int threads = 0;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string type_list() {
  std::string s;
  for (const auto& m : quant::all_mixes()) {
    char line[160];
    std::snprintf(line, sizeof line, "\n  %-7s %s", std::string(m.name).c_str(), std::string(m.description).c_str());
    s += line;
  }
  return s + "\n  (Q3_K, Q4_K, Q5_K are accepted as short names for the _M mixes, as in llama-quantize)";
}

// One line redrawn in place; only drawn when stderr is a terminal, at most ~10 times a second.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(const quant::QuantizeProgress& p) {
    if (!enabled_ || p.elements_total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    const bool finished = p.elements_done >= p.elements_total;
    if (!finished && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = double(p.elements_done) / double(p.elements_total);
    constexpr int kWidth = 30;
    const int filled = int(frac * kWidth);
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    char eta[32] = "";
    if (frac > 0.02 && !finished) std::snprintf(eta, sizeof eta, ", ETA %.0fs", elapsed * (1 - frac) / frac);
    std::fprintf(stderr, "\r[%s] %3d%%  %4.0fs%-10s %zu/%zu  %-36.36s", bar.c_str(), int(frac * 100 + 0.5), elapsed, eta,
                 std::min(p.tensor_index + 1, p.n_tensors), p.n_tensors, std::string(p.tensor_name).c_str());
    drawn_ = true;
    std::fflush(stderr);
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r%*s\r", 110, "");
    drawn_ = false;
  }

 private:
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* cmd = app.add_subcommand("quantize", "write a quantized copy of a GGUF model (llama-quantize's mixes)");
  cmd->add_option("input", f->input, "source GGUF (F32/F16/BF16; quantized needs --allow-requantize)")->required();
  cmd->add_option("output", f->output, "GGUF file to write")->required();
  cmd->add_option("type", f->type, "target type or mix, one of:" + type_list())->required();
  cmd->add_flag("--pure", f->pure, "no mix rules: every quantizable tensor gets TYPE (rows that do not fit fall back)");
  cmd->add_flag("--allow-requantize", f->allow_requantize,
                "accept an already-quantized input (quality suffers: errors of both quantizations add up)");
  cmd->add_option("-t,--threads", f->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  return {cmd, [f]() {
            const auto mix = quant::mix_from_name(f->type);
            if (!mix)
              throw Error(ErrorCode::InvalidArgument,
                          "unknown quantization type '" + f->type + "'; valid types: " + quant::mix_names_joined());
            ProgressBar bar(isatty(STDERR_FILENO) != 0);
            quant::QuantizeOptions o;
            o.mix = *mix;
            o.pure = f->pure;
            o.allow_requantize = f->allow_requantize;
            o.n_threads = f->threads;
            o.on_progress = [&bar](const quant::QuantizeProgress& p) { bar.update(p); };
            o.on_warning = [&bar](const std::string& msg) {
              bar.finish();
              std::fprintf(stderr, "cera: warning: %s\n", msg.c_str());
            };
            quant::QuantizeReport r;
            try {
              r = quant::quantize_model(f->input, f->output, o);
            } catch (...) {
              bar.finish();
              throw;
            }
            bar.finish();
            std::fprintf(stderr, "%s -> %s (%s): %s -> %s (%.1f%%), %zu of %zu tensors converted%s, %.1f s\n",
                         f->input.c_str(), f->output.c_str(), std::string(quant::mix_info(*mix).name).c_str(),
                         human_bytes(double(r.input_bytes)).c_str(), human_bytes(double(r.output_bytes)).c_str(),
                         100.0 * double(r.output_bytes) / double(r.input_bytes), r.n_converted, r.n_tensors,
                         r.n_fallback ? (", " + std::to_string(r.n_fallback) + " with fallback types").c_str() : "",
                         r.seconds);
            return 0;
          }};
}

}  // namespace cera::cli
