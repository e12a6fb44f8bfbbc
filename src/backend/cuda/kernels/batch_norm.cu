// batch_norm.cu -- batch normalisation of x viewed as [n, channels, inner]
// (any floating type; statistics and parameters F32), as the CPU backend
// computes it (backend/cpu/cpu_norm.cpp): per-channel sums in double around
// the fp32 per-element math of kernels/math/norm.h. With count = n * inner
// the elements of channel c:
//
//   stats     mean_c = sum x / count, var_c = sum (x - mean_c)^2 / count  (double,
//             two passes: no E[x^2] - mean^2 cancellation); running statistics
//             r = math::running_stat(r, batch, momentum), the variance's
//             unbiased (var_c * count / (count - 1))
//   forward   y = math::norm_output(math::normalized(x, mean_c, rs_c), w_c, b_c),
//             rs_c = math::inv_std(var_c, eps)
//   backward  dbias_c = sum dy, dweight_c = sum dy xhat                    (double)
//             dx = math::norm_input_grad(dy w_c, xhat, rs_c, mean_g, mean_g_xhat)
//             mean_g = float(p sum dy), mean_g_xhat = float(p sum dy xhat),
//             p = w_c / count with batch statistics, else 0
//
// Every pass walks the array in one of two layouts, so that a warp reads
// consecutive addresses and each thread keeps one channel for a whole work
// item (its statistics and parameters are loaded once per item):
//  - columns (inner < 32): x is an [n, channels * inner] matrix; an item is
//    a tile of `width` consecutive columns (32, or the next power of two >=
//    channels * inner) by a range of rows, as reduce.cu's sum_rows cuts it.
//    The block's threads are width columns x (256 / width) row lanes; each
//    lane walks every (256 / width)-th row in order and a tree over the
//    lanes in shared memory gives one partial per column and range.
//  - slices (inner >= 32): an item is a range of consecutive elements of
//    one channel (its i-th element is at ((i / inner) * channels + c) *
//    inner + i % inner); thread t takes elements t, t + 256, ... in order and
//    multi_tensor.cuh's block_reduce combines the block in a fixed tree: one
//    partial per channel and range.
// Ranges are sized so that the items about fill the device (launch.
// max_blocks), with enough elements each to be worth a block.
//
// Reductions: a pass writes double partials to scratch; a finishing kernel
// gives each channel a warp, whose lanes fold every 32nd range in order
// (and, for columns, the channel's inner columns of each range in order)
// before a butterfly of shuffles adds the lanes. Statistics take four
// launches (sums, means, squared deviations from the double mean,
// variances and running statistics); the backward three (sums, per-channel
// results, dx). Every order is fixed by the shapes and launch.max_blocks:
// the same inputs give the same bits on every run. The CPU adds in one
// sequence instead; the double sums then differ far below fp32, and the
// float statistics at most where that difference crosses a rounding
// boundary of the final conversion.
//
// Scratch (doubles, then floats), P = partials per sum:
//   stats     [P] partials, [channels] double means
//   backward  [2][P] partials (dy, dy xhat), [2][channels] floats (mean_g, mean_g_xhat)
// with P = ranges x channels * inner (columns) or channels x ranges (slices):
// at most max(32 max_blocks, channels * inner) or max(max_blocks, channels).
//
// Memory traffic: stats read x twice; the forward reads x and writes y once;
// the backward reads x and dy twice and writes dx once. The partials (P
// doubles per sum, above) are written and read once per pass. dx may alias
// dy or x: the sums are complete before the dx pass, which reads each
// element in the thread that writes it.
#include <cuda_runtime.h>

#include <cstdint>

#include "math/convert.h"
#include "math/norm.h"
#include "multi_tensor.cuh"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

constexpr unsigned int kFullMask = 0xffffffffu;

// Below this many elements per row of a channel, the columns layout.
constexpr int64_t kSliceInner = 32;
// Rows per lane, at least, in a columns range (as in reduce.cu): a range
// costs 16 bytes of partials per column and sum.
constexpr int64_t kRowsPerLane = 8;
// Elements per slice range, at least: 16 per thread.
constexpr int64_t kMinSlice = 16 * kBlockThreads;

struct BnShape {
  int64_t n, channels, inner;
  int64_t count;    // n * inner, a channel's elements
  int64_t columns;  // channels * inner, a row's elements in the columns view
};

struct BnPlan {
  bool columns;       // the layout
  int width;          // columns: columns per tile, a power of two <= 32
  int64_t tiles;      // columns: column tiles; slices: channels
  int64_t splits;     // ranges: of rows (columns) or of a channel's elements (slices)
  int64_t split_len;  // rows or elements per range (the last may have fewer)
  __host__ __device__ int64_t items() const { return tiles * splits; }
  // Partials per sum.
  __host__ __device__ int64_t partials(const BnShape& s) const {
    return columns ? splits * s.columns : s.channels * splits;
  }
};

BnShape make_shape(int64_t n, int64_t channels, int64_t inner) {
  return {n, channels, inner, n * inner, channels * inner};
}

BnPlan plan_passes(const BnShape& s, const LaunchConfig& launch) {
  BnPlan p{};
  p.columns = s.inner < kSliceInner;
  int64_t for_device = 0, wanted = 0, length = 0;
  if (p.columns) {
    p.width = 1;
    while (p.width < 32 && p.width < s.columns) p.width *= 2;
    const int64_t lanes = kBlockThreads / p.width;
    p.tiles = (s.columns + p.width - 1) / p.width;
    length = s.n;
    wanted = (s.n + lanes * kRowsPerLane - 1) / (lanes * kRowsPerLane);
  } else {
    p.width = 0;
    p.tiles = s.channels;
    length = s.count;
    wanted = (s.count + kMinSlice - 1) / kMinSlice;
  }
  for_device = p.tiles > 0 ? launch.max_blocks / p.tiles : 1;
  if (for_device < 1) for_device = 1;
  p.splits = for_device < wanted ? for_device : wanted;
  if (p.splits < 1) p.splits = 1;
  p.split_len = (length + p.splits - 1) / p.splits;
  // Rounding split_len up may leave trailing ranges empty: drop them.
  if (p.split_len > 0) p.splits = (length + p.split_len - 1) / p.split_len;
  return p;
}

unsigned int item_blocks(const BnPlan& p, const LaunchConfig& launch) {
  const int64_t items = p.items();
  return static_cast<unsigned int>(items < launch.max_blocks ? items : launch.max_blocks);
}

// ---- the passes ------------------------------------------------------------
// A pass gives each thread a per-channel state once per item (channel(c))
// and then visits its elements by index (add: into N double sums; apply:
// element-wise).

template <int D>
struct SumPass {
  static constexpr int N = 1;
  const Elem<D>* x;
  struct Channel {};
  __device__ Channel channel(int64_t) const { return {}; }
  __device__ void add(const Channel&, int64_t at, double* acc) const {
    acc[0] += math::load_float<D>(x[at]);
  }
};

template <int D>
struct SquaresPass {
  static constexpr int N = 1;
  const Elem<D>* x;
  const double* mean;
  struct Channel {
    double mean;
  };
  __device__ Channel channel(int64_t c) const { return {mean[c]}; }
  __device__ void add(const Channel& ch, int64_t at, double* acc) const {
    const double d = math::load_float<D>(x[at]) - ch.mean;
    acc[0] += d * d;
  }
};

template <int D>
struct GradSumsPass {
  static constexpr int N = 2;
  const Elem<D>* x;
  const Elem<D>* dy;
  const float* mean;
  const float* var;
  float eps;
  struct Channel {
    float mean, rstd;
  };
  __device__ Channel channel(int64_t c) const { return {mean[c], math::inv_std(var[c], eps)}; }
  __device__ void add(const Channel& ch, int64_t at, double* acc) const {
    const double g = math::load_float<D>(dy[at]);
    acc[0] += g;
    acc[1] += g * math::normalized(math::load_float<D>(x[at]), ch.mean, ch.rstd);
  }
};

template <int D>
struct NormalizePass {
  const Elem<D>* x;
  Elem<D>* y;
  const float* mean;
  const float* var;
  const float* weight;
  const float* bias;
  float eps;
  struct Channel {
    float mean, rstd, w, b;
  };
  __device__ Channel channel(int64_t c) const {
    return {mean[c], math::inv_std(var[c], eps), weight ? weight[c] : 1.0f,
            bias ? bias[c] : 0.0f};
  }
  __device__ void apply(const Channel& ch, int64_t at) const {
    const float xhat = math::normalized(math::load_float<D>(x[at]), ch.mean, ch.rstd);
    y[at] = math::store_float<D>(math::norm_output(xhat, ch.w, ch.b));
  }
};

template <int D>
struct InputGradPass {
  const Elem<D>* x;
  const Elem<D>* dy;
  Elem<D>* dx;
  const float* mean;
  const float* var;
  const float* weight;
  const float* coefs;  // [2][channels]: mean_g, mean_g_xhat
  int64_t channels;
  float eps;
  struct Channel {
    float mean, rstd, w, mean_g, mean_g_xhat;
  };
  __device__ Channel channel(int64_t c) const {
    return {mean[c], math::inv_std(var[c], eps), weight ? weight[c] : 1.0f, coefs[c],
            coefs[channels + c]};
  }
  __device__ void apply(const Channel& ch, int64_t at) const {
    const float xhat = math::normalized(math::load_float<D>(x[at]), ch.mean, ch.rstd);
    dx[at] = math::store_float<D>(math::norm_input_grad(math::load_float<D>(dy[at]) * ch.w, xhat,
                                                        ch.rstd, ch.mean_g, ch.mean_g_xhat));
  }
};

// ---- the walks ---------------------------------------------------------------

// Calls visit(r * columns + col) for this thread's rows r of the item's range,
// in order; col is this thread's column (< s.columns).
template <class Visit>
__device__ __forceinline__ void walk_column(const BnShape& s, const BnPlan& p, int64_t split,
                                            int64_t col, Visit&& visit) {
  const int lanes = kBlockThreads / p.width;
  const int64_t first = split * p.split_len;
  const int64_t last = first + p.split_len < s.n ? first + p.split_len : s.n;
  for (int64_t r = first + static_cast<int>(threadIdx.x) / p.width; r < last; r += lanes)
    visit(r * s.columns + col);
}

// Calls visit(address) for this thread's elements of channel c's range,
// in order: elements begin + threadIdx.x, then every 256th. The row and the
// offset in it advance by constant steps instead of a division each.
template <class Visit>
__device__ __forceinline__ void walk_slice(const BnShape& s, const BnPlan& p, int64_t c,
                                           int64_t split, Visit&& visit) {
  const int64_t begin = split * p.split_len;
  const int64_t end = begin + p.split_len < s.count ? begin + p.split_len : s.count;
  const int64_t i0 = begin + threadIdx.x;
  if (i0 >= end) return;
  int64_t row = i0 / s.inner, k = i0 - row * s.inner;
  const int64_t row_step = kBlockThreads / s.inner, k_step = kBlockThreads % s.inner;
  for (int64_t i = i0; i < end; i += kBlockThreads) {
    visit((row * s.channels + c) * s.inner + k);
    row += row_step;
    k += k_step;
    if (k >= s.inner) {
      k -= s.inner;
      ++row;
    }
  }
}

// Partials of pass's N sums: sum q of item `item` goes to
// partials[q * stride + index], index = split * columns + col (columns) or
// c * splits + split (slices).
template <class Pass, bool Columns>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_kernel(Pass pass, BnShape s, BnPlan p, double* partials, int64_t stride) {
  constexpr int N = Pass::N;
  const int64_t items = p.items();
  if constexpr (Columns) {
    __shared__ double lane_acc[N][kBlockThreads];
    const int column_in_tile = static_cast<int>(threadIdx.x) % p.width;
    const int lane = static_cast<int>(threadIdx.x) / p.width;
    const int lanes = kBlockThreads / p.width;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
      const int64_t split = item / p.tiles;
      const int64_t col = (item - split * p.tiles) * p.width + column_in_tile;
      double acc[N] = {};
      if (col < s.columns) {
        const auto ch = pass.channel(col / s.inner);
        walk_column(s, p, split, col, [&](int64_t at) { pass.add(ch, at, acc); });
      }
#pragma unroll
      for (int q = 0; q < N; ++q) lane_acc[q][threadIdx.x] = acc[q];
      __syncthreads();
      for (int half = lanes / 2; half > 0; half /= 2) {
        if (lane < half)
#pragma unroll
          for (int q = 0; q < N; ++q)
            lane_acc[q][threadIdx.x] += lane_acc[q][threadIdx.x + half * p.width];
        __syncthreads();
      }
      if (lane == 0 && col < s.columns)
#pragma unroll
        for (int q = 0; q < N; ++q)
          partials[q * stride + split * s.columns + col] = lane_acc[q][column_in_tile];
      // The next item overwrites lane_acc.
      __syncthreads();
    }
  } else {
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
      const int64_t c = item / p.splits;
      double acc[N] = {};
      const auto ch = pass.channel(c);
      walk_slice(s, p, c, item - c * p.splits, [&](int64_t at) { pass.add(ch, at, acc); });
#pragma unroll
      for (int q = 0; q < N; ++q) {
        const double total = block_reduce(acc[q], [](double a, double b) { return a + b; });
        if (threadIdx.x == 0) partials[q * stride + item] = total;
      }
    }
  }
}

template <class Pass, bool Columns>
__global__ void __launch_bounds__(kBlockThreads)
    apply_kernel(Pass pass, BnShape s, BnPlan p) {
  const int64_t items = p.items();
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    if constexpr (Columns) {
      const int64_t split = item / p.tiles;
      const int64_t col =
          (item - split * p.tiles) * p.width + static_cast<int>(threadIdx.x) % p.width;
      if (col >= s.columns) continue;
      const auto ch = pass.channel(col / s.inner);
      walk_column(s, p, split, col, [&](int64_t at) { pass.apply(ch, at); });
    } else {
      const int64_t c = item / p.splits;
      const auto ch = pass.channel(c);
      walk_slice(s, p, c, item - c * p.splits, [&](int64_t at) { pass.apply(ch, at); });
    }
  }
}

// ---- per-channel results -------------------------------------------------------

// Channel c's N totals, in every lane of the calling warp: lane l folds
// ranges l, l + 32, ... in order (for columns, each range's inner columns
// in order), then a butterfly of shuffles adds the lanes -- the same bits
// in every lane, since each pair adds the same two values.
template <int N>
__device__ __forceinline__ void channel_totals(const double* partials, int64_t stride,
                                               const BnShape& s, const BnPlan& p, int64_t c,
                                               double (&total)[N]) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int q = 0; q < N; ++q) total[q] = 0.0;
  for (int64_t split = lane; split < p.splits; split += 32) {
    if (p.columns) {
      const int64_t base = split * s.columns + c * s.inner;
      for (int64_t k = 0; k < s.inner; ++k)
#pragma unroll
        for (int q = 0; q < N; ++q) total[q] += partials[q * stride + base + k];
    } else {
#pragma unroll
      for (int q = 0; q < N; ++q) total[q] += partials[q * stride + c * p.splits + split];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
#pragma unroll
    for (int q = 0; q < N; ++q) total[q] += __shfl_xor_sync(kFullMask, total[q], offset);
}

constexpr int kChannelsPerBlock = kBlockThreads / 32;

unsigned int channel_blocks(int64_t channels, const LaunchConfig& launch) {
  const int64_t wanted = (channels + kChannelsPerBlock - 1) / kChannelsPerBlock;
  return static_cast<unsigned int>(wanted < launch.max_blocks ? wanted : launch.max_blocks);
}

// Channels are taken grid-stride a warp each; a warp's lanes share a
// channel, so its shuffles are reached together.
__device__ __forceinline__ int64_t first_channel() {
  return static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + static_cast<int>(threadIdx.x) / 32;
}
__device__ __forceinline__ int64_t channel_step() {
  return static_cast<int64_t>(gridDim.x) * kChannelsPerBlock;
}

__global__ void __launch_bounds__(kBlockThreads)
    mean_kernel(const double* partials, BnShape s, BnPlan p, double* mean) {
  for (int64_t c = first_channel(); c < s.channels; c += channel_step()) {
    double total[1];
    channel_totals(partials, 0, s, p, c, total);
    if (threadIdx.x % 32 == 0) mean[c] = total[0] / static_cast<double>(s.count);
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    variance_kernel(const double* partials, BnShape s, BnPlan p, const double* mean_d,
                    float momentum, float* mean, float* var, float* running_mean,
                    float* running_var) {
  for (int64_t c = first_channel(); c < s.channels; c += channel_step()) {
    double total[1];
    channel_totals(partials, 0, s, p, c, total);
    if (threadIdx.x % 32 != 0) continue;
    const auto count = static_cast<double>(s.count);
    const double v = total[0] / count;
    const auto m = static_cast<float>(mean_d[c]);
    mean[c] = m;
    var[c] = static_cast<float>(v);
    // The caller passes running statistics only with count > 1.
    if (running_mean) running_mean[c] = math::running_stat(running_mean[c], m, momentum);
    if (running_var)
      running_var[c] = math::running_stat(
          running_var[c], static_cast<float>(v * count / static_cast<double>(s.count - 1)),
          momentum);
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    grad_finish_kernel(const double* partials, int64_t stride, BnShape s, BnPlan p,
                       const float* weight, bool batch_stats, float* dweight, float* dbias,
                       float* coefs) {
  for (int64_t c = first_channel(); c < s.channels; c += channel_step()) {
    double total[2];  // dy, dy * xhat
    channel_totals(partials, stride, s, p, c, total);
    if (threadIdx.x % 32 != 0) continue;
    if (dweight) dweight[c] = static_cast<float>(total[1]);
    if (dbias) dbias[c] = static_cast<float>(total[0]);
    if (!coefs) continue;
    // The gradient of xhat is dy * w, so its means are w times dy's.
    const float w = weight ? weight[c] : 1.0f;
    const double per = batch_stats ? w / static_cast<double>(s.count) : 0.0;
    coefs[c] = static_cast<float>(per * total[0]);
    coefs[s.channels + c] = static_cast<float>(per * total[1]);
  }
}

template <class Pass>
cudaError_t run_reduce(const Pass& pass, const BnShape& s, const BnPlan& p, double* partials,
                       int64_t stride, const LaunchConfig& launch) {
  // No items (inner == 0): every channel's sums are empty, which the
  // finishing kernels read as 0 without looking at the partials.
  if (p.items() == 0) return cudaSuccess;
  const auto kernel = p.columns ? reduce_kernel<Pass, true> : reduce_kernel<Pass, false>;
  return enqueue(kernel, item_blocks(p, launch), launch, pass, s, p, partials, stride);
}

template <class Pass>
cudaError_t run_apply(const Pass& pass, const BnShape& s, const BnPlan& p,
                      const LaunchConfig& launch) {
  if (p.items() == 0 || s.count == 0) return cudaSuccess;
  const auto kernel = p.columns ? apply_kernel<Pass, true> : apply_kernel<Pass, false>;
  return enqueue(kernel, item_blocks(p, launch), launch, pass, s, p);
}

}  // namespace

size_t batch_norm_stats_scratch_bytes(int64_t n, int64_t channels, int64_t inner,
                                      const LaunchConfig& launch) {
  if (n < 0 || channels <= 0 || inner < 0) return 0;
  const BnShape s = make_shape(n, channels, inner);
  return static_cast<size_t>(plan_passes(s, launch).partials(s) + channels) * sizeof(double);
}

cudaError_t launch_batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels,
                                    int64_t inner, float momentum, float* mean, float* var,
                                    float* running_mean, float* running_var, void* scratch,
                                    const LaunchConfig& launch) {
  // With no elements a channel's statistics are 0 / 0, as on the CPU.
  if (n < 0 || channels <= 0 || inner < 0) return cudaSuccess;
  const BnShape s = make_shape(n, channels, inner);
  const BnPlan p = plan_passes(s, launch);
  auto* partials = static_cast<double*>(scratch);
  double* mean_d = partials + p.partials(s);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const unsigned int blocks = channel_blocks(channels, launch);
    cudaError_t status = run_reduce(SumPass<D>{in}, s, p, partials, 0, launch);
    if (status == cudaSuccess)
      status = enqueue(mean_kernel, blocks, launch, static_cast<const double*>(partials), s, p,
                       mean_d);
    if (status == cudaSuccess)
      status = run_reduce(SquaresPass<D>{in, mean_d}, s, p, partials, 0, launch);
    if (status == cudaSuccess)
      status = enqueue(variance_kernel, blocks, launch, static_cast<const double*>(partials), s,
                       p, static_cast<const double*>(mean_d), momentum, mean, var, running_mean,
                       running_var);
    return status;
  });
}

cudaError_t launch_batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                              const float* mean, const float* var, const float* weight,
                              const float* bias, float eps, void* y, const LaunchConfig& launch) {
  if (n <= 0 || channels <= 0 || inner <= 0) return cudaSuccess;
  const BnShape s = make_shape(n, channels, inner);
  const BnPlan p = plan_passes(s, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const NormalizePass<D> pass{static_cast<const Elem<D>*>(x), static_cast<Elem<D>*>(y), mean,
                                var, weight, bias, eps};
    return run_apply(pass, s, p, launch);
  });
}

size_t batch_norm_backward_scratch_bytes(int64_t n, int64_t channels, int64_t inner,
                                         const LaunchConfig& launch) {
  if (n < 0 || channels <= 0 || inner < 0) return 0;
  const BnShape s = make_shape(n, channels, inner);
  return static_cast<size_t>(2 * plan_passes(s, launch).partials(s)) * sizeof(double) +
         static_cast<size_t>(2 * channels) * sizeof(float);
}

cudaError_t launch_batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                                       int64_t channels, int64_t inner, const float* mean,
                                       const float* var, const float* weight, float eps,
                                       bool batch_stats, void* dx, float* dweight, float* dbias,
                                       void* scratch, const LaunchConfig& launch) {
  if (n < 0 || channels <= 0 || inner < 0) return cudaSuccess;
  if (!dx && !dweight && !dbias) return cudaSuccess;
  const BnShape s = make_shape(n, channels, inner);
  const BnPlan p = plan_passes(s, launch);
  const int64_t stride = p.partials(s);
  auto* partials = static_cast<double*>(scratch);
  // dx's coefficients after both partial arrays; doubles keep them aligned.
  float* coefs = dx ? reinterpret_cast<float*>(partials + 2 * stride) : nullptr;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    // The sums are needed for dx even without batch statistics: the CPU
    // multiplies them by 0, so a non-finite one makes dx NaN there too.
    cudaError_t status =
        run_reduce(GradSumsPass<D>{in, grad_out, mean, var, eps}, s, p, partials, stride, launch);
    if (status == cudaSuccess)
      status = enqueue(grad_finish_kernel, channel_blocks(channels, launch), launch,
                       static_cast<const double*>(partials), stride, s, p, weight, batch_stats,
                       dweight, dbias, coefs);
    if (status != cudaSuccess || !dx) return status;
    const InputGradPass<D> pass{in, grad_out, static_cast<Elem<D>*>(dx), mean, var, weight,
                                coefs, channels, eps};
    return run_apply(pass, s, p, launch);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
