#include <algorithm>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "engine/engine_impl.h"
#include "format/hf/model_source.h"

namespace cera {

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {

// The device the options ask for: --device, else cuda when -ngl asks for GPU layers, else cpu.
std::string resolved_device(const EngineOptions& options) {
  if (!options.device.empty()) return options.device;
  return options.n_gpu_layers > 0 ? "cuda" : "cpu";
}

// The KV cache type the options ask for ("" for the default), checked against what cera stores.
std::string resolved_cache_type(const EngineOptions& options, const std::string& device) {
  for (const std::string* t : {&options.cache_type_k, &options.cache_type_v})
    if (!t->empty() && *t != "f32" && *t != "f16")
      throw Error(ErrorCode::Unsupported, "KV cache type '" + *t + "' is not supported (cera stores f32, or f16 on CUDA)");
  const std::string& k = options.cache_type_k.empty() ? options.cache_type_v : options.cache_type_k;
  const std::string& v = options.cache_type_v.empty() ? options.cache_type_k : options.cache_type_v;
  if (k != v)
    throw Error(ErrorCode::Unsupported, "K and V caches of different types (" + k + ", " + v +
                                            ") are not supported: give --cache-type-k and --cache-type-v the same type");
  if (k == "f16" && device == "cpu")
    throw Error(ErrorCode::Unsupported, "an f16 KV cache needs --device cuda (the CPU backend keeps an f32 cache)");
  return k;
}

std::unique_ptr<Backend> make_backend(const EngineOptions& options) {
  const std::string device = resolved_device(options);
  const std::string cache_type = resolved_cache_type(options, device);
  if (device == "cpu") {
    if (options.n_gpu_layers > 0)
      throw Error(ErrorCode::InvalidArgument, "-ngl " + std::to_string(options.n_gpu_layers) +
                                                  " asks for GPU layers but the device is cpu (use --device cuda)");
    CpuBackendOptions bo;
    bo.n_threads = options.n_threads;
    return make_cpu_backend(bo);
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    if (options.n_gpu_layers == 0)
      throw Error(ErrorCode::InvalidArgument, "-ngl 0 keeps every layer on the CPU but the device is " + device);
    CudaBackendOptions co;
    if (device.size() > 4) {  // "cuda:N"
      const std::string n = device.substr(5);
      if (n.empty() || n.size() > 3 || n.find_first_not_of("0123456789") != std::string::npos)
        throw Error(ErrorCode::InvalidArgument, "bad device '" + device + "' (expected cuda or cuda:N, N a GPU index)");
      co.device = std::stoi(n);
    }
    if (cache_type == "f32") co.kv_cache = CudaBackendOptions::KvCache::F32;
    if (cache_type == "f16") co.kv_cache = CudaBackendOptions::KvCache::F16;
    return make_cuda_backend(co);
  }
  throw Error(ErrorCode::InvalidArgument, "unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  if (options.model_path.empty())
    throw Error(ErrorCode::InvalidArgument, "no model given (pass a GGUF file with -m)");
  if (options.n_ctx <= 0) throw Error(ErrorCode::InvalidArgument, "context size must be positive");
  if (options.n_batch < 0) throw Error(ErrorCode::InvalidArgument, "batch size must be positive (or 0: the default)");
  if (options.n_seq_max <= 0) throw Error(ErrorCode::InvalidArgument, "sequence count must be positive");

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->backend = make_backend(options);  // first: a bad device is reported before any file work
  impl->file = open_model_file(options.model_path);
  if (options.n_gpu_layers > 0) {  // refused before any weight is uploaded
    const std::string arch = impl->file->get_string_opt("general.architecture").value_or("");
    const int64_t n_layer = impl->file->get_int_opt(arch + ".block_count").value_or(0);
    if (options.n_gpu_layers < n_layer)
      throw Error(ErrorCode::Unsupported, "partial offload (-ngl " + std::to_string(options.n_gpu_layers) + " of " +
                                              std::to_string(n_layer) +
                                              " layers) is not supported: use -ngl 99 (all layers) or --device cpu");
  }
  // Defaults that depend on the device: a GPU wants large prefill steps, and chunks end at
  // checkpoints, so its checkpoints are further apart (the prefix cache resumes at multiples of it).
  const bool on_gpu = resolved_device(options).rfind("cuda", 0) == 0;
  if (impl->options.checkpoint_interval == 0)
    impl->options.checkpoint_interval = on_gpu ? kDefaultCheckpointGpu : kDefaultCheckpointCpu;
  ModelOptions mo;
  const int32_t n_batch = options.n_batch > 0 ? options.n_batch : on_gpu ? kDefaultBatchGpu : kDefaultBatchCpu;
  mo.max_batch_tokens = std::min(n_batch, options.n_ctx * options.n_seq_max);
  // Logits for a step: one row per sequence, or every token of an all_logits chunk (perplexity,
  // append(…, true)), which Session::append then keeps to kMaxLogitsRows tokens.
  mo.max_output_rows = std::max(kMaxLogitsRows, options.n_seq_max);
  impl->model = load_model(*impl->file, *impl->backend, mo);
  impl->tokenizer = std::make_unique<Tokenizer>(vocab_from_gguf(*impl->file));

  const ModelHparams& hp = impl->model->hparams();
  runtime::SequenceStoreConfig sc;
  sc.kv_block_size = 32;
  const int32_t interval = impl->options.checkpoint_interval;
  if (interval <= 0 || interval % sc.kv_block_size != 0)
    throw Error(ErrorCode::InvalidArgument, "checkpoint interval must be a positive multiple of " +
                                                std::to_string(sc.kv_block_size) + " (or 0: the default)");
  const int32_t blocks_per_seq = (options.n_ctx + sc.kv_block_size - 1) / sc.kv_block_size;

  // Size the prefix cache from its memory budget: KV blocks plus one conv checkpoint per interval.
  const StateLayout unit = impl->model->state_layout(sc.kv_block_size, 1, 1);
  const double kv_block_bytes =
      double(unit.n_attention_layers) * 2 * sc.kv_block_size * unit.kv_dim * double(impl->backend->kv_element_bytes());
  const double checkpoint_bytes = double(unit.n_conv_layers) * unit.conv_state_dim * 4;
  const double blocks_per_checkpoint = double(interval / sc.kv_block_size);
  const double bytes_per_block = kv_block_bytes + checkpoint_bytes / blocks_per_checkpoint;
  runtime::PrefixCacheConfig pc;
  pc.block_size = sc.kv_block_size;
  pc.needs_checkpoints = unit.n_conv_layers > 0;
  if (options.prefix_cache_mib > 0 && bytes_per_block > 0) {
    pc.max_blocks = int32_t(std::min(1e6, double(options.prefix_cache_mib) * 1048576.0 / bytes_per_block));
    pc.n_checkpoint_slots = pc.needs_checkpoints ? int32_t(pc.max_blocks / blocks_per_checkpoint) + 1 : 0;
  }
  sc.n_kv_blocks = blocks_per_seq * options.n_seq_max + pc.max_blocks;
  sc.n_slots = options.n_seq_max;
  impl->sequences = std::make_unique<runtime::SequenceStore>(sc);
  if (pc.max_blocks > 0) impl->prefix_cache = std::make_unique<runtime::PrefixCache>(pc, impl->sequences->blocks());
  impl->checkpoint_slot_base = options.n_seq_max;
  impl->backend->configure_state(
      impl->model->state_layout(sc.kv_block_size, sc.n_kv_blocks, options.n_seq_max + pc.n_checkpoint_slots));

  ModelInfo& info = impl->info;
  info.arch = hp.arch;
  info.name = hp.name;
  info.n_layer = hp.n_layer;
  info.n_embd = hp.n_embd;
  info.n_vocab = hp.n_vocab;
  info.n_ctx_train = hp.n_ctx_train;
  for (const auto& t : impl->file->tensors()) {
    info.n_params += uint64_t(t.n_elements());
    info.weight_bytes += t.nbytes;
  }
  info.backend = impl->backend->name();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const { return impl_->info; }
const EngineOptions& Engine::options() const { return impl_->options; }

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::token_to_piece(int32_t token) const { return impl_->tokenizer->token_to_piece(token); }

std::string Engine::detokenize(std::span<const int32_t> tokens) const {
  // Same text as generate() streams: valid UTF-8, invalid byte sequences as U+FFFD.
  StreamingDetokenizer detok(*impl_->tokenizer);
  std::string out;
  for (int32_t t : tokens) out += detok.push(t);
  return out + detok.flush();
}

bool Engine::is_end_of_generation(int32_t token) const { return impl_->tokenizer->is_eog(token); }

const std::shared_ptr<const GrammarVocab>& Engine::Impl::get_grammar_vocab() {
  if (!grammar_vocab) {
    // Each token's bytes and the end-of-generation set, once: the matcher's trie is built from them.
    std::vector<std::string> pieces(size_t(info.n_vocab));
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < info.n_vocab; ++id) {
      if (tokenizer->is_eog(id)) eog.push_back(id);
      else if (!tokenizer->is_control(id)) pieces[size_t(id)] = tokenizer->token_to_piece(id);
    }
    grammar_vocab = std::make_shared<const GrammarVocab>(std::move(pieces), std::move(eog));
  }
  return grammar_vocab;
}

const chat::ChatTemplate& Engine::Impl::get_chat_template() {
  if (!chat_template) {
    const auto source = file->get_string_opt("tokenizer.chat_template");
    if (!source) throw Error(ErrorCode::NotFound, options.model_path + ": the model has no chat template");
    chat_template = std::make_unique<chat::ChatTemplate>(*source);
    if (tokenizer->bos() >= 0) bos_text = tokenizer->token_text(tokenizer->bos());
    if (tokenizer->eos() >= 0) eos_text = tokenizer->token_text(tokenizer->eos());
  }
  return *chat_template;
}

void Engine::Impl::reserve_evicting(int32_t seq_id, int32_t n_tokens) {
  for (;;) {
    try {
      sequences->reserve(seq_id, n_tokens);
      return;
    } catch (const Error& e) {
      // The pool is shared with the prefix cache: give back cached blocks before failing.
      if (e.code() != ErrorCode::OutOfRange || !prefix_cache || prefix_cache->n_blocks() == 0) throw;
      prefix_cache->evict_to(prefix_cache->n_blocks() / 2);
    }
  }
}

int32_t Engine::Impl::claim_host_logits(int32_t seq_id) {
  for (int32_t slot = 0; slot < Backend::kHostLogitsSlots; ++slot) {
    if (host_logits_holder[slot] >= 0) continue;
    if (!backend->host_logits(slot, size_t(info.n_vocab))) return -1;
    host_logits_holder[slot] = seq_id;
    return slot;
  }
  return -1;
}

Tensor Engine::Impl::run_step(std::span<const SeqInput> inputs, bool tokens_from_argmax, int32_t host_logits_slot) {
  if (fetch_pending_logits) {  // this step overwrites the backend's logits: another session's must be read first
    const bool replaces_them = std::any_of(inputs.begin(), inputs.end(),
                                           [&](const SeqInput& in) { return in.seq_id == pending_logits_seq; });
    const auto fetch = std::move(fetch_pending_logits);
    fetch_pending_logits = nullptr;
    pending_logits_seq = -1;
    if (!replaces_them) fetch();
  }
  std::vector<int32_t> tokens, positions, output_rows;
  std::vector<StepSequence> seqs;
  for (const SeqInput& in : inputs) {
    runtime::SequenceState& s = sequences->get(in.seq_id);
    const int32_t n = int32_t(in.tokens.size());
    if (s.n_past + n > options.n_ctx)
      throw Error(ErrorCode::OutOfRange, "context is full: " + std::to_string(s.n_past + n) +
                                             " tokens exceed the context size of " +
                                             std::to_string(options.n_ctx) + " (raise it with -c)");
    // Copy-on-write: a block shared with a fork or the prefix cache is copied before we write.
    if (auto moved = sequences->make_tail_writable(in.seq_id)) backend->copy_kv_block(moved->first, moved->second);
    reserve_evicting(in.seq_id, s.n_past + n);
    StepSequence ss;
    ss.first_token = int32_t(tokens.size());
    ss.n_tokens = n;
    ss.n_past = s.n_past;
    ss.conv_slot = s.conv_slot;
    ss.kv_blocks = s.blocks;
    seqs.push_back(ss);
    for (int32_t i = 0; i < n; ++i) {
      if (in.all_logits || i == n - 1) output_rows.push_back(int32_t(tokens.size()));
      tokens.push_back(in.tokens[size_t(i)]);
      positions.push_back(s.n_past + i);
    }
  }
  StepInputs si{tokens, positions, seqs, output_rows};
  si.host_logits_slot = output_rows.size() == 1 ? host_logits_slot : -1;
  if (tokens_from_argmax) {  // the backend feeds the last argmax back itself; in.tokens are placeholders
    si.tokens = {};
    si.tokens_from_argmax = true;
  }
  ++step_count;
  backend->set_step(si);
  const int32_t T = int32_t(tokens.size()), n_out = int32_t(output_rows.size());
  const Tensor logits = backend->replaying() ? model->replay(T, n_out) : model->forward(T, n_out);
  backend->end_step();
  return logits;
}

void Engine::Impl::advance(std::span<const SeqInput> inputs) {
  for (const SeqInput& in : inputs) sequences->get(in.seq_id).n_past += int32_t(in.tokens.size());
}

void Engine::Impl::step(std::span<const SeqInput> inputs, HostVector<float>& logits_out, std::vector<float>* hidden_out) {
  const Tensor logits = run_step(inputs);
  logits_out.resize(size_t(logits.rows * logits.cols));
  backend->read(logits, logits_out.data());
  if (hidden_out) {
    const Tensor& h = model->output_hidden();
    hidden_out->resize(size_t(h.rows * h.cols));
    backend->read(h, hidden_out->data());
  }
  advance(inputs);
}

Tensor Engine::Impl::step_top_k(std::span<const SeqInput> inputs, int32_t k, std::vector<float>& values,
                                std::vector<int32_t>& ids, std::vector<float>* hidden_out) {
  const Tensor logits = run_step(inputs);
  values.resize(size_t(logits.rows) * size_t(k));
  ids.resize(size_t(logits.rows) * size_t(k));
  backend->top_k_rows(logits, k, values.data(), ids.data());
  ++top_k_steps;
  if (hidden_out) {
    const Tensor& h = model->output_hidden();
    hidden_out->resize(size_t(h.rows * h.cols));
    backend->read(h, hidden_out->data());
  }
  advance(inputs);
  return logits;
}

void Engine::Impl::step_argmax(std::span<const SeqInput> inputs, std::vector<int32_t>& argmax_out) {
  const Tensor logits = run_step(inputs);
  argmax_out.resize(size_t(logits.rows));
  backend->argmax_rows(logits, argmax_out.data());
  advance(inputs);
}

}  // namespace cera
