// cpu_norm.cpp -- layer and batch normalisation on the CPU: reductions in
// double around the fp32 per-element math of kernels/math/norm.h (what the
// CUDA kernels compute per element). Every reduction runs in a fixed order
// inside one task, so results do not depend on the number of threads.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "backend/cpu/isa_variants.h"
#include "math/norm.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Elements per task: a few passes over 16Ki elements take tens of
// microseconds, well above what waking a worker costs.
constexpr int64_t kGrain = int64_t{1} << 14;

template <int D>
using Elem = math::storage_t<D>;

template <int D>
float load_or(const Elem<D>* p, int64_t i, float fallback) {
  return p ? math::load_float<D>(p[i]) : fallback;
}

// Two passes (mean, then squared deviations from it): no cancellation
// whatever the offset of the data. Returns the mean; *var gets the biased
// variance.
template <int D, class Index>
double mean_and_var(int64_t count, Index&& at, const Elem<D>* x, double* var) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += math::load_float<D>(x[at(i)]);
  const double mean = sum / static_cast<double>(count);
  double squares = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double d = math::load_float<D>(x[at(i)]) - mean;
    squares += d * d;
  }
  *var = squares / static_cast<double>(count);
  return mean;
}

// Batch norm's partial sums: kLanes doubles, and as many floats.
constexpr int64_t kLanes = 8;
using Lanes = double __attribute__((vector_size(kLanes * sizeof(double))));
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));

// Channel c of an [n, channels, inner] array: n runs of `inner` contiguous
// elements.
struct Channel {
  int64_t n, channels, inner, c;
  int64_t run(int64_t image) const { return (image * channels + c) * inner; }

  // fn(k) for each element k of the channel, in order.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (int64_t image = 0; image < n; ++image)
      for (int64_t k = run(image), end = k + inner; k < end; ++k) fn(k);
  }

  // K sums over the channel's elements, in double, each as kLanes partial
  // sums: element j of a run goes to lane j % kLanes, the last inner %
  // kLanes of each run to a sum of their own, and that sum takes the lanes
  // in order at the end -- an order fixed by the shape alone. block(k,
  // terms) writes the K terms of elements k to k + kLanes - 1 as Lanes
  // vectors (the lanes of one vector register with AVX-512, isa_variants.h),
  // one(k, terms) the K terms of element k. (Vectors go through pointers:
  // passed by value they would change the ABI between the variants.)
  template <int K, class Block, class One>
  void sums(Block&& block, One&& one, double (&out)[K]) const {
    Lanes lanes[K] = {};
    double rest[K] = {};
    for (int64_t image = 0; image < n; ++image) {
      const int64_t base = run(image);
      int64_t j = 0;
      for (; j + kLanes <= inner; j += kLanes) {
        Lanes terms[K];
        block(base + j, terms);
        for (int i = 0; i < K; ++i) lanes[i] += terms[i];
      }
      for (; j < inner; ++j) {
        double terms[K];
        one(base + j, terms);
        for (int i = 0; i < K; ++i) rest[i] += terms[i];
      }
    }
    for (int i = 0; i < K; ++i) {
      for (int64_t l = 0; l < kLanes; ++l) rest[i] += lanes[i][l];
      out[i] = rest[i];
    }
  }
};

// kLanes elements from p as floats, and as doubles.
template <int D>
void load_lanes(const Elem<D>* p, FloatLanes* v) {
  for (int64_t l = 0; l < kLanes; ++l) (*v)[l] = math::load_float<D>(p[l]);
}

template <int D>
void load_lanes(const Elem<D>* p, Lanes* v) {
  FloatLanes f;
  load_lanes<D>(p, &f);
  *v = __builtin_convertvector(f, Lanes);
}

// Batch norm's loops over channels [begin, end) (or items, for the
// forward), as kernels of isa_variants.h: D is the tensors' type.
template <int D>
struct BatchNormStats {
  static void run(const Elem<D>* in, int64_t n, int64_t channels, int64_t inner, float momentum,
                  float* mean, float* var, float* running_mean, float* running_var, int64_t begin,
                  int64_t end) {
    const int64_t count = n * inner;
    for (int64_t c = begin; c < end; ++c) {
      // Two passes, as mean_and_var.
      const Channel channel{n, channels, inner, c};
      double sum[1], squares[1];
      channel.sums<1>([&](int64_t k, Lanes* terms) { load_lanes<D>(in + k, terms); },
                      [&](int64_t k, double* terms) { terms[0] = math::load_float<D>(in[k]); },
                      sum);
      const double m = sum[0] / static_cast<double>(count);
      channel.sums<1>(
          [&](int64_t k, Lanes* terms) {
            load_lanes<D>(in + k, terms);
            terms[0] = (terms[0] - m) * (terms[0] - m);
          },
          [&](int64_t k, double* terms) {
            const double d = math::load_float<D>(in[k]) - m;
            terms[0] = d * d;
          },
          squares);
      const double v = squares[0] / static_cast<double>(count);
      mean[c] = static_cast<float>(m);
      var[c] = static_cast<float>(v);
      if (!running_mean) continue;
      const auto unbiased =
          static_cast<float>(v * static_cast<double>(count) / static_cast<double>(count - 1));
      running_mean[c] = math::running_stat(running_mean[c], mean[c], momentum);
      running_var[c] = math::running_stat(running_var[c], unbiased, momentum);
    }
  }
};

template <int D>
struct BatchNormForward {
  static void run(const Elem<D>* in, Elem<D>* out, int64_t channels, int64_t inner,
                  const float* mean, const float* rstd, const float* weight, const float* bias,
                  int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item % channels;
      const float w = weight ? weight[c] : 1.0f;
      const float b = bias ? bias[c] : 0.0f;
      const float m = mean[c], rs = rstd[c];
      for (int64_t k = item * inner; k < (item + 1) * inner; ++k) {
        const float xhat = math::normalized(math::load_float<D>(in[k]), m, rs);
        out[k] = math::store_float<D>(math::norm_output(xhat, w, b));
      }
    }
  }
};

template <int D>
struct BatchNormBackward {
  static void run(const Elem<D>* in, const Elem<D>* grad_out, Elem<D>* grad_in, int64_t n,
                  int64_t channels, int64_t inner, const float* mean, const float* var,
                  const float* weight, float eps, bool batch_stats, float* dweight, float* dbias,
                  int64_t begin, int64_t end) {
    const int64_t count = n * inner;
    for (int64_t c = begin; c < end; ++c) {
      const Channel channel{n, channels, inner, c};
      const float rs = math::inv_std(var[c], eps);
      const float w = weight ? weight[c] : 1.0f;
      const float m = mean[c];
      // dy and dy * xhat summed in one pass.
      double sum[2];
      channel.sums<2>(
          [&](int64_t k, Lanes* terms) {
            FloatLanes x;
            load_lanes<D>(in + k, &x);
            const FloatLanes xhat = (x - m) * rs;  // math::normalized
            load_lanes<D>(grad_out + k, &terms[0]);
            terms[1] = terms[0] * __builtin_convertvector(xhat, Lanes);
          },
          [&](int64_t k, double* terms) {
            terms[0] = math::load_float<D>(grad_out[k]);
            terms[1] = terms[0] * math::normalized(math::load_float<D>(in[k]), m, rs);
          },
          sum);
      const double sum_dy = sum[0], sum_dy_xhat = sum[1];
      if (dweight) dweight[c] = static_cast<float>(sum_dy_xhat);
      if (dbias) dbias[c] = static_cast<float>(sum_dy);
      if (!grad_in) continue;
      // The gradient of xhat is dy * w, so its means are w times dy's.
      const double per = batch_stats ? w / static_cast<double>(count) : 0.0;
      const auto mean_g = static_cast<float>(per * sum_dy);
      const auto mean_g_xhat = static_cast<float>(per * sum_dy_xhat);
      channel.for_each([&](int64_t k) {
        const float xhat = math::normalized(math::load_float<D>(in[k]), m, rs);
        grad_in[k] = math::store_float<D>(math::norm_input_grad(
            math::load_float<D>(grad_out[k]) * w, xhat, rs, mean_g, mean_g_xhat));
      });
    }
  }
};

}  // namespace

void layer_norm(ThreadPool& pool, const void* x, const void* weight, const void* bias, DType type,
                int64_t rows, int64_t cols, float eps, void* y, float* mean, float* rstd,
                bool centered) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* w = static_cast<const Elem<D>*>(weight);
    const auto* b = static_cast<const Elem<D>*>(bias);
    auto* out = static_cast<Elem<D>*>(y);
    pool.parallel_for(rows, items_per_task(kGrain, cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Elem<D>* row = in + r * cols;
        double var = 0.0;
        float m = 0.0f;
        if (centered) {
          m = static_cast<float>(mean_and_var<D>(cols, [](int64_t j) { return j; }, row, &var));
        } else {
          for (int64_t j = 0; j < cols; ++j) {
            const double v = math::load_float<D>(row[j]);
            var += v * v;
          }
          var /= static_cast<double>(cols);
        }
        const float rs = math::inv_std(static_cast<float>(var), eps);
        mean[r] = m;
        rstd[r] = rs;
        for (int64_t j = 0; j < cols; ++j) {
          const float xhat = math::normalized(math::load_float<D>(row[j]), m, rs);
          out[r * cols + j] = math::store_float<D>(
              math::norm_output(xhat, load_or<D>(w, j, 1.0f), load_or<D>(b, j, 0.0f)));
        }
      }
    });
  });
}

void layer_norm_backward(ThreadPool& pool, const void* x, const void* dy, const void* weight,
                         DType type, int64_t rows, int64_t cols, const float* mean,
                         const float* rstd, void* dx, void* dweight, void* dbias, bool centered) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    const auto* w = static_cast<const Elem<D>*>(weight);
    auto xhat_at = [&](int64_t r, int64_t j) {
      return math::normalized(math::load_float<D>(in[r * cols + j]), mean[r], rstd[r]);
    };
    if (dx) {
      auto* grad_in = static_cast<Elem<D>*>(dx);
      pool.parallel_for(rows, items_per_task(kGrain, cols), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const Elem<D>* dy_row = grad_out + r * cols;
          double sum_g = 0.0, sum_g_xhat = 0.0;
          for (int64_t j = 0; j < cols; ++j) {
            const float g = math::load_float<D>(dy_row[j]) * load_or<D>(w, j, 1.0f);
            sum_g += g;
            sum_g_xhat += static_cast<double>(g) * xhat_at(r, j);
          }
          const auto n = static_cast<double>(cols);
          const auto mean_g = centered ? static_cast<float>(sum_g / n) : 0.0f;
          const auto mean_g_xhat = static_cast<float>(sum_g_xhat / n);
          for (int64_t j = 0; j < cols; ++j) {
            const float g = math::load_float<D>(dy_row[j]) * load_or<D>(w, j, 1.0f);
            grad_in[r * cols + j] = math::store_float<D>(
                math::norm_input_grad(g, xhat_at(r, j), rstd[r], mean_g, mean_g_xhat));
          }
        }
      });
    }
    if (!dweight && !dbias) return;
    auto* dw = static_cast<Elem<D>*>(dweight);
    auto* db = static_cast<Elem<D>*>(dbias);
    // Columns are independent; each task walks the rows in order.
    pool.parallel_for(cols, items_per_task(kGrain, rows), [&](int64_t begin, int64_t end) {
      std::vector<double> acc_w(static_cast<size_t>(end - begin), 0.0);
      std::vector<double> acc_b(static_cast<size_t>(end - begin), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = begin; j < end; ++j) {
          const double g = math::load_float<D>(grad_out[r * cols + j]);
          acc_w[static_cast<size_t>(j - begin)] += g * xhat_at(r, j);
          acc_b[static_cast<size_t>(j - begin)] += g;
        }
      for (int64_t j = begin; j < end; ++j) {
        const size_t k = static_cast<size_t>(j - begin);
        if (dw) dw[j] = math::store_float<D>(static_cast<float>(acc_w[k]));
        if (db) db[j] = math::store_float<D>(static_cast<float>(acc_b[k]));
      }
    });
  });
}

// The batch norm loops run the kernels above compiled for the CPU's widest
// vectors (isa_variants.h); their sums keep their lanes, so every variant
// gives the same bits.
void batch_norm_stats(ThreadPool& pool, const void* x, DType type, int64_t n, int64_t channels,
                      int64_t inner, float momentum, float* mean, float* var, float* running_mean,
                      float* running_var) {
  const CpuIsa isa = detected_cpu_isa();
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    pool.parallel_for(channels, items_per_task(kGrain, n * inner), [&](int64_t begin, int64_t end) {
      run_for_isa<BatchNormStats<D>>(isa, in, n, channels, inner, momentum, mean, var,
                                     running_mean, running_var, begin, end);
    });
  });
}

void batch_norm(ThreadPool& pool, const void* x, DType type, int64_t n, int64_t channels,
                int64_t inner, const float* mean, const float* var, const float* weight,
                const float* bias, float eps, void* y) {
  std::vector<float> rstd(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) rstd[static_cast<size_t>(c)] = math::inv_std(var[c], eps);
  const CpuIsa isa = detected_cpu_isa();
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    auto* out = static_cast<Elem<D>*>(y);
    // One item is a contiguous run of `inner` elements of one channel.
    pool.parallel_for(n * channels, items_per_task(kGrain, inner), [&](int64_t begin, int64_t end) {
      run_for_isa<BatchNormForward<D>>(isa, in, out, channels, inner, mean, rstd.data(), weight,
                                       bias, begin, end);
    });
  });
}

void batch_norm_backward(ThreadPool& pool, const void* x, const void* dy, DType type, int64_t n,
                         int64_t channels, int64_t inner, const float* mean, const float* var,
                         const float* weight, float eps, bool batch_stats, void* dx, float* dweight,
                         float* dbias) {
  const CpuIsa isa = detected_cpu_isa();
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    auto* grad_in = static_cast<Elem<D>*>(dx);
    pool.parallel_for(channels, items_per_task(kGrain, n * inner), [&](int64_t begin, int64_t end) {
      run_for_isa<BatchNormBackward<D>>(isa, in, grad_out, grad_in, n, channels, inner, mean, var,
                                        weight, eps, batch_stats, dweight, dbias, begin, end);
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
