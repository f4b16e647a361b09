// A fixed pool of worker threads for data-parallel loops. The calling thread takes part in the
// work, so a pool of n threads starts n-1 workers; n = 1 runs everything inline.
//
// A decode step issues ~80 parallel regions of 20-200 µs each, so hand-off latency matters: workers
// spin (with pause) for a short while after each job before sleeping on a futex (std::atomic::wait).
// Work is handed out dynamically and a worker only takes part if it arrives while the job is still
// open: the caller closes the job when it has run out of work and then waits only for workers that
// joined. On an overloaded machine (other builds on our 2 cores) a descheduled worker therefore
// costs nothing instead of a scheduler time slice per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace cera::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) on the calling thread and on every worker that joins before the
  // caller's own call returns; waits for those. fn must therefore share its work out dynamically.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into chunks of `grain` and hands them out dynamically; fn(begin, end).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // Bumped once per job (and once at shutdown); workers wait for it to change.
  alignas(64) std::atomic<uint32_t> generation_{0};
  // kClosed | number of workers inside the current job.
  alignas(64) std::atomic<uint32_t> joined_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace cera::cpu
