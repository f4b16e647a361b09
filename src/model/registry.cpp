// Architecture registry: `general.architecture` -> the model that runs it.
#include <functional>
#include <map>

#include "cera/error.h"
#include "model/dense.h"
#include "model/lfm2.h"
#include "model/model.h"

namespace cera {

using ModelFactory = std::function<std::unique_ptr<Model>(const gguf::File&, Backend&, const ModelOptions&)>;

static const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> r = {
      {"granite", make_dense_model},
      {"lfm2", make_lfm2_model},
      {"llama", make_dense_model},
      {"qwen2", make_dense_model},
      {"qwen3", make_dense_model},
  };
  return r;
}

std::unique_ptr<Model> load_model(const gguf::File& file, Backend& backend, const ModelOptions& options) {
  const std::string arch = file.get_string("general.architecture");
  auto it = registry().find(arch);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, _] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw Error(ErrorCode::Unsupported,
                file.path() + ": architecture '" + arch + "' is not supported (cera runs: " + known + ")");
  }
  return it->second(file, backend, options);
}

}  // namespace cera

namespace cera {

void Model::check_outputs(int32_t n_outputs) const {
  if (n_outputs > max_output_rows_)
    throw Error(ErrorCode::Internal, "a step asks for " + std::to_string(n_outputs) + " rows of logits; the model holds " +
                                         std::to_string(max_output_rows_));
}

}  // namespace cera
