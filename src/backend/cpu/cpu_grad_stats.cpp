#include "backend/cpu/cpu_grad_stats.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/chunk_plan.h"
#include "backend/cpu/float_tiles.h"
#include "math/amp.h"

namespace ampx::impl {
namespace cpu {
namespace {

void add_counts(math::GradStatsRecord& r, const math::GradStatsCounts& c) {
  r.fp16_zero_unscaled += c.fp16_zero_unscaled;
  r.fp16_subnormal_unscaled += c.fp16_subnormal_unscaled;
  r.fp16_zero_scaled += c.fp16_zero_scaled;
  r.fp16_subnormal_scaled += c.fp16_subnormal_scaled;
  r.fp16_overflow_scaled += c.fp16_overflow_scaled;
  r.nonzero_lost_scaled += c.nonzero_lost_scaled;
  r.sum_squares += c.sum_squares;
  r.amax_scaled_bits = std::max(r.amax_scaled_bits, c.amax_scaled_bits);
}

void merge(math::GradStatsRecord& into, const math::GradStatsRecord& part) {
  for (int b = 0; b < math::kGradStatsBins; ++b) into.bins[b] += part.bins[b];
  into.fp16_zero_unscaled += part.fp16_zero_unscaled;
  into.fp16_subnormal_unscaled += part.fp16_subnormal_unscaled;
  into.fp16_zero_scaled += part.fp16_zero_scaled;
  into.fp16_subnormal_scaled += part.fp16_subnormal_scaled;
  into.fp16_overflow_scaled += part.fp16_overflow_scaled;
  into.nonzero_lost_scaled += part.nonzero_lost_scaled;
  into.master_changed += part.master_changed;
  into.lost_updates += part.lost_updates;
  into.lost_without_master += part.lost_without_master;
  into.sum_squares += part.sum_squares;
  into.amax_scaled_bits = std::max(into.amax_scaled_bits, part.amax_scaled_bits);
}

}  // namespace

void unscale_with_stats(ThreadPool& pool, const std::vector<TensorSpan>& ins,
                        const std::vector<TensorSpan>& outs, const float* scale, float* found_inf,
                        int32_t* nonfinite, math::GradStatsRecord* records) {
  const float r = scale != nullptr ? math::reciprocal_scale(*scale) : 1.0f;
  const Plan plan(element_counts(ins));
  std::vector<math::GradStatsRecord> partial(records != nullptr ? plan.chunks.size() : 0);
  std::vector<char> chunk_nonfinite(plan.chunks.size());
  plan.for_each_chunk(pool, [&](int64_t i, const Chunk& c) {
    const TensorSpan& in = ins[static_cast<size_t>(c.tensor)];
    math::GradStatsRecord* stats = records != nullptr ? &partial[static_cast<size_t>(i)] : nullptr;
    bool found = false;
    math::GradStatsCounts counts;
    visit_floating(in.dtype, [&](auto in_tag) {
      constexpr int S = decltype(in_tag)::value;
      const auto* x = typed<S>(static_cast<const void*>(in.data));
      TileReader<S> read;
      const auto examine = [&](const float* a, int64_t n, float* o) {
        for (int64_t k = 0; k < n; ++k) {
          const float u = a[k] * r;
          found |= !math::is_finite(u);
          if (stats) ++stats->bins[counts.add(a[k], u)];
          if (o) o[k] = u;
        }
      };
      if (outs.empty()) {
        for_each_tile(c.begin, c.end,
                      [&](int64_t first, int64_t n) { examine(read(x + first, n), n, nullptr); });
        return;
      }
      const TensorSpan& out = outs[static_cast<size_t>(c.tensor)];
      visit_floating(out.dtype, [&](auto out_tag) {
        constexpr int D = decltype(out_tag)::value;
        auto* y = typed<D>(out.data);
        TileWriter<D> write;
        for_each_tile(c.begin, c.end, [&](int64_t first, int64_t n) {
          const float* a = read(x + first, n);
          examine(a, n, write.start(y + first));
          write.finish(y + first, n);
        });
      });
    });
    chunk_nonfinite[static_cast<size_t>(i)] = found;
    if (stats) add_counts(*stats, counts);
  });
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const size_t t = static_cast<size_t>(plan.chunks[i].tensor);
    if (chunk_nonfinite[i]) {
      if (found_inf) *found_inf = 1.0f;
      if (nonfinite) nonfinite[t] = 1;
    }
    if (records != nullptr) merge(records[t], partial[i]);
  }
}

void count_lost_updates(ThreadPool& pool, const std::vector<LostUpdateSpan>& spans,
                        math::GradStatsRecord* records) {
  std::vector<int64_t> counts;
  for (const LostUpdateSpan& s : spans) counts.push_back(s.count);
  const Plan plan(counts);
  // changed, lost, lost without master per chunk.
  std::vector<int64_t> partial(3 * plan.chunks.size());
  plan.for_each_chunk(pool, [&](int64_t i, const Chunk& c) {
    const LostUpdateSpan& s = spans[static_cast<size_t>(c.tensor)];
    const auto* p = static_cast<const uint16_t*>(s.param);
    const auto* before = static_cast<const uint16_t*>(s.param_before);
    int64_t changed = 0, lost = 0, lost_direct = 0;
    visit_floating(s.param_dtype, [&](auto tag) {
      constexpr int P = decltype(tag)::value;
      if constexpr (P != AMPX_F32) {
        for (int64_t j = c.begin; j < c.end; ++j) {
          if (s.master[j] == s.master_before[j]) continue;
          ++changed;
          lost += p[j] == before[j];
          const float direct = math::load_float<P>(before[j]) + (s.master[j] - s.master_before[j]);
          lost_direct += math::store_float<P>(direct) == before[j];
        }
      }
    });
    partial[3 * static_cast<size_t>(i)] = changed;
    partial[3 * static_cast<size_t>(i) + 1] = lost;
    partial[3 * static_cast<size_t>(i) + 2] = lost_direct;
  });
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    math::GradStatsRecord& r = records[spans[static_cast<size_t>(plan.chunks[i].tensor)].record];
    r.master_changed += partial[3 * i];
    r.lost_updates += partial[3 * i + 1];
    r.lost_without_master += partial[3 * i + 2];
  }
}

void record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                   const float* found_inf, const int32_t* nonfinite,
                   const math::GradStatsRecord* records, int32_t count) {
  math::DoctorSample s{};
  s.step = step;
  s.scale = scale != nullptr ? *scale : 1.0f;
  s.first_nonfinite = -1;
  s.sum_squares = records != nullptr ? 0.0 : -1.0;
  for (int32_t i = 0; i < count; ++i) {
    if (nonfinite[i] != 0) {
      s.first_nonfinite = i;
      ++s.nonfinite_params;
    }
    if (records == nullptr) continue;
    const math::GradStatsRecord& r = records[i];
    for (int b = 0; b < math::kGradStatsBins; ++b) s.elements += r.bins[b];
    s.fp16_lost_scaled += r.fp16_zero_scaled + r.fp16_subnormal_scaled;
    s.fp16_lost_unscaled += r.fp16_zero_unscaled + r.fp16_subnormal_unscaled;
    s.sum_squares += r.sum_squares;
  }
  const bool skipped = found_inf != nullptr ? *found_inf != 0.0f : s.nonfinite_params > 0;
  s.found_inf = skipped ? 1.0f : 0.0f;
  *entry = s;
}

}  // namespace cpu
}  // namespace ampx::impl
