// cpu_random.cpp -- dropout on the CPU: Philox blocks of kernels/math/random.h,
// four elements per block, exactly the words a CUDA thread computes for the
// same elements.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "math/random.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Blocks per task: ten Philox rounds per four elements make ~5 ns an
// element, so 4Ki blocks are tens of microseconds of work.
constexpr int64_t kBlockGrain = int64_t{1} << 12;

}  // namespace

void dropout(ThreadPool& pool, const void* x, void* y, DType type, int64_t count, uint64_t seed,
             uint64_t offset, uint32_t threshold, float scale) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const math::storage_t<D>*>(x);
    auto* out = static_cast<math::storage_t<D>*>(y);
    const math::PhiloxKey key = math::dropout_key(seed);
    pool.parallel_for((count + 3) / 4, kBlockGrain, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const math::Philox4x32 words =
            math::dropout_block(key, offset, static_cast<uint64_t>(block));
        for (int64_t lane = 0; lane < 4 && block * 4 + lane < count; ++lane) {
          const int64_t i = block * 4 + lane;
          out[i] = math::store_float<D>(
              math::dropout_value(math::load_float<D>(in[i]), words.v[lane], threshold, scale));
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
