// Backend capabilities (src/core/backend.h): a backend that implements only
// the core -- memory, copies, fill, convert, streams and events -- runs the
// whole tensor API, and every op, optimizer and scaler call that needs a
// capability it lacks fails with AMPX_ERR_NOT_SUPPORTED naming the op and
// the device, changing nothing. Also: the capability queries of the real
// backends, and ordering work between two streams with events.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/context.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "platform/platform.h"
#include "support.h"
#if defined(AMPX_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using ampx_test::contains;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;

namespace {

// The core alone, on host memory, written here rather than taken from the
// CPU backend so that the test shows what a new backend must provide.
class CoreOnlyBackend final : public ampx::impl::Backend {
 public:
  // It says why it lacks convolution, as the CUDA backend does without cuDNN.
  CoreOnlyBackend()
      : Backend(ampx::impl::BackendInfo{AMPX_DEVICE_CPU, 0, 64, true, "core-only test"}) {
    explain_missing(ampx::impl::Capability::Convolution, "no convolution library was found");
  }

  std::unique_ptr<ampx::impl::Allocator> make_default_allocator() override {
    struct HostMemory final : ampx::impl::Allocator {
      void* allocate(size_t bytes) override {
        held += bytes;
        return ampx::impl::platform::aligned_alloc(64, (bytes + 63) / 64 * 64);
      }
      void deallocate(void* ptr, size_t bytes) override {
        held -= bytes;
        ampx::impl::platform::aligned_free(ptr);
      }
      uint64_t reserved_bytes() const override { return held; }
      uint64_t held = 0;
    };
    return std::make_unique<HostMemory>();
  }
  void check_device_pointer(const void*, const char*) override {}
  void synchronize() override {}
  std::unique_ptr<ampx::impl::DeviceEvent> make_event() override {
    return std::make_unique<ampx::impl::DeviceEvent>();
  }
  void record_event(ampx::impl::DeviceEvent&, ampx::impl::Stream) override {}
  void wait_event(ampx::impl::Stream, const ampx::impl::DeviceEvent&) override {}
  bool event_completed(const ampx::impl::DeviceEvent&) override { return true; }
  void* native_stream(ampx::impl::Stream) override { return nullptr; }

 protected:
  void run_copy_from_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void run_copy_to_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void run_copy(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void run_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) override {
    auto* out = static_cast<unsigned char*>(dst);
    for (int64_t i = 0; i < count; ++i) std::memcpy(out + i * elem_size, &pattern, elem_size);
  }
  void run_convert(void* dst, ampx::impl::DType dst_type, const void* src,
                   ampx::impl::DType src_type, int64_t count) override {
    ampx::impl::convert_bulk(dst, dst_type, src, src_type, count);
  }
};

struct CoreOnlyContext {
  ampx_context handle;
  CoreOnlyContext() {
    const ampx_context_options options = ampx_context_options_default();
    handle = reinterpret_cast<ampx_context>(ampx::impl::DeviceContext::create_with_backend(
        options, std::make_unique<CoreOnlyBackend>()));
  }
  ~CoreOnlyContext() { ampx_context_release(handle); }
  operator ampx_context() const { return handle; }
};

ampx_tensor matrix(ampx_context ctx, ampx_dtype dtype, int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_zeros(ctx, dtype, 2, shape, &t) == AMPX_OK);
  return t;
}

}  // namespace

TEST_CASE("capabilities: a core-only backend runs the tensor API") {
  CoreOnlyContext ctx;
  Tensor a(upload<float>(ctx, AMPX_F32, {1.0f, -2.5f, 3.25f, 65504.0f}));
  CHECK(download<float>(a) == std::vector<float>{1.0f, -2.5f, 3.25f, 65504.0f});

  Tensor half;
  REQUIRE(ampx_tensor_cast(a, AMPX_F16, half.out()) == AMPX_OK);
  CHECK(download<uint16_t>(half) == std::vector<uint16_t>{0x3c00, 0xc100, 0x4280, 0x7bff});
  Tensor back(matrix(ctx, AMPX_F32, 2, 2));
  REQUIRE(ampx_tensor_copy(back, half) == AMPX_OK);
  CHECK(download<float>(back) == std::vector<float>{1.0f, -2.5f, 3.25f, 65504.0f});

  REQUIRE(ampx_tensor_fill(back, 0.5) == AMPX_OK);
  CHECK(download<float>(back) == std::vector<float>(4, 0.5f));
  const std::vector<float> host = {7.0f, 8.0f, 9.0f, 10.0f};
  REQUIRE(ampx_tensor_copy_from_host(back, host.data(), sizeof(float) * 4) == AMPX_OK);
  CHECK(download<float>(back) == host);

  // Reshape is a view: it needs no capability.
  const int64_t flat[1] = {4};
  Tensor reshaped;
  REQUIRE(ampx_reshape(back, 1, flat, reshaped.out()) == AMPX_OK);
  CHECK(download<float>(reshaped) == host);

  Tensor grad(matrix(ctx, AMPX_BF16, 2, 2));
  REQUIRE(ampx_tensor_set_grad(back, grad) == AMPX_OK);

  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
  CHECK(stats.current_bytes > 0);
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
}

TEST_CASE("capabilities: every op on a core-only backend is NOT_SUPPORTED, naming the op") {
  CoreOnlyContext ctx;
  Tensor x(matrix(ctx, AMPX_F32, 4, 3));
  Tensor y(matrix(ctx, AMPX_F32, 4, 3));
  Tensor w(matrix(ctx, AMPX_F32, 5, 3));
  Tensor square(matrix(ctx, AMPX_F32, 3, 3));
  Tensor labels(upload<int32_t>(ctx, AMPX_I32, {0, 1, 2, 1}));
  const int64_t c[1] = {3};
  Tensor channel;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 1, c, channel.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);

  using Call = std::function<ampx_status(ampx_tensor*)>;
  const std::vector<std::pair<std::string, Call>> ops = {
      {"add", [&](ampx_tensor* o) { return ampx_add(x, y, o); }},
      {"sub", [&](ampx_tensor* o) { return ampx_sub(x, y, o); }},
      {"mul", [&](ampx_tensor* o) { return ampx_mul(x, y, o); }},
      {"affine", [&](ampx_tensor* o) { return ampx_affine(x, 2.0, 1.0, o); }},
      {"relu", [&](ampx_tensor* o) { return ampx_relu(x, o); }},
      {"gelu", [&](ampx_tensor* o) { return ampx_gelu(x, o); }},
      {"gelu_tanh", [&](ampx_tensor* o) { return ampx_gelu_tanh(x, o); }},
      {"silu", [&](ampx_tensor* o) { return ampx_silu(x, o); }},
      {"sigmoid", [&](ampx_tensor* o) { return ampx_sigmoid(x, o); }},
      {"tanh", [&](ampx_tensor* o) { return ampx_tanh(x, o); }},
      {"sum", [&](ampx_tensor* o) { return ampx_sum(x, o); }},
      {"mean", [&](ampx_tensor* o) { return ampx_mean(x, o); }},
      {"softmax", [&](ampx_tensor* o) { return ampx_softmax(x, o); }},
      {"log_softmax", [&](ampx_tensor* o) { return ampx_log_softmax(x, o); }},
      {"cross_entropy",
       [&](ampx_tensor* o) {
         return ampx_cross_entropy(x, labels, AMPX_REDUCTION_MEAN, -100, o);
       }},
      {"mse_loss", [&](ampx_tensor* o) { return ampx_mse_loss(x, y, AMPX_REDUCTION_MEAN, o); }},
      {"matmul", [&](ampx_tensor* o) { return ampx_matmul(x, square, o); }},
      {"linear", [&](ampx_tensor* o) { return ampx_linear(x, w, nullptr, AMPX_ACTIVATION_RELU, o); }},
      {"layer_norm", [&](ampx_tensor* o) { return ampx_layer_norm(x, nullptr, nullptr, 1e-5, o); }},
      {"batch_norm",
       [&](ampx_tensor* o) {
         return ampx_batch_norm(x, channel, channel, nullptr, nullptr, 1, 0.1, 1e-5, o);
       }},
      {"dropout", [&](ampx_tensor* o) { return ampx_dropout(x, 0.5, 1, o); }},
      {"embedding", [&](ampx_tensor* o) { return ampx_embedding(w, labels, o); }},
      {"transpose", [&](ampx_tensor* o) { return ampx_transpose(x, 0, 1, o); }},
      {"concat",
       [&](ampx_tensor* o) {
         const ampx_tensor both[2] = {x, y};
         return ampx_concat(both, 2, 0, o);
       }},
      {"bce_with_logits",
       [&](ampx_tensor* o) { return ampx_bce_with_logits(x, y, AMPX_REDUCTION_SUM, o); }},
      {"conv2d", [&](ampx_tensor* o) { return ampx_conv2d(x, w, nullptr, nullptr, o); }},
      {"max_pool2d", [&](ampx_tensor* o) { return ampx_max_pool2d(x, 2, 2, nullptr, o); }},
      {"avg_pool2d", [&](ampx_tensor* o) { return ampx_avg_pool2d(x, 2, 2, nullptr, o); }},
  };
  for (const auto& [name, call] : ops) {
    CAPTURE(name);
    ampx_tensor out = nullptr;
    CHECK(call(&out) == AMPX_ERR_NOT_SUPPORTED);
    CHECK(out == nullptr);
    CHECK(contains(last_error(), name + " needs the "));
    CHECK(contains(last_error(), "the core-only test backend does not provide"));
    CHECK(contains(last_error(), "no convolution library was found") == (name == "conv2d"));
  }
  CHECK(download<float>(x) == std::vector<float>(12, 0.0f));
}

TEST_CASE("capabilities: optimizers and scalers on a core-only backend refuse, changing nothing") {
  CoreOnlyContext ctx;
  Tensor p(upload<float>(ctx, AMPX_F32, {1.0f, 2.0f}));
  Tensor g(upload<float>(ctx, AMPX_F32, {0.5f, 0.25f}));
  REQUIRE(ampx_tensor_set_grad(p, g) == AMPX_OK);
  ampx_tensor params[1] = {p};
  ampx_optimizer opt = nullptr;
  REQUIRE(ampx_optimizer_create_sgd(ctx, params, 1, nullptr, &opt) == AMPX_OK);

  CHECK(ampx_optimizer_step(opt) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(contains(last_error(), "the optimizer step needs the multi-tensor AMP primitives"));
  CHECK(download<float>(p) == std::vector<float>{1.0f, 2.0f});
  int32_t taken = -1;
  CHECK(ampx_optimizer_last_step_taken(opt, &taken) == AMPX_ERR_ORDER);  // it never stepped

  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, nullptr, &scaler) == AMPX_OK);
  Tensor scaled;
  CHECK(ampx_scaler_scale_loss(scaler, p, scaled.out()) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(contains(last_error(), "scale_loss needs"));
  CHECK(ampx_scaler_unscale(scaler, opt) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(contains(last_error(), "unscale needs"));
  // The failed unscale did not attach the optimizer or move it along.
  CHECK(ampx_scaler_update(scaler) == AMPX_ERR_ORDER);
  CHECK(ampx_clip_grad_norm(opt, 1.0, 2.0, 0, nullptr) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(contains(last_error(), "clip_grad_norm needs"));
  CHECK(ampx_clip_grad_value(opt, 1.0) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(download<float>(g) == std::vector<float>{0.5f, 0.25f});
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
}

TEST_CASE("capabilities: the built-in backends say what they provide") {
  ampx_test::Ctx ctx;
  const ampx::impl::Backend& backend =
      reinterpret_cast<ampx::impl::DeviceContext*>(ctx.handle)->backend();
  CHECK(backend.supports(ampx::impl::Capability::MultiTensorAmp));
  CHECK(backend.supports(ampx::impl::Capability::Nn));
  CHECK(backend.supports(ampx::impl::Capability::Gemm));
  CHECK(backend.supports(ampx::impl::Capability::GradStats));
  CHECK(backend.supports(ampx::impl::Capability::Attention));
  CHECK(backend.supports(ampx::impl::Capability::Pooling));
  // The CUDA backend convolves through cuDNN, which the emulator stands in for.
#if defined(AMPX_CUDA_EMULATED)
  CHECK(backend.supports(ampx::impl::Capability::Convolution));
#else
  if (ampx_test::test_device() == AMPX_DEVICE_CPU)
    CHECK(backend.supports(ampx::impl::Capability::Convolution));
#endif
  // FP8: casts everywhere, products on the CPU and (emulated) Hopper.
  CHECK(backend.supports(ampx::impl::Capability::Fp8));
#if defined(AMPX_CUDA_EMULATED)
  CHECK(backend.supports(ampx::impl::Capability::Fp8Gemm));
#else
  if (ampx_test::test_device() == AMPX_DEVICE_CPU)
    CHECK(backend.supports(ampx::impl::Capability::Fp8Gemm));
#endif
  // Whatever this backend lacks (a GPU without FP8 products, cuDNN
  // missing) is refused with NOT_SUPPORTED naming the op and the device.
  for (int index = 0; index < static_cast<int>(ampx::impl::Capability::Count); ++index) {
    const auto slot = static_cast<ampx::impl::Capability>(index);
    if (backend.supports(slot)) continue;
    CAPTURE(ampx::impl::capability_name(slot));
    bool refused = false;
    try {
      backend.refuse("the test's call", slot);
    } catch (const ampx::impl::StatusError& e) {
      refused = e.status() == AMPX_ERR_NOT_SUPPORTED && contains(e.what(), "the test's call") &&
                contains(e.what(), backend.name());
    }
    CHECK(refused);
  }
  CHECK(backend.synchronous() == (ampx_test::test_device() == AMPX_DEVICE_CPU));
}

// Work on the communication stream ordered after the compute stream's with
// an event, and back: what a bucketed all-reduce does.
TEST_CASE("capabilities: events order the compute and communication streams") {
  ampx_test::Ctx ctx;
  ampx::impl::DeviceContext& context = *reinterpret_cast<ampx::impl::DeviceContext*>(ctx.handle);
  ampx::impl::Backend& backend = context.backend();
  constexpr int64_t kCount = 1 << 20;
  const size_t bytes = kCount * sizeof(float);
  void* src = context.allocate(bytes);
  void* dst = context.allocate(bytes);
  auto compute_done = backend.make_event();
  auto comm_done = backend.make_event();
  for (uint32_t round = 1; round <= 3; ++round) {
    const float value = static_cast<float>(round);
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    backend.fill(src, 4, bits, kCount);
    backend.record_event(*compute_done, ampx::impl::Stream::Compute);
    backend.wait_event(ampx::impl::Stream::Communication, *compute_done);
    void* comm = backend.native_stream(ampx::impl::Stream::Communication);
    if (backend.synchronous()) {
      CHECK(comm == nullptr);
      backend.copy(dst, src, bytes);
    } else {
#if defined(AMPX_WITH_CUDA)
      REQUIRE(comm != nullptr);
      CHECK(comm != backend.native_stream(ampx::impl::Stream::Compute));
      REQUIRE(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                              static_cast<cudaStream_t>(comm)) == cudaSuccess);
#endif
    }
    backend.record_event(*comm_done, ampx::impl::Stream::Communication);
    backend.wait_event(ampx::impl::Stream::Compute, *comm_done);
    std::vector<float> host(kCount);
    backend.copy_to_host(host.data(), dst, bytes);  // on the compute stream
    CHECK(host.front() == value);
    CHECK(host.back() == value);
  }
  backend.synchronize();
  context.deallocate(src, bytes);
  context.deallocate(dst, bytes);
}
