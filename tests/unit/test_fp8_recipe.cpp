// test_fp8_recipe.cpp -- FP8 scaling recipes (ampx_fp8_recipe_*,
// ampx_fp8_quantize) on the test device.
//
// The scale and history sequences are checked against a reference written
// here after Transformer Engine's default delayed-scaling update, the fused
// CUDA kernel of common/recipe/delayed_scaling.cu that TE's PyTorch recipe
// runs after the amax reduction (kernel_bulk of
// amax_and_scale_update_after_reduction, TE 1.x-2.x): an amax_history of
// `len` rows whose row 0 takes the step's amax; at each update, when that
// amax is not 0, amax = fmaxf over the rows from 0 (NaN skipped) or row 0
// (most_recent), the history rolled by -1 and row 0 zeroed; when it is 0,
// nothing is rolled and amax is 0; then
//   sf = (fp8_max * 2^-margin) / amax, kept as the old scale where amax is
//   not > 0 or not finite, FLT_MAX where sf is infinite; scale_inv = 1 / sf.
// Quantized bytes are checked against fp8_reference.h's encoding of
// x * scale (the product rounded to float, as the kernels compute it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fp8_reference.h"
#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;
using fp8_test::Fp8Format;
using fp8_test::kE4M3;
using fp8_test::kE5M2;
using fp8_test::reference_code;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFloatMax = std::numeric_limits<float>::max();

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Transformer Engine's delayed scaling for one tensor, as its fused
// update does it (see the top).
struct TeDelayedScaling {
  int len;
  bool most_recent;
  int margin;
  float fp8_max;
  std::vector<float> history;
  float scale = 1.0f, scale_inv = 1.0f;
  std::deque<float> seen;  // every rolled step's amax, for the history readout

  TeDelayedScaling(int l, bool recent, int m, float max)
      : len(l), most_recent(recent), margin(m), fp8_max(max),
        history(static_cast<size_t>(l), 0.0f) {}

  void step(float step_amax) {
    history[0] = step_amax;
    const float last = history[0];
    float amax = 0.0f;
    if (last != 0.0f) {
      seen.push_back(last);
      for (float a : history) amax = std::fmax(amax, a);  // fmaxf: NaN skipped
      std::rotate(history.begin(), history.begin() + 1, history.end());
      history[0] = 0.0f;
    }
    if (most_recent) amax = last;
    const float scaled_max = fp8_max * std::ldexp(1.0f, -margin);
    float sf = std::isfinite(amax) && amax > 0.0f ? scaled_max / amax : scale;
    if (std::isinf(sf)) sf = kFloatMax;
    scale = sf;
    scale_inv = 1.0f / sf;
  }

  // The last `len` rolled step amaxes, oldest first, zeros before the first.
  std::vector<float> readout() const {
    std::vector<float> out(static_cast<size_t>(len), 0.0f);
    const size_t n = std::min(seen.size(), out.size());
    for (size_t i = 0; i < n; ++i) out[out.size() - n + i] = seen[seen.size() - n + i];
    return out;
  }
};

struct Recipe {
  ampx_fp8_recipe handle = nullptr;
  Recipe(ampx_context ctx, const ampx_fp8_recipe_options& options) {
    REQUIRE_MESSAGE(ampx_fp8_recipe_create(ctx, &options, &handle) == AMPX_OK, last_error());
  }
  ~Recipe() { ampx_fp8_recipe_release(handle); }
  Recipe(const Recipe&) = delete;
  Recipe& operator=(const Recipe&) = delete;
  operator ampx_fp8_recipe() const { return handle; }
};

int64_t add(ampx_fp8_recipe recipe, ampx_fp8_role role, const char* name) {
  int64_t slot = -1;
  REQUIRE_MESSAGE(ampx_fp8_recipe_add_tensor(recipe, role, name, &slot) == AMPX_OK, last_error());
  return slot;
}

ampx_fp8_slot_info info_of(ampx_fp8_recipe recipe, int64_t slot, std::vector<float>* history) {
  ampx_fp8_slot_info info = AMPX_FP8_SLOT_INFO_INIT;
  REQUIRE_MESSAGE(ampx_fp8_recipe_slot_get(recipe, slot, &info,
                                           history ? history->data() : nullptr,
                                           history ? static_cast<int32_t>(history->size()) : 0) ==
                      AMPX_OK,
                  last_error());
  return info;
}

ampx_tensor empty(ampx_context ctx, ampx_dtype dtype, int64_t n) {
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &n, &t) == AMPX_OK);
  return t;
}

// A tensor whose amax is `amax`: amax itself, smaller values, a zero.
std::vector<float> with_amax(float amax) { return {0.25f * amax, -amax, 0.0f, 0.5f * amax}; }

bool same_float(float a, float b) { return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST_CASE("fp8 recipe: delayed scaling follows Transformer Engine's formulas step by step") {
  Ctx ctx;
  // Zero, inf and NaN amaxes; a tiny one whose scale overflows; enough
  // steps to wrap the 4-entry history several times.
  const std::vector<float> amaxes = {0.0f,  3.5f, 100.0f, 0.0f, kInf,  2.0f, kNaN, 1e-3f,
                                     5.0f,  5.0f, 5.0f,   5.0f, 1e-39f, 7.0f, 300.0f, 0.0f,
                                     0.0f,  0.0f, 0.0f,   0.0f, 12.0f, 1e-37f, kNaN, 0.5f};
  for (ampx_fp8_amax_algo algo : {AMPX_FP8_AMAX_MAX, AMPX_FP8_AMAX_MOST_RECENT}) {
    for (int margin : {0, 2, 4, 127}) {
      CAPTURE(algo);
      CAPTURE(margin);
      ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
      o.amax_history_len = 4;
      o.amax_compute_algo = algo;
      o.margin = margin;
      Recipe recipe(ctx, o);
      const int64_t fwd = add(recipe, AMPX_FP8_FORWARD, "x");
      const int64_t bwd = add(recipe, AMPX_FP8_BACKWARD, "dy");
      const bool most_recent = algo == AMPX_FP8_AMAX_MOST_RECENT;
      TeDelayedScaling te_fwd(4, most_recent, margin, 448.0f);
      TeDelayedScaling te_bwd(4, most_recent, margin, 57344.0f);
      Tensor out_fwd(empty(ctx, AMPX_F8E4M3, 4)), out_bwd(empty(ctx, AMPX_F8E5M2, 4));
      for (size_t step = 0; step < amaxes.size(); ++step) {
        CAPTURE(step);
        // The backward slot sees twice the amax, in two quantizations of
        // which the larger counts (a tensor used twice in a step).
        Tensor a(upload<float>(ctx, AMPX_F32, with_amax(amaxes[step])));
        Tensor b(upload<float>(ctx, AMPX_F32, with_amax(2.0f * amaxes[step])));
        Tensor c(upload<float>(ctx, AMPX_F32, with_amax(amaxes[step])));
        REQUIRE_MESSAGE(ampx_fp8_quantize(recipe, fwd, a, out_fwd, nullptr) == AMPX_OK, last_error());
        REQUIRE(ampx_fp8_quantize(recipe, bwd, c, out_bwd, nullptr) == AMPX_OK);
        REQUIRE(ampx_fp8_quantize(recipe, bwd, b, out_bwd, nullptr) == AMPX_OK);
        // Quantized with the scale of the previous update.
        const std::vector<float> in = with_amax(2.0f * amaxes[step]);
        const std::vector<uint8_t> q = download<uint8_t>(out_bwd);
        for (size_t i = 0; i < in.size(); ++i)
          CHECK(q[i] == reference_code(kE5M2, static_cast<double>(in[i] * te_bwd.scale), true));
        REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
        te_fwd.step(amaxes[step]);
        te_bwd.step(2.0f * amaxes[step]);
        for (auto [slot, te] : {std::pair<int64_t, TeDelayedScaling*>{fwd, &te_fwd},
                                std::pair<int64_t, TeDelayedScaling*>{bwd, &te_bwd}}) {
          std::vector<float> history(4);
          const ampx_fp8_slot_info info = info_of(recipe, slot, &history);
          CHECK(bits_of(info.scale) == bits_of(te->scale));
          CHECK(bits_of(info.scale_inv) == bits_of(te->scale_inv));
          CHECK(info.amax == 0.0f);
          const std::vector<float> expected = te->readout();
          for (size_t i = 0; i < history.size(); ++i) CHECK(same_float(history[i], expected[i]));
        }
      }
    }
  }
}

TEST_CASE("fp8 recipe: the three rules where TE's fused update differs from its Python one") {
  // Each with the numbers the older rule gave. E4M3 (448), history 2 or 4.
  Ctx ctx;
  const auto run = [&](int32_t len, int32_t margin, const std::vector<float>& steps,
                       std::vector<float>* history) {
    ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
    o.amax_history_len = len;
    o.margin = margin;
    Recipe recipe(ctx, o);
    const int64_t slot = add(recipe, AMPX_FP8_FORWARD, "x");
    Tensor out(empty(ctx, AMPX_F8E4M3, 4));
    for (float amax : steps) {
      Tensor x(upload<float>(ctx, AMPX_F32, with_amax(amax)));
      REQUIRE(ampx_fp8_quantize(recipe, slot, x, out, nullptr) == AMPX_OK);
      REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
    }
    history->assign(static_cast<size_t>(len), -1.0f);
    return info_of(recipe, slot, history).scale;
  };
  std::vector<float> history;
  SUBCASE("fmaxf skips a NaN in the history: one overflowing step does not freeze the scale") {
    // max(2, NaN, 8) = 8: 448 / 8; NaN propagating kept the old 224.
    CHECK(run(4, 0, {2.0f, kNaN, 8.0f}, &history) == 56.0f);
    CHECK(std::isnan(history[2]));
  }
  SUBCASE("the scaled maximum fp8_max * 2^-margin is formed before the division") {
    // 28 / 1e-37 = 2.8e38; (448 / 1e-37) / 16 overflowed to FLT_MAX.
    const float scale = run(4, 4, {1e-37f}, &history);
    CHECK(bits_of(scale) == bits_of(28.0f / 1e-37f));
    CHECK(scale < kFloatMax);
  }
  SUBCASE("a step amax of 0 leaves the history unrolled and the scale as it was") {
    // History 2: [4, 2] gives 448 / 4; the zero step keeps it (rolling it
    // in gave [2, 0]: 224); the next step 1 makes [2, 1]: 224 (else 448).
    CHECK(run(2, 0, {4.0f, 2.0f, 0.0f}, &history) == 112.0f);
    CHECK(history == std::vector<float>{4.0f, 2.0f});
    CHECK(run(2, 0, {4.0f, 2.0f, 0.0f, 1.0f}, &history) == 224.0f);
    CHECK(history == std::vector<float>{2.0f, 1.0f});
    // Longer histories wrap the ring: a zero step in every position.
    CHECK(run(4, 0, {1.0f, 0.0f, 2.0f, 0.0f, 3.0f, 0.0f, 0.0f, 4.0f, 5.0f, 0.0f}, &history) ==
          448.0f / 5.0f);
    CHECK(history == std::vector<float>{2.0f, 3.0f, 4.0f, 5.0f});
    // A ring longer than a warp (the CUDA kernel rotates it in chunks).
    std::vector<float> steps, rolled;
    for (int i = 1; i <= 100; ++i) {
      steps.push_back(i % 3 == 0 ? 0.0f : static_cast<float>(i));
      if (i % 3 != 0) rolled.push_back(static_cast<float>(i));
    }
    CHECK(run(40, 0, steps, &history) == 448.0f / 100.0f);
    CHECK(history == std::vector<float>(rolled.end() - 40, rolled.end()));
  }
}

TEST_CASE("fp8 recipe: quantize with a scale, transposed in the same pass") {
  Ctx ctx;
  ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
  o.amax_history_len = 1;
  Recipe recipe(ctx, o);
  const int64_t slot = add(recipe, AMPX_FP8_FORWARD, "w");
  // A 37 x 45 matrix (tiles partly outside) of values in [-2, 2].
  const int64_t rows = 37, cols = 45;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  Tensor src;
  const int64_t shape[] = {rows, cols};
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape,
                                x.data(), x.size() * 4, src.out()) == AMPX_OK);
  // First step: scale 1; then 448 / amax from the update.
  for (int step = 0; step < 2; ++step) {
    const float scale = info_of(recipe, slot, nullptr).scale;
    CAPTURE(scale);
    Tensor y(empty(ctx, AMPX_F8E4M3, rows * cols)), y_t(empty(ctx, AMPX_F8E4M3, rows * cols));
    REQUIRE_MESSAGE(ampx_fp8_quantize(recipe, slot, src, y, y_t) == AMPX_OK, last_error());
    const std::vector<uint8_t> q = download<uint8_t>(y), q_t = download<uint8_t>(y_t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t expected =
            reference_code(kE4M3, static_cast<double>(x[r * cols + c] * scale), true);
        CHECK(q[r * cols + c] == expected);
        CHECK(q_t[c * rows + r] == expected);
      }
    ampx_fp8_slot_info info = info_of(recipe, slot, nullptr);
    CHECK(info.scale == (step == 0 ? 1.0f : scale));
    float expected_amax = 0.0f;
    for (float v : x) expected_amax = std::max(expected_amax, std::fabs(v));
    CHECK(info.amax == expected_amax);
    REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
    info = info_of(recipe, slot, nullptr);
    CHECK(info.scale == 448.0f / expected_amax);
  }
  // Only the transposed copy.
  Tensor y_t(empty(ctx, AMPX_F8E4M3, rows * cols));
  REQUIRE(ampx_fp8_quantize(recipe, slot, src, nullptr, y_t) == AMPX_OK);
}

TEST_CASE("fp8 recipe: current scaling scales each tensor by its own amax") {
  Ctx ctx;
  for (int pow2 : {0, 1}) {
    CAPTURE(pow2);
    ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
    o.scaling = AMPX_FP8_CURRENT;
    o.amax_history_len = 3;
    o.power_of_two_scales = pow2;
    Recipe recipe(ctx, o);
    const int64_t slot = add(recipe, AMPX_FP8_BACKWARD, nullptr);
    Tensor y(empty(ctx, AMPX_F8E5M2, 4));
    for (float amax : {3.0f, 0.0f, kInf, kNaN, 1e-39f, 1000.0f}) {
      CAPTURE(amax);
      const std::vector<float> x = with_amax(amax);
      Tensor src(upload<float>(ctx, AMPX_F32, x));
      REQUIRE(ampx_fp8_quantize(recipe, slot, src, y, nullptr) == AMPX_OK);
      // TE's rule: 1 for 0 or a non-finite amax, FLT_MAX for an infinite
      // quotient, optionally the power of two at or below.
      float scale = std::isfinite(amax) && amax > 0.0f ? 57344.0f / amax : 1.0f;
      if (std::isinf(scale)) scale = kFloatMax;
      if (pow2) scale = std::ldexp(1.0f, std::ilogb(scale));
      const ampx_fp8_slot_info info = info_of(recipe, slot, nullptr);
      CHECK(bits_of(info.scale) == bits_of(scale));
      CHECK(bits_of(info.scale_inv) == bits_of(1.0f / scale));
      const std::vector<uint8_t> q = download<uint8_t>(y);
      for (size_t i = 0; i < x.size(); ++i)
        CHECK(q[i] == reference_code(kE5M2, static_cast<double>(x[i] * scale), true));
      REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
      // The update keeps the scale; the amax went into the history.
      std::vector<float> history(3);
      const ampx_fp8_slot_info after = info_of(recipe, slot, &history);
      CHECK(bits_of(after.scale) == bits_of(scale));
      CHECK(same_float(history[2], amax));
    }
  }
}

TEST_CASE("fp8 recipe: a scale tensor is a view that follows the updates") {
  Ctx ctx;
  Recipe recipe(ctx, ampx_fp8_recipe_options_default());
  // Past the first block of 64 slots: blocks never move.
  int64_t last = -1;
  for (int i = 0; i < 70; ++i) last = add(recipe, AMPX_FP8_FORWARD, ("t" + std::to_string(i)).c_str());
  Tensor scale_inv;
  REQUIRE(ampx_fp8_recipe_scale_tensor(recipe, last, 1, scale_inv.out()) == AMPX_OK);
  CHECK(download<float>(scale_inv) == std::vector<float>{1.0f});
  Tensor src(upload<float>(ctx, AMPX_F32, {7.0f, -3.5f}));
  Tensor y(empty(ctx, AMPX_F8E4M3, 2));
  REQUIRE(ampx_fp8_quantize(recipe, last, src, y, nullptr) == AMPX_OK);
  REQUIRE(ampx_fp8_recipe_update(recipe) == AMPX_OK);
  CHECK(download<float>(scale_inv) == std::vector<float>{1.0f / (448.0f / 7.0f)});
  int64_t count = 0;
  REQUIRE(ampx_fp8_recipe_slot_count(recipe, &count) == AMPX_OK);
  CHECK(count == 70);
  const ampx_fp8_slot_info info = info_of(recipe, 3, nullptr);
  CHECK(std::string(info.name) == "t3");
  CHECK(info.dtype == AMPX_F8E4M3);
  CHECK(info.history_len == 1024);
}

TEST_CASE("fp8 recipe: bad options and arguments are refused and change nothing") {
  Ctx ctx;
  ampx_fp8_recipe out = nullptr;
  ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
  o.amax_history_len = 0;
  CHECK_FAILS_WITH(ampx_fp8_recipe_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "amax_history_len");
  o = ampx_fp8_recipe_options_default();
  o.margin = -1;
  CHECK_FAILS_WITH(ampx_fp8_recipe_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "margin");
  o.margin = 128;
  CHECK_FAILS_WITH(ampx_fp8_recipe_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "margin");
  o = ampx_fp8_recipe_options_default();
  o.scaling = static_cast<ampx_fp8_scaling>(3);
  CHECK_FAILS_WITH(ampx_fp8_recipe_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "scaling");
  o = ampx_fp8_recipe_options_default();
  o.format = static_cast<ampx_fp8_format>(0);
  CHECK_FAILS_WITH(ampx_fp8_recipe_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "format");
  CHECK(out == nullptr);

  Recipe recipe(ctx, ampx_fp8_recipe_options_default());
  const int64_t slot = add(recipe, AMPX_FP8_FORWARD, "x");
  int64_t again = -1;
  CHECK_FAILS_WITH(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_BACKWARD, "x", &again),
                   AMPX_ERR_INVALID_ARGUMENT, "already");
  CHECK_FAILS_WITH(ampx_fp8_recipe_add_tensor(recipe, static_cast<ampx_fp8_role>(7), "y", &again),
                   AMPX_ERR_INVALID_ARGUMENT, "role");
  CHECK(again == -1);
  Tensor src(upload<float>(ctx, AMPX_F32, {1.0f, 2.0f}));
  Tensor wrong_type(empty(ctx, AMPX_F8E5M2, 2)), wrong_count(empty(ctx, AMPX_F8E4M3, 3));
  Tensor y(upload<uint8_t>(ctx, AMPX_F8E4M3, {0x11, 0x22}));
  Tensor ints(upload<int32_t>(ctx, AMPX_I32, {1, 2}));
  CHECK_FAILS_WITH(ampx_fp8_quantize(recipe, slot, src, wrong_type, nullptr), AMPX_ERR_DTYPE,
                   "f8e4m3");
  CHECK_FAILS_WITH(ampx_fp8_quantize(recipe, slot, src, y, wrong_count), AMPX_ERR_SHAPE,
                   "dst_transposed");
  CHECK_FAILS_WITH(ampx_fp8_quantize(recipe, slot, ints, y, nullptr), AMPX_ERR_DTYPE, "src");
  CHECK_FAILS_WITH(ampx_fp8_quantize(recipe, 1, src, y, nullptr), AMPX_ERR_INVALID_ARGUMENT, "slot");
  CHECK_FAILS_WITH(ampx_fp8_quantize(recipe, slot, src, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "dst");
  CHECK(download<uint8_t>(y) == std::vector<uint8_t>{0x11, 0x22});
  // The refused quantizations recorded no amax.
  CHECK(info_of(recipe, slot, nullptr).amax == 0.0f);
  std::vector<float> history(3);
  ampx_fp8_slot_info info = AMPX_FP8_SLOT_INFO_INIT;
  CHECK_FAILS_WITH(ampx_fp8_recipe_slot_get(recipe, slot, &info, history.data(), 3),
                   AMPX_ERR_INVALID_ARGUMENT, "capacity");
  Tensor view;
  CHECK_FAILS_WITH(ampx_fp8_recipe_scale_tensor(recipe, -1, 0, view.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "slot");
}
