// Converts a GGUF model to a quantization mix (what `cera quantize` runs). Each tensor is either
// copied as is or converted row by row: source rows (F32/F16/BF16, or a quantized type when
// requantizing is allowed) are expanded to f32 and quantized to the type the plan picked
// (quantize_plan.h). Metadata is copied; general.file_type is set to the mix and
// general.quantization_version to 2. The output is written to OUT.part and renamed at the end, so
// a failed run never leaves a half-written OUT behind.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "format/quantize_plan.h"

namespace cera::quant {

struct QuantizeProgress {
  size_t tensor_index = 0;  // the tensor being worked on, 0-based
  size_t n_tensors = 0;
  std::string_view tensor_name;
  uint64_t elements_done = 0;   // over the whole model, so done/total is the overall fraction
  uint64_t elements_total = 0;
};

struct QuantizeOptions {
  Mix mix = Mix::Q8_0;
  bool pure = false;              // no mix rules: every quantizable tensor gets the base type
  bool allow_requantize = false;  // accept already-quantized source tensors (loses quality)
  int n_threads = 0;              // 0: all hardware threads
  // Called on the calling thread, often (several times per large tensor); keep it cheap.
  std::function<void(const QuantizeProgress&)> on_progress;
  // Non-fatal notes (requantizing, fallback types) as they happen.
  std::function<void(const std::string&)> on_warning;
};

struct QuantizeReport {
  uint64_t input_bytes = 0;   // file sizes
  uint64_t output_bytes = 0;
  size_t n_tensors = 0;
  size_t n_converted = 0;     // tensors whose type changed
  size_t n_fallback = 0;      // tensors that got a smaller-block type because their rows did not fit
  size_t n_requantized = 0;   // converted from an already-quantized type
  double seconds = 0;
  std::vector<GgmlType> types;  // output type per tensor, in file order
};

// Throws cera::Error: NotFound (input missing), InvalidArgument (same input and output path,
// requantizing without allow_requantize), Unsupported (a tensor type that cannot be converted,
// split files), BadFormat (non-finite weights), Io (write failed).
QuantizeReport quantize_model(const std::string& input_path, const std::string& output_path,
                              const QuantizeOptions& options);

}  // namespace cera::quant
