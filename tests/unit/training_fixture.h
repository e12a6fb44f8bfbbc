// training_fixture.h -- what the optimizer and scaler tests share: host-side
// number formats, moving values in and out of tensors through the public API,
// double-precision references of SGD, Adam/AdamW and the loss scaler
// written from DESIGN.md section 4, and the central differences the
// gradient checks compare with (never from the library's math headers, so
// that a shared misreading cannot hide).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"

namespace ampx_fixture {

using ampx_test::last_error;
using ampx_test::Tensor;

// ---- host number formats ---------------------------------------------------

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Rounds finite x once to nearest even with `precision` significant bits and
// minimum normal exponent `emin` (the quantum stops shrinking there, which is
// what subnormals are). Overflow is left to the caller.
inline double round_significand(double x, int precision, int emin) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  const int e = std::ilogb(x) > emin ? std::ilogb(x) : emin;
  const int quantum = e - (precision - 1);
  return std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
}

// IEEE binary16, round to nearest even, overflow to infinity.
inline uint16_t f16_bits(double x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double r = std::fabs(round_significand(x, 11, -14));
  if (r >= 65536.0) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(r, 24));
  const int e = std::ilogb(r);
  const uint16_t mantissa = static_cast<uint16_t>(std::ldexp(r, 10 - e) - 1024.0);
  return sign | static_cast<uint16_t>((e + 15) << 10) | mantissa;
}

inline double from_f16(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// bfloat16: fp32's exponent range, 8 significant bits, round to nearest even.
inline uint16_t bf16_bits(double x) {
  if (std::isnan(x)) return 0x7fc0;
  const double r = round_significand(x, 8, -126);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::fabs(r) >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  // r has at most 8 significant bits, so the float conversion is exact.
  return static_cast<uint16_t>(bits_of(static_cast<float>(r)) >> 16);
}

inline double from_bf16(uint16_t b) { return float_of(uint32_t{b} << 16); }

// x rounded to `dtype` as a host program storing it there would (floats: the
// language's double->float conversion, itself round to nearest even).
inline double round_to(ampx_dtype dtype, double x) {
  switch (dtype) {
    case AMPX_F16: return from_f16(f16_bits(x));
    case AMPX_BF16: return from_bf16(bf16_bits(x));
    default: return static_cast<float>(x);
  }
}

inline std::vector<unsigned char> encode(ampx_dtype dtype, const std::vector<double>& values) {
  std::vector<unsigned char> bytes(values.size() * ampx_dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == AMPX_F32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else if (dtype == AMPX_I32) {
      const auto v = static_cast<int32_t>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else if (dtype == AMPX_I64) {
      const auto v = static_cast<int64_t>(values[i]);
      std::memcpy(bytes.data() + 8 * i, &v, 8);
    } else {
      const uint16_t h = dtype == AMPX_F16 ? f16_bits(values[i]) : bf16_bits(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

inline std::vector<double> decode(ampx_dtype dtype, const std::vector<unsigned char>& bytes) {
  const size_t n = bytes.size() / ampx_dtype_size(dtype);
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == AMPX_F32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      values[i] = f;
    } else if (dtype == AMPX_I32) {
      int32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      values[i] = v;
    } else if (dtype == AMPX_I64) {
      int64_t v;
      std::memcpy(&v, bytes.data() + 8 * i, 8);
      values[i] = static_cast<double>(v);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      values[i] = dtype == AMPX_F16 ? from_f16(h) : from_bf16(h);
    }
  }
  return values;
}

// ---- tensors through the public API ------------------------------------------

inline ampx_dtype dtype_of(ampx_tensor t) {
  ampx_dtype d = AMPX_F32;
  REQUIRE(ampx_tensor_dtype(t, &d) == AMPX_OK);
  return d;
}

inline std::vector<unsigned char> bytes_of(ampx_tensor t) {
  size_t n = 0;
  REQUIRE(ampx_tensor_nbytes(t, &n) == AMPX_OK);
  std::vector<unsigned char> bytes(n);
  REQUIRE_MESSAGE(ampx_tensor_to_host(t, bytes.data(), n) == AMPX_OK, last_error());
  return bytes;
}

inline std::vector<double> values_of(ampx_tensor t) { return decode(dtype_of(t), bytes_of(t)); }

inline void write(ampx_tensor t, const std::vector<double>& values) {
  const std::vector<unsigned char> bytes = encode(dtype_of(t), values);
  REQUIRE_MESSAGE(ampx_tensor_copy_from_host(t, bytes.data(), bytes.size()) == AMPX_OK,
                  last_error());
}

// A 1-D tensor holding `values` rounded to `dtype`; owned by the caller.
inline ampx_tensor make(ampx_context ctx, ampx_dtype dtype, const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  const std::vector<unsigned char> bytes = encode(dtype, values);
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, 1, &n, bytes.data(), bytes.size(), &t) ==
                      AMPX_OK,
                  last_error());
  return t;
}

// Makes a gradient of `dtype` (zeros) and attaches it to `param`; the param
// A tensor's extents.
inline std::vector<int64_t> dims_of(ampx_tensor t) {
  int32_t ndim = 0;
  REQUIRE(ampx_tensor_ndim(t, &ndim) == AMPX_OK);
  std::vector<int64_t> dims(AMPX_MAX_DIMS);
  REQUIRE(ampx_tensor_shape(t, dims.data(), AMPX_MAX_DIMS) == AMPX_OK);
  dims.resize(static_cast<size_t>(ndim));
  return dims;
}

// A tensor of `dims` holding `values` converted to `dtype`, marked as
// needing a gradient when asked (ops tests).
inline ampx_tensor make(ampx_context ctx, ampx_dtype dtype, const std::vector<int64_t>& dims,
                        const std::vector<double>& values, bool requires_grad = false) {
  const std::vector<unsigned char> bytes = encode(dtype, values);
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, static_cast<int32_t>(dims.size()), dims.data(),
                                        bytes.data(), bytes.size(), &t) == AMPX_OK,
                  ampx_last_error());
  if (requires_grad)
    REQUIRE_MESSAGE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK, ampx_last_error());
  return t;
}

// keeps it alive, the returned handle is borrowed.
inline ampx_tensor attach_grad(ampx_context ctx, ampx_tensor param, ampx_dtype dtype) {
  int64_t n = 0;
  REQUIRE(ampx_tensor_numel(param, &n) == AMPX_OK);
  Tensor g(make(ctx, dtype, std::vector<double>(static_cast<size_t>(n), 0.0)));
  REQUIRE_MESSAGE(ampx_tensor_set_grad(param, g) == AMPX_OK, last_error());
  return g.handle;
}

// Redoes an optimizer state blob's checksum (FNV-1a of everything before
// its last 8 bytes) after a test edited a field, so that the load judges the
// field itself.
inline void reseal_optimizer_state(std::vector<unsigned char>& state) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i + 8 < state.size(); ++i) hash = (hash ^ state[i]) * 0x100000001b3ull;
  std::memcpy(state.data() + state.size() - 8, &hash, sizeof hash);
}

inline ampx_tensor grad_of(ampx_tensor param) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(param, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  return g;
}

// The optimizer's state tensor of `kind` for `param` (a new reference).
inline ampx_tensor state_of(ampx_optimizer opt, ampx_tensor param, ampx_optimizer_state kind) {
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_optimizer_state_tensor(opt, param, kind, &t) == AMPX_OK, last_error());
  return t;
}

inline int64_t steps_of(ampx_optimizer opt, ampx_tensor param) {
  int64_t steps = -1;
  REQUIRE_MESSAGE(ampx_optimizer_param_steps(opt, param, &steps) == AMPX_OK, last_error());
  return steps;
}

inline double scale_of(ampx_scaler s) {
  double scale = 0.0;
  REQUIRE_MESSAGE(ampx_scaler_get_scale(s, &scale) == AMPX_OK, last_error());
  return scale;
}

inline ampx_scaler_state scaler_state_of(ampx_scaler s) {
  ampx_scaler_state state{};
  state.struct_size = sizeof state;
  REQUIRE_MESSAGE(ampx_scaler_get_state(s, &state) == AMPX_OK, last_error());
  return state;
}

// Everything an optimizer step may change for a list of parameters, as raw
// bytes: parameters, masters, every state tensor the optimizer keeps, step
// counts. Two snapshots compare equal only when all of it is bit-identical.
struct Snapshot {
  std::vector<std::vector<unsigned char>> blobs;
  std::vector<int64_t> steps;
  bool operator==(const Snapshot& o) const { return blobs == o.blobs && steps == o.steps; }
  bool operator!=(const Snapshot& o) const { return !(*this == o); }
};

inline Snapshot snapshot(ampx_optimizer opt, const std::vector<ampx_tensor>& params) {
  Snapshot s;
  for (ampx_tensor p : params) {
    s.blobs.push_back(bytes_of(p));
    for (ampx_optimizer_state kind : {AMPX_STATE_MASTER, AMPX_STATE_MOMENTUM,
                                      AMPX_STATE_EXP_AVG_SQ, AMPX_STATE_MAX_EXP_AVG_SQ}) {
      Tensor t;
      const ampx_status st = ampx_optimizer_state_tensor(opt, p, kind, t.out());
      REQUIRE_MESSAGE((st == AMPX_OK || st == AMPX_ERR_NOT_SUPPORTED), last_error());
      if (st == AMPX_OK) s.blobs.push_back(bytes_of(t));
    }
    s.steps.push_back(steps_of(opt, p));
  }
  return s;
}

// An F16/BF16 parameter must hold its fp32 master rounded to nearest even,
// bit for bit: checked against the hand-written rounding here and against
// the library's own conversion (ampx_tensor_cast).
inline void check_param_is_rounded_master(ampx_optimizer opt, ampx_tensor param) {
  const ampx_dtype dtype = dtype_of(param);
  if (dtype == AMPX_F32) return;
  Tensor master(state_of(opt, param, AMPX_STATE_MASTER));
  REQUIRE(dtype_of(master) == AMPX_F32);
  const std::vector<double> m = values_of(master);
  const std::vector<unsigned char> have = bytes_of(param);
  CHECK(have == encode(dtype, m));
  Tensor cast;
  REQUIRE_MESSAGE(ampx_tensor_cast(master, dtype, cast.out()) == AMPX_OK, last_error());
  CHECK(have == bytes_of(cast));
}

// ---- fp32 tolerance ----------------------------------------------------------

// fp32 carries 24 significant bits: one rounding is at most 2^-24 relative.
constexpr double kF32Eps = 5.9604644775390625e-08;

// True when `have` is within `ulps` fp32 roundings of `want` relative to
// `magnitude` (the size of the quantities the errors were made on).
inline bool close(double have, double want, double ulps, double magnitude) {
  return std::fabs(have - want) <= ulps * kF32Eps * magnitude;
}

// ---- double-precision references (DESIGN.md section 4, literally) -------------

struct SgdRef {
  double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;
};

// One parameter's reference state.
struct RefParam {
  std::vector<double> p, buf, m, v, vmax;
  int64_t steps = 0;  // steps taken ("first" = the first one taken)

  explicit RefParam(std::vector<double> initial = {}) : p(std::move(initial)) {
    buf.assign(p.size(), 0.0);
    m.assign(p.size(), 0.0);
    v.assign(p.size(), 0.0);
    vmax.assign(p.size(), 0.0);
  }
};

// lr and weight_decay are passed separately: they belong to the param group.
inline void sgd_ref_step(RefParam& r, const std::vector<double>& grad, const SgdRef& o, double lr,
                         double weight_decay) {
  const bool first = r.steps == 0;
  ++r.steps;
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    g += weight_decay * r.p[i];
    if (o.momentum != 0.0) {
      r.buf[i] = first ? g : o.momentum * r.buf[i] + (1.0 - o.dampening) * g;
      g = o.nesterov ? g + o.momentum * r.buf[i] : r.buf[i];
    }
    r.p[i] -= lr * g;
  }
}

inline void adam_ref_step(RefParam& r, const std::vector<double>& grad, const AdamRef& o,
                          double lr, double weight_decay) {
  const int64_t t = ++r.steps;
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    if (o.decoupled)
      r.p[i] *= 1.0 - lr * weight_decay;
    else
      g += weight_decay * r.p[i];
    r.m[i] = o.beta1 * r.m[i] + (1.0 - o.beta1) * g;
    r.v[i] = o.beta2 * r.v[i] + (1.0 - o.beta2) * g * g;
    double vhat = r.v[i];
    if (o.amsgrad) vhat = r.vmax[i] = std::max(r.vmax[i], r.v[i]);
    const double denom = std::sqrt(vhat) / std::sqrt(bc2) + o.eps;
    r.p[i] -= lr / bc1 * r.m[i] / denom;
  }
}

inline SgdRef sgd_ref_of(const ampx_sgd_options& o) {
  SgdRef r;
  r.lr = o.lr;
  r.momentum = o.momentum;
  r.dampening = o.dampening;
  r.weight_decay = o.weight_decay;
  r.nesterov = o.nesterov != 0;
  r.maximize = o.maximize != 0;
  return r;
}

inline AdamRef adam_ref_of(const ampx_adam_options& o) {
  AdamRef r;
  r.lr = o.lr;
  r.beta1 = o.beta1;
  r.beta2 = o.beta2;
  r.eps = o.eps;
  r.weight_decay = o.weight_decay;
  r.amsgrad = o.amsgrad != 0;
  r.maximize = o.maximize != 0;
  r.decoupled = o.decoupled_weight_decay != 0;
  return r;
}

// torch.amp.GradScaler's update rule with ampx's hysteresis and bounds, as
// ampx.h section 7 states them. The scale lives in an fp32 tensor, so each
// new value is rounded to float.
struct ScalerRef {
  double scale = 65536, growth = 2, backoff = 0.5;
  int interval = 2000, hysteresis = 1;
  double min_scale = 0, max_scale = 0;
  bool consecutive_hysteresis = false, clamp_to_max_scale = false;
  int tracker = 0, hysteresis_left = 1;
  int64_t updates = 0, skipped = 0, backoffs = 0, growths = 0;

  static ScalerRef from(const ampx_scaler_options& o) {
    ScalerRef r;
    r.scale = static_cast<float>(o.init_scale);
    r.growth = o.growth_factor;
    r.backoff = o.backoff_factor;
    r.interval = o.growth_interval;
    r.hysteresis = r.hysteresis_left = o.hysteresis;
    r.min_scale = o.min_scale;
    r.max_scale = o.max_scale;
    r.consecutive_hysteresis = o.consecutive_hysteresis != 0;
    r.clamp_to_max_scale = o.clamp_to_max_scale != 0;
    return r;
  }

  void update(bool found_inf) {
    ++updates;
    if (found_inf) {
      ++skipped;
      tracker = 0;
      if (hysteresis_left > 0) --hysteresis_left;
      if (hysteresis_left == 0) {
        double lowered = static_cast<float>(scale * backoff);
        if (min_scale > 0 && lowered < min_scale) lowered = static_cast<float>(min_scale);
        if (lowered < scale) {
          scale = lowered;
          ++backoffs;
        }
      }
      return;
    }
    if (consecutive_hysteresis) hysteresis_left = hysteresis;
    if (++tracker < interval) return;
    tracker = 0;
    hysteresis_left = hysteresis;  // a whole clean interval, grown or not
    double grown = static_cast<float>(scale * growth);
    if (!std::isfinite(grown)) return;
    if (max_scale > 0 && grown > max_scale) {
      if (!clamp_to_max_scale) return;
      grown = static_cast<float>(max_scale);
    }
    if (grown > scale) {
      scale = grown;
      ++growths;
    }
  }

  void force(bool found_inf, double new_scale) {
    ++updates;
    if (found_inf) ++skipped;
    scale = static_cast<float>(new_scale);
  }
};

inline void check_scaler_matches(ampx_scaler s, const ScalerRef& r) {
  const ampx_scaler_state st = scaler_state_of(s);
  CHECK(st.scale == r.scale);
  CHECK(st.growth_tracker == r.tracker);
  CHECK(st.hysteresis_left == r.hysteresis_left);
  CHECK(st.counters.updates == r.updates);
  CHECK(st.counters.skipped == r.skipped);
  CHECK(st.counters.backoffs == r.backoffs);
  CHECK(st.counters.growths == r.growths);
  ampx_scaler_counters c = AMPX_SCALER_COUNTERS_INIT;
  REQUIRE(ampx_scaler_get_counters(s, &c) == AMPX_OK);
  CHECK(c.updates == r.updates);
  CHECK(c.skipped == r.skipped);
  CHECK(c.backoffs == r.backoffs);
  CHECK(c.growths == r.growths);
  CHECK(scale_of(s) == r.scale);
}

// ---- deterministic data ----------------------------------------------------------

// A small fixed pseudo-random stream (splitmix64), so every run and every
// backend sees the same numbers.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  std::vector<double> vector(size_t n, double lo, double hi) {
    std::vector<double> v(n);
    for (double& x : v) x = uniform(lo, hi);
    return v;
  }
};

// ---- finite differences ---------------------------------------------------

// dL/dx[k] by central differences in double, element by element: each
// element moved by +-step * max(1, |x|) (relative, absolute below 1) with
// every other element held, L evaluated on all the inputs.
template <class Loss>
std::vector<double> central_gradient(const std::vector<std::vector<double>>& x, size_t k,
                                     const Loss& loss, double step) {
  std::vector<std::vector<double>> moved = x;
  std::vector<double> gradient(x[k].size());
  for (size_t i = 0; i < gradient.size(); ++i) {
    const double h = step * std::max(1.0, std::fabs(x[k][i]));
    moved[k][i] = x[k][i] + h;
    const double up = loss(static_cast<const std::vector<std::vector<double>>&>(moved));
    moved[k][i] = x[k][i] - h;
    const double down = loss(static_cast<const std::vector<std::vector<double>>&>(moved));
    moved[k][i] = x[k][i];
    gradient[i] = (up - down) / (2.0 * h);
  }
  return gradient;
}

}  // namespace ampx_fixture
