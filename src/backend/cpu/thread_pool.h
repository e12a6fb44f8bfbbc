// thread_pool.h -- the CPU backend's worker threads.
//
// A fixed set of workers that split one range at a time; the calling thread
// works too, so a pool of size 1 has no worker threads at all. Small ranges
// run inline on the caller: waking workers costs microseconds, which would
// dominate small tensors. Idle workers, and a caller waiting for them, poll
// for a short window (50 us) before they sleep, so that back-to-back ops do
// not pay a kernel wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ampx::impl {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  // `threads` counts the caller: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn on disjoint subranges covering [0, count), each at least `grain`
  // long (except the last), and returns when all have run. The first
  // exception thrown by fn is rethrown here after every part has finished.
  void parallel_for(int64_t count, int64_t grain, const RangeFn& fn);

  // Sends workers that are polling after their last job to sleep now,
  // rather than at the end of the polling window: called before work that
  // other threads (oneDNN's OpenMP team) will do on these cores, which
  // polling workers would compete with. A later parallel_for wakes them.
  void rest() { rest_requests_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void worker_loop();
  void run_parts();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // guarded by mutex_
  // generation_ (or a stop) as polling workers read it without the mutex.
  std::atomic<uint64_t> published_{0};
  bool stopping_ = false;
  std::atomic<int> busy_workers_{0};
  std::atomic<uint64_t> rest_requests_{0};

  // The job of the current generation.
  const RangeFn* job_ = nullptr;
  int64_t job_count_ = 0;
  int64_t job_part_size_ = 0;
  int64_t job_parts_ = 0;
  std::atomic<int64_t> next_part_{0};
  std::exception_ptr job_error_;
};

}  // namespace ampx::impl
