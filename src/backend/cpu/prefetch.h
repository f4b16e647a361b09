// Software prefetch of the weight stream, for the decode products.
//
// A one-token product reads every weight row once and does little arithmetic per byte, so its
// loads wait on DRAM unless their lines were asked for well before: the hardware prefetchers lose
// the stream at each 4 KB page and each new tile. A tile of R adjacent rows reads R interleaved
// streams, and the next tile reads the same positions R rows further on, so each kernel asks, for
// every block it reads, for the same position a whole number of tiles ahead: at least
// kPrefetchLeadBytes (2-16 KB measured alike). Dev machine, 2 cores, LFM2-350M tg128 with the
// partition of matmul.cpp: Q4_K_M 57 -> ~100 t/s, Q4_0 77 -> ~115, BF16 25 -> 37 (docs/BENCHMARKS.md).
#pragma once

#include <cstddef>

namespace cera::cpu::detail {
namespace {  // internal linkage: the ISA files that include this are compiled with different flags

inline constexpr size_t kPrefetchLeadBytes = 4096;
// Steps (and tiles) of up to this many tokens read the weights as streams (matmul.cpp partitions
// them so); tiles of more reuse each weight enough to be bound by their arithmetic, and prefetches
// only cost them (BF16 pp512 on the dev machine: -10 % with them in its 6-token tiles).
inline constexpr int kPrefetchMaxTokens = 4;

// How far ahead a tile of tile_bytes (its rows × their row bytes) prefetches.
inline size_t prefetch_lead(size_t tile_bytes) {
  return tile_bytes == 0 ? 0 : (kPrefetchLeadBytes + tile_bytes - 1) / tile_bytes * tile_bytes;
}

// Addresses p, p + 64, ... below p + kBytes, into all cache levels (a prefetch never faults, even
// past a mapping). Called for consecutive pieces of a stream, whose addresses are then never more
// than a line apart: every line of the stream is asked for.
template <size_t kBytes>
inline void prefetch_lines(const void* p) {
  const char* c = static_cast<const char*>(p);
  for (size_t o = 0; o < kBytes; o += 64) __builtin_prefetch(c + o);
}

}  // namespace
}  // namespace cera::cpu::detail
