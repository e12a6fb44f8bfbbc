// The CPU Adam step's vectorised path (fp32 gradients, no amsgrad) against
// math::adam_update applied element by element: bit for bit, for every
// combination of the choices it makes once per chunk, with values that
// include signed zeros, subnormals, huge gradients and NaN/inf (NaNs
// compare as NaNs).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_amp.h"
#include "backend/cpu/thread_pool.h"
#include "core/convert_bulk.h"
#include "math/convert.h"
#include "math/optim.h"

namespace {

std::vector<float> awkward_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 3e38f, -3e38f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i % 97 < 8 ? specials[i % 97] : uniform(rng);
  return v;
}

// Equal bits, except that any NaN equals any NaN: the compiler may commute
// the operands of a product, which changes which NaN's sign and payload
// propagate (x86 keeps the first operand's), never whether it is a NaN.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("cpu adam: the vectorised path equals math::adam_update bit for bit") {
  using namespace ampx::impl;
  CAPTURE(cpu_isa_name(detected_cpu_isa()));
  ThreadPool pool(2);
  const size_t n = 70001;  // two chunks and a ragged tail
  for (DType param_dtype : {DType::F32, DType::BF16})
    for (bool maximize : {false, true})
      for (bool decoupled : {false, true})
        for (float weight_decay : {0.0f, 0.05f}) {
          CAPTURE(dtype_name(param_dtype));
          CAPTURE(maximize);
          CAPTURE(decoupled);
          CAPTURE(weight_decay);
          std::vector<float> w = awkward_values(n, 1), g = awkward_values(n, 2);
          std::vector<float> m = awkward_values(n, 3), v = awkward_values(n, 4);
          for (float& x : v) x = std::fabs(x);
          std::vector<uint16_t> param(n);
          if (param_dtype == DType::BF16)
            for (size_t j = 0; j < n; ++j) param[j] = math::float_to_bf16(w[j]);
          std::vector<float> rw = w, rm = m, rv = v;

          const int64_t step = 3;
          const float lr = 1e-2f;
          const math::AdamConfig config{0.9f, 0.999f, 1e-8f, false, maximize, decoupled};
          OptimParam p{};
          p.param = param_dtype == DType::F32 ? static_cast<void*>(w.data()) : param.data();
          p.param_dtype = param_dtype;
          p.master = param_dtype == DType::F32 ? nullptr : w.data();
          p.grad = g.data();
          p.grad_dtype = DType::F32;
          p.momentum = m.data();
          p.exp_avg_sq = v.data();
          p.step = &step;
          p.count = static_cast<int64_t>(n);
          const StepScalars scalars{nullptr, &lr, &weight_decay};
          cpu::adam_step(pool, {p}, config, scalars);

          const math::AdamStepFactors f = math::adam_step_factors(step, lr, weight_decay, config);
          float no_max = 0.0f;
          for (size_t j = 0; j < n; ++j)
            math::adam_update(rw[j], g[j], rm[j], rv[j], no_max, weight_decay, f, config);
          CHECK(same_bits(w, rw));
          CHECK(same_bits(m, rm));
          CHECK(same_bits(v, rv));
          if (param_dtype == DType::BF16) {
            bool params_match = true;
            for (size_t j = 0; j < n; ++j) {
              const uint16_t expected = math::float_to_bf16(rw[j]);
              const bool both_nan = (param[j] & 0x7fff) > 0x7f80 && (expected & 0x7fff) > 0x7f80;
              params_match &= both_nan || param[j] == expected;
            }
            CHECK(params_match);
          }
        }
}
