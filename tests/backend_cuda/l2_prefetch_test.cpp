// The split of the decode attention's L2 prefetch over its idle blocks (l2_prefetch.h): host-only,
// so it runs without a GPU. Every byte of the range is prefetched by exactly one block, none past
// its end (a piece past the end would read another allocation's bytes or fault).
#include "backend/cuda/l2_prefetch.h"

#include <gtest/gtest.h>

#include <vector>

namespace cera::cuda {
namespace {

TEST(L2Prefetch, SharesCoverTheRangeOnceAndStopAtItsEnd) {
  for (const uint32_t bytes : {256u, 4096u, 4352u, 1u << 20, (16u << 20) + 256u, 33554432u}) {
    for (const uint32_t n : {1u, 7u, 96u, 480u, 4096u}) {
      std::vector<uint8_t> seen(bytes, 0);
      uint32_t prev_last = 0;
      for (uint32_t idx = 0; idx < n; ++idx) {
        const L2PrefetchShare sh = l2_prefetch_share(bytes, idx, n);
        ASSERT_LE(sh.first, sh.last);
        if (sh.first < sh.last) {
          ASSERT_EQ(sh.first, prev_last) << "blocks take consecutive pieces";
          prev_last = sh.last;
        }
        for (uint32_t i = sh.first; i < sh.last; ++i) {
          const uint32_t len = l2_prefetch_piece_bytes(bytes, i);
          ASSERT_GT(len, 0u);
          ASSERT_EQ(len % 16, 0u) << "a bulk prefetch moves whole 16-byte units";
          ASSERT_LE(uint64_t(i) * kL2PrefetchPiece + len, bytes) << "piece " << i << " runs past the end";
          for (uint32_t b = 0; b < len; ++b) ++seen[size_t(i) * kL2PrefetchPiece + b];
        }
      }
      for (uint32_t b = 0; b < bytes; ++b) ASSERT_EQ(seen[b], 1) << "byte " << b << " of " << bytes << ", " << n << " blocks";
    }
  }
}

}  // namespace
}  // namespace cera::cuda
