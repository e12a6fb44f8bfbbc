// cpu_block_ops.cpp -- the CPU's primitives of the Transformer-block ops:
// masked_fill, pow with a number exponent, and rotary position embeddings,
// with the per-element math of kernels/math/block_ops.h that the CUDA
// kernels (masked_fill.cu, pow.cu, rotary.cu) run too.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "math/attention.h"
#include "math/block_ops.h"

namespace ampx::impl {
namespace cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;

template <int D>
using Elem = math::storage_t<D>;

int table_kind(DType t) {
  return t == DType::F32 ? math::kAttentionF32
                         : t == DType::F16 ? math::kAttentionF16 : math::kAttentionBF16;
}

}  // namespace

void masked_fill(ThreadPool& pool, const void* x, DType type, const void* mask, DType mask_type,
                 float value, void* out, const BroadcastLayout& l) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* result = static_cast<Elem<D>*>(out);
    const Elem<D> fill = math::store_float<D>(value);
    const int32_t last = l.ndim - 1;
    const int64_t cols = l.sizes[last];
    int64_t rows = 1;
    for (int32_t k = 0; k < last; ++k) rows *= l.sizes[k];
    const auto kind = static_cast<int32_t>(mask_type);
    pool.parallel_for(rows, items_per_task(kGrain, cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t ox = 0, om = 0, rest = r;
        for (int32_t k = last - 1; k >= 0; --k) {
          const int64_t i = rest % l.sizes[k];
          rest /= l.sizes[k];
          ox += i * l.a_strides[k];
          om += i * l.b_strides[k];
        }
        for (int64_t c = 0; c < cols; ++c)
          result[r * cols + c] = math::mask_set(mask, kind, om + c * l.b_strides[last])
                                     ? fill
                                     : in[ox + c * l.a_strides[last]];
      }
    });
  });
}

void pow_scalar(ThreadPool& pool, const void* x, void* y, DType type, int64_t count,
                float exponent) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* out = static_cast<Elem<D>*>(y);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = math::store_float<D>(math::pow_value(math::load_float<D>(in[i]), exponent));
    });
  });
}

void pow_scalar_backward(ThreadPool& pool, const void* x, const void* dy, void* dx, DType type,
                         int64_t count, float exponent) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* g = static_cast<const Elem<D>*>(dy);
    auto* out = static_cast<Elem<D>*>(dx);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = math::store_float<D>(
            math::pow_grad(math::load_float<D>(in[i]), math::load_float<D>(g[i]), exponent));
    });
  });
}

void rotary(ThreadPool& pool, const void* x, DType type, const void* cos, const void* sin,
            DType table_type, void* out, const RotaryShape& s, bool inverse) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* result = static_cast<Elem<D>*>(out);
    const int kind = table_kind(table_type);
    const int64_t half = s.dim / 2;
    pool.parallel_for(s.rows * s.positions, items_per_task(kGrain, s.dim), [&](int64_t begin,
                                                                               int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t t = row % s.positions;
        const Elem<D>* v = in + row * s.dim;
        Elem<D>* o = result + row * s.dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = s.interleaved ? 2 * i : i, ib = s.interleaved ? 2 * i + 1 : i + half;
          const math::Rotated r = math::rotate(
              math::load_float<D>(v[ia]), math::load_float<D>(v[ib]),
              math::attention_load(cos, kind, t * half + i), math::attention_load(sin, kind, t * half + i),
              inverse);
          o[ia] = math::store_float<D>(r.a);
          o[ib] = math::store_float<D>(r.b);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
