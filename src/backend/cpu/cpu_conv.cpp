// cpu_conv.cpp -- the CPU backend's convolution and pooling
// (core/backend_conv.h).
//
// Where oneDNN is used (dnnl_library.h), F32 and BF16 convolutions go to
// its primitives (dnnl_conv.h); the rest, and everything without it, is
// computed here.
//
// Convolution is lowered to matrix products over a chunk of nb images at
// once: the chunk's receptive fields are unfolded into col [Cin * kh * kw,
// nb * P] (im2col; column n * P + p is image n's output position p), then
// for each group g
//   forward          y_g [Og, nb P]  = w_g [Og, K] col_g [K, nb P]
//   backward data    dcol_g [K, nb P] = w_g^T dy_g,  folded back into dx (col2im)
//   backward weight  dw_g [Og, K] += dy_g col_g^T
// with K = Cg * kh * kw and P = OH * OW, through cpu::gemm (OpenBLAS's sgemm
// when loaded), which threads each product. One product over many images
// keeps the GEMM wide even for small feature maps, where a product per
// image would be a few hundred columns. The outputs and output gradients
// are held channel-major ([O, nb P]) in fp32 scratch and moved to / from
// NCHW with the conversion to the tensors' type. Everything is computed in
// fp32 and each result converted once. Scratch: col (K * groups * nb * P
// floats, nb chosen to keep it near kColFloats) and, for f16 and bf16
// tensors, the chunk in fp32 (F32 tensors are read and written in place).
//
// Pooling runs one plane per task in fp32; max pooling's backward re-finds
// each window's maximum and adds the gradient there (a plane belongs to one
// task, so overlapping windows need no atomics). Max pooling whose windows
// all lie inside the image skips math/pool.h's per-output bounds and picks
// the same elements.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dnnl_conv.h"
#include "backend/cpu/isa_variants.h"
#include "core/checked_math.h"
#include "core/convert_bulk.h"
#include "math/pool.h"

namespace ampx::impl {
namespace cpu {
namespace {

using Floats = std::vector<float>;

// The col buffer's target size: 16 Mi floats (64 MiB) bound the scratch.
constexpr int64_t kColFloats = int64_t{1} << 24;

// `count` elements at `data` as fp32: the tensor itself when it is F32
// (no pass over it), else its conversion into `scratch`.
const float* f32_view(const void* data, DType type, int64_t count, Floats& scratch) {
  if (type == DType::F32) return static_cast<const float*>(data);
  scratch.resize(static_cast<size_t>(count));
  if (count > 0) convert_bulk(scratch.data(), DType::F32, data, type, count);
  return scratch.data();
}

const char* offset_of(const void* base, DType type, int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(dtype_size(type));
}
char* offset_of(void* base, DType type, int64_t elements) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(dtype_size(type));
}

// The extents of one chunk of images.
struct Chunk {
  const Conv2dShape& s;
  int64_t images;     // nb
  int64_t positions;  // P
  int64_t columns() const { return images * positions; }
  int64_t rows() const { return s.in_channels * s.kernel_h * s.kernel_w; }  // K * groups
  int64_t k() const { return rows() / s.groups; }
};

// Elements of one output channel's weights: K = Cg * kh * kw.
int64_t kernel_size(const Conv2dShape& s) {
  return s.in_channels / s.groups * s.kernel_h * s.kernel_w;
}

// Images per chunk: as many as keep col near kColFloats, at least one.
// One image's col, in_channels * kh * kw * out_h * out_w floats, can be
// beyond int64 for shapes whose tensors fit (a kernel as large as a padded
// image): SHAPE rather than a wrapped size.
int64_t chunk_images(const Conv2dShape& s) {
  const char* const what = "the unfolded image (im2col) in_channels * kh * kw * out_h * out_w";
  const int64_t per_image = checked_mul(
      checked_mul(s.in_channels, s.kernel_h * s.kernel_w, what), s.out_h * s.out_w, what);
  return std::clamp<int64_t>(kColFloats / std::max<int64_t>(per_image, 1), 1, s.batch);
}

// The outputs o in [0, out) whose tap lands inside the image along one
// dimension: 0 <= o * stride + shift < in, with shift = tap * dilation - pad.
// They are contiguous, so the loops over them need no bounds checks.
struct Inside {
  int64_t begin, end;
};

Inside outputs_inside(int64_t out, int64_t stride, int64_t shift, int64_t in) {
  // ceil(-shift / stride) as (-shift - 1) / stride + 1: -shift <= pad, and
  // stride - 1 - shift could wrap.
  const int64_t begin = std::min(out, shift >= 0 ? 0 : (-shift - 1) / stride + 1);
  const int64_t last = in - 1 - shift;  // o * stride <= last
  const int64_t end = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {begin, std::max(begin, end)};
}

// col row r = (c, i, j), column n * P + (p, q) holds
// image[n, c, p * sh - ph + i * dh, q * sw - pw + j * dw] (0 outside it).
void im2col(ThreadPool& pool, const Chunk& ch, const float* images, float* col) {
  const Conv2dShape& s = ch.s;
  const int64_t taps = s.kernel_h * s.kernel_w, plane = s.in_h * s.in_w;
  pool.parallel_for(ch.rows() * ch.images, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / ch.images, n = task % ch.images;
      const int64_t c = r / taps, i = r % taps / s.kernel_w, j = r % s.kernel_w;
      const int64_t row_shift = i * s.dilation_h - s.pad_h, col_shift = j * s.dilation_w - s.pad_w;
      const Inside rows = outputs_inside(s.out_h, s.stride_h, row_shift, s.in_h);
      const Inside cols = outputs_inside(s.out_w, s.stride_w, col_shift, s.in_w);
      const float* in = images + (n * s.in_channels + c) * plane;
      float* out = col + r * ch.columns() + n * ch.positions;
      std::fill(out, out + rows.begin * s.out_w, 0.0f);
      for (int64_t p = rows.begin; p < rows.end; ++p) {
        // Offsets, not a pointer shifted by col_shift: that pointer may lie
        // before the image (undefined even unread).
        const float* src = in + (p * s.stride_h + row_shift) * s.in_w;
        float* row = out + p * s.out_w;
        std::fill(row, row + cols.begin, 0.0f);
        if (s.stride_w == 1) {
          if (cols.begin < cols.end)
            std::copy(src + (cols.begin + col_shift), src + (cols.end + col_shift), row + cols.begin);
        } else {
          for (int64_t q = cols.begin; q < cols.end; ++q) row[q] = src[q * s.stride_w + col_shift];
        }
        std::fill(row + cols.end, row + s.out_w, 0.0f);
      }
      std::fill(out + rows.end * s.out_w, out + ch.positions, 0.0f);
    }
  });
}

// images (zeroed by the caller) += the col entries folded back onto their
// pixels; one task per (image, channel) plane, so no two tasks write one
// pixel.
void col2im(ThreadPool& pool, const Chunk& ch, const float* col, float* images) {
  const Conv2dShape& s = ch.s;
  const int64_t taps = s.kernel_h * s.kernel_w, plane = s.in_h * s.in_w;
  pool.parallel_for(ch.images * s.in_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / s.in_channels, c = task % s.in_channels;
      float* out = images + task * plane;
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t i = t / s.kernel_w, j = t % s.kernel_w;
        const int64_t row_shift = i * s.dilation_h - s.pad_h,
                      col_shift = j * s.dilation_w - s.pad_w;
        const Inside rows = outputs_inside(s.out_h, s.stride_h, row_shift, s.in_h);
        const Inside cols = outputs_inside(s.out_w, s.stride_w, col_shift, s.in_w);
        const float* in = col + (c * taps + t) * ch.columns() + n * ch.positions;
        for (int64_t p = rows.begin; p < rows.end; ++p) {
          float* dst = out + (p * s.stride_h + row_shift) * s.in_w;  // as in im2col
          const float* src = in + p * s.out_w;
          for (int64_t q = cols.begin; q < cols.end; ++q) dst[q * s.stride_w + col_shift] += src[q];
        }
      }
    }
  });
}

// Per-group products over one chunk: c_g = op(a_g) op(b_g) (+ c_g).
GemmArgs group_product(const Conv2dShape& s, int64_t m, int64_t n, int64_t k, const float* a,
                       bool trans_a, int64_t a_stride, const float* b, bool trans_b,
                       int64_t b_stride, float* c, int64_t c_stride, float beta) {
  GemmArgs g;
  g.batch = s.groups, g.m = m, g.n = n, g.k = k;
  g.a = a, g.trans_a = trans_a, g.a_batch_stride = a_stride;
  g.b = b, g.trans_b = trans_b, g.b_batch_stride = b_stride;
  g.c = c, g.c_batch_stride = c_stride;
  g.beta = beta;
  return g;
}

// dy of the chunk's images (NCHW, the tensors' type) as channel-major fp32
// [O, nb P].
void gather_channel_major(ThreadPool& pool, const Chunk& ch, const void* dy, DType type,
                          float* out) {
  const int64_t o_count = ch.s.out_channels;
  pool.parallel_for(ch.images * o_count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t n = task / o_count, o = task % o_count;
      convert_bulk(out + o * ch.columns() + n * ch.positions, DType::F32,
                   offset_of(dy, type, task * ch.positions), type, ch.positions);
    }
  });
}

}  // namespace

void conv2d_forward(ThreadPool& pool, const Conv2dShape& s, const void* x, const void* w,
                    const void* bias, DType type, void* y) {
  if (dnnl_conv2d_forward(pool, s, x, w, bias, type, y)) return;
  const int64_t positions = s.out_h * s.out_w, out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w, step = chunk_images(s);
  Floats weight_scratch, bias_scratch, images, col, out;
  const float* weight = f32_view(w, type, s.out_channels * kernel_size(s), weight_scratch);
  const float* bias_f32 = bias ? f32_view(bias, type, s.out_channels, bias_scratch) : nullptr;
  for (int64_t first = 0; first < s.batch; first += step) {
    const Chunk ch{s, std::min(step, s.batch - first), positions};
    col.resize(static_cast<size_t>(ch.rows() * ch.columns()));
    out.resize(static_cast<size_t>(s.out_channels * ch.columns()));
    im2col(pool, ch,
           f32_view(offset_of(x, type, first * image_size), type, ch.images * image_size, images),
           col.data());
    gemm(pool, group_product(s, out_group, ch.columns(), ch.k(), weight, false,
                             out_group * ch.k(), col.data(), false, ch.k() * ch.columns(),
                             out.data(), out_group * ch.columns(), 0.0f));
    pool.parallel_for(ch.images * s.out_channels, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(positions));
      for (int64_t task = begin; task < end; ++task) {
        const int64_t n = task / s.out_channels, o = task % s.out_channels;
        const float* src = out.data() + o * ch.columns() + n * positions;
        const float add = bias_f32 ? bias_f32[o] : 0.0f;
        for (int64_t p = 0; p < positions; ++p) row[p] = src[p] + add;
        convert_bulk(offset_of(y, type, ((first + n) * s.out_channels + o) * positions), type,
                     row.data(), DType::F32, positions);
      }
    });
  }
}

void conv2d_backward_data(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* w,
                          DType type, void* dx) {
  if (dnnl_conv2d_backward_data(pool, s, dy, w, type, dx)) return;
  const int64_t positions = s.out_h * s.out_w, out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w, step = chunk_images(s);
  Floats weight_scratch, grad_out, dcol, images;
  const float* weight = f32_view(w, type, s.out_channels * kernel_size(s), weight_scratch);
  for (int64_t first = 0; first < s.batch; first += step) {
    const Chunk ch{s, std::min(step, s.batch - first), positions};
    grad_out.resize(static_cast<size_t>(s.out_channels * ch.columns()));
    dcol.resize(static_cast<size_t>(ch.rows() * ch.columns()));
    gather_channel_major(pool, ch, offset_of(dy, type, first * s.out_channels * positions), type,
                         grad_out.data());
    gemm(pool, group_product(s, ch.k(), ch.columns(), out_group, weight, true,
                             out_group * ch.k(), grad_out.data(), false,
                             out_group * ch.columns(), dcol.data(), ch.k() * ch.columns(), 0.0f));
    // An F32 dx is accumulated in place; another type goes through fp32.
    float* target = reinterpret_cast<float*>(offset_of(dx, type, first * image_size));
    if (type != DType::F32) {
      images.resize(static_cast<size_t>(ch.images * image_size));
      target = images.data();
    }
    std::fill(target, target + ch.images * image_size, 0.0f);
    col2im(pool, ch, dcol.data(), target);
    if (type != DType::F32)
      convert_bulk(offset_of(dx, type, first * image_size), type, target, DType::F32,
                   ch.images * image_size);
  }
}

void conv2d_backward_weight(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* x,
                            DType type, void* dw, void* dbias) {
  if (dnnl_conv2d_backward_weight(pool, s, dy, x, type, dw, dbias)) return;
  const int64_t positions = s.out_h * s.out_w, out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w, step = chunk_images(s);
  const int64_t k = kernel_size(s);
  Floats grad_out, images, col;
  Floats grad_weight(static_cast<size_t>(s.out_channels * k));
  std::vector<double> grad_bias(static_cast<size_t>(s.out_channels), 0.0);
  for (int64_t first = 0; first < s.batch; first += step) {
    const Chunk ch{s, std::min(step, s.batch - first), positions};
    grad_out.resize(static_cast<size_t>(s.out_channels * ch.columns()));
    col.resize(static_cast<size_t>(ch.rows() * ch.columns()));
    gather_channel_major(pool, ch, offset_of(dy, type, first * s.out_channels * positions), type,
                         grad_out.data());
    im2col(pool, ch,
           f32_view(offset_of(x, type, first * image_size), type, ch.images * image_size, images),
           col.data());
    gemm(pool, group_product(s, out_group, k, ch.columns(), grad_out.data(), false,
                             out_group * ch.columns(), col.data(), true, k * ch.columns(),
                             grad_weight.data(), out_group * k, first == 0 ? 0.0f : 1.0f));
    if (dbias)
      pool.parallel_for(s.out_channels, 1, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          const float* row = grad_out.data() + o * ch.columns();
          double sum = 0.0;
          for (int64_t c = 0; c < ch.columns(); ++c) sum += row[c];
          grad_bias[o] += sum;
        }
      });
  }
  convert_bulk(dw, type, grad_weight.data(), DType::F32, s.out_channels * k);
  if (dbias) {
    Floats rounded(grad_bias.begin(), grad_bias.end());
    convert_bulk(dbias, type, rounded.data(), DType::F32, s.out_channels);
  }
}

void conv2d_backward(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* x,
                     const void* w, DType type, void* dx, void* dw, void* dbias) {
  if (dnnl_conv2d_backward(pool, s, dy, x, w, type, dx, dw, dbias)) return;
  conv2d_backward_data(pool, s, dy, w, type, dx);
  conv2d_backward_weight(pool, s, dy, x, type, dw, dbias);
}

namespace {

// Whether every max-pooling window lies inside the image (no padding,
// dilation 1, the last window inside: max_pool2d(x, k) and most others).
// Such windows need none of math/pool.h's per-output bounds: the kernels
// below take them with the comparisons of pool_window_argmax in the same
// order (the first maximum wins, a NaN wins over it, the last NaN over the
// others), so they pick the same element.
bool max_windows_inside(const Pool2dShape& s) {
  return s.kind == PoolKind::Max && s.pad_h == 0 && s.pad_w == 0 && s.dilation_h == 1 &&
         s.dilation_w == 1 && (s.out_h - 1) * s.stride_h + s.kernel_h <= s.in_h &&
         (s.out_w - 1) * s.stride_w + s.kernel_w <= s.in_w;
}

// The plane index output (p, q)'s value comes from.
inline int64_t max_inside_argmax(const Pool2dShape& s, const float* plane, int64_t p, int64_t q) {
  const int64_t corner = p * s.stride_h * s.in_w + q * s.stride_w;
  int64_t best_at = corner, nan_at = -1;
  float best = plane[corner];
  for (int64_t i = 0; i < s.kernel_h; ++i)
    for (int64_t j = 0; j < s.kernel_w; ++j) {
      const int64_t at = corner + i * s.in_w + j;
      const float v = plane[at];
      const bool greater = v > best;
      best = greater ? v : best;
      best_at = greater ? at : best_at;
      nan_at = v != v ? at : nan_at;
    }
  return nan_at >= 0 ? nan_at : best_at;
}

// max_pool2d(x, 2): 2 x 2 windows side by side (stride 2), the case the
// kernels below vectorise across a row of outputs, with float selects only.
inline bool pool_2x2(const Pool2dShape& s) {
  return s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2;
}

// The value of the window a, b / c, d: the first maximum, unless a NaN is
// among the four, then the last NaN.
inline float max_of_window(float a, float b, float c, float d) {
  float best = a;
  best = b > best ? b : best;
  best = c > best ? c : best;
  best = d > best ? d : best;
  const float last_nan = d != d ? d : c != c ? c : b != b ? b : a;
  const bool nan = a != a || b != b || c != c || d != d;
  return nan ? last_nan : best;
}

// Forward and backward over a plane whose windows lie inside, as kernels of
// isa_variants.h. The backward adds each output's gradient to its winner,
// in output order, into grad (zeroed by the caller).
struct MaxPoolInsideForward {
  static void run(const Pool2dShape& s, const float* plane, float* out) {
    if (pool_2x2(s)) {
      for (int64_t p = 0; p < s.out_h; ++p) {
        const float* top = plane + 2 * p * s.in_w;
        const float* bottom = top + s.in_w;
        float* o = out + p * s.out_w;
        for (int64_t q = 0; q < s.out_w; ++q)
          o[q] = max_of_window(top[2 * q], top[2 * q + 1], bottom[2 * q], bottom[2 * q + 1]);
      }
      return;
    }
    for (int64_t p = 0; p < s.out_h; ++p)
      for (int64_t q = 0; q < s.out_w; ++q)
        out[p * s.out_w + q] = plane[max_inside_argmax(s, plane, p, q)];
  }
};

struct MaxPoolInsideBackward {
  static void run(const Pool2dShape& s, const float* plane, const float* grad_out, float* grad) {
    if (pool_2x2(s)) {
      // Each input lies in one window at most, so its gradient is 0 + the
      // output's gradient (0 + -0 is +0, as the sum gives) or 0.
      for (int64_t p = 0; p < s.out_h; ++p) {
        const float* top = plane + 2 * p * s.in_w;
        const float* bottom = top + s.in_w;
        float* grad_top = grad + 2 * p * s.in_w;
        float* grad_bottom = grad_top + s.in_w;
        const float* g = grad_out + p * s.out_w;
        for (int64_t q = 0; q < s.out_w; ++q) {
          const float a = top[2 * q], b = top[2 * q + 1], c = bottom[2 * q], d = bottom[2 * q + 1];
          // The winning tap (0 to 3), as max_of_window picks it, as a
          // float: selects of floats only, so that the loop vectorises.
          float best = a, tap = 0.0f;
          tap = b > best ? 1.0f : tap, best = b > best ? b : best;
          tap = c > best ? 2.0f : tap, best = c > best ? c : best;
          tap = d > best ? 3.0f : tap;
          float nan_tap = -1.0f;
          nan_tap = a != a ? 0.0f : nan_tap;
          nan_tap = b != b ? 1.0f : nan_tap;
          nan_tap = c != c ? 2.0f : nan_tap;
          nan_tap = d != d ? 3.0f : nan_tap;
          tap = nan_tap >= 0.0f ? nan_tap : tap;
          const float add = 0.0f + g[q];
          grad_top[2 * q] = tap == 0.0f ? add : 0.0f;
          grad_top[2 * q + 1] = tap == 1.0f ? add : 0.0f;
          grad_bottom[2 * q] = tap == 2.0f ? add : 0.0f;
          grad_bottom[2 * q + 1] = tap == 3.0f ? add : 0.0f;
        }
      }
      return;
    }
    for (int64_t p = 0; p < s.out_h; ++p)
      for (int64_t q = 0; q < s.out_w; ++q)
        grad[max_inside_argmax(s, plane, p, q)] += grad_out[p * s.out_w + q];
  }
};

}  // namespace

void pool2d_forward(ThreadPool& pool, const Pool2dShape& s, const void* x, DType type, void* y) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  const bool inside = max_windows_inside(s);
  const CpuIsa isa = detected_cpu_isa();
  pool.parallel_for(s.planes, 1, [&](int64_t begin, int64_t end) {
    Floats scratch, out(static_cast<size_t>(out_size));
    for (int64_t plane_index = begin; plane_index < end; ++plane_index) {
      const float* plane = f32_view(offset_of(x, type, plane_index * in_size), type, in_size, scratch);
      if (inside) {
        run_for_isa<MaxPoolInsideForward>(isa, s, plane, out.data());
      } else {
        const auto load = [plane](int64_t i) { return plane[i]; };
        for (int64_t p = 0; p < s.out_h; ++p)
          for (int64_t q = 0; q < s.out_w; ++q) {
            float& o = out[p * s.out_w + q];
            if (s.kind == PoolKind::Max) {
              const int64_t at = math::pool_window_argmax(s, load, p, q);
              o = at < 0 ? -std::numeric_limits<float>::infinity() : plane[at];
              continue;
            }
            const math::AverageWindow win = math::pool_average_window(s, p, q);
            float sum = 0.0f;
            for (int64_t a = win.row_begin; a < win.row_end; ++a)
              for (int64_t b = win.col_begin; b < win.col_end; ++b) sum += plane[a * s.in_w + b];
            o = win.row_begin < win.row_end && win.col_begin < win.col_end ? sum / win.divisor
                                                                           : 0.0f;
          }
      }
      convert_bulk(offset_of(y, type, plane_index * out_size), type, out.data(), DType::F32,
                   out_size);
    }
  });
}

void pool2d_backward(ThreadPool& pool, const Pool2dShape& s, const void* x, const void* dy,
                     DType type, void* dx) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  const bool inside = max_windows_inside(s);
  const CpuIsa isa = detected_cpu_isa();
  pool.parallel_for(s.planes, 1, [&](int64_t begin, int64_t end) {
    Floats grad_scratch, plane_scratch, grad(static_cast<size_t>(in_size));
    for (int64_t plane_index = begin; plane_index < end; ++plane_index) {
      std::fill(grad.begin(), grad.end(), 0.0f);
      const float* grad_out =
          f32_view(offset_of(dy, type, plane_index * out_size), type, out_size, grad_scratch);
      const float* plane = s.kind == PoolKind::Max
                               ? f32_view(offset_of(x, type, plane_index * in_size), type,
                                          in_size, plane_scratch)
                               : nullptr;
      if (inside) {
        run_for_isa<MaxPoolInsideBackward>(isa, s, plane, grad_out, grad.data());
      } else {
        const auto load = [plane](int64_t i) { return plane[i]; };
        for (int64_t p = 0; p < s.out_h; ++p)
          for (int64_t q = 0; q < s.out_w; ++q) {
            const float g = grad_out[p * s.out_w + q];
            if (s.kind == PoolKind::Max) {
              const int64_t at = math::pool_window_argmax(s, load, p, q);
              if (at >= 0) grad[at] += g;
              continue;
            }
            const math::AverageWindow win = math::pool_average_window(s, p, q);
            for (int64_t a = win.row_begin; a < win.row_end; ++a)
              for (int64_t b = win.col_begin; b < win.col_end; ++b)
                grad[a * s.in_w + b] += g / win.divisor;
          }
      }
      convert_bulk(offset_of(dx, type, plane_index * in_size), type, grad.data(), DType::F32,
                   in_size);
    }
  });
}

void max_pool2d_gather(ThreadPool& pool, const Pool2dShape& s, const void* x, const void* src,
                       DType type, void* y) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  pool.parallel_for(s.planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane_index = begin; plane_index < end; ++plane_index) {
      Floats plane_scratch, src_scratch, out(static_cast<size_t>(out_size));
      const float* plane =
          f32_view(offset_of(x, type, plane_index * in_size), type, in_size, plane_scratch);
      const float* values =
          f32_view(offset_of(src, type, plane_index * in_size), type, in_size, src_scratch);
      const auto load = [plane](int64_t i) { return plane[i]; };
      for (int64_t p = 0; p < s.out_h; ++p)
        for (int64_t q = 0; q < s.out_w; ++q) {
          const int64_t at = math::pool_window_argmax(s, load, p, q);
          out[p * s.out_w + q] = at < 0 ? 0.0f : values[at];
        }
      convert_bulk(offset_of(y, type, plane_index * out_size), type, out.data(), DType::F32,
                   out_size);
    }
  });
}

}  // namespace cpu
}  // namespace ampx::impl
