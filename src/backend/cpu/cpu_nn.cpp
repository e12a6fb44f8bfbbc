// cpu_nn.cpp -- the CPU backend's activations, softmax and cross-entropy:
// element and row loops around the fp32 math of kernels/math/activations.h
// (the code the CUDA kernels call), any floating type in and out, rounded
// once when stored. Elements and rows are independent, so results do not
// depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "backend/cpu/float_tiles.h"
#include "backend/cpu/isa_variants.h"
#include "core/error.h"
#include "math/activations.h"
#include "math/convert.h"
#include "math/losses.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Elements per task: at ~10 ns an element (erfc, exp) a task of 16Ki runs
// for ~0.1 ms, far above the microseconds that waking a worker costs, and a
// tensor below that runs on the calling thread.
constexpr int64_t kGrain = int64_t{1} << 14;

// Rows per task, so that a task holds about kGrain elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)); }

template <int D>
using Elem = math::storage_t<D>;

template <class Fn>
void for_activation(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Relu: return fn(math::Relu{});
    case UnaryOp::Gelu: return fn(math::Gelu{});
    case UnaryOp::GeluTanh: return fn(math::GeluTanh{});
    case UnaryOp::Silu: return fn(math::Silu{});
    case UnaryOp::Sigmoid: return fn(math::Sigmoid{});
    case UnaryOp::Tanh: return fn(math::Tanh{});
    case UnaryOp::Exp: return fn(math::Exp{});
    case UnaryOp::Log: return fn(math::Log{});
    case UnaryOp::Sqrt: return fn(math::Sqrt{});
    case UnaryOp::Rsqrt: return fn(math::Rsqrt{});
    case UnaryOp::GeluDerivative: return fn(math::GeluDerivative{});
    case UnaryOp::GeluTanhDerivative: return fn(math::GeluTanhDerivative{});
  }
  fail(AMPX_ERR_INTERNAL, "unary: unknown op ", static_cast<int>(op));
}

// Reads label r of an I32 or I64 label vector.
class Labels {
 public:
  Labels(const void* data, DType type) : data_(data), type_(type) {
    if (type != DType::I32 && type != DType::I64)
      fail(AMPX_ERR_DTYPE, "cross_entropy: labels are ", dtype_name(type), "; they need i32 or i64");
  }
  int64_t operator[](int64_t r) const {
    return type_ == DType::I32 ? static_cast<const int32_t*>(data_)[r]
                               : static_cast<const int64_t*>(data_)[r];
  }

 private:
  const void* data_;
  DType type_;
};

// The row's max and log of its sum of exp(x - max).
struct RowStats {
  float max;
  float log_sum;
};

template <int D>
RowStats row_stats(const Elem<D>* row, int64_t cols) {
  math::ExpSum s;
  for (int64_t j = 0; j < cols; ++j) math::exp_sum_add(s, math::load_float<D>(row[j]));
  return {s.max, math::exp_sum_log(s)};
}

// The element loops over one tile, compiled for the CPU's vector width
// (isa_variants.h): the activations' math calls no library function
// (math/exp_erfc.h), so these vectorise whole.
template <class Act>
struct ForwardTile {
  static void run(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = Act::forward(x[i]);
  }
};

template <class Act>
struct BackwardTile {
  static void run(const float* x, const float* dy, float* dx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dx[i] = Act::backward(x[i], dy[i]);
  }
};

}  // namespace

void unary(ThreadPool& pool, UnaryOp op, const void* x, void* y, DType type, int64_t count) {
  const CpuIsa isa = detected_cpu_isa();
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* out = static_cast<Elem<D>*>(y);
    for_activation(op, [&](auto act) {
      using Act = decltype(act);
      pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
        TileReader<D> read;
        TileWriter<D> write;
        for_each_tile(begin, end, [&](int64_t first, int64_t n) {
          const float* a = read(in + first, n);
          float* o = write.start(out + first);
          run_for_isa<ForwardTile<Act>>(isa, a, o, n);
          write.finish(out + first, n);
        });
      });
    });
  });
}

void unary_backward(ThreadPool& pool, UnaryOp op, const void* x, const void* dy, void* dx,
                    DType type, int64_t count) {
  const CpuIsa isa = detected_cpu_isa();
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    auto* grad_in = static_cast<Elem<D>*>(dx);
    for_activation(op, [&](auto act) {
      using Act = decltype(act);
      pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
        TileReader<D> read_x, read_dy;
        TileWriter<D> write;
        for_each_tile(begin, end, [&](int64_t first, int64_t n) {
          const float* a = read_x(in + first, n);
          const float* g = read_dy(grad_out + first, n);
          float* o = write.start(grad_in + first);
          run_for_isa<BackwardTile<Act>>(isa, a, g, o, n);
          write.finish(grad_in + first, n);
        });
      });
    });
  });
}

// Each row is read once for its statistics, then once more as it is
// written, element by element: y may be x.
void softmax(ThreadPool& pool, const void* x, void* y, DType type, int64_t rows, int64_t cols,
             bool log) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* out = static_cast<Elem<D>*>(y);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Elem<D>* row = in + r * cols;
        Elem<D>* out_row = out + r * cols;
        const RowStats st = row_stats<D>(row, cols);
        for (int64_t j = 0; j < cols; ++j) {
          const float lp = math::log_softmax_value(math::load_float<D>(row[j]), st.max, st.log_sum);
          out_row[j] = math::store_float<D>(log ? lp : expf(lp));
        }
      }
    });
  });
}

void softmax_backward(ThreadPool& pool, const void* y, const void* dy, void* dx, DType type,
                      int64_t rows, int64_t cols, bool log) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* out = static_cast<const Elem<D>*>(y);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    auto* grad_in = static_cast<Elem<D>*>(dx);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Elem<D>* y_row = out + r * cols;
        const Elem<D>* dy_row = grad_out + r * cols;
        Elem<D>* dx_row = grad_in + r * cols;
        // sum dy (log-softmax) or sum dy * y (softmax).
        float reduced = 0.0f;
        for (int64_t j = 0; j < cols; ++j) {
          const float g = math::load_float<D>(dy_row[j]);
          reduced += log ? g : g * math::load_float<D>(y_row[j]);
        }
        for (int64_t j = 0; j < cols; ++j) {
          const float yj = math::load_float<D>(y_row[j]);
          const float gj = math::load_float<D>(dy_row[j]);
          dx_row[j] = math::store_float<D>(log ? math::log_softmax_grad(yj, gj, reduced)
                                               : math::softmax_grad(yj, gj, reduced));
        }
      }
    });
  });
}

// Ignored rows are not read at all: whatever they hold (NaN included) gives
// a loss of 0.
void cross_entropy(ThreadPool& pool, const void* logits, DType type, const void* labels,
                   DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                   float* losses) {
  const Labels label(labels, label_type);
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(logits);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t l = label[r];
        if (l == ignore_index) {
          losses[r] = 0.0f;
          continue;
        }
        const Elem<D>* row = x + r * cols;
        const RowStats st = row_stats<D>(row, cols);
        losses[r] = -math::log_softmax_value(math::load_float<D>(row[l]), st.max, st.log_sum);
      }
    });
  });
}

void cross_entropy_backward(ThreadPool& pool, const void* logits, DType type, const void* labels,
                            DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                            const float* dloss, float scale, void* dlogits,
                            int64_t dloss_stride) {
  const Labels label(labels, label_type);
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(logits);
    auto* dx = static_cast<Elem<D>*>(dlogits);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t l = label[r];
        Elem<D>* dx_row = dx + r * cols;
        if (l == ignore_index) {
          std::fill(dx_row, dx_row + cols, math::store_float<D>(0.0f));
          continue;
        }
        const Elem<D>* row = x + r * cols;
        const RowStats st = row_stats<D>(row, cols);
        const float g = dloss[r * dloss_stride] * scale;
        for (int64_t j = 0; j < cols; ++j) {
          const float lp = math::log_softmax_value(math::load_float<D>(row[j]), st.max, st.log_sum);
          dx_row[j] = math::store_float<D>(math::cross_entropy_grad(lp, j == l, g));
        }
      }
    });
  });
}

void cross_entropy_smoothed(ThreadPool& pool, const void* logits, DType type, const void* labels,
                            DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                            const float* class_weight, float smoothing, float* losses,
                            float* row_weights) {
  const Labels label(labels, label_type);
  const float inv_classes = 1.0f / static_cast<float>(cols);
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(logits);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t l = label[r];
        if (l == ignore_index) {
          losses[r] = row_weights[r] = 0.0f;
          continue;
        }
        const Elem<D>* row = x + r * cols;
        const RowStats st = row_stats<D>(row, cols);
        const float wl = class_weight ? class_weight[l] : 1.0f;
        double loss = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
          const float q = math::smoothed_target(j == l, wl, class_weight ? class_weight[j] : 1.0f,
                                                smoothing, inv_classes);
          loss -= static_cast<double>(q) *
                  math::log_softmax_value(math::load_float<D>(row[j]), st.max, st.log_sum);
        }
        losses[r] = static_cast<float>(loss);
        row_weights[r] = wl;
      }
    });
  });
}

void cross_entropy_smoothed_backward(ThreadPool& pool, const void* logits, DType type,
                                     const void* labels, DType label_type, int64_t rows,
                                     int64_t cols, int64_t ignore_index, const float* class_weight,
                                     float smoothing, const float* dloss, void* dlogits,
                                     int64_t dloss_stride) {
  const Labels label(labels, label_type);
  const float inv_classes = 1.0f / static_cast<float>(cols);
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(logits);
    auto* dx = static_cast<Elem<D>*>(dlogits);
    pool.parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t l = label[r];
        Elem<D>* dx_row = dx + r * cols;
        if (l == ignore_index) {
          std::fill(dx_row, dx_row + cols, math::store_float<D>(0.0f));
          continue;
        }
        const Elem<D>* row = x + r * cols;
        const RowStats st = row_stats<D>(row, cols);
        const float wl = class_weight ? class_weight[l] : 1.0f;
        double mass = 0.0;  // W = sum_c q_c
        for (int64_t j = 0; j < cols; ++j)
          mass += math::smoothed_target(j == l, wl, class_weight ? class_weight[j] : 1.0f,
                                        smoothing, inv_classes);
        const auto w = static_cast<float>(mass);
        const float g = dloss[r * dloss_stride];
        for (int64_t j = 0; j < cols; ++j) {
          const float q = math::smoothed_target(j == l, wl, class_weight ? class_weight[j] : 1.0f,
                                                smoothing, inv_classes);
          const float p =
              expf(math::log_softmax_value(math::load_float<D>(row[j]), st.max, st.log_sum));
          dx_row[j] = math::store_float<D>((p * w - q) * g);
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
