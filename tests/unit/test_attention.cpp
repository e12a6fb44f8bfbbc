// test_attention.cpp -- ampx_scaled_dot_product_attention (ampx.h section
// 11) through the C API, on the test device, against a reference written
// here in double precision from torch's definition of
// scaled_dot_product_attention (softmax(scale * q k^T + mask) v, dropout
// on the weights) and the textbook softmax gradient, never from the
// library's math headers.
//
// Tolerances. ampx keeps scores, statistics and sums in fp32: a value or
// gradient is a sum of up to Tk (or H / Hkv * Tq) products, each rounded
// about 2^-24 relatively, so errors stay near 1e-6 of the largest term.
// f32 must agree to 1e-4 relative plus 1e-5 of the tensor's largest
// element or 1, the inputs' scale. For f16 and bf16 the reference runs on the inputs rounded to the
// type, and ampx rounds the result once more (and its backward reads the
// rounded output), so the bound is a few units in the last place of the
// type: 4 ulps relative plus 4 ulps of the largest element. A wrong formula
// (a missed scale, a mask applied after the softmax, a transposed head
// mapping) is off by O(1).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::make;
using ampx_fixture::round_to;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;
using Rng = ampx_fixture::Rng;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  Case(int64_t b, int64_t h, int64_t hkv, int64_t tq, int64_t tk, int64_t d, int64_t dv,
       bool causal_ = false, Dims mask = {}, double scale_ = 0.0)
      : batch(b), heads(h), kv_heads(hkv), q_len(tq), kv_len(tk), head_dim(d), value_dim(dv),
        causal(causal_), mask_dims(std::move(mask)), scale(scale_) {}
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  bool causal;
  Dims mask_dims;  // empty: no mask
  double scale;
  // The tensors' layout: [B, H, T, D] at rank 4, or [leading..., H, T, D]
  // when `leading` is given (its product is B); [H, T, D] (B 1) at rank 3,
  // [T, D] (B and H 1) at rank 2.
  int rank = 4;
  Dims leading;
  bool int_mask = false;  // the mask as I64, torch's boolean: 0 where -inf
};

// The dims of a q, k, v or out tensor of case c with `heads` heads.
Dims tensor_dims(const Case& c, int64_t heads, int64_t len, int64_t dim) {
  Dims dims;
  if (c.rank >= 4) dims = c.leading.empty() ? Dims{c.batch} : c.leading;
  if (c.rank >= 3) dims.push_back(heads);
  dims.push_back(len);
  dims.push_back(dim);
  return dims;
}

std::string describe(const Case& c) {
  std::string s = "B" + std::to_string(c.batch) + " H" + std::to_string(c.heads) + "/" +
                  std::to_string(c.kv_heads) + " Tq" + std::to_string(c.q_len) + " Tk" +
                  std::to_string(c.kv_len) + " D" + std::to_string(c.head_dim) + "/" +
                  std::to_string(c.value_dim);
  if (c.causal) s += " causal";
  s += " rank " + std::to_string(c.rank) + (c.int_mask ? " int mask" : "");
  if (!c.mask_dims.empty()) {
    s += " mask[";
    for (int64_t d : c.mask_dims) s += std::to_string(d) + ",";
    s += "]";
  }
  return s;
}

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

// The reference's inputs and results, all double, [B, H, T, D] row-major.
struct Reference {
  Vec out, dq, dk, dv;
};

// mask value of (b, h, i, j) for a mask of mask_dims, right-aligned with
// the scores of the case's layout (b split over the leading extents).
double mask_at(const Case& c, const Vec& mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (c.mask_dims.empty()) return 0.0;
  Dims full = tensor_dims(c, c.heads, c.q_len, c.kv_len), at(full.size());
  at[at.size() - 1] = j, at[at.size() - 2] = i;
  if (c.rank >= 3) at[at.size() - 3] = h;
  for (size_t d = full.size() - (c.rank >= 3 ? 3 : 2); d-- > 0;) {
    at[d] = b % full[d];
    b /= full[d];
  }
  const size_t nd = c.mask_dims.size();
  int64_t index = 0;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t extent = c.mask_dims[d];
    index = index * extent + (extent == 1 ? 0 : at[full.size() - nd + d]);
  }
  return mask[static_cast<size_t>(index)];
}

// out = softmax(scale q k^T + mask) (weights times drop) v and, for
// L = sum(out * r), the gradients of q, k and v. drop (empty: none) holds
// the dropout factor of each weight, [B, H, Tq, Tk].
Reference reference(const Case& c, const Vec& q, const Vec& k, const Vec& v, const Vec& mask,
                    const Vec& r, const Vec& drop) {
  const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(double(c.head_dim));
  const int64_t group = c.heads / c.kv_heads, D = c.head_dim, Dv = c.value_dim;
  Reference ref;
  ref.out.assign(count_of({c.batch, c.heads, c.q_len, Dv}), 0.0);
  ref.dq.assign(q.size(), 0.0);
  ref.dk.assign(k.size(), 0.0);
  ref.dv.assign(v.size(), 0.0);
  Vec p(static_cast<size_t>(c.kv_len)), dp(p.size());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < c.q_len; ++i) {
        const size_t qi = static_cast<size_t>(((b * c.heads + h) * c.q_len + i) * D);
        const size_t oi = static_cast<size_t>(((b * c.heads + h) * c.q_len + i) * Dv);
        double max = -kInf;
        for (int64_t j = 0; j < c.kv_len; ++j) {
          const size_t kj = static_cast<size_t>(((b * c.kv_heads + g) * c.kv_len + j) * D);
          double s = -kInf;
          if (!(c.causal && j > i)) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) dot += q[qi + d] * k[kj + d];
            s = scale * dot + mask_at(c, mask, b, h, i, j);
          }
          p[j] = s;
          max = std::max(max, s);
        }
        if (max == -kInf) continue;  // every key excluded: zeros
        double sum = 0.0;
        for (double& x : p) sum += (x = std::exp(x - max));
        for (double& x : p) x /= sum;
        const size_t drow = static_cast<size_t>(((b * c.heads + h) * c.q_len + i) * c.kv_len);
        // out_i = sum_j p_j z_j v_j; dp_j = z_j r_i . v_j
        double delta = 0.0;
        for (int64_t j = 0; j < c.kv_len; ++j) {
          const double z = drop.empty() ? 1.0 : drop[drow + j];
          const size_t vj = static_cast<size_t>(((b * c.kv_heads + g) * c.kv_len + j) * Dv);
          double rv = 0.0;
          for (int64_t d = 0; d < Dv; ++d) {
            ref.out[oi + d] += p[j] * z * v[vj + d];
            ref.dv[vj + d] += p[j] * z * r[oi + d];
            rv += r[oi + d] * v[vj + d];
          }
          dp[j] = z * rv;
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j < c.kv_len; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          const size_t kj = static_cast<size_t>(((b * c.kv_heads + g) * c.kv_len + j) * D);
          for (int64_t d = 0; d < D; ++d) {
            ref.dq[qi + d] += ds * k[kj + d];
            ref.dk[kj + d] += ds * q[qi + d];
          }
        }
      }
    }
  return ref;
}

double largest(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The relative size of one unit in the last place of dtype's values.
double ulp(ampx_dtype dtype) {
  return dtype == AMPX_F16 ? 0x1p-10 : dtype == AMPX_BF16 ? 0x1p-7 : 0.0;
}

void check_close(const char* what, ampx_dtype dtype, const Vec& have, const Vec& want) {
  REQUIRE(have.size() == want.size());
  const double rtol = dtype == AMPX_F32 ? 1e-4 : 4 * ulp(dtype);
  // Relative to the inputs' scale (1) too: a gradient that cancels to 0
  // exactly (a row with a single key) comes out at rounding size.
  const double atol = (dtype == AMPX_F32 ? 1e-5 : 4 * ulp(dtype)) * std::max(largest(want), 1.0);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(have[i] - want[i]) <= rtol * std::fabs(want[i]) + atol) && bad++ == 0)
      first = i;
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", want.size(), " differ; first at ", first,
                ": ", (bad ? have[first] : 0.0), " vs ", (bad ? want[first] : 0.0));
}

Vec rounded(ampx_dtype dtype, Vec v) {
  for (double& x : v) x = round_to(dtype, x);
  return v;
}

ampx_tensor grad_of(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  return g;
}

// Mask values: mostly small offsets, some -inf (never a whole row unless
// the case asks for it).
Vec mask_values(Rng& rng, const Case& c) {
  Vec m = rng.vector(count_of(c.mask_dims), -2, 2);
  for (size_t i = 0; i < m.size(); ++i)
    if (rng.uniform(0, 1) < 0.2) m[i] = -kInf;
  // Keep column 0 finite so that every row sees at least one key.
  const int64_t tk = c.mask_dims.back();
  for (size_t i = 0; i < m.size(); i += static_cast<size_t>(tk)) m[i] = 0.5;
  return m;
}

struct Run {
  Vec out, dq, dk, dv;
  ampx_dtype out_dtype = AMPX_F32;
};

// Runs attention and backward of sum(out * r) on the test device.
Run run_attention(ampx_context ctx, const Case& c, ampx_dtype dtype, const Vec& q, const Vec& k,
                  const Vec& v, const Vec& mask, const Vec& r, double dropout_p = 0.0) {
  Tensor tq(make(ctx, dtype, tensor_dims(c, c.heads, c.q_len, c.head_dim), q, true));
  Tensor tk(make(ctx, dtype, tensor_dims(c, c.kv_heads, c.kv_len, c.head_dim), k, true));
  Tensor tv(make(ctx, dtype, tensor_dims(c, c.kv_heads, c.kv_len, c.value_dim), v, true));
  Tensor tm;
  if (c.int_mask) {
    Vec set(mask.size());
    for (size_t i = 0; i < mask.size(); ++i) set[i] = mask[i] == -kInf ? 0.0 : 7.0;
    tm.handle = make(ctx, AMPX_I64, c.mask_dims, set);
  } else if (!c.mask_dims.empty()) {
    tm.handle = make(ctx, dtype, c.mask_dims, mask);
  }
  const Dims out_dims = tensor_dims(c, c.heads, c.q_len, c.value_dim);
  Tensor tr(make(ctx, dtype, out_dims, r));
  ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
  o.causal = c.causal;
  o.scale = c.scale;
  o.dropout_p = dropout_p;
  Tensor out, weighted, loss;
  REQUIRE_MESSAGE(ampx_scaled_dot_product_attention(tq, tk, tv, tm, &o, out.out()) == AMPX_OK,
                  last_error());
  REQUIRE(ampx_mul(out, tr, weighted.out()) == AMPX_OK);
  REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  Run run;
  CHECK(ampx_fixture::dims_of(out) == out_dims);
  run.out_dtype = dtype_of(out);
  run.out = values_of(out);
  run.dq = values_of(grad_of(tq));
  run.dk = values_of(grad_of(tk));
  run.dv = values_of(grad_of(tv));
  return run;
}

void check_case(ampx_context ctx, const Case& c, ampx_dtype dtype, uint64_t seed) {
  INFO((describe(c) + " " + ampx_dtype_name(dtype)));
  Rng rng(seed);
  const Vec q = rounded(dtype, rng.vector(count_of({c.batch, c.heads, c.q_len, c.head_dim}), -1, 1));
  const Vec k =
      rounded(dtype, rng.vector(count_of({c.batch, c.kv_heads, c.kv_len, c.head_dim}), -1, 1));
  const Vec v =
      rounded(dtype, rng.vector(count_of({c.batch, c.kv_heads, c.kv_len, c.value_dim}), -1, 1));
  Vec mask = c.mask_dims.empty() ? Vec() : rounded(dtype, mask_values(rng, c));
  if (c.int_mask)
    for (double& m : mask) m = m == -kInf ? -kInf : 0.0;
  const Vec r = rounded(dtype, rng.vector(count_of({c.batch, c.heads, c.q_len, c.value_dim}), -1, 1));
  const Run run = run_attention(ctx, c, dtype, q, k, v, mask, r);
  CHECK(run.out_dtype == dtype);
  Reference ref = reference(c, q, k, v, mask, r, {});
  check_close("out", dtype, run.out, ref.out);
  check_close("dq", dtype, run.dq, ref.dq);
  check_close("dk", dtype, run.dk, ref.dk);
  check_close("dv", dtype, run.dv, ref.dv);
}

}  // namespace

TEST_CASE("attention: forward and gradients match a double reference") {
  Ctx ctx;
  const bool emulated = ampx_test::test_device() == AMPX_DEVICE_CUDA &&
#if defined(AMPX_CUDA_EMULATED)
                        true;
#else
                        false;
#endif
  std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 8, 8},
      {2, 2, 2, 17, 17, 32, 32, true},
      {1, 4, 2, 33, 33, 64, 64, true},          // grouped heads, odd T
      {2, 4, 1, 9, 21, 16, 24},                 // one key/value head, Tq < Tk, Dv != D
      {1, 2, 2, 21, 9, 32, 32, true},           // causal with Tq > Tk
      {2, 2, 2, 13, 19, 32, 32, false, {13, 19}},        // [Tq, Tk] mask
      {2, 2, 1, 7, 11, 16, 16, false, {2, 1, 1, 11}},    // key padding [B, 1, 1, Tk]
      {1, 3, 3, 10, 10, 16, 16, false, {1, 3, 10, 10}},  // per-head [1, H, Tq, Tk]
      {1, 1, 1, 18, 18, 128, 128, true},
      {1, 2, 2, 16, 16, 32, 32, false, {}, 0.3},  // explicit scale
  };
  if (!emulated) cases.push_back({1, 2, 1, 129, 129, 64, 64, true});
  uint64_t seed = 1;
  for (const Case& c : cases) check_case(ctx, c, AMPX_F32, seed++);
  // On CUDA, f16 and bf16 run on the tensor cores: these also cross their
  // 64-row blocks and 16- and 32-row steps, partly, both ways.
  for (ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    check_case(ctx, {1, 4, 2, 33, 33, 64, 64, true}, dtype, seed++);
    check_case(ctx, {2, 2, 2, 13, 19, 32, 32, false, {13, 19}}, dtype, seed++);
    check_case(ctx, {1, 1, 1, 17, 17, 128, 128}, dtype, seed++);
    check_case(ctx, {1, 2, 1, 130, 71, 64, 64, false, {1, 1, 130, 71}}, dtype, seed++);
    check_case(ctx, {1, 2, 2, 129, 129, 40, 40, true}, dtype, seed++);
    check_case(ctx, {1, 2, 2, 20, 20, 12, 12, true}, dtype, seed++);  // tiled: D not a multiple of 8
  }
}

// torch's other layouts: leading extents of any number ([B1, B2, H, T, D],
// [H, T, D], [T, D]) with masks broadcasting over them, and an integer mask
// read as torch's boolean one (non-zero: the key takes part).
TEST_CASE("attention: any leading extents, and integer masks as booleans") {
  Ctx ctx;
  auto with = [](Case c, int rank, Dims leading, bool int_mask) {
    c.rank = rank, c.leading = std::move(leading), c.int_mask = int_mask;
    return c;
  };
  const std::vector<Case> cases = {
      with({1, 4, 2, 9, 11, 16, 16, true}, 3, {}, false),         // [H, T, D], grouped
      with({1, 1, 1, 7, 5, 8, 12}, 2, {}, false),                 // [T, D]
      with({1, 1, 1, 6, 6, 8, 8, false, {6, 6}}, 2, {}, true),    // [T, D], boolean [T, T]
      with({6, 2, 1, 5, 7, 8, 8}, 5, {2, 3}, false),              // [2, 3, H, T, D]
      with({6, 2, 2, 5, 7, 8, 8, false, {5, 7}}, 5, {2, 3}, true),
      with({6, 2, 2, 5, 7, 8, 8, false, {2, 1, 1, 1, 7}}, 5, {2, 3}, false),  // expanded
      with({6, 2, 2, 5, 7, 8, 8, false, {3, 2, 5, 7}}, 5, {2, 3}, false),     // expanded
      with({6, 2, 2, 5, 7, 8, 8, false, {2, 3, 1, 5, 7}}, 5, {2, 3}, true),
      with({2, 3, 3, 5, 6, 8, 8, false, {2, 1, 5, 6}}, 4, {}, true),  // boolean [B, 1, Tq, Tk]
  };
  uint64_t seed = 101;
  for (const Case& c : cases) check_case(ctx, c, AMPX_F32, seed++);
  check_case(ctx, cases[4], AMPX_BF16, seed++);
}

// On CUDA, f16 and bf16 run on the tensor cores unless the context was made
// with AMPX_CUDA_ATTENTION=tiled: both match the reference, and they are two
// paths (the tensor cores round the weights to 16 bits, the tiles do not).
TEST_CASE("attention: AMPX_CUDA_ATTENTION=tiled selects the fp32 tiles on CUDA") {
  if (ampx_test::test_device() != AMPX_DEVICE_CUDA) {
    MESSAGE("CUDA-only case");
    return;
  }
  const Case c{1, 4, 2, 45, 70, 64, 64, true};
  Run runs[2];
  for (int tiled = 0; tiled <= 1; ++tiled) {
    if (tiled) REQUIRE(setenv("AMPX_CUDA_ATTENTION", "tiled", 1) == 0);
    Ctx ctx;  // reads the variable
    REQUIRE(unsetenv("AMPX_CUDA_ATTENTION") == 0);
    INFO("tiled " << tiled);
    check_case(ctx, c, AMPX_BF16, 77);
    Rng rng(77);
    const Vec q = rounded(AMPX_BF16, rng.vector(count_of({1, 4, 45, 64}), -1, 1));
    const Vec k = rounded(AMPX_BF16, rng.vector(count_of({1, 2, 70, 64}), -1, 1));
    const Vec v = rounded(AMPX_BF16, rng.vector(count_of({1, 2, 70, 64}), -1, 1));
    const Vec r = rounded(AMPX_BF16, rng.vector(count_of({1, 4, 45, 64}), -1, 1));
    runs[tiled] = run_attention(ctx, c, AMPX_BF16, q, k, v, {}, r);
  }
  CHECK(runs[0].out != runs[1].out);
}

TEST_CASE("attention: a row with every key masked gives zeros and zero gradients") {
  Ctx ctx;
  const Case c{1, 1, 1, 3, 4, 8, 8, false, {3, 4}};
  for (ampx_dtype dtype : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(dtype));
    Rng rng(7);
    const Vec q = rounded(dtype, rng.vector(24, -1, 1)), k = rounded(dtype, rng.vector(32, -1, 1));
    const Vec v = rounded(dtype, rng.vector(32, -1, 1)), r = rounded(dtype, rng.vector(24, -1, 1));
    Vec mask(12, 0.0);
    for (int j = 0; j < 4; ++j) mask[4 + j] = -kInf;  // row 1
    const Run run = run_attention(ctx, c, dtype, q, k, v, mask, r);
    for (int d = 0; d < 8; ++d) {
      CHECK(run.out[8 + d] == 0.0);
      CHECK(run.dq[8 + d] == 0.0);
    }
    const Reference ref = reference(c, q, k, v, mask, r, {});
    check_close("out", dtype, run.out, ref.out);
    check_close("dq", dtype, run.dq, ref.dq);
    check_close("dk", dtype, run.dk, ref.dk);
    check_close("dv", dtype, run.dv, ref.dv);
  }
}

TEST_CASE("attention: dropout drops exactly the weights ampx_dropout would") {
  const Case c{2, 2, 1, 9, 13, 16, 16, true};
  const double p = 0.3;
  for (ampx_dtype dtype : {AMPX_F32, AMPX_BF16}) {
    INFO(ampx_dtype_name(dtype));
    Rng rng(11);
    const Vec q = rounded(dtype, rng.vector(count_of({2, 2, 9, 16}), -1, 1));
    const Vec k = rounded(dtype, rng.vector(count_of({2, 1, 13, 16}), -1, 1));
    const Vec v = rounded(dtype, rng.vector(count_of({2, 1, 13, 16}), -1, 1));
    const Vec r = rounded(dtype, rng.vector(count_of({2, 2, 9, 16}), -1, 1));
    // The factors ampx_dropout gives a [B, H, Tq, Tk] tensor of ones as the
    // first draw of a fresh context; attention is the first draw of another.
    Vec drop;
    {
      Ctx other;
      Tensor ones(make(other, AMPX_F32, {2, 2, 9, 13}, Vec(count_of({2, 2, 9, 13}), 1.0)));
      Tensor dropped;
      REQUIRE(ampx_dropout(ones, p, 1, dropped.out()) == AMPX_OK);
      drop = values_of(dropped);
    }
    size_t zeros = 0;
    for (double z : drop) zeros += z == 0.0;
    CHECK(zeros > drop.size() / 5);  // p = 0.3 of 468 weights: far from none
    CHECK(zeros < drop.size() / 2);
    Ctx ctx;
    const Run run = run_attention(ctx, c, dtype, q, k, v, {}, r, p);
    const Reference ref = reference(c, q, k, v, {}, r, drop);
    check_close("out", dtype, run.out, ref.out);
    check_close("dq", dtype, run.dq, ref.dq);
    check_close("dk", dtype, run.dk, ref.dk);
    check_close("dv", dtype, run.dv, ref.dv);
    // The call drew one offset: the next dropout call gets the second draw.
    Ctx twin;
    Tensor x(make(ctx, AMPX_F32, {64}, Vec(64, 1.0))), x2(make(twin, AMPX_F32, {64}, Vec(64, 1.0)));
    Tensor y, y2, skip;
    REQUIRE(ampx_dropout(x, 0.5, 1, y.out()) == AMPX_OK);
    REQUIRE(ampx_dropout(x2, 0.5, 1, skip.out()) == AMPX_OK);
    REQUIRE(ampx_dropout(x2, 0.5, 1, y2.out()) == AMPX_OK);
    CHECK(values_of(y) == values_of(y2));
  }
}

TEST_CASE("attention: autocast computes in the lower precision, gradients in the inputs' type") {
  Ctx ctx;
  const Case c{1, 2, 2, 12, 12, 16, 16, false, {12, 12}};
  Rng rng(5);
  const Vec q = rng.vector(count_of({1, 2, 12, 16}), -1, 1);
  for (ampx_dtype lower : {AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(lower));
    ampx_autocast policy = nullptr;
    ampx_autocast_options o = ampx_autocast_options_default();
    o.dtype = lower;
    REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    Tensor tq(make(ctx, AMPX_F32, {1, 2, 12, 16}, q, true));
    Tensor mask(make(ctx, AMPX_F32, {12, 12}, Vec(144, 0.0)));
    Tensor out, loss;
    REQUIRE_MESSAGE(ampx_scaled_dot_product_attention(tq, tq, tq, mask, nullptr, out.out()) ==
                        AMPX_OK,
                    last_error());
    CHECK(dtype_of(out) == lower);
    REQUIRE(ampx_sum(out, loss.out()) == AMPX_OK);
    CHECK(dtype_of(loss) == AMPX_F32);  // sum: fp32 class
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(grad_of(tq)) == AMPX_F32);
    // The values are those of the lower type's inputs.
    const Vec ql = rounded(lower, q);
    const Reference ref = reference(c, ql, ql, ql, Vec(144, 0.0), Vec(384, 1.0), {});
    check_close("out", lower, values_of(out), ref.out);
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    ampx_autocast_release(policy);
  }
}

TEST_CASE("attention: no Tq x Tk matrix is allocated, forward or backward") {
  if (ampx_test::test_device() == AMPX_DEVICE_CUDA) {
#if defined(AMPX_CUDA_EMULATED)
    MESSAGE("long sequences are too slow on the emulator; checked on a GPU");
    return;
#endif
  }
  const int64_t T = ampx_test::test_device() == AMPX_DEVICE_CUDA ? 4096 : 2048, D = 32;
  Ctx ctx;
  Rng rng(3);
  const Vec x = rounded(AMPX_F16, rng.vector(static_cast<size_t>(T * D), -1, 1));
  Tensor q(make(ctx, AMPX_F16, {1, 1, T, D}, x, true));
  Tensor k(make(ctx, AMPX_F16, {1, 1, T, D}, x, true));
  Tensor v(make(ctx, AMPX_F16, {1, 1, T, D}, x, true));
  REQUIRE(ampx_memory_reset_peak(ctx) == AMPX_OK);
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  {
    ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
    o.causal = 1;
    Tensor out, loss;
    REQUIRE_MESSAGE(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, out.out()) == AMPX_OK,
                    last_error());
    REQUIRE(ampx_sum(out, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_context_synchronize(ctx) == AMPX_OK);
    REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  }
  // One f16 T x T matrix would be 2 T^2 bytes; everything attention
  // allocated together stays below a quarter of that.
  const uint64_t grown = after.peak_bytes - before.current_bytes;
  INFO((std::string("peak growth ") + std::to_string(grown) + " bytes at T " + std::to_string(T)));
  CHECK(grown < static_cast<uint64_t>(T * T * 2 / 4));
  const Vec dq = values_of(grad_of(q));
  for (double g : dq) REQUIRE(std::isfinite(g));
}

TEST_CASE("attention: without gradients, the output is all it keeps") {
  Ctx ctx;
  Rng rng(13);
  Tensor q(make(ctx, AMPX_F32, {1, 2, 16, 16}, rng.vector(512, -1, 1), true));
  int32_t previous = 0;
  REQUIRE(ampx_set_grad_enabled(ctx, 0, &previous) == AMPX_OK);
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_reset_peak(ctx) == AMPX_OK);
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  Tensor out;
  REQUIRE(ampx_scaled_dot_product_attention(q, q, q, nullptr, nullptr, out.out()) == AMPX_OK);
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  // out: 2048 bytes, at no moment more: no [B, H, Tq] log-sum-exp made
  // for a backward that will not run.
  CHECK(after.current_bytes - before.current_bytes == 2048);
  CHECK(after.peak_bytes - before.current_bytes == 2048);
  REQUIRE(ampx_set_grad_enabled(ctx, previous, nullptr) == AMPX_OK);
}

TEST_CASE("attention: bad input gets a clear status and changes nothing") {
  Ctx ctx;
  auto t = [&](Dims dims, ampx_dtype dtype = AMPX_F32) {
    return make(ctx, dtype, dims, Vec(count_of(dims), 0.5), true);
  };
  Tensor q(t({2, 4, 8, 16})), k(t({2, 2, 8, 16})), v(t({2, 2, 8, 16}));
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  ampx_tensor out = nullptr;
  {
    Tensor k3(t({2, 2, 8})), kd(t({2, 2, 8, 12})), kb(t({1, 2, 8, 16})), vt(t({2, 2, 9, 16}));
    Tensor k3h(t({2, 3, 8, 16})), q0(t({2, 4, 0, 16})), k0(t({2, 2, 0, 16})), big(t({1, 1, 2, 257}));
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k3, v, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "'k'");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, kd, v, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "[..., Hkv, Tk, D]");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, kb, v, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "the same leading extents");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, vt, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "[..., Hkv, Tk, D]");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k3h, k3h, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "divide");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q0, k, v, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "at least one");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k0, k0, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "at least one");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(big, big, big, nullptr, nullptr, &out),
                     AMPX_ERR_SHAPE, "256");
    for (Dims bad : {Dims{8}, Dims{8, 9}, Dims{3, 1, 8, 8}, Dims{2, 2, 8, 8}, Dims{1, 1, 1, 8, 8}}) {
      Tensor mask(make(ctx, AMPX_F32, bad, Vec(count_of(bad), 0.0)));
      CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, mask, nullptr, &out),
                       AMPX_ERR_SHAPE, "'mask'");
    }
    Tensor mask(make(ctx, AMPX_F32, {8, 8}, Vec(64, 0.0)));
    Tensor qh(t({2, 4, 8, 16}, AMPX_F16));
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(qh, k, v, nullptr, nullptr, &out),
                     AMPX_ERR_DTYPE, "share a dtype");
    Tensor labels(make(ctx, AMPX_I32, {2, 4, 8, 16}, Vec(1024, 0.0)));
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(labels, k, v, nullptr, nullptr, &out),
                     AMPX_ERR_DTYPE, "'q'");
    ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
    o.dropout_p = 1.0;
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "dropout_p");
    o.dropout_p = -0.1;
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "dropout_p");
    o = ampx_attention_options_default();
    o.scale = std::numeric_limits<double>::infinity();
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "scale");
    o = ampx_attention_options_default();
    o.causal = 1;
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, mask, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "causal");
    o.struct_size = 0;
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, nullptr, v, nullptr, nullptr, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "'k'");
    CHECK_FAILS_WITH(ampx_scaled_dot_product_attention(q, k, v, nullptr, nullptr, nullptr),
                     AMPX_ERR_INVALID_ARGUMENT, "out");
    CHECK(out == nullptr);
  }
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
  // No failed call drew from the random stream: a dropout call now draws
  // what the first draw of a fresh context does.
  Ctx fresh;
  Tensor x(make(ctx, AMPX_F32, {64}, Vec(64, 1.0))), x2(make(fresh, AMPX_F32, {64}, Vec(64, 1.0)));
  Tensor y, y2;
  REQUIRE(ampx_dropout(x, 0.5, 1, y.out()) == AMPX_OK);
  REQUIRE(ampx_dropout(x2, 0.5, 1, y2.out()) == AMPX_OK);
  CHECK(values_of(y) == values_of(y2));
}
