// test_cuda_norm.cpp -- layer norm and batch norm on the GPU (src/backend/cuda/kernels/
// layer_norm.cu, batch_norm.cu) against the CPU backend on the same data:
// every floating type, warp and block rows, columns and slices layouts of
// batch norm, single and split reductions, optional parameters and outputs,
// reproducibility, capture in a CUDA graph and indices past 2^31. The cases
// run when the suite targets CUDA (the unit_cuda test).
//
// Bounds. Both backends run the same fp32 per-element math (kernels/math/
// norm.h, no fused multiply-adds on either side) around sums accumulated in
// double; only the order of the double additions differs. With u = 2^-53
// (double) and eps = 2^-24 (fp32) unit roundoffs:
//  - Two orders of a double sum of n terms differ by at most 2 (n - 1) u
//    sum |terms| <= n 2^-52 sum |terms|. A mean (the sum / n) therefore
//    moves by at most 2^-52 sum |terms| (plus u of itself for the division),
//    and its conversion to fp32 adds at most one fp32 ulp: bound
//    2^-51 sum |terms| + ulp32.
//  - Variances: the squared deviations are taken from double means that
//    differ by dm (above), so the sum of squares moves by at most
//    2 dm sum |x - m| + n dm^2 + (n + 2) 2^-52 sum (x - m)^2, divided by n,
//    then one fp32 ulp. rstd = 1 / sqrt(var + eps) moves relatively by at
//    most half var's relative change plus an ulp for each of its three
//    roundings: (dvar / (var + eps) + 16 eps) rstd allowed.
//  - Element outputs are fixed functions of the element and the (fp32)
//    statistics: where both backends' statistics are equal, outputs must be
//    bit-identical (NaN matching any NaN). That is checked directly: batch
//    norm's forward and its evaluation-mode dx get the same statistics on
//    both sides; a layer-norm row whose mean and rstd came out equal is
//    compared bit for bit. Otherwise (differing layer-norm statistics, dx
//    from the differing means of g and g * xhat) the output moves by the
//    propagated change -- rstd (dm + |xhat| dmgx) for dx, |w| (rstd dm +
//    |x - m| drstd) for y, doubled -- plus up to an fp32 ulp at each of its
//    four roundings: 16 eps times the magnitudes involved.
//  - Parameter gradients are double sums of identical terms: n 2^-52
//    sum |terms| + 2 ulp32.
//  - 16-bit outputs: the fp32 bound plus one ulp of the format at the CPU's
//    value (both round an fp32 result once); all bounds add 2^-140 for
//    results below fp32's normal range.
// Non-finite CPU results must be matched exactly (NaN by NaN). Every GPU
// call is repeated and must give the same bits.
#include "support.h"
#include "unit/backend_caps.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda_test_support.h"
#include "math/convert.h"

using namespace cuda_test;

namespace {

constexpr double kSumOrder = 0x1p-52;  // 2 u: two orders of a double sum, per term

std::vector<float> random_floats(size_t n, std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

// The spacing of fp32 around v.
double ulp32(double v) {
  int e = -125;
  if (v != 0 && std::isfinite(v)) std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, (e - 1 > -126 ? e - 1 : -126) - 23);
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         ampx::impl::math::float_bits(a) == ampx::impl::math::float_bits(b);
}

// A device copy of an optional host array: nullptr for an empty one.
std::unique_ptr<Gpu> maybe(Backends& b, const Bytes& bytes, bool present) {
  return present ? std::make_unique<Gpu>(b, bytes) : nullptr;
}
void* ptr(const std::unique_ptr<Gpu>& g) { return g ? g->ptr() : nullptr; }
float* f32(const std::unique_ptr<Gpu>& g) { return g ? g->f32() : nullptr; }

// Bit for bit like compare_exact, but listing the first differing elements.
void compare_bits(const std::string& what, DType t, const Bytes& got, const Bytes& want) {
  REQUIRE(got.size() == want.size());
  Mismatches wrong(what + " (bit for bit)");
  for (size_t i = 0; i < want.size() / width(t); ++i) wrong.exact(i, t, got, want);
}

// Statistics of a group of values (a row, a channel): the two-pass double
// mean and the magnitudes the bounds need.
struct GroupStats {
  double n = 0, mean = 0, abs_sum = 0, abs_dev = 0, sq_dev = 0;
};

template <class At>
GroupStats group_stats(int64_t n, At&& at) {
  GroupStats g;
  g.n = static_cast<double>(n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += at(i);
    g.abs_sum += std::fabs(at(i));
  }
  g.mean = sum / g.n;
  for (int64_t i = 0; i < n; ++i) {
    const double d = at(i) - g.mean;
    g.abs_dev += std::fabs(d);
    g.sq_dev += d * d;
  }
  return g;
}

// How far the two backends' double mean, and double variance, of a group
// can be apart (the derivation is in the top comment).
double mean_spread(const GroupStats& g) { return kSumOrder * g.abs_sum; }
double var_spread(const GroupStats& g) {
  const double dm = mean_spread(g);
  return (2 * dm * g.abs_dev + g.n * dm * dm + (g.n + 2) * kSumOrder * g.sq_dev) / g.n;
}

}  // namespace

// ---- layer norm --------------------------------------------------------------

namespace {

struct LnShape {
  int64_t rows, cols;
};

// Warp rows (cols <= 1024) and block rows; a single column; one row; column
// counts off multiples of 4 and 8; split parameter-gradient reductions
// (tall shapes) and single ones.
const LnShape kLnShapes[] = {{1, 1},   {3, 1},     {37, 53},  {1, 1000}, {300, 7},   {5, 1024},
                             {3, 1025}, {2, 4099}, {64, 768}, {2048, 96}, {1, 5000}, {4096, 3}};

constexpr float kLnEps = 1e-5f;

// x of rows x cols, rows at different offsets; with enough rows, a NaN in
// row 1 and a +inf in row 2.
Bytes layer_norm_input(DType t, const LnShape& s, std::mt19937& rng) {
  std::vector<float> v;
  for (int64_t r = 0; r < s.rows; ++r) {
    const Bytes row = random_values(t, static_cast<size_t>(s.cols), rng, r % 2 ? 0.5f : 2.0f,
                                    r % 3 == 1 ? 20.0f : 0.0f);
    const std::vector<float> values = decode(t, row);
    v.insert(v.end(), values.begin(), values.end());
  }
  if (s.rows >= 37 && s.cols >= 4) {
    v[static_cast<size_t>(s.cols + 3)] = kNaN;
    v[static_cast<size_t>(2 * s.cols + 1)] = kInf;
  }
  return encode(t, v);
}

// The GPU's layer-norm statistics and output against the CPU's (`want_*`).
void check_layer_norm(const std::string& what, DType t, const LnShape& s, const Bytes& x,
                      const Bytes* weight, const Bytes* bias, const Bytes& got_y,
                      const Bytes& got_mean, const Bytes& got_rstd, const Bytes& want_y,
                      const Bytes& want_mean, const Bytes& want_rstd) {
  Mismatches wrong_mean(what + " mean"), wrong_rstd(what + " rstd"), wrong_y(what + " y");
  const auto cols = static_cast<size_t>(s.cols);
  for (size_t r = 0; r < static_cast<size_t>(s.rows); ++r) {
    const GroupStats g = group_stats(s.cols, [&](int64_t j) { return get(x, t, r * cols + j); });
    const float gm = get(got_mean, DType::F32, r), wm = get(want_mean, DType::F32, r);
    const float grs = get(got_rstd, DType::F32, r), wrs = get(want_rstd, DType::F32, r);
    wrong_mean.check(r, gm, wm, 2 * mean_spread(g) + ulp32(wm) + kTiny);
    const double var = g.sq_dev / g.n;
    const double dvar = 2 * var_spread(g) + ulp32(var);
    wrong_rstd.check(r, grs, wrs, (dvar / (var + kLnEps) + 16 * kEps) * wrs + kTiny);
    if (same_float(gm, wm) && same_float(grs, wrs)) {
      for (size_t j = 0; j < cols; ++j) wrong_y.exact(r * cols + j, t, got_y, want_y);
      continue;
    }
    const double dm = std::fabs(static_cast<double>(gm) - wm);
    const double drs = std::fabs(static_cast<double>(grs) - wrs);
    for (size_t j = 0; j < cols; ++j) {
      const size_t i = r * cols + j;
      const double w = weight ? get(*weight, t, j) : 1.0, b = bias ? get(*bias, t, j) : 0.0;
      const double dev = std::fabs(get(x, t, i) - static_cast<double>(wm));
      const double want = get(want_y, t, i);
      const double bound = 2 * std::fabs(w) * (wrs * dm + dev * drs) +
                           16 * kEps * (std::fabs(w) * dev * wrs + std::fabs(b) + std::fabs(want));
      wrong_y.check(i, get(got_y, t, i), want, bound + ulp16(t, want) + kTiny);
    }
  }
}

}  // namespace

TEST_CASE("cuda norm: layer_norm within the reordering bound of the CPU, the same on every run") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(41);
  for (DType t : kFloatTypes) {
    for (const LnShape& s : kLnShapes) {
      const Bytes x = layer_norm_input(t, s, rng);
      const auto cols = static_cast<size_t>(s.cols), rows = static_cast<size_t>(s.rows);
      const Bytes weight = random_values(t, cols, rng, 0.5f, 1.0f);
      const Bytes bias = random_values(t, cols, rng, 0.5f);
      const Gpu gx(b, x), gw(b, weight), gb(b, bias);
      // 0: neither, 1: weight, 2: both, 3: bias only.
      for (int affine = 0; affine < 4; ++affine) {
        const bool has_w = affine == 1 || affine == 2, has_b = affine >= 2;
        const std::string what = name(t) + " layer_norm of " + std::to_string(s.rows) + " x " +
                                 std::to_string(s.cols) + ", affine " + std::to_string(affine);
        Bytes want_y(x.size()), want_mean(rows * 4), want_rstd(rows * 4);
        ampx_test::nn_of(b.cpu).layer_norm(
            x.data(), has_w ? weight.data() : nullptr, has_b ? bias.data() : nullptr, t, s.rows,
            s.cols, kLnEps, want_y.data(), reinterpret_cast<float*>(want_mean.data()),
            reinterpret_cast<float*>(want_rstd.data()));
        const Gpu gy(b, x.size()), gmean(b, rows * 4), grstd(b, rows * 4);
        auto run = [&] {
          ampx_test::nn_of(b.gpu).layer_norm(gx.ptr(), has_w ? gw.ptr() : nullptr,
                                             has_b ? gb.ptr() : nullptr, t, s.rows, s.cols, kLnEps,
                                             gy.ptr(), gmean.f32(), grstd.f32());
        };
        run();
        const Bytes got_y = gy.bytes(), got_mean = gmean.bytes(), got_rstd = grstd.bytes();
        check_layer_norm(what, t, s, x, has_w ? &weight : nullptr, has_b ? &bias : nullptr,
                         got_y, got_mean, got_rstd, want_y, want_mean, want_rstd);
        run();
        CHECK_MESSAGE(gy.bytes() == got_y, what, ": a second run differs");
        CHECK_MESSAGE(gmean.bytes() == got_mean, what, ": a second run differs");
        CHECK_MESSAGE(grstd.bytes() == got_rstd, what, ": a second run differs");
        if (affine == 2) {  // in place gives what out of place gives
          const Gpu buffer(b, x);
          ampx_test::nn_of(b.gpu).layer_norm(buffer.ptr(), gw.ptr(), gb.ptr(), t, s.rows, s.cols,
                                             kLnEps, buffer.ptr(), gmean.f32(), grstd.f32());
          CHECK_MESSAGE(buffer.bytes() == got_y, what, ": in place differs");
        }
      }
    }
  }
}

TEST_CASE("cuda norm: layer_norm_backward within the reordering bound of the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(43);
  for (DType t : kFloatTypes) {
    for (const LnShape& s : kLnShapes) {
      const auto cols = static_cast<size_t>(s.cols), rows = static_cast<size_t>(s.rows);
      // Finite data: the forward's statistics, the CPU's, feed both sides.
      const Bytes x = random_values(t, rows * cols, rng, 2.0f, 3.0f);
      const Bytes dy = random_values(t, rows * cols, rng, 1.0f);
      const Bytes weight = random_values(t, cols, rng, 0.5f, 1.0f);
      Bytes y(x.size()), mean(rows * 4), rstd(rows * 4);
      ampx_test::nn_of(b.cpu).layer_norm(x.data(), nullptr, nullptr, t, s.rows, s.cols, kLnEps,
                                         y.data(), reinterpret_cast<float*>(mean.data()),
                                         reinterpret_cast<float*>(rstd.data()));
      const Gpu gx(b, x), gdy(b, dy), gw(b, weight), gmean(b, mean), grstd(b, rstd);
      for (bool has_w : {false, true}) {
        // Per row: the means of g = dy w and g xhat, and their magnitudes;
        // per column: the magnitudes of the parameter gradients' terms.
        std::vector<double> xhat(rows * cols), g(rows * cols), mg(rows), mgx(rows), mg_bound(rows),
            mgx_bound(rows), w_terms(cols), b_terms(cols);
        for (size_t r = 0; r < rows; ++r) {
          const double m = get(mean, DType::F32, r), rs = get(rstd, DType::F32, r);
          double sg = 0, sgx = 0, ag = 0, agx = 0;
          for (size_t j = 0; j < cols; ++j) {
            const size_t i = r * cols + j;
            xhat[i] = (get(x, t, i) - m) * rs;
            g[i] = get(dy, t, i) * (has_w ? get(weight, t, j) : 1.0);
            sg += g[i], sgx += g[i] * xhat[i];
            ag += std::fabs(g[i]), agx += std::fabs(g[i] * xhat[i]);
            w_terms[j] += std::fabs(get(dy, t, i) * xhat[i]);
            b_terms[j] += std::fabs(get(dy, t, i));
          }
          mg[r] = sg / static_cast<double>(cols), mgx[r] = sgx / static_cast<double>(cols);
          mg_bound[r] = 2 * kSumOrder * ag + ulp32(mg[r]) + kTiny;
          mgx_bound[r] = 2 * kSumOrder * agx + ulp32(mgx[r]) + kTiny;
        }
        // Output sets: all, dx only, dweight and dbias, each alone.
        for (int outputs : {7, 1, 6, 2, 4}) {
          const bool want_dx = outputs & 1, want_dw = outputs & 2, want_db = outputs & 4;
          const std::string what = name(t) + " layer_norm_backward of " + std::to_string(s.rows) +
                                   " x " + std::to_string(s.cols) + (has_w ? ", weight" : "") +
                                   ", outputs " + std::to_string(outputs);
          Bytes want_dx_b(x.size()), want_dw_b(cols * width(t)), want_db_b(cols * width(t));
          ampx_test::nn_of(b.cpu).layer_norm_backward(
              x.data(), dy.data(), has_w ? weight.data() : nullptr, t, s.rows, s.cols,
              reinterpret_cast<const float*>(mean.data()),
              reinterpret_cast<const float*>(rstd.data()), want_dx ? want_dx_b.data() : nullptr,
              want_dw ? want_dw_b.data() : nullptr, want_db ? want_db_b.data() : nullptr);
          const auto gdx = maybe(b, Bytes(x.size()), want_dx);
          const auto gdw = maybe(b, Bytes(want_dw_b.size()), want_dw);
          const auto gdb = maybe(b, Bytes(want_db_b.size()), want_db);
          auto run = [&] {
            ampx_test::nn_of(b.gpu).layer_norm_backward(
                gx.ptr(), gdy.ptr(), has_w ? gw.ptr() : nullptr, t, s.rows, s.cols, gmean.f32(),
                grstd.f32(), ptr(gdx), ptr(gdw), ptr(gdb));
          };
          run();
          if (gdx) {
            const Bytes got = gdx->bytes();
            Mismatches wrong(what + " dx");
            for (size_t i = 0; i < x.size() / width(t); ++i) {
              const size_t r = i / cols;
              const double rs = get(rstd, DType::F32, r), want = get(want_dx_b, t, i);
              const double bound =
                  2 * rs * (mg_bound[r] + std::fabs(xhat[i]) * mgx_bound[r]) +
                  16 * kEps *
                      (std::fabs(want) +
                       rs * (std::fabs(g[i]) + std::fabs(mg[r]) + std::fabs(xhat[i] * mgx[r])));
              wrong.check(i, get(got, t, i), want, bound + ulp16(t, want) + kTiny);
            }
            run();
            CHECK_MESSAGE(gdx->bytes() == got, what, ": a second dx differs");
          }
          for (int k = 0; k < 2; ++k) {
            const auto& out = k == 0 ? gdw : gdb;
            if (!out) continue;
            const Bytes& want = k == 0 ? want_dw_b : want_db_b;
            const std::vector<double>& terms = k == 0 ? w_terms : b_terms;
            const Bytes got = out->bytes();
            Mismatches wrong(what + (k == 0 ? " dweight" : " dbias"));
            for (size_t j = 0; j < cols; ++j) {
              const double w = get(want, t, j);
              wrong.check(j, get(got, t, j), w,
                          static_cast<double>(s.rows) * kSumOrder * terms[j] + 2 * ulp32(w) +
                              ulp16(t, w) + kTiny);
            }
            run();
            CHECK_MESSAGE(out->bytes() == got, what, ": a second run differs");
          }
          if (outputs == 1) {  // dx in place of dy gives what out of place gives
            const Gpu buffer(b, dy);
            ampx_test::nn_of(b.gpu).layer_norm_backward(
                gx.ptr(), buffer.ptr(), has_w ? gw.ptr() : nullptr, t, s.rows, s.cols, gmean.f32(),
                grstd.f32(), buffer.ptr(), nullptr, nullptr);
            CHECK_MESSAGE(buffer.bytes() == gdx->bytes(), what, ": in place differs");
          }
        }
      }
    }
  }
}

// ---- batch norm ----------------------------------------------------------------

namespace {

struct BnShape {
  int64_t n, channels, inner;
};

// [N, C] and [N, C, L]: the columns layout (inner < 32) with one and with
// split row ranges and tiles narrower than 32; the slices layout
// (inner >= 32) with one range per channel and with several.
const BnShape kBnShapes[] = {{2, 1, 1},     {7, 3, 1},      {1000, 5, 1}, {64, 300, 1},
                             {4, 3, 5},     {3, 4, 31},     {2, 3, 32},   {16, 7, 33},
                             {5, 2, 1000},  {1, 2, 70001},  {100000, 2, 1}, {3, 40, 300}};

constexpr float kBnEps = 1e-5f;
constexpr float kMomentum = 0.1f;

std::string describe(const BnShape& s) {
  return "[" + std::to_string(s.n) + ", " + std::to_string(s.channels) + ", " +
         std::to_string(s.inner) + "]";
}

// Element i of channel c's count = n * inner.
size_t channel_at(const BnShape& s, int64_t c, int64_t i) {
  return static_cast<size_t>(((i / s.inner) * s.channels + c) * s.inner + i % s.inner);
}

GroupStats channel_stats(const BnShape& s, DType t, const Bytes& x, int64_t c) {
  return group_stats(s.n * s.inner, [&](int64_t i) { return get(x, t, channel_at(s, c, i)); });
}

Bytes f32_bytes(const std::vector<float>& v) { return encode(DType::F32, v); }

}  // namespace

TEST_CASE("cuda norm: batch_norm statistics, running statistics and forward against the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(47);
  for (DType t : kFloatTypes) {
    for (const BnShape& s : kBnShapes) {
      const auto channels = static_cast<size_t>(s.channels);
      const size_t numel = static_cast<size_t>(s.n * s.channels * s.inner);
      const int64_t count = s.n * s.inner;
      const Bytes x = random_values(t, numel, rng, 1.5f, 4.0f);
      const Bytes running_mean = f32_bytes(random_floats(channels, rng, -1.0f, 1.0f));
      const Bytes running_var = f32_bytes(random_floats(channels, rng, 0.5f, 2.0f));
      const Gpu gx(b, x);
      for (bool update : {false, true}) {
        const std::string what = name(t) + " batch_norm_stats of " + describe(s) +
                                 (update ? " with running statistics" : "");
        Bytes want_mean(channels * 4), want_var(channels * 4);
        Bytes want_rm = running_mean, want_rv = running_var;
        ampx_test::nn_of(b.cpu).batch_norm_stats(
            x.data(), t, s.n, s.channels, s.inner, kMomentum,
            reinterpret_cast<float*>(want_mean.data()), reinterpret_cast<float*>(want_var.data()),
            update ? reinterpret_cast<float*>(want_rm.data()) : nullptr,
            update ? reinterpret_cast<float*>(want_rv.data()) : nullptr);
        const Gpu gmean(b, channels * 4), gvar(b, channels * 4);
        const Gpu grm(b, running_mean), grv(b, running_var);
        ampx_test::nn_of(b.gpu).batch_norm_stats(
            gx.ptr(), t, s.n, s.channels, s.inner, kMomentum, gmean.f32(), gvar.f32(),
            update ? grm.f32() : nullptr, update ? grv.f32() : nullptr);
        const Bytes got_mean = gmean.bytes(), got_var = gvar.bytes();
        const Bytes got_rm = grm.bytes(), got_rv = grv.bytes();
        if (!update) {  // untouched
          CHECK_MESSAGE(got_rm == running_mean, what);
          CHECK_MESSAGE(got_rv == running_var, what);
        }
        Mismatches wrong_mean(what + " mean"), wrong_var(what + " var");
        Mismatches wrong_rm(what + " running_mean"), wrong_rv(what + " running_var");
        for (size_t c = 0; c < channels; ++c) {
          const GroupStats g = channel_stats(s, t, x, static_cast<int64_t>(c));
          const double wm = get(want_mean, DType::F32, c), wv = get(want_var, DType::F32, c);
          const double dmean = 2 * mean_spread(g) + ulp32(wm) + kTiny;
          const double dvar_d = 2 * var_spread(g);
          wrong_mean.check(c, get(got_mean, DType::F32, c), wm, dmean);
          wrong_var.check(c, get(got_var, DType::F32, c), wv, dvar_d + ulp32(wv) + kTiny);
          if (!update) continue;
          const double m = kMomentum, keep = 1.0 - kMomentum;
          const double rm0 = get(running_mean, DType::F32, c);
          const double rv0 = get(running_var, DType::F32, c);
          const double unbiased = wv * static_cast<double>(count) / static_cast<double>(count - 1);
          const double want_rm_c = get(want_rm, DType::F32, c);
          const double want_rv_c = get(want_rv, DType::F32, c);
          wrong_rm.check(c, get(got_rm, DType::F32, c), want_rm_c,
                         m * dmean + 8 * kEps * (m * std::fabs(wm) + keep * std::fabs(rm0) +
                                                 std::fabs(want_rm_c)) + kTiny);
          wrong_rv.check(c, get(got_rv, DType::F32, c), want_rv_c,
                         m * (2 * dvar_d + 2 * ulp32(unbiased)) +
                             8 * kEps * (m * unbiased + keep * rv0 + std::fabs(want_rv_c)) + kTiny);
        }
        // The same bits on a second run (from the same running statistics).
        const Gpu grm2(b, running_mean), grv2(b, running_var);
        ampx_test::nn_of(b.gpu).batch_norm_stats(
            gx.ptr(), t, s.n, s.channels, s.inner, kMomentum, gmean.f32(), gvar.f32(),
            update ? grm2.f32() : nullptr, update ? grv2.f32() : nullptr);
        CHECK_MESSAGE(gmean.bytes() == got_mean, what, ": a second run differs");
        CHECK_MESSAGE(gvar.bytes() == got_var, what, ": a second run differs");
        CHECK_MESSAGE(grm2.bytes() == got_rm, what, ": a second run differs");
        CHECK_MESSAGE(grv2.bytes() == got_rv, what, ": a second run differs");
      }

      // The forward with given statistics -- the batch's (the CPU's) or
      // running ones (evaluation) -- is element-wise: bit for bit.
      Bytes batch_mean(channels * 4), batch_var(channels * 4);
      ampx_test::nn_of(b.cpu).batch_norm_stats(x.data(), t, s.n, s.channels, s.inner, kMomentum,
                                               reinterpret_cast<float*>(batch_mean.data()),
                                               reinterpret_cast<float*>(batch_var.data()), nullptr,
                                               nullptr);
      const Bytes weight = f32_bytes(random_floats(channels, rng, 0.5f, 1.5f));
      const Bytes bias = f32_bytes(random_floats(channels, rng, -1.0f, 1.0f));
      const Gpu gw(b, weight), gb(b, bias);
      for (bool eval : {false, true}) {
        const Bytes& mean = eval ? running_mean : batch_mean;
        const Bytes& var = eval ? running_var : batch_var;
        const Gpu gmean(b, mean), gvar(b, var);
        for (int affine = 0; affine < 4; ++affine) {
          const bool has_w = affine == 1 || affine == 2, has_b = affine >= 2;
          const std::string what = name(t) + " batch_norm of " + describe(s) +
                                   (eval ? " (eval)" : "") + ", affine " + std::to_string(affine);
          Bytes want(x.size());
          ampx_test::nn_of(b.cpu).batch_norm(
              x.data(), t, s.n, s.channels, s.inner, reinterpret_cast<const float*>(mean.data()),
              reinterpret_cast<const float*>(var.data()),
              has_w ? reinterpret_cast<const float*>(weight.data()) : nullptr,
              has_b ? reinterpret_cast<const float*>(bias.data()) : nullptr, kBnEps, want.data());
          const Gpu gy(b, x.size());
          ampx_test::nn_of(b.gpu).batch_norm(gx.ptr(), t, s.n, s.channels, s.inner, gmean.f32(),
                                             gvar.f32(), has_w ? gw.f32() : nullptr,
                                             has_b ? gb.f32() : nullptr, kBnEps, gy.ptr());
          compare_bits(what, t, gy.bytes(), want);
        }
      }
    }
  }
}

TEST_CASE("cuda norm: batch_norm_backward in training and evaluation against the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(53);
  for (DType t : kFloatTypes) {
    for (const BnShape& s : kBnShapes) {
      const auto channels = static_cast<size_t>(s.channels);
      const size_t numel = static_cast<size_t>(s.n * s.channels * s.inner);
      const int64_t count = s.n * s.inner;
      const Bytes x = random_values(t, numel, rng, 1.5f, -2.0f);
      const Bytes dy = random_values(t, numel, rng, 1.0f);
      Bytes batch_mean(channels * 4), batch_var(channels * 4);
      ampx_test::nn_of(b.cpu).batch_norm_stats(x.data(), t, s.n, s.channels, s.inner, kMomentum,
                                               reinterpret_cast<float*>(batch_mean.data()),
                                               reinterpret_cast<float*>(batch_var.data()), nullptr,
                                               nullptr);
      const Bytes running_mean = f32_bytes(random_floats(channels, rng, -1.0f, 1.0f));
      const Bytes running_var = f32_bytes(random_floats(channels, rng, 0.5f, 2.0f));
      const Bytes weight = f32_bytes(random_floats(channels, rng, 0.5f, 1.5f));
      const Gpu gx(b, x), gdy(b, dy), gw(b, weight);
      for (bool batch_stats : {true, false}) {
        const Bytes& mean = batch_stats ? batch_mean : running_mean;
        const Bytes& var = batch_stats ? batch_var : running_var;
        const Gpu gmean(b, mean), gvar(b, var);
        for (bool has_w : {false, true}) {
          // Per channel: the magnitudes of the sums' terms, and what dx's
          // bound needs (means of g = dy w and g xhat, and their spreads).
          std::vector<double> xhat(numel), rstd(channels), dy_terms(channels),
              dyx_terms(channels), mg(channels), mgx(channels), mg_bound(channels),
              mgx_bound(channels);
          for (size_t c = 0; c < channels; ++c) {
            const double m = get(mean, DType::F32, c);
            rstd[c] = 1.0 / std::sqrt(get(var, DType::F32, c) + static_cast<double>(kBnEps));
            double sdy = 0, sdyx = 0;
            for (int64_t i = 0; i < count; ++i) {
              const size_t k = channel_at(s, static_cast<int64_t>(c), i);
              xhat[k] = (get(x, t, k) - m) * rstd[c];
              const double g = get(dy, t, k);
              sdy += g, sdyx += g * xhat[k];
              dy_terms[c] += std::fabs(g), dyx_terms[c] += std::fabs(g * xhat[k]);
            }
            const double w = has_w ? get(weight, DType::F32, c) : 1.0;
            const double per = batch_stats ? w / static_cast<double>(count) : 0.0;
            mg[c] = per * sdy, mgx[c] = per * sdyx;
            const double spread = 2 * std::fabs(per) * static_cast<double>(count) * kSumOrder;
            mg_bound[c] = spread * dy_terms[c] + ulp32(mg[c]) + kTiny;
            mgx_bound[c] = spread * dyx_terms[c] + ulp32(mgx[c]) + kTiny;
          }
          // Output sets: all, dx only, dweight and dbias, dbias alone.
          for (int outputs : {7, 1, 6, 4}) {
            const bool want_dx = outputs & 1, want_dw = outputs & 2, want_db = outputs & 4;
            const std::string what = name(t) + " batch_norm_backward of " + describe(s) +
                                     (batch_stats ? "" : " (eval)") + (has_w ? ", weight" : "") +
                                     ", outputs " + std::to_string(outputs);
            Bytes want_dx_b(x.size()), want_dw_b(channels * 4), want_db_b(channels * 4);
            ampx_test::nn_of(b.cpu).batch_norm_backward(
                x.data(), dy.data(), t, s.n, s.channels, s.inner,
                reinterpret_cast<const float*>(mean.data()),
                reinterpret_cast<const float*>(var.data()),
                has_w ? reinterpret_cast<const float*>(weight.data()) : nullptr, kBnEps,
                batch_stats, want_dx ? want_dx_b.data() : nullptr,
                want_dw ? reinterpret_cast<float*>(want_dw_b.data()) : nullptr,
                want_db ? reinterpret_cast<float*>(want_db_b.data()) : nullptr);
            const auto gdx = maybe(b, Bytes(x.size()), want_dx);
            const auto gdw = maybe(b, Bytes(channels * 4), want_dw);
            const auto gdb = maybe(b, Bytes(channels * 4), want_db);
            auto run = [&] {
              ampx_test::nn_of(b.gpu).batch_norm_backward(
                  gx.ptr(), gdy.ptr(), t, s.n, s.channels, s.inner, gmean.f32(), gvar.f32(),
                  has_w ? gw.f32() : nullptr, kBnEps, batch_stats, ptr(gdx), f32(gdw), f32(gdb));
            };
            run();
            if (gdx) {
              const Bytes got = gdx->bytes();
              if (!batch_stats) {
                // Constant statistics: the means of g are 0 on both sides.
                compare_bits(what + " dx", t, got, want_dx_b);
              } else {
                Mismatches wrong(what + " dx");
                for (size_t c = 0; c < channels; ++c) {
                  const double w = has_w ? get(weight, DType::F32, c) : 1.0;
                  for (int64_t i = 0; i < count; ++i) {
                    const size_t k = channel_at(s, static_cast<int64_t>(c), i);
                    const double want = get(want_dx_b, t, k);
                    const double bound =
                        2 * rstd[c] * (mg_bound[c] + std::fabs(xhat[k]) * mgx_bound[c]) +
                        16 * kEps *
                            (std::fabs(want) +
                             rstd[c] * (std::fabs(get(dy, t, k) * w) + std::fabs(mg[c]) +
                                        std::fabs(xhat[k] * mgx[c])));
                    wrong.check(k, get(got, t, k), want, bound + ulp16(t, want) + kTiny);
                  }
                }
              }
              run();
              CHECK_MESSAGE(gdx->bytes() == got, what, ": a second dx differs");
            }
            for (int k = 0; k < 2; ++k) {
              const auto& out = k == 0 ? gdw : gdb;
              if (!out) continue;
              const Bytes& want = k == 0 ? want_dw_b : want_db_b;
              const std::vector<double>& terms = k == 0 ? dyx_terms : dy_terms;
              const Bytes got = out->bytes();
              Mismatches wrong(what + (k == 0 ? " dweight" : " dbias"));
              for (size_t c = 0; c < channels; ++c) {
                const double w = get(want, DType::F32, c);
                wrong.check(c, get(got, DType::F32, c), w,
                            static_cast<double>(count) * kSumOrder * terms[c] + 2 * ulp32(w) +
                                kTiny);
              }
              run();
              CHECK_MESSAGE(out->bytes() == got, what, ": a second run differs");
            }
          }
        }
      }
    }
  }
}

// ---- a forward and backward pass in a CUDA graph ------------------------------------

TEST_CASE("cuda norm: layer norm and batch norm forward and backward replay from a CUDA graph") {
  SKIP_UNLESS_CUDA();
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    Backends b(stream);
    std::mt19937 rng(59);
    const DType t = DType::BF16;
    const int64_t rows = 300, cols = 1100;        // block rows, split gradient sums
    const int64_t n = 64, channels = 12, inner = 40;  // batch norm's slices layout
    const int64_t bn_numel = n * channels * inner;
    const Gpu x(b, random_values(t, static_cast<size_t>(rows * cols), rng, 1.0f, 0.5f));
    const Gpu dy(b, random_values(t, static_cast<size_t>(rows * cols), rng, 1.0f));
    const Gpu w(b, random_values(t, static_cast<size_t>(cols), rng, 0.2f, 1.0f));
    const Gpu bias(b, random_values(t, static_cast<size_t>(cols), rng, 0.2f));
    const Gpu bx(b, random_values(t, static_cast<size_t>(bn_numel), rng, 2.0f, 1.0f));
    const Gpu bdy(b, random_values(t, static_cast<size_t>(bn_numel), rng, 1.0f));
    const Gpu bw(b, f32_bytes(random_floats(static_cast<size_t>(channels), rng, 0.5f, 1.5f)));
    const Gpu bb(b, f32_bytes(random_floats(static_cast<size_t>(channels), rng, -1.0f, 1.0f)));
    const Bytes running = f32_bytes(std::vector<float>(static_cast<size_t>(channels), 1.0f));

    struct Outputs {
      std::unique_ptr<Gpu> y, mean, rstd, dx, dw, db;
      std::unique_ptr<Gpu> bmean, bvar, rmean, rvar, by, bdx, bdw, bdb;
    };
    auto make_outputs = [&] {
      const auto ln = static_cast<size_t>(rows * cols) * 2, bn = static_cast<size_t>(bn_numel) * 2;
      const auto r4 = static_cast<size_t>(rows) * 4, c4 = static_cast<size_t>(channels) * 4;
      Outputs o;
      o.y = std::make_unique<Gpu>(b, ln);
      o.mean = std::make_unique<Gpu>(b, r4);
      o.rstd = std::make_unique<Gpu>(b, r4);
      o.dx = std::make_unique<Gpu>(b, ln);
      o.dw = std::make_unique<Gpu>(b, static_cast<size_t>(cols) * 2);
      o.db = std::make_unique<Gpu>(b, static_cast<size_t>(cols) * 2);
      o.bmean = std::make_unique<Gpu>(b, c4);
      o.bvar = std::make_unique<Gpu>(b, c4);
      o.rmean = std::make_unique<Gpu>(b, running);
      o.rvar = std::make_unique<Gpu>(b, running);
      o.by = std::make_unique<Gpu>(b, bn);
      o.bdx = std::make_unique<Gpu>(b, bn);
      o.bdw = std::make_unique<Gpu>(b, c4);
      o.bdb = std::make_unique<Gpu>(b, c4);
      return o;
    };
    auto step = [&](Outputs& o) {
      ampx::impl::Backend& g = *b.gpu;
      ampx_test::nn_of(g).layer_norm(x.ptr(), w.ptr(), bias.ptr(), t, rows, cols, kLnEps,
                                     o.y->ptr(), o.mean->f32(), o.rstd->f32());
      ampx_test::nn_of(g).layer_norm_backward(x.ptr(), dy.ptr(), w.ptr(), t, rows, cols,
                                              o.mean->f32(), o.rstd->f32(), o.dx->ptr(),
                                              o.dw->ptr(), o.db->ptr());
      ampx_test::nn_of(g).batch_norm_stats(bx.ptr(), t, n, channels, inner, kMomentum,
                                           o.bmean->f32(), o.bvar->f32(), o.rmean->f32(),
                                           o.rvar->f32());
      ampx_test::nn_of(g).batch_norm(bx.ptr(), t, n, channels, inner, o.bmean->f32(), o.bvar->f32(),
                                     bw.f32(), bb.f32(), kBnEps, o.by->ptr());
      ampx_test::nn_of(g).batch_norm_backward(bx.ptr(), bdy.ptr(), t, n, channels, inner,
                                              o.bmean->f32(), o.bvar->f32(), bw.f32(), kBnEps, true,
                                              o.bdx->ptr(), o.bdw->f32(), o.bdb->f32());
    };
    auto results = [&](const Outputs& o) {
      std::vector<Bytes> all;
      for (const Gpu* m : {o.y.get(), o.mean.get(), o.rstd.get(), o.dx.get(), o.dw.get(),
                           o.db.get(), o.bmean.get(), o.bvar.get(), o.rmean.get(), o.rvar.get(),
                           o.by.get(), o.bdx.get(), o.bdw.get(), o.bdb.get()})
        all.push_back(m->bytes());
      return all;
    };

    Outputs direct = make_outputs(), graphed = make_outputs();
    step(direct);  // loads every kernel first
    b.gpu->synchronize();
    const CapturedGraph graph(stream, [&] { step(graphed); });
    graph.launch();
    b.gpu->synchronize();
    CHECK(results(graphed) == results(direct));
  }
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

// ---- refusals and large indices --------------------------------------------

TEST_CASE("cuda norm: integer data is refused") {
  SKIP_UNLESS_CUDA();
  Backends b;
  const Gpu buf(b, 256);
  ampx::impl::Backend& g = *b.gpu;
  CHECK(status_of([&] {
          ampx_test::nn_of(g).layer_norm(buf.ptr(), nullptr, nullptr, DType::I32, 2, 2, kLnEps,
                                         buf.ptr(), buf.f32(), buf.f32());
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(g).batch_norm(buf.ptr(), DType::I64, 2, 2, 1, buf.f32(), buf.f32(),
                                         nullptr, nullptr, kBnEps, buf.ptr());
        }) == AMPX_ERR_DTYPE);
}

TEST_CASE("cuda norm: element indices past 2^31") {
  SKIP_UNLESS_CUDA();
  const int64_t cols = 1024, rows = (int64_t{1} << 21) + 2;  // bf16: 4 GiB + 4 KiB
  const int64_t n = rows * cols;
  if (free_device_bytes() < static_cast<size_t>(n) * 2 + (size_t{1} << 30)) {
    MESSAGE("skipped: needs 5 GiB of free device memory");
    return;
  }
  const DType t = DType::BF16;
  Backends b;
  auto* x = static_cast<uint8_t*>(b.memory->allocate(static_cast<size_t>(n) * 2));
  REQUIRE(x != nullptr);
  uint8_t* last_row = x + 2 * (n - cols);
  const Gpu mean(b, static_cast<size_t>(rows) * 4), rstd(b, static_cast<size_t>(rows) * 4);

  // Layer norm in place: rows of ones normalise to 0, the last row (its own
  // random values) as the CPU computes it.
  b.gpu->fill(x, 2, 0x3f80, n);  // bf16 1.0
  std::mt19937 rng(61);
  const Bytes last = random_values(t, static_cast<size_t>(cols), rng, 3.0f, 1.0f);
  b.gpu->copy_from_host(last_row, last.data(), last.size());
  Bytes want(last.size()), want_mean(4), want_rstd(4);
  ampx_test::nn_of(b.cpu).layer_norm(last.data(), nullptr, nullptr, t, 1, cols, kLnEps, want.data(),
                                     reinterpret_cast<float*>(want_mean.data()),
                                     reinterpret_cast<float*>(want_rstd.data()));
  ampx_test::nn_of(b.gpu).layer_norm(x, nullptr, nullptr, t, rows, cols, kLnEps, x, mean.f32(),
                                     rstd.f32());
  Bytes got(last.size()), got_mean(4), got_rstd(4);
  b.gpu->copy_to_host(got.data(), last_row, got.size());
  b.gpu->copy_to_host(got_mean.data(), mean.f32() + rows - 1, 4);
  b.gpu->copy_to_host(got_rstd.data(), rstd.f32() + rows - 1, 4);
  check_layer_norm("layer_norm of the last row", t, LnShape{1, cols}, last, nullptr, nullptr, got,
                   got_mean, got_rstd, want, want_mean, want_rstd);
  uint16_t head[8] = {0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff};
  b.gpu->copy_to_host(head, x, sizeof head);
  for (uint16_t v : head) CHECK(v == 0);

  // Batch norm over ones with a last row of twos, as [rows, 1024] (columns
  // layout) and as [1, 2, rows * 512] (slices layout; channel 1 ends past
  // 2^31): the statistics only come out right if every element is read.
  b.gpu->fill(x, 2, 0x3f80, n);
  b.gpu->fill(last_row, 2, 0x4000, cols);  // bf16 2.0
  const Gpu bmean(b, 8 * 1024), bvar(b, 8 * 1024);
  struct View {
    int64_t n, channels, inner, twos;  // twos: elements of 2 in the last channel
  };
  for (const View& v : {View{rows, cols, 1, 1}, View{1, 2, rows * cols / 2, cols}}) {
    ampx_test::nn_of(b.gpu).batch_norm_stats(x, t, v.n, v.channels, v.inner, kMomentum, bmean.f32(),
                                             bvar.f32(), nullptr, nullptr);
    const double count = static_cast<double>(v.n * v.inner), twos = static_cast<double>(v.twos);
    const double m = (count + twos) / count;
    const double var = ((count - twos) * (1 - m) * (1 - m) + twos * (2 - m) * (2 - m)) / count;
    float got_m = 0, got_v = 0;
    b.gpu->copy_to_host(&got_m, bmean.f32() + v.channels - 1, 4);
    b.gpu->copy_to_host(&got_v, bvar.f32() + v.channels - 1, 4);
    CHECK(std::fabs(got_m - m) <= ulp32(m));
    CHECK(std::fabs(got_v - var) <= ulp32(var) + 1e-9 * var);
  }
  // The forward in place on the [rows, 1024] view: the last row as the CPU
  // normalises it with the same statistics.
  ampx_test::nn_of(b.gpu).batch_norm_stats(x, t, rows, cols, 1, kMomentum, bmean.f32(), bvar.f32(),
                                           nullptr, nullptr);
  Bytes stats_mean(static_cast<size_t>(cols) * 4), stats_var(static_cast<size_t>(cols) * 4);
  b.gpu->copy_to_host(stats_mean.data(), bmean.ptr(), stats_mean.size());
  b.gpu->copy_to_host(stats_var.data(), bvar.ptr(), stats_var.size());
  Bytes twos(static_cast<size_t>(cols) * 2);
  b.gpu->copy_to_host(twos.data(), last_row, twos.size());
  Bytes want_bn(twos.size());
  ampx_test::nn_of(b.cpu).batch_norm(
      twos.data(), t, 1, cols, 1, reinterpret_cast<const float*>(stats_mean.data()),
      reinterpret_cast<const float*>(stats_var.data()), nullptr, nullptr, kBnEps, want_bn.data());
  ampx_test::nn_of(b.gpu).batch_norm(x, t, rows, cols, 1, bmean.f32(), bvar.f32(), nullptr, nullptr,
                                     kBnEps, x);
  Bytes got_bn(twos.size());
  b.gpu->copy_to_host(got_bn.data(), last_row, got_bn.size());
  compare_exact("batch_norm of the last row", t, got_bn, want_bn);
  b.memory->deallocate(x, static_cast<size_t>(n) * 2);
}

#endif  // AMPX_WITH_CUDA
