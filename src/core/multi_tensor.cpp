#include "core/multi_tensor.h"

#include <algorithm>

#include "core/error.h"

namespace ampx::impl {

std::vector<Chunk> plan_chunks(const std::vector<int64_t>& counts, int64_t chunk_size) {
  if (chunk_size < 1) fail(AMPX_ERR_INTERNAL, "plan_chunks: chunk_size is ", chunk_size);
  size_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0)
      fail(AMPX_ERR_INTERNAL, "plan_chunks: tensor ", i, " has ", counts[i], " elements");
    // Written so that no intermediate can pass INT64_MAX.
    total += static_cast<size_t>(counts[i] / chunk_size + (counts[i] % chunk_size != 0));
  }
  std::vector<Chunk> chunks;
  chunks.reserve(total);
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t count = counts[i];
    for (int64_t begin = 0; begin < count;) {
      const int64_t end = begin + std::min(chunk_size, count - begin);
      chunks.push_back({static_cast<int64_t>(i), begin, end});
      begin = end;
    }
  }
  return chunks;
}

std::vector<PlannedLaunch> plan_launches(const std::vector<Chunk>& chunks, int max_chunks,
                                         int max_tensors) {
  if (max_chunks < 1 || max_tensors < 1)
    fail(AMPX_ERR_INTERNAL, "plan_launches: max_chunks is ", max_chunks, " and max_tensors is ",
         max_tensors, "; both must be at least 1");
  std::vector<PlannedLaunch> launches;
  for (const Chunk& chunk : chunks) {
    bool new_tensor = launches.empty() || launches.back().tensors.back() != chunk.tensor;
    if (launches.empty() || launches.back().chunks.size() == static_cast<size_t>(max_chunks) ||
        (new_tensor && launches.back().tensors.size() == static_cast<size_t>(max_tensors))) {
      launches.emplace_back();
      new_tensor = true;
    }
    PlannedLaunch& launch = launches.back();
    if (new_tensor) launch.tensors.push_back(chunk.tensor);
    launch.chunks.push_back(
        {static_cast<int32_t>(launch.tensors.size() - 1), chunk.begin, chunk.end});
  }
  return launches;
}

std::vector<int64_t> element_counts(const std::vector<TensorSpan>& tensors) {
  std::vector<int64_t> counts;
  counts.reserve(tensors.size());
  for (const TensorSpan& t : tensors) counts.push_back(t.count);
  return counts;
}

std::vector<int64_t> element_counts(const std::vector<OptimParam>& params) {
  std::vector<int64_t> counts;
  counts.reserve(params.size());
  for (const OptimParam& p : params) counts.push_back(p.count);
  return counts;
}

}  // namespace ampx::impl
