// GGUF -> GGUF quantization; see quantize_model.h.
#include "format/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "cera/error.h"
#include "format/gguf.h"
#include "format/quant.h"

namespace cera::quant {

namespace {

constexpr uint32_t kQuantizationVersion = 2;

bool is_block_type(GgmlType t) { return ggml_traits(t).block_elems > 1; }

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}

// Header + metadata bytes (no padding) with a tensor count of `n_tensors`. gguf::Writer encodes
// the metadata, but it builds whole files in memory; the tensor data here is streamed instead, so
// only the metadata part of its output is used. A metadata-only file from the Writer ends in
// alignment padding of unknown length; the same metadata with general.alignment = 1 has none, and
// differs only by that key's 33-byte entry when the source did not carry the key itself.
std::vector<uint8_t> encode_header(const gguf::Writer& metadata, bool has_alignment_key, uint64_t n_tensors) {
  gguf::Writer unpadded = metadata;
  unpadded.set_u32("general.alignment", 1);
  const size_t alignment_entry = 8 + std::strlen("general.alignment") + 4 + 4;  // key, type, u32 value
  const size_t size = unpadded.to_bytes().size() - (has_alignment_key ? 0 : alignment_entry);
  std::vector<uint8_t> bytes = metadata.to_bytes();
  bytes.resize(size);
  std::memcpy(bytes.data() + 8, &n_tensors, 8);  // after magic and version
  return bytes;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) throw Error(ErrorCode::Io, path_ + ": cannot create: " + std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  }
  ~OutputFile() {
    if (f_) std::fclose(f_);
  }
  void write(const void* data, size_t n) {
    if (n && std::fwrite(data, 1, n, f_) != n) fail("write failed");
    written_ += n;
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    uint64_t pad = align_up(written_, alignment) - written_;
    while (pad) {
      const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
      write(zeros, n);
      pad -= n;
    }
  }
  void close() {
    const bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok) fail("close failed");
  }
  uint64_t written() const { return written_; }

 private:
  [[noreturn]] void fail(const char* what) {
    throw Error(ErrorCode::Io, path_ + ": " + what + ": " + std::strerror(errno));
  }
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
};

// Runs fn(first_row, n_rows, scratch) over [0, rows) in chunks on n_threads threads; the calling
// thread works too and reports progress between its chunks.
template <typename Fn, typename Report>
void parallel_rows(int64_t rows, int64_t chunk, int n_threads, Fn&& fn, Report&& report) {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto work = [&](bool is_caller) {
    try {
      for (;;) {
        const int64_t first = next.fetch_add(chunk);
        if (first >= rows) break;
        const int64_t n = std::min(chunk, rows - first);
        fn(first, n);
        const int64_t d = done.fetch_add(n) + n;
        if (is_caller) report(d);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(rows);  // stop the others early
    }
  };
  const int64_t n_chunks = (rows + chunk - 1) / chunk;
  const int helpers = int(std::min<int64_t>(n_threads, n_chunks)) - 1;
  std::vector<std::thread> threads;
  for (int i = 0; i < helpers; ++i) threads.emplace_back(work, false);
  work(true);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  report(rows);
}

std::string shape_string(const gguf::TensorInfo& t) {
  std::string s;
  for (int d = 0; d < t.n_dims; ++d) s += (d ? " x " : "") + std::to_string(t.ne[size_t(d)]);
  return s;
}

}  // namespace

QuantizeReport quantize_model(const std::string& input_path, const std::string& output_path,
                              const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(input_path, ec)) throw Error(ErrorCode::NotFound, input_path + ": no such file");
  if (fs::exists(output_path, ec) && fs::equivalent(input_path, output_path, ec))
    throw Error(ErrorCode::InvalidArgument, output_path + ": output would overwrite the input; choose another name");

  const auto in = gguf::File::open(input_path);
  if (in->get_int_opt("split.count").value_or(1) > 1)
    throw Error(ErrorCode::Unsupported, input_path + ": a split GGUF (split.count > 1); merge the parts first "
                                        "(llama-gguf-split --merge)");

  const auto& tensors = in->tensors();
  std::vector<TensorShape> shapes;
  shapes.reserve(tensors.size());
  for (const auto& t : tensors) shapes.push_back({t.name, t.n_dims, t.ne, t.type});
  const ModelFacts facts = facts_from_gguf(*in);
  const std::vector<PlannedTensor> plan = make_plan(shapes, facts, {options.mix, options.pure});

  auto warn = [&](const std::string& msg) {
    if (options.on_warning) options.on_warning(msg);
  };

  QuantizeReport report;
  report.n_tensors = tensors.size();
  report.input_bytes = in->file_size();
  uint64_t elements_total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const PlannedTensor& p = plan[i];
    report.types.push_back(p.type);
    elements_total += uint64_t(t.n_elements());
    if (!p.quantize) continue;
    // Refuse before writing anything: every problem is known from the plan.
    if (!can_dequantize(t.type))
      throw Error(ErrorCode::Unsupported, input_path + ": tensor '" + t.name + "' has type " +
                                              std::string(ggml_type_name(t.type)) + ", which cannot be converted");
    if (!can_quantize(p.type))
      throw Error(ErrorCode::Internal, "no quantizer for " + std::string(ggml_type_name(p.type)));
    if (is_block_type(t.type)) {
      if (!options.allow_requantize)
        throw Error(ErrorCode::InvalidArgument,
                    input_path + ": tensor '" + t.name + "' is already quantized (" +
                        std::string(ggml_type_name(t.type)) +
                        "); requantizing loses quality — quantize from the F16/BF16/F32 model, or pass "
                        "--allow-requantize");
      ++report.n_requantized;
    }
    ++report.n_converted;
    if (p.fallback) {
      ++report.n_fallback;
      warn("tensor '" + t.name + "' [" + shape_string(t) + "]: row length " + std::to_string(t.ne[0]) +
           " does not fit " + std::string(ggml_type_name(mix_info(options.mix).base)) + " blocks, using " +
           std::string(ggml_type_name(p.type)));
    }
  }
  if (report.n_requantized)
    warn(std::to_string(report.n_requantized) +
         " tensors are requantized from an already-quantized type; expect lower quality than quantizing from "
         "F16/BF16/F32");

  // Metadata: everything from the source, minus split bookkeeping, with the new file type.
  gguf::Writer meta;
  bool has_alignment_key = false;
  for (const auto& [key, value] : in->metadata()) {
    if (key.rfind("split.", 0) == 0) continue;
    if (key == "general.alignment") has_alignment_key = true;
    meta.set(key, value);
  }
  meta.set_u32("general.quantization_version", kQuantizationVersion);
  meta.set_u32("general.file_type", uint32_t(options.mix));
  const uint64_t alignment = in->alignment();

  std::vector<uint8_t> header = encode_header(meta, has_alignment_key, tensors.size());
  uint64_t offset = 0;
  std::vector<uint64_t> out_bytes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    out_bytes[i] = ggml_row_bytes(plan[i].type, t.ne[0]) * uint64_t(t.n_rows());
    const uint64_t len = t.name.size();
    put_u64(header, len);
    header.insert(header.end(), t.name.begin(), t.name.end());
    put_u32(header, uint32_t(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) put_u64(header, uint64_t(t.ne[size_t(d)]));
    put_u32(header, uint32_t(plan[i].type));
    put_u64(header, offset);
    offset += align_up(out_bytes[i], alignment);
  }

  const int n_threads = options.n_threads > 0 ? options.n_threads
                                              : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string part_path = output_path + ".part";
  try {
    OutputFile out(part_path);
    out.write(header.data(), header.size());
    out.pad_to(alignment);

    std::vector<uint8_t> buffer;
    uint64_t elements_done = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      const PlannedTensor& p = plan[i];
      QuantizeProgress progress{i, tensors.size(), t.name, elements_done, elements_total};
      if (options.on_progress) options.on_progress(progress);
      if (!p.quantize) {
        out.write(t.data, t.nbytes);
      } else {
        const int64_t ne0 = t.ne[0];
        const int64_t rows = t.n_rows();
        const size_t src_row = t.row_bytes();
        const size_t dst_row = ggml_row_bytes(p.type, ne0);
        buffer.resize(size_t(out_bytes[i]));
        // Chunks of at least ~64K elements keep the per-chunk overhead small.
        const int64_t chunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(ne0, 1));
        uint8_t* dst = buffer.data();
        auto convert = [&](int64_t first, int64_t n) {
          thread_local std::vector<float> row;
          row.resize(size_t(ne0));
          for (int64_t r = first; r < first + n; ++r) {
            dequantize_row_ref(t.type, t.data + size_t(r) * src_row, row.data(), ne0);
            for (float v : row)
              if (!std::isfinite(v))
                throw Error(ErrorCode::BadFormat, input_path + ": tensor '" + t.name + "' row " + std::to_string(r) +
                                                      " holds a non-finite value (NaN or Inf)");
            quantize_row_ref(p.type, row.data(), dst + size_t(r) * dst_row, ne0);
          }
        };
        auto report_rows = [&](int64_t rows_done) {
          if (!options.on_progress) return;
          progress.elements_done = elements_done + uint64_t(rows_done) * uint64_t(ne0);
          options.on_progress(progress);
        };
        parallel_rows(rows, chunk, n_threads, convert, report_rows);
        out.write(buffer.data(), buffer.size());
      }
      out.pad_to(alignment);
      elements_done += uint64_t(t.n_elements());
    }
    if (options.on_progress)
      options.on_progress({tensors.size(), tensors.size(), {}, elements_total, elements_total});
    report.output_bytes = out.written();
    out.close();
    fs::rename(part_path, output_path, ec);
    if (ec) throw Error(ErrorCode::Io, output_path + ": cannot rename " + part_path + " to it: " + ec.message());
  } catch (...) {
    fs::remove(part_path, ec);
    throw;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace cera::quant
