// Shared by the CUDA backend tests: skip without a device, and host <-> backend copies that work
// for both the CPU backend (host memory) and the CUDA backend (device memory).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

namespace cera::test {

// GTEST_SKIP()s the calling test (with the reason) when no CUDA device can be used.
#define CERA_REQUIRE_CUDA()                                                               \
  do {                                                                                    \
    const std::string cera_why = ::cera::cuda_unavailable_reason();                       \
    if (!cera_why.empty()) GTEST_SKIP() << "no CUDA device: " << cera_why;                \
  } while (0)

// Asserts that a CUDA runtime call succeeded, naming it.
#define CERA_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// Device memory owned by a test (null when the allocation failed).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// Sets (value non-null) or unsets an environment variable for the object's lifetime, then restores
// what was there: the CUDA backend reads its A/B switches (CERA_CUDA_*) from the environment.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

inline bool is_cuda(Backend& b) { return b.name().rfind("cuda", 0) == 0; }

inline void write(Backend& b, const Tensor& t, const std::vector<float>& host) {
  ASSERT_EQ(host.size(), size_t(t.rows * t.cols));
  const size_t row = size_t(t.cols) * sizeof(float);
  if (is_cuda(b)) {
    ASSERT_EQ(cudaMemcpy2D(t.data, t.row_bytes, host.data(), row, row, size_t(t.rows), cudaMemcpyHostToDevice),
              cudaSuccess);
  } else {
    for (int64_t r = 0; r < t.rows; ++r) std::memcpy(t.row(r), host.data() + r * t.cols, row);
  }
}

inline std::vector<float> read(Backend& b, const Tensor& t) {
  std::vector<float> out(size_t(t.rows * t.cols));
  b.read(t, out.data());
  return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ‖a − b‖ / ‖b‖; NaN anywhere gives infinity (so a NaN can never pass a bound).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace cera::test
