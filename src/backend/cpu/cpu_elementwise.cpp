// cpu_elementwise.cpp -- element-wise arithmetic and sums of the ops on the
// CPU: binary ops with row broadcasting, affine, accumulation, and the sums
// that reductions and broadcast backward passes need. Values are computed in
// fp32 from any floating type and rounded once when stored.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "backend/cpu/float_tiles.h"
#include "core/error.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Below this many elements a loop runs on the calling thread only.
constexpr int64_t kGrain = 1 << 15;

template <int D>
using Elem = math::storage_t<D>;

}  // namespace

void binary(ThreadPool& pool, BinaryOp op, const void* a, const void* b, void* out, DType type,
            int64_t count, int64_t b_count) {
  if (b_count <= 0 || count % b_count != 0)
    fail(AMPX_ERR_INTERNAL, "binary: ", b_count, " does not divide ", count);
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(a);
    const auto* y = static_cast<const Elem<D>*>(b);
    auto* z = static_cast<Elem<D>*>(out);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      TileReader<D> read_a, read_b;
      TileWriter<D> write;
      // Runs end where b wraps around, so each pairs a run of a with one of b.
      int64_t i = begin;
      while (i < end) {
        const int64_t j = i % b_count;
        const int64_t n = std::min({kTile, end - i, b_count - j});
        const float* u = read_a(x + i, n);
        const float* v = read_b(y + j, n);
        float* w = write.start(z + i);
        switch (op) {
          case BinaryOp::Add: for (int64_t k = 0; k < n; ++k) w[k] = u[k] + v[k]; break;
          case BinaryOp::Sub: for (int64_t k = 0; k < n; ++k) w[k] = u[k] - v[k]; break;
          case BinaryOp::Mul: for (int64_t k = 0; k < n; ++k) w[k] = u[k] * v[k]; break;
          case BinaryOp::Div: for (int64_t k = 0; k < n; ++k) w[k] = u[k] / v[k]; break;
          case BinaryOp::Equal:
            for (int64_t k = 0; k < n; ++k) w[k] = u[k] == v[k] ? 1.0f : 0.0f;
            break;
        }
        write.finish(z + i, n);
        i += n;
      }
    });
  });
}

void affine(ThreadPool& pool, const void* x, void* y, DType type, int64_t count, float scale,
            float shift) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* out = static_cast<Elem<D>*>(y);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      TileReader<D> read;
      TileWriter<D> write;
      for_each_tile(begin, end, [&](int64_t first, int64_t n) {
        const float* a = read(in + first, n);
        float* o = write.start(out + first);
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] * scale + shift;
        write.finish(out + first, n);
      });
    });
  });
}

void add_into(ThreadPool& pool, void* dst, DType dst_type, const void* src, DType src_type,
              int64_t count) {
  visit_floating(dst_type, [&](auto dst_tag) {
    constexpr int D = decltype(dst_tag)::value;
    visit_floating(src_type, [&](auto src_tag) {
      constexpr int S = decltype(src_tag)::value;
      auto* d = static_cast<Elem<D>*>(dst);
      const auto* s = static_cast<const Elem<S>*>(src);
      pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
        TileReader<D> read_dst;
        TileReader<S> read_src;
        TileWriter<D> write;
        for_each_tile(begin, end, [&](int64_t first, int64_t n) {
          const float* a = read_dst(d + first, n);
          const float* b = read_src(s + first, n);
          float* o = write.start(d + first);
          for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
          write.finish(d + first, n);
        });
      });
    });
  });
}

void sum_rows(ThreadPool& pool, const void* x, DType type, int64_t rows, int64_t cols, void* out,
              DType out_type) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    visit_floating(out_type, [&](auto out_tag) {
      constexpr int O = decltype(out_tag)::value;
      const auto* in = static_cast<const Elem<D>*>(x);
      auto* result = static_cast<Elem<O>*>(out);
      // Columns are independent: split them, and walk rows in order inside
      // each so the result does not depend on the thread count.
      const int64_t grain = cols > 0 ? std::max<int64_t>(1, kGrain / std::max<int64_t>(rows, 1)) : 1;
      pool.parallel_for(cols, grain, [&](int64_t begin, int64_t end) {
        TileReader<D> read;
        for_each_tile(begin, end, [&](int64_t first, int64_t n) {
          double acc[kTile] = {};
          for (int64_t r = 0; r < rows; ++r) {
            const float* v = read(in + r * cols + first, n);
            for (int64_t c = 0; c < n; ++c) acc[c] += v[c];
          }
          for (int64_t c = 0; c < n; ++c)
            result[first + c] = math::store_float<O>(static_cast<float>(acc[c]));
        });
      });
    });
  });
}

void sum_all(ThreadPool& pool, const void* x, DType type, int64_t count, float* out) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    // Fixed blocks summed in block order: the same result for any thread
    // count. Inside a block, element j goes to lane j % kLanes (tiles start
    // at multiples of kTile), so the additions are independent chains the
    // compiler can vectorise instead of one chain of dependent adds.
    constexpr int64_t kLanes = 8;
    static_assert(kTile % kLanes == 0, "tiles must keep the lanes aligned");
    const int64_t blocks = (count + kGrain - 1) / kGrain;
    std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
    pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      TileReader<D> read;
      for (int64_t blk = begin; blk < end; ++blk) {
        double lanes[kLanes] = {};
        for_each_tile(blk * kGrain, std::min(count, (blk + 1) * kGrain), [&](int64_t first, int64_t n) {
          const float* v = read(in + first, n);
          int64_t i = 0;
          for (; i + kLanes <= n; i += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) lanes[l] += v[i + l];
          for (int64_t l = 0; i < n; ++i, ++l) lanes[l] += v[i];
        });
        double acc = 0.0;
        for (double lane : lanes) acc += lane;
        partial[static_cast<size_t>(blk)] = acc;
      }
    });
    double total = 0.0;
    for (double p : partial) total += p;
    *out = static_cast<float>(total);
  });
}

}  // namespace cpu
}  // namespace ampx::impl
