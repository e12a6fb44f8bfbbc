// test_autograd.cpp -- ampx.h section 9 (grad mode, requires_grad,
// backward, scopes) and the argument errors of the section 11 ops, through
// the public C API only.
//
// Memory is observed with ampx_memory_stats_get: current_bytes counts the
// bytes live tensors own, so a scope that frees what it owns brings it back
// exactly to its value before the push.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::encode;
using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

template <class T>
ampx_tensor make_int(ampx_context ctx, ampx_dtype dtype, const std::vector<T>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, 1, &n, values.data(), values.size() * sizeof(T),
                                        &t) == AMPX_OK,
                  last_error());
  return t;
}

// n values spread over [-1.5, 1.5], all distinct and fp32-exact enough.
Vec ramp(size_t n, double phase = 0.0) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(1.5 * std::sin(0.7 * static_cast<double>(i) + phase + 0.3));
  return v;
}

ampx_tensor grad_handle(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  return g;
}

uint64_t current_bytes(ampx_context ctx) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
  return stats.current_bytes;
}

int32_t requires_grad(ampx_tensor t) {
  int32_t flag = -1;
  REQUIRE(ampx_tensor_requires_grad(t, &flag) == AMPX_OK);
  return flag;
}

// A two-layer classifier over fixed data: the parameters require grad, the
// data and labels do not.
struct Model {
  Tensor x, w1, b1, w2, b2, labels;
  Model(ampx_context ctx, ampx_dtype dtype = AMPX_F32) {
    x.handle = make(ctx, dtype, {6, 4}, ramp(24));
    w1.handle = make(ctx, dtype, {5, 4}, ramp(20, 1.0), true);
    b1.handle = make(ctx, dtype, {5}, ramp(5, 2.0), true);
    w2.handle = make(ctx, dtype, {3, 5}, ramp(15, 3.0), true);
    b2.handle = make(ctx, dtype, {3}, ramp(3, 4.0), true);
    labels.handle = make_int<int64_t>(ctx, AMPX_I64, {0, 2, 1, 1, 0, 2});
  }
  std::vector<ampx_tensor> params() const { return {w1, b1, w2, b2}; }
  // The loss; every intermediate goes to the open scope (or leaks to the
  // caller when none is open, which the tests below do not do).
  ampx_tensor loss() const {
    ampx_tensor h = nullptr, logits = nullptr, out = nullptr;
    REQUIRE_MESSAGE(ampx_linear(x, w1, b1, AMPX_ACTIVATION_GELU, &h) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_linear(h, w2, b2, AMPX_ACTIVATION_NONE, &logits) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -100, &out) == AMPX_OK,
                    last_error());
    return out;
  }
};

}  // namespace

// ---- grad mode and backward's arguments ----------------------------------------------

TEST_CASE("autograd: with grad mode off nothing is recorded and backward says why") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, ramp(6), true));
  int32_t previous = -1;
  REQUIRE(ampx_set_grad_enabled(ctx, 0, &previous) == AMPX_OK);
  CHECK(previous == 1);  // on by default
  Tensor y, loss;
  REQUIRE(ampx_tanh(x, y.out()) == AMPX_OK);
  CHECK(requires_grad(y) == 0);
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_INVALID_ARGUMENT, "grad mode");
  CHECK(contains(last_error(), "ampx_backward"));
  CHECK(grad_handle(x) == nullptr);

  REQUIRE(ampx_set_grad_enabled(ctx, previous, &previous) == AMPX_OK);
  CHECK(previous == 0);
  REQUIRE(ampx_tanh(x, y.out()) == AMPX_OK);
  CHECK(requires_grad(y) == 1);
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  CHECK_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  CHECK(grad_handle(x) != nullptr);
  CHECK(ampx_set_grad_enabled(nullptr, 1, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("autograd: backward from a non-scalar, a leaf, an unrecorded tensor, or twice") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, ramp(6), true));
  Tensor c(make(ctx, AMPX_F32, {2, 3}, ramp(6, 1.0)));
  Tensor y, loss, other;
  REQUIRE(ampx_tanh(x, y.out()) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(y, nullptr), AMPX_ERR_SHAPE, "[2, 3]");
  Tensor leaf(make(ctx, AMPX_F32, {1}, {2.0}, true));
  CHECK_FAILS_WITH(ampx_backward(leaf, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'loss'");
  CHECK_FAILS_WITH(ampx_backward(nullptr, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'loss'");
  // Made by an op, but none of its inputs requires grad.
  REQUIRE(ampx_sum(c, other.out()) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(other, nullptr), AMPX_ERR_INVALID_ARGUMENT, "tape");

  // Refused arguments leave the tape alone (a failed call changes nothing):
  // the graph of y is still there for the proper scalar loss.
  CHECK(grad_handle(x) == nullptr);
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  const Vec once = values_of(grad_handle(x));
  const Vec xv = ramp(6);
  for (size_t i = 0; i < 6; ++i) {
    const double t = std::tanh(xv[i]);
    CHECK(std::fabs(once[i] - (1.0 - t * t)) < 1e-6);
  }
  // The tape is cleared after the first backward: neither the loss nor an
  // intermediate of the same graph can be backpropagated again, and the
  // failed calls leave the gradients alone.
  CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "backward already called");
  CHECK(values_of(grad_handle(x)) == once);
}

TEST_CASE("autograd: requires_grad on integer tensors, op outputs and leaves") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor ints(make_int<int32_t>(ctx, AMPX_I32, {1, 2, 3}));
  CHECK_FAILS_WITH(ampx_tensor_set_requires_grad(ints, 1), AMPX_ERR_DTYPE, "i32");
  CHECK(requires_grad(ints) == 0);
  CHECK(ampx_tensor_set_requires_grad(ints, 0) == AMPX_OK);

  Tensor x(make(ctx, AMPX_F16, {3}, {1, 2, 3}));
  CHECK(requires_grad(x) == 0);
  REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);
  CHECK(requires_grad(x) == 1);
  Tensor y;
  REQUIRE(ampx_relu(x, y.out()) == AMPX_OK);
  CHECK(requires_grad(y) == 1);
  CHECK_FAILS_WITH(ampx_tensor_set_requires_grad(y, 0), AMPX_ERR_INVALID_ARGUMENT, "leaves");
  CHECK_FAILS_WITH(ampx_tensor_set_requires_grad(y, 1), AMPX_ERR_INVALID_ARGUMENT, "recorded op");
  CHECK(requires_grad(y) == 1);
  REQUIRE(ampx_tensor_set_requires_grad(x, 0) == AMPX_OK);
  CHECK(requires_grad(x) == 0);
  int32_t flag = 0;
  CHECK(ampx_tensor_requires_grad(nullptr, &flag) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_tensor_requires_grad(x, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

// ---- seeds and gradient dtypes --------------------------------------------------------

TEST_CASE("autograd: backward with a scaler seeds with the scale") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Model m(ctx);
  ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
  o.init_scale = 1024.0;  // a power of two: scaled gradients are exact multiples
  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, &o, &scaler) == AMPX_OK);
  ampx_scaler_options off = AMPX_SCALER_OPTIONS_INIT;
  off.enabled = 0;
  ampx_scaler disabled = nullptr;
  REQUIRE(ampx_scaler_create(ctx, &off, &disabled) == AMPX_OK);

  auto grads_after = [&](ampx_scaler s) {
    for (ampx_tensor p : m.params()) {
      ampx_tensor g = grad_handle(p);
      if (g) REQUIRE(ampx_tensor_fill(g, 0.0) == AMPX_OK);
    }
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(m.loss(), s) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    std::vector<Vec> grads;
    for (ampx_tensor p : m.params()) grads.push_back(values_of(grad_handle(p)));
    return grads;
  };
  const std::vector<Vec> plain = grads_after(nullptr);
  const std::vector<Vec> scaled = grads_after(scaler);
  const std::vector<Vec> passthrough = grads_after(disabled);
  for (size_t p = 0; p < plain.size(); ++p)
    for (size_t i = 0; i < plain[p].size(); ++i) {
      CHECK(scaled[p][i] == 1024.0 * plain[p][i]);
      CHECK(passthrough[p][i] == plain[p][i]);
    }

  Ctx other;
  ampx_scaler foreign = nullptr;
  REQUIRE(ampx_scaler_create(other, &o, &foreign) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(m.loss(), foreign), AMPX_ERR_DEVICE, "scaler");
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_scaler_release(foreign);
  ampx_scaler_release(disabled);
  ampx_scaler_release(scaler);
}

TEST_CASE("autograd: a leaf's gradient has the leaf's dtype") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  for (const ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    INFO(std::string(ampx_dtype_name(dtype)));
    const Vec xv = {0.5, -1.25, 2.0, 0.75};
    Tensor x(make(ctx, dtype, {4}, xv, true));
    Tensor f32(make(ctx, AMPX_F32, {4}, {1.0, 2.0, 3.0, 4.0}, true));
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, z = nullptr, loss = nullptr;
    REQUIRE(ampx_tanh(x, &y) == AMPX_OK);
    CHECK(dtype_of(y) == dtype);
    REQUIRE(ampx_mul(y, f32, &z) == AMPX_OK);  // promotes to f32
    CHECK(dtype_of(z) == AMPX_F32);
    REQUIRE(ampx_sum(z, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    ampx_tensor gx = grad_handle(x), gf = grad_handle(f32);
    REQUIRE(gx != nullptr);
    REQUIRE(gf != nullptr);
    CHECK(dtype_of(gx) == dtype);
    CHECK(dtype_of(gf) == AMPX_F32);
    // d/dx = (1 - tanh^2) * w, rounded to the leaf's 11 (f16) or 8 (bf16)
    // significant bits along the way: a few roundings of 2^-11 / 2^-8.
    const double tol = dtype == AMPX_F16 ? 4e-3 : 3e-2;
    const Vec g = values_of(gx), gw = values_of(gf);
    for (size_t i = 0; i < 4; ++i) {
      const double t = std::tanh(xv[i]);
      CHECK(std::fabs(g[i] - (1.0 - t * t) * static_cast<double>(i + 1)) <= tol * (i + 1));
      CHECK(std::fabs(gw[i] - t) <= tol);
    }
  }
}

// ---- scopes -------------------------------------------------------------------------

TEST_CASE("autograd: a scope frees op outputs at pop; 100 training steps do not grow memory") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Model m(ctx);
  auto step = [&] {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor loss = m.loss();
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  };
  // The leaves' gradients are created by the first backward and stay
  // attached: the baseline is taken after it.
  step();
  const uint64_t baseline = current_bytes(ctx);
  for (int i = 0; i < 100; ++i) {
    step();
    REQUIRE(current_bytes(ctx) == baseline);
  }
  // While the scope is open its outputs (and the tape) really hold memory.
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor loss = m.loss();
  CHECK(current_bytes(ctx) > baseline);
  REQUIRE(ampx_backward(loss, nullptr) == AMPX_OK);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(current_bytes(ctx) == baseline);
}

TEST_CASE(
    "autograd: scopes nest, retain keeps an output past its scope, pop without push is ORDER") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {64}, ramp(64)));  // no gradient: nothing else holds outputs
  const uint64_t start = current_bytes(ctx);
  const uint64_t out_bytes = 64 * 4;

  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor a = nullptr, b = nullptr, kept = nullptr;
  REQUIRE(ampx_tanh(x, &a) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE(ampx_relu(a, &b) == AMPX_OK);
  REQUIRE(ampx_sigmoid(a, &kept) == AMPX_OK);
  REQUIRE(ampx_tensor_retain(kept) == AMPX_OK);
  CHECK(current_bytes(ctx) == start + 3 * out_bytes);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);  // frees b, not the retained one
  CHECK(current_bytes(ctx) == start + 2 * out_bytes);
  const Vec av = values_of(a);  // the outer scope's output is still valid
  // A few ulps: the CUDA backend's tanhf is not glibc's.
  CHECK(av[3] == doctest::Approx(std::tanh(ramp(64)[3])).epsilon(1e-6));
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(current_bytes(ctx) == start + out_bytes);
  const Vec kv = values_of(kept);
  CHECK(std::fabs(kv[3] - 1.0 / (1.0 + std::exp(-av[3]))) < 1e-6);
  ampx_tensor_release(kept);
  CHECK(current_bytes(ctx) == start);

  CHECK_FAILS_WITH(ampx_scope_pop(ctx), AMPX_ERR_ORDER, "no scope is open");
  CHECK(ampx_scope_push(nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_scope_pop(nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("autograd: without an open scope op outputs are owned by the caller") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {32}, ramp(32)));
  const uint64_t start = current_bytes(ctx);
  Tensor y;
  REQUIRE(ampx_silu(x, y.out()) == AMPX_OK);
  CHECK(current_bytes(ctx) == start + 32 * 4);
  // A scope opened and closed later does not take it.
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(values_of(y).size() == 32);
  ampx_tensor_release(y.handle);
  y.handle = nullptr;
  CHECK(current_bytes(ctx) == start);
}

// ---- argument errors of the ops -------------------------------------------------------

TEST_CASE("autograd: inputs of two contexts in one op are DEVICE") {
  OPS_REQUIRE_CPU();
  Ctx ctx, other;
  Tensor a(make(ctx, AMPX_F32, {2, 3}, ramp(6)));
  Tensor w(make(ctx, AMPX_F32, {4, 3}, ramp(12)));
  Tensor bias(make(ctx, AMPX_F32, {4}, ramp(4)));
  Tensor label(make_int<int32_t>(ctx, AMPX_I32, {0, 1}));
  Tensor a2(make(other, AMPX_F32, {2, 3}, ramp(6)));
  Tensor m2(make(other, AMPX_F32, {3, 2}, ramp(6)));
  Tensor w2(make(other, AMPX_F32, {4, 3}, ramp(12)));
  Tensor bias2(make(other, AMPX_F32, {4}, ramp(4)));
  Tensor label2(make_int<int32_t>(other, AMPX_I32, {0, 1}));
  Tensor out;
  CHECK_FAILS_WITH(ampx_add(a, a2, out.out()), AMPX_ERR_DEVICE, "context");
  CHECK_FAILS_WITH(ampx_sub(a2, a, out.out()), AMPX_ERR_DEVICE, "context");
  CHECK_FAILS_WITH(ampx_mul(a, a2, out.out()), AMPX_ERR_DEVICE, "context");
  CHECK_FAILS_WITH(ampx_matmul(a, m2, out.out()), AMPX_ERR_DEVICE, "context");
  CHECK_FAILS_WITH(ampx_linear(a, w2, nullptr, AMPX_ACTIVATION_NONE, out.out()), AMPX_ERR_DEVICE,
                   "'weight'");
  CHECK_FAILS_WITH(ampx_linear(a, w, bias2, AMPX_ACTIVATION_NONE, out.out()), AMPX_ERR_DEVICE,
                   "'bias'");
  CHECK_FAILS_WITH(ampx_cross_entropy(a, label2, AMPX_REDUCTION_MEAN, -100, out.out()),
                   AMPX_ERR_DEVICE, "'labels'");
  CHECK_FAILS_WITH(ampx_mse_loss(a, a2, AMPX_REDUCTION_MEAN, out.out()), AMPX_ERR_DEVICE,
                   "'target'");
  CHECK(out.handle == nullptr);  // out args are written only on success
}

TEST_CASE("autograd: shape errors of every op name both shapes") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor a23(make(ctx, AMPX_F32, {2, 3}, ramp(6)));
  Tensor a32(make(ctx, AMPX_F32, {3, 2}, ramp(6)));
  Tensor v2(make(ctx, AMPX_F32, {2}, ramp(2)));
  Tensor a45(make(ctx, AMPX_F32, {4, 5}, ramp(20)));
  Tensor b234(make(ctx, AMPX_F32, {2, 3, 4}, ramp(24)));
  Tensor b345(make(ctx, AMPX_F32, {3, 4, 5}, ramp(60)));
  Tensor w43(make(ctx, AMPX_F32, {4, 3}, ramp(12)));
  Tensor scalar(make(ctx, AMPX_F32, {}, {1.0}));
  Tensor label3(make_int<int64_t>(ctx, AMPX_I64, {0, 1, 2}));
  Tensor out;
  for (auto fn : {ampx_add, ampx_sub, ampx_mul}) {
    CHECK_FAILS_WITH(fn(a23, v2, out.out()), AMPX_ERR_SHAPE, "f32[2, 3]");
    CHECK(contains(last_error(), "f32[2]"));
    CHECK_FAILS_WITH(fn(a23, a32, out.out()), AMPX_ERR_SHAPE, "f32[2, 3]");
    CHECK(contains(last_error(), "f32[3, 2]"));
  }
  CHECK_FAILS_WITH(ampx_matmul(a23, a45, out.out()), AMPX_ERR_SHAPE, "f32[2, 3]");
  CHECK(contains(last_error(), "f32[4, 5]"));
  CHECK_FAILS_WITH(ampx_matmul(b234, b345, out.out()), AMPX_ERR_SHAPE, "f32[2, 3, 4]");
  CHECK(contains(last_error(), "f32[3, 4, 5]"));
  CHECK_FAILS_WITH(ampx_matmul(a23, b345, out.out()), AMPX_ERR_SHAPE, "f32[2, 3]");
  CHECK(contains(last_error(), "f32[3, 4, 5]"));
  CHECK_FAILS_WITH(ampx_linear(a23, a45, nullptr, AMPX_ACTIVATION_NONE, out.out()), AMPX_ERR_SHAPE,
                   "f32[2, 3]");
  CHECK(contains(last_error(), "f32[4, 5]"));
  // The bias is checked against the weight's out features.
  CHECK_FAILS_WITH(ampx_linear(a23, w43, v2, AMPX_ACTIVATION_NONE, out.out()), AMPX_ERR_SHAPE,
                   "f32[2]");
  CHECK(contains(last_error(), "[4]"));
  CHECK_FAILS_WITH(ampx_mse_loss(a23, a32, AMPX_REDUCTION_SUM, out.out()), AMPX_ERR_SHAPE,
                   "f32[2, 3]");
  CHECK(contains(last_error(), "f32[3, 2]"));
  CHECK_FAILS_WITH(ampx_cross_entropy(a23, label3, AMPX_REDUCTION_MEAN, -100, out.out()),
                   AMPX_ERR_SHAPE, "f32[2, 3]");
  CHECK(contains(last_error(), "i64[3]"));
  CHECK_FAILS_WITH(ampx_cross_entropy(b234, label3, AMPX_REDUCTION_MEAN, -100, out.out()),
                   AMPX_ERR_SHAPE, "f32[2, 3, 4]");
  CHECK(contains(last_error(), "i64[3]"));
  // Single-input ops have one shape to name.
  CHECK_FAILS_WITH(ampx_softmax(scalar, out.out()), AMPX_ERR_SHAPE, "f32[]");
  CHECK_FAILS_WITH(ampx_log_softmax(scalar, out.out()), AMPX_ERR_SHAPE, "f32[]");
  CHECK(out.handle == nullptr);
}

TEST_CASE("autograd: cross_entropy label errors and dtype errors of the ops") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor logits(make(ctx, AMPX_F32, {3, 4}, ramp(12), true));
  Tensor out;
  // The CPU fails the call; a GPU reports at the next synchronisation
  // (labels are checked on the device; see test_index_checks.cpp).
  const auto label_error = [&](ampx_status status, const char* part) {
    if (ampx_test::test_device() == AMPX_DEVICE_CPU) {
      CHECK(status == AMPX_ERR_INVALID_ARGUMENT);
    } else {
      CHECK(status == AMPX_OK);
      status = ampx_context_synchronize(ctx);
      CHECK(status == AMPX_ERR_INVALID_ARGUMENT);
    }
    CHECK_MESSAGE(contains(last_error(), part), last_error());
  };
  Tensor too_big(make_int<int64_t>(ctx, AMPX_I64, {0, 4, 1}));
  label_error(ampx_cross_entropy(logits, too_big, AMPX_REDUCTION_MEAN, -100, out.out()),
              "labels[1] is 4");
  Tensor negative(make_int<int32_t>(ctx, AMPX_I32, {0, 1, -1}));
  label_error(ampx_cross_entropy(logits, negative, AMPX_REDUCTION_SUM, -100, out.out()),
              "labels[2] is -1");
  // -1 is fine once it is the ignore_index.
  CHECK_MESSAGE(ampx_cross_entropy(logits, negative, AMPX_REDUCTION_SUM, -1, out.out()) == AMPX_OK,
                last_error());
  Tensor float_labels(make(ctx, AMPX_F32, {3}, {0, 1, 2}));
  CHECK_FAILS_WITH(ampx_cross_entropy(logits, float_labels, AMPX_REDUCTION_MEAN, -100, out.out()),
                   AMPX_ERR_DTYPE, "'labels'");
  Tensor int_logits(make_int<int32_t>(ctx, AMPX_I32, {1, 2, 3}));
  Tensor labels(make_int<int32_t>(ctx, AMPX_I32, {0, 1, 2}));
  CHECK_FAILS_WITH(ampx_cross_entropy(int_logits, labels, AMPX_REDUCTION_MEAN, -100, out.out()),
                   AMPX_ERR_DTYPE, "'logits'");
  CHECK_FAILS_WITH(
      ampx_cross_entropy(logits, labels, static_cast<ampx_reduction>(9), -100, out.out()),
      AMPX_ERR_INVALID_ARGUMENT, "reduction");
  CHECK_FAILS_WITH(ampx_relu(int_logits, out.out()), AMPX_ERR_DTYPE, "i32");
  CHECK_FAILS_WITH(ampx_sum(int_logits, out.out()), AMPX_ERR_DTYPE, "i32");
  // Outside autocast, matmul, linear and mse_loss take one floating type.
  Tensor h(make(ctx, AMPX_F16, {4, 3}, ramp(12)));
  CHECK_FAILS_WITH(ampx_matmul(logits, h, out.out()), AMPX_ERR_DTYPE, "f16[4, 3]");
  CHECK(contains(last_error(), "f32"));
  Tensor w(make(ctx, AMPX_F16, {2, 4}, ramp(8)));
  CHECK_FAILS_WITH(ampx_linear(logits, w, nullptr, AMPX_ACTIVATION_NONE, out.out()), AMPX_ERR_DTYPE,
                   "f16[2, 4]");
  CHECK_FAILS_WITH(ampx_linear(logits, logits, nullptr, static_cast<ampx_activation>(7), out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "activation");
  Tensor h34(make(ctx, AMPX_F16, {3, 4}, ramp(12)));
  CHECK_FAILS_WITH(ampx_mse_loss(logits, h34, AMPX_REDUCTION_MEAN, out.out()), AMPX_ERR_DTYPE,
                   "f16[3, 4]");
  // NULL handles and out pointers.
  CHECK_FAILS_WITH(ampx_add(nullptr, logits, out.out()), AMPX_ERR_INVALID_ARGUMENT, "'a'");
  CHECK_FAILS_WITH(ampx_tanh(logits, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'out'");
}

// ---- the tape's lifetime ----------------------------------------------------------------

TEST_CASE("autograd: an output of an earlier, cleared tape is a constant, not a leaf") {
  // Leaves are tensors the program made; an op output whose tape was
  // cleared by a backward is a constant and must never get a gradient.
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {4}, ramp(4), true));
  Tensor y, loss, z, loss2;
  REQUIRE(ampx_tanh(x, y.out()) == AMPX_OK);
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  REQUIRE(ampx_backward(loss, nullptr) == AMPX_OK);
  const Vec gx = values_of(grad_handle(x));
  REQUIRE(ampx_mul(y, y, z.out()) == AMPX_OK);
  REQUIRE(ampx_sum(z, loss2.out()) == AMPX_OK);
  (void)ampx_backward(loss2, nullptr);  // whether it runs is not what this case checks
  CHECK(grad_handle(y) == nullptr);
  CHECK(values_of(grad_handle(x)) == gx);
}

TEST_CASE("autograd: a forward popped without backward does not keep memory") {
  // A loss computed with recording on but never backpropagated (an
  // evaluation pass over parameters that require grad) must not keep its
  // graph once the scope that owned its outputs is popped; torch frees a
  // graph with its last output.
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Model m(ctx);
  const uint64_t baseline = current_bytes(ctx);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    m.loss();
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    CHECK(current_bytes(ctx) == baseline);
  }
}

TEST_CASE("autograd: backward refuses tensors written in place after the op saved them") {
  Ctx ctx;
  Tensor w(make(ctx, AMPX_F32, {3, 4}, ramp(12), true));
  Tensor b(make(ctx, AMPX_F32, {3}, ramp(3, 1.0), true));
  Tensor x(make(ctx, AMPX_F32, {2, 4}, ramp(8, 2.0)));
  Tensor other(make(ctx, AMPX_F32, {2, 4}, ramp(8, 3.0)));
  const std::vector<float> next_batch(8, 0.5f);

  // A new batch copied into x between forward and backward.
  Tensor h, loss;
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_RELU, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, loss.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_copy_from_host(x, next_batch.data(), 32) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_ORDER, "'linear' saved for backward");
  Tensor grad;
  CHECK(ampx_tensor_grad(w, grad.out()) == AMPX_OK);
  CHECK(grad.handle == nullptr);  // refused before anything changed
  // The forward run again sees the new values: fine.
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_RELU, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, loss.out()) == AMPX_OK);
  CHECK_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());

  // The bias written over: linear's backward never reads its values.
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, loss.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(b, 0.25) == AMPX_OK);
  CHECK_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  // The weight written over (as an optimizer step would): refused.
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, loss.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(w, 0.25) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_ORDER, "'linear'");

  // An output that backward reads (softmax's) written over, and one it does
  // not read (add's), which is fine.
  Tensor y, s, total;
  REQUIRE(ampx_softmax(h, y.out()) == AMPX_OK);
  REQUIRE(ampx_sum(y, s.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(y, 0.0) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_backward(s, nullptr), AMPX_ERR_ORDER, "'softmax'");
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, h.out()) == AMPX_OK);
  REQUIRE(ampx_add(h, h, y.out()) == AMPX_OK);
  REQUIRE(ampx_sum(y, s.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(y, 0.0) == AMPX_OK);
  CHECK_MESSAGE(ampx_backward(s, nullptr) == AMPX_OK, last_error());

  // An optimizer step between forward and backward (the GAN mistake).
  ampx_optimizer opt = nullptr;
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  const ampx_tensor params[1] = {w};
  REQUIRE(ampx_optimizer_create_adam(ctx, params, 1, &adamw, &opt) == AMPX_OK);
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, loss.out()) == AMPX_OK);
  REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);  // w has a gradient from above
  CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_ORDER, "an optimizer step");
  ampx_optimizer_release(opt);

  // Records this backward does not run are not checked: a forward on x
  // whose output is kept, x rewritten, then a loss from another input.
  Tensor kept, from_other;
  REQUIRE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, kept.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_copy_from_host(x, next_batch.data(), 32) == AMPX_OK);
  REQUIRE(ampx_linear(other, w, b, AMPX_ACTIVATION_NONE, h.out()) == AMPX_OK);
  REQUIRE(ampx_mean(h, from_other.out()) == AMPX_OK);
  CHECK_MESSAGE(ampx_backward(from_other, nullptr) == AMPX_OK, last_error());
}
