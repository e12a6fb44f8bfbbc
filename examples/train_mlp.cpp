// train_mlp.cpp -- the mixed-precision training loop of train_mlp.c through
// the C++ layer (ampx.hpp).
//
// The same task and recipe (seed 3.2): a 2 -> 64 -> 64 -> 3 MLP classifies
// points on three concentric rings, each step forward and loss under
// autocast f16, backward seeded with the loss scale, unscale, clip, step,
// update. What C++ changes: tensors, optimizers, scalers and policies are
// RAII owners; autocast regions and grad mode are guards that close at the
// end of their block; op outputs are owned Tensors, so intermediates free
// themselves and no scope is needed; a failing call throws ampx::Error with
// the library's status and message.
//
// Run:   ampx_example_train_mlp_cpp [--quick] [--steps N]
// Exits 1 if the final accuracy is below 90% or an ampx call fails.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ampx/ampx.hpp"

namespace {

constexpr int64_t kIn = 2, kHidden = 64, kClasses = 3, kSamples = 1536, kBatch = 128;

struct Data {
  std::vector<float> x;
  std::vector<int64_t> y;
};

// Class c on the ring of radius c + 1, with +-0.4 of radial noise.
Data make_rings() {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Data d;
  for (int64_t i = 0; i < kSamples; ++i) {
    const int64_t c = i % kClasses;
    const double angle = 6.283185307179586 * unit(rng);
    const double radius = static_cast<double>(c) + 1.0 + 0.8 * (unit(rng) - 0.5);
    d.x.push_back(static_cast<float>(radius * std::cos(angle)));
    d.x.push_back(static_cast<float>(radius * std::sin(angle)));
    d.y.push_back(c);
  }
  return d;
}

struct Mlp {
  ampx::Tensor w1, b1, w2, b2, w3, b3;

  Mlp(const ampx::Context& ctx, std::mt19937_64& rng)
      : w1(param(ctx, rng, {kHidden, kIn}, kIn)),
        b1(param(ctx, rng, {kHidden}, kIn)),
        w2(param(ctx, rng, {kHidden, kHidden}, kHidden)),
        b2(param(ctx, rng, {kHidden}, kHidden)),
        w3(param(ctx, rng, {kClasses, kHidden}, kHidden)),
        b3(param(ctx, rng, {kClasses}, kHidden)) {}

  // The intermediate activations are temporaries: released at the end of
  // the statement, kept alive by the tape for as long as backward needs.
  ampx::Tensor forward(const ampx::Tensor& x) const {
    using ampx::linear;
    return linear(linear(linear(x, w1, b1, AMPX_ACTIVATION_RELU), w2, b2, AMPX_ACTIVATION_RELU),
                  w3, b3);
  }

  // Uniform in +-1/sqrt(fan_in), torch's nn.Linear default.
  static ampx::Tensor param(const ampx::Context& ctx, std::mt19937_64& rng,
                            std::vector<int64_t> shape, int64_t fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    std::uniform_real_distribution<double> dist(-bound, bound);
    int64_t n = 1;
    for (int64_t extent : shape) n *= extent;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = static_cast<float>(dist(rng));
    ampx::Tensor t = ampx::Tensor::from_host(ctx, values, std::move(shape));
    t.set_requires_grad();
    return t;
  }
};

int correct(const std::vector<float>& logits, const int64_t* labels, int64_t rows) {
  int right = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = logits.data() + i * kClasses;
    int64_t best = 0;
    for (int64_t c = 1; c < kClasses; ++c)
      if (row[c] > row[best]) best = c;
    right += best == labels[i];
  }
  return right;
}

int run(int steps) {
  const Data data = make_rings();
  ampx::Context ctx;
  std::mt19937_64 rng(7);
  Mlp model(ctx, rng);

  ampx_adam_options adamw = ampx_adamw_options_default();
  adamw.lr = 1e-2;
  ampx::Optimizer opt = ampx::Optimizer::adamw(
      ctx, {&model.w1, &model.b1, &model.w2, &model.b2, &model.w3, &model.b3}, adamw);
  ampx::Scaler scaler(ctx);  // torch's defaults
  ampx::AutocastPolicy f16(ctx, AMPX_F16);

  std::printf("step    loss    scale  grad-norm\n");
  for (int step = 0; step < steps; ++step) {
    const int64_t first = (step * kBatch) % kSamples;
    const ampx::Tensor x = ampx::Tensor::from_host(
        ctx, std::vector<float>(data.x.begin() + first * kIn, data.x.begin() + (first + kBatch) * kIn),
        {kBatch, kIn});
    const ampx::Tensor y = ampx::Tensor::from_host_i64(
        ctx, std::vector<int64_t>(data.y.begin() + first, data.y.begin() + first + kBatch), {kBatch});

    opt.zero_grad();
    ampx::Tensor loss;
    {
      ampx::Autocast region(f16);
      loss = ampx::cross_entropy(model.forward(x), y);
    }
    ampx::backward(loss, scaler);
    scaler.unscale(opt);
    const ampx::Tensor norm = ampx::clip_grad_norm(opt, 1.0);  // stays on the device
    scaler.step(opt);
    scaler.update();

    if (step % 50 == 0 || step == steps - 1)
      std::printf("%4d  %6.4f  %7.0f  %9.4f\n", step, loss.to_vector()[0], scaler.scale(),
                  norm.to_vector()[0]);
  }

  // Evaluation: no tape, the training precision.
  const ampx::Tensor all_x = ampx::Tensor::from_host(ctx, data.x, {kSamples, kIn});
  std::vector<float> logits;
  {
    ampx::NoGrad no_grad(ctx);
    ampx::Autocast region(f16);
    logits = model.forward(all_x).to_vector();
  }
  const double accuracy = static_cast<double>(correct(logits, data.y.data(), kSamples)) / kSamples;
  std::printf("skipped steps: %lld of %lld\n", static_cast<long long>(scaler.counters().skipped),
              static_cast<long long>(scaler.counters().updates));
  std::printf("final accuracy: %.1f%% on %lld points after %d steps\n", 100.0 * accuracy,
              static_cast<long long>(kSamples), steps);
  if (accuracy < 0.90) {
    std::fprintf(stderr, "FAILED: accuracy %.3f is below 0.90\n", accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 600;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      steps = 150;
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  try {
    return run(steps);
  } catch (const ampx::Error& e) {
    std::fprintf(stderr, "ampx error %s: %s\n", ampx_status_string(e.status()), e.what());
    return 1;
  }
}
