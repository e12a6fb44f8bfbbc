// test_fp8_autocast.cpp -- FP8 under autocast (ampx.h section 18): linear
// and matmul multiplied in FP8 with the recipe's scales, forward and
// backward, against references computed here from the quantized operands
// (fp8_reference.h), the slots a weight gets, the fallbacks and their
// reasons, recipe state in checkpoint files, the precision doctor's FP8
// report, and an MLP classifier trained in FP8 against bf16.
//
// Bounds: each reference sums exact products of decoded FP8 values in
// double; the device sums k of them in fp32 (within k 2^-24 of the sum of
// |terms|) and rounds once to the output: an F32 output must be within
// that, a bf16 one within half a bf16 ulp (at most 2^-8 relative) more.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp8_reference.h"
#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;
using fp8_test::kE4M3;
using fp8_test::kE5M2;
using fp8_test::reference_code;
using fp8_test::reference_value;

namespace {

struct Recipe {
  ampx_fp8_recipe handle = nullptr;
  explicit Recipe(ampx_context ctx, int32_t history = 16) {
    ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
    o.amax_history_len = history;
    REQUIRE_MESSAGE(ampx_fp8_recipe_create(ctx, &o, &handle) == AMPX_OK, last_error());
  }
  ~Recipe() { ampx_fp8_recipe_release(handle); }
  Recipe(const Recipe&) = delete;
  Recipe& operator=(const Recipe&) = delete;
  operator ampx_fp8_recipe() const { return handle; }
};

struct Policy {
  ampx_autocast handle = nullptr;
  Policy(ampx_context ctx, ampx_fp8_recipe recipe, int64_t min_size = 0) {
    ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
    o.dtype = AMPX_BF16;
    REQUIRE_MESSAGE(ampx_autocast_create(ctx, &o, &handle) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_autocast_set_fp8(handle, recipe, min_size) == AMPX_OK, last_error());
  }
  ~Policy() { ampx_autocast_release(handle); }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;
  operator ampx_autocast() const { return handle; }
};

// Enters a policy for a scope.
struct Region {
  ampx_autocast policy;
  explicit Region(ampx_autocast p) : policy(p) { REQUIRE(ampx_autocast_enter(p) == AMPX_OK); }
  ~Region() { CHECK(ampx_autocast_exit(policy) == AMPX_OK); }
};

ampx_tensor matrix(ampx_context ctx, int64_t rows, int64_t cols, const std::vector<float>& v,
                   const char* name = nullptr, bool grad = false) {
  const int64_t shape[] = {rows, cols};
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, v.data(), v.size() * 4, &t) == AMPX_OK);
  if (name) REQUIRE(ampx_tensor_set_name(t, name) == AMPX_OK);
  if (grad) REQUIRE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK);
  return t;
}

std::vector<float> values(size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

int64_t slot_named(ampx_fp8_recipe recipe, const std::string& name, ampx_fp8_slot_info* info) {
  int64_t count = 0;
  REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
  for (int64_t i = 0; i < count; ++i) {
    ampx_fp8_slot_info s = AMPX_FP8_SLOT_INFO_INIT;
    REQUIRE(ampx_fp8_recipe_slot_get(recipe, i, &s, nullptr, 0) == AMPX_OK);
    if (name == s.name) {
      *info = s;
      return i;
    }
  }
  FAIL("no slot named ", name);
  return -1;
}

// x rounded to bf16 (nearest even; x finite here).
double to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

double bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The values a tensor becomes in a slot: decoded FP8 times the inverse
// scale, as the GEMM applies it (the scale_inv factors are multiplied into
// the fp32 sum, so the reference keeps them apart).
std::vector<double> quantized(const std::vector<float>& x, float scale, bool e5m2) {
  std::vector<double> q(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    q[i] = reference_value(e5m2 ? kE5M2 : kE4M3,
                           reference_code(e5m2 ? kE5M2 : kE4M3, static_cast<double>(x[i] * scale), true));
  return q;
}

}  // namespace

TEST_CASE("fp8 autocast: linear forward and backward equal the quantized reference") {
  Ctx ctx;
  std::mt19937 rng(5);
  const int64_t rows = 32, in = 48, out = 16;
  const std::vector<float> xv = values(rows * in, rng, 3.0f), wv = values(out * in, rng, 0.5f);
  const std::vector<float> bv = values(out, rng, 1.0f);
  // dy: the gradient of sum(y * c), c exact in bf16 (multiples of 1/8).
  std::vector<float> cv(rows * out);
  for (float& c : cv) c = static_cast<float>(static_cast<int>(rng() % 33) - 16) / 8.0f;
  Tensor x(matrix(ctx, rows, in, xv, "x", true)), w(matrix(ctx, out, in, wv, "w", true));
  Tensor c(matrix(ctx, rows, out, cv));
  const int64_t bshape[] = {out};
  Tensor b;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 1, bshape, bv.data(), bv.size() * 4, b.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_set_requires_grad(b, 1) == AMPX_OK);
  Recipe recipe(ctx);
  Policy policy(ctx, recipe);
  // Two steps: the first with scales 1, the second with the scales the
  // update made from the first's amaxes.
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    ampx_fp8_slot_info sx{}, sw{}, sdy{};
    float scale_x = 1.0f, scale_w = 1.0f, scale_dy = 1.0f, inv_x = 1.0f, inv_w = 1.0f, inv_dy = 1.0f;
    if (step == 1) {
      slot_named(recipe, "w:input", &sx);
      slot_named(recipe, "w:weight", &sw);
      slot_named(recipe, "w:grad_output", &sdy);
      scale_x = sx.scale, scale_w = sw.scale, scale_dy = sdy.scale;
      inv_x = sx.scale_inv, inv_w = sw.scale_inv, inv_dy = sdy.scale_inv;
    }
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, prod = nullptr, loss = nullptr;
    {
      Region region(policy);
      REQUIRE_MESSAGE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, &y) == AMPX_OK, last_error());
      REQUIRE(ampx_mul(y, c, &prod) == AMPX_OK);
      REQUIRE(ampx_sum(prod, &loss) == AMPX_OK);
    }
    ampx_dtype y_type = static_cast<ampx_dtype>(0);
    REQUIRE(ampx_tensor_dtype(y, &y_type) == AMPX_OK);
    CHECK(y_type == AMPX_BF16);
    // Forward: y = bf16(sum_l xq wq * inv_x * inv_w + b), the bias in the
    // output's dtype (bf16), as plain autocast casts it.
    const std::vector<double> xq = quantized(xv, scale_x, false), wq = quantized(wv, scale_w, false);
    const std::vector<uint16_t> yv = download<uint16_t>(y);
    size_t wrong = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double sum = 0.0, mag = 0.0;
        for (int64_t l = 0; l < in; ++l) {
          sum += xq[i * in + l] * wq[j * in + l];
          mag += std::fabs(xq[i * in + l] * wq[j * in + l]);
        }
        const double f = static_cast<double>(inv_x) * inv_w;
        const double bias = to_bf16(bv[j]);
        const double ref = f * sum + bias;
        const double tol = (in + 4) * 0x1p-24 * (f * mag + std::fabs(bias)) + std::fabs(ref) * 0x1p-8;
        if (std::fabs(bf16_value(yv[i * out + j]) - ref) > tol && ++wrong <= 3)
          FAIL_CHECK("y[", i, "][", j, "] = ", bf16_value(yv[i * out + j]), ", reference ", ref);
      }
    CHECK(wrong == 0);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    // Backward: dy = bf16(c) = c, quantized to E5M2 with its slot's scale.
    const std::vector<double> dyq = quantized(cv, scale_dy, true);
    ampx_tensor gx = nullptr, gw = nullptr, gb = nullptr;
    REQUIRE(ampx_tensor_grad(x, &gx) == AMPX_OK);
    REQUIRE(ampx_tensor_grad(w, &gw) == AMPX_OK);
    REQUIRE(ampx_tensor_grad(b, &gb) == AMPX_OK);
    const std::vector<float> dx = download<float>(gx), dw = download<float>(gw), db = download<float>(gb);
    wrong = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t l = 0; l < in; ++l) {  // dx = dy W
        double sum = 0.0, mag = 0.0;
        for (int64_t j = 0; j < out; ++j) {
          sum += dyq[i * out + j] * wq[j * in + l];
          mag += std::fabs(dyq[i * out + j] * wq[j * in + l]);
        }
        const double f = static_cast<double>(inv_dy) * inv_w;
        if (std::fabs(dx[i * in + l] - f * sum) > (out + 4) * 0x1p-24 * f * mag + 1e-30 && ++wrong <= 3)
          FAIL_CHECK("dx[", i, "][", l, "] = ", dx[i * in + l], ", reference ", f * sum);
      }
    for (int64_t j = 0; j < out; ++j)
      for (int64_t l = 0; l < in; ++l) {  // dW = dy^T x
        double sum = 0.0, mag = 0.0;
        for (int64_t i = 0; i < rows; ++i) {
          sum += dyq[i * out + j] * xq[i * in + l];
          mag += std::fabs(dyq[i * out + j] * xq[i * in + l]);
        }
        const double f = static_cast<double>(inv_dy) * inv_x;
        if (std::fabs(dw[j * in + l] - f * sum) > (rows + 4) * 0x1p-24 * f * mag + 1e-30 && ++wrong <= 3)
          FAIL_CHECK("dw[", j, "][", l, "] = ", dw[j * in + l], ", reference ", f * sum);
      }
    for (int64_t j = 0; j < out; ++j) {  // db = sum of dy (exact here)
      double sum = 0.0;
      for (int64_t i = 0; i < rows; ++i) sum += cv[i * out + j];
      if (db[j] != sum && ++wrong <= 3) FAIL_CHECK("db[", j, "] = ", db[j], ", reference ", sum);
    }
    CHECK(wrong == 0);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    REQUIRE(ampx_tensor_set_grad(x, nullptr) == AMPX_OK);
    REQUIRE(ampx_tensor_set_grad(w, nullptr) == AMPX_OK);
    REQUIRE(ampx_tensor_set_grad(b, nullptr) == AMPX_OK);
    // The amaxes this step saw, then the update.
    float amax_x = 0.0f, amax_dy = 0.0f;
    for (float v : xv) amax_x = std::max(amax_x, std::fabs(v));
    for (float v : cv) amax_dy = std::max(amax_dy, std::fabs(v));
    ampx_fp8_slot_info info{};
    slot_named(recipe, "w:input", &info);
    CHECK(info.amax == amax_x);
    slot_named(recipe, "w:grad_output", &info);
    CHECK(info.amax == amax_dy);
    CHECK(info.dtype == AMPX_F8E5M2);
    REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
    slot_named(recipe, "w:input", &info);
    CHECK(info.scale == 448.0f / amax_x);
  }
  ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
  REQUIRE(ampx_autocast_fp8_stats(policy, &stats) == AMPX_OK);
  CHECK(stats.fp8_products == 2);
  CHECK(stats.fallbacks == 0);
  CHECK(std::string(stats.last_fallback).empty());
}

TEST_CASE("fp8 autocast: matmul of a batch by a 2-D weight, and a weight used twice") {
  Ctx ctx;
  std::mt19937 rng(9);
  const int64_t batch = 2, m = 16, k = 32, n = 16;
  const std::vector<float> av = values(batch * m * k, rng, 2.0f), bv = values(k * n, rng, 1.0f);
  const int64_t ashape[] = {batch, m, k};
  Tensor a;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 3, ashape, av.data(), av.size() * 4, a.out()) == AMPX_OK);
  Tensor b(matrix(ctx, k, n, bv, nullptr, true));
  Tensor a_half;  // a second use of b, with inputs half as large
  std::vector<float> hv(av);
  for (float& v : hv) v *= 0.5f;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 3, ashape, hv.data(), hv.size() * 4, a_half.out()) == AMPX_OK);
  Recipe recipe(ctx);
  Policy policy(ctx, recipe);
  Tensor y, y2;
  {
    Region region(policy);
    REQUIRE_MESSAGE(ampx_matmul(a, b, y.out()) == AMPX_OK, last_error());
    REQUIRE(ampx_matmul(a_half, b, y2.out()) == AMPX_OK);
  }
  // One weight, one set of slots ("#0": b has no name); the input's step
  // amax is the larger use's.
  int64_t count = 0;
  REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
  CHECK(count == 3);
  ampx_fp8_slot_info info{};
  slot_named(recipe, "#0:input", &info);
  float amax = 0.0f;
  for (float v : av) amax = std::max(amax, std::fabs(v));
  CHECK(info.amax == amax);
  int32_t ndim = 0;
  REQUIRE(ampx_tensor_ndim(y, &ndim) == AMPX_OK);
  CHECK(ndim == 3);
  const std::vector<double> aq = quantized(av, 1.0f, false), bq = quantized(bv, 1.0f, false);
  const std::vector<uint16_t> yv = download<uint16_t>(y);
  size_t wrong = 0;
  for (int64_t r = 0; r < batch * m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        sum += aq[r * k + l] * bq[l * n + j];
        mag += std::fabs(aq[r * k + l] * bq[l * n + j]);
      }
      if (std::fabs(bf16_value(yv[r * n + j]) - sum) > (k + 4) * 0x1p-24 * mag + std::fabs(sum) * 0x1p-8 &&
          ++wrong <= 3)
        FAIL_CHECK("y[", r, "][", j, "] = ", bf16_value(yv[r * n + j]), ", reference ", sum);
    }
  CHECK(wrong == 0);
}

TEST_CASE("fp8 autocast: small or unsupported products fall back to bf16, with the reason") {
  Ctx ctx;
  std::mt19937 rng(3);
  const std::vector<float> xv = values(16 * 32, rng, 1.0f), wv = values(16 * 32, rng, 1.0f);
  Tensor x(matrix(ctx, 16, 32, xv)), w(matrix(ctx, 16, 32, wv, "w"));
  Recipe recipe(ctx);
  // 16 * 16 * 32 = 8192 < 10000: bf16, bit for bit what plain autocast gives.
  Policy fp8(ctx, recipe, 10000);
  ampx_autocast_options plain_options = AMPX_AUTOCAST_OPTIONS_INIT;
  plain_options.dtype = AMPX_BF16;
  ampx_autocast plain = nullptr;
  REQUIRE(ampx_autocast_create(ctx, &plain_options, &plain) == AMPX_OK);
  Tensor y_fp8, y_plain;
  {
    Region region(fp8);
    REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_RELU, y_fp8.out()) == AMPX_OK);
  }
  {
    Region region(plain);
    REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_RELU, y_plain.out()) == AMPX_OK);
  }
  CHECK(download<uint16_t>(y_fp8) == download<uint16_t>(y_plain));
  ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
  REQUIRE(ampx_autocast_fp8_stats(fp8, &stats) == AMPX_OK);
  CHECK(stats.fp8_products == 0);
  CHECK(stats.fallbacks == 1);
  CHECK(contains(stats.last_fallback, "min_gemm_size"));
  int64_t count = -1;
  REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
  CHECK(count == 0);  // a fallback adds no slots
  // A vector operand: matmul in bf16, reason given.
  Tensor v(upload<float>(ctx, AMPX_F32, std::vector<float>(32, 0.5f)));
  Tensor y_vec;
  {
    Region region(fp8);
    REQUIRE(ampx_matmul(x, v, y_vec.out()) == AMPX_OK);
  }
  REQUIRE(ampx_autocast_fp8_stats(fp8, &stats) == AMPX_OK);
  CHECK(stats.fallbacks == 2);
  CHECK(contains(stats.last_fallback, "2-D b"));
  // A b computed by a recorded op (an activation, not a weight) stays in
  // bf16 and adds no slots: its tensor would be new at every step.
  Tensor leaf(matrix(ctx, 32, 16, values(32 * 16, rng, 1.0f), nullptr, true));
  Tensor made, y_made;
  REQUIRE(ampx_mul(leaf, leaf, made.out()) == AMPX_OK);
  Policy fp8_any(ctx, recipe, 0);
  {
    Region region(fp8_any);
    REQUIRE(ampx_matmul(x, made, y_made.out()) == AMPX_OK);
  }
  REQUIRE(ampx_autocast_fp8_stats(fp8_any, &stats) == AMPX_OK);
  CHECK(stats.fp8_products == 0);
  CHECK(stats.fallbacks == 1);
  CHECK(contains(stats.last_fallback, "recorded op"));
  REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
  CHECK(count == 0);
  // With grad mode off an op's output is not recorded: one that requires no
  // gradient stays in bf16 too, while a parameter still runs in FP8.
  {
    int32_t previous = 1, ignored = 0;
    REQUIRE(ampx_set_grad_enabled(ctx, 0, &previous) == AMPX_OK);
    Tensor unrecorded, y_unrecorded, y_param;
    REQUIRE(ampx_mul(leaf, leaf, unrecorded.out()) == AMPX_OK);
    {
      Region region(fp8_any);
      REQUIRE(ampx_matmul(x, unrecorded, y_unrecorded.out()) == AMPX_OK);
    }
    REQUIRE(ampx_autocast_fp8_stats(fp8_any, &stats) == AMPX_OK);
    CHECK(stats.fp8_products == 0);
    CHECK(stats.fallbacks == 2);
    CHECK(contains(stats.last_fallback, "grad mode is off"));
    REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
    CHECK(count == 0);
    {
      Region region(fp8_any);
      REQUIRE(ampx_matmul(x, leaf, y_param.out()) == AMPX_OK);
    }
    REQUIRE(ampx_autocast_fp8_stats(fp8_any, &stats) == AMPX_OK);
    CHECK(stats.fp8_products == 1);
    CHECK(stats.fallbacks == 2);
    REQUIRE(ampx_set_grad_enabled(ctx, previous, &ignored) == AMPX_OK);
  }
  // An op class override keeps linear out of FP8 altogether.
  Policy fp8_all(ctx, recipe, 0);
  REQUIRE(ampx_autocast_set_op_class(fp8_all, "linear", AMPX_OP_FP32) == AMPX_OK);
  Tensor y32;
  {
    Region region(fp8_all);
    REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, y32.out()) == AMPX_OK);
  }
  ampx_dtype type = static_cast<ampx_dtype>(0);
  REQUIRE(ampx_tensor_dtype(y32, &type) == AMPX_OK);
  CHECK(type == AMPX_F32);
  // On a GPU, shapes cuBLASLt's FP8 kernels refuse (not multiples of 16).
  if (ampx_test::test_device() == AMPX_DEVICE_CUDA) {
    Tensor odd(matrix(ctx, 12, 32, values(12 * 32, rng, 1.0f)));
    Tensor y_odd;
    {
      Region region(fp8_all);
      REQUIRE(ampx_autocast_set_op_class(fp8_all, "linear", AMPX_OP_LOWER_PRECISION) == AMPX_OK);
      REQUIRE(ampx_linear(odd, w, nullptr, AMPX_ACTIVATION_NONE, y_odd.out()) == AMPX_OK);
    }
    REQUIRE(ampx_autocast_fp8_stats(fp8_all, &stats) == AMPX_OK);
    CHECK(contains(stats.last_fallback, "multiples of 16"));
  }
  ampx_autocast_release(plain);
}

TEST_CASE("fp8 autocast: bad FP8 settings are refused and change nothing") {
  Ctx ctx;
  Recipe recipe(ctx);
  Policy policy(ctx, recipe, 12345);
  Recipe second(ctx);
  CHECK_FAILS_WITH(ampx_autocast_set_fp8(policy, second, -1), AMPX_ERR_INVALID_ARGUMENT,
                   "min_gemm_size");
  Ctx other;
  Recipe elsewhere(other);
  CHECK_FAILS_WITH(ampx_autocast_set_fp8(policy, elsewhere, 0), AMPX_ERR_DEVICE, "another context");
  // Still the first recipe and threshold: a small product falls back for it.
  Tensor x(matrix(ctx, 16, 16, std::vector<float>(256, 1.0f)));
  Tensor y;
  {
    Region region(policy);
    REQUIRE(ampx_linear(x, x, nullptr, AMPX_ACTIVATION_NONE, y.out()) == AMPX_OK);
  }
  ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
  REQUIRE(ampx_autocast_fp8_stats(policy, &stats) == AMPX_OK);
  CHECK(contains(stats.last_fallback, "12345"));
  // NULL makes it a plain bf16 policy again.
  REQUIRE(ampx_autocast_set_fp8(policy, nullptr, 0) == AMPX_OK);
  {
    Region region(policy);
    REQUIRE(ampx_linear(x, x, nullptr, AMPX_ACTIVATION_NONE, y.out()) == AMPX_OK);
  }
  REQUIRE(ampx_autocast_fp8_stats(policy, &stats) == AMPX_OK);
  CHECK(stats.fallbacks == 1);
  CHECK(stats.fp8_products == 0);
  stats.struct_size = 0;
  CHECK(ampx_autocast_fp8_stats(policy, &stats) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("fp8 autocast: recipe state round-trips through a checkpoint file") {
  Ctx ctx;
  ampx_test::TempDir dir;
  const std::string path = dir.file("fp8.ckpt");
  std::mt19937 rng(21);
  Tensor x(matrix(ctx, 16, 32, values(16 * 32, rng, 2.0f)));
  Tensor w(matrix(ctx, 16, 32, values(16 * 32, rng, 1.0f), "fc.weight", true));
  Recipe recipe(ctx, 8);
  Policy policy(ctx, recipe);
  for (int step = 0; step < 3; ++step) {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, loss = nullptr;
    {
      Region region(policy);
      REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, &y) == AMPX_OK);
      REQUIRE(ampx_sum(y, &loss) == AMPX_OK);
    }
    REQUIRE(ampx_backward(loss, nullptr) == AMPX_OK);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
  }
  const ampx_tensor params[] = {w};
  REQUIRE_MESSAGE(ampx_checkpoint_file_save_fp8(path.c_str(), params, 1, nullptr, nullptr, recipe) ==
                      AMPX_OK,
                  last_error());
  // The plain loader reads the file, skipping the recipe.
  REQUIRE_MESSAGE(ampx_checkpoint_file_load(path.c_str(), params, 1, nullptr, nullptr) == AMPX_OK,
                  last_error());
  // A fresh recipe: the saved slots come back as restored ones, which the
  // weight's first FP8 use takes over (same names), with their histories.
  Recipe fresh(ctx, 8);
  REQUIRE_MESSAGE(ampx_checkpoint_file_load_fp8(path.c_str(), params, 1, nullptr, nullptr, fresh) ==
                      AMPX_OK,
                  last_error());
  int64_t count = 0;
  REQUIRE(ampx_fp8_recipe_slot_count(fresh, &count) == AMPX_OK);
  CHECK(count == 3);
  for (const char* name : {"fc.weight:input", "fc.weight:weight", "fc.weight:grad_output"}) {
    CAPTURE(name);
    ampx_fp8_slot_info a{}, b{};
    const int64_t sa = slot_named(recipe, name, &a), sb = slot_named(fresh, name, &b);
    CHECK(a.scale == b.scale);
    CHECK(a.scale_inv == b.scale_inv);
    CHECK(a.role == b.role);
    std::vector<float> ha(8), hb(8);
    REQUIRE(ampx_fp8_recipe_slot_get(recipe, sa, &a, ha.data(), 8) == AMPX_OK);
    REQUIRE(ampx_fp8_recipe_slot_get(fresh, sb, &b, hb.data(), 8) == AMPX_OK);
    CHECK(ha == hb);
  }
  Policy resumed(ctx, fresh);
  Tensor y;
  {
    Region region(resumed);
    REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, y.out()) == AMPX_OK);
  }
  REQUIRE(ampx_fp8_recipe_slot_count(fresh, &count) == AMPX_OK);
  CHECK(count == 3);  // claimed, not added
  // Bad loads change nothing: other options, a file without a recipe.
  Recipe other(ctx, 4);
  CHECK_FAILS_WITH(ampx_checkpoint_file_load_fp8(path.c_str(), params, 1, nullptr, nullptr, other),
                   AMPX_ERR_INVALID_ARGUMENT, "other options");
  REQUIRE(ampx_fp8_recipe_slot_count(other, &count) == AMPX_OK);
  CHECK(count == 0);
  const std::string plain = dir.file("plain.ckpt");
  REQUIRE(ampx_checkpoint_file_save(plain.c_str(), params, 1, nullptr, nullptr) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_checkpoint_file_load_fp8(plain.c_str(), params, 1, nullptr, nullptr, other),
                   AMPX_ERR_INVALID_ARGUMENT, "no FP8 recipe");
}

TEST_CASE("fp8 doctor: the fractions a scale flushes and saturates, and the summary") {
  Ctx ctx;
  Recipe recipe(ctx, 4);
  int64_t slot = -1;
  REQUIRE(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_FORWARD, "acts", &slot) == AMPX_OK);
  // Scale 1: E4M3 flushes below 2^-10 (half its smallest subnormal, a tie
  // to 0) and saturates above 464; E5M2 flushes below 2^-17, saturates
  // above 61440.
  const std::vector<float> v = {0.0f,  1e-4f, 2e-6f, 5e-6f, 1.0f, 300.0f,  500.0f,
                                -1e4f, 7e4f,  -1e5f, std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
  Tensor t(upload<float>(ctx, AMPX_F32, v));
  ampx_fp8_tensor_report r = AMPX_FP8_TENSOR_REPORT_INIT;
  REQUIRE_MESSAGE(ampx_doctor_fp8_inspect(recipe, slot, t, &r) == AMPX_OK, last_error());
  // Non-zero finite: 1e-4 2e-6 5e-6 1 300 500 -1e4 7e4 -1e5 (9).
  CHECK(r.count == 9);
  CHECK(r.flushed_e4m3 == doctest::Approx(3.0 / 9));   // 1e-4, 2e-6, 5e-6
  CHECK(r.saturated_e4m3 == doctest::Approx(4.0 / 9)); // 500, -1e4, 7e4, -1e5
  CHECK(r.flushed_e5m2 == doctest::Approx(2.0 / 9));   // 2e-6, 5e-6 (below 2^-17)
  CHECK(r.saturated_e5m2 == doctest::Approx(2.0 / 9)); // 7e4, -1e5
  CHECK(r.scale == 1.0f);
  CHECK(r.dtype == AMPX_F8E4M3);
  const char* text = nullptr;
  REQUIRE(ampx_doctor_fp8_summary(recipe, &text) == AMPX_OK);
  CHECK(contains(text, "acts"));
  CHECK(contains(text, "e4m3"));
  Tensor ints(upload<int32_t>(ctx, AMPX_I32, {1}));
  CHECK_FAILS_WITH(ampx_doctor_fp8_inspect(recipe, slot, ints, &r), AMPX_ERR_DTYPE, "tensor");
  CHECK_FAILS_WITH(ampx_doctor_fp8_inspect(recipe, 5, t, &r), AMPX_ERR_INVALID_ARGUMENT, "slot");
}

namespace {

// Gaussian blobs: 16 classes in 32 dimensions, class means of norm about 3.
struct Blobs {
  std::vector<float> x;
  std::vector<int32_t> labels;
};

Blobs make_blobs(const std::vector<float>& means, int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Blobs b;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t label = static_cast<int32_t>(rng() % 16);
    b.labels.push_back(label);
    for (int d = 0; d < 32; ++d) b.x.push_back(means[label * 32 + d] + noise(rng));
  }
  return b;
}

// Trains a 32 -> 64 -> 64 -> 16 MLP (ReLU) with AdamW under `policy` and
// returns its accuracy on `test` (evaluated under the same policy).
double train_classifier(ampx_context ctx, ampx_autocast policy, ampx_fp8_recipe recipe,
                        const Blobs& train, const Blobs& test) {
  const int64_t dims[][2] = {{64, 32}, {64, 64}, {16, 64}};
  std::mt19937 rng(1234);
  std::vector<Tensor> params(6);
  for (int l = 0; l < 3; ++l) {
    const float bound = std::sqrt(6.0f / static_cast<float>(dims[l][1]));
    params[2 * l].handle = matrix(ctx, dims[l][0], dims[l][1],
                                  values(static_cast<size_t>(dims[l][0] * dims[l][1]), rng, bound),
                                  ("w" + std::to_string(l)).c_str(), true);
    params[2 * l + 1].handle = upload<float>(ctx, AMPX_F32, std::vector<float>(dims[l][0], 0.0f));
    REQUIRE(ampx_tensor_set_requires_grad(params[2 * l + 1], 1) == AMPX_OK);
  }
  ampx_tensor handles[6];
  for (int i = 0; i < 6; ++i) handles[i] = params[i];
  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  adam.lr = 3e-3;
  ampx_optimizer opt = nullptr;
  REQUIRE(ampx_optimizer_create_adam(ctx, handles, 6, &adam, &opt) == AMPX_OK);
  const int64_t batch = 128;
  const int64_t train_rows = static_cast<int64_t>(train.labels.size());
  const auto forward = [&](ampx_tensor x, ampx_tensor* logits) {
    ampx_tensor h = x;
    for (int l = 0; l < 3; ++l)
      REQUIRE_MESSAGE(ampx_linear(h, params[2 * l], params[2 * l + 1],
                                  l < 2 ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE, &h) == AMPX_OK,
                      last_error());
    *logits = h;
  };
  for (int step = 0; step < 120; ++step) {
    const int64_t first = (step * batch) % train_rows;
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
    std::vector<float> xb(train.x.begin() + first * 32, train.x.begin() + (first + batch) * 32);
    std::vector<int32_t> yb(train.labels.begin() + first, train.labels.begin() + first + batch);
    ampx_tensor x = matrix(ctx, batch, 32, xb);
    ampx_tensor labels = upload<int32_t>(ctx, AMPX_I32, yb);
    ampx_tensor logits = nullptr, loss = nullptr;
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    forward(x, &logits);
    REQUIRE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -100, &loss) == AMPX_OK);
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    if (recipe) REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
    ampx_tensor_release(x);
    ampx_tensor_release(labels);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const int64_t test_rows = static_cast<int64_t>(test.labels.size());
  ampx_tensor x = matrix(ctx, test_rows, 32, test.x);
  ampx_tensor logits = nullptr, as_f32 = nullptr;
  REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
  forward(x, &logits);
  REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
  REQUIRE(ampx_tensor_cast(logits, AMPX_F32, &as_f32) == AMPX_OK);
  const std::vector<float> out = download<float>(as_f32);
  int64_t correct = 0;
  for (int64_t i = 0; i < test_rows; ++i) {
    const float* row = out.data() + i * 16;
    correct += std::max_element(row, row + 16) - row == test.labels[static_cast<size_t>(i)];
  }
  ampx_tensor_release(as_f32);
  ampx_tensor_release(x);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_optimizer_release(opt);
  return static_cast<double>(correct) / static_cast<double>(test_rows);
}

}  // namespace

TEST_CASE("fp8 autocast: an MLP classifier trained in FP8 reaches bf16's accuracy within 1 point") {
  Ctx ctx;
  std::mt19937 rng(77);
  std::vector<float> means(16 * 32);
  for (float& m : means) m = std::normal_distribution<float>(0.0f, 0.55f)(rng);
  const Blobs train = make_blobs(means, 128 * 24, rng), test = make_blobs(means, 1024, rng);
  ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
  o.dtype = AMPX_BF16;
  ampx_autocast bf16 = nullptr;
  REQUIRE(ampx_autocast_create(ctx, &o, &bf16) == AMPX_OK);
  const double bf16_accuracy = train_classifier(ctx, bf16, nullptr, train, test);
  ampx_autocast_release(bf16);
  Recipe recipe(ctx);
  Policy fp8(ctx, recipe);
  const double fp8_accuracy = train_classifier(ctx, fp8, recipe, train, test);
  MESSAGE("test accuracy: bf16 ", bf16_accuracy, ", fp8 ", fp8_accuracy);
  CHECK(bf16_accuracy > 0.6);  // the task is learnt, so the comparison means something
  CHECK(fp8_accuracy >= bf16_accuracy - 0.01);
  ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
  REQUIRE(ampx_autocast_fp8_stats(fp8, &stats) == AMPX_OK);
  CHECK(stats.fp8_products == 3 * 121);
  CHECK(stats.fallbacks == 0);
}

TEST_CASE("fp8 autocast: which gradients a product computes is decided at the forward") {
  // x requires no gradient at the forward, then does before backward: the
  // product prepared no dgrad (on a TN-only device no transposed copy of
  // the weight was kept for it), so x gets none, as torch's graph has no
  // edge to it; W's gradient is the one of an unchanged run.
  std::mt19937 rng(17);
  const int64_t rows = 16, in = 32, out = 16;
  const std::vector<float> xv = values(rows * in, rng, 2.0f), wv = values(out * in, rng, 0.5f);
  std::vector<std::vector<float>> dw(2);
  for (int change : {0, 1}) {
    CAPTURE(change);
    Ctx ctx;
    Recipe recipe(ctx);
    Policy policy(ctx, recipe);
    Tensor x(matrix(ctx, rows, in, xv, "x", false)), w(matrix(ctx, out, in, wv, "w", true));
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, loss = nullptr;
    {
      Region region(policy);
      REQUIRE_MESSAGE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, &y) == AMPX_OK, last_error());
      REQUIRE(ampx_sum(y, &loss) == AMPX_OK);
    }
    if (change) REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    ampx_tensor gx = nullptr, gw = nullptr;
    REQUIRE(ampx_tensor_grad(x, &gx) == AMPX_OK);
    REQUIRE(ampx_tensor_grad(w, &gw) == AMPX_OK);
    CHECK(gx == nullptr);
    REQUIRE(gw != nullptr);
    dw[static_cast<size_t>(change)] = download<float>(gw);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  CHECK(dw[0] == dw[1]);
}

TEST_CASE("fp8 autocast: create_graph through FP8 products, with the formulas in bf16") {
  // L = sum(act(x W^T + b) * c). The gradients a backward with create_graph
  // returns are recorded, so S = sum(dL/dx * v) can be differentiated by W.
  // Without an activation dS/dW = c^T v (c and v multiples of 1/8, exact
  // in bf16, the sums exact in fp32, the result rounded to bf16); with GELU, against central
  // differences of the double formula, within FP8's rounding of Z (the
  // forward's, which the formula reads) and bf16's: 6% of the largest
  // element, while a missing term is off by O(1).
  std::mt19937 rng(23);
  const int64_t rows = 16, in = 16, out = 16;
  const std::vector<float> xv = values(rows * in, rng, 1.5f), wv = values(out * in, rng, 0.5f);
  const std::vector<float> bv = values(out, rng, 0.5f);
  std::vector<float> cv(rows * out), vv(rows * in);
  for (float& c : cv) c = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 8.0f;
  for (float& v : vv) v = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 8.0f;
  const auto gelu = [](double z) { return 0.5 * z * std::erfc(-z / std::sqrt(2.0)); };
  for (const ampx_activation act : {AMPX_ACTIVATION_NONE, AMPX_ACTIVATION_GELU}) {
    CAPTURE(act);
    const bool g = act == AMPX_ACTIVATION_GELU;
    // S(W) = sum_il v_il dL/dx_il in double, dL/dx = (c act'(z)) W.
    const auto s_of = [&](const std::vector<double>& w) {
      double s = 0.0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < out; ++j) {
          double z = bv[j];
          for (int64_t l = 0; l < in; ++l) z += xv[i * in + l] * w[j * in + l];
          const double h = 1e-5;
          const double d = g ? (gelu(z + h) - gelu(z - h)) / (2 * h) : 1.0;
          for (int64_t l = 0; l < in; ++l) s += vv[i * in + l] * cv[i * out + j] * d * w[j * in + l];
        }
      return s;
    };
    std::vector<double> w0(wv.begin(), wv.end()), want(w0.size());
    for (size_t k = 0; k < w0.size(); ++k) {
      if (!g) {
        const int64_t j = static_cast<int64_t>(k) / in, l = static_cast<int64_t>(k) % in;
        double sum = 0.0;
        for (int64_t i = 0; i < rows; ++i) sum += cv[i * out + j] * vv[i * in + l];
        want[k] = sum;
        continue;
      }
      std::vector<double> up = w0, down = w0;
      up[k] += 1e-3, down[k] -= 1e-3;
      want[k] = (s_of(up) - s_of(down)) / 2e-3;
    }
    double top = 0.0;
    for (double x : want) top = std::max(top, std::fabs(x));

    Ctx ctx;
    Recipe recipe(ctx);
    Policy policy(ctx, recipe);
    Tensor x(matrix(ctx, rows, in, xv, "x", true)), w(matrix(ctx, out, in, wv, "w", true));
    Tensor c(matrix(ctx, rows, out, cv)), v(matrix(ctx, rows, in, vv));
    const int64_t bshape[] = {out};
    Tensor b;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 1, bshape, bv.data(), bv.size() * 4, b.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_set_requires_grad(b, 1) == AMPX_OK);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, prod = nullptr, loss = nullptr;
    {
      Region region(policy);
      REQUIRE_MESSAGE(ampx_linear(x, w, b, act, &y) == AMPX_OK, last_error());
      REQUIRE(ampx_mul(y, c, &prod) == AMPX_OK);
      REQUIRE(ampx_sum(prod, &loss) == AMPX_OK);
    }
    ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
    REQUIRE(ampx_autocast_fp8_stats(policy, &stats) == AMPX_OK);
    REQUIRE(stats.fp8_products == 1);
    // First order, both ways: the FP8 backward and the bf16 formulas agree
    // within FP8's rounding (E5M2 dy, E4M3 operands: 2^-3 relative).
    const ampx_tensor params[3] = {x, w, b};
    ampx_tensor first[3] = {}, graph[3] = {};
    ampx_grad_options keep = AMPX_GRAD_OPTIONS_INIT;
    keep.retain_graph = 1;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, params, 3, &keep, first) == AMPX_OK, last_error());
    ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
    o.create_graph = 1;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, params, 3, &o, graph) == AMPX_OK, last_error());
    for (int k = 0; k < 3; ++k) {
      CAPTURE(k);
      ampx_dtype dt = static_cast<ampx_dtype>(0);
      REQUIRE(ampx_tensor_dtype(graph[k], &dt) == AMPX_OK);
      CHECK(dt == AMPX_F32);  // the inputs' dtype
      int32_t recorded = 0;
      REQUIRE(ampx_tensor_requires_grad(graph[k], &recorded) == AMPX_OK);
      CHECK(recorded == (k < 2 || g ? 1 : 0));  // without GELU dbias is the constant sum of c
      const std::vector<float> a = download<float>(first[k]), d = download<float>(graph[k]);
      float m = 0.0f;
      for (float e : a) m = std::max(m, std::fabs(e));
      for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - d[i]) <= 0.2f * m);
    }
    // Second order: S = sum(dL/dx * v), differentiated by W.
    ampx_tensor sv = nullptr, s = nullptr, h = nullptr;
    REQUIRE(ampx_mul(graph[0], v, &sv) == AMPX_OK);
    REQUIRE(ampx_sum(sv, &s) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &w.handle, 1, nullptr, &h) == AMPX_OK, last_error());
    const std::vector<float> hv = download<float>(h);
    REQUIRE(hv.size() == want.size());
    size_t wrong = 0;
    for (size_t k = 0; k < hv.size(); ++k) {
      const double tol = g ? 0.06 * top : std::fabs(want[k]) * 0x1p-8;  // rounded to bf16 once
      if (std::fabs(hv[k] - want[k]) > tol && ++wrong <= 3)
        FAIL_CHECK("dS/dW[", k, "] = ", hv[k], ", reference ", want[k]);
    }
    CHECK(wrong == 0);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}
