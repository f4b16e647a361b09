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
  // The norm in the matvec's prologue too (CERA_CUDA_FUSE_NORM=1). Off: on the H200 the prologue
  // delayed each block's weight stream by more than the separate norm kernel costs (LFM2-1.2B BF16
  // decode 935 vs 1038 tokens/s).
  bool fuse_norm = false;
  bool prefetch = false;   // matvec blocks prefetch weights to L2 before the PDL wait (CERA_CUDA_PREFETCH=1: on)
};

// Empty when a CUDA device can be used; otherwise why not ("built without CUDA", "no CUDA driver", ...).
std::string cuda_unavailable_reason();

// Throws Error(Unsupported) with cuda_unavailable_reason() when there is no usable device.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options = {});

}  // namespace cera
