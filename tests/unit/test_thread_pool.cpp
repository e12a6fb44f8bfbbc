// test_thread_pool.cpp -- the CPU backend's worker threads: every index of a
// range is visited exactly once, whether the workers are still polling from
// the previous job (jobs back to back) or asleep (jobs after a pause longer
// than the polling window); an exception reaches the caller only after
// every part has run; a pool is destroyed cleanly in either state; rest()
// loses no work.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

using ampx::impl::ThreadPool;

namespace {

// Runs one job over `count` indices and checks that each was visited once
// and every part respected the grain.
void check_one_job(ThreadPool& pool, int64_t count, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(count));
  std::atomic<bool> short_part{false};
  pool.parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    if (end - begin < grain && end != count) short_part = true;
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
  });
  CHECK_FALSE(short_part.load());
  int64_t wrong = 0;
  for (auto& v : visits) wrong += v.load() != 1;
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("thread pool: each index once, back to back and after the workers slept") {
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    for (int job = 0; job < 200; ++job) check_one_job(pool, 1000 + job, 7);
    for (int job = 0; job < 5; ++job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the polling window
      check_one_job(pool, 100000, 1000);
    }
    check_one_job(pool, 5, 100);  // one part: runs on the caller
  }
}

// rest() sends polling workers to sleep early: jobs right after it (the
// workers then asleep or on their way there) and rest() calls while a
// worker still runs its part lose nothing.
TEST_CASE("thread pool: rest() between and after jobs loses no work") {
  for (int threads : {2, 4}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    for (int job = 0; job < 300; ++job) {
      check_one_job(pool, 2000 + job, 3);
      if (job % 3 != 2) pool.rest();
      if (job % 5 == 0) pool.rest();
    }
    std::atomic<int64_t> visited{0};
    pool.parallel_for(4000, 1, [&](int64_t begin, int64_t end) {
      pool.rest();  // from inside a part, while the others still run
      visited += end - begin;
    });
    CHECK(visited.load() == 4000);
    check_one_job(pool, 100000, 1000);
  }
}

TEST_CASE("thread pool: a part's exception is rethrown after every part has run") {
  ThreadPool pool(3);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int64_t> visited{0};
    CHECK_THROWS_AS(pool.parallel_for(3000, 1,
                                      [&](int64_t begin, int64_t end) {
                                        visited += end - begin;
                                        if (begin == 0) throw std::runtime_error("part 0");
                                      }),
                    std::runtime_error);
    CHECK(visited.load() == 3000);
  }
  check_one_job(pool, 999, 1);  // the pool still works
}

TEST_CASE("thread pool: destroyed while its workers poll or sleep") {
  {
    ThreadPool pool(4);
    check_one_job(pool, 4096, 1);
  }  // workers still polling
  {
    ThreadPool pool(4);
    check_one_job(pool, 4096, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }  // workers asleep
  { ThreadPool pool(2); }  // never used
}
