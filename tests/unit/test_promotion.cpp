// test_promotion.cpp -- the dtype of add, sub, mul, div and concat for every
// pair of floating operands, 0-D and with dimensions, outside and inside
// autocast regions, against torch's documented type promotion
// (torch.result_type) written out below; values and each operand's
// gradient (in its own dtype) come along. The operands' values are small
// dyadic numbers, exact in every floating type, whose sums, products and
// quotients are exact too, so every value is compared exactly.
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dims_of;
using ampx_fixture::dtype_of;
using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;

// torch.promote_types for the floating types: equal types stay, f16 with
// bf16 needs f32 (neither holds the other), f32 with either is f32.
ampx_dtype promote_types(ampx_dtype a, ampx_dtype b) { return a == b ? a : AMPX_F32; }

// torch.result_type, from torch's documentation ("Type promotion"): operands
// rank as dimensioned tensors, then zero-dimensional tensors; a lower-ranked
// operand takes part only when its category (bool < integer < floating) is
// higher than that of every higher-ranked operand. So for floating operands
// the dimensioned ones decide, and 0-D ones only when all are 0-D.
ampx_dtype result_type(ampx_dtype a, bool a_0d, ampx_dtype b, bool b_0d) {
  if (a_0d == b_0d) return promote_types(a, b);
  return a_0d ? b : a;
}

enum class Op { Add, Sub, Mul, Div };

const char* op_name(Op op) {
  switch (op) {
    case Op::Add: return "add";
    case Op::Sub: return "sub";
    case Op::Mul: return "mul";
    case Op::Div: return "div";
  }
  return "?";
}

ampx_status run(Op op, ampx_tensor a, ampx_tensor b, ampx_tensor* out) {
  switch (op) {
    case Op::Add: return ampx_add(a, b, out);
    case Op::Sub: return ampx_sub(a, b, out);
    case Op::Mul: return ampx_mul(a, b, out);
    case Op::Div: return ampx_div(a, b, out);
  }
  return AMPX_ERR_INTERNAL;
}

// The operands: a [3] or 0-D, b [3] or 0-D.
const Vec kA = {1.5, -2.0, 3.0}, kB = {0.25, 4.0, -1.0};
constexpr double kA0 = 1.5, kB0 = 0.5;

struct Expected {
  Vec out, da, db;
};

// out = a op b and the gradients of sum(out), broadcast as torch does.
Expected expected(Op op, bool a_0d, bool b_0d) {
  const Vec a = a_0d ? Vec{kA0} : kA, b = b_0d ? Vec{kB0} : kB;
  const size_t n = a_0d && b_0d ? 1 : 3;
  Expected e{Vec(n), Vec(a.size(), 0.0), Vec(b.size(), 0.0)};
  for (size_t i = 0; i < n; ++i) {
    const size_t ia = a_0d ? 0 : i, ib = b_0d ? 0 : i;
    const double x = a[ia], y = b[ib];
    switch (op) {
      case Op::Add: e.out[i] = x + y, e.da[ia] += 1, e.db[ib] += 1; break;
      case Op::Sub: e.out[i] = x - y, e.da[ia] += 1, e.db[ib] -= 1; break;
      case Op::Mul: e.out[i] = x * y, e.da[ia] += y, e.db[ib] += x; break;
      case Op::Div: e.out[i] = x / y, e.da[ia] += 1 / y, e.db[ib] -= x / (y * y); break;
    }
  }
  return e;
}

const ampx_dtype kFloats[] = {AMPX_F32, AMPX_F16, AMPX_BF16};

// Every op, dtype pair and 0-D/dimensioned combination, in the region the
// caller has entered (or none).
void check_table(ampx_context ctx, const char* region) {
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div})
    for (ampx_dtype ta : kFloats)
      for (ampx_dtype tb : kFloats)
        for (bool a_0d : {false, true})
          for (bool b_0d : {false, true}) {
            INFO((std::string(region) + ": " + op_name(op) + "(" + ampx_dtype_name(ta) +
                  (a_0d ? " 0-D, " : " [3], ") + ampx_dtype_name(tb) + (b_0d ? " 0-D)" : " [3])")));
            REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
            Tensor a(a_0d ? make(ctx, ta, {}, {kA0}, true) : make(ctx, ta, {3}, kA, true));
            Tensor b(b_0d ? make(ctx, tb, {}, {kB0}, true) : make(ctx, tb, {3}, kB, true));
            ampx_tensor out = nullptr, total = nullptr;
            REQUIRE_MESSAGE(run(op, a, b, &out) == AMPX_OK, last_error());
            const Expected e = expected(op, a_0d, b_0d);
            CHECK(dtype_of(out) == result_type(ta, a_0d, tb, b_0d));
            CHECK(dims_of(out).size() == (a_0d && b_0d ? 0u : 1u));
            CHECK(values_of(out) == e.out);
            REQUIRE(ampx_sum(out, &total) == AMPX_OK);
            REQUIRE_MESSAGE(ampx_backward(total, nullptr) == AMPX_OK, last_error());
            ampx_tensor ga = nullptr, gb = nullptr;
            REQUIRE(ampx_tensor_grad(a, &ga) == AMPX_OK);
            REQUIRE(ampx_tensor_grad(b, &gb) == AMPX_OK);
            REQUIRE(ga != nullptr);
            REQUIRE(gb != nullptr);
            CHECK(dtype_of(ga) == ta);
            CHECK(dtype_of(gb) == tb);
            CHECK(values_of(ga) == e.da);
            CHECK(values_of(gb) == e.db);
            REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
          }
}

TEST_CASE("promotion: 0-D operands follow torch.result_type, outside autocast") {
  // The documentation's own examples first.
  CHECK(result_type(AMPX_F16, false, AMPX_F32, true) == AMPX_F16);
  CHECK(result_type(AMPX_F16, true, AMPX_F32, false) == AMPX_F32);
  CHECK(result_type(AMPX_F16, false, AMPX_BF16, true) == AMPX_F16);
  CHECK(result_type(AMPX_F16, true, AMPX_BF16, true) == AMPX_F32);
  CHECK(result_type(AMPX_F16, false, AMPX_BF16, false) == AMPX_F32);
  Ctx ctx;
  check_table(ctx, "no autocast");
}

TEST_CASE("promotion: 0-D operands follow torch.result_type inside autocast regions") {
  Ctx ctx;
  for (ampx_dtype lower : {AMPX_F16, AMPX_BF16}) {
    ampx_autocast policy = nullptr;
    ampx_autocast_options o = ampx_autocast_options_default();
    o.dtype = lower;
    REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    check_table(ctx, lower == AMPX_F16 ? "f16 autocast" : "bf16 autocast");
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    ampx_autocast_release(policy);
  }
}

TEST_CASE("promotion: concat of every floating pair, and integer operands are refused") {
  Ctx ctx;
  for (ampx_dtype ta : kFloats)
    for (ampx_dtype tb : kFloats) {
      INFO((std::string(ampx_dtype_name(ta)) + " with " + ampx_dtype_name(tb)));
      Tensor a(make(ctx, ta, {2}, {1.5, -2.0})), b(make(ctx, tb, {1}, {0.25})), out;
      const ampx_tensor both[] = {a, b};
      REQUIRE_MESSAGE(ampx_concat(both, 2, 0, out.out()) == AMPX_OK, last_error());
      CHECK(dtype_of(out) == result_type(ta, false, tb, false));
      CHECK(values_of(out) == Vec{1.5, -2.0, 0.25});
    }
  // ampx has no integer arithmetic: torch would promote i32 [3] + f16 0-D
  // to f16 (a higher category), ampx refuses any integer operand.
  Tensor ints(make(ctx, AMPX_I32, {3}, {1, 2, 3})), int0(make(ctx, AMPX_I32, {}, {2}));
  Tensor h(make(ctx, AMPX_F16, {3}, {1, 2, 3})), h0(make(ctx, AMPX_F16, {}, {2}));
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div}) {
    INFO(std::string(op_name(op)));
    ampx_tensor out = nullptr;
    CHECK_FAILS_WITH(run(op, ints, h0, &out), AMPX_ERR_DTYPE, "i32");
    CHECK_FAILS_WITH(run(op, h, int0, &out), AMPX_ERR_DTYPE, "i32");
    CHECK(out == nullptr);
  }
}

}  // namespace
