#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace ampx::impl {
namespace {

using Clock = std::chrono::steady_clock;

// How long a thread keeps polling before it sleeps on a condition variable:
// a training step's ops follow each other within microseconds, and waking a
// sleeping thread through the kernel costs tens of them (on two EPYC cores a
// ReLU over 2^18 f32 took 61 us through Python with sleeping workers, 20 us
// with polling ones). Polling yields the core every 64 polls, so that a
// ready thread of another pool (oneDNN's OpenMP) runs.
constexpr auto kSpinWindow = std::chrono::microseconds(50);

// Polls `ready` until it holds or the spin window has passed.
template <class Ready>
void spin_until(Ready&& ready) {
  const Clock::time_point until = Clock::now() + kSpinWindow;
  for (int polls = 0;; ++polls) {
    if (ready()) return;
    if ((polls & 63) == 63) {
      if (Clock::now() >= until) return;
      std::this_thread::yield();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    published_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_parts() {
  for (;;) {
    const int64_t part = next_part_.fetch_add(1);
    if (part >= job_parts_) return;
    const int64_t begin = part * job_part_size_;
    const int64_t end = std::min(job_count_, begin + job_part_size_);
    try {
      (*job_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!job_error_) job_error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  // rest() calls made since the current job was taken end the polling.
  uint64_t rests = rest_requests_.load(std::memory_order_relaxed);
  for (;;) {
    spin_until([&] {
      return published_.load(std::memory_order_acquire) != seen ||
             rest_requests_.load(std::memory_order_relaxed) != rests;
    });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    rests = rest_requests_.load(std::memory_order_relaxed);
    run_parts();
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t count, int64_t grain, const RangeFn& fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_parts = (count + grain - 1) / grain;
  const int64_t parts = std::min<int64_t>(max_parts, size());
  if (parts <= 1) {
    fn(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_count_ = count;
    job_part_size_ = (count + parts - 1) / parts;
    job_parts_ = (count + job_part_size_ - 1) / job_part_size_;
    next_part_.store(0);
    job_error_ = nullptr;
    busy_workers_.store(static_cast<int>(workers_.size()));
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  run_parts();
  const auto finished = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  spin_until(finished);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
    job_ = nullptr;
    error = job_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ampx::impl
