// The header-only C++ layer (ampx.hpp): RAII ownership and errors as
// exceptions carrying the library's status and message. Built as its own
// program against the shared library, as a user's program is: the library's
// internals are hidden there, and ampx.hpp's classes share their names.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ampx/ampx.hpp"

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

int main(int argc, char** argv) {
  if (on_cuda() && ampx_cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
