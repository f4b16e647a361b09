// Per-block timestamps of every kernel of a step, for seeing where a replayed decode step's time
// goes between kernels (there is no Nsight Systems on the GPU machine, and a CUDA graph with PDL
// overlaps kernels, which per-op CUDA events cannot show). Built only with -DCERA_CUDA_TRACE=ON:
// then each block's thread 0 records, through pdl.h's two calls, when the block started
// (pdl_launch_dependents) and when its PDL wait returned (the kernel before it had finished),
// with the grid's launch id, its SM and the launch's shape. `CERA_CUDA_TRACE_FILE=path` starts
// the recording with the backend and writes the last records as CSV when it closes;
// tools/device/trace_step.py turns them into a step's timeline.
#pragma once

#include <cstdint>
#include <string>

namespace cera::cuda::trace {

struct Record {
  unsigned long long grid, t_start, t_wait;  // %gridid; %globaltimer (ns) at start and after the wait
  uint32_t sm, blocks, threads, block;       // SM, blocks in the grid, threads per block, linear block id
};

inline constexpr uint32_t kMark = 0x80000000u;  // Record::threads of a trace_mark record

struct Sink {
  unsigned long long n;  // records written so far (the ring wraps at cap)
  unsigned long long cap;
  Record* records;
};

// Every translation unit with kernels registers how to point its copy of the sink symbol at the
// shared sink (static initialisation; see trace.cuh).
using Binder = void (*)(Sink*);
bool register_binder(Binder b);

// Whether this binary records (built with CERA_CUDA_TRACE).
bool compiled_in();
// Allocates the ring and binds every translation unit to it; no-op unless compiled in.
void start(size_t capacity);
// Writes the ring's records, oldest first, as CSV to `path`; frees it.
void stop_and_write(const std::string& path);

}  // namespace cera::cuda::trace
