// The machine's read bandwidth, the ceiling against which docs/BENCHMARKS.md puts CPU decode:
// THREADS threads each sum their contiguous part of a 2 GiB buffer (8-byte loads the compiler
// vectorises, software prefetch 4 KB ahead as the decode kernels do), best of REPS passes.
// Usage: cera_bench_memory_read [THREADS=2] [REPS=5]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

uint64_t sum_range(const uint64_t* p, size_t n) {
  uint64_t s = 0;
  constexpr size_t kAhead = 4096 / sizeof(uint64_t), kLine = 64 / sizeof(uint64_t);
  for (size_t i = 0; i < n; i += kLine) {
    __builtin_prefetch(p + i + kAhead);
    for (size_t j = i; j < i + kLine && j < n; ++j) s += p[j];
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const size_t n = (size_t(2) << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = i;  // touch every page before timing
  double best = 0;
  uint64_t check = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t b = n * size_t(t) / size_t(threads), e = n * size_t(t + 1) / size_t(threads);
        sums[size_t(t)] = sum_range(buf.data() + b, e - b);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t v : sums) check += v;
    best = std::max(best, double(n * sizeof(uint64_t)) / s / 1e9);
  }
  std::printf("read bandwidth, %d threads: %.1f GB/s (best of %d passes over 2 GiB; checksum %llu)\n", threads, best,
              reps, static_cast<unsigned long long>(check));
  return 0;
}
