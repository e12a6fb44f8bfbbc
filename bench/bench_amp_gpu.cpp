// bench_amp_gpu.cpp -- how close ampx's mixed-precision step kernels come to
// the GPU's memory bandwidth. Uses only the public C API, plus the CUDA
// runtime for events, the stream ampx adopts, the reference copy and graph
// capture.
//
//   bench_amp_gpu [adam_params] [unscale_elements] [unscale_tensors]
//                  default 1e9     default 2^28       default 1000
//
// Rows:
//  1. device-to-device cudaMemcpyAsync of 1 GiB: the reference bandwidth
//     (bytes read + bytes written per second);
//  2. AdamW step (ampx_optimizer_step) over adam_params bf16 parameters with
//     bf16 gradients, fp32 masters and moments: 28 bytes moved per parameter;
//  3. unscale + inf check (ampx_scaler_unscale) of unscale_tensors gradients
//     of mixed sizes, unscale_elements in all: f32 in place (8 bytes per
//     element), then bf16 into fp32 buffers (6 bytes per element).
// Times are per call, from CUDA events around the calls on ampx's stream.
// "kernels" is the number of kernel launches one call enqueues, counted by
// capturing one call into a CUDA graph; the capture also proves the call
// neither synchronizes nor copies to the host (either would fail it, and the
// benchmark then exits with status 1).
//
// Without a CUDA device it prints "SKIPPED: no CUDA device" and exits 0.
// Where the GPU lacks memory for the requested sizes they are scaled down,
// and the table says so.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ampx/ampx.h"

namespace {

void die(const char* what, const char* detail) {
  std::fprintf(stderr, "bench_amp_gpu: %s failed: %s\n", what, detail);
  std::exit(1);
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) die(what, cudaGetErrorString(status));
}

void check_ampx(ampx_status status, const char* what) {
  if (status != AMPX_OK) die(what, ampx_last_error());
}

#define CUDA_CHECK(call) check_cuda((call), #call)
#define AMPX_CHECK(call) check_ampx((call), #call)

struct Row {
  std::string what;
  double elements;  // 0: not elements (the copy)
  double seconds;   // per call
  double bytes;     // moved per call
  int kernels;      // -1: not counted
};

// Rows are printed as they are measured, so a run cut short still reports.
void print_header() {
  std::printf("\n%-52s %10s %9s %9s %8s %8s\n", "operation", "elements", "ms/call", "GB/s",
              "of copy", "kernels");
}

void print_row(const Row& r, double copy_bandwidth) {
  const double rate = r.bytes / r.seconds;
  char elements[16] = "-";
  if (r.elements > 0) std::snprintf(elements, sizeof elements, "%.3g", r.elements);
  char kernels[16] = "-";
  if (r.kernels >= 0) std::snprintf(kernels, sizeof kernels, "%d", r.kernels);
  std::printf("%-52s %10s %9.3f %9.1f %7.1f%% %8s\n", r.what.c_str(), elements, r.seconds * 1e3,
              rate / 1e9, 100.0 * rate / copy_bandwidth, kernels);
  std::fflush(stdout);
}

// Seconds per call of `call`, timed with an event pair around each of
// `reps` calls after `warmup` untimed ones; `between` runs after each call,
// outside the timed span.
template <class Call, class Between>
double time_calls(cudaStream_t stream, int warmup, int reps, Call&& call, Between&& between) {
  for (int i = 0; i < warmup; ++i) {
    call();
    between();
  }
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(reps));
  for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    call();
    CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
    between();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double total_ms = 0.0;
  for (int i = 0; i < reps; ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    total_ms += ms;
  }
  for (cudaEvent_t e : events) CUDA_CHECK(cudaEventDestroy(e));
  return total_ms / 1e3 / reps;
}

// Kernel launches one call enqueues on `stream`, counted in a graph
// captured from it. Exits if the call fails or breaks the capture.
template <class Call>
int kernels_per_call(cudaStream_t stream, const char* what, Call&& call) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const ampx_status status = call();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (status != AMPX_OK) die(what, ampx_last_error());
  check_cuda(ended, what);
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  CUDA_CHECK(cudaGraphDestroy(graph));
  return kernels;
}

// Bytes ampx can still get: free device memory plus what its pool holds
// unused from earlier rows.
size_t available_memory(ampx_context ctx) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  AMPX_CHECK(ampx_memory_stats_get(ctx, &stats));
  return free_bytes + static_cast<size_t>(stats.reserved_bytes - stats.current_bytes);
}

// `wanted` elements, or fewer so that `bytes_each` per element fit in 90%
// of `available` bytes; the row's label notes a reduction.
int64_t fit(int64_t wanted, double bytes_each, size_t available, std::string& label) {
  const auto most = static_cast<int64_t>(0.9 * static_cast<double>(available) / bytes_each);
  if (wanted <= most) return wanted;
  label += " (reduced to fit)";
  return most;
}

ampx_tensor tensor(ampx_context ctx, ampx_dtype dtype, int64_t n, double value) {
  ampx_tensor t = nullptr;
  AMPX_CHECK(ampx_tensor_empty(ctx, dtype, 1, &n, &t));
  AMPX_CHECK(ampx_tensor_fill(t, value));
  return t;
}

void release_all(std::vector<ampx_tensor>& tensors) {
  for (ampx_tensor t : tensors) ampx_tensor_release(t);
  tensors.clear();
}

Row copy_row(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemsetAsync(src, 0, bytes, stream));
  const double seconds = time_calls(
      stream, 2, 10,
      [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); },
      [] {});
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  return {"device-to-device copy of 1 GiB (the reference)", 0.0, seconds,
          2.0 * static_cast<double>(bytes), -1};
}

Row adam_row(ampx_context ctx, cudaStream_t stream, int64_t wanted) {
  // bf16 param and grad, fp32 master, exp_avg, exp_avg_sq.
  constexpr double kResident = 2 + 2 + 4 + 4 + 4;
  constexpr double kMoved = 2 + 4 + 4 + 4 + 4 + 4 + 4 + 2;  // grad, w, m, v read; w, m, v, param written
  std::string label = "AdamW step, bf16 params and grads";
  const int64_t total = fit(wanted, kResident, available_memory(ctx), label);
  // Parameters of a few sizes, as a transformer's weights, biases and norms.
  std::vector<ampx_tensor> params, grads;
  int64_t placed = 0;
  for (int i = 0; placed < total; ++i) {
    const int64_t shape[] = {int64_t{1} << 24, int64_t{1} << 22, 4096, 1024};
    const int64_t n = std::min(shape[i % 4], total - placed);
    params.push_back(tensor(ctx, AMPX_BF16, n, 0.5));
    grads.push_back(tensor(ctx, AMPX_BF16, n, 1e-3));
    AMPX_CHECK(ampx_tensor_set_grad(params.back(), grads.back()));
    placed += n;
  }
  ampx_adam_options options = ampx_adamw_options_default();
  ampx_optimizer opt = nullptr;
  AMPX_CHECK(ampx_optimizer_create_adam(ctx, params.data(), params.size(), &options, &opt));
  const double seconds =
      time_calls(stream, 2, 10, [&] { AMPX_CHECK(ampx_optimizer_step(opt)); }, [] {});
  const int kernels =
      kernels_per_call(stream, "capturing ampx_optimizer_step", [&] { return ampx_optimizer_step(opt); });
  label += " (" + std::to_string(params.size()) + " tensors)";
  AMPX_CHECK(ampx_context_synchronize(ctx));
  ampx_optimizer_release(opt);
  release_all(grads);
  release_all(params);
  return {label, static_cast<double>(total), seconds, kMoved * static_cast<double>(total), kernels};
}

// `count` sizes in proportions drawn log-uniformly from 1 Ki to 4 Mi,
// scaled to about `total` in all, each at least 1 (fixed seed: every run
// measures the same list).
std::vector<int64_t> mixed_sizes(int64_t total, int count) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> log_size(std::log(1024.0), std::log(4194304.0));
  std::vector<double> raw(static_cast<size_t>(count));
  double sum = 0.0;
  for (double& r : raw) sum += r = std::exp(log_size(rng));
  std::vector<int64_t> sizes;
  for (double r : raw)
    sizes.push_back(std::max<int64_t>(1, std::llround(r / sum * static_cast<double>(total))));
  return sizes;
}

Row unscale_row(ampx_context ctx, cudaStream_t stream, ampx_dtype grad_dtype, int64_t wanted,
                int tensors) {
  const bool f32 = grad_dtype == AMPX_F32;
  // Resident: param and grad, plus for bf16 the fp32 master and unscaled grad.
  const double resident = f32 ? 8 : 2 + 2 + 4 + 4;
  const double moved = f32 ? 8 : 2 + 4;
  std::string label = f32 ? "unscale + inf check, f32 grads in place"
                          : "unscale + inf check, bf16 grads -> f32";
  const int64_t fitted = fit(wanted, resident, available_memory(ctx), label);
  const int count = static_cast<int>(std::min<int64_t>(tensors, fitted));
  std::vector<ampx_tensor> params, grads;
  int64_t total = 0;
  for (int64_t n : mixed_sizes(fitted, count)) {
    total += n;
    params.push_back(tensor(ctx, grad_dtype, n, 0.5));
    grads.push_back(tensor(ctx, grad_dtype, n, 1.0));
    AMPX_CHECK(ampx_tensor_set_grad(params.back(), grads.back()));
  }
  ampx_optimizer opt = nullptr;
  AMPX_CHECK(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), nullptr, &opt));
  ampx_scaler scaler = nullptr;
  AMPX_CHECK(ampx_scaler_create(ctx, nullptr, &scaler));
  // Unscaling twice in one iteration is an order error: an update between
  // two calls (a one-thread kernel, outside the timed span) starts the next.
  const double seconds = time_calls(
      stream, 2, 20, [&] { AMPX_CHECK(ampx_scaler_unscale(scaler, opt)); },
      [&] { AMPX_CHECK(ampx_scaler_update(scaler)); });
  const int kernels = kernels_per_call(stream, "capturing ampx_scaler_unscale",
                                       [&] { return ampx_scaler_unscale(scaler, opt); });
  AMPX_CHECK(ampx_scaler_update(scaler));
  AMPX_CHECK(ampx_context_synchronize(ctx));
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  release_all(grads);
  release_all(params);
  label += " (" + std::to_string(count) + " tensors)";
  return {label, static_cast<double>(total), seconds, moved * static_cast<double>(total), kernels};
}

int64_t arg(int argc, char** argv, int i, int64_t fallback) {
  if (argc <= i) return fallback;
  char* end = nullptr;
  const double v = std::strtod(argv[i], &end);
  if (end == argv[i] || *end != '\0' || !(v >= 1.0) || v > 1e13) {
    std::fprintf(stderr, "usage: %s [adam_params] [unscale_elements] [unscale_tensors]\n", argv[0]);
    std::exit(2);
  }
  return static_cast<int64_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t adam_params = arg(argc, argv, 1, 1000000000);
  const int64_t unscale_elements = arg(argc, argv, 2, int64_t{1} << 28);
  const int unscale_tensors = static_cast<int>(std::min<int64_t>(arg(argc, argv, 3, 1000), 1 << 20));

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || ampx_cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int runtime = 0, driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("ampx %s on %s (%d SMs, %.0f GiB), CUDA runtime %d, driver %d\n",
              ampx_version_string(), prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1u << 30), runtime, driver);

  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The copy runs before ampx reserves memory (its pool keeps what it takes).
  const Row copy = copy_row(stream);

  ampx_context_options options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CUDA;
  options.cuda_stream = stream;
  ampx_context ctx = nullptr;
  AMPX_CHECK(ampx_context_create(&options, &ctx));

  const double copy_bandwidth = copy.bytes / copy.seconds;
  print_header();
  print_row(copy, copy_bandwidth);
  print_row(adam_row(ctx, stream, adam_params), copy_bandwidth);
  print_row(unscale_row(ctx, stream, AMPX_F32, unscale_elements, unscale_tensors), copy_bandwidth);
  print_row(unscale_row(ctx, stream, AMPX_BF16, unscale_elements, unscale_tensors), copy_bandwidth);
  ampx_context_release(ctx);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
