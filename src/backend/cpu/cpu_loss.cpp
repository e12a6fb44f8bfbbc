// cpu_loss.cpp -- per-element losses on the CPU, around the fp32 math of
// kernels/math/losses.h.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "math/losses.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Elements per task: exp and log1p make ~10 ns an element.
constexpr int64_t kGrain = int64_t{1} << 14;

}  // namespace

void bce_with_logits(ThreadPool& pool, const void* logits, const void* targets, DType type,
                     int64_t count, float* losses) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const math::storage_t<D>*>(logits);
    const auto* t = static_cast<const math::storage_t<D>*>(targets);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        losses[i] =
            math::bce_with_logits_loss(math::load_float<D>(x[i]), math::load_float<D>(t[i]));
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
