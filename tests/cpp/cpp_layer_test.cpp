// The header-only C++ layer (ampx.hpp): RAII ownership and errors as
// exceptions carrying the library's status and message. Built as its own
// program against the shared library, as a user's program is: the library's
// internals are hidden there, and ampx.hpp's classes share their names.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ampx/ampx.hpp"
#include "../unit/fp8_reference.h"  // the FP8 formats decoded and rounded in double

namespace {

bool on_cuda() {
  const char* name = std::getenv("AMPX_TEST_DEVICE");
  return name && std::strcmp(name, "cuda") == 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("c++ layer: a scaled SGD step through the RAII wrappers") {
  ampx::Context ctx = on_cuda() ? ampx::Context::cuda()
                                                                  : ampx::Context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {1.0f, -2.0f, 3.0f}, {3}).cast(AMPX_F16);
  ampx::Tensor g = ampx::Tensor::zeros(ctx, AMPX_F16, {3});
  w.set_name("w");
  w.set_grad(g);
  ampx_sgd_options options = ampx_sgd_options_default();
  options.lr = 0.5;
  ampx::Optimizer opt = ampx::Optimizer::sgd(ctx, {&w}, options);
  ampx_scaler_options scaler_options = ampx_scaler_options_default();
  scaler_options.init_scale = 1024.0;
  ampx::Scaler scaler(ctx, scaler_options);
  scaler.attach(opt);

  // grads 0.25 * scale: exactly representable in f16 both scaled and not.
  g.fill(0.25 * scaler.scale());
  scaler.step(opt);
  scaler.update();
  const std::vector<float> after = w.to_vector();
  CHECK(after[0] == 1.0f - 0.125f);
  CHECK(after[1] == -2.0f - 0.125f);
  CHECK(after[2] == 3.0f - 0.125f);
  CHECK(scaler.counters().updates == 1);
}

TEST_CASE("c++ layer: a learning-rate schedule set through the wrapper steps on the device") {
  ampx::Context ctx = on_cuda() ? ampx::Context::cuda() : ampx::Context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {0.0f}, {1});
  ampx::Tensor g = ampx::Tensor::from_host(ctx, {1.0f}, {1});
  w.set_grad(g);
  ampx_sgd_options options = ampx_sgd_options_default();
  options.lr = 0.5;
  ampx::Optimizer opt = ampx::Optimizer::sgd(ctx, {&w}, options);
  ampx_lr_schedule schedule = ampx_lr_schedule_default();
  schedule.decay = AMPX_LR_LINEAR;
  schedule.total_steps = 4;
  schedule.end_factor = 0.5;
  opt.set_lr_schedule(schedule);
  CHECK(opt.lr_schedule().decay == AMPX_LR_LINEAR);
  // Rates 0.5, 0.4375, 0.375, 0.3125, then 0.25 on: exact in fp32.
  float want = 0.0f;
  for (float rate : {0.5f, 0.4375f, 0.375f, 0.3125f, 0.25f, 0.25f}) {
    opt.step();
    want -= rate;
    CHECK(w.to_vector().at(0) == want);
  }
  CHECK(opt.step_count() == 6);
  schedule.total_steps = 0;
  CHECK_THROWS_AS(opt.set_lr_schedule(schedule), ampx::Error);
}

TEST_CASE("c++ layer: failures throw ampx::Error with status and message") {
  ampx::Context ctx = on_cuda() ? ampx::Context::cuda()
                                                                  : ampx::Context();
  ampx::Tensor w = ampx::Tensor::zeros(ctx, AMPX_F32, {4});
  ampx::Tensor wrong = ampx::Tensor::zeros(ctx, AMPX_F32, {5});
  try {
    w.set_grad(wrong);
    FAIL("set_grad with 5 elements for a 4-element tensor did not throw");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_SHAPE);
    CHECK(contains(e.what(), "ampx_tensor_set_grad"));
  }
  ampx::Optimizer opt = ampx::Optimizer::adamw(ctx, {&w});
  ampx::Scaler scaler(ctx);
  scaler.attach(opt);
  CHECK_THROWS_AS(opt.step(), ampx::Error);  // scaled grads need scaler.step
  ampx::Tensor moved = std::move(w);
  CHECK_FALSE(static_cast<bool>(w));
  CHECK(moved.numel() == 4);
}

namespace {

ampx::Context test_context() { return on_cuda() ? ampx::Context::cuda() : ampx::Context(); }

uint64_t bytes_in_use(const ampx::Context& ctx) { return ctx.memory_stats().current_bytes; }

}  // namespace

TEST_CASE("c++ layer: ops return owned tensors, inside a Scope or not") {
  ampx::Context ctx = test_context();
  const uint64_t baseline = bytes_in_use(ctx);
  {
    const ampx::Tensor a = ampx::Tensor::from_host(ctx, {1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
    const ampx::Tensor b = ampx::Tensor::from_host(ctx, {0.5f, -1.0f, 2.0f, 0.0f}, {2, 2});
    ampx::Tensor sum, product;
    {
      ampx::Scope scope(ctx);
      ampx_tensor c_owned = nullptr;  // a direct C call: owned by the scope
      REQUIRE(ampx_mul(a.get(), b.get(), &c_owned) == AMPX_OK);
      sum = ampx::add(a, b);
      product = ampx::matmul(a, b);
    }
    // The Tensors outlive the scope that was open when they were made.
    CHECK(sum.to_vector() == std::vector<float>{1.5f, 1.0f, 5.0f, 4.0f});
    CHECK_FALSE(ctx.set_tf32(true));  // off by default; exact products either way here
    CHECK(ampx::matmul(a, b).to_vector() == product.to_vector());
    CHECK(ctx.set_tf32(false));
    CHECK(product.to_vector() == std::vector<float>{4.5f, -1.0f, 9.5f, -3.0f});
    CHECK(ampx::sum(ampx::relu(ampx::sub(b, a))).to_vector() == std::vector<float>{0.0f});
    CHECK(ampx::sum(ampx::sub(a, b)).to_vector() == std::vector<float>{8.5f});
    CHECK(ampx::affine(a, 2.0, 1.0).to_vector() == std::vector<float>{3.0f, 5.0f, 7.0f, 9.0f});
    CHECK(ampx::mean(a).to_vector() == std::vector<float>{2.5f});
    CHECK(ampx::softmax(a).shape() == std::vector<int64_t>{2, 2});
  }
  CHECK(bytes_in_use(ctx) == baseline);  // nothing leaked, the scope's output included
}

TEST_CASE("c++ layer: shape ops, losses and norms") {
  ampx::Context ctx;
  const ampx::Tensor a = ampx::Tensor::from_host(ctx, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  CHECK(ampx::reshape(a, {3, -1}).shape() == std::vector<int64_t>{3, 2});
  CHECK(ampx::transpose(a, 0, 1).to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(ampx::concat({&a, &a}, 0).shape() == std::vector<int64_t>{4, 3});
  const ampx::Tensor labels = ampx::Tensor::from_host_i64(ctx, {2, 0}, {2});
  CHECK(ampx::cross_entropy(a, labels).numel() == 1);
  CHECK(ampx::embedding(a, ampx::Tensor::from_host_i64(ctx, {1, 1, 0}, {3})).to_vector() ==
        std::vector<float>{4, 5, 6, 4, 5, 6, 1, 2, 3});
  const std::vector<float> normed = ampx::layer_norm(a).to_vector();
  CHECK(normed[0] == doctest::Approx(-1.2247).epsilon(1e-3));
  CHECK(ampx::dropout(a, 0.5, false).to_vector() == a.to_vector());
  const ampx::Tensor targets = ampx::Tensor::zeros(ctx, AMPX_F32, {2, 3});
  CHECK(ampx::bce_with_logits(ampx::Tensor::zeros(ctx, AMPX_F32, {2, 3}), targets).to_vector()[0] ==
        doctest::Approx(std::log(2.0)));
  // weight 2 on every element, pos_weight 3 on class 1: at x = 0, t = 1 the
  // loss is w p log 2, at t = 0 w log 2; the mean over the six elements.
  const ampx::Tensor ones = ampx::Tensor::from_host(ctx, {1, 1, 1, 0, 0, 0}, {2, 3});
  const ampx::Tensor weight = ampx::Tensor::from_host(ctx, {2.0f}, {1});
  const ampx::Tensor pos_weight = ampx::Tensor::from_host(ctx, {1.0f, 3.0f, 1.0f}, {3});
  CHECK(ampx::bce_with_logits(ampx::Tensor::zeros(ctx, AMPX_F32, {2, 3}), ones, weight, pos_weight)
            .to_vector()[0] == doctest::Approx(2.0 * (1 + 3 + 1 + 3) / 6 * std::log(2.0)));
  CHECK(ampx::bce_with_logits(ampx::Tensor::zeros(ctx, AMPX_F32, {2, 3}), ones, ampx::Tensor(),
                              ampx::Tensor(), AMPX_REDUCTION_SUM)
            .to_vector()[0] == doctest::Approx(6 * std::log(2.0)));
}

TEST_CASE("c++ layer: the CNN and Transformer ops, against values worked by hand") {
  ampx::Context ctx;
  using V = std::vector<float>;
  using S = std::vector<int64_t>;
  // A 1x1x3x3 image and a 2x2 kernel of ones, no padding: 2x2 window sums.
  const ampx::Tensor image = ampx::Tensor::from_host(ctx, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const ampx::Tensor ones = ampx::Tensor::from_host(ctx, {1, 1, 1, 1}, {1, 1, 2, 2});
  CHECK(ampx::conv2d(image, ones).to_vector() == V{12, 16, 24, 28});
  ampx_conv2d_options padded = ampx_conv2d_options_default();
  padded.padding[0] = padded.padding[1] = 1;
  padded.stride[0] = padded.stride[1] = 2;
  CHECK(ampx::conv2d(image, ones, ampx::Tensor(), padded).to_vector() == V{1, 5, 11, 28});
  CHECK(ampx::max_pool2d(image, 2, 2).to_vector() == V{5});  // stride = kernel
  ampx_pool2d_options step1 = ampx_pool2d_options_default();
  step1.stride[0] = step1.stride[1] = 1;
  CHECK(ampx::avg_pool2d(image, 2, 2, step1).to_vector() == V{3, 4, 6, 7});
  CHECK(ampx::global_avg_pool2d(image).to_vector() == V{5});

  const ampx::Tensor a = ampx::Tensor::from_host(ctx, {1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(ampx::sum(a, {0}).to_vector() == V{5, 7, 9});
  CHECK(ampx::mean(a, {-1}, true).shape() == S{2, 1});
  CHECK(ampx::amax(a, {1}).to_vector() == V{3, 6});
  CHECK(ampx::permute(a, {1, 0}).to_vector() == V{1, 4, 2, 5, 3, 6});
  CHECK(ampx::div(a, a).to_vector() == V(6, 1.0f));
  CHECK(ampx::sqrt(ampx::pow(a, 2.0)).to_vector()[5] == doctest::Approx(6.0));
  CHECK(ampx::exp(ampx::log(a)).to_vector()[2] == doctest::Approx(3.0));
  CHECK(ampx::rsqrt(a).to_vector()[3] == doctest::Approx(0.5));
  const V column = ampx::softmax(a, 0).to_vector();  // each column: 1 / (1 + e^3), e^3 / (1 + e^3)
  CHECK(column[0] == doctest::Approx(1.0 / (1.0 + std::exp(3.0))));
  CHECK(column[0] + column[3] == doctest::Approx(1.0));
  CHECK(ampx::log_softmax(a, 1).to_vector()[2] ==
        doctest::Approx(-std::log(1.0 + std::exp(-1.0) + std::exp(-2.0))));
  const std::vector<ampx::Tensor> pieces = ampx::split(a, {1, 2}, 1);
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[1].to_vector() == V{2, 3, 5, 6});
  const std::vector<ampx::Tensor> halves = ampx::chunk(a, 4, 0);  // extent 2: two pieces
  REQUIRE(halves.size() == 2);
  CHECK(halves[1].to_vector() == V{4, 5, 6});
  const ampx::Tensor mask = ampx::Tensor::from_host(ctx, {1, 0, 0}, {3});  // non-zero: set
  CHECK(ampx::masked_fill(a, mask, -1.0).to_vector() == V{-1, 2, 3, -1, 5, 6});
  CHECK(ampx::rms_norm(ampx::Tensor::from_host(ctx, {3, 4}, {1, 2})).to_vector()[1] ==
        doctest::Approx(4.0 / std::sqrt(12.5 + 1e-6)).epsilon(1e-5));

  // One query attending to two keys with scores 0 and 1 (scale 1).
  const ampx::Tensor q = ampx::Tensor::from_host(ctx, {1}, {1, 1, 1, 1});
  const ampx::Tensor k = ampx::Tensor::from_host(ctx, {0, 1}, {1, 1, 2, 1});
  const ampx::Tensor v = ampx::Tensor::from_host(ctx, {10, 20}, {1, 1, 2, 1});
  ampx_attention_options unscaled = ampx_attention_options_default();
  unscaled.scale = 1.0;
  const double p1 = std::exp(1.0) / (1.0 + std::exp(1.0));
  CHECK(ampx::scaled_dot_product_attention(q, k, v, ampx::Tensor(), unscaled).to_vector()[0] ==
        doctest::Approx(10.0 * (1.0 - p1) + 20.0 * p1));
  // Rotary with angle 0 (cos 1, sin 0) is the identity.
  const ampx::Tensor x = ampx::Tensor::from_host(ctx, {1, 2}, {1, 1, 1, 2});
  const ampx::Tensor cos = ampx::Tensor::from_host(ctx, {1}, {1, 1});
  const ampx::Tensor sin = ampx::Tensor::from_host(ctx, {0}, {1, 1});
  CHECK(ampx::rotary_embedding(x, cos, sin).to_vector() == V{1, 2});

  ampx_cross_entropy_options smoothed = ampx_cross_entropy_options_default();
  smoothed.label_smoothing = 0.0;
  const ampx::Tensor labels = ampx::Tensor::from_host_i64(ctx, {2, 0}, {2});
  CHECK(ampx::cross_entropy(a, labels, ampx::Tensor(), smoothed).to_vector() ==
        ampx::cross_entropy(a, labels).to_vector());
  CHECK_THROWS_AS(ampx::split(a, {1, 1}, 1), ampx::Error);  // sizes do not add up
  CHECK_THROWS_AS(ampx::chunk(a, 0, 0), ampx::Error);
}

TEST_CASE("c++ layer: Autocast guards enter, nest and leave regions") {
  ampx::Context ctx = test_context();
  ampx::Tensor x = ampx::Tensor::from_host(ctx, {1.0f, 2.0f}, {1, 2});
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {0.5f, 0.25f, -1.0f, 1.0f}, {2, 2});
  w.set_requires_grad();
  ampx::AutocastPolicy f16(ctx, AMPX_F16);
  {
    ampx::Autocast region(f16);
    CHECK(ampx::linear(x, w).dtype() == AMPX_F16);
    CHECK(ampx::linear(x, w).dtype() == AMPX_F16);  // w's cast comes from the cache
    {
      ampx::Autocast inner(ctx, AMPX_BF16);  // a region with a policy of its own
      CHECK(ampx::matmul(x, w).dtype() == AMPX_BF16);
    }
    CHECK(ampx::matmul(x, w).dtype() == AMPX_F16);
    f16.set_op_class("matmul", AMPX_OP_FP32);
    CHECK(f16.op_class("matmul") == AMPX_OP_FP32);
    CHECK(ampx::matmul(x, w).dtype() == AMPX_F32);
  }
  CHECK(ampx::linear(x, w).dtype() == AMPX_F32);
  CHECK(f16.cache_stats().first >= 1);

  // A guard whose exit is refused (another region was entered by hand and
  // is still open) does not throw from its destructor.
  ampx::AutocastPolicy other(ctx, AMPX_BF16);
  {
    ampx::Autocast region(f16);
    REQUIRE(ampx_autocast_enter(other.get()) == AMPX_OK);
  }
  CHECK(ampx_autocast_exit(other.get()) == AMPX_OK);
  CHECK(ampx_autocast_exit(f16.get()) == AMPX_OK);  // still open: its exit was refused
}

TEST_CASE("c++ layer: backward and the grad-mode guards") {
  ampx::Context ctx = test_context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {1.0f, -2.0f, 3.0f}, {3});
  w.set_requires_grad();
  CHECK(w.requires_grad());
  CHECK_FALSE(static_cast<bool>(w.grad()));
  {
    ampx::NoGrad no_grad(ctx);
    CHECK_FALSE(ampx::mul(w, w).requires_grad());
    {
      ampx::GradMode on(ctx, true);
      CHECK(ampx::mul(w, w).requires_grad());
    }
    CHECK_FALSE(ampx::mul(w, w).requires_grad());  // restored to off
  }
  ampx::Tensor loss = ampx::sum(ampx::mul(w, w));  // temporaries: the tape keeps what it needs
  ampx::backward(loss);
  CHECK(w.grad().to_vector() == std::vector<float>{2.0f, -4.0f, 6.0f});
  CHECK_THROWS_AS(ampx::backward(loss), ampx::Error);  // the tape was cleared
}

TEST_CASE("c++ layer: grad with create_graph, backward with retain_graph, unscale_tensor") {
  // f = sum(w^3): df/dw = 3 w^2, and d/dw sum(3 w^2) = 6 w.
  ampx::Context ctx = test_context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {1.0f, -2.0f, 3.0f}, {3});
  w.set_requires_grad();
  ampx::Tensor f = ampx::sum(ampx::mul(ampx::mul(w, w), w));
  ampx::GradOptions o;
  o.create_graph = true;
  ampx::Tensor g = ampx::grad(f, w, o);
  CHECK(g.to_vector() == std::vector<float>{3.0f, 12.0f, 27.0f});
  CHECK(g.requires_grad());
  CHECK_FALSE(static_cast<bool>(w.grad()));  // grad accumulates nowhere
  // Kept: the walk from sum(g) runs the forward's records too.
  ampx::GradOptions keep;
  keep.retain_graph = 1;
  ampx::Tensor h = ampx::grad(ampx::sum(g), w, keep);
  CHECK(h.to_vector() == std::vector<float>{6.0f, -12.0f, 18.0f});
  // An unused input: an error, or an empty Tensor with allow_unused.
  ampx::Tensor other = ampx::Tensor::from_host(ctx, {1.0f}, {1});
  other.set_requires_grad();
  o.allow_unused = true;
  std::vector<ampx::Tensor> both = ampx::grad({&f}, {&w, &other}, {}, o);
  REQUIRE(both.size() == 2);
  CHECK(static_cast<bool>(both[0]));
  CHECK_FALSE(static_cast<bool>(both[1]));
  // retain_graph: two backward passes accumulate.
  ampx::backward(f, nullptr, true);
  ampx::backward(f, nullptr, false);
  CHECK(w.grad().to_vector() == std::vector<float>{6.0f, 24.0f, 54.0f});
  CHECK_THROWS_AS(ampx::backward(f, nullptr, false), ampx::Error);  // freed
  ampx_scaler_options so = ampx_scaler_options_default();
  so.init_scale = 4.0;
  ampx::Scaler scaler(ctx, so);
  CHECK(scaler.unscale_tensor(w).to_vector() == std::vector<float>{0.25f, -0.5f, 0.75f});
}

TEST_CASE("c++ layer: higher-order gradients against closed forms in double") {
  // f = sum(tanh(w) * x): df/dw = x (1 - t^2), d/dw sum(df/dw) = -2 x t (1 - t^2), t = tanh(w).
  ampx::Context ctx = test_context();
  const std::vector<float> wv{0.3f, -1.2f, 0.8f}, xv{1.5f, -0.5f, 2.0f};
  ampx::Tensor w = ampx::Tensor::from_host(ctx, wv, {3});
  w.set_requires_grad();
  const ampx::Tensor x = ampx::Tensor::from_host(ctx, xv, {3});
  const auto near = [](const std::vector<float>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i)
      CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= 4e-7 * (1.0 + std::fabs(want[i])), i, ": ",
                    got[i], " where ", want[i]);
  };
  std::vector<double> first(3), second(3), penalty(3), seeded(3), unscaled(3);
  const std::vector<double> seed{1.0, -2.0, 0.5};
  for (size_t i = 0; i < 3; ++i) {
    const double t = std::tanh(static_cast<double>(wv[i])), x_i = xv[i], s = 1.0 - t * t;
    first[i] = x_i * s;
    second[i] = -2.0 * x_i * t * s;
    penalty[i] = -4.0 * x_i * x_i * t * s * s;  // d/dw sum((df/dw)^2)
    seeded[i] = 2.0 * static_cast<double>(wv[i]) * seed[i];
    unscaled[i] = 2.0 * static_cast<double>(wv[i]) / 64.0;  // d/dw sum((w / 8)^2)
  }
  ampx::Tensor f = ampx::sum(ampx::mul(ampx::tanh(w), x));
  ampx::GradOptions create;
  create.create_graph = true;
  ampx::Tensor g = ampx::grad(f, w, create);
  near(g.to_vector(), first);
  near(ampx::grad(ampx::sum(g), w).to_vector(), second);

  // grad_outputs: the vector-Jacobian product of y = w * w with a seed.
  const ampx::Tensor v = ampx::Tensor::from_host(ctx, {1.0f, -2.0f, 0.5f}, {3});
  ampx::Tensor y = ampx::mul(w, w);
  near(ampx::grad({&y}, {&w}, {&v})[0].to_vector(), seeded);

  // backward with create_graph: w.grad() is recorded, and differentiable.
  ampx::Tensor f2 = ampx::sum(ampx::mul(ampx::tanh(w), x));
  ampx::backward(f2, nullptr, false, true);
  ampx::Tensor wg = w.grad();
  REQUIRE(static_cast<bool>(wg));
  CHECK(wg.requires_grad());
  near(wg.to_vector(), first);
  near(ampx::grad(ampx::sum(ampx::mul(wg, wg)), w).to_vector(), penalty);
  w.set_grad(ampx::Tensor());

  // Scaler::unscale_tensor is recorded: its gradient carries the 1 / scale.
  ampx_scaler_options so = ampx_scaler_options_default();
  so.init_scale = 8.0;
  ampx::Scaler scaler(ctx, so);
  ampx::Tensor u = scaler.unscale_tensor(w);
  CHECK(u.requires_grad());
  near(ampx::grad(ampx::sum(ampx::mul(u, u)), w).to_vector(), unscaled);
}

namespace {

// The FP8 value of x in `format` (round to nearest even; saturating or not).
double fp8_round(const fp8_test::Fp8Format& format, double x, bool saturate = true) {
  return fp8_test::reference_value(format, fp8_test::reference_code(format, x, saturate));
}

void check_fp8(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(static_cast<double>(got[i]) == want[i], i, ": ", got[i], " where ", want[i]);
}

}  // namespace

TEST_CASE("c++ layer: FP8 casts, a delayed-scaling recipe and the doctor's FP8 report") {
  using fp8_test::kE4M3;
  using fp8_test::kE5M2;
  ampx::Context ctx = test_context();
  const std::vector<float> v{0.3f, -1.7f, 500.0f, 1e-3f, 61440.0f};
  const ampx::Tensor src = ampx::Tensor::from_host(ctx, v, {5});
  ampx::Tensor e4 = ampx::Tensor::empty(ctx, AMPX_F8E4M3, {5});
  ampx::Tensor e5 = ampx::Tensor::empty(ctx, AMPX_F8E5M2, {5});
  ampx::copy_fp8(e4, src, AMPX_FP8_SATURATE);
  ampx::copy_fp8(e5, src, AMPX_FP8_NO_SATURATE);
  std::vector<double> want4, want5;
  for (float x : v) {
    want4.push_back(fp8_round(kE4M3, x, true));
    want5.push_back(fp8_round(kE5M2, x, false));
  }
  check_fp8(e4.to_vector(), want4);  // 500 saturates to 448
  check_fp8(e5.to_vector(), want5);  // 61440 overflows to inf
  ampx::Tensor f32 = ampx::Tensor::empty(ctx, AMPX_F32, {5});
  try {
    ampx::copy_fp8(f32, src, AMPX_FP8_SATURATE);
    FAIL("copy_fp8 into F32 did not throw");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_DTYPE);
  }

  ampx_fp8_recipe_options o = ampx_fp8_recipe_options_default();
  o.amax_history_len = 4;
  o.margin = 1;
  ampx::Fp8Recipe recipe(ctx, o);
  const int64_t sx = recipe.add_tensor(AMPX_FP8_FORWARD, "x");
  const int64_t sg = recipe.add_tensor(AMPX_FP8_BACKWARD, "g");
  CHECK(recipe.slot_count() == 2);
  CHECK(recipe.slot(sg).dtype == AMPX_F8E5M2);  // HYBRID: gradients in E5M2
  const std::vector<float> xv{0.5f, -3.0f, 2.0f, 0.1f, 1.25f, -0.7f};
  const ampx::Tensor x = ampx::Tensor::from_host(ctx, xv, {2, 3});

  // Scale 1 at first; the transposed copy is [3, 2].
  ampx::Tensor xt = ampx::Tensor::empty(ctx, AMPX_F8E4M3, {3, 2});
  recipe.quantize(sx, x, ampx::Tensor(), xt);
  ampx::Tensor q = recipe.quantize(sx, x);
  CHECK(q.shape() == std::vector<int64_t>{2, 3});
  std::vector<double> want, want_t(6);
  for (float value : xv) want.push_back(fp8_round(kE4M3, value));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) want_t[static_cast<size_t>(c * 2 + r)] = want[static_cast<size_t>(r * 3 + c)];
  check_fp8(q.to_vector(), want);
  check_fp8(xt.to_vector(), want_t);
  CHECK(recipe.slot(sx).amax == 3.0f);

  // Delayed scaling: scale = 448 / amax / 2^margin (224 / 3 exactly in fp32).
  recipe.update();
  ampx::Fp8Recipe::Slot slot = recipe.slot(sx);
  const float scale = static_cast<float>(224.0 / 3.0);
  CHECK(slot.name == "x");
  CHECK(slot.scale == scale);
  CHECK(slot.scale_inv == 1.0f / scale);
  CHECK(slot.amax == 0.0f);
  CHECK(slot.history == std::vector<float>{0.0f, 0.0f, 0.0f, 3.0f});
  const ampx::Tensor scale_view = recipe.scale_tensor(sx);
  CHECK(scale_view.to_vector() == std::vector<float>{scale});
  CHECK(recipe.scale_tensor(sx, true).to_vector() == std::vector<float>{1.0f / scale});
  want.clear();
  for (float value : xv) want.push_back(fp8_round(kE4M3, static_cast<double>(value * scale)));
  check_fp8(recipe.quantize(sx, x).to_vector(), want);
  recipe.update();
  CHECK(recipe.slot(sx).history == std::vector<float>{0.0f, 0.0f, 3.0f, 3.0f});
  CHECK(scale_view.to_vector() == std::vector<float>{scale});  // a view: follows the update

  // The doctor: what slot g's scale (still 1: its amax was 0) would do.
  const std::vector<float> dv{1e-6f, 1.0f, 1000.0f, 0.0f};
  const ampx::Tensor d = ampx::Tensor::from_host(ctx, dv, {4});
  const ampx_fp8_tensor_report report = recipe.inspect(sg, d);
  CHECK(report.count == 3);
  CHECK(report.scale == 1.0f);
  CHECK(report.dtype == AMPX_F8E5M2);
  double flushed4 = 0, saturated4 = 0, flushed5 = 0, saturated5 = 0;
  for (float value : dv) {
    if (value == 0.0f) continue;
    flushed4 += fp8_round(kE4M3, value) == 0.0;
    saturated4 += std::fabs(value) > kE4M3.max;
    flushed5 += fp8_round(kE5M2, value) == 0.0;
    saturated5 += std::fabs(value) > kE5M2.max;
  }
  CHECK(report.flushed_e4m3 == doctest::Approx(flushed4 / 3));
  CHECK(report.saturated_e4m3 == doctest::Approx(saturated4 / 3));
  CHECK(report.flushed_e5m2 == doctest::Approx(flushed5 / 3));
  CHECK(report.saturated_e5m2 == doctest::Approx(saturated5 / 3));
  const std::string summary = recipe.summary();
  CHECK(contains(summary, "x"));
  CHECK(contains(summary, "g"));
}

TEST_CASE("c++ layer: linear in FP8 under an AutocastPolicy, forward and backward") {
  using fp8_test::kE4M3;
  ampx::Context ctx = test_context();
  const int64_t n = 16;  // m = n = k: a shape every device's FP8 GEMM takes
  std::vector<float> xv(static_cast<size_t>(n * n)), wv(xv.size());
  uint32_t state = 12345;
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f;
  };
  for (float& value : xv) value = next();
  for (float& value : wv) value = 0.5f * next();
  const ampx::Tensor x = ampx::Tensor::from_host(ctx, xv, {n, n});
  ampx::Tensor w = ampx::Tensor::from_host(ctx, wv, {n, n});
  w.set_name("w");
  w.set_requires_grad();

  ampx::Fp8Recipe recipe(ctx);
  ampx::AutocastPolicy policy(ctx, AMPX_BF16);
  policy.set_fp8(recipe, 0);
  ampx::Tensor y;
  {
    ampx::Autocast region(policy);
    y = ampx::linear(x, w);
  }
  CHECK(y.dtype() == AMPX_BF16);
  CHECK(policy.fp8_stats().fp8_products == 1);
  CHECK(policy.fp8_stats().fallbacks == 0);
  REQUIRE(recipe.slot_count() == 3);
  CHECK(recipe.slot(0).name == "w:input");
  CHECK(recipe.slot(1).name == "w:weight");
  CHECK(recipe.slot(2).name == "w:grad_output");

  // Scales are 1 in the first step: y = q(x) q(w)^T, summed in fp32 and
  // rounded once to bf16 (half an ulp: 2^-8 relative).
  const std::vector<float> got = y.to_vector();
  std::vector<double> qx, qw;
  for (float value : xv) qx.push_back(fp8_round(kE4M3, value));
  for (float value : wv) qw.push_back(fp8_round(kE4M3, value));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < n; ++k) {
        const double term = qx[static_cast<size_t>(i * n + k)] * qw[static_cast<size_t>(j * n + k)];
        sum += term;
        magnitude += std::fabs(term);
      }
      const double bound = magnitude * n * std::ldexp(1.0, -24) + std::fabs(sum) * std::ldexp(1.0, -8);
      CHECK_MESSAGE(std::fabs(got[static_cast<size_t>(i * n + j)] - sum) <= bound, i, ",", j);
    }

  // dy = 1 (exact in E5M2): dW[j][k] = sum_i q(x)[i][k], in the weight's F32.
  ampx::backward(ampx::sum(y));
  const std::vector<float> dw = w.grad().to_vector();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = 0; k < n; ++k) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        sum += qx[static_cast<size_t>(i * n + k)];
        magnitude += std::fabs(qx[static_cast<size_t>(i * n + k)]);
      }
      CHECK(std::fabs(dw[static_cast<size_t>(j * n + k)] - sum) <= magnitude * n * std::ldexp(1.0, -24));
    }
  CHECK(w.grad().dtype() == AMPX_F32);

  // Below min_gemm_size: the policy's dtype, counted with the reason; a
  // plain policy again after clear_fp8.
  ampx::AutocastPolicy small(ctx, AMPX_BF16);
  small.set_fp8(recipe, int64_t{1} << 40);
  {
    ampx::Autocast region(small);
    (void)ampx::linear(x, w);
  }
  ampx::AutocastPolicy::Fp8Stats stats = small.fp8_stats();
  CHECK(stats.fp8_products == 0);
  CHECK(stats.fallbacks == 1);
  CHECK_FALSE(stats.last_fallback.empty());
  small.clear_fp8();
  {
    ampx::Autocast region(small);
    CHECK(ampx::linear(x, w).dtype() == AMPX_BF16);
  }
  CHECK(small.fp8_stats().fallbacks == 1);  // not an FP8 policy any more
}

TEST_CASE("c++ layer: cast and clone are recorded, as torch's to and clone") {
  // loss = sum(x * x) + sum(y * y), y = x cast: torch's x.grad (2x +
  // 2 round(x), to fp32's rounding of the sums: 2e-6) and d sum(g * g) / dx
  // (torch.autograd.grad with create_graph); a dropped cast gives 2x.
  const auto agree = [](const std::vector<float>& have, const std::vector<float>& want) {
    REQUIRE(have.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      CHECK_MESSAGE(std::fabs(have[i] - want[i]) <= 2e-6f * std::fabs(want[i]), have[i], " vs ",
                    want[i]);
  };
  struct Case {
    ampx_dtype dtype;
    bool clone;
    std::vector<float> grad, second;
  };
  const Case cases[] = {
      {AMPX_BF16, false, {1.20156252f, -6.80625010f, 9.0f}, {9.61874962f, -54.4749985f, 72.0f}},
      {AMPX_F16, false, {1.20009768f, -6.80039072f, 9.0f}, {9.60117149f, -54.4046860f, 72.0f}},
      {AMPX_F32, false, {1.20000005f, -6.80000019f, 9.0f}, {9.60000038f, -54.4000015f, 72.0f}},
      {AMPX_F32, true, {1.20000005f, -6.80000019f, 9.0f}, {9.60000038f, -54.4000015f, 72.0f}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.dtype);
    CAPTURE(c.clone);
    ampx::Context ctx = test_context();
    const auto leaf = [&] {
      ampx::Tensor x = ampx::Tensor::from_host(ctx, {0.3f, -1.7f, 2.25f}, {3});
      x.set_requires_grad();
      return x;
    };
    const auto loss = [](const ampx::Tensor& x, const ampx::Tensor& y) {
      return ampx::add(ampx::sum(ampx::mul(x, x)), ampx::sum(ampx::mul(y, y)));
    };
    ampx::Tensor x = leaf();
    ampx::Tensor y = c.clone ? x.clone() : x.cast(c.dtype);
    CHECK(y.dtype() == c.dtype);
    CHECK(y.requires_grad());
    ampx::backward(loss(x, y));
    agree(x.grad().to_vector(), c.grad);
    ampx::Tensor x2 = leaf();
    ampx::GradOptions o;
    o.create_graph = true;
    ampx::Tensor g = ampx::grad(loss(x2, c.clone ? x2.clone() : x2.cast(c.dtype)), x2, o);
    agree(g.to_vector(), c.grad);
    agree(ampx::grad(ampx::sum(ampx::mul(g, g)), x2).to_vector(), c.second);
    // No gradient to carry: the plain ampx_tensor_cast.
    CHECK_FALSE(ampx::Tensor::from_host(ctx, {1.0f}, {1}).cast(c.dtype).requires_grad());
  }
}

TEST_CASE("c++ layer: clipping after unscale, diagnostics, scaler and optimizer state") {
  ampx::Context ctx = test_context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {1.0f, 1.0f}, {2});
  ampx::Tensor g = ampx::Tensor::zeros(ctx, AMPX_F32, {2});
  w.set_name("w");
  w.set_grad(g);
  ampx_sgd_options sgd = ampx_sgd_options_default();
  sgd.lr = 0.5;
  sgd.momentum = 0.9;
  ampx::Optimizer opt = ampx::Optimizer::sgd(ctx, {&w}, sgd);
  ampx_scaler_options options = ampx_scaler_options_default();
  options.init_scale = 8.0;
  ampx::Scaler scaler(ctx, options);
  scaler.attach(opt);

  // Scaled gradients (3, 4) * 8: clipping them now would be the classic bug.
  g.copy_from(ampx::Tensor::from_host(ctx, {24.0f, 32.0f}, {2}));
  try {
    ampx::clip_grad_norm(opt, 1.0);
    FAIL("clipping scaled gradients did not throw");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_ORDER);
  }
  scaler.unscale(opt);
  CHECK_FALSE(scaler.found_inf(opt));
  CHECK(ampx::clip_grad_norm(opt, 1.0).to_vector()[0] == doctest::Approx(5.0));
  CHECK(g.to_vector()[0] == doctest::Approx(0.6).epsilon(1e-5));
  ampx::clip_grad_value(opt, 0.7);
  CHECK(g.to_vector()[1] == doctest::Approx(0.7).epsilon(1e-5));
  scaler.step(opt);
  CHECK(opt.last_step_taken());
  scaler.update_to(4.0);
  CHECK(scaler.scale() == 4.0);

  const std::vector<unsigned char> saved = opt.save_state();
  const ampx_scaler_state saved_scaler = scaler.state();
  const std::vector<float> w_saved = w.to_vector();

  g.fill(std::numeric_limits<float>::quiet_NaN());
  scaler.unscale(opt);
  CHECK(scaler.found_inf(opt));
  const std::vector<ampx::NonfiniteGrad> bad = ampx::find_nonfinite_grads(opt);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].name == "w");
  CHECK(bad[0].nan_count == 2);
  scaler.step(opt);
  CHECK_FALSE(opt.last_step_taken());
  scaler.update();
  CHECK(scaler.scale() == 2.0);

  g.fill(1.0 * scaler.scale());  // a good step moves w and the momentum
  scaler.step(opt);
  scaler.update();
  CHECK(w.to_vector() != w_saved);
  opt.load_state(saved);  // w is F32, so its own master: restored as saved
  scaler.set_state(saved_scaler);
  CHECK(scaler.scale() == 4.0);
  CHECK(w.to_vector() == w_saved);
}

TEST_CASE("c++ layer: op failures throw with the op's name") {
  ampx::Context ctx = test_context();
  const ampx::Tensor a = ampx::Tensor::zeros(ctx, AMPX_F32, {2, 3});
  const ampx::Tensor b = ampx::Tensor::zeros(ctx, AMPX_F32, {4, 5});
  try {
    ampx::matmul(a, b);
    FAIL("matmul of [2, 3] and [4, 5] did not throw");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_SHAPE);
    CHECK(contains(e.what(), "ampx_matmul"));
  }
  try {
    ampx::relu(ampx::Tensor());
    FAIL("relu of an empty Tensor did not throw");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "ampx_relu"));
  }
  const uint64_t baseline = bytes_in_use(ctx);
  CHECK_THROWS_AS(ampx::add(a, b), ampx::Error);
  CHECK(bytes_in_use(ctx) == baseline);  // the op's scope was closed on the way out
  CHECK(ampx_scope_pop(ctx.get()) == AMPX_ERR_ORDER);  // and no scope was left open
}

int main(int argc, char** argv) {
  if (on_cuda() && ampx_cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

TEST_CASE("c++ layer: onnx_export writes a model, refuses an output no input reaches") {
  ampx::Context ctx = test_context();
  ampx::Tensor w = ampx::Tensor::from_host(ctx, {0.5f, -1.0f, 0.25f, 2.0f, 0.0f, -0.5f}, {2, 3});
  w.set_requires_grad();
  ampx::Tensor x = ampx::Tensor::from_host(ctx, {1.0f, 2.0f, 3.0f}, {1, 3});
  x.set_requires_grad();
  const ampx::Tensor y = ampx::linear(x, w);
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/ampx-cpp-layer-" +
                           std::to_string(static_cast<long>(std::rand())) + ".onnx";
  ampx::onnx_export(path, {{&x, "x"}}, {{&y, "y"}});
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  unsigned char head[2] = {0, 0};
  CHECK(std::fread(head, 1, 2, f) == 2);
  std::fclose(f);
  CHECK(head[0] == 0x08);  // ModelProto field 1 (ir_version), a varint
  CHECK(head[1] == 8);
  std::remove(path.c_str());
  const ampx::Tensor lone = ampx::Tensor::from_host(ctx, {1.0f}, {1});
  try {
    ampx::onnx_export(path, {{&x, "x"}}, {{&lone, "lone"}});
    FAIL("an output depending on no input was exported");
  } catch (const ampx::Error& e) {
    CHECK(e.status() == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "does not depend on any input"));
  }
  CHECK(std::fopen(path.c_str(), "rb") == nullptr);
}
