// test_cast_op.cpp -- ampx_cast, the recorded cast (torch's Tensor.to and
// Tensor.clone), against torch: for x = [0.3, -1.7, 2.25] (f32, requires
// grad) and y = x cast to bf16, f16, f32 (its own dtype) or cloned,
//   loss = sum(x * x) + sum(y * y),
//   g = d loss / dx (create_graph),   h = d sum(g * g) / dx.
// The expected values are torch 2's (torch.autograd.grad with create_graph):
// every step is exact or one rounding of the format (2y is exact in bf16,
// the cast of 2g back to bf16 is the one rounding of the second order), so
// ampx must agree to fp32's rounding of the final sums (2e-6 relative).
// With the cast dropped, as ampx_tensor_cast drops it, g would be 2x (0.6
// where torch has 1.2). Then what ampx_tensor_cast keeps (no record), grad
// mode off, an f16 leaf getting an f16 gradient, integer outputs, clone's
// fresh memory, and the bad inputs.
#include <cmath>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;

const Vec kX = {0.3, -1.7, 2.25};

bool requires_grad(ampx_tensor t) {
  int32_t r = -1;
  REQUIRE(ampx_tensor_requires_grad(t, &r) == AMPX_OK);
  return r != 0;
}

ampx_dtype dtype_of(ampx_tensor t) { return ampx_fixture::dtype_of(t); }

ampx_tensor cast(ampx_tensor x, ampx_dtype dtype) {
  ampx_tensor y = nullptr;
  REQUIRE_MESSAGE(ampx_cast(x, dtype, &y) == AMPX_OK, last_error());
  return y;
}

ampx_tensor square_sum(ampx_tensor t) {
  ampx_tensor sq = nullptr, s = nullptr;
  REQUIRE_MESSAGE(ampx_mul(t, t, &sq) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_sum(sq, &s) == AMPX_OK, last_error());
  return s;
}

ampx_tensor leaf(ampx_context ctx, ampx_dtype dtype, const Vec& values) {
  ampx_tensor t = make(ctx, dtype, values);
  REQUIRE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK);
  return t;
}

void check_close(const Vec& have, const Vec& want, double rel) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(std::fabs(have[i] - want[i]) <= rel * std::fabs(want[i]),
                  "element ", i, ": ", have[i], " vs torch's ", want[i]);
}

struct TorchCase {
  const char* name;
  ampx_dtype dtype;  // the cast's target; F32 with clone for .clone()
  bool clone;
  Vec grad;    // x.grad of loss (first order)
  Vec second;  // d sum(g * g) / dx
};

// torch 2.x, float32 leaves (see the file's comment).
const TorchCase kTorch[] = {
    {"to(bf16)", AMPX_BF16, false, {1.201562523841858, -6.806250095367432, 9.0},
     {9.618749618530273, -54.474998474121094, 72.0}},
    {"to(f16)", AMPX_F16, false, {1.200097680091858, -6.800390720367432, 9.0},
     {9.601171493530273, -54.404685974121094, 72.0}},
    {"to(f32), the same dtype", AMPX_F32, false, {1.2000000476837158, -6.800000190734863, 9.0},
     {9.600000381469727, -54.400001525878906, 72.0}},
    {"clone()", AMPX_F32, true, {1.2000000476837158, -6.800000190734863, 9.0},
     {9.600000381469727, -54.400001525878906, 72.0}},
};

}  // namespace

TEST_CASE("ampx_cast: gradients through .to and .clone match torch, first and second order") {
  for (const TorchCase& c : kTorch) {
    CAPTURE(c.name);
    Ctx ctx;
    Tensor x(leaf(ctx, AMPX_F32, kX));
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    const ampx_tensor y = cast(x, c.clone ? dtype_of(x.handle) : c.dtype);
    CHECK(dtype_of(y) == c.dtype);
    CHECK(requires_grad(y));
    ampx_tensor loss = nullptr;
    REQUIRE_MESSAGE(ampx_add(square_sum(x), square_sum(y), &loss) == AMPX_OK, last_error());

    SUBCASE("backward accumulates both terms into x.grad, in x's dtype") {
      REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
      ampx_tensor g = nullptr;
      REQUIRE(ampx_tensor_grad(x, &g) == AMPX_OK);
      REQUIRE(g != nullptr);
      CHECK(dtype_of(g) == AMPX_F32);
      check_close(values_of(g), c.grad, 2e-6);
    }
    SUBCASE("create_graph: the cast's gradient is differentiable again") {
      ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
      o.create_graph = 1;
      ampx_tensor g = nullptr;
      REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK,
                      last_error());
      CHECK(dtype_of(g) == AMPX_F32);
      CHECK(requires_grad(g));
      check_close(values_of(g), c.grad, 2e-6);
      const ampx_tensor s = square_sum(g);
      ampx_tensor h = nullptr;
      REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &x.handle, 1, nullptr, &h) == AMPX_OK,
                      last_error());
      check_close(values_of(h), c.second, 2e-6);
    }
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}

TEST_CASE("ampx_cast: an f16 leaf cast to f32 gets its gradient in f16") {
  Ctx ctx;
  Tensor x(leaf(ctx, AMPX_F16, kX));
  const Vec xv = values_of(x);  // kX rounded to f16
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor y = cast(x, AMPX_F32);
  REQUIRE_MESSAGE(ampx_backward(square_sum(y), nullptr) == AMPX_OK, last_error());
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(x, &g) == AMPX_OK);
  CHECK(dtype_of(g) == AMPX_F16);
  const Vec gv = values_of(g);
  for (size_t i = 0; i < 3; ++i) CHECK(gv[i] == 2 * xv[i]);  // exact: a power of two
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("ampx_cast: what is not recorded, and what a clone shares") {
  Ctx ctx;
  Tensor x(leaf(ctx, AMPX_F32, kX));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  SUBCASE("ampx_tensor_cast stays a plain tensor function") {
    Tensor y;
    REQUIRE(ampx_tensor_cast(x, AMPX_BF16, y.out()) == AMPX_OK);
    CHECK(!requires_grad(y));
  }
  SUBCASE("grad mode off: a plain conversion") {
    int32_t previous = 0;
    REQUIRE(ampx_set_grad_enabled(ctx, 0, &previous) == AMPX_OK);
    const ampx_tensor y = cast(x, AMPX_BF16);
    CHECK(!requires_grad(y));
    REQUIRE(ampx_set_grad_enabled(ctx, previous, nullptr) == AMPX_OK);
  }
  SUBCASE("an input that requires no grad: not recorded") {
    Tensor c(make(ctx, AMPX_F32, kX));
    const ampx_tensor y = cast(c, AMPX_F16);
    CHECK(!requires_grad(y));
  }
  SUBCASE("an integer output carries no gradient (torch's x.to(torch.int32))") {
    const ampx_tensor y = cast(x, AMPX_I32);
    CHECK(dtype_of(y) == AMPX_I32);
    CHECK(!requires_grad(y));
    CHECK(values_of(y) == Vec{0, -1, 2});  // truncated toward zero
  }
  SUBCASE("clone is new memory: writing into it leaves x as it was") {
    const ampx_tensor y = cast(x, AMPX_F32);
    CHECK(y != x.handle);
    const Vec before = values_of(x);
    CHECK(values_of(y) == before);
    REQUIRE(ampx_tensor_fill(y, 5.0) == AMPX_OK);
    CHECK(values_of(x) == before);
  }
  SUBCASE("bad input: a status and a message, *out untouched") {
    ampx_tensor y = nullptr;
    CHECK_FAILS_WITH(ampx_cast(x, static_cast<ampx_dtype>(77), &y), AMPX_ERR_DTYPE,
                     "dtype");
    CHECK(y == nullptr);
    CHECK_FAILS_WITH(ampx_cast(nullptr, AMPX_F32, &y), AMPX_ERR_INVALID_ARGUMENT, "x");
    CHECK(y == nullptr);
    CHECK_FAILS_WITH(ampx_cast(x, AMPX_F32, nullptr), AMPX_ERR_INVALID_ARGUMENT, "out");
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}
