// test_multi_tensor.cpp -- the host-side chunking of multi-tensor operations
// (src/core/multi_tensor.h), which both backends use to cut a tensor list
// into work.
//
// A plan is checked by walking it against a cursor over the tensors: each
// chunk must start exactly where the previous one ended (so no element is
// skipped or visited twice), and the walk must end having consumed every
// element. Launch groupings are checked by flattening them back into a plan
// and against the limits they must respect.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/multi_tensor.h"

namespace {

using ampx::impl::Chunk;
using ampx::impl::PlannedLaunch;

// Every property a plan of `counts` in chunks of `chunk_size` must have; the
// first violation in words, or "" (one assertion per plan, not per chunk).
std::string plan_violation(const std::vector<int64_t>& counts, int64_t chunk_size,
                           const std::vector<Chunk>& plan) {
  size_t next = 0;
  int64_t expected_chunks = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    expected_chunks += counts[t] / chunk_size + (counts[t] % chunk_size != 0);
    int64_t cursor = 0;
    while (cursor < counts[t]) {
      const std::string where = "tensor " + std::to_string(t) + " at " + std::to_string(cursor);
      if (next == plan.size()) return where + ": the plan has ended";
      const Chunk& c = plan[next++];
      if (c.tensor != static_cast<int64_t>(t))
        return where + ": chunk of tensor " + std::to_string(c.tensor);
      if (c.begin != cursor) return where + ": chunk begins at " + std::to_string(c.begin);
      if (c.end <= c.begin || c.end > counts[t] || c.end - c.begin > chunk_size)
        return where + ": chunk ends at " + std::to_string(c.end);
      // Only the last chunk of a tensor may be short.
      if (c.end != counts[t] && c.end - c.begin != chunk_size)
        return where + ": short chunk inside the tensor";
      cursor = c.end;
    }
  }
  if (next != plan.size()) return std::to_string(plan.size() - next) + " chunks past the end";
  if (static_cast<int64_t>(plan.size()) != expected_chunks) return "not the fewest chunks";
  return "";
}

std::vector<int64_t> random_counts(std::mt19937_64& rng, size_t n, int64_t max_count) {
  std::uniform_int_distribution<int64_t> count(0, max_count);
  std::bernoulli_distribution empty(0.2);
  std::vector<int64_t> counts(n);
  for (auto& c : counts) c = empty(rng) ? 0 : count(rng);
  return counts;
}

template <class Fn>
ampx_status status_of(Fn&& fn) {
  try {
    fn();
  } catch (const ampx::impl::StatusError& e) {
    return e.status();
  }
  return AMPX_OK;
}

}  // namespace

TEST_CASE("multi_tensor: a plan covers every element exactly once, in order") {
  std::mt19937_64 rng(7);
  for (int64_t chunk_size : {1, 3, 16, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      const auto counts = random_counts(rng, 1 + trial * 3, 3 * chunk_size + 2);
      CAPTURE(chunk_size);
      CAPTURE(trial);
      const auto plan = ampx::impl::plan_chunks(counts, chunk_size);
      CHECK(plan_violation(counts, chunk_size, plan) == "");

      // The walk above implies it; marking each element makes "exactly
      // once" explicit.
      std::vector<std::vector<int>> seen(counts.size());
      for (size_t t = 0; t < counts.size(); ++t) seen[t].assign(static_cast<size_t>(counts[t]), 0);
      for (const Chunk& c : plan)
        for (int64_t i = c.begin; i < c.end; ++i)
          ++seen[static_cast<size_t>(c.tensor)][static_cast<size_t>(i)];
      int64_t not_once = 0;
      for (const auto& tensor : seen)
        for (int times : tensor) not_once += times != 1;
      CHECK(not_once == 0);
    }
  }
}

TEST_CASE("multi_tensor: sizes at and around the chunk size") {
  const std::vector<int64_t> counts = {1, 15, 16, 17, 32, 33};
  const auto plan = ampx::impl::plan_chunks(counts, 16);
  CHECK(plan_violation(counts, 16, plan) == "");
  const std::vector<int64_t> ends = {1, 15, 16, 16, 17, 16, 32, 16, 32, 33};
  REQUIRE(plan.size() == ends.size());
  for (size_t i = 0; i < ends.size(); ++i) CHECK(plan[i].end == ends[i]);
}

TEST_CASE("multi_tensor: empty lists and zero-size tensors have no chunks") {
  CHECK(ampx::impl::plan_chunks({}, 8).empty());
  CHECK(ampx::impl::plan_chunks({0, 0, 0}, 8).empty());

  const auto plan = ampx::impl::plan_chunks({0, 5, 0, 0, 9, 0}, 4);
  CHECK(plan_violation({0, 5, 0, 0, 9, 0}, 4, plan) == "");
  for (const Chunk& c : plan) CHECK((c.tensor == 1 || c.tensor == 4));
}

TEST_CASE("multi_tensor: counts past 2^31 and up to INT64_MAX do not overflow") {
  const int64_t big = 3 * (int64_t{1} << 31) + 5;
  const int64_t chunk = int64_t{1} << 20;
  const std::vector<int64_t> counts = {big, 7, int64_t{1} << 32};
  const auto plan = ampx::impl::plan_chunks(counts, chunk);
  CHECK(plan_violation(counts, chunk, plan) == "");
  CHECK(plan.back().end == (int64_t{1} << 32));

  // A chunk size near INT64_MAX: begin + chunk_size would overflow if the
  // plan computed the end that way.
  const int64_t max = std::numeric_limits<int64_t>::max();
  const auto few = ampx::impl::plan_chunks({max, max}, int64_t{1} << 62);
  CHECK(plan_violation({max, max}, int64_t{1} << 62, few) == "");
  REQUIRE(few.size() == 4);
  CHECK(few[1].begin == (int64_t{1} << 62));
  CHECK(few[1].end == max);
  const auto whole = ampx::impl::plan_chunks({max}, max);
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].end == max);
}

TEST_CASE("multi_tensor: a bad chunk size or count is an internal error") {
  CHECK(status_of([] { ampx::impl::plan_chunks({4}, 0); }) == AMPX_ERR_INTERNAL);
  CHECK(status_of([] { ampx::impl::plan_chunks({4}, -8); }) == AMPX_ERR_INTERNAL);
  CHECK(status_of([] { ampx::impl::plan_chunks({4, -1}, 8); }) == AMPX_ERR_INTERNAL);
  CHECK(status_of([] { ampx::impl::plan_launches({{0, 0, 1}}, 0, 4); }) == AMPX_ERR_INTERNAL);
  CHECK(status_of([] { ampx::impl::plan_launches({{0, 0, 1}}, 4, 0); }) == AMPX_ERR_INTERNAL);
}

namespace {

// Every property launches of `plan` with the given limits must have; the
// first violation in words, or "".
std::string launch_violation(const std::vector<Chunk>& plan, int max_chunks, int max_tensors,
                             const std::vector<PlannedLaunch>& launches) {
  std::vector<Chunk> flattened;
  for (size_t l = 0; l < launches.size(); ++l) {
    const PlannedLaunch& launch = launches[l];
    const std::string where = "launch " + std::to_string(l);
    if (launch.chunks.empty()) return where + " is empty";
    if (launch.chunks.size() > static_cast<size_t>(max_chunks))
      return where + " has too many chunks";
    if (launch.tensors.size() > static_cast<size_t>(max_tensors))
      return where + " has too many tensors";
    for (size_t t = 1; t < launch.tensors.size(); ++t)
      if (launch.tensors[t - 1] >= launch.tensors[t]) return where + ": tensors out of order";
    std::vector<int> used(launch.tensors.size(), 0);
    for (const auto& c : launch.chunks) {
      if (c.slot < 0 || static_cast<size_t>(c.slot) >= launch.tensors.size())
        return where + ": slot " + std::to_string(c.slot);
      ++used[static_cast<size_t>(c.slot)];
      flattened.push_back({launch.tensors[static_cast<size_t>(c.slot)], c.begin, c.end});
    }
    // The argument block carries no tensor that no chunk reads.
    for (int u : used)
      if (u == 0) return where + " carries an unused tensor";
    // Greedy: a launch ends only when it is full, in chunks, or in tensors
    // with the next chunk belonging to a tensor it does not carry.
    if (l + 1 < launches.size()) {
      const bool chunks_full = launch.chunks.size() == static_cast<size_t>(max_chunks);
      const bool tensors_full = launch.tensors.size() == static_cast<size_t>(max_tensors) &&
                                launches[l + 1].tensors.front() != launch.tensors.back();
      if (!chunks_full && !tensors_full) return where + " ends before it is full";
    }
  }
  if (flattened.size() != plan.size())
    return "the launches hold " + std::to_string(flattened.size()) + " chunks";
  for (size_t i = 0; i < plan.size(); ++i)
    if (flattened[i].tensor != plan[i].tensor || flattened[i].begin != plan[i].begin ||
        flattened[i].end != plan[i].end)
      return "chunk " + std::to_string(i) + " differs from the plan";
  return "";
}

}  // namespace

TEST_CASE("multi_tensor: launches respect their chunk and tensor limits") {
  std::mt19937_64 rng(11);
  // (1, 1) is the extreme; (320, 110) what an apex-style argument block holds.
  const std::pair<int, int> limits[] = {{1, 1}, {1, 5}, {5, 1}, {3, 2}, {7, 4}, {320, 110}};
  for (const auto& [max_chunks, max_tensors] : limits) {
    for (int trial = 0; trial < 10; ++trial) {
      CAPTURE(max_chunks);
      CAPTURE(max_tensors);
      CAPTURE(trial);
      const auto plan = ampx::impl::plan_chunks(random_counts(rng, 5 + trial * 40, 50), 8);
      CHECK(launch_violation(plan, max_chunks, max_tensors,
                             ampx::impl::plan_launches(plan, max_chunks, max_tensors)) == "");
    }
  }
}

TEST_CASE("multi_tensor: a tensor split between launches is carried by both") {
  // Tensor 1 has 5 chunks; at most 3 chunks a launch, it spans two.
  const auto plan = ampx::impl::plan_chunks({2, 10, 1}, 2);
  const auto launches = ampx::impl::plan_launches(plan, 3, 8);
  CHECK(launch_violation(plan, 3, 8, launches) == "");
  REQUIRE(launches.size() == 3);
  CHECK(launches[0].tensors == std::vector<int64_t>{0, 1});
  CHECK(launches[1].tensors == std::vector<int64_t>{1});
  CHECK(launches[2].tensors == std::vector<int64_t>{2});
  CHECK(launches[1].chunks[0].begin == 4);
}

TEST_CASE("multi_tensor: the tensor limit alone starts a new launch") {
  const auto plan = ampx::impl::plan_chunks({1, 1, 0, 1, 1, 1}, 4);
  const auto launches = ampx::impl::plan_launches(plan, 100, 2);
  CHECK(launch_violation(plan, 100, 2, launches) == "");
  REQUIRE(launches.size() == 3);
  CHECK(launches[0].tensors == std::vector<int64_t>{0, 1});
  CHECK(launches[1].tensors == std::vector<int64_t>{3, 4});
  CHECK(launches[2].tensors == std::vector<int64_t>{5});
}

TEST_CASE("multi_tensor: an empty plan has no launches") {
  CHECK(ampx::impl::plan_launches({}, 4, 4).empty());
}
