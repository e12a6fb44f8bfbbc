// test_autocast.cpp -- ampx.h section 10 (autocast policies, op classes,
// nesting, the weight-cast cache, overrides) through the public C API.
//
// Which dtype an op computed in is seen from outside in two ways: the
// output's dtype (ops other than sums and losses return their compute
// type), and probe values that only survive in some formats. 1 + 2^-9 is
// exact in f32 and f16 (11 significant bits) but rounds to 1 in bf16 (8
// bits); 1 + 2^-12 is exact only in f32. A dot product of
// [1 + 2^-9, -1, 1 + 2^-12, -1] with ones is therefore 2^-9 + 2^-12 when the
// inputs were kept in f32, 2^-9 when they were cast to f16, and 0 when they
// were cast to bf16 -- every one of them exact in every output format.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::encode;
using ampx_fixture::make;
using ampx_fixture::round_to;
using ampx_fixture::values_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

const double kProbe[] = {1.0 + std::ldexp(1.0, -9), -1.0, 1.0 + std::ldexp(1.0, -12), -1.0};

// The probe's dot product with ones once its elements are rounded to `dtype`.
double probe_dot(ampx_dtype dtype) {
  double s = 0.0;
  for (double p : kProbe) s += round_to(dtype, p);
  return s;
}

ampx_tensor make_labels(ampx_context ctx, const std::vector<int64_t>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_I64, 1, &n, values.data(), values.size() * 8, &t) ==
          AMPX_OK);
  return t;
}

Vec ramp(size_t n, double phase = 0.0) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(1.5 * std::sin(0.7 * static_cast<double>(i) + phase + 0.3));
  return v;
}

struct Policy {
  ampx_autocast handle = nullptr;
  Policy(ampx_context ctx, ampx_dtype dtype, int32_t enabled = 1, int32_t cache = 1) {
    ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
    o.dtype = dtype;
    o.enabled = enabled;
    o.cache = cache;
    REQUIRE_MESSAGE(ampx_autocast_create(ctx, &o, &handle) == AMPX_OK, last_error());
  }
  ~Policy() { ampx_autocast_release(handle); }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;
  operator ampx_autocast() const { return handle; }
};

void enter(ampx_autocast p) { REQUIRE_MESSAGE(ampx_autocast_enter(p) == AMPX_OK, last_error()); }
void leave(ampx_autocast p) { REQUIRE_MESSAGE(ampx_autocast_exit(p) == AMPX_OK, last_error()); }

struct CacheStats {
  int64_t hits = -1, misses = -1;
  bool operator==(const CacheStats& o) const { return hits == o.hits && misses == o.misses; }
};

CacheStats stats_of(ampx_autocast p) {
  CacheStats s;
  REQUIRE(ampx_autocast_cache_stats(p, &s.hits, &s.misses) == AMPX_OK);
  return s;
}

uint64_t current_bytes(ampx_context ctx) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
  return stats.current_bytes;
}

// The dtype of matmul(probe, ones) and whether its value shows inputs cast
// to that dtype; the output is owned by the open scope.
ampx_dtype probe_matmul(ampx_context ctx, ampx_dtype input_dtype = AMPX_F32) {
  Tensor a(make(ctx, input_dtype, {1, 4}, Vec(kProbe, kProbe + 4)));
  Tensor b(make(ctx, input_dtype, {4, 1}, {1, 1, 1, 1}));
  ampx_tensor out = nullptr;
  REQUIRE_MESSAGE(ampx_matmul(a, b, &out) == AMPX_OK, last_error());
  const ampx_dtype dtype = dtype_of(out);
  CHECK(values_of(out)[0] == probe_dot(dtype == AMPX_F32 ? input_dtype : dtype));
  return dtype;
}

}  // namespace

TEST_CASE("autocast: output and compute dtypes of every op under f16, bf16 and disabled policies") {
  OPS_REQUIRE_CPU();
  struct Config {
    ampx_dtype dtype;
    int32_t enabled;
  };
  for (const Config cfg : {Config{AMPX_F16, 1}, Config{AMPX_BF16, 1}, Config{AMPX_F16, 0}}) {
    Ctx ctx;
    Policy policy(ctx, cfg.dtype, cfg.enabled);
    const ampx_dtype lower = cfg.enabled ? cfg.dtype : AMPX_F32;  // what f32 inputs become
    INFO("policy ", std::string(ampx_dtype_name(cfg.dtype)),
         std::string(cfg.enabled ? "" : " (disabled)"));
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    enter(policy);
    ampx_tensor out = nullptr;

    // Lower precision: matmul and linear cast every floating input.
    CHECK(probe_matmul(ctx) == lower);
    CHECK(probe_matmul(ctx, AMPX_F16) == (cfg.enabled ? cfg.dtype : AMPX_F16));
    {
      Tensor x(make(ctx, AMPX_F32, {1, 4}, Vec(kProbe, kProbe + 4)));
      Tensor w(make(ctx, AMPX_F32, {1, 4}, {1, 1, 1, 1}, true));
      Tensor b(make(ctx, AMPX_F32, {1}, {0.5}, true));
      for (const ampx_activation act :
           {AMPX_ACTIVATION_NONE, AMPX_ACTIVATION_RELU, AMPX_ACTIVATION_GELU}) {
        REQUIRE_MESSAGE(ampx_linear(x, w, b, act, &out) == AMPX_OK, last_error());
        CHECK(dtype_of(out) == lower);
        if (act != AMPX_ACTIVATION_GELU) CHECK(values_of(out)[0] == 0.5 + probe_dot(lower));
      }
    }

    // fp32 class: softmax and log_softmax lift f16 to f32; sums and losses
    // always return f32 and never lower an f32 input. mean keeps its
    // input's dtype (as torch.mean, in neither autocast list): f16 stays
    // f16 and f32 stays f32.
    {
      Tensor h(make(ctx, AMPX_F16, {2, 3}, {0.5, -1, 2, 0.25, 1.5, -0.75}));
      Tensor f(make(ctx, AMPX_F32, {2, 3}, {0.5, -1, 2, 0.25, 1.5, -0.75}));
      for (auto fn : {ampx_softmax, ampx_log_softmax}) {
        REQUIRE(fn(h, &out) == AMPX_OK);
        CHECK(dtype_of(out) == (cfg.enabled ? AMPX_F32 : AMPX_F16));
        REQUIRE(fn(f, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F32);
      }
      // exp, log and rsqrt too (torch's fp32 list); exp(2) computed in f32,
      // not rounded to f16 (7.38905609 is 7.390625 in f16).
      Tensor positive(make(ctx, AMPX_F16, {2}, {2.0, 0.25}));
      for (auto fn : {ampx_exp, ampx_log, ampx_rsqrt}) {
        REQUIRE(fn(positive, &out) == AMPX_OK);
        CHECK(dtype_of(out) == (cfg.enabled ? AMPX_F32 : AMPX_F16));
      }
      REQUIRE(ampx_exp(positive, &out) == AMPX_OK);
      if (cfg.enabled)
        CHECK(std::fabs(values_of(out)[0] - std::exp(2.0)) < 4e-6);
      else
        CHECK(values_of(out)[0] == round_to(AMPX_F16, std::exp(2.0)));
      Tensor tiny(make(ctx, AMPX_F32, {2}, {1.0 + std::ldexp(1.0, -12), -1.0}));
      for (auto fn : {ampx_sum, ampx_mean}) {
        REQUIRE(fn(h, &out) == AMPX_OK);
        CHECK(dtype_of(out) == (fn == ampx_mean ? AMPX_F16 : AMPX_F32));
        REQUIRE(fn(tiny, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F32);
        CHECK(values_of(out)[0] == std::ldexp(1.0, fn == ampx_sum ? -12 : -13));
      }
      Tensor labels(make_labels(ctx, {2, 0}));
      // 0.1 .. 0.6 are not f16 values: lowering them would move the loss by
      // ~1e-4, far beyond the 1e-6 of an f32 computation.
      const Vec lv = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
      Tensor logits(make(ctx, AMPX_F32, {2, 3}, lv));
      REQUIRE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_SUM, -100, &out) == AMPX_OK);
      CHECK(dtype_of(out) == AMPX_F32);
      const double want = -(static_cast<float>(0.3) - std::log(std::exp(static_cast<float>(0.1)) +
                                                               std::exp(static_cast<float>(0.2)) +
                                                               std::exp(static_cast<float>(0.3)))) -
                          (static_cast<float>(0.4) - std::log(std::exp(static_cast<float>(0.4)) +
                                                              std::exp(static_cast<float>(0.5)) +
                                                              std::exp(static_cast<float>(0.6))));
      CHECK(std::fabs(values_of(out)[0] - want) < 1e-6);
      REQUIRE(ampx_cross_entropy(h, labels, AMPX_REDUCTION_MEAN, -100, &out) == AMPX_OK);
      CHECK(dtype_of(out) == AMPX_F32);
      Tensor in(make(ctx, AMPX_F32, {1}, {1.0 + std::ldexp(1.0, -12)}));
      Tensor target(make(ctx, AMPX_F32, {1}, {1.0}));
      REQUIRE(ampx_mse_loss(in, target, AMPX_REDUCTION_MEAN, &out) == AMPX_OK);
      CHECK(dtype_of(out) == AMPX_F32);
      CHECK(values_of(out)[0] == std::ldexp(1.0, -24));
      // Mixed f16/f32 is cast to f32 under autocast; outside it must match.
      Tensor in16(make(ctx, AMPX_F16, {1}, {1.5}));
      const ampx_status mixed = ampx_mse_loss(in16, target, AMPX_REDUCTION_SUM, &out);
      if (cfg.enabled) {
        REQUIRE_MESSAGE(mixed == AMPX_OK, last_error());
        CHECK(values_of(out)[0] == 0.25);
      } else {
        CHECK(mixed == AMPX_ERR_DTYPE);
      }
    }

    // Promote: the widest input type, inside autocast or not.
    {
      Tensor h(make(ctx, AMPX_F16, {2}, {1.5, 2.0}));
      Tensor bf(make(ctx, AMPX_BF16, {2}, {0.5, 4.0}));
      Tensor f(make(ctx, AMPX_F32, {2}, {std::ldexp(1.0, -20), 3.0}));
      for (auto fn : {ampx_add, ampx_sub, ampx_mul, ampx_div}) {
        REQUIRE(fn(h, f, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F32);
        if (fn == ampx_add)
          CHECK(values_of(out)[0] == 1.5 + std::ldexp(1.0, -20));  // not rounded to f16
        REQUIRE(fn(h, bf, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F32);
        REQUIRE(fn(bf, bf, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_BF16);
        REQUIRE(fn(h, h, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F16);
        REQUIRE(fn(f, f, &out) == AMPX_OK);
        CHECK(dtype_of(out) == AMPX_F32);
      }
    }

    // Keep: affine and the activations compute in their input's type.
    {
      for (const ampx_dtype in : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
        Tensor x(make(ctx, in, {2}, {1.0 + std::ldexp(1.0, -12), 0.75}));
        REQUIRE(ampx_affine(x, 1.0, 0.0, &out) == AMPX_OK);
        CHECK(dtype_of(out) == in);
        CHECK(values_of(out)[0] == round_to(in, 1.0 + std::ldexp(1.0, -12)));
        for (auto fn : {ampx_relu, ampx_gelu, ampx_gelu_tanh, ampx_silu, ampx_sigmoid, ampx_tanh,
                        ampx_sqrt}) {
          REQUIRE(fn(x, &out) == AMPX_OK);
          CHECK(dtype_of(out) == in);
        }
        REQUIRE(ampx_relu(x, &out) == AMPX_OK);
        CHECK(values_of(out)[0] == round_to(in, 1.0 + std::ldexp(1.0, -12)));
      }
    }
    leave(policy);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}

TEST_CASE("autocast: the default op classes are torch's, readable per op name") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy p(ctx, AMPX_F16);
  struct Entry {
    const char* name;
    ampx_op_class op_class;
  };
  const Entry table[] = {{"matmul", AMPX_OP_LOWER_PRECISION},
                         {"linear", AMPX_OP_LOWER_PRECISION},
                         {"softmax", AMPX_OP_FP32},
                         {"log_softmax", AMPX_OP_FP32},
                         {"cross_entropy", AMPX_OP_FP32},
                         {"mse_loss", AMPX_OP_FP32},
                         {"sum", AMPX_OP_FP32},
                         {"mean", AMPX_OP_KEEP},
                         {"add", AMPX_OP_PROMOTE},
                         {"sub", AMPX_OP_PROMOTE},
                         {"mul", AMPX_OP_PROMOTE},
                         {"div", AMPX_OP_PROMOTE},
                         {"affine", AMPX_OP_KEEP},
                         {"relu", AMPX_OP_KEEP},
                         {"gelu", AMPX_OP_KEEP},
                         {"gelu_tanh", AMPX_OP_KEEP},
                         {"silu", AMPX_OP_KEEP},
                         {"sigmoid", AMPX_OP_KEEP},
                         {"tanh", AMPX_OP_KEEP},
                         {"exp", AMPX_OP_FP32},
                         {"log", AMPX_OP_FP32},
                         {"rsqrt", AMPX_OP_FP32},
                         {"sqrt", AMPX_OP_KEEP},
                         {"scaled_dot_product_attention", AMPX_OP_LOWER_PRECISION},
                         {"rms_norm", AMPX_OP_FP32},
                         {"pow", AMPX_OP_FP32},
                         {"amax", AMPX_OP_KEEP},
                         {"permute", AMPX_OP_KEEP},
                         {"masked_fill", AMPX_OP_KEEP},
                         {"rotary_embedding", AMPX_OP_KEEP},
                         {"split", AMPX_OP_KEEP}};
  for (const Entry& e : table) {
    ampx_op_class c = AMPX_OP_CLASS_MAX_ENUM;
    REQUIRE_MESSAGE(ampx_autocast_op_class(p, e.name, &c) == AMPX_OK, last_error());
    CHECK_MESSAGE(c == e.op_class, e.name);
  }
}

TEST_CASE("autocast: policies nest; the innermost wins; exits must be in reverse order") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy outer(ctx, AMPX_F16), inner(ctx, AMPX_BF16);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  CHECK(probe_matmul(ctx) == AMPX_F32);
  enter(outer);
  CHECK(probe_matmul(ctx) == AMPX_F16);
  enter(inner);
  CHECK(probe_matmul(ctx) == AMPX_BF16);
  CHECK_FAILS_WITH(ampx_autocast_exit(outer), AMPX_ERR_ORDER, "reverse order");
  CHECK(probe_matmul(ctx) == AMPX_BF16);  // the refused exit changed nothing
  leave(inner);
  CHECK(probe_matmul(ctx) == AMPX_F16);
  // The same policy may be entered again inside itself.
  enter(outer);
  leave(outer);
  CHECK(probe_matmul(ctx) == AMPX_F16);
  // Releasing an entered policy is refused (release returns nothing: the
  // refusal is the thread's last status) and the policy keeps working.
  ampx_autocast_release(outer);
  CHECK(ampx_last_status() == AMPX_ERR_ORDER);
  CHECK(contains(last_error(), "still entered"));
  CHECK(probe_matmul(ctx) == AMPX_F16);
  leave(outer);
  CHECK(probe_matmul(ctx) == AMPX_F32);
  CHECK_FAILS_WITH(ampx_autocast_exit(outer), AMPX_ERR_ORDER, "no autocast region is open");
  CHECK(ampx_autocast_enter(nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_autocast_exit(nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("autocast: creating a policy checks its options") {
  Ctx ctx;
  ampx_autocast p = nullptr;
  ampx_autocast_options o = ampx_autocast_options_default();
  CHECK(o.dtype == AMPX_F16);
  CHECK(o.enabled == 1);
  CHECK(o.cache == 1);
  o.dtype = AMPX_F32;
  CHECK_FAILS_WITH(ampx_autocast_create(ctx, &o, &p), AMPX_ERR_DTYPE, "f32");
  o.dtype = AMPX_I32;
  CHECK(ampx_autocast_create(ctx, &o, &p) == AMPX_ERR_DTYPE);
  o = ampx_autocast_options_default();
  CHECK(ampx_autocast_create(ctx, &o, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_autocast_create(nullptr, &o, &p) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(p == nullptr);
  REQUIRE(ampx_autocast_create(ctx, nullptr, &p) == AMPX_OK);  // defaults
  ampx_autocast_release(p);
  ampx_autocast_release(nullptr);
}

TEST_CASE("autocast: a disabled policy inside an enabled one turns autocast off, as torch") {
  // torch.autocast(enabled=False) nested in an autocast region is how torch
  // code runs a sensitive block in full precision: the innermost policy
  // wins, and a disabled one means ops keep their input types.
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy outer(ctx, AMPX_F16), off(ctx, AMPX_F16, 0);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  enter(outer);
  enter(off);
  CHECK(probe_matmul(ctx) == AMPX_F32);
  leave(off);
  CHECK(probe_matmul(ctx) == AMPX_F16);
  leave(outer);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("autocast: an f32 weight is cast once per region and re-cast after backward or exit") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy p(ctx, AMPX_F16);
  const Vec wv = ramp(12), x1v = ramp(8, 1.0), x2v = ramp(8, 2.0);
  Tensor w(make(ctx, AMPX_F32, {3, 4}, wv, true));
  Tensor x1(make(ctx, AMPX_F32, {2, 4}, x1v));
  Tensor x2(make(ctx, AMPX_F32, {2, 4}, x2v));
  CHECK(stats_of(p) == CacheStats{0, 0});

  const uint64_t before = current_bytes(ctx);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  enter(p);
  ampx_tensor h1 = nullptr, h2 = nullptr, s1 = nullptr, s2 = nullptr, loss = nullptr;
  REQUIRE(ampx_linear(x1, w, nullptr, AMPX_ACTIVATION_NONE, &h1) == AMPX_OK);
  REQUIRE(ampx_linear(x2, w, nullptr, AMPX_ACTIVATION_NONE, &h2) == AMPX_OK);
  // The data (no requires_grad) is cast every time and never cached.
  CHECK(stats_of(p) == CacheStats{1, 1});
  REQUIRE(ampx_sum(h1, &s1) == AMPX_OK);
  REQUIRE(ampx_sum(h2, &s2) == AMPX_OK);
  REQUIRE(ampx_add(s1, s2, &loss) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  // Both uses reach the one cached cast, whose gradient comes back in f32:
  // d/dW[o][i] = sum over the rows of x1 and x2 of x[r][i] (rounded to f16).
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(w, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  CHECK(dtype_of(g) == AMPX_F32);
  const Vec gv = values_of(g);
  for (size_t o = 0; o < 3; ++o)
    for (size_t i = 0; i < 4; ++i) {
      double want = 0.0;
      for (size_t r = 0; r < 2; ++r)
        want += round_to(AMPX_F16, x1v[r * 4 + i]) + round_to(AMPX_F16, x2v[r * 4 + i]);
      CHECK(std::fabs(gv[o * 4 + i] - want) <= 4e-3 * (1.0 + std::fabs(want)));  // f16 gradients
    }

  // A step changes the weight; the next forward of the same region must
  // see it: the cast made before the backward is not reused.
  Vec stepped = wv;
  for (double& v : stepped) v = static_cast<float>(v + 0.25);
  ampx_fixture::write(w, stepped);
  ampx_tensor h3 = nullptr;
  REQUIRE(ampx_linear(x1, w, nullptr, AMPX_ACTIVATION_NONE, &h3) == AMPX_OK);
  CHECK(stats_of(p) == CacheStats{1, 2});
  const Vec h3v = values_of(h3);
  for (size_t r = 0; r < 2; ++r)
    for (size_t o = 0; o < 3; ++o) {
      double want = 0.0;
      for (size_t i = 0; i < 4; ++i)
        want += round_to(AMPX_F16, x1v[r * 4 + i]) * round_to(AMPX_F16, stepped[o * 4 + i]);
      CHECK(std::fabs(h3v[r * 3 + o] - want) <= 2e-3 * (1.0 + std::fabs(want)));
    }
  // A backward clears the tape, so that what remains after the pop is w's
  // f32 gradient and the cache's f16 cast of w; exiting the outermost
  // region drops the cast.
  REQUIRE(ampx_sum(h3, &s1) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(s1, nullptr) == AMPX_OK, last_error());
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(current_bytes(ctx) == before + 12 * 4 + 12 * 2);
  leave(p);
  CHECK(current_bytes(ctx) == before + 12 * 4);

  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  enter(p);
  REQUIRE(ampx_linear(x1, w, nullptr, AMPX_ACTIVATION_NONE, &h1) == AMPX_OK);
  CHECK(stats_of(p) == CacheStats{1, 3});
  // Nested regions share the outermost one's cache.
  Policy inner(ctx, AMPX_F16);
  enter(inner);
  REQUIRE(ampx_linear(x2, w, nullptr, AMPX_ACTIVATION_NONE, &h2) == AMPX_OK);
  CHECK(stats_of(inner) == CacheStats{1, 0});
  leave(inner);
  leave(p);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("autocast: what is not cached -- non-f32 leaves, constants, a policy without cache") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 4}, ramp(8)));
  Tensor w16(make(ctx, AMPX_F16, {3, 4}, ramp(12), true));
  Tensor wconst(make(ctx, AMPX_F32, {3, 4}, ramp(12)));
  Tensor w(make(ctx, AMPX_F32, {3, 4}, ramp(12), true));
  Policy bf(ctx, AMPX_BF16), nocache(ctx, AMPX_F16, 1, 0);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor out = nullptr;
  enter(bf);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(ampx_linear(x, w16, nullptr, AMPX_ACTIVATION_NONE, &out) == AMPX_OK);
    CHECK(dtype_of(out) == AMPX_BF16);
    REQUIRE(ampx_linear(x, wconst, nullptr, AMPX_ACTIVATION_NONE, &out) == AMPX_OK);
  }
  CHECK(stats_of(bf) == CacheStats{0, 0});
  leave(bf);
  enter(nocache);
  for (int i = 0; i < 2; ++i)
    REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, &out) == AMPX_OK);
  CHECK(stats_of(nocache) == CacheStats{0, 0});
  leave(nocache);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(ampx_autocast_cache_stats(nullptr, nullptr, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("autocast: op classes can be overridden per policy at run time") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy p(ctx, AMPX_F16), q(ctx, AMPX_F16);
  ampx_op_class c = AMPX_OP_CLASS_MAX_ENUM;
  REQUIRE(ampx_autocast_set_op_class(p, "softmax", AMPX_OP_LOWER_PRECISION) == AMPX_OK);
  REQUIRE(ampx_autocast_op_class(p, "softmax", &c) == AMPX_OK);
  CHECK(c == AMPX_OP_LOWER_PRECISION);
  REQUIRE(ampx_autocast_op_class(q, "softmax", &c) == AMPX_OK);
  CHECK(c == AMPX_OP_FP32);  // only p is overridden
  REQUIRE(ampx_autocast_set_op_class(p, "linear", AMPX_OP_FP32) == AMPX_OK);
  REQUIRE(ampx_autocast_set_op_class(p, "relu", AMPX_OP_LOWER_PRECISION) == AMPX_OK);

  const Vec xv = {0.1, 0.2, 0.3, 1.7, -0.4, 0.9};
  Tensor x(make(ctx, AMPX_F32, {2, 3}, xv));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor out = nullptr;
  enter(p);
  REQUIRE(ampx_softmax(x, &out) == AMPX_OK);
  CHECK(dtype_of(out) == AMPX_F16);
  // Computed from the f16-rounded inputs and stored in f16.
  const Vec sm = values_of(out);
  for (size_t r = 0; r < 2; ++r) {
    double z = 0.0;
    for (size_t j = 0; j < 3; ++j) z += std::exp(round_to(AMPX_F16, xv[r * 3 + j]));
    for (size_t j = 0; j < 3; ++j)
      CHECK(std::fabs(sm[r * 3 + j] - std::exp(round_to(AMPX_F16, xv[r * 3 + j])) / z) <= 1e-3);
  }
  {
    Tensor a(make(ctx, AMPX_F32, {1, 4}, Vec(kProbe, kProbe + 4)));
    Tensor w(make(ctx, AMPX_F32, {1, 4}, {1, 1, 1, 1}, true));
    REQUIRE(ampx_linear(a, w, nullptr, AMPX_ACTIVATION_NONE, &out) == AMPX_OK);
    CHECK(dtype_of(out) == AMPX_F32);
    CHECK(values_of(out)[0] == probe_dot(AMPX_F32));
  }
  REQUIRE(ampx_relu(x, &out) == AMPX_OK);
  CHECK(dtype_of(out) == AMPX_F16);
  CHECK(probe_matmul(ctx) == AMPX_F16);  // matmul keeps its default
  leave(p);
  enter(q);
  REQUIRE(ampx_softmax(x, &out) == AMPX_OK);
  CHECK(dtype_of(out) == AMPX_F32);
  leave(q);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);

  CHECK_FAILS_WITH(ampx_autocast_set_op_class(p, "softmaxx", AMPX_OP_FP32),
                   AMPX_ERR_INVALID_ARGUMENT, "softmaxx");
  CHECK_FAILS_WITH(ampx_autocast_op_class(p, "conv3d", &c), AMPX_ERR_INVALID_ARGUMENT, "conv3d");
  CHECK_FAILS_WITH(ampx_autocast_set_op_class(p, nullptr, AMPX_OP_FP32), AMPX_ERR_INVALID_ARGUMENT,
                   "op_name");
  CHECK_FAILS_WITH(ampx_autocast_set_op_class(p, "softmax", static_cast<ampx_op_class>(0)),
                   AMPX_ERR_INVALID_ARGUMENT, "op_class");
  CHECK_FAILS_WITH(ampx_autocast_set_op_class(p, "softmax", static_cast<ampx_op_class>(5)),
                   AMPX_ERR_INVALID_ARGUMENT, "op_class");
  REQUIRE(ampx_autocast_op_class(p, "softmax", &c) == AMPX_OK);
  CHECK(c == AMPX_OP_LOWER_PRECISION);  // the refused calls changed nothing
  CHECK(ampx_autocast_op_class(p, "softmax", nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("autocast: f32 parameters get f32 gradients that match the fp32 run") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {8, 5}, ramp(40)));
  Tensor labels(make_labels(ctx, {0, 1, 2, 0, 1, 2, 2, 1}));
  std::vector<Tensor> params(4);
  params[0].handle = make(ctx, AMPX_F32, {6, 5}, ramp(30, 1.0), true);
  params[1].handle = make(ctx, AMPX_F32, {6}, ramp(6, 2.0), true);
  params[2].handle = make(ctx, AMPX_F32, {3, 6}, ramp(18, 3.0), true);
  params[3].handle = make(ctx, AMPX_F32, {3}, ramp(3, 4.0), true);

  // Returns the loss and leaves the gradients in the parameters.
  auto run = [&](ampx_autocast policy) {
    for (Tensor& p : params) REQUIRE(ampx_tensor_set_grad(p, nullptr) == AMPX_OK);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    if (policy) enter(policy);
    ampx_tensor h = nullptr, logits = nullptr, loss = nullptr;
    REQUIRE(ampx_linear(x, params[0], params[1], AMPX_ACTIVATION_GELU, &h) == AMPX_OK);
    REQUIRE(ampx_linear(h, params[2], params[3], AMPX_ACTIVATION_NONE, &logits) == AMPX_OK);
    CHECK(dtype_of(logits) == (policy ? dtype_of(h) : AMPX_F32));
    REQUIRE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -100, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    if (policy) leave(policy);
    const double value = values_of(loss)[0];
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    return value;
  };
  const double loss32 = run(nullptr);
  std::vector<Vec> grads32;
  for (Tensor& p : params) grads32.push_back(values_of(ampx_fixture::grad_of(p)));

  // Two layers, each input rounded once to the format (2^-11 for f16,
  // 2^-8 for bf16) and each product accumulated in fp32 but stored back
  // rounded: a handful of roundings of that size relative to the largest
  // gradient; the bounds are ~10 of them.
  struct Case {
    ampx_dtype dtype;
    double tol;
  };
  for (const Case c : {Case{AMPX_F16, 5e-3}, Case{AMPX_BF16, 4e-2}}) {
    INFO(std::string(ampx_dtype_name(c.dtype)));
    Policy policy(ctx, c.dtype);
    const double loss = run(policy);
    CHECK(std::fabs(loss - loss32) <= c.tol * std::fabs(loss32));
    for (size_t k = 0; k < params.size(); ++k) {
      ampx_tensor g = ampx_fixture::grad_of(params[k]);
      CHECK(dtype_of(g) == AMPX_F32);
      const Vec gv = values_of(g);
      double scale = 0.0, worst = 0.0;
      for (size_t i = 0; i < gv.size(); ++i) {
        scale = std::max(scale, std::fabs(grads32[k][i]));
        worst = std::max(worst, std::fabs(gv[i] - grads32[k][i]));
      }
      CHECK_MESSAGE(worst <= c.tol * scale, "param ", k, ": worst difference ", worst, " of ",
                    scale);
    }
  }
}

TEST_CASE("autocast: the cache re-casts after a backward that frees records without clearing") {
  // ampx_grad and ampx_backward_ex(create_graph, retain_graph 0) free the
  // records they ran but keep the tape: the cached cast's record is then
  // freed, and handing the cast back made the next backward refuse the
  // forward that was run again (ORDER, "record of 'cast' was freed"). And
  // a write to the weight after a backward that retained the graph (a
  // step) must not leave the old cast in use. Values chosen exact in bf16:
  // d sum(x W) / dW[i][j] = sum_r x[r][i].
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Policy p(ctx, AMPX_BF16);
  const Vec xv = {0.5, 1.0, -2.0, 0.25, 1.5, -0.5, 4.0, 2.0};
  const Vec wv = {1, 2, -1, 0.5, 0.25, -2, 3, 1, 0.5, -0.75, 1.25, 2};
  Tensor x(make(ctx, AMPX_F32, {2, 4}, xv));
  Tensor w(make(ctx, AMPX_F32, {4, 3}, wv, true));
  Vec dw(12);
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 3; ++j) dw[i * 3 + j] = xv[i] + xv[4 + i];
  const auto forward = [&]() {
    ampx_tensor y = nullptr, s = nullptr;
    REQUIRE_MESSAGE(ampx_matmul(x, w, &y) == AMPX_OK, last_error());
    REQUIRE(ampx_sum(y, &s) == AMPX_OK);
    return s;
  };
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  enter(p);
  SUBCASE("ampx_grad, twice in one region") {
    for (int round = 0; round < 2; ++round) {
      INFO("round " << round);
      const ampx_tensor s = forward();
      ampx_tensor g = nullptr;
      REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &w.handle, 1, nullptr, &g) == AMPX_OK,
                      last_error());
      CHECK(values_of(g) == dw);
    }
    CHECK(stats_of(p) == CacheStats{0, 2});
  }
  SUBCASE("ampx_backward_ex with create_graph, twice in one region") {
    ampx_backward_options o = AMPX_BACKWARD_OPTIONS_INIT;
    o.create_graph = 1;
    o.retain_graph = 0;
    for (int round = 1; round <= 2; ++round) {
      INFO("round " << round);
      REQUIRE_MESSAGE(ampx_backward_ex(forward(), nullptr, &o) == AMPX_OK, last_error());
      ampx_tensor g = nullptr;
      REQUIRE(ampx_tensor_grad(w, &g) == AMPX_OK);
      Vec want = dw;
      for (double& v : want) v *= round;
      CHECK(values_of(g) == want);
    }
  }
  SUBCASE("a weight written after a backward that retained the graph is cast again") {
    ampx_backward_options keep = AMPX_BACKWARD_OPTIONS_INIT;
    keep.retain_graph = 1;
    const ampx_tensor s = forward();
    REQUIRE_MESSAGE(ampx_backward_ex(s, nullptr, &keep) == AMPX_OK, last_error());
    Vec stepped = wv;
    for (double& v : stepped) v += 0.5;
    ampx_fixture::write(w, stepped);
    double want = 0.0;  // the sum of x W's elements, each rounded to bf16
    for (size_t r = 0; r < 2; ++r)
      for (size_t j = 0; j < 3; ++j) {
        double y = 0.0;
        for (size_t i = 0; i < 4; ++i) y += xv[r * 4 + i] * stepped[i * 3 + j];
        want += round_to(AMPX_BF16, y);
      }
    CHECK(std::fabs(values_of(forward())[0] - want) <= 1e-6 * std::fabs(want));
    CHECK(stats_of(p) == CacheStats{0, 2});
  }
  leave(p);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}
