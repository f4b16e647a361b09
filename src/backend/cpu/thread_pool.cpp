#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cera::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long an idle thread spins before it sleeps. Long enough to bridge the single-threaded gaps
// between the ops of a step (norms, adds: a few µs), short enough that an idle engine, or an
// overloaded machine, doesn't burn a core.
// CERA_CPU_SPIN_US overrides it (for measuring; 0 = sleep at once).
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    const char* env = std::getenv("CERA_CPU_SPIN_US");
    return std::chrono::microseconds(env && *env ? std::atoi(env) : 200);
  }();
  return t;
}
constexpr uint32_t kClosed = 1u << 31;

// Spins until pred() or spin_time() has passed; true if pred() held.
template <class Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + spin_time();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;  // re-check (wait may return spuriously)
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    // Join unless the caller has already closed the job (it then no longer waits for us).
    uint32_t j = joined_.load(std::memory_order_acquire);
    while (!(j & kClosed) && !joined_.compare_exchange_weak(j, j + 1, std::memory_order_acq_rel)) {
    }
    if (j & kClosed) continue;
    (*job_)(index, n_threads_);
    if (joined_.fetch_sub(1, std::memory_order_acq_rel) == (kClosed | 1u)) joined_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  joined_.store(0, std::memory_order_release);  // a worker that joins sees job_
  generation_.fetch_add(1, std::memory_order_release);  // publishes job_ and the open job
  generation_.notify_all();
  fn(0, n_threads_);
  joined_.fetch_or(kClosed, std::memory_order_acq_rel);
  if (!spin_until([&] { return joined_.load(std::memory_order_acquire) == kClosed; })) {
    for (uint32_t j; (j = joined_.load(std::memory_order_acquire)) != kClosed;)
      joined_.wait(j, std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  run([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) break;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace cera::cpu
