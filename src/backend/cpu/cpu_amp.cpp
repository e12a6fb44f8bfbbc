#include "backend/cpu/cpu_amp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include "backend/cpu/chunk_plan.h"
#include "backend/cpu/float_tiles.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "core/multi_tensor.h"
#include "math/amp.h"
#include "math/convert.h"
#include "math/optim.h"

namespace ampx::impl {
namespace cpu {
namespace {

// max that keeps a NaN from either side: a NaN element must make the inf
// norm NaN wherever it sits, and std::max(a, b) returns a NaN `a` only.
double max_keeping_nan(double a, double b) { return (a != a || a > b) ? a : b; }

bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// Calls update(w, g, j) for each element j of the chunk of parameter p,
// where w is the fp32 value the optimizer updates (the parameter itself when
// it is fp32, else its master, from which the parameter is then rewritten)
// and g is the gradient element read as float.
template <class Update>
void update_chunk(const OptimParam& p, const Chunk& c, Update&& update) {
  visit_floating(p.grad_dtype, [&](auto grad_tag) {
    constexpr int G = decltype(grad_tag)::value;
    const auto* grad = typed<G>(p.grad);
    visit_floating(p.param_dtype, [&](auto param_tag) {
      constexpr int P = decltype(param_tag)::value;
      auto* param = typed<P>(p.param);
      for (int64_t j = c.begin; j < c.end; ++j) {
        const float g = math::load_float<G>(grad[j]);
        if constexpr (P == AMPX_F32) {
          update(param[j], g, j);
        } else {
          update(p.master[j], g, j);
          param[j] = math::store_float<P>(p.master[j]);
        }
      }
    });
  });
}

// ---- Adam over fp32 values and fp32 gradients, vectorised ----------------
// The common case (fp32 gradients, no amsgrad) with the per-step choices
// made once per chunk rather than per element, so the compiler vectorises
// the loop; it performs math::adam_update's operations in the same order on
// the same values (no contraction, sqrt and division correctly rounded in
// every lane), so the results are bit-identical to it and to the GPU's.

enum class Decay { None, Decoupled, L2 };

template <bool Maximize, Decay D>
__attribute__((always_inline)) inline void adam_dense(float* __restrict w,
                                                      const float* __restrict g,
                                                      float* __restrict m, float* __restrict v,
                                                      int64_t n, float lr, float weight_decay,
                                                      math::AdamStepFactors f,
                                                      math::AdamConfig c) {
  // Copies the compiler can keep in registers: f is passed by value, but
  // the stores through w, m and v would otherwise not rule out aliasing.
  const float beta1 = f.beta1, one_minus_beta1 = f.one_minus_beta1;
  const float beta2 = f.beta2, one_minus_beta2 = f.one_minus_beta2;
  const float decay = f.decay;
  for (int64_t j = 0; j < n; ++j) {
    float grad = g[j];
    if constexpr (Maximize) grad = -grad;
    float weight = w[j];
    if constexpr (D == Decay::Decoupled) weight *= decay;
    if constexpr (D == Decay::L2) grad += weight_decay * weight;
    const float mj = beta1 * m[j] + one_minus_beta1 * grad;
    const float vj = beta2 * v[j] + one_minus_beta2 * grad * grad;
    m[j] = mj;
    v[j] = vj;
    const float denom = std::sqrt(vj) / f.bias_correction2_sqrt + c.eps;
    w[j] = weight - f.step_size * mj / denom;
  }
}

using AdamDenseFn = void (*)(float*, const float*, float*, float*, int64_t, float, float,
                             math::AdamStepFactors, math::AdamConfig);

template <bool Maximize, Decay D>
void adam_dense_baseline(float* w, const float* g, float* m, float* v, int64_t n, float lr,
                         float weight_decay, math::AdamStepFactors f, math::AdamConfig c) {
  adam_dense<Maximize, D>(w, g, m, v, n, lr, weight_decay, f, c);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPX_ADAM_WIDE 1
template <bool Maximize, Decay D>
__attribute__((target("avx2"))) void adam_dense_avx2(float* w, const float* g, float* m,
                                                     float* v, int64_t n, float lr,
                                                     float weight_decay, math::AdamStepFactors f,
                                                     math::AdamConfig c) {
  adam_dense<Maximize, D>(w, g, m, v, n, lr, weight_decay, f, c);
}

template <bool Maximize, Decay D>
__attribute__((target("avx512f,avx512vl"))) void adam_dense_avx512(
    float* w, const float* g, float* m, float* v, int64_t n, float lr, float weight_decay,
    math::AdamStepFactors f, math::AdamConfig c) {
  adam_dense<Maximize, D>(w, g, m, v, n, lr, weight_decay, f, c);
}
#endif

template <bool Maximize, Decay D>
AdamDenseFn adam_dense_for_isa() {
#if AMPX_ADAM_WIDE
  switch (detected_cpu_isa()) {
    case CpuIsa::Avx512: return adam_dense_avx512<Maximize, D>;
    case CpuIsa::Avx2: return adam_dense_avx2<Maximize, D>;
    case CpuIsa::Scalar:
    case CpuIsa::Neon: break;
  }
#endif
  return adam_dense_baseline<Maximize, D>;
}

AdamDenseFn adam_dense_fn(bool maximize, bool decoupled, float weight_decay) {
  const Decay d = weight_decay == 0.0f ? Decay::None : decoupled ? Decay::Decoupled : Decay::L2;
  if (maximize) {
    if (d == Decay::None) return adam_dense_for_isa<true, Decay::None>();
    return d == Decay::Decoupled ? adam_dense_for_isa<true, Decay::Decoupled>()
                                 : adam_dense_for_isa<true, Decay::L2>();
  }
  if (d == Decay::None) return adam_dense_for_isa<false, Decay::None>();
  return d == Decay::Decoupled ? adam_dense_for_isa<false, Decay::Decoupled>()
                               : adam_dense_for_isa<false, Decay::L2>();
}

}  // namespace

void multi_tensor_scale(ThreadPool& pool, const std::vector<TensorSpan>& ins,
                        const std::vector<TensorSpan>& outs, const float* factor, bool reciprocal,
                        float* found_inf) {
  const float m = reciprocal ? math::reciprocal_scale(*factor) : *factor;
  std::atomic<bool> nonfinite{false};
  Plan(element_counts(ins)).for_each_chunk(pool, [&](int64_t, const Chunk& c) {
    const TensorSpan& in = ins[static_cast<size_t>(c.tensor)];
    bool found = false;
    visit_floating(in.dtype, [&](auto in_tag) {
      constexpr int S = decltype(in_tag)::value;
      const auto* x = typed<S>(static_cast<const void*>(in.data));
      TileReader<S> read;
      if (outs.empty()) {
        for_each_tile(c.begin, c.end, [&](int64_t first, int64_t n) {
          const float* a = read(x + first, n);
          for (int64_t k = 0; k < n; ++k) found |= !math::is_finite(a[k] * m);
        });
        return;
      }
      const TensorSpan& out = outs[static_cast<size_t>(c.tensor)];
      visit_floating(out.dtype, [&](auto out_tag) {
        constexpr int D = decltype(out_tag)::value;
        auto* y = typed<D>(out.data);
        TileWriter<D> write;
        for_each_tile(c.begin, c.end, [&](int64_t first, int64_t n) {
          const float* a = read(x + first, n);
          float* o = write.start(y + first);
          for (int64_t k = 0; k < n; ++k) {
            const float v = a[k] * m;
            found |= !math::is_finite(v);
            o[k] = v;
          }
          write.finish(y + first, n);
        });
      });
    });
    if (found) nonfinite.store(true, std::memory_order_relaxed);
  });
  if (found_inf != nullptr && nonfinite.load()) *found_inf = 1.0f;
}

void multi_tensor_norm(ThreadPool& pool, const std::vector<TensorSpan>& tensors, NormType type,
                       float* out) {
  const Plan plan(element_counts(tensors));
  // Partials in double, one per chunk, combined in chunk order: the sum is
  // then the same for any number of threads.
  std::vector<double> partial(plan.chunks.size());
  plan.for_each_chunk(pool, [&](int64_t i, const Chunk& c) {
    const TensorSpan& t = tensors[static_cast<size_t>(c.tensor)];
    visit_floating(t.dtype, [&](auto tag) {
      constexpr int D = decltype(tag)::value;
      const auto* x = typed<D>(static_cast<const void*>(t.data));
      double acc = 0.0;
      TileReader<D> read;
      for_each_tile(c.begin, c.end, [&](int64_t first, int64_t n) {
        const float* v = read(x + first, n);
        if (type == NormType::L2) {
          for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(v[k]) * v[k];
        } else {
          for (int64_t k = 0; k < n; ++k)
            acc = max_keeping_nan(acc, std::fabs(static_cast<double>(v[k])));
        }
      });
      partial[static_cast<size_t>(i)] = acc;
    });
  });
  double total = 0.0;
  for (double p : partial) total = type == NormType::L2 ? total + p : max_keeping_nan(total, p);
  *out = static_cast<float>(type == NormType::L2 ? std::sqrt(total) : total);
}

void clip_coefficient(const float* total_norm, float max_norm, float* coef) {
  *coef = math::clip_coefficient(*total_norm, max_norm);
}

void multi_tensor_clamp(ThreadPool& pool, const std::vector<TensorSpan>& tensors, float limit) {
  Plan(element_counts(tensors)).for_each_chunk(pool, [&](int64_t, const Chunk& c) {
    const TensorSpan& t = tensors[static_cast<size_t>(c.tensor)];
    visit_floating(t.dtype, [&](auto tag) {
      constexpr int D = decltype(tag)::value;
      auto* x = typed<D>(t.data);
      const auto low = math::store_float<D>(-limit);
      const auto high = math::store_float<D>(limit);
      // Elements within the limits, NaN included, are not rewritten: their
      // bits stay exactly as they were.
      for (int64_t j = c.begin; j < c.end; ++j) {
        const float v = math::load_float<D>(x[j]);
        if (v < -limit)
          x[j] = low;
        else if (v > limit)
          x[j] = high;
      }
    });
  });
}

void multi_tensor_count_nonfinite(ThreadPool& pool, const std::vector<TensorSpan>& tensors,
                                  int64_t* counts) {
  const Plan plan(element_counts(tensors));
  std::vector<int64_t> partial(2 * plan.chunks.size());
  plan.for_each_chunk(pool, [&](int64_t i, const Chunk& c) {
    const TensorSpan& t = tensors[static_cast<size_t>(c.tensor)];
    visit_floating(t.dtype, [&](auto tag) {
      constexpr int D = decltype(tag)::value;
      const auto* x = typed<D>(static_cast<const void*>(t.data));
      int64_t nans = 0;
      int64_t infs = 0;
      for (int64_t j = c.begin; j < c.end; ++j) {
        const float v = math::load_float<D>(x[j]);
        nans += std::isnan(v);
        infs += std::isinf(v);
      }
      partial[2 * static_cast<size_t>(i)] = nans;
      partial[2 * static_cast<size_t>(i) + 1] = infs;
    });
  });
  std::fill(counts, counts + 2 * tensors.size(), int64_t{0});
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const size_t t = static_cast<size_t>(plan.chunks[i].tensor);
    counts[2 * t] += partial[2 * i];
    counts[2 * t + 1] += partial[2 * i + 1];
  }
}

void scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                   const math::ScalerConfig& config, bool force, float forced_scale) {
  bool found = false;
  for (const float* flag : found_infs) found = found || *flag != 0.0f;
  if (force)
    math::scaler_force(*state, found, forced_scale);
  else
    math::scaler_update(*state, found, config);
}

void increment_steps(int64_t* steps, int64_t count, const float* found_inf) {
  if (skipped(found_inf)) return;
  for (int64_t i = 0; i < count; ++i) ++steps[i];
}

void lr_schedule(const math::LrSchedule* schedules, int32_t groups, const int64_t* step,
                 float* lr) {
  for (int32_t g = 0; g < groups; ++g)
    if (!math::is_constant(schedules[g])) lr[g] = math::scheduled_lr_f32(schedules[g], *step);
}

void sgd_step(ThreadPool& pool, const std::vector<OptimParam>& params,
              const math::SgdConfig& config, const StepScalars& scalars) {
  if (skipped(scalars.found_inf)) return;
  Plan(element_counts(params)).for_each_chunk(pool, [&](int64_t, const Chunk& c) {
    const OptimParam& p = params[static_cast<size_t>(c.tensor)];
    const bool first = *p.step == 1;
    const float lr = scalars.lr[p.group];
    const float weight_decay = scalars.weight_decay[p.group];
    float no_buffer = 0.0f;  // sgd_update leaves it alone without momentum
    update_chunk(p, c, [&](float& w, float g, int64_t j) {
      float& buf = p.momentum != nullptr ? p.momentum[j] : no_buffer;
      math::sgd_update(w, g, buf, first, lr, weight_decay, config);
    });
  });
}

void adam_step(ThreadPool& pool, const std::vector<OptimParam>& params,
               const math::AdamConfig& config, const StepScalars& scalars) {
  if (skipped(scalars.found_inf)) return;
  std::vector<math::AdamStepFactors> factors(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].count > 0)
      factors[i] = math::adam_step_factors(*params[i].step, scalars.lr[params[i].group],
                                           scalars.weight_decay[params[i].group], config);
  Plan(element_counts(params)).for_each_chunk(pool, [&](int64_t, const Chunk& c) {
    const size_t i = static_cast<size_t>(c.tensor);
    const OptimParam& p = params[i];
    const float lr = scalars.lr[p.group];
    const float weight_decay = scalars.weight_decay[p.group];
    if (!config.amsgrad && p.grad_dtype == DType::F32) {
      const int64_t n = c.end - c.begin;
      float* w = p.param_dtype == DType::F32 ? static_cast<float*>(p.param) : p.master;
      adam_dense_fn(config.maximize, config.decoupled_weight_decay, weight_decay)(
          w + c.begin, static_cast<const float*>(p.grad) + c.begin, p.momentum + c.begin,
          p.exp_avg_sq + c.begin, n, lr, weight_decay, factors[i], config);
      if (p.param_dtype != DType::F32)
        convert_bulk(static_cast<char*>(p.param) + c.begin * dtype_size(p.param_dtype),
                     p.param_dtype, p.master + c.begin, DType::F32, n);
      return;
    }
    float no_max = 0.0f;  // adam_update leaves it alone without amsgrad
    update_chunk(p, c, [&](float& w, float g, int64_t j) {
      math::adam_update(w, g, p.momentum[j], p.exp_avg_sq[j],
                        p.max_exp_avg_sq != nullptr ? p.max_exp_avg_sq[j] : no_max, weight_decay,
                        factors[i], config);
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
