// The CUDA backend (DESIGN.md §3). One stream; weights uploaded once in their stored formats; every
// op is a kernel launch on the stream, so a step runs without a host synchronisation until read().
//
// Graphs: a step where every sequence has one token (decode) is keyed by its shape (tokens,
// sequences, outputs) and by which of two metadata buffers it reads. The first step of a shape runs
// eagerly (allocating whatever scratch it needs), the next ones are captured into a CUDA graph per
// buffer, and later ones replay them: set_step() copies the new metadata into the fixed device
// buffer the graph reads, the model skips its layers' op calls (Backend::replaying, Model::replay:
// they would return at once), and end_step() launches the graph.
// Prefill steps, whose shapes rarely repeat, always run eagerly.
#include "backend/cuda/cuda_backend.h"
#include "backend/host_memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/top_k.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/trace.h"
#include "backend/cuda/step_meta.h"

namespace cera {
namespace {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

// A step's metadata lives in one device allocation (one of two, alternating), mirrored by a pinned
// host buffer. Each step packs its arrays one after another from the start (MetaOffsets::pack), so
// set_step() copies them with one transfer, off the step stream: a transfer between two replayed
// graphs held the GPU idle a few µs (tools/device/trace_step.py). The offsets depend only on
// the counts, and the counts a graph's pointers were captured with are its key's (decode: one token
// and one tile per sequence), so every replay of a graph finds its arrays where it captured them;
// only the block tables, last, vary in length.
struct MetaOffsets {
  size_t tokens = 0, positions = 0, token_seq = 0, output_rows = 0, seqs = 0, tiles = 0, blocks = 0, end = 0;

  static MetaOffsets pack(int32_t n_tokens, int32_t n_seqs, int32_t n_out, int32_t n_tiles, int32_t n_blocks) {
    MetaOffsets m;
    size_t off = 0;
    auto take = [&](size_t bytes) {
      const size_t at = off;
      off += (bytes + 15) / 16 * 16;
      return at;
    };
    m.tokens = take(sizeof(int32_t) * size_t(n_tokens));
    m.positions = take(sizeof(int32_t) * size_t(n_tokens));
    m.token_seq = take(sizeof(int32_t) * size_t(n_tokens));
    m.output_rows = take(sizeof(int32_t) * size_t(n_out));
    m.seqs = take(sizeof(cuda::DeviceSeq) * size_t(n_seqs));
    m.tiles = take(sizeof(cuda::AttentionTile) * size_t(n_tiles));
    m.blocks = take(sizeof(int32_t) * size_t(n_blocks));
    m.end = off;
    return m;
  }
};

struct MetaLayout {
  int32_t cap_tokens = 0, cap_seqs = 0, cap_blocks = 0;
  size_t total = 0;

  static MetaLayout make(int32_t cap_tokens, int32_t cap_seqs, int32_t cap_blocks) {
    // Never more outputs or tiles than tokens, so any step within the caps packs into `total`.
    return {cap_tokens, cap_seqs, cap_blocks,
            MetaOffsets::pack(cap_tokens, cap_seqs, cap_tokens, cap_tokens, cap_blocks).end};
  }
};

// Steps with the same key run the same launches with the same arguments.
struct StepKey {
  int32_t n_tokens, n_seqs, n_out;
  int32_t context_span;  // cuda::decode_context_span: attention_decode_fused's launch shape
  int32_t meta_slot;     // which of the two device metadata buffers the launches read
  bool argmax_tokens;    // the embedding reads the ids the last argmax left on the device
  int32_t host_logits_slot;  // the head writes this host_logits slot (-1: the device logits)
  bool tokens_are_seqs;      // StepView::tokens_are_seqs
  auto operator<=>(const StepKey&) const = default;
};

class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  void set(cudaGraph_t g, cudaGraphExec_t e) {
    graph_ = g;
    exec_ = e;
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// CERA_CUDA_PROFILE=1: times the ops of eager steps with CUDA events (the time from one op's start to
// the next is charged to it) and prints where the time went when the backend is destroyed. Each step
// first holds the GPU for 20 ms so all its launches are queued before it runs: the times are the
// GPU's, as in a graph replay, not the host's launch rate. Use with CERA_CUDA_GRAPHS=0 (a replayed
// step launches no ops one by one). The first step is not counted: its host pays one-time costs (each
// kernel's module is loaded at its first launch, buffers are allocated) that outlast the hold, and the
// GPU's wait for them would be charged to whichever op was running (H200, LFM2-1.2B BF16 tg32: 0.7-1.1
// ms a step charged to the short-conv products, a whole 20 ms hold to the LM head of a pp4096 step).
class OpProfiler {
 public:
  explicit OpProfiler(bool on) : on_(on) {}
  ~OpProfiler() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }
  bool on() const { return on_; }
  void mark(const char* name, cudaStream_t s) {
    if (n_marks_ == 0) cuda::gpu_sleep(20'000'000, s);  // 20 ms: the step's launches queue up behind it
    if (n_marks_ == pool_.size()) {
      cudaEvent_t e = nullptr;
      CERA_CUDA_CHECK(cudaEventCreate(&e));
      pool_.push_back(e);
    }
    names_.resize(pool_.size());
    names_[n_marks_] = name;
    CERA_CUDA_CHECK(cudaEventRecord(pool_[n_marks_++], s));
  }
  // At the end of a step: waits for it and adds each op's share to the totals.
  void end_step(cudaStream_t s) {
    if (n_marks_ == 0) return;
    mark("", s);
    CERA_CUDA_CHECK(cudaEventSynchronize(pool_[n_marks_ - 1]));
    if (!warmed_up_) {
      warmed_up_ = true;
      n_marks_ = 0;
      return;
    }
    for (size_t i = 0; i + 1 < n_marks_; ++i) {
      float ms = 0;
      CERA_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]));
      auto& t = totals_[names_[i]];
      t.first += ms;
      t.second += 1;
    }
    ++steps_;
    n_marks_ = 0;
  }
  void report() const {
    if (!on_ || steps_ == 0) return;
    double all = 0;
    for (const auto& [name, t] : totals_) all += t.first;
    std::fprintf(stderr, "cera: CUDA op profile over %lld eager steps (%.3f ms per step):\n", (long long)steps_,
                 all / double(steps_));
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [name, t] : totals_) rows.emplace_back(t.first, name);
    std::sort(rows.rbegin(), rows.rend());
    for (const auto& [ms, name] : rows)
      std::fprintf(stderr, "  %-22s %8.3f ms/step %5.1f%%  %6.1f launches/step\n", name.c_str(), ms / double(steps_),
                   100.0 * ms / all, double(totals_.at(name).second) / double(steps_));
  }

 private:
  bool on_;
  std::vector<cudaEvent_t> pool_;
  std::vector<const char*> names_;
  size_t n_marks_ = 0;
  bool warmed_up_ = false;  // the first step was seen (and not counted)
  int64_t steps_ = 0;
  std::map<std::string, std::pair<double, int64_t>> totals_;
};

// Whether the environment sets `name` to exactly `value` (the backend's A/B switches).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// Whether the device can copy straight into `p` (page-locked host memory, e.g. host_memory.h's).
bool is_page_locked(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is an answer here, not an error to carry on
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : options_(o), profiler_(env_is("CERA_CUDA_PROFILE", "1")) {
    CERA_CUDA_CHECK(cudaSetDevice(o.device));
    CERA_CUDA_CHECK(cudaGetDeviceProperties(&props_, o.device));
    CERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CERA_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    CERA_CUDA_CHECK(cudaStreamCreateWithFlags(&meta_stream_, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&meta_copied_[0], &meta_copied_[1], &meta_free_[0], &meta_free_[1]})
      CERA_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    gemm_ = std::make_unique<cuda::Gemm>(stream_);
    host_memory_pin(true);  // the engine's logits buffers: read() copies into them directly
    if (const char* path = std::getenv("CERA_CUDA_TRACE_FILE")) {
      if (cuda::trace::compiled_in()) {
        trace_path_ = path;
        cuda::trace::start(size_t(1) << 20);
      } else {
        std::fprintf(stderr, "cera: CERA_CUDA_TRACE_FILE is set but this build has no trace (cmake -DCERA_CUDA_TRACE=ON)\n");
      }
    }
  }

  ~CudaBackend() override {
    profiler_.report();
    if (!trace_path_.empty()) cuda::trace::stop_and_write(trace_path_);
    graphs_.clear();
    if (meta_stream_) cudaStreamSynchronize(meta_stream_);
    for (cudaEvent_t e : {meta_copied_[0], meta_copied_[1], meta_free_[0], meta_free_[1]})
      if (e) cudaEventDestroy(e);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    for (cudaEvent_t e : argmax_ready_)
      if (e) cudaEventDestroy(e);
    for (cudaEvent_t e : argmax_done_)
      if (e) cudaEventDestroy(e);
    gemm_.reset();
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (meta_stream_) cudaStreamDestroy(meta_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // The cache type is named when it is not the default, so that bench rows say what they measured.
  std::string name() const override {
    return "cuda (" + std::string(props_.name) + ", sm_" + std::to_string(props_.major) +
           std::to_string(props_.minor) + ", " + std::to_string(props_.totalGlobalMem >> 30) + " GiB" +
           (kv_f16() ? ", f16 KV" : "") + ")";
  }

  // ---- memory
  Tensor upload_weight(GgmlType type, int64_t rows, int64_t cols, const void* data) override {
    if (!cuda::supports_weight_type(type))
      throw Error(ErrorCode::Unsupported,
                  "the CUDA backend cannot compute with " + std::string(ggml_type_name(type)) + " weights");
    Tensor t;
    t.type = type;
    t.rows = rows;
    t.cols = cols;
    // The GPU layout of the rows (quant_kernels.h: Q4_0 in super-blocks, the rest as stored).
    t.row_bytes = cuda::device_row_bytes(type, cols);
    const size_t bytes = t.row_bytes * size_t(rows);
    t.data = weight_memory(bytes);
    // A model with 16-bit or quantized matrices gets f16 tensor-core attention (its error is far
    // below the weights' rounding); an all-F32 model keeps fp32-accurate (3xTF32) attention.
    if (type != GgmlType::F32) attention_precision_ = cuda::AttentionPrecision::F16;
    if (cuda::keeps_stored_layout(type)) {
      upload(t.data, data, bytes);
    } else {
      std::vector<uint8_t> host(bytes);
      cuda::to_device_layout(type, static_cast<const uint8_t*>(data), ggml_row_bytes(type, cols), rows, cols,
                             host.data(), t.row_bytes);
      upload(t.data, host.data(), bytes);
    }
    return t;
  }

  size_t kv_element_bytes() const override { return kv_f16() ? sizeof(__half) : sizeof(float); }

  // The whole model in one chunk when the loader says how much is coming (weight_bytes: the GPU
  // layout's sizes): a chunk boundary between gate and up (or q and k) would split that layer's
  // fused product in two.
  size_t weight_bytes(GgmlType type, int64_t rows, int64_t cols) const override {
    return cuda::device_row_bytes(type, cols) * size_t(rows);
  }
  void reserve_weights(size_t bytes, size_t n_tensors) override {
    const size_t size = bytes + 16 * n_tensors;  // each weight is padded to 16 bytes
    if (arena_ && arena_->bytes() - arena_used_ >= size) return;
    arena_ = &buffers_.emplace_back(size);
    arena_used_ = 0;
  }

  // Weights are packed one after another (16-byte aligned) into large device chunks, so weights the
  // model loads one after the other — gate then up, q then k then v — are adjacent in memory and
  // matmul can run them as one matrix.
  void* weight_memory(size_t bytes) {
    const size_t size = (bytes + 15) / 16 * 16;
    if (!arena_ || arena_used_ + size > arena_->bytes()) {
      arena_chunk_ = std::min(arena_chunk_ * 2, size_t(1) << 30);
      arena_ = &buffers_.emplace_back(std::max(size, arena_chunk_));
      arena_used_ = 0;
    }
    void* p = arena_->as<char>() + arena_used_;
    arena_used_ += size;
    return p;
  }

  Tensor alloc(int64_t rows, int64_t cols) override {
    const size_t bytes = size_t(rows) * size_t(cols) * sizeof(float);
    buffers_.emplace_back(bytes);
    CERA_CUDA_CHECK(cudaMemsetAsync(buffers_.back().get(), 0, bytes, stream_));
    sync_stream();  // whoever writes it next may use another stream
    Tensor t;
    t.data = buffers_.back().get();
    t.rows = rows;
    t.cols = cols;
    t.row_bytes = size_t(cols) * sizeof(float);
    return t;
  }

  void configure_state(const StateLayout& layout) override {
    state_op();
    layout_ = layout;
    kv_.reset(kv_element_bytes() * size_t(layout.n_attention_layers) * layout.n_kv_blocks * 2 *
              layout.kv_block_size * layout.kv_dim);
    conv_.reset(sizeof(float) * size_t(layout.n_conv_layers) * layout.n_conv_slots * layout.conv_state_dim);
    if (kv_.get()) CERA_CUDA_CHECK(cudaMemsetAsync(kv_.get(), 0, kv_.bytes(), stream_));
    if (conv_.get()) CERA_CUDA_CHECK(cudaMemsetAsync(conv_.get(), 0, conv_.bytes(), stream_));
    sync_stream();
    invalidate_graphs();
  }

  void clear_conv_slot(int32_t slot) override {
    state_op();
    for (int32_t l = 0; l < layout_.n_conv_layers; ++l)
      CERA_CUDA_CHECK(cudaMemsetAsync(conv_slot_ptr(l, slot), 0, conv_slot_bytes(), stream_));
  }

  void copy_conv_slot(int32_t src, int32_t dst) override {
    state_op();
    for (int32_t l = 0; l < layout_.n_conv_layers; ++l)
      CERA_CUDA_CHECK(cudaMemcpyAsync(conv_slot_ptr(l, dst), conv_slot_ptr(l, src), conv_slot_bytes(),
                                      cudaMemcpyDeviceToDevice, stream_));
  }

  void copy_kv_block(int32_t src, int32_t dst) override {
    state_op();
    const size_t block = kv_element_bytes() * 2 * layout_.kv_block_size * layout_.kv_dim;
    for (int32_t l = 0; l < layout_.n_attention_layers; ++l) {
      char* base = static_cast<char*>(kv_layer(l).base);
      CERA_CUDA_CHECK(cudaMemcpyAsync(base + size_t(dst) * block, base + size_t(src) * block, block,
                                      cudaMemcpyDeviceToDevice, stream_));
    }
  }

  // ---- a step
  void set_step(const StepInputs& in) override {
    state_op();
    const int32_t T = int32_t(in.positions.size());
    const int32_t S = int32_t(in.sequences.size());
    if (in.tokens_from_argmax ? T != argmax_fed_rows_ : int32_t(in.tokens.size()) != T)
      throw Error(ErrorCode::Internal, in.tokens_from_argmax ? "the step's tokens do not match the last argmax"
                                                             : "step tokens and positions differ in length");
    const int32_t n_out = int32_t(in.output_rows.size());
    if (T > 65535) throw Error(ErrorCode::InvalidArgument, "the CUDA backend takes at most 65535 tokens per step");
    // What the step's sequences need: block-table entries, attention tiles, and the longest context.
    int32_t n_blocks = 0, n_tiles = 0, max_keys = 0;
    for (const auto& s : in.sequences) {
      n_blocks += int32_t(s.kv_blocks.size());
      n_tiles += (std::max(s.n_tokens, 0) + cuda::kAttentionTileTokens - 1) / cuda::kAttentionTileTokens;
      max_keys = std::max(max_keys, s.n_past + s.n_tokens);
    }
    if (n_tiles > T) throw Error(ErrorCode::Internal, "step sequences cover more tokens than the step has");

    if (T > meta_.cap_tokens || S > meta_.cap_seqs || n_blocks > meta_.cap_blocks) {
      meta_ = MetaLayout::make(std::max(T, meta_.cap_tokens * 2), std::max(S, meta_.cap_seqs * 2),
                               std::max(n_blocks, meta_.cap_blocks * 2));
      // No copy may still read the old pinned buffers, no launch the old device ones.
      sync_stream();
      CERA_CUDA_CHECK(cudaStreamSynchronize(meta_stream_));
      for (auto& b : meta_host_) b.ensure(meta_.total);
      for (auto& b : meta_dev_) b.reset(meta_.total);
      invalidate_graphs();
    }
    // Two slots, alternating, each a pinned host buffer and a device buffer: the host fills one
    // while the device may still copy from or read the other (a pipelined step in flight). While
    // steps are in flight the copy runs on its own stream once the slot's last reader (the step two
    // back) is done, usually while the step before this one still runs, so no transfer sits between
    // two replayed graphs (a copy in stream order there held the GPU idle a few µs a step); see below
    // for the stream the host has just waited for. Graphs are keyed by the slot they read.
    // After a wait for the step stream (stream_drained_: nothing launched since) both events would
    // be complete already: every reader of the last slot has run, and every copy into this one ran
    // on that stream or was waited for by it. Two API calls fewer on a per-token loop's host path.
    if (!stream_drained_) CERA_CUDA_CHECK(cudaEventRecord(meta_free_[meta_slot_], stream_));  // all that read the last step's slot
    meta_slot_ ^= 1;
    if (!stream_drained_) CERA_CUDA_CHECK(cudaEventSynchronize(meta_copied_[meta_slot_]));  // its last copy is done
    const MetaOffsets at = MetaOffsets::pack(T, S, n_out, n_tiles, n_blocks);
    char* h = meta_host_[meta_slot_].as<char>();
    auto* tokens = reinterpret_cast<int32_t*>(h + at.tokens);
    auto* positions = reinterpret_cast<int32_t*>(h + at.positions);
    auto* token_seq = reinterpret_cast<int32_t*>(h + at.token_seq);
    auto* output_rows = reinterpret_cast<int32_t*>(h + at.output_rows);
    auto* seqs = reinterpret_cast<cuda::DeviceSeq*>(h + at.seqs);
    auto* tiles = reinterpret_cast<cuda::AttentionTile*>(h + at.tiles);
    auto* blocks = reinterpret_cast<int32_t*>(h + at.blocks);

    if (!in.tokens_from_argmax) std::copy(in.tokens.begin(), in.tokens.end(), tokens);
    std::copy(in.positions.begin(), in.positions.end(), positions);
    std::copy(in.output_rows.begin(), in.output_rows.end(), output_rows);
    // Ids from the host are checked in embed(); ids fed back from the argmax are valid by construction.
    host_tokens_ = in.tokens_from_argmax ? std::span<const int32_t>() : std::span<const int32_t>(tokens, size_t(T));
    bool decode_shaped = true, tokens_are_seqs = true;
    int32_t block_off = 0;
    n_tiles_ = 0;
    for (int32_t i = 0; i < S; ++i) {
      const StepSequence& s = in.sequences[size_t(i)];
      if (s.first_token < 0 || s.n_tokens < 0 || s.first_token + s.n_tokens > T)
        throw Error(ErrorCode::Internal, "step sequence rows outside the batch");
      seqs[i] = {s.first_token, s.n_tokens, s.n_past, s.conv_slot, block_off};
      std::copy(s.kv_blocks.begin(), s.kv_blocks.end(), blocks + block_off);
      block_off += int32_t(s.kv_blocks.size());
      for (int32_t t = 0; t < s.n_tokens; ++t) token_seq[s.first_token + t] = i;
      for (int32_t t0 = 0; t0 < s.n_tokens; t0 += cuda::kAttentionTileTokens)
        tiles[n_tiles_++] = {i, t0, std::min(cuda::kAttentionTileTokens, s.n_tokens - t0)};
      decode_shaped = decode_shaped && s.n_tokens == 1;
      tokens_are_seqs = tokens_are_seqs && s.n_tokens == 1 && s.first_token == i;
    }
    n_tokens_ = T;
    n_seqs_ = S;
    n_out_ = n_out;
    host_logits_slot_ = in.host_logits_slot;
    max_keys_ = max_keys;
    context_span_ = cuda::decode_context_span(max_keys);
    decode_ = decode_shaped && S == T;

    // One transfer of the packed arrays. A step fed by the last argmax embeds the ids where the
    // argmax left them (argmax_dev_, which moves only with the graphs dropped), not the stale host slots.
    // When the host has just waited for the step stream (a loop reading each token's logits), there
    // is nothing to overlap: the copy goes on the step stream itself, two cross-stream waits fewer
    // on the critical path. Either stream is correct: every reader of a slot runs on the step stream.
    char* d = meta_dev_[meta_slot_].as<char>();
    const bool in_order = stream_drained_;
    cudaStream_t copy_on = in_order ? stream_ : meta_stream_;
    if (!in_order) CERA_CUDA_CHECK(cudaStreamWaitEvent(meta_stream_, meta_free_[meta_slot_]));
    CERA_CUDA_CHECK(cudaMemcpyAsync(d, h, at.end, cudaMemcpyHostToDevice, copy_on));
    CERA_CUDA_CHECK(cudaEventRecord(meta_copied_[meta_slot_], copy_on));
    if (!in_order) CERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, meta_copied_[meta_slot_]));
    stream_drained_ = false;
    const auto* step_tokens = in.tokens_from_argmax ? argmax_dev_.as<int32_t>() : reinterpret_cast<const int32_t*>(d + at.tokens);
    view_ = {step_tokens,                                             reinterpret_cast<const int32_t*>(d + at.positions),
             reinterpret_cast<const int32_t*>(d + at.token_seq),    reinterpret_cast<const cuda::DeviceSeq*>(d + at.seqs),
             reinterpret_cast<const int32_t*>(d + at.blocks),       reinterpret_cast<const int32_t*>(d + at.output_rows),
             reinterpret_cast<const cuda::AttentionTile*>(d + at.tiles), int32_t(tokens_are_seqs && S == T)};

    mode_ = Mode::Eager;
    if (options_.use_graphs && decode_) {
      const StepKey key{T, S, n_out, context_span_, meta_slot_, in.tokens_from_argmax, host_logits_slot_,
                        view_.tokens_are_seqs != 0};
      StepKey shape = key;  // a shape seen in either slot is captured at its next step
      shape.meta_slot = 0;
      if (auto it = graphs_.find(key); it != graphs_.end()) {
        mode_ = Mode::Replay;
        replay_ = it->second.get();
      } else if (seen_.count(shape)) {
        mode_ = Mode::CapturePending;
        capture_key_ = key;
      } else {
        seen_.insert(shape);
      }
    }
  }

  void end_step() override { finish_step(); }

  bool replaying() const override { return mode_ == Mode::Replay; }

  void read(const Tensor& t, float* host) override {
    finish_step();
    const size_t row = size_t(t.cols) * sizeof(float);
    if (is_page_locked(host)) {  // host_memory.h: no staging buffer, no second copy on the host
      CERA_CUDA_CHECK(cudaMemcpy2DAsync(host, row, t.data, t.row_bytes, row, size_t(t.rows), cudaMemcpyDeviceToHost,
                                        stream_));
      sync_stream();
      return;
    }
    read_host_.ensure(row * size_t(t.rows));
    CERA_CUDA_CHECK(cudaMemcpy2DAsync(read_host_.as<char>(), row, t.data, t.row_bytes, row, size_t(t.rows),
                                      cudaMemcpyDeviceToHost, stream_));
    sync_stream();
    std::memcpy(host, read_host_.as<char>(), row * size_t(t.rows));
  }

  // The head's stores cross PCIe as it runs (the slot is page-locked and mapped: with unified
  // addressing its host address is also the device's), so the row is on the host when the step
  // ends instead of copied after it. H200, tg128 (each token's logits read): see BENCHMARKS.md.
  float* host_logits(int32_t slot, size_t n) override {
    PinnedBuffer& b = host_logits_.at(size_t(slot));
    if (b.capacity() < sizeof(float) * n) {
      sync_stream();  // no step in flight may still write the old buffer
      b.ensure(sizeof(float) * n);
      invalidate_graphs();  // graphs write the old address
      void* device = nullptr;
      CERA_CUDA_CHECK(cudaHostGetDevicePointer(&device, b.as<void>(), 0));
      host_logits_mapped_ = device == b.as<void>();
    }
    return host_logits_mapped_ ? b.as<float>() : nullptr;
  }

  Tensor step_logits(const Tensor& t) override {
    if (host_logits_slot_ < 0 || t.rows != 1 || !host_logits_mapped_) return t;
    const PinnedBuffer& b = host_logits_.at(size_t(host_logits_slot_));
    if (b.capacity() < sizeof(float) * size_t(t.cols)) return t;
    Tensor v = t;
    v.data = b.as<float>();
    v.row_bytes = sizeof(float) * size_t(t.cols);
    return v;
  }

  void synchronize() override {
    finish_step();
    sync_stream();
  }

  void argmax_rows(const Tensor& t, int32_t* host) override {
    finish_step();
    if (argmax_dev_.ensure(sizeof(int32_t) * size_t(t.rows))) invalidate_graphs();  // steps fed by it embed from it
    argmax_host_.ensure(sizeof(int32_t) * size_t(t.rows));
    launch_argmax(t, argmax_dev_.as<int32_t>());
    CERA_CUDA_CHECK(cudaMemcpyAsync(argmax_host_.as<int32_t>(), argmax_dev_.get(), sizeof(int32_t) * size_t(t.rows),
                                    cudaMemcpyDeviceToHost, stream_));
    sync_stream();
    std::copy_n(argmax_host_.as<int32_t>(), t.rows, host);
  }

  void top_k_rows(const Tensor& t, int32_t k, float* host_values, int32_t* host_ids) override {
    finish_step();
    cpu::check_top_k(t, k);
    const size_t n = size_t(t.rows) * size_t(k);  // values then ids, in one device and one pinned buffer
    top_k_scratch_.ensure(cuda::top_k_scratch_bytes(rows(t), int32_t(t.cols), k));
    top_k_dev_.ensure((sizeof(float) + sizeof(int32_t)) * n);
    top_k_host_.ensure((sizeof(float) + sizeof(int32_t)) * n);
    float* values = top_k_dev_.as<float>();
    if (k == 1) {  // greedy: the two-pass argmax, which also gives the value (same contract, fewer launches)
      launch_argmax(t, reinterpret_cast<int32_t*>(values + n), values);
    } else {
      cuda::top_k_rows(t.f32(), stride(t), rows(t), int32_t(t.cols), k, top_k_scratch_.get(), values,
                       reinterpret_cast<int32_t*>(values + n), stream_);
    }
    CERA_CUDA_CHECK(cudaMemcpyAsync(top_k_host_.as<float>(), values, (sizeof(float) + sizeof(int32_t)) * n,
                                    cudaMemcpyDeviceToHost, stream_));
    sync_stream();
    std::copy_n(top_k_host_.as<float>(), n, host_values);
    std::copy_n(reinterpret_cast<const int32_t*>(top_k_host_.as<float>() + n), n, host_ids);
  }

  void argmax_rows_async(const Tensor& t) override {
    finish_step();
    if (pending_.size() >= 2) throw Error(ErrorCode::Internal, "argmax_rows_async: two results already pending");
    const int slot = argmax_slot_ ^= 1;
    if (argmax_dev_.ensure(sizeof(int32_t) * size_t(t.rows))) invalidate_graphs();  // the next step embeds from it
    argmax_pinned_[slot].ensure(sizeof(int32_t) * size_t(t.rows));
    for (cudaEvent_t* e : {&argmax_ready_[slot], &argmax_done_[slot]})
      if (!*e) CERA_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    // The ids reach the host on the copy stream, so the next step's metadata copy and graph do not
    // queue behind that transfer; this argmax overwrites argmax_dev_ only once the previous
    // result's transfer (the other slot) has read it.
    // (An event exists only once its slot's transfer has been recorded.)
    if (argmax_ready_[slot ^ 1]) CERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, argmax_ready_[slot ^ 1]));
    launch_argmax(t, argmax_dev_.as<int32_t>());
    CERA_CUDA_CHECK(cudaEventRecord(argmax_done_[slot], stream_));
    CERA_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, argmax_done_[slot]));
    CERA_CUDA_CHECK(cudaMemcpyAsync(argmax_pinned_[slot].as<int32_t>(), argmax_dev_.get(), sizeof(int32_t) * size_t(t.rows),
                                    cudaMemcpyDeviceToHost, copy_stream_));
    CERA_CUDA_CHECK(cudaEventRecord(argmax_ready_[slot], copy_stream_));
    pending_.push_back({slot, int32_t(t.rows)});
    argmax_fed_rows_ = int32_t(t.rows);
  }

  void argmax_rows_wait(int32_t* host) override {
    if (pending_.empty()) throw Error(ErrorCode::Internal, "argmax_rows_wait without a pending argmax_rows_async");
    const auto [slot, n] = pending_.front();
    pending_.pop_front();
    CERA_CUDA_CHECK(cudaEventSynchronize(argmax_ready_[slot]));
    std::copy_n(argmax_pinned_[slot].as<int32_t>(), n, host);
  }

  // ---- ops
  void embed(const Tensor& table, Tensor out) override {
    for (int32_t id : host_tokens_)
      if (id < 0 || id >= table.rows) {
        abandon_step();  // a pending replay must not run on these ids
        throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(id) +
                                                    " is outside the vocabulary (0.." + std::to_string(table.rows - 1) + ")");
      }
    if (!begin_op("embed")) return;
    cuda::embed_rows(table.type, table.data, table.cols, table.row_bytes, view_.tokens, n_tokens_, out.f32(),
                     stride(out), stream_);
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    if (!begin_op("rms_norm")) return;
    cuda::rms_norm(x.f32(), stride(x), nullptr, 0, w.f32(), eps, out.f32(), stride(out), rows(x), int32_t(x.cols),
                   stream_);
  }

  void add_rms_norm(Tensor x, const Tensor& delta, const Tensor& w, float eps, Tensor out) override {
    if (!begin_op("add_rms_norm")) return;
    cuda::rms_norm(x.f32(), stride(x), delta.f32(), stride(delta), w.f32(), eps, out.f32(), stride(out), rows(x),
                   int32_t(x.cols), stream_);
  }

  void add(Tensor x, const Tensor& delta) override {
    if (!begin_op("add")) return;
    cuda::add(x.f32(), stride(x), delta.f32(), stride(delta), rows(x), int32_t(x.cols), stream_);
  }

  void scale(Tensor x, float s) override {
    if (!begin_op("scale")) return;
    cuda::scale(x.f32(), stride(x), s, rows(x), int32_t(x.cols), stream_);
  }

  void matmul(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) override {
    if (!begin_op(x.rows <= kMatvecRows ? "matmul (matvec)" : "matmul (gemm)")) return;
    for_each_product(ws, ys, [&](const Tensor& w, Tensor& y) {
      if (x.rows <= kMatvecRows) matvec(x, w, y, {});
      else gemm(x, w, y);
    });
  }

  // ---- fused ops: at decode sizes the SwiGLU and the residual add ride on the matvec's epilogue
  // (and, where folds_norm says so, the norm is folded into it); larger steps run the plain ops (GEMM), with the
  // residual add as the GEMM's beta = 1.
  void rms_norm_matmul(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed, std::span<const Tensor> ws,
                       std::span<Tensor> ys) override {
    if (x.rows > kMatvecRows && options_.fuse && same_16bit_activations(ws)) {
      // Prefill: the norm writes the GEMM's 16-bit input directly (no f32 copy, no conversion pass).
      if (may_allocate() && reserve_fused_gemm(x.rows, x.cols, 0, ws)) invalidate_graphs();
      if (!begin_op("matmul (gemm, +norm)")) return;
      norm_to_16(x, norm_w, eps, ws[0].type, in16_.get());
      for_each_product(ws, ys, [&](const Tensor& w, Tensor& y) { gemm_->run_converted(in16_.get(), x.rows, w, y); });
      return;
    }
    if (x.rows > kMatvecRows || !options_.fuse || !folds_norm(ws))
      return Backend::rms_norm_matmul(x, norm_w, eps, normed, ws, ys);
    cuda::MatvecFusion f;
    const bool int8_in = read_residual_int8(x, norm_w, ws, f);
    if (!begin_op(int8_in ? "matvec (+norm, int8 x)" : "matvec (+norm)")) return;
    f.norm_w = norm_w.f32();
    f.norm_eps = eps;
    for_each_product(ws, ys, [&](const Tensor& w, Tensor& y) { matvec(x, w, y, f); });
  }

  void rms_norm_swiglu(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed, const Tensor& gate,
                       const Tensor& up, Tensor gate_up, Tensor out) override {
    if (x.rows > kMatvecRows || !options_.fuse || !follows(gate, up) || gate.rows != up.rows)
      return Backend::rms_norm_swiglu(x, norm_w, eps, normed, gate, up, gate_up, out);
    swiglu_matvec(x, norm_w, eps, normed, gate, up, out, {});
  }

  // The decode [gate; up] product with its SwiGLU epilogue into out (the norm folded where
  // folds_norm says, x read from the residual row's int8 hand-off where one is valid); with
  // write.q, the SwiGLU row is also written there as Int8X.
  void swiglu_matvec(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& normed, const Tensor& gate,
                     const Tensor& up, Tensor out, const cuda::MatvecFusion::Int8X& write) {
    cuda::MatvecFusion f;
    f.out = cuda::MatvecFusion::Out::SwiGLU;
    f.write_int8 = write;
    const Tensor gu_w[] = {gate, up};
    if (folds_norm(gu_w)) read_residual_int8(x, norm_w, gu_w, f);  // before norm_for_matvec's ops
    const Tensor* in = nullptr;
    const bool fold = norm_for_matvec(x, norm_w, eps, normed, gu_w, f, in);
    const char* name = write.q ? (fold ? "matvec (+norm, swiglu, int8 out)" : "matvec (+swiglu, int8 out)")
                               : (fold ? "matvec (+norm, swiglu)" : "matvec (+swiglu)");
    if (!begin_op(name)) return;
    Tensor w = gate;
    w.rows += up.rows;  // [gate; up], adjacent in the weight arena
    matvec(*in, w, out, f);
  }

  void ffn_swiglu(Tensor x, const Tensor& norm_w, float eps, const Tensor& gate, const Tensor& up, const Tensor& down,
                  float s, Tensor normed, Tensor gate_up, Tensor act, Tensor product) override {
    const Tensor gu_w[] = {gate, up};
    if (x.rows == 1 && options_.fuse && follows(gate, up) && gate.rows == up.rows && down.cols == gate.rows &&
        cuda::matvec_int8_handoff(gate.type, down.type, gate.rows) &&
        cuda::matvec_int8_writer_keeps_launch(gate.type, 2 * gate.rows, gate.cols, cuda::MatvecFusion::Out::SwiGLU)) {
      const size_t bytes = int8x_bytes(gate.rows, false);
      if (may_allocate() && handoff_.ensure(bytes)) invalidate_graphs();
      if (handoff_.bytes() >= bytes) return ffn_decode_int8_handoff(x, norm_w, eps, gate, up, down, s, normed, act);
    }
    if (x.rows <= kMatvecRows || !options_.fuse || !follows(gate, up) || gate.rows != up.rows ||
        !same_16bit_activations(gu_w) || down.type == GgmlType::F32)
      return Backend::ffn_swiglu(x, norm_w, eps, gate, up, down, s, normed, gate_up, act, product);
    // Prefill: norm → 16-bit input, [gate; up] GEMM (f32 out), SwiGLU → 16-bit input of the down
    // GEMM, which adds s · its product into x (beta = 1). Bit for bit the plain ops' arithmetic.
    if (may_allocate() && reserve_fused_gemm(x.rows, x.cols, gate.rows, gu_w)) invalidate_graphs();
    if (may_allocate() && gemm_->reserve_weight(down)) invalidate_graphs();
    if (!begin_op("ffn (gemm, fused)")) return;
    norm_to_16(x, norm_w, eps, gate.type, in16_.get());
    Tensor w = gate;
    w.rows += up.rows;  // [gate; up], adjacent in the weight arena
    Tensor gu = gate_up.first_rows(x.rows);
    gemm_->run_converted(in16_.get(), x.rows, w, gu);
    const int64_t F = gate.rows;
    const Tensor g = gu.cols_slice(0, F), u = gu.cols_slice(F, F);
    if (cuda::Gemm::bf16_activations(down.type))
      cuda::swiglu_to_bf16(g.f32(), stride(g), u.f32(), stride(u), mid16_.as<__nv_bfloat16>(), rows(x), int32_t(F),
                           stream_);
    else
      cuda::swiglu_to_f16(g.f32(), stride(g), u.f32(), stride(u), mid16_.as<__half>(), rows(x), int32_t(F), stream_);
    gemm_->run_converted(mid16_.get(), x.rows, down, x, s, 1.f);
  }

  void matmul_add(const Tensor& a, const Tensor& w, float s, Tensor product, Tensor x) override {
    if (!options_.fuse) return Backend::matmul_add(a, w, s, product, x);
    const NextNorm next = residual_int8_writer(x, w);  // before begin_op, which ends the hint
    if (!begin_op(a.rows <= kMatvecRows ? "matvec (+residual)" : "matmul (gemm, +residual)")) return;
    if (a.rows <= kMatvecRows) {
      cuda::MatvecFusion f;
      f.out = cuda::MatvecFusion::Out::Accumulate;
      f.scale = s;
      write_residual_int8(next, f);
      matvec(a, w, x, f);
      residual_int8_ = next;
    } else {
      gemm(a, w, x, s, 1.f);
    }
  }

  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override {
    if (!begin_op("swiglu")) return;
    cuda::swiglu(gate.f32(), stride(gate), up.f32(), stride(up), out.f32(), stride(out), rows(gate),
                 int32_t(gate.cols), stream_);
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    if (!begin_op("add_bias")) return;
    cuda::add_bias(x.f32(), stride(x), bias.f32(), rows(x), int32_t(x.cols), stream_);
  }

  void qk_norm_rope(Tensor q, Tensor k, const Tensor* q_norm, const Tensor* k_norm, float eps,
                    const AttentionParams& a, const RopeParams& rope) override {
    // Looked up before begin_op: a table is uploaded on a step's first (eager) run, never in a capture.
    const cuda::RopeArgs r{rope_table(rope), rope.n_rot, rope.neox};
    if (!begin_op("qk_norm_rope")) return;
    cuda::qk_norm_rope(q.f32(), stride(q), k.f32(), stride(k), q_norm ? q_norm->f32() : nullptr,
                       k_norm ? k_norm->f32() : nullptr, eps, a.n_head, a.n_head_kv, a.head_dim, r, view_.positions,
                       rows(q), stream_);
  }

  void attention(int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v, Tensor out,
                 const AttentionParams& p) override {
    if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0)
      throw Error(ErrorCode::Unsupported, "attention needs n_head to be a multiple of n_head_kv");
    const cuda::AttentionShape sh{p.n_head, p.n_head_kv, p.head_dim, p.scale};
    if (decode_ && mode_ == Mode::Eager && partial_.ensure(sizeof(float) * cuda::attention_decode_partials(n_tokens_, sh)))
      invalidate_graphs();  // captured steps read the old buffer
    // Prefill steps are never captured: their key split's scratch may grow at any step.
    const cuda::PrefillSplit split =
        decode_ ? cuda::PrefillSplit{}
                : cuda::attention_prefill_plan(n_tiles_, max_keys_, sh, attention_precision_, kv_f16());
    prefill_partial_.ensure(sizeof(float) * cuda::attention_prefill_partials(n_tokens_, sh, split));
    if (!begin_op("attention")) return;
    const cuda::KvLayer kv = kv_layer(layer);
    cuda::store_kv(kv, view_, k.f32(), stride(k), v.f32(), stride(v), n_tokens_, stream_);
    if (decode_)
      cuda::attention_decode(kv, view_, n_tokens_, q.f32(), stride(q), out.f32(), stride(out), sh,
                             partial_.as<float>(), stream_);
    else
      cuda::attention_prefill(kv, view_, n_tiles_, q.f32(), stride(q), out.f32(), stride(out), sh, stream_,
                              attention_precision_, split, prefill_partial_.as<float>(), n_tokens_);
  }

  // Decode of up to kFusedAttentionMaxTokens sequences: the q/k norm, RoPE, K/V store, split-K
  // attention and merge in one launch (attention_decode_fused); otherwise the two ops. Each of the
  // fused kernel's blocks redoes its heads' norm and RoPE (double-precision angles) for its split of
  // the keys: free at batch 1, where four launches become one (H200 tg128: Qwen3-0.6B Q4_0 ~590 →
  // ~890, LFM2-1.2B BF16 +3 %), but at 128 sequences that work is 16× the unfused kernels' and
  // LFM2-1.2B BF16 fell from 58k to 41k tokens/s. With 16-warp blocks (attention.cu) 8 sequences
  // gain (LFM2-1.2B BF16 6,377 → 6,688, Q4_0 3,825 → 3,938) while 32 lose (22,371 → 21,270) and
  // 128 lose more (55,576 → 44,935).
  static constexpr int32_t kFusedAttentionMaxTokens = 8;
  void qk_norm_rope_attention(int32_t layer, Tensor q, Tensor k, const Tensor& v, const Tensor* q_norm,
                              const Tensor* k_norm, float eps, const AttentionParams& p, const RopeParams& rope,
                              Tensor out) override {
    if (!decode_ || n_tokens_ > kFusedAttentionMaxTokens || !options_.fuse || !options_.fuse_attention ||
        !cuda::attention_decode_fused_supported(p.head_dim) || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0)
      return Backend::qk_norm_rope_attention(layer, q, k, v, q_norm, k_norm, eps, p, rope, out);
    const cuda::AttentionShape sh{p.n_head, p.n_head_kv, p.head_dim, p.scale};
    // Looked up / grown before begin_op: tables and scratch are set up on a step's eager run.
    const cuda::RopeArgs r{rope.n_rot > 0 ? rope_table(rope) : nullptr, rope.n_rot, rope.neox};
    if (mode_ == Mode::Eager) {
      const bool partial_moved = partial_.ensure(sizeof(float) * cuda::attention_decode_partials(n_tokens_, sh));
      const bool counters_moved =
          counters_.ensure_zeroed(sizeof(unsigned) * cuda::attention_decode_counters(n_tokens_, sh), stream_);
      if (partial_moved || counters_moved) invalidate_graphs();  // captured steps read the old buffers
    }
    if (!begin_op("attention (+qk norm, rope)")) return;
    const cuda::DecodeQkv in{q.f32(), stride(q), k.f32(), stride(k), v.f32(), stride(v),
                             q_norm ? q_norm->f32() : nullptr, k_norm ? k_norm->f32() : nullptr, eps, r};
    cuda::attention_decode_fused(kv_layer(layer), view_, n_tokens_, in, out.f32(), stride(out), sh, partial_.as<float>(),
                                 counters_.as<unsigned>(), context_span_, stream_);
  }

  void short_conv(int32_t layer, const Tensor& bcx, const Tensor& w, Tensor out) override {
    if (!begin_op("short_conv")) return;
    float* state = conv_state(layer);
    if (decode_)
      cuda::short_conv_decode(view_, bcx.f32(), stride(bcx), w.f32(), int32_t(w.cols), state, out.f32(), stride(out),
                              n_tokens_, int32_t(out.cols), stream_);
    else
      cuda::short_conv(view_, n_seqs_, bcx.f32(), stride(bcx), w.f32(), int32_t(w.cols), state, out.f32(),
                       stride(out), n_tokens_, int32_t(out.cols), stream_);
  }

  // Decode: in_proj's matvec computes each channel's B, C and X in one block and convolves them in
  // its epilogue (Out::ShortConv), one launch instead of two.
  void rms_norm_matmul_short_conv(const Tensor& x, const Tensor& norm_w, float eps, Tensor normed, const Tensor& in_proj,
                                  Tensor bcx, int32_t layer, const Tensor& conv_w, Tensor out) override {
    if (!decode_ || x.rows > cuda::kMaxShortConvMatvecRows || !options_.fuse || !options_.fuse_conv ||
        !cuda::matvec_short_conv_supported(in_proj.type, in_proj.data, in_proj.row_bytes, in_proj.cols, int32_t(conv_w.cols)))
      return Backend::rms_norm_matmul_short_conv(x, norm_w, eps, normed, in_proj, bcx, layer, conv_w, out);
    cuda::MatvecFusion f;
    f.out = cuda::MatvecFusion::Out::ShortConv;
    f.conv = {view_.token_seq, view_.seqs, conv_w.f32(), int32_t(conv_w.cols), conv_state(layer)};
    if (folds_norm({&in_proj, 1})) read_residual_int8(x, norm_w, {&in_proj, 1}, f);  // before norm_for_matvec
    const Tensor* in = nullptr;
    const bool fold = norm_for_matvec(x, norm_w, eps, normed, {&in_proj, 1}, f, in);
    if (!begin_op(fold ? "matvec (+norm, short_conv)" : "matvec (+short_conv)")) return;
    matvec(*in, in_proj, out, f);
  }

  void shift_kv(int32_t layer, std::span<const int32_t> blocks, int32_t first, int32_t count, int32_t delta,
                const AttentionParams& attn, const RopeParams* rope) override {
    state_op();
    if (count <= 0) return;
    // The moved positions' block table and the rotation by -delta, computed on the host by the CPU
    // backend's own RoPE functions (the same angles, bit for bit).
    shift_host_.ensure(sizeof(int32_t) * blocks.size() + 2 * sizeof(float) * 256);
    auto* hb = shift_host_.as<int32_t>();
    std::copy(blocks.begin(), blocks.end(), hb);
    float* hc = reinterpret_cast<float*>(hb + blocks.size());
    float* hs = hc + 128;
    if (rope) {
      if (rope->n_rot / 2 > 128) throw Error(ErrorCode::Unsupported, "RoPE over more than 256 dimensions");
      std::vector<double> inv(size_t(rope->n_rot / 2));
      cpu::rope_inv_freq(*rope, inv.data());
      cpu::rope_cos_sin(inv.data(), rope->n_rot, -delta, hc, hs);
    }
    const size_t bytes = sizeof(int32_t) * blocks.size() + 2 * sizeof(float) * 256;
    shift_dev_.ensure(bytes);
    CERA_CUDA_CHECK(cudaMemcpyAsync(shift_dev_.get(), hb, bytes, cudaMemcpyHostToDevice, stream_));
    shift_scratch_.ensure(sizeof(float) * size_t(count) * 2 * layout_.kv_dim);
    const auto* db = shift_dev_.as<int32_t>();
    const float* dc = reinterpret_cast<const float*>(db + blocks.size());
    cuda::shift_kv(kv_layer(layer), db, first, count, delta, attn.n_head_kv, attn.head_dim, rope ? dc : nullptr,
                   rope ? dc + 128 : nullptr, rope ? rope->n_rot : 0, rope ? rope->neox : true,
                   shift_scratch_.as<float>(), stream_);
    // The pinned table is reused by the next call: wait until this copy has consumed it.
    sync_stream();
  }

  void gather_output_rows(const Tensor& x, Tensor out) override {
    if (!begin_op("gather_output_rows")) return;
    cuda::gather_rows(x.f32(), stride(x), view_.output_rows, n_out_, out.f32(), stride(out), int32_t(x.cols), stream_);
  }

  // One launch instead of the gather and the norm (a decode step's last two small kernels before the
  // head; the same arithmetic as rms_norm).
  void gather_output_rows_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override {
    if (!options_.fuse) return Backend::gather_output_rows_norm(x, w, eps, out);
    if (!begin_op("gather_output_rows_norm")) return;
    cuda::gather_rms_norm(x.f32(), stride(x), view_.output_rows, n_out_, w.f32(), eps, out.f32(), stride(out),
                          int32_t(x.cols), stream_);
  }

 private:
  enum class Mode { Idle, Eager, CapturePending, Capturing, Replay };

  // Steps of up to this many rows use the matvec kernels (they read each weight once, but their
  // arithmetic grows with the rows); larger ones the tensor-core GEMM. Measured on the H200: with 8
  // rows the matvec was compute-bound (LFM2-1.2B BF16: 2.1k tokens/s at 8 sequences, 0.9k at 1).
  static constexpr int64_t kMatvecRows = 2;
  static_assert(kMatvecRows <= cuda::kMaxMatvecRows);

  // Runs fn(w, y) per product, where weights adjacent in memory whose outputs are adjacent columns
  // are merged into one product.
  template <class Fn>
  static void for_each_product(std::span<const Tensor> ws, std::span<Tensor> ys, Fn&& fn) {
    for (size_t i = 0; i < ws.size();) {
      Tensor w = ws[i], y = ys[i];
      size_t j = i + 1;
      for (; j < ws.size() && follows(w, ws[j]) && output_follows(y, ys[j]); ++j) {
        w.rows += ws[j].rows;
        y.cols += ys[j].cols;
      }
      i = j;
      fn(w, y);
    }
  }

  void will_norm(const Tensor& x, const Tensor& norm_w) override { next_norm_ = {x.data, norm_w.f32(), x.cols}; }

  // The residual row's int8 hand-off (Backend::will_norm): the one-row Q4_0 product that updates x
  // right after the hint also writes norm_w ⊙ x as Int8X with its groups' Σx² (residual_int8_,
  // valid until the next op begins), and the next op's Q4_0 products with that norm read it.
  struct NextNorm {
    const void* x = nullptr;
    const float* norm_w = nullptr;
    int64_t n = 0;  // x's columns
  };
  // The hint, if the product of w that accumulates into x can act on it (allocating the row's
  // buffer in an eager step).
  NextNorm residual_int8_writer(const Tensor& x, const Tensor& w) {
    if (next_norm_.x != x.data || x.rows != 1 || w.rows != x.cols ||
        !cuda::matvec_int8_handoff(w.type, GgmlType::Q4_0, x.cols) ||
        !cuda::matvec_int8_writer_keeps_launch(w.type, w.rows, w.cols, cuda::MatvecFusion::Out::Accumulate))
      return {};
    const size_t bytes = int8x_bytes(x.cols, true);
    if (may_allocate() && residual_handoff_.ensure(bytes)) invalidate_graphs();
    return residual_handoff_.bytes() >= bytes ? next_norm_ : NextNorm{};
  }
  // An Int8X row of n elements in a buffer: the levels, then the n / 8 scales, then (with_ssq) the
  // n / 8 sums of squares.
  static size_t int8x_bytes(int64_t n, bool with_ssq) {
    return size_t(n) + (with_ssq ? 2 : 1) * sizeof(float) * size_t(n / 8);
  }
  static cuda::MatvecFusion::Int8X int8x_view(const DeviceBuffer& buf, int64_t n, bool with_ssq) {
    auto* q = buf.as<int8_t>();
    auto* d = reinterpret_cast<float*>(q + n);
    return {q, d, with_ssq ? d + n / 8 : nullptr};
  }
  void write_residual_int8(const NextNorm& next, cuda::MatvecFusion& f) const {
    if (!next.x) return;
    f.write_int8 = int8x_view(residual_handoff_, next.n, true);
    f.write_norm_w = next.norm_w;
  }
  // Whether the one-row products of ws, with the norm of norm_w folded, can read x from the hand-off
  // (checked before begin_op, which ends it); sets f.read_int8 if so.
  bool read_residual_int8(const Tensor& x, const Tensor& norm_w, std::span<const Tensor> ws, cuda::MatvecFusion& f) {
    if (!residual_int8_.x || residual_int8_.x != x.data || residual_int8_.norm_w != norm_w.f32() || x.rows != 1)
      return false;
    for (const Tensor& w : ws)
      if (!cuda::matvec_int8_handoff(GgmlType::Q4_0, w.type, x.cols)) return false;
    f.read_int8 = int8x_view(residual_handoff_, x.cols, true);
    return true;
  }

  // One token's SwiGLU feed-forward whose [gate; up] product hands its output to the down product
  // as int8 (cuda::MatvecFusion::Int8X, in handoff_), so that the down product's blocks read 1 byte
  // an element instead of each rounding the f32 row again. act still receives the f32 row.
  void ffn_decode_int8_handoff(Tensor x, const Tensor& norm_w, float eps, const Tensor& gate, const Tensor& up,
                               const Tensor& down, float s, const Tensor& normed, Tensor act) {
    const cuda::MatvecFusion::Int8X handoff = int8x_view(handoff_, gate.rows, false);
    const NextNorm next = residual_int8_writer(x, down);  // before any op begins
    swiglu_matvec(x, norm_w, eps, normed, gate, up, act, handoff);
    cuda::MatvecFusion g;
    g.out = cuda::MatvecFusion::Out::Accumulate;
    g.scale = s;
    g.read_int8 = handoff;
    write_residual_int8(next, g);
    if (!begin_op("matvec (+residual, int8 x)")) return;
    matvec(act, down, x, g);
    residual_int8_ = next;
  }

  void matvec(const Tensor& x, const Tensor& w, const Tensor& y, cuda::MatvecFusion f) {
    f.early_weights = options_.early_weights;
    cuda::matvec(w.type, w.data, w.rows, w.cols, w.row_bytes, x.f32(), stride(x), rows(x), y.f32(), stride(y),
                 stream_, f);
  }

  // y = alpha · x·wᵀ + beta · y on the tensor cores.
  void gemm(const Tensor& x, const Tensor& w, Tensor y, float alpha = 1.f, float beta = 0.f) {
    if (mode_ == Mode::Eager && gemm_->reserve(x, w)) invalidate_graphs();  // scratch moved
    gemm_->run(x, w, y, alpha, beta);
  }

  // Each row's argmax into ids (device), and with values its maximum (top-k's k = 1 contract).
  void launch_argmax(const Tensor& t, int32_t* ids, float* values = nullptr) {
    argmax_scratch_.ensure(cuda::argmax_scratch_bytes(rows(t), int32_t(t.cols)));
    argmax_counters_.ensure_zeroed(sizeof(unsigned) * size_t(rows(t)), stream_);
    cuda::argmax_rows(t.f32(), stride(t), rows(t), int32_t(t.cols), ids, argmax_scratch_.get(),
                      argmax_counters_.as<unsigned>(), stream_, values);
  }

  // Whether a decode product's norm is folded into the matvecs of these weights (options_.fold_norm).
  bool folds_norm(std::span<const Tensor> ws) const {
    using F = CudaBackendOptions::NormFold;
    if (options_.fold_norm != F::MemoryBound) return options_.fold_norm == F::Always;
    for (const Tensor& w : ws)  // where the matvec is memory-bound the fold is nearly free
      if (ggml_traits(w.type).block_elems != 1 && !cuda::matvec_int8_activations(w.type)) return false;
    return true;
  }

  // The conv state slots of conv layer `layer`.
  float* conv_state(int32_t layer) {
    return conv_.as<float>() + size_t(layer) * layout_.n_conv_slots * layout_.conv_state_dim;
  }

  // The input of a decode product that an rms norm precedes: x itself with the norm folded into the
  // matvec (f gets the norm's weight), or `normed` after a norm kernel, as folds_norm(ws) decides.
  // Sets `in`; returns whether the norm was folded.
  bool norm_for_matvec(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& normed,
                       std::span<const Tensor> ws, cuda::MatvecFusion& f, const Tensor*& in) {
    if (folds_norm(ws)) {
      f.norm_w = norm_w.f32();
      f.norm_eps = eps;
      in = &x;
      return true;
    }
    rms_norm(x, norm_w, eps, normed);
    in = &normed;
    return false;
  }

  // Scratch may grow only outside a capture (a replay reuses what its eager run reserved).
  bool may_allocate() const { return mode_ == Mode::Eager || mode_ == Mode::Idle; }

  // Whether every weight takes the same 16-bit GEMM input (none F32): then one converted copy of
  // the activations serves all of them.
  static bool same_16bit_activations(std::span<const Tensor> ws) {
    for (const Tensor& w : ws)
      if (w.type == GgmlType::F32 || cuda::Gemm::bf16_activations(w.type) != cuda::Gemm::bf16_activations(ws[0].type))
        return false;
    return !ws.empty();
  }

  // The fused prefill paths' 16-bit activation buffers (rows × cols, rows × f) and the weights'
  // dequantized scratch; returns whether any moved (captured graphs must then be dropped).
  bool reserve_fused_gemm(int64_t rows, int64_t cols, int64_t f, std::span<const Tensor> ws) {
    bool moved = in16_.ensure(size_t(rows) * size_t(cols) * 2);
    if (f > 0) moved |= mid16_.ensure(size_t(rows) * size_t(f) * 2);
    for (const Tensor& w : ws) moved |= gemm_->reserve_weight(w);
    if (ws.size() == 2 && follows(ws[0], ws[1])) {  // run as one [gate; up] product
      Tensor both = ws[0];
      both.rows += ws[1].rows;
      moved |= gemm_->reserve_weight(both);
    }
    return moved;
  }

  void norm_to_16(const Tensor& x, const Tensor& norm_w, float eps, GgmlType weight_type, void* out) {
    if (cuda::Gemm::bf16_activations(weight_type))
      cuda::rms_norm_to_bf16(x.f32(), stride(x), norm_w.f32(), eps, static_cast<__nv_bfloat16*>(out), rows(x),
                             int32_t(x.cols), stream_);
    else
      cuda::rms_norm_to_f16(x.f32(), stride(x), norm_w.f32(), eps, static_cast<__half*>(out), rows(x), int32_t(x.cols),
                            stream_);
  }

  static bool follows(const Tensor& a, const Tensor& b) {
    return a.type == b.type && a.cols == b.cols && a.row_bytes == b.row_bytes &&
           static_cast<const char*>(a.data) + size_t(a.rows) * a.row_bytes == b.data;
  }
  static bool output_follows(const Tensor& y, const Tensor& z) {
    return y.rows == z.rows && y.row_bytes == z.row_bytes && y.f32() + y.cols == z.f32();
  }

  static int64_t stride(const Tensor& t) { return int64_t(t.row_bytes / sizeof(float)); }
  static int32_t rows(const Tensor& t) { return int32_t(t.rows); }

  // Whether the op must launch now (false while a graph will replay the step).
  bool begin_op(const char* name) {
    // An int8 hand-off of the residual row lives from its writer to the very next op.
    next_norm_ = {};
    residual_int8_ = {};
    if (mode_ == Mode::Replay) return false;
    if (mode_ == Mode::CapturePending) {
      CERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      mode_ = Mode::Capturing;
    }
    if (profiler_.on() && mode_ != Mode::Capturing) profiler_.mark(name, stream_);
    if (ablated(name)) return false;
    stream_drained_ = false;  // an op after read() reads the last step's metadata slot
    return true;  // Eager, Capturing, or Idle (an op after read(): it runs on the last step's metadata)
  }

  // CERA_CUDA_ABLATE=name[;name...]: ops whose name starts with one of these launch nothing. A
  // timing tool, not a mode: the outputs are wrong. What a category of kernels costs inside the
  // replayed decode graph is the step time with and without it (tools/device/ablate.sh), which the
  // per-op event profile (eager launches, no PDL overlap) cannot show.
  static bool ablated(const char* name) {
    static const std::vector<std::string> prefixes = [] {
      std::vector<std::string> out;
      const char* v = std::getenv("CERA_CUDA_ABLATE");
      for (std::string rest = v ? v : ""; !rest.empty();) {
        const size_t end = rest.find(';');  // op names hold commas
        if (end != 0) out.push_back(rest.substr(0, end));
        rest = end == std::string::npos ? "" : rest.substr(end + 1);
      }
      if (!out.empty()) std::fprintf(stderr, "cera: CERA_CUDA_ABLATE is set: outputs are wrong (a timing tool)\n");
      return out;
    }();
    for (const std::string& p : prefixes)
      if (std::string_view(name).starts_with(p)) return true;
    return false;
  }

  // Ends the step's forward: closes a capture and launches the graph, or launches the replay.
  void finish_step() {
    if (profiler_.on()) profiler_.end_step(stream_);
    if (mode_ == Mode::Capturing) {
      cudaGraph_t g = nullptr;
      CERA_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      cudaGraphExec_t e = nullptr;
      const cudaError_t err = cudaGraphInstantiate(&e, g, 0);
      if (err != cudaSuccess) cudaGraphDestroy(g);
      CERA_CUDA_CHECK(err);
      auto graph = std::make_unique<CudaGraph>();
      graph->set(g, e);
      replay_ = graph.get();
      graphs_[capture_key_] = std::move(graph);
      mode_ = Mode::Replay;
    }
    if (mode_ == Mode::Replay) CERA_CUDA_CHECK(cudaGraphLaunch(replay_->exec(), stream_));
    mode_ = Mode::Idle;
  }

  // Waits for everything on the step stream; the next set_step then copies its metadata in order.
  void sync_stream() {
    CERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    stream_drained_ = true;
  }

  // Drops the step in progress without running it (a capture under way is ended and discarded).
  void abandon_step() {
    if (mode_ == Mode::Capturing) {
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    }
    mode_ = Mode::Idle;
  }

  // Ops that change state between steps must not land inside a capture: a step that was set up but
  // whose output was never read is finished first, so the order stays the caller's.
  void state_op() { finish_step(); }

  void invalidate_graphs() {
    graphs_.clear();
    seen_.clear();
  }

  // Host → device, complete on return and ordered before this backend's later work. (A plain
  // cudaMemcpy from pageable memory runs on the legacy stream, which stream_ (non-blocking) does not
  // wait for, and may return before its DMA has finished.)
  void upload(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    CERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    sync_stream();
  }

  const double* rope_table(const RopeParams& rope) {
    const auto key = std::make_tuple(rope.n_rot, rope.freq_base, rope.freq_scale, rope.freq_factors);
    auto it = rope_tables_.find(key);
    if (it != rope_tables_.end()) return it->second.as<double>();
    std::vector<double> inv(size_t(rope.n_rot / 2));
    cpu::rope_inv_freq(rope, inv.data());  // the CPU backend's frequencies, in double
    DeviceBuffer buf(sizeof(double) * std::max<size_t>(inv.size(), 1));
    upload(buf.get(), inv.data(), sizeof(double) * inv.size());
    return rope_tables_.emplace(key, std::move(buf)).first->second.as<double>();
  }

  cuda::KvLayer kv_layer(int32_t l) {
    cuda::KvLayer v;
    v.block_size = layout_.kv_block_size;
    v.kv_dim = layout_.kv_dim;
    v.f16 = kv_f16();
    v.base = kv_.as<char>() +
             kv_element_bytes() * size_t(l) * layout_.n_kv_blocks * 2 * layout_.kv_block_size * layout_.kv_dim;
    return v;
  }
  // Whether the cache holds f16 (options_.kv_cache, fixed for the backend's life; Auto: f32).
  bool kv_f16() const { return options_.kv_cache == CudaBackendOptions::KvCache::F16; }
  float* conv_slot_ptr(int32_t l, int32_t slot) {
    return conv_.as<float>() + (size_t(l) * layout_.n_conv_slots + size_t(slot)) * layout_.conv_state_dim;
  }
  size_t conv_slot_bytes() const { return sizeof(float) * size_t(layout_.conv_state_dim); }

  CudaBackendOptions options_;
  OpProfiler profiler_;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // argmax_rows_async's transfers to the host
  std::unique_ptr<cuda::Gemm> gemm_;
  std::deque<DeviceBuffer> buffers_;  // weights and activations, never moved or freed early
  DeviceBuffer* arena_ = nullptr;      // the weight chunk being filled
  size_t arena_used_ = 0;
  size_t arena_chunk_ = size_t(32) << 20;  // doubles per chunk up to 1 GiB
  StateLayout layout_;
  DeviceBuffer kv_, conv_;

  std::array<PinnedBuffer, kHostLogitsSlots> host_logits_;
  bool host_logits_mapped_ = false;
  int32_t host_logits_slot_ = -1;  // the step's (StepInputs::host_logits_slot)

  MetaLayout meta_;
  PinnedBuffer meta_host_[2];
  DeviceBuffer meta_dev_[2];
  cudaEvent_t meta_copied_[2] = {};  // on meta_stream_: the slot's copy is done
  cudaEvent_t meta_free_[2] = {};    // on stream_: every launch that read the slot is done
  int meta_slot_ = 0;
  cudaStream_t meta_stream_ = nullptr;  // the metadata copies
  bool stream_drained_ = false;         // nothing launched on stream_ since the host last waited for it
  cuda::StepView view_{};
  std::span<const int32_t> host_tokens_;  // the step's ids in the pinned buffer, for validation
  int32_t n_tokens_ = 0, n_seqs_ = 0, n_out_ = 0, n_tiles_ = 0;
  bool decode_ = false;

  Mode mode_ = Mode::Idle;
  std::string trace_path_;  // CERA_CUDA_TRACE_FILE (trace.h)
  int32_t max_keys_ = 0;      // the step's longest context (KV entries after the step)
  int32_t context_span_ = 0;  // cuda::decode_context_span of the step's longest context
  std::map<StepKey, std::unique_ptr<CudaGraph>> graphs_;
  std::set<StepKey> seen_;
  StepKey capture_key_{};
  CudaGraph* replay_ = nullptr;

  cuda::AttentionPrecision attention_precision_ = cuda::AttentionPrecision::F32;
  DeviceBuffer in16_, mid16_;  // fused prefill: the 16-bit GEMM inputs (normed x; SwiGLU output)
  DeviceBuffer handoff_;       // decode FFN: the SwiGLU row as int8 for the down product (Int8X)
  DeviceBuffer residual_handoff_;  // the residual row as int8 for the next norm's products (Int8X)
  NextNorm next_norm_;             // will_norm's hint, until the next op begins
  NextNorm residual_int8_;         // what residual_handoff_ holds, until the next op begins
  DeviceBuffer partial_;  // decode attention's split results
  DeviceBuffer prefill_partial_;  // prefill attention's key-range results (cuda::PrefillSplit)
  DeviceBuffer counters_;  // fused decode attention's per-(token, head chunk) split counters, kept zero
  std::map<std::tuple<int32_t, float, float, const float*>, DeviceBuffer> rope_tables_;
  PinnedBuffer read_host_, shift_host_, argmax_host_;
  DeviceBuffer argmax_dev_, argmax_scratch_;
  DeviceBuffer argmax_counters_;  // argmax_rows' per-row counters, kept zero
  // argmax_rows_async: two pinned result slots, their events, the pending (slot, rows) in order.
  PinnedBuffer argmax_pinned_[2];
  cudaEvent_t argmax_ready_[2] = {};  // the slot's ids are on the host (recorded on copy_stream_)
  cudaEvent_t argmax_done_[2] = {};   // the slot's argmax has run (recorded on stream_)
  int argmax_slot_ = 0;
  std::deque<std::pair<int, int32_t>> pending_;
  int32_t argmax_fed_rows_ = -1;  // rows of the last argmax (what tokens_from_argmax reads)
  DeviceBuffer top_k_dev_, top_k_scratch_;  // top_k_rows: values + ids; the chunks' candidates
  PinnedBuffer top_k_host_;
  DeviceBuffer shift_dev_, shift_scratch_;
};

}  // namespace

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorInsufficientDriver)
      return "no usable CUDA driver: none is installed, or it is older than the CUDA 13 runtime cera was built with";
    return std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device found";
  return {};
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw Error(ErrorCode::Unsupported, why);
  int n = 0;
  CERA_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (options.device < 0 || options.device >= n)
    throw Error(ErrorCode::InvalidArgument, "there is no CUDA device " + std::to_string(options.device) + " (" +
                                                std::to_string(n) + " found: cuda:0" +
                                                (n > 1 ? " .. cuda:" + std::to_string(n - 1) : std::string()) + ")");
  CudaBackendOptions o = options;
  if (env_is("CERA_CUDA_GRAPHS", "0")) o.use_graphs = false;
  if (env_is("CERA_CUDA_FUSE", "0")) o.fuse = false;  // A/B: the plain ops instead of the fused ones
  if (env_is("CERA_CUDA_FUSE_NORM", "0")) o.fold_norm = CudaBackendOptions::NormFold::Never;
  if (env_is("CERA_CUDA_FUSE_NORM", "1")) o.fold_norm = CudaBackendOptions::NormFold::Always;
  if (env_is("CERA_CUDA_EARLY_WEIGHTS", "0")) o.early_weights = false;
  if (env_is("CERA_CUDA_FUSE_ATTENTION", "0")) o.fuse_attention = false;
  if (env_is("CERA_CUDA_FUSE_CONV", "0")) o.fuse_conv = false;
  if (env_is("CERA_CUDA_KV", "f32")) o.kv_cache = CudaBackendOptions::KvCache::F32;
  if (env_is("CERA_CUDA_KV", "f16")) o.kv_cache = CudaBackendOptions::KvCache::F16;
  return std::make_unique<CudaBackend>(o);
}

}  // namespace cera
