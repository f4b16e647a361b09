// `cera inspect`: what is inside a GGUF file — metadata, tensors, types and sizes.
#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "format/gguf.h"

namespace cera::cli {

namespace {
struct InspectFlags {
  std::string path;
  bool no_tensors = false;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}
}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "print a GGUF file's metadata and tensors");
  cmd->add_option("model", f->path, "GGUF file")->required();
  cmd->add_flag("--no-tensors", f->no_tensors, "print metadata only");
  return {cmd, [f]() {
            auto file = gguf::File::open(f->path);
            std::printf("file:      %s\nversion:   GGUF v%u\nalignment: %zu\nsize:      %s\n", f->path.c_str(),
                        file->version(), file->alignment(), human_bytes(double(file->file_size())).c_str());
            std::printf("\nmetadata (%zu keys):\n", file->metadata().size());
            for (const auto& [key, value] : file->metadata())
              std::printf("  %-44s %-8s %s\n", key.c_str(), std::string(gguf::value_type_name(value.type)).c_str(),
                          value.to_display_string().c_str());
            std::map<std::string, std::pair<size_t, uint64_t>> by_type;  // type -> (count, bytes)
            uint64_t n_params = 0;
            for (const auto& t : file->tensors()) {
              auto& e = by_type[std::string(ggml_type_name(t.type))];
              ++e.first;
              e.second += t.nbytes;
              n_params += uint64_t(t.n_elements());
            }
            std::printf("\ntensors: %zu, %.2f M parameters\n", file->tensors().size(), double(n_params) / 1e6);
            for (const auto& [type, e] : by_type)
              std::printf("  %-6s %4zu tensors  %s\n", type.c_str(), e.first, human_bytes(double(e.second)).c_str());
            if (!f->no_tensors) {
              std::printf("\n");
              for (const auto& t : file->tensors()) {
                std::string shape;
                for (int d = 0; d < t.n_dims; ++d) shape += (d ? " x " : "") + std::to_string(t.ne[size_t(d)]);
                std::printf("  %-40s %-6s %-22s %s\n", t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(),
                            shape.c_str(), human_bytes(double(t.nbytes)).c_str());
              }
            }
            return 0;
          }};
}

}  // namespace cera::cli
