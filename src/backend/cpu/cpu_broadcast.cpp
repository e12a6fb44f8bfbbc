// cpu_broadcast.cpp -- the CPU's broadcasting binary op and its reductions
// over chosen dimensions (backend_nn.h: BroadcastLayout, ReduceLayout).
// binary_broadcast: the last dimension is the inner loop (its two strides
// fixed), the rows before it are split among the threads. reduce_dims: each
// output element is one task item, its reduced elements visited in
// row-major order and summed in double, so the result depends on the
// shape only -- the CUDA kernels (backend/cuda/kernels/broadcast.cu) add in the same
// order and agree bit for bit.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "math/binary.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cpu {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D, BinaryOp Op>
void broadcast_rows(ThreadPool& pool, const Elem<D>* a, const Elem<D>* b, Elem<D>* out,
                    const BroadcastLayout& l) {
  const int32_t last = l.ndim - 1;
  const int64_t cols = l.sizes[last];
  int64_t rows = 1;
  for (int32_t k = 0; k < last; ++k) rows *= l.sizes[k];
  const int64_t sa = l.a_strides[last], sb = l.b_strides[last];
  pool.parallel_for(rows, items_per_task(1 << 15, cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t oa = 0, ob = 0, rest = r;
      for (int32_t k = last - 1; k >= 0; --k) {
        const int64_t i = rest % l.sizes[k];
        rest /= l.sizes[k];
        oa += i * l.a_strides[k];
        ob += i * l.b_strides[k];
      }
      Elem<D>* row = out + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        row[c] = math::store_float<D>(math::binary_value<Op>(math::load_float<D>(a[oa + c * sa]),
                                                math::load_float<D>(b[ob + c * sb])));
    }
  });
}

}  // namespace

void binary_broadcast(ThreadPool& pool, BinaryOp op, const void* a, const void* b, void* out,
                      DType type, const BroadcastLayout& layout) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(a);
    const auto* y = static_cast<const Elem<D>*>(b);
    auto* z = static_cast<Elem<D>*>(out);
    switch (op) {
      case BinaryOp::Add: broadcast_rows<D, BinaryOp::Add>(pool, x, y, z, layout); break;
      case BinaryOp::Sub: broadcast_rows<D, BinaryOp::Sub>(pool, x, y, z, layout); break;
      case BinaryOp::Mul: broadcast_rows<D, BinaryOp::Mul>(pool, x, y, z, layout); break;
      case BinaryOp::Div: broadcast_rows<D, BinaryOp::Div>(pool, x, y, z, layout); break;
      case BinaryOp::Equal: broadcast_rows<D, BinaryOp::Equal>(pool, x, y, z, layout); break;
    }
  });
}

void reduce_dims(ThreadPool& pool, DimReduce op, const void* x, DType type,
                 const ReduceLayout& layout, void* out, DType out_type) {
  // Row-major strides of x, and the kept and reduced dimensions in order.
  int64_t stride[AMPX_MAX_DIMS];
  int32_t kept[AMPX_MAX_DIMS], reduced[AMPX_MAX_DIMS], n_kept = 0, n_reduced = 0;
  int64_t outputs = 1, per_output = 1;
  int64_t running = 1;
  for (int32_t k = layout.ndim - 1; k >= 0; --k) {
    stride[k] = running;
    running *= layout.sizes[k];
  }
  for (int32_t k = 0; k < layout.ndim; ++k) {
    if (layout.reduced & (1u << k)) {
      reduced[n_reduced++] = k;
      per_output *= layout.sizes[k];
    } else {
      kept[n_kept++] = k;
      outputs *= layout.sizes[k];
    }
  }
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    visit_floating(out_type, [&](auto out_tag) {
      constexpr int O = decltype(out_tag)::value;
      auto* result = static_cast<Elem<O>*>(out);
      pool.parallel_for(outputs, items_per_task(1 << 15, per_output), [&](int64_t begin,
                                                                          int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          int64_t base = 0, rest = j;
          for (int32_t k = n_kept - 1; k >= 0; --k) {
            base += rest % layout.sizes[kept[k]] * stride[kept[k]];
            rest /= layout.sizes[kept[k]];
          }
          double sum = 0.0;
          float max = -std::numeric_limits<float>::infinity();
          for (int64_t r = 0; r < per_output; ++r) {
            int64_t offset = base, left = r;
            for (int32_t k = n_reduced - 1; k >= 0; --k) {
              offset += left % layout.sizes[reduced[k]] * stride[reduced[k]];
              left /= layout.sizes[reduced[k]];
            }
            const float v = math::load_float<D>(in[offset]);
            if (op == DimReduce::Sum)
              sum += v;
            else if (v > max || std::isnan(v))
              max = std::isnan(max) ? max : v;
          }
          result[j] = op == DimReduce::Sum ? math::store_double<O>(sum) : math::store_float<O>(max);
        }
      });
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
