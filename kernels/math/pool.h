// pool.h -- the windows of 2-D max and average pooling (core/backend_conv.h
// states the semantics), shared by the CPU backend's loops and the CUDA
// kernels (backend/cuda/kernels/pool2d.cu) so that both pick the same maximum and divide
// by the same count.
#pragma once

#include <cstdint>

#include "math/hd.h"

namespace ampx::impl {

enum class PoolKind { Max, Average };

struct Pool2dShape {
  int64_t planes = 0;  // batch * channels
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  PoolKind kind = PoolKind::Max;
  bool count_include_pad = true;  // average only
  int64_t divisor = 0;            // average only; 0: the window's size
};

namespace math {

// The window of output index `out_index` along one dimension: taps t with
// in-image position start + t * dilation, t < kernel.
struct PoolSpan {
  int64_t start, first, last;  // taps [first, last) fall inside the image
};

// The taps inside the image by division, in O(1) however large the kernel
// (a walk over the taps would take 2^39 steps for a kernel of 2^40 with
// padding 2^39 on a 3x3 image):
//   first = min(kernel, ceil(-start / dilation))  when start < 0, else 0
//   last  = min(kernel, ceil((in - start) / dilation)), at least first.
// No term wraps for a window the front door accepted (backend_conv.cpp):
// -start <= pad and in - start <= in + 2 pad, both in int64; the ceilings
// are taken as (x - 1) / d + 1, never as (x + d - 1) / d.
AMPX_HD PoolSpan pool_span(int64_t out_index, int64_t stride, int64_t pad, int64_t kernel,
                           int64_t dilation, int64_t in) {
  const int64_t start = out_index * stride - pad;
  int64_t first = start >= 0 ? 0 : (-start - 1) / dilation + 1;
  int64_t last = in - start <= 0 ? 0 : (in - start - 1) / dilation + 1;
  first = first < kernel ? first : kernel;
  last = last < kernel ? last : kernel;
  return {start, first, last > first ? last : first};
}

// The plane index of the maximum of output (p, q)'s window (a NaN wins --
// the last one, as torch's -- else the first of equal maxima in row-major
// order), or -1 when no tap
// lies in the image. load(i) gives plane element i as a float.
template <class Load>
AMPX_HD int64_t pool_window_argmax(const Pool2dShape& s, const Load& load, int64_t p, int64_t q) {
  const PoolSpan rows = pool_span(p, s.stride_h, s.pad_h, s.kernel_h, s.dilation_h, s.in_h);
  const PoolSpan cols = pool_span(q, s.stride_w, s.pad_w, s.kernel_w, s.dilation_w, s.in_w);
  if (rows.first >= rows.last || cols.first >= cols.last) return -1;
  // The first maximum and the last NaN tracked apart, with selects rather
  // than branches: which tap wins depends on the data, so branches on it
  // mispredict.
  int64_t best = (rows.start + rows.first * s.dilation_h) * s.in_w + cols.start +
                 cols.first * s.dilation_w;
  float best_value = load(best);
  int64_t last_nan = -1;
  for (int64_t i = rows.first; i < rows.last; ++i) {
    const int64_t row = (rows.start + i * s.dilation_h) * s.in_w + cols.start;
    for (int64_t j = cols.first; j < cols.last; ++j) {
      const int64_t at = row + j * s.dilation_w;
      const float v = load(at);
      const bool greater = v > best_value;
      best = greater ? at : best;
      best_value = greater ? v : best_value;
      last_nan = v != v ? at : last_nan;
    }
  }
  return last_nan >= 0 ? last_nan : best;
}

// Output (p, q)'s average window: its in-image rows [row_begin, row_end)
// and columns, and its divisor.
struct AverageWindow {
  int64_t row_begin, row_end, col_begin, col_end;
  float divisor;
};

// The window's end is min(start + kernel, in + pad), compared as kernel <
// in + pad - start (at most in + 2 pad) so that no sum can wrap; its size
// clipped to the padded image is a product the front door checked
// (padded_window_size) and is formed only when it is the divisor.
AMPX_HD AverageWindow pool_average_window(const Pool2dShape& s, int64_t p, int64_t q) {
  int64_t r0 = p * s.stride_h - s.pad_h, c0 = q * s.stride_w - s.pad_w;
  int64_t r1 = s.kernel_h < s.in_h + s.pad_h - r0 ? r0 + s.kernel_h : s.in_h + s.pad_h;
  int64_t c1 = s.kernel_w < s.in_w + s.pad_w - c0 ? c0 + s.kernel_w : s.in_w + s.pad_w;
  const bool by_padded = s.divisor == 0 && s.count_include_pad;
  const int64_t padded = by_padded ? (r1 - r0) * (c1 - c0) : 0;
  r0 = r0 > 0 ? r0 : 0, c0 = c0 > 0 ? c0 : 0;
  r1 = r1 < s.in_h ? r1 : s.in_h, c1 = c1 < s.in_w ? c1 : s.in_w;
  const int64_t inside = (r1 > r0 ? r1 - r0 : 0) * (c1 > c0 ? c1 - c0 : 0);
  const int64_t divisor = s.divisor ? s.divisor : by_padded ? padded : inside;
  return {r0, r1, c0, c1, static_cast<float>(divisor)};
}

// The output indices whose windows may hold input index `a` along one
// dimension: [first, last), clipped to the output.
struct OutputRange {
  int64_t first, last;
};

AMPX_HD OutputRange pool_outputs_covering(int64_t a, int64_t stride, int64_t pad, int64_t kernel,
                                          int64_t dilation, int64_t out) {
  // Output p covers a when p * stride - pad <= a <= p * stride - pad + (kernel - 1) * dilation.
  // (kernel - 1) * dilation fits (the front door checked it); the ceiling
  // is taken without adding stride - 1, which could wrap.
  const int64_t reach = a + pad - (kernel - 1) * dilation;
  int64_t first = reach <= 0 ? 0 : (reach - 1) / stride + 1;
  int64_t last = (a + pad) / stride + 1;
  if (last > out) last = out;
  if (first > last) first = last;
  return {first, last};
}

}  // namespace math
}  // namespace ampx::impl
