// `cera convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0]`: a Hugging Face folder to the GGUF
// llama.cpp's convert_hf_to_gguf.py writes for it.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "format/hf/hf_convert.h"

namespace cera::cli {

namespace {
struct ConvertFlags {
  std::string input, output, type;
};
}  // namespace

Command add_convert_command(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a Hugging Face model folder to GGUF");
  cmd->add_option("HF_DIR", f->input, "folder with config.json, *.safetensors and tokenizer.json")->required();
  cmd->add_option("-o,--output", f->output, "the GGUF file to write")->required();
  cmd->add_option("--type", f->type,
                  "tensor type for the matrices: f32, f16, bf16 or q8_0 (default: keep the stored type)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  return {cmd, [f]() {
            const auto w = hf::convert(f->input, hf::parse_out_type(f->type));
            w.write(f->output);
            std::fprintf(stderr, "wrote %s\n", f->output.c_str());
            return 0;
          }};
}

}  // namespace cera::cli
