// test_data_parallel_nccl.cpp -- ampx_data_parallel over NCCL, in one
// process: a one-rank communicator from a unique id must train exactly as
// no wrapper does (the all-reduce, found-inf reduction, broadcast,
// reduce-scatter and all-gather of one rank are identities), with and
// without ZeRO-1. Runs on a real GPU only (NCCL is not emulated); on the
// CPU suite it checks the refusals.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"

namespace {

#define OK(call) REQUIRE_MESSAGE((call) == AMPX_OK, #call, ": ", std::string(ampx_last_error()))

struct Model {
  ampx_context ctx = nullptr;
  ampx_tensor w = nullptr, b = nullptr;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_comm comm = nullptr;
  ampx_data_parallel dp = nullptr;

  Model(bool wrapped, int32_t zero_stage) {
    ctx = ampx_test::test_context();
    const int64_t w_shape[2] = {8, 16}, b_shape[1] = {8};
    std::vector<float> values(128);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
    ampx_tensor w32 = nullptr;
    OK(ampx_tensor_from_host(ctx, AMPX_F32, 2, w_shape, values.data(), 128 * sizeof(float), &w32));
    OK(ampx_tensor_cast(w32, AMPX_F16, &w));
    ampx_tensor_release(w32);
    OK(ampx_tensor_zeros(ctx, AMPX_F16, 1, b_shape, &b));
    OK(ampx_tensor_set_requires_grad(w, 1));
    OK(ampx_tensor_set_requires_grad(b, 1));
    ampx_tensor params[2] = {w, b};
    ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
    OK(ampx_optimizer_create_adam(ctx, params, 2, &adam, &opt));
    OK(ampx_scaler_create(ctx, nullptr, &scaler));
    if (!wrapped) return;
    unsigned char id[AMPX_NCCL_UNIQUE_ID_BYTES];
    OK(ampx_nccl_unique_id(id, sizeof id));
    OK(ampx_comm_init_nccl(ctx, id, sizeof id, 1, 0, &comm));
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
    options.zero_stage = zero_stage;
    OK(ampx_data_parallel_create(comm, opt, &options, &dp));
  }
  ~Model() {
    ampx_data_parallel_release(dp);
    ampx_comm_release(comm);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    ampx_tensor_release(w);
    ampx_tensor_release(b);
    ampx_context_release(ctx);
  }
  void step(int k) {
    const int64_t x_shape[2] = {4, 16};
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i + k) % 7) - 0.3f;
    OK(ampx_optimizer_zero_grad(opt));
    OK(ampx_scope_push(ctx));
    ampx_tensor x32 = nullptr, x16 = nullptr, y = nullptr, loss = nullptr, norm = nullptr;
    OK(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, x.data(), x.size() * sizeof(float), &x32));
    OK(ampx_tensor_cast(x32, AMPX_F16, &x16));
    OK(ampx_linear(x16, w, b, AMPX_ACTIVATION_RELU, &y));
    OK(ampx_mean(y, &loss));
    OK(ampx_backward(loss, scaler));
    OK(ampx_scaler_unscale(scaler, opt));
    OK(ampx_clip_grad_norm(opt, 0.5, 2.0, 0, &norm));
    OK(ampx_scaler_step(scaler, opt));
    OK(ampx_scaler_update(scaler));
    ampx_tensor_release(norm);
    ampx_tensor_release(x32);
    ampx_tensor_release(x16);
    OK(ampx_scope_pop(ctx));
  }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> all(128 * 2 + 8 * 2);
    OK(ampx_tensor_to_host(w, all.data(), 256));
    OK(ampx_tensor_to_host(b, all.data() + 256, 16));
    return all;
  }
};

}  // namespace

TEST_CASE("data parallel over NCCL: one rank trains exactly as no wrapper") {
  if (ampx_test::test_device() != AMPX_DEVICE_CUDA) {
    ampx_context ctx = ampx_test::test_context();
    ampx_comm comm = nullptr;
    int fake = 0;
    CHECK(ampx_comm_from_nccl(ctx, &fake, &comm) == AMPX_ERR_NOT_SUPPORTED);
    CHECK(std::string(ampx_last_error()).find("CPU contexts use ampx_comm_from_mpi") !=
          std::string::npos);
    unsigned char id[AMPX_NCCL_UNIQUE_ID_BYTES] = {};
    CHECK(ampx_comm_init_nccl(ctx, id, sizeof id, 1, 0, &comm) == AMPX_ERR_NOT_SUPPORTED);
    CHECK(ampx_comm_init_nccl(ctx, id, 3, 1, 0, &comm) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(ampx_nccl_unique_id(id, 3) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(ampx_comm_from_mpi(ctx, nullptr, &comm) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(comm == nullptr);
    ampx_context_release(ctx);
    return;
  }
#ifdef AMPX_CUDA_EMULATED
  MESSAGE("skipped: NCCL needs a real GPU (the emulator does not emulate NCCL)");
  return;
#endif
  {
    ampx_context ctx = ampx_test::test_context();
    ampx_comm comm = nullptr;
    CHECK(ampx_comm_from_mpi(ctx, &comm, &comm) == AMPX_ERR_NOT_SUPPORTED);
    ampx_context_release(ctx);
  }
  for (int32_t zero_stage = 0; zero_stage <= 1; ++zero_stage) {
    CAPTURE(zero_stage);
    Model plain(false, 0), wrapped(true, zero_stage);
    for (int k = 0; k < 5; ++k) {
      plain.step(k);
      wrapped.step(k);
    }
    CHECK(wrapped.bytes() == plain.bytes());
    ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
    OK(ampx_data_parallel_get_stats(wrapped.dp, &stats));
    CHECK(stats.world_size == 1);
    CHECK(stats.reductions == 5);
    CHECK(stats.shard_elements == 136);
    OK(ampx_comm_set_timeout(wrapped.comm, 30.0));
  }
}

TEST_CASE("the MPI plugin: AMPX_MPI_PLUGIN names the only path tried, and none turns MPI off") {
  ampx_context ctx = nullptr;
  OK(ampx_context_create(nullptr, &ctx));  // the CPU, whose communicators are MPI's
  const char* before = std::getenv("AMPX_MPI_PLUGIN");
  const std::string saved = before ? before : "";
  int not_a_comm = 0;
  ampx_comm comm = nullptr;
  setenv("AMPX_MPI_PLUGIN", "none", 1);
  CHECK(ampx_comm_from_mpi(ctx, &not_a_comm, &comm) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(std::string(ampx_last_error()).find("AMPX_MPI_PLUGIN is \"none\"") != std::string::npos);
  // A missing file there is not replaced by the plugin beside libampx.
  setenv("AMPX_MPI_PLUGIN", "/nonexistent/libampx_mpi.so", 1);
  CHECK(ampx_comm_from_mpi(ctx, &not_a_comm, &comm) == AMPX_ERR_NOT_SUPPORTED);
  const std::string message = ampx_last_error();
  CHECK(message.find("the only one tried") != std::string::npos);
  CHECK(message.find("/nonexistent/libampx_mpi.so:") != std::string::npos);
  CHECK(comm == nullptr);
  if (before)
    setenv("AMPX_MPI_PLUGIN", saved.c_str(), 1);
  else
    unsetenv("AMPX_MPI_PLUGIN");
  ampx_context_release(ctx);
}
