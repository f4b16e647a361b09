// The CUDA backend: weights on the GPU in their stored formats, activations F32, paged KV and conv
// state in device memory, a decode step replayed from a CUDA graph (DESIGN.md §3).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace cera {

struct CudaBackendOptions {
  int device = 0;          // CUDA device ordinal
  bool use_graphs = true;  // capture each decode step shape once and replay it (CERA_CUDA_GRAPHS=0: off)
  bool fuse = true;        // fused decode ops (SwiGLU/residual in the matvec; CERA_CUDA_FUSE=0: off)
  // Where the rms norm before a decode product is folded into the matvec (Σx² from the x slices it
  // loads, norm_w applied to them, the division by rms(x) in its epilogue) instead of running as a
  // kernel of its own. The fold costs the product ~1 µs on float weights but 2-4 µs on quantized
  // ones decoded to f32, whose arithmetic already bounds them; a norm kernel costs ~3 µs. So by
  // default float weights and those with int8 activations (cuda::matvec_int8_activations: Q4_0,
  // Q4_K, Q5_K, Q6_K, Q8_0), whose products are memory-bound, fold (H200: LFM2-1.2B BF16 tg128 1,114 vs
  // 1,062-1,092; Q4_0 decoded to f32 1,160-1,191 vs 1,242-1,249 had it folded).
  // CERA_CUDA_FUSE_NORM=0: never, =1: always.
  enum class NormFold { Never, MemoryBound, Always };  // MemoryBound: float and int8-activation weights
  NormFold fold_norm = NormFold::MemoryBound;
  // Decode attention layers in one launch: q/k norm + RoPE + K/V store + attention + split merge
  // (CERA_CUDA_FUSE_ATTENTION=0: the separate kernels).
  bool fuse_attention = true;
  // Decode: LFM2's short convolution in the epilogue of its in_proj matvec (CERA_CUDA_FUSE_CONV=0:
  // the separate kernel).
  bool fuse_conv = true;
  // Matvec blocks request their first weights before the PDL wait (CERA_CUDA_EARLY_WEIGHTS=0: after).
  bool early_weights = true;
  // The KV cache's element type. F16 halves its memory (twice the context or sequences) and the
  // bytes that prefill at depth reads, but decode reads it no faster yet (H200, after 4,096 tokens:
  // tg128 4-12 % slower, BENCHMARKS.md), so Auto is f32 for now (--cache-type-k/-v, or
  // CERA_CUDA_KV=f32|f16, which overrides).
  enum class KvCache { Auto, F32, F16 };
  KvCache kv_cache = KvCache::Auto;
};

// Empty when a CUDA device can be used; otherwise why not ("built without CUDA", "no CUDA driver", ...).
std::string cuda_unavailable_reason();

// Throws Error(Unsupported) with cuda_unavailable_reason() when there is no usable device.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options = {});

}  // namespace cera
