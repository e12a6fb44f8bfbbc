// fuzz_dist_setup.cpp -- libFuzzer target: ampx_data_parallel's setup
// checks against what the other ranks send.
//
// The setup is collective: this rank (0 or another, of a world of 2 to 5)
// gathers every rank's join record and, when the parameter digests differ,
// rank 0's parameter records, every rank's first difference and the
// culprit's record. Here the other ranks are the input: a transport stands
// in for MPI, filling the other ranks' parts of each all-gather and every
// broadcast from another rank with input bytes (a peer running another
// build, or a damaged one). The local parameters and options come from the
// input too.
//
// Oracles besides the sanitizers: the setup either succeeds or fails with a
// StatusError whose status is a real one, INTERNAL only when it relays
// another rank's (out of memory allowed); a failed setup leaves the optimizer unwrapped (it still steps
// alone) and no gradient attached.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "ampx/ampx.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"

namespace {

using namespace ampx::impl;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_dist_setup finding: %s\n", what);
  std::abort();
}

class InputTransport final : public Transport {
 public:
  InputTransport(FuzzedDataProvider& input, int32_t rank, int32_t size)
      : input_(input), rank_(rank), size_(size) {}
  const char* library() const override { return "the fuzzer's"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  void all_reduce(void*, int64_t, DType, ReduceOp, Stream) override {}
  void broadcast(void* data, size_t bytes, int32_t root, Stream) override {
    if (root != rank_) fill(static_cast<unsigned char*>(data), bytes);
  }
  void all_gather(const void* send, void* recv, size_t bytes, Stream) override {
    auto* out = static_cast<unsigned char*>(recv);
    for (int32_t r = 0; r < size_; ++r)
      if (r == rank_)
        std::memmove(out + static_cast<size_t>(r) * bytes, send, bytes);
      else
        fill(out + static_cast<size_t>(r) * bytes, bytes);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp,
                      Stream) override {
    std::memcpy(recv, static_cast<const char*>(send) + rank_ * count * dtype_size(dtype),
                static_cast<size_t>(count) * dtype_size(dtype));
  }

 private:
  // A peer either echoes this rank's bytes (as an identical peer would) or
  // sends its own, so both the agreeing and the disagreeing paths are met.
  void fill(unsigned char* out, size_t bytes) {
    if (bytes == 0 || input_.ConsumeBool()) return;  // keep what is there: this rank's own
    const std::vector<unsigned char> given = input_.ConsumeBytes<unsigned char>(bytes);
    if (!given.empty()) std::memcpy(out, given.data(), given.size());
    std::memset(out + given.size(), 0, bytes - given.size());
  }

  FuzzedDataProvider& input_;
  int32_t rank_;
  int32_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  ampx_context ctx = nullptr;
  if (ampx_context_create(nullptr, &ctx) != AMPX_OK) finding("no context");
  const int32_t world = input.ConsumeIntegralInRange<int32_t>(2, 5);
  const int32_t rank = input.ConsumeIntegralInRange<int32_t>(0, world - 1);

  std::vector<ampx_tensor> params;
  const int count = input.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < count; ++i) {
    const ampx_dtype dtype = input.PickValueInArray({AMPX_F32, AMPX_F16, AMPX_BF16});
    const int32_t ndim = input.ConsumeIntegralInRange<int32_t>(0, 3);
    int64_t shape[3];
    for (int32_t d = 0; d < ndim; ++d) shape[d] = input.ConsumeIntegralInRange<int64_t>(0, 9);
    ampx_tensor t = nullptr;
    if (ampx_tensor_zeros(ctx, dtype, ndim, shape, &t) != AMPX_OK) finding("no tensor");
    params.push_back(t);
  }
  ampx_optimizer opt = nullptr;
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  sgd.momentum = input.ConsumeBool() ? 0.9 : 0.0;
  if (ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &sgd, &opt) != AMPX_OK)
    finding("no optimizer");

  DataParallelOptions options;
  options.bucket_bytes = input.ConsumeIntegralInRange<size_t>(0, 512);
  options.first_bucket_bytes = input.ConsumeIntegralInRange<size_t>(0, 512);
  options.zero_stage = input.ConsumeIntegralInRange<int32_t>(-1, 2);
  options.reduce_in_fp32 = input.ConsumeBool();

  auto& context = *reinterpret_cast<DeviceContext*>(ctx);
  auto& optimizer = *reinterpret_cast<FusedOptimizer*>(opt);
  Communicator* comm = Communicator::create(
      context, std::make_unique<InputTransport>(input, rank, world));
  DataParallel* dp = nullptr;
  try {
    dp = DataParallel::create(*comm, &optimizer, options, DataParallel::OwnFailure{});
  } catch (const StatusError& e) {
    // INTERNAL only as another rank's own failure, relayed.
    const bool relayed = std::strstr(e.what(), "could not join") != nullptr;
    if (e.status() <= AMPX_OK || e.status() > AMPX_ERR_INTERNAL ||
        (e.status() == AMPX_ERR_INTERNAL && !relayed))
      finding(e.what());
  } catch (const std::bad_alloc&) {
  } catch (...) {
    finding("an exception that is not a StatusError");
  }
  if (!dp) {
    if (optimizer.iteration().gradient_sync()) finding("a failed setup left the optimizer wrapped");
    for (ampx_tensor t : params) {
      ampx_tensor grad = nullptr;
      if (ampx_tensor_grad(t, &grad) != AMPX_OK) finding("ampx_tensor_grad failed");
      if (grad) finding("a failed setup attached a gradient");
    }
    if (ampx_optimizer_step(opt) != AMPX_OK) finding("the unwrapped optimizer does not step");
  } else {
    dp->release();
  }
  comm->release();
  ampx_optimizer_release(opt);
  for (ampx_tensor t : params) ampx_tensor_release(t);
  ampx_context_release(ctx);
  return 0;
}
