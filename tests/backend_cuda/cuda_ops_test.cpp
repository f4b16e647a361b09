// Every CUDA backend op against the CPU backend (the reference, itself tested against scalar code):
// the same inputs through the Backend interface on both, outputs compared. Steps mix sequences of
// different lengths with scattered KV blocks, then decode, so paging, causality and per-sequence
// state are all exercised. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <ostream>
#include <string>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

using test::random_floats;
using test::read;
using test::rel_diff;
using test::write;

// The same tensors on the CPU and the CUDA backend. kv_f16: the CUDA KV cache holds f16, and the
// CPU stores its K and V rounded to f16 values, so both attend over the same keys and values.
struct Both {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> gpu;
  explicit Both(bool kv_f16 = false) {
    CpuBackendOptions c;
    c.n_threads = 2;
    c.round_kv_to_f16 = kv_f16;
    cpu = make_cpu_backend(c);
    CudaBackendOptions o;
    o.use_graphs = false;
    o.kv_cache = kv_f16 ? CudaBackendOptions::KvCache::F16 : CudaBackendOptions::KvCache::F32;
    gpu = make_cuda_backend(o);
  }
  struct Pair {
    Tensor c, g;
  };
  Pair alloc(int64_t rows, int64_t cols, const std::vector<float>* init = nullptr) {
    Pair p{cpu->alloc(rows, cols), gpu->alloc(rows, cols)};
    if (init) {
      write(*cpu, p.c, *init);
      write(*gpu, p.g, *init);
    }
    return p;
  }
  // The CPU backend uses weights in place (as from a mapped file): keep the data alive.
  std::deque<std::vector<float>> weights_data;
  Pair weight(int64_t rows, int64_t cols, const std::vector<float>& data) {
    const std::vector<float>& kept = weights_data.emplace_back(data);
    return {cpu->upload_weight(GgmlType::F32, rows, cols, kept.data()),
            gpu->upload_weight(GgmlType::F32, rows, cols, kept.data())};
  }
  template <typename F>
  void both(F&& f) {
    f(*cpu, false);
    f(*gpu, true);
  }
  double diff(const Pair& p) { return rel_diff(read(*gpu, p.g), read(*cpu, p.c)); }
};

using test::Seq;

// The fused ops (rms_norm_matmul, rms_norm_swiglu, matmul_add, ffn_swiglu) against their plain-op definitions
// (Backend's defaults) run on the same CUDA backend: the same weight kernels either way, so the only
// difference is where the norm is rounded (≤ a few ulp per activation) — a wrong row pairing, a
// missed norm or a lost residual shows up as O(0.1..1). With F32 weights the CPU backend's defaults
// are checked too. Decode sizes (1, 2 rows: fused matvec) and a GEMM size (6 rows).
// Both with the norm folded into the matvec (NormFold::Always) and as its own kernel (Never).
using FusedCase = std::tuple<GgmlType, int64_t, bool>;
class CudaFused : public ::testing::TestWithParam<FusedCase> {};

TEST_P(CudaFused, FusedOpsMatchPlainOps) {
  CERA_REQUIRE_CUDA();
  const auto [type, R, fuse_norm] = GetParam();
  auto cpu = make_cpu_backend({2});
  CudaBackendOptions o;
  o.use_graphs = false;
  o.fold_norm = fuse_norm ? CudaBackendOptions::NormFold::Always : CudaBackendOptions::NormFold::Never;
  auto gpu = make_cuda_backend(o);
  const int64_t D = 512, F = 768, Q = 384, KV = 128;  // k of every product a multiple of 256
  std::deque<std::vector<uint8_t>> kept;            // weights used in place by the CPU backend
  auto weight = [&](Backend& be, int64_t rows, int64_t cols, uint32_t seed) {
    const auto v = random_floats(size_t(rows * cols), seed, -0.1f, 0.1f);
    const size_t row_bytes = ggml_row_bytes(type, cols);
    std::vector<uint8_t>& bytes = kept.emplace_back(row_bytes * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row_ref(type, v.data() + r * cols, bytes.data() + r * row_bytes, cols);
    return be.upload_weight(type, rows, cols, bytes.data());
  };
  struct Net {
    Tensor wq, wk, wv, gate, up, down, attn_norm, ffn_norm;
    Tensor x, h, qkv, gu, out, prod;
  };
  auto make = [&](Backend& be) {
    Net n;
    // Uploaded in this order, so q|k|v and gate|up are adjacent (the fused paths need that).
    n.wq = weight(be, Q, D, 11), n.wk = weight(be, KV, D, 12), n.wv = weight(be, KV, D, 13);
    n.gate = weight(be, F, D, 14), n.up = weight(be, F, D, 15), n.down = weight(be, D, F, 16);
    n.attn_norm = be.alloc(1, D), n.ffn_norm = be.alloc(1, D);
    write(be, n.attn_norm, random_floats(size_t(D), 21, 0.5f, 1.5f));
    write(be, n.ffn_norm, random_floats(size_t(D), 22, 0.5f, 1.5f));
    n.x = be.alloc(R, D), n.h = be.alloc(R, D), n.qkv = be.alloc(R, Q + 2 * KV), n.gu = be.alloc(R, 2 * F);
    n.out = be.alloc(R, F), n.prod = be.alloc(R, D);
    write(be, n.x, random_floats(size_t(R * D), 23, -2.f, 2.f));
    return n;
  };
  const test::Step st({{int32_t(R), 0, {}, -1}});
  // Runs the three ops, fused (the backend's overrides) or plain (Backend's defaults).
  auto run = [&](Backend& be, Net& n, bool fused) {
    be.set_step(st.in);
    Tensor qkv = n.qkv;
    Tensor ys[] = {qkv.cols_slice(0, Q), qkv.cols_slice(Q, KV), qkv.cols_slice(Q + KV, KV)};
    const Tensor ws[] = {n.wq, n.wk, n.wv};
    if (fused) {
      be.rms_norm_matmul(n.x, n.attn_norm, 1e-5f, n.h, ws, ys);
      be.rms_norm_swiglu(n.x, n.ffn_norm, 1e-5f, n.h, n.gate, n.up, n.gu, n.out);
      be.matmul_add(n.out, n.down, 0.75f, n.prod, n.x);
    } else {
      be.Backend::rms_norm_matmul(n.x, n.attn_norm, 1e-5f, n.h, ws, ys);
      be.Backend::rms_norm_swiglu(n.x, n.ffn_norm, 1e-5f, n.h, n.gate, n.up, n.gu, n.out);
      be.Backend::matmul_add(n.out, n.down, 0.75f, n.prod, n.x);
    }
    auto q = read(be, n.qkv), o = read(be, n.out), x = read(be, n.x);
    // The whole feed-forward branch (on the GEMM path: norm and SwiGLU write the 16-bit GEMM inputs).
    if (fused) be.ffn_swiglu(n.x, n.ffn_norm, 1e-5f, n.gate, n.up, n.down, 0.5f, n.h, n.gu, n.out, n.prod);
    else be.Backend::ffn_swiglu(n.x, n.ffn_norm, 1e-5f, n.gate, n.up, n.down, 0.5f, n.h, n.gu, n.out, n.prod);
    return std::tuple{q, o, x, read(be, n.x)};
  };
  Net fused_net = make(*gpu), plain_net = make(*gpu);
  // Q4_0/Q8_0/Q4_K/Q5_K/Q6_K decode products round x' to int8 (quant_kernels.h; tested exactly against its
  // own reference in matvec_int8_test.cpp): first without it, where fused and plain run the same
  // arithmetic, then with it, where the fused and the plain path round different x' (norm_w ⊙ x
  // against the normalized x) to 8 bits (≈ 5e-3 here; a wiring error is ≥ 0.1).
  const bool int8_path = cuda::matvec_int8_activations(type);
  const bool int8_was_on = cuda::matvec_int8_enabled();
  if (int8_path) cuda::matvec_int8_enable(false);
  const auto [q1, o1, x1, f1] = run(*gpu, fused_net, true);
  const auto [q2, o2, x2, f2] = run(*gpu, plain_net, false);
  cuda::matvec_int8_enable(int8_was_on);
  EXPECT_LE(rel_diff(q1, q2), 2e-6) << "rms_norm_matmul (q|k|v)";
  EXPECT_LE(rel_diff(o1, o2), 2e-6) << "rms_norm_swiglu";
  EXPECT_LE(rel_diff(x1, x2), 2e-6) << "matmul_add";
  EXPECT_LE(rel_diff(f1, f2), 2e-6) << "ffn_swiglu";
  if (int8_path) {
    Net fast_net = make(*gpu), plain2_net = make(*gpu);
    const auto [q4, o4, x4, f4] = run(*gpu, fast_net, true);
    const auto [q5, o5, x5, f5] = run(*gpu, plain2_net, false);
    EXPECT_LE(rel_diff(q4, q5), 1.5e-2) << "rms_norm_matmul (q|k|v), int8 activations";
    EXPECT_LE(rel_diff(o4, o5), 1.5e-2) << "rms_norm_swiglu, int8 activations";
    EXPECT_LE(rel_diff(x4, x5), 1.5e-2) << "matmul_add, int8 activations";
    EXPECT_LE(rel_diff(f4, f5), 1.5e-2) << "ffn_swiglu, int8 activations";
  }
  if (type == GgmlType::F32) {
    Net cpu_net = make(*cpu);
    const auto [q3, o3, x3, f3] = run(*cpu, cpu_net, false);
    // Different summation orders (k ≤ 768): a few 1e-7 expected.
    EXPECT_LE(rel_diff(q1, q3), 1e-5) << "rms_norm_matmul vs CPU";
    EXPECT_LE(rel_diff(o1, o3), 1e-5) << "rms_norm_swiglu vs CPU";
    EXPECT_LE(rel_diff(x1, x3), 1e-5) << "matmul_add vs CPU";
    EXPECT_LE(rel_diff(f1, f3), 1e-5) << "ffn_swiglu vs CPU";
  }
}

INSTANTIATE_TEST_SUITE_P(TypesAndRows, CudaFused,
                         ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::BF16, GgmlType::Q4_0,
                                                              GgmlType::Q8_0, GgmlType::Q6_K),
                                            ::testing::Values(int64_t(1), int64_t(2), int64_t(6)), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(ggml_type_name(std::get<0>(info.param))) + "_rows" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_norm_in_matvec" : "");
                         });

class CudaNorms : public ::testing::TestWithParam<int64_t> {};

// Widths that take the register kernel (1000, 4096), and the general one (4100 is too wide, 999 not
// a multiple of 4).
TEST_P(CudaNorms, NormsAndElementwiseMatchCpu) {
  CERA_REQUIRE_CUDA();
  Both b;
  const int64_t R = 7, C = GetParam();
  const auto xv = random_floats(R * C, 1, -3, 3), dv = random_floats(R * C, 2), wv = random_floats(C, 3, 0.5f, 1.5f);
  auto x = b.alloc(R, C, &xv), d = b.alloc(R, C, &dv), out = b.alloc(R, C);
  auto w = b.weight(1, C, wv);
  const test::Step st({{int32_t(R), 0, {}, -1}});
  b.both([&](Backend& be, bool g) {
    be.set_step(st.in);
    be.rms_norm(g ? x.g : x.c, g ? w.g : w.c, 1e-5f, g ? out.g : out.c);
  });
  EXPECT_LE(b.diff(out), 1e-6) << "rms_norm";
  b.both([&](Backend& be, bool g) { be.add_rms_norm(g ? x.g : x.c, g ? d.g : d.c, g ? w.g : w.c, 1e-6f, g ? out.g : out.c); });
  EXPECT_LE(b.diff(x), 1e-7) << "add_rms_norm residual";
  EXPECT_LE(b.diff(out), 1e-6) << "add_rms_norm";
  // A column slice (strided rows), as the models use for FFN halves.
  b.both([&](Backend& be, bool g) {
    Tensor xs = (g ? x.g : x.c).cols_slice(100, 512), ds = (g ? d.g : d.c).cols_slice(3, 512);
    be.swiglu(xs, ds, (g ? out.g : out.c).cols_slice(0, 512));
    be.add(g ? x.g : x.c, g ? d.g : d.c);
    be.scale(g ? d.g : d.c, 0.37f);
    be.add_bias(g ? d.g : d.c, g ? w.g : w.c);
  });
  EXPECT_LE(b.diff(out), 1e-6) << "swiglu";
  EXPECT_LE(b.diff(x), 1e-7) << "add";
  EXPECT_LE(b.diff(d), 1e-7) << "scale + add_bias";
  // gather_output_rows with a subset of rows, in a new order.
  std::vector<int32_t> pick = {5, 0, 3};
  const StepInputs in2{st.tokens, st.positions, st.sequences, pick};
  auto picked = b.alloc(3, C);
  b.both([&](Backend& be, bool g) {
    be.set_step(in2);
    be.gather_output_rows(g ? x.g : x.c, g ? picked.g : picked.c);
  });
  EXPECT_EQ(read(*b.gpu, picked.g), read(*b.cpu, picked.c));
  // gather_output_rows_norm (the final norm of the picked rows): the CUDA backend's one kernel is bit
  // for bit its gather followed by its rms_norm (Backend's default), and matches the CPU's.
  auto normed = b.alloc(3, C), normed_plain = b.alloc(3, C);
  b.both([&](Backend& be, bool g) {
    be.set_step(in2);
    be.gather_output_rows_norm(g ? x.g : x.c, g ? w.g : w.c, 1e-5f, g ? normed.g : normed.c);
    be.Backend::gather_output_rows_norm(g ? x.g : x.c, g ? w.g : w.c, 1e-5f, g ? normed_plain.g : normed_plain.c);
  });
  EXPECT_EQ(read(*b.gpu, normed.g), read(*b.gpu, normed_plain.g)) << "gather_output_rows_norm: one kernel vs two";
  EXPECT_LE(b.diff(normed), 1e-6) << "gather_output_rows_norm";
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaNorms, ::testing::Values(1000, 999, 4096, 4100),
                         [](const auto& info) { return "cols" + std::to_string(info.param); });

// argmax_rows (greedy decoding on the device) against the CPU: random rows, a row of equal values
// (the first wins), a row whose maximum is the last element, and one of -inf except one entry.
TEST(CudaOps, ArgmaxRowsMatchesCpu) {
  CERA_REQUIRE_CUDA();
  Both b;
  const int64_t R = 6, C = 70001;
  auto v = random_floats(size_t(R * C), 77, -5, 5);
  for (int64_t c = 0; c < C; ++c) v[size_t(3 * C + c)] = 1.5f;
  v[size_t(4 * C + C - 1)] = 9.f;
  for (int64_t c = 0; c < C; ++c) v[size_t(5 * C + c)] = -INFINITY;
  v[size_t(5 * C + 12345)] = -1e30f;
  auto x = b.alloc(R, C, &v);
  std::vector<int32_t> tokens = {0}, positions = {0}, rows = {0};
  std::vector<StepSequence> ss(1);
  ss[0].n_tokens = 1;
  const StepInputs in{tokens, positions, ss, rows};
  std::vector<int32_t> cpu(R), gpu(R);
  b.cpu->set_step(in);
  b.cpu->argmax_rows(x.c, cpu.data());
  b.gpu->set_step(in);
  b.gpu->argmax_rows(x.g, gpu.data());
  EXPECT_EQ(gpu, cpu);
  EXPECT_EQ(cpu[3], 0);
  EXPECT_EQ(cpu[4], C - 1);
  EXPECT_EQ(cpu[5], 12345);
}

struct AttnShape {
  int32_t n_head, n_head_kv, head_dim;
  bool neox;
};
void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "{n_head " << s.n_head << ", n_head_kv " << s.n_head_kv << ", head_dim " << s.head_dim
      << (s.neox ? ", neox}" : "}");
}

// The prefill attention kernel for a CudaAttention case: "simt" keeps the SIMT kernel; unset (the
// default dispatch), head dims 64 and 128 take a tensor-core one. The backend reads it at each call.
test::ScopedEnv attention_kernel_env(bool simt) { return {"CERA_CUDA_ATTENTION", simt ? "simt" : nullptr}; }
// The fused decode layer's splits: one thread block cluster per head group (default, sm_90), or
// merged through global memory by the last split to finish (the _simt variants).
test::ScopedEnv decode_cluster_env(bool simt) { return {"CERA_CUDA_ATTENTION_CLUSTER", simt ? "0" : nullptr}; }

// What both attention tests set up: the shape's parameters, a KV pool, q/k/v/out buffers on both
// backends, and a step's random q, k, v written to both.
struct AttentionRig {
  Both b;
  int32_t hd, kv_dim, qd;
  AttentionParams ap;
  RopeParams rope;
  Both::Pair q, k, v, out;
  struct Rows {
    Both::Pair q, k, v, out;
  };

  AttentionRig(const AttnShape& sh, int32_t n_layers, int32_t n_blocks, int64_t max_tokens, bool kv_f16)
      : b(kv_f16), hd(sh.head_dim), kv_dim(sh.n_head_kv * sh.head_dim), qd(sh.n_head * sh.head_dim),
        ap{sh.n_head, sh.n_head_kv, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim))} {
    StateLayout L;
    L.n_attention_layers = n_layers;
    L.kv_dim = kv_dim;
    L.kv_block_size = 16;
    L.n_kv_blocks = n_blocks;
    b.both([&](Backend& be, bool) { be.configure_state(L); });
    rope.n_rot = hd;
    rope.neox = sh.neox;
    rope.freq_base = 10000.f;
    q = b.alloc(max_tokens, qd), k = b.alloc(max_tokens, kv_dim), v = b.alloc(max_tokens, kv_dim);
    out = b.alloc(max_tokens, qd);
  }
  Rows rows(int64_t T) {
    auto first = [&](const Both::Pair& p) { return Both::Pair{p.c.first_rows(T), p.g.first_rows(T)}; };
    return {first(q), first(k), first(v), first(out)};
  }
  void write_both(const Both::Pair& p, const std::vector<float>& data) {
    write(*b.cpu, p.c, data);
    write(*b.gpu, p.g, data);
  }
  // Random per-head q and k norm weights (seeds seed, seed + 1) on both backends.
  std::pair<Both::Pair, Both::Pair> head_norms(uint32_t seed) {
    return {b.weight(1, hd, random_floats(size_t(hd), seed, 0.5f, 1.5f)),
            b.weight(1, hd, random_floats(size_t(hd), seed + 1, 0.5f, 1.5f))};
  }
  // Attention layer `layer` of step st on both backends through the fused decode layer
  // (qk_norm_rope_attention), with the q/k norm weights `norms` (head_norms; null: none).
  void attend_fused(int32_t layer, const test::Step& st, const Rows& r,
                    const std::pair<Both::Pair, Both::Pair>* norms = nullptr) {
    b.both([&](Backend& be, bool g) {
      be.set_step(st.in);
      const Tensor* q_norm = norms ? (g ? &norms->first.g : &norms->first.c) : nullptr;
      const Tensor* k_norm = norms ? (g ? &norms->second.g : &norms->second.c) : nullptr;
      be.qk_norm_rope_attention(layer, g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, g ? r.v.g : r.v.c, q_norm, k_norm, 1e-6f,
                                ap, rope, g ? r.out.g : r.out.c);
    });
  }
  // Attention layer 0 of step st on both backends, without q/k norms: through the fused decode
  // layer or the two ops it replaces (qk_norm_rope, then attention).
  void attend(const test::Step& st, const Rows& r, bool fused) {
    if (fused) return attend_fused(0, st, r);
    b.both([&](Backend& be, bool g) {
      be.set_step(st.in);
      be.qk_norm_rope(g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, nullptr, nullptr, 1e-6f, ap, rope);
      be.attention(0, g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, g ? r.v.g : r.v.c, g ? r.out.g : r.out.c, ap);
    });
  }
  // Random q, k, v for T tokens (seeds seed, seed+1, seed+2), on both backends.
  Rows random_step(int64_t T, uint32_t& seed) {
    const Rows r = rows(T);
    write_both(r.q, random_floats(size_t(T * qd), seed++, -2, 2));
    write_both(r.k, random_floats(size_t(T * kv_dim), seed++, -2, 2));
    write_both(r.v, random_floats(size_t(T * kv_dim), seed++, -2, 2));
    return r;
  }
};


// Three sequences of 5, 70 and 1 prompt tokens on the first ten blocks of perm.
std::vector<Seq> three_prompts(const std::vector<int32_t>& perm) {
  return {{5, 0, {perm[0], perm[1]}, -1},
          {70, 0, {perm[2], perm[3], perm[4], perm[5], perm[6], perm[7]}, -1},
          {1, 0, {perm[8], perm[9]}, -1}};
}

// (shape, simt, kv_f16): every shape once on the SIMT prefill kernel and once on the default
// dispatch, each with an f32 and an f16 KV cache. An f16 cache is checked against the CPU storing
// f16-rounded K/V, at the same tolerances; its prefill always takes the SIMT kernel (the default
// dispatch would take the f16 tensor-core kernel, whose own f16 rounding of Q and P the
// CudaAttentionF16 tests bound), and `simt` picks the decode splits' merge as it does for f32.
class CudaAttention : public ::testing::TestWithParam<std::tuple<AttnShape, bool, bool>> {
 protected:
  const AttnShape& shape() const { return std::get<0>(GetParam()); }
  bool simt() const { return std::get<1>(GetParam()); }
  bool kv_f16() const { return std::get<2>(GetParam()); }
  test::ScopedEnv prefill_env() const { return attention_kernel_env(simt() || kv_f16()); }
};

TEST_P(CudaAttention, PagedPrefillThenDecodeMatchCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  AttentionRig rig(sh, 2, 64, 80, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(64, 7);
  std::vector<Seq> seqs = three_prompts(perm);
  auto [qnorm, knorm] = rig.head_norms(11);
  uint32_t seed = 100;
  for (int step = 0; step < 4; ++step) {
    const test::Step st(seqs);
    const int64_t T = st.n_tokens();
    const AttentionRig::Rows r = rig.random_step(T, seed);
    b.both([&](Backend& be, bool g) {
      be.set_step(st.in);
      be.qk_norm_rope(g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, step % 2 ? nullptr : (g ? &qnorm.g : &qnorm.c),
                      step % 2 ? nullptr : (g ? &knorm.g : &knorm.c), 1e-6f, rig.ap, rig.rope);
      be.attention(1, g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, g ? r.v.g : r.v.c, g ? r.out.g : r.out.c, rig.ap);
    });
    EXPECT_LE(b.diff(r.q), 2e-6) << "q after norm+rope, step " << step;
    EXPECT_LE(b.diff(r.k), 2e-6) << "k after norm+rope, step " << step;
    EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, step " << step << " (T=" << T << ")";
    // Next: decode, one token per sequence (step 1, 2), then a mixed step (3: 2 tokens for seq 0).
    for (auto& s : seqs) {
      s.n_past += s.n_tokens;
      s.n_tokens = 1;
    }
    if (step == 2) seqs[0].n_tokens = 2;
  }
  // Context shift of sequence 1 (73 tokens): drop positions [10, 30), move [30, 73) down by 20.
  ASSERT_EQ(seqs[1].n_past, 73);
  const std::vector<int32_t> blocks1 = seqs[1].blocks;
  RopeParams* rp = &rig.rope;
  b.both([&](Backend& be, bool) { be.shift_kv(1, blocks1, 30, 43, 20, rig.ap, rp); });
  seqs = {{1, 53, blocks1, -1}};
  const test::Step st(seqs);
  const AttentionRig::Rows r = rig.rows(1);
  const auto kv = random_floats(size_t(rig.kv_dim), 998, -2, 2);
  rig.write_both(r.q, random_floats(size_t(rig.qd), 999, -2, 2));
  rig.write_both(r.k, kv);
  rig.write_both(r.v, kv);
  b.both([&](Backend& be, bool g) {
    be.set_step(st.in);
    be.attention(1, g ? r.q.g : r.q.c, g ? r.k.g : r.k.c, g ? r.v.g : r.v.c, g ? r.out.g : r.out.c, rig.ap);
  });
  EXPECT_LE(b.diff(r.out), 2e-5) << "attention after a context shift";
}

// The fused decode layer (qk_norm_rope_attention: q/k norm, RoPE, K/V store, split-K attention and
// merge in one launch) against the CPU's two ops. A prefill step, then decode steps with the norms
// on and off and a sequence that joins with its first token (n_past 0), then a mixed step that the
// plain kernels run: it reads the K/V the fused launches stored. The decode contexts (≤ 32 keys:
// one block per head group writing its output directly; 71-74 keys: one split for head dims up to
// 64 (128 keys per split), 2 for 80 and 128 (64 keys), 5 for 256 (16 keys)) cover the kernel's
// split counts below LongPromptMatchesCpu's (and below kClusterMinKeys: these splits merge through
// global memory).
TEST_P(CudaAttention, FusedDecodeLayerMatchesCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  AttentionRig rig(sh, 2, 64, 80, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(64, 11);
  std::vector<Seq> seqs = three_prompts(perm);
  const auto norms = rig.head_norms(21);
  uint32_t seed = 300;
  for (int step = 0; step < 5; ++step) {
    const test::Step st(seqs);
    const int64_t T = st.n_tokens();
    const AttentionRig::Rows r = rig.random_step(T, seed);
    rig.attend_fused(1, st, r, step != 2 ? &norms : nullptr);
    EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, step " << step << " (T=" << T << ")";
    for (auto& s : seqs) {
      s.n_past += s.n_tokens;
      s.n_tokens = 1;
    }
    if (step == 1) seqs.push_back({1, 0, {perm[10]}, -1});  // joins: its first token is decoded
    if (step == 3) seqs[0].n_tokens = 2;                     // mixed step: the plain kernels
  }
}

// One-token decode steps of one sequence through the fused layer: 1, 2, 3, 32, 33, 127 and 128 keys
// (span 0, batch-1 decode's shape at tg128: one q head a block for groups of more than 2, else 2;
// one split of 128 keys for head dims up to 64, splits of 64 keys for 80-128 and of 16 for 256
// merged through global memory), the q/k norms on and off, prompts of 28 and 93 tokens between;
// then 129, 230 and 257 keys (spans 256 and 512: clusters, or with CERA_CUDA_ATTENTION_CLUSTER=0
// in the _simt variants splits merged through global memory).
TEST_P(CudaAttention, ShortContextDecodeMatchesCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  AttentionRig rig(sh, 1, 24, 100, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(24, 13);
  std::vector<Seq> seqs = {{0, 0, std::vector<int32_t>(perm.begin(), perm.begin() + 20), -1}};
  const auto norms = rig.head_norms(31);
  uint32_t seed = 1100;
  auto run = [&](const std::vector<int32_t>& steps) {
    for (const int32_t n : steps) {
      seqs[0].n_tokens = n;
      const test::Step st(seqs);
      const AttentionRig::Rows r = rig.random_step(n, seed);
      rig.attend_fused(0, st, r, seqs[0].n_past % 2 == 0 ? &norms : nullptr);
      EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, " << n << " tokens after " << seqs[0].n_past;
      seqs[0].n_past += n;
    }
  };
  run({1, 1, 1, 28, 1, 1, 93, 1, 1});
  ASSERT_EQ(seqs[0].n_past, 128);
  const test::ScopedEnv cluster_env = decode_cluster_env(simt());
  run({1, 100, 1, 26, 1});
}

// Long prompts: a 530-token and a 45-token sequence in one step (many query tiles; key loops over
// several key tiles, the last one partial), then a mixed step (37 more tokens after the 530, and
// one), then two decode steps through the fused layer (qk_norm_rope_attention), whose 568 and 47
// keys take 5 splits and 1 (head dims ≤ 64), 9 and 1 (80, 128), or all 16, of several key batches
// per warp, and 3 (256) when merged through global memory (_simt variants); as clusters of at
// most 8 splits (_default on sm_90, where the step has more than kClusterMinKeys keys and the
// device holds its 2 × n_head_kv clusters at once): 5 and 1, 8 and 1, 8 and 3.
TEST_P(CudaAttention, LongPromptMatchesCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  const test::ScopedEnv cluster_env = decode_cluster_env(simt());
  AttentionRig rig(sh, 1, 48, 575, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(48, 3);
  std::vector<Seq> seqs = {{530, 0, std::vector<int32_t>(perm.begin(), perm.begin() + 36), -1},
                           {45, 0, std::vector<int32_t>(perm.begin() + 36, perm.begin() + 39), -1}};
  uint32_t seed = 500;
  for (int step = 0; step < 4; ++step) {
    const test::Step st(seqs);
    const int64_t T = st.n_tokens();
    const AttentionRig::Rows r = rig.random_step(T, seed);
    rig.attend(st, r, step >= 2);
    EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, step " << step << " (T=" << T << ")";
    for (auto& s : seqs) {
      s.n_past += s.n_tokens;
      s.n_tokens = 1;
    }
    if (step == 0) seqs[0].n_tokens = 37;
  }
}

// Decode steps through the fused layer at contexts of 181, 332, 633 and 634 keys (context spans
// 256, 512 and 1024), one sequence prefilled in between: on sm_90 (_default) its splits run as
// clusters of 2, 4 and 8 blocks for head dims ≤ 64, 4, 8 and 8 for 80-128, and 8 for 256; the
// _simt variants merge them through global memory.
TEST_P(CudaAttention, DecodeClusterSizesMatchCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  const test::ScopedEnv cluster_env = decode_cluster_env(simt());
  AttentionRig rig(sh, 1, 48, 300, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(48, 5);
  std::vector<Seq> seqs = {{0, 0, std::vector<int32_t>(perm.begin(), perm.begin() + 40), -1}};
  uint32_t seed = 700;
  for (const int32_t n : {180, 1, 150, 1, 300, 1, 1}) {  // tokens per step; single tokens take the fused layer
    seqs[0].n_tokens = n;
    const test::Step st(seqs);
    const AttentionRig::Rows r = rig.random_step(n, seed);
    rig.attend(st, r, n == 1);
    EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, " << n << " tokens after " << seqs[0].n_past;
    seqs[0].n_past += n;
  }
}

// Decode steps past kLongContextSpan / 2 keys (2,061 and 2,062, context span 4096): a one-token step
// then takes kDecodeSplits single blocks per KV head, each over all of its q heads (up to 4), merged
// through global memory — for every shape, whatever the cluster setting.
TEST_P(CudaAttention, DecodeLongContextMatchesCpu) {
  CERA_REQUIRE_CUDA();
  const AttnShape sh = shape();
  const test::ScopedEnv env = prefill_env();
  const test::ScopedEnv cluster_env = decode_cluster_env(simt());
  constexpr int32_t kPrompt = 2060;
  static_assert(kPrompt > cuda::kLongContextSpan / 2, "the decode steps must take the long-context shape");
  AttentionRig rig(sh, 1, 136, kPrompt, kv_f16());
  Both& b = rig.b;
  const std::vector<int32_t> perm = test::shuffled_blocks(136, 9);
  std::vector<Seq> seqs = {{kPrompt, 0, std::vector<int32_t>(perm.begin(), perm.begin() + 130), -1}};
  uint32_t seed = 900;
  for (int step = 0; step < 3; ++step) {
    const test::Step st(seqs);
    const int64_t T = st.n_tokens();
    const AttentionRig::Rows r = rig.random_step(T, seed);
    rig.attend(st, r, step > 0);
    EXPECT_LE(b.diff(r.out), 2e-5) << "attention output, " << T << " tokens after " << seqs[0].n_past;
    seqs[0].n_past += seqs[0].n_tokens;
    seqs[0].n_tokens = 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Combine(::testing::Values(AttnShape{32, 8, 64, true}, AttnShape{16, 2, 128, true},
                                         AttnShape{4, 4, 32, false}, AttnShape{12, 4, 80, false},
                                         AttnShape{32, 2, 64, true}, AttnShape{8, 8, 256, true},
                                         AttnShape{16, 8, 64, false}),
                       ::testing::Bool(), ::testing::Bool()),
    [](const auto& info) {
      const AttnShape& s = std::get<0>(info.param);
      return "h" + std::to_string(s.n_head) + "_kv" + std::to_string(s.n_head_kv) + "_d" + std::to_string(s.head_dim) +
             (std::get<1>(info.param) ? "_simt" : "_default") + (std::get<2>(info.param) ? "_f16kv" : "");
    });

TEST(CudaOps, ShortConvOverSequencesAndStepsMatchesCpu) {
  CERA_REQUIRE_CUDA();
  Both b;
  const int32_t D = 300, Lk = 3;
  StateLayout L;
  L.n_conv_layers = 2;
  L.conv_state_dim = (Lk - 1) * D;
  L.n_conv_slots = 5;
  b.both([&](Backend& be, bool) {
    be.configure_state(L);
    for (int s = 0; s < 5; ++s) be.clear_conv_slot(s);
  });
  auto w = b.weight(D, Lk, random_floats(size_t(D * Lk), 5));
  std::vector<Seq> seqs = {{6, 0, {}, 3}, {1, 0, {}, 0}, {40, 0, {}, 4}};
  auto bcx = b.alloc(64, 3 * D), out = b.alloc(64, D);
  for (int step = 0; step < 4; ++step) {
    const test::Step st(seqs);
    const int64_t T = st.n_tokens();
    const auto data = random_floats(size_t(T * 3 * D), 50 + step, -2, 2);
    Both::Pair x{bcx.c.first_rows(T), bcx.g.first_rows(T)}, o{out.c.first_rows(T), out.g.first_rows(T)};
    write(*b.cpu, x.c, data), write(*b.gpu, x.g, data);
    b.both([&](Backend& be, bool g) {
      be.set_step(st.in);
      be.short_conv(1, g ? x.g : x.c, g ? w.g : w.c, g ? o.g : o.c);
    });
    EXPECT_LE(b.diff(o), 1e-7) << "short conv, step " << step;
    for (auto& s : seqs) s.n_tokens = 1;
    if (step == 1) {  // fork: slot 4's state copied to slot 1, then continued there too
      b.both([&](Backend& be, bool) { be.copy_conv_slot(4, 1); });
      seqs.push_back({2, 0, {}, 1});
    }
  }
}

// LFM2's conv mixer input as one op (rms_norm_matmul_short_conv): CUDA decode folds the short
// convolution into the in_proj matvec's epilogue (a block takes 4 channels: their B, C and X rows).
// Checked against the op's definition (Backend's default: norm + product, then the conv kernel) on a
// second CUDA backend, over prefill, decode steps of 1 and 2 sequences (the fused epilogue), a step
// of 3 (the GEMM path) and a sequence joining mid-way, so a wrong row triplet, a misread state slot
// or a state not rolled forward shows up in the following steps' outputs. The same weight kernels
// either way: only the norm's rounding may differ (as in CudaFused). With F32 weights against the
// CPU backend too. Hidden sizes 512 and 2048 (LFM2-1.2B's, whose float decode launch on the H200
// halves its warps to fit one wave of blocks: matvec.cu, one_wave_launch).
using ConvFusedCase = std::tuple<GgmlType, bool, int64_t>;
class CudaShortConvFused : public ::testing::TestWithParam<ConvFusedCase> {};

TEST_P(CudaShortConvFused, InProjWithConvEpilogueMatchesPlainOps) {
  CERA_REQUIRE_CUDA();
  const auto [type, fold, K] = GetParam();
  // C channels over a hidden size of K: K - 2 leaves the last block of 4 channels with 2.
  const int64_t C = K - 2;
  const int32_t Lk = 3;
  CudaBackendOptions o;
  o.use_graphs = false;
  o.fold_norm = fold ? CudaBackendOptions::NormFold::Always : CudaBackendOptions::NormFold::Never;
  auto fused = make_cuda_backend(o), plain = make_cuda_backend(o);
  auto cpu = make_cpu_backend({2});
  std::deque<std::vector<uint8_t>> kept;  // weights used in place by the CPU backend
  const auto in_data = random_floats(size_t(3 * C * K), 31, -0.1f, 0.1f);
  const auto conv_data = random_floats(size_t(C * Lk), 32, -1.f, 1.f);
  const auto norm_data = random_floats(size_t(K), 33, 0.5f, 1.5f);
  struct Net {
    Backend* be = nullptr;
    Tensor in_proj, conv, norm, x, h, bcx, y;
  };
  StateLayout layout;
  layout.n_conv_layers = 2;
  layout.conv_state_dim = (Lk - 1) * C;
  layout.n_conv_slots = 4;
  auto make = [&](Backend& be) {
    Net n;
    n.be = &be;
    const size_t row_bytes = ggml_row_bytes(type, K);
    std::vector<uint8_t>& bytes = kept.emplace_back(row_bytes * size_t(3 * C));
    for (int64_t r = 0; r < 3 * C; ++r)
      quant::quantize_row_ref(type, in_data.data() + r * K, bytes.data() + r * row_bytes, K);
    n.in_proj = be.upload_weight(type, 3 * C, K, bytes.data());
    n.conv = be.upload_weight(GgmlType::F32, C, Lk, conv_data.data());  // outlives the backends
    n.norm = be.alloc(1, K);
    write(be, n.norm, norm_data);
    n.x = be.alloc(16, K), n.h = be.alloc(16, K), n.bcx = be.alloc(16, 3 * C), n.y = be.alloc(16, C);
    be.configure_state(layout);
    for (int s = 0; s < layout.n_conv_slots; ++s) be.clear_conv_slot(s);
    return n;
  };
  Net f = make(*fused), p = make(*plain), c = make(*cpu);
  // Prefill of two sequences, decode of both, one joins (3 rows: the GEMM path), the new one alone.
  std::vector<std::vector<Seq>> steps = {
      {{5, 0, {}, 2}, {3, 0, {}, 0}},
      {{1, 5, {}, 2}},
      {{1, 6, {}, 2}, {1, 3, {}, 0}},
      {{1, 7, {}, 2}, {1, 4, {}, 0}, {4, 0, {}, 3}},
      {{1, 4, {}, 3}},
      {{1, 8, {}, 2}, {1, 5, {}, 3}},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const test::Step st(steps[i]);
    const int64_t T = st.n_tokens();
    const auto xs = random_floats(size_t(T * K), 40 + uint32_t(i), -2.f, 2.f);
    auto run = [&](Net& n, bool use_fused) {
      n.be->set_step(st.in);
      Tensor x = n.x.first_rows(T), h = n.h.first_rows(T), bcx = n.bcx.first_rows(T), y = n.y.first_rows(T);
      write(*n.be, x, xs);
      if (use_fused) n.be->rms_norm_matmul_short_conv(x, n.norm, 1e-5f, h, n.in_proj, bcx, 1, n.conv, y);
      else n.be->Backend::rms_norm_matmul_short_conv(x, n.norm, 1e-5f, h, n.in_proj, bcx, 1, n.conv, y);
      return read(*n.be, y);
    };
    const auto yf = run(f, true), yp = run(p, false);
    EXPECT_LE(rel_diff(yf, yp), 2e-6) << "step " << i << " (" << T << " rows)";
    if (type == GgmlType::F32) {
      const auto yc = run(c, false);
      EXPECT_LE(rel_diff(yf, yc), 1e-5) << "step " << i << " vs CPU";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaShortConvFused,
                         ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::BF16, GgmlType::Q4_0,
                                                              GgmlType::Q6_K),
                                            ::testing::Bool(), ::testing::Values(int64_t(512), int64_t(2048))),
                         [](const auto& info) {
                           return std::string(ggml_type_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_norm_in_matvec" : "") + "_k" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace cera
