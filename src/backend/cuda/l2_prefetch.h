// How the idle blocks of a launch share an L2 prefetch of `bytes` bytes: in 4 KB pieces, block idx
// of n taking pieces [first, last). Host and device, so that the split is tested without a GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CERA_HOST_DEVICE __host__ __device__
#else
#define CERA_HOST_DEVICE
#endif

namespace cera::cuda {

inline constexpr uint32_t kL2PrefetchPiece = 4096;

struct L2PrefetchShare {
  uint32_t first, last;  // pieces; piece i is bytes [i · kL2PrefetchPiece, min(bytes, (i + 1) · kL2PrefetchPiece))
};

CERA_HOST_DEVICE inline L2PrefetchShare l2_prefetch_share(uint32_t bytes, uint32_t idx, uint32_t n) {
  const uint32_t pieces = (bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
  const uint32_t per = n > 0 ? (pieces + n - 1) / n : 0;
  const uint64_t first = uint64_t(idx) * per, last = first + per;
  return {uint32_t(first < pieces ? first : pieces), uint32_t(last < pieces ? last : pieces)};
}

// Bytes of piece i of a prefetch of `bytes`.
CERA_HOST_DEVICE inline uint32_t l2_prefetch_piece_bytes(uint32_t bytes, uint32_t i) {
  const uint32_t off = i * kL2PrefetchPiece;
  return bytes - off < kL2PrefetchPiece ? bytes - off : kL2PrefetchPiece;
}

}  // namespace cera::cuda

#undef CERA_HOST_DEVICE
