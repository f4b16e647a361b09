// The decode kernels' prefetch distance: whole tiles ahead (so each prefetch lands on the position
// a later tile reads), and no less than the minimum lead.
#include <gtest/gtest.h>

#include "backend/cpu/prefetch.h"

namespace cera::cpu::detail {
namespace {

TEST(Prefetch, LeadIsTheFewestWholeTilesReachingTheMinimum) {
  for (size_t tile : {size_t(1), size_t(144), size_t(576), size_t(1152), size_t(4096), size_t(9216), size_t(41472)}) {
    const size_t lead = prefetch_lead(tile);
    EXPECT_EQ(lead % tile, 0u) << tile;
    EXPECT_GE(lead, kPrefetchLeadBytes) << tile;
    EXPECT_LT(lead - tile, kPrefetchLeadBytes) << tile;  // one tile fewer would fall short
  }
  EXPECT_EQ(prefetch_lead(0), 0u);
}

}  // namespace
}  // namespace cera::cpu::detail
