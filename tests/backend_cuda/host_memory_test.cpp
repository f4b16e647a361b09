// host_memory.h: the buffers the engine reads logits into. Heap memory until a CUDA backend exists,
// page-locked after, and the backend's read() copies into a page-locked one directly (no staging
// buffer): the values must be those of a read into ordinary memory. The first two tests run
// without a GPU as well (CI), where pinning falls back to the heap.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "backend/host_memory.h"
#include "cuda_test_support.h"

namespace cera {
namespace {

bool page_locked(const void* p) {
  cudaPointerAttributes a{};
  const bool locked = cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost;
  cudaGetLastError();
  return locked;
}

void check_vector_works(HostVector<float>& v) {
  std::iota(v.begin(), v.end(), 1.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
  v.resize(v.size() * 3, -1.0f);  // a reallocation keeps the values
  for (size_t i = 0; i < v.size() / 3; ++i) ASSERT_EQ(v[i], float(i + 1)) << i;
  EXPECT_EQ(v.back(), -1.0f);
  HostVector<float> other(5, 2.0f);
  std::swap(v, other);
  EXPECT_EQ(v.size(), 5u);
  EXPECT_EQ(other[0], 1.0f);
}

TEST(HostMemory, HeapWithoutPinning) {
  host_memory_pin(false);
  HostVector<float> v(1000);
  check_vector_works(v);
  HostVector<float> fresh(16);
  EXPECT_FALSE(page_locked(fresh.data()));
}

// With pinning on, allocation succeeds whatever the device: page-locked on a GPU machine, the heap
// where the driver refuses (no device).
TEST(HostMemory, PinningOnAllocatesWithOrWithoutADevice) {
  host_memory_pin(true);
  HostVector<float> v(1000);
  check_vector_works(v);
  HostVector<float> fresh(16);
  if (cuda_unavailable_reason().empty()) EXPECT_TRUE(page_locked(fresh.data()));
  else EXPECT_FALSE(page_locked(fresh.data()));
  host_memory_pin(false);
}

TEST(HostMemory, CudaBackendReadsIntoPageLockedBuffersDirectly) {
  CERA_REQUIRE_CUDA();
  host_memory_pin(false);
  auto backend = make_cuda_backend({});  // turns pinning on
  // Rows of 1,000 floats in a tensor whose rows may be padded: the copy is two-dimensional.
  const Tensor t = backend->alloc(3, 1000);
  std::vector<float> values(size_t(3 * 1000));
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f - 7.0f;
  test::write(*backend, t, values);
  HostVector<float> pinned(values.size(), 0.0f);
  ASSERT_TRUE(page_locked(pinned.data()));
  std::vector<float> heap(values.size(), 0.0f);
  backend->read(t, pinned.data());
  backend->read(t, heap.data());
  EXPECT_TRUE(std::equal(pinned.begin(), pinned.end(), values.begin()));
  EXPECT_EQ(heap, values);
}

}  // namespace
}  // namespace cera
