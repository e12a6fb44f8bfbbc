// chunk_plan.h -- how the CPU backend's multi-tensor loops cut a list of
// tensors into chunks (core/multi_tensor.h) and share them over the thread
// pool (cpu_amp.cpp, cpu_grad_stats.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/multi_tensor.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cpu {

// 64Ki elements (256 KiB of fp32) stay in a core's L2 cache while it works
// on them, and a large model still has thousands of chunks to share out.
constexpr int64_t kChunkSize = int64_t{1} << 16;

// A list with fewer elements than this in all runs on the calling thread:
// waking the workers would cost more than the work.
constexpr int64_t kInlineElements = int64_t{1} << 15;

template <int D>
math::storage_t<D>* typed(void* data) {
  return static_cast<math::storage_t<D>*>(data);
}

template <int D>
const math::storage_t<D>* typed(const void* data) {
  return static_cast<const math::storage_t<D>*>(data);
}

struct Plan {
  std::vector<Chunk> chunks;
  int64_t elements = 0;

  explicit Plan(const std::vector<int64_t>& counts) : chunks(plan_chunks(counts, kChunkSize)) {
    for (int64_t count : counts) elements += count;
  }

  // Calls fn(i, chunks[i]) for every chunk. Each chunk is processed whole by
  // one thread, so per-chunk results are the same whatever the pool's size.
  template <class Fn>
  void for_each_chunk(ThreadPool& pool, Fn&& fn) const {
    const int64_t n = static_cast<int64_t>(chunks.size());
    const int64_t grain = elements < kInlineElements ? n : 1;
    pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i, chunks[static_cast<size_t>(i)]);
    });
  }
};

}  // namespace cpu
}  // namespace ampx::impl
