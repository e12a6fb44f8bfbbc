// cpu_conv.cpp -- the CPU backend's convolution and pooling
// (core/backend_conv.h).
//
// Convolution is lowered to matrix products, one image at a time: the
// image's receptive fields are unfolded into col [Cin * kh * kw, OH * OW]
// (im2col; a 1x1 kernel of stride 1 without padding uses the image itself),
// then for each group g
//   forward          y_g [Og, P]  = w_g [Og, K] col_g [K, P]
//   backward data    dcol_g [K, P] = w_g^T dy_g,  folded back into dx (col2im)
//   backward weight  dw_g [Og, K] += dy_g col_g^T
// with K = Cg * kh * kw and P = OH * OW, through cpu::gemm (OpenBLAS's sgemm
// when loaded), which threads each product. Everything is computed in fp32
// and each result converted to the tensors' type once. Scratch per image:
// col (K * groups * P floats) and the image in fp32.
//
// Pooling runs one plane per task in fp32; max pooling's backward re-finds
// each window's maximum and adds the gradient there (a plane belongs to one
// task, so overlapping windows need no atomics).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/convert_bulk.h"

namespace ampx::impl {
namespace cpu {
namespace {

using Floats = std::vector<float>;

Floats to_f32(const void* data, DType type, int64_t count) {
  Floats out(static_cast<size_t>(count));
  if (count > 0) convert_bulk(out.data(), DType::F32, data, type, count);
  return out;
}

const char* offset_of(const void* base, DType type, int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(dtype_size(type));
}
char* offset_of(void* base, DType type, int64_t elements) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(dtype_size(type));
}

int64_t kernel_size(const Conv2dShape& s) {
  return s.in_channels / s.groups * s.kernel_h * s.kernel_w;
}

// The image is its own col: a 1x1 kernel that visits every pixel once.
bool col_is_image(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0;
}

// col row r = (c, i, j) holds x[c, p * sh - ph + i * dh, q * sw - pw + j * dw].
void im2col(ThreadPool& pool, const Conv2dShape& s, const float* image, float* col) {
  const int64_t rows = s.in_channels * s.kernel_h * s.kernel_w;
  const int64_t positions = s.out_h * s.out_w;
  pool.parallel_for(rows, std::max<int64_t>(1, 4096 / positions), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t c = r / (s.kernel_h * s.kernel_w);
      const int64_t i = r / s.kernel_w % s.kernel_h;
      const int64_t j = r % s.kernel_w;
      const float* plane = image + c * s.in_h * s.in_w;
      float* out = col + r * positions;
      for (int64_t p = 0; p < s.out_h; ++p) {
        const int64_t a = p * s.stride_h - s.pad_h + i * s.dilation_h;
        float* row = out + p * s.out_w;
        if (a < 0 || a >= s.in_h) {
          std::fill(row, row + s.out_w, 0.0f);
          continue;
        }
        for (int64_t q = 0; q < s.out_w; ++q) {
          const int64_t b = q * s.stride_w - s.pad_w + j * s.dilation_w;
          row[q] = b >= 0 && b < s.in_w ? plane[a * s.in_w + b] : 0.0f;
        }
      }
    }
  });
}

// image += the col entries folded back onto their pixels; one task per
// input channel, so no two tasks write one pixel.
void col2im(ThreadPool& pool, const Conv2dShape& s, const float* col, float* image) {
  const int64_t positions = s.out_h * s.out_w;
  const int64_t taps = s.kernel_h * s.kernel_w;
  pool.parallel_for(s.in_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      float* plane = image + c * s.in_h * s.in_w;
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t i = t / s.kernel_w, j = t % s.kernel_w;
        const float* in = col + (c * taps + t) * positions;
        for (int64_t p = 0; p < s.out_h; ++p) {
          const int64_t a = p * s.stride_h - s.pad_h + i * s.dilation_h;
          if (a < 0 || a >= s.in_h) continue;
          for (int64_t q = 0; q < s.out_w; ++q) {
            const int64_t b = q * s.stride_w - s.pad_w + j * s.dilation_w;
            if (b >= 0 && b < s.in_w) plane[a * s.in_w + b] += in[p * s.out_w + q];
          }
        }
      }
    }
  });
}

// Per-group products over one image: c_g = op(a_g) op(b_g) (+ c_g).
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

}  // namespace

void conv2d_forward(ThreadPool& pool, const Conv2dShape& s, const void* x, const void* w,
                    const void* bias, DType type, void* y) {
  const int64_t k = kernel_size(s), positions = s.out_h * s.out_w;
  const int64_t out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w;
  const Floats weight = to_f32(w, type, s.out_channels * k);
  const Floats bias_f32 = bias ? to_f32(bias, type, s.out_channels) : Floats();
  Floats image(static_cast<size_t>(image_size));
  Floats col(col_is_image(s) ? 0 : static_cast<size_t>(k * s.groups * positions));
  Floats out(static_cast<size_t>(s.out_channels * positions));
  for (int64_t n = 0; n < s.batch; ++n) {
    convert_bulk(image.data(), DType::F32, offset_of(x, type, n * image_size), type, image_size);
    const float* cols = image.data();
    if (!col_is_image(s)) {
      im2col(pool, s, image.data(), col.data());
      cols = col.data();
    }
    gemm(pool, group_product(s, out_group, positions, k, weight.data(), false, out_group * k, cols,
                             false, k * positions, out.data(), out_group * positions, 0.0f));
    if (bias)
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t p = 0; p < positions; ++p) out[o * positions + p] += bias_f32[o];
    convert_bulk(offset_of(y, type, n * s.out_channels * positions), type, out.data(), DType::F32,
                 s.out_channels * positions);
  }
}

void conv2d_backward_data(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* w,
                          DType type, void* dx) {
  const int64_t k = kernel_size(s), positions = s.out_h * s.out_w;
  const int64_t out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w;
  const Floats weight = to_f32(w, type, s.out_channels * k);
  Floats grad_out(static_cast<size_t>(s.out_channels * positions));
  Floats dcol(static_cast<size_t>(k * s.groups * positions));
  Floats image(col_is_image(s) ? 0 : static_cast<size_t>(image_size));
  for (int64_t n = 0; n < s.batch; ++n) {
    convert_bulk(grad_out.data(), DType::F32, offset_of(dy, type, n * s.out_channels * positions),
                 type, s.out_channels * positions);
    gemm(pool, group_product(s, k, positions, out_group, weight.data(), true, out_group * k,
                             grad_out.data(), false, out_group * positions, dcol.data(),
                             k * positions, 0.0f));
    const float* result = dcol.data();
    if (!col_is_image(s)) {
      std::fill(image.begin(), image.end(), 0.0f);
      col2im(pool, s, dcol.data(), image.data());
      result = image.data();
    }
    convert_bulk(offset_of(dx, type, n * image_size), type, result, DType::F32, image_size);
  }
}

void conv2d_backward_weight(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* x,
                            DType type, void* dw, void* dbias) {
  const int64_t k = kernel_size(s), positions = s.out_h * s.out_w;
  const int64_t out_group = s.out_channels / s.groups;
  const int64_t image_size = s.in_channels * s.in_h * s.in_w;
  Floats grad_out(static_cast<size_t>(s.out_channels * positions));
  Floats image(static_cast<size_t>(image_size));
  Floats col(col_is_image(s) ? 0 : static_cast<size_t>(k * s.groups * positions));
  Floats grad_weight(static_cast<size_t>(s.out_channels * k));
  std::vector<double> grad_bias(static_cast<size_t>(s.out_channels), 0.0);
  for (int64_t n = 0; n < s.batch; ++n) {
    convert_bulk(grad_out.data(), DType::F32, offset_of(dy, type, n * s.out_channels * positions),
                 type, s.out_channels * positions);
    convert_bulk(image.data(), DType::F32, offset_of(x, type, n * image_size), type, image_size);
    const float* cols = image.data();
    if (!col_is_image(s)) {
      im2col(pool, s, image.data(), col.data());
      cols = col.data();
    }
    gemm(pool, group_product(s, out_group, k, positions, grad_out.data(), false,
                             out_group * positions, cols, true, k * positions, grad_weight.data(),
                             out_group * k, n == 0 ? 0.0f : 1.0f));
    if (dbias)
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t p = 0; p < positions; ++p) grad_bias[o] += grad_out[o * positions + p];
  }
  convert_bulk(dw, type, grad_weight.data(), DType::F32, s.out_channels * k);
  if (dbias) {
    Floats rounded(grad_bias.begin(), grad_bias.end());
    convert_bulk(dbias, type, rounded.data(), DType::F32, s.out_channels);
  }
}

namespace {

// The window of output (p, q) along one dimension: taps t with in-image
// position start + t * dilation, t < kernel.
struct Span {
  int64_t start, first, last;  // taps [first, last) fall inside the image
};

Span window_span(int64_t out_index, int64_t stride, int64_t pad, int64_t kernel, int64_t dilation,
                 int64_t in) {
  Span span{out_index * stride - pad, 0, kernel};
  while (span.first < kernel && span.start + span.first * dilation < 0) ++span.first;
  while (span.last > span.first && span.start + (span.last - 1) * dilation >= in) --span.last;
  return span;
}

// The plane index of the window's maximum (a NaN wins, then the first of
// equal maxima), or -1 when no tap lies in the image.
int64_t window_argmax(const Pool2dShape& s, const float* plane, int64_t p, int64_t q) {
  const Span rows = window_span(p, s.stride_h, s.pad_h, s.kernel_h, s.dilation_h, s.in_h);
  const Span cols = window_span(q, s.stride_w, s.pad_w, s.kernel_w, s.dilation_w, s.in_w);
  int64_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = rows.first; i < rows.last; ++i)
    for (int64_t j = cols.first; j < cols.last; ++j) {
      const int64_t at = (rows.start + i * s.dilation_h) * s.in_w + cols.start + j * s.dilation_w;
      const float v = plane[at];
      if (best < 0 || v > best_value || std::isnan(v)) {
        best = at;
        best_value = v;
      }
    }
  return best;
}

// The average window of output (p, q): its in-image rows and columns and
// its divisor.
struct AverageWindow {
  int64_t row_begin, row_end, col_begin, col_end;
  float divisor;
};

AverageWindow average_window(const Pool2dShape& s, int64_t p, int64_t q) {
  int64_t r0 = p * s.stride_h - s.pad_h, c0 = q * s.stride_w - s.pad_w;
  int64_t r1 = std::min(r0 + s.kernel_h, s.in_h + s.pad_h);
  int64_t c1 = std::min(c0 + s.kernel_w, s.in_w + s.pad_w);
  const int64_t padded = (r1 - r0) * (c1 - c0);
  r0 = std::max<int64_t>(r0, 0), c0 = std::max<int64_t>(c0, 0);
  r1 = std::min(r1, s.in_h), c1 = std::min(c1, s.in_w);
  const int64_t inside = std::max<int64_t>(r1 - r0, 0) * std::max<int64_t>(c1 - c0, 0);
  const int64_t divisor = s.divisor ? s.divisor : s.count_include_pad ? padded : inside;
  return {r0, r1, c0, c1, static_cast<float>(divisor)};
}

}  // namespace

void pool2d_forward(ThreadPool& pool, const Pool2dShape& s, const void* x, DType type, void* y) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  pool.parallel_for(s.planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane_index = begin; plane_index < end; ++plane_index) {
      const Floats plane = to_f32(offset_of(x, type, plane_index * in_size), type, in_size);
      Floats out(static_cast<size_t>(out_size));
      for (int64_t p = 0; p < s.out_h; ++p)
        for (int64_t q = 0; q < s.out_w; ++q) {
          float& o = out[p * s.out_w + q];
          if (s.kind == PoolKind::Max) {
            const int64_t at = window_argmax(s, plane.data(), p, q);
            o = at < 0 ? -std::numeric_limits<float>::infinity() : plane[at];
            continue;
          }
          const AverageWindow win = average_window(s, p, q);
          float sum = 0.0f;
          for (int64_t a = win.row_begin; a < win.row_end; ++a)
            for (int64_t b = win.col_begin; b < win.col_end; ++b) sum += plane[a * s.in_w + b];
          o = win.row_begin < win.row_end && win.col_begin < win.col_end ? sum / win.divisor : 0.0f;
        }
      convert_bulk(offset_of(y, type, plane_index * out_size), type, out.data(), DType::F32,
                   out_size);
    }
  });
}

void pool2d_backward(ThreadPool& pool, const Pool2dShape& s, const void* x, const void* dy,
                     DType type, void* dx) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  pool.parallel_for(s.planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane_index = begin; plane_index < end; ++plane_index) {
      const Floats grad_out =
          to_f32(offset_of(dy, type, plane_index * out_size), type, out_size);
      Floats grad(static_cast<size_t>(in_size), 0.0f);
      Floats plane;
      if (s.kind == PoolKind::Max)
        plane = to_f32(offset_of(x, type, plane_index * in_size), type, in_size);
      for (int64_t p = 0; p < s.out_h; ++p)
        for (int64_t q = 0; q < s.out_w; ++q) {
          const float g = grad_out[p * s.out_w + q];
          if (s.kind == PoolKind::Max) {
            const int64_t at = window_argmax(s, plane.data(), p, q);
            if (at >= 0) grad[at] += g;
            continue;
          }
          const AverageWindow win = average_window(s, p, q);
          for (int64_t a = win.row_begin; a < win.row_end; ++a)
            for (int64_t b = win.col_begin; b < win.col_end; ++b)
              grad[a * s.in_w + b] += g / win.divisor;
        }
      convert_bulk(offset_of(dx, type, plane_index * in_size), type, grad.data(), DType::F32,
                   in_size);
    }
  });
}

}  // namespace cpu
}  // namespace ampx::impl
