#include "cli/common_flags.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace cera::cli {

void add_model_flags(CLI::App& cmd, ModelFlags& f, bool model_required) {
  auto* m = cmd.add_option("-m,--model", f.engine.model_path, "model file (GGUF)");
  if (model_required) m->required();
  cmd.add_option("-t,--threads", f.engine.n_threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd.add_option("-c,--ctx-size", f.engine.n_ctx, "context size in tokens")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("-b,--batch-size", f.engine.n_batch, "largest prompt chunk processed in one step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::NotFound, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> parse_token_ids(const std::string& list) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      throw Error(ErrorCode::InvalidArgument, "bad token id '" + item + "' in --token-ids (expected e.g. 1,2,3)");
    ids.push_back(v);
    start = end + 1;
  }
  return ids;
}

}  // namespace cera::cli
