// test_cuda_backend.cpp -- the CUDA backend: contexts, streams, memory,
// copies, conversions and fills on the device.
//
// The cases run when the suite targets CUDA (AMPX_TEST_DEVICE=cuda, the
// unit_cuda test); on the CPU run they return at once. Most go through the
// public C API; the kernel edge cases (fill head/tail alignment, 1-byte
// patterns, counts past 2^31) need offsets and sizes the API cannot express,
// so those drive the backend directly. Every GPU result is compared bit for
// bit with the host-side math of kernels/math, which the CPU backend runs.
#include "support.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "math/convert.h"

namespace {

using ampx_test::contains;
using ampx_test::last_error;
using ampx_test::Tensor;

const ampx_dtype kDtypes[] = {AMPX_F32, AMPX_F16,    AMPX_BF16,  AMPX_I32,
                              AMPX_I64, AMPX_F8E4M3, AMPX_F8E5M2};

ampx_context_options cuda_options(int32_t device_index, void* stream = nullptr) {
  ampx_context_options options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CUDA;
  options.device_index = device_index;
  options.cuda_stream = stream;
  return options;
}

ampx_tensor from_host(ampx_context ctx, ampx_dtype dtype, const std::vector<uint8_t>& bytes) {
  const int64_t numel = static_cast<int64_t>(bytes.size() / ampx_dtype_size(dtype));
  ampx_tensor tensor = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, 1, &numel, bytes.data(), bytes.size(),
                                        &tensor) == AMPX_OK,
                  last_error());
  return tensor;
}

std::vector<uint8_t> to_host(ampx_tensor tensor) {
  size_t nbytes = 0;
  REQUIRE(ampx_tensor_nbytes(tensor, &nbytes) == AMPX_OK);
  std::vector<uint8_t> bytes(nbytes);
  REQUIRE_MESSAGE(ampx_tensor_to_host(tensor, bytes.data(), nbytes) == AMPX_OK, last_error());
  return bytes;
}

ampx_memory_stats memory_stats(ampx_context ctx) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  REQUIRE_MESSAGE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK, last_error());
  return stats;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

int device_count() { return ampx_cuda_device_count(); }

void release(Tensor& tensor) {
  ampx_tensor_release(tensor.handle);
  tensor.handle = nullptr;
}

// ---- reference conversions on the host ------------------------------------

template <int Dst, int Src>
std::vector<uint8_t> convert_on_host(const std::vector<uint8_t>& src) {
  using S = ampx::impl::math::storage_t<Src>;
  using D = ampx::impl::math::storage_t<Dst>;
  const size_t n = src.size() / sizeof(S);
  std::vector<uint8_t> dst(n * sizeof(D));
  for (size_t i = 0; i < n; ++i) {
    S in;
    std::memcpy(&in, src.data() + i * sizeof(S), sizeof(S));
    const D out = ampx::impl::math::convert_value<Dst, Src>(in);
    std::memcpy(dst.data() + i * sizeof(D), &out, sizeof(D));
  }
  return dst;
}

using HostConvert = std::vector<uint8_t> (*)(const std::vector<uint8_t>&);

template <int Src>
HostConvert host_convert_from(ampx_dtype dst) {
  switch (dst) {
    case AMPX_F32: return &convert_on_host<AMPX_F32, Src>;
    case AMPX_F16: return &convert_on_host<AMPX_F16, Src>;
    case AMPX_BF16: return &convert_on_host<AMPX_BF16, Src>;
    case AMPX_I32: return &convert_on_host<AMPX_I32, Src>;
    case AMPX_I64: return &convert_on_host<AMPX_I64, Src>;
    case AMPX_F8E4M3: return &convert_on_host<AMPX_F8E4M3, Src>;
    case AMPX_F8E5M2: return &convert_on_host<AMPX_F8E5M2, Src>;
    case AMPX_DTYPE_MIN_ENUM:
    case AMPX_DTYPE_MAX_ENUM: break;
  }
  return nullptr;
}

HostConvert host_convert(ampx_dtype dst, ampx_dtype src) {
  switch (src) {
    case AMPX_F32: return host_convert_from<AMPX_F32>(dst);
    case AMPX_F16: return host_convert_from<AMPX_F16>(dst);
    case AMPX_BF16: return host_convert_from<AMPX_BF16>(dst);
    case AMPX_I32: return host_convert_from<AMPX_I32>(dst);
    case AMPX_I64: return host_convert_from<AMPX_I64>(dst);
    case AMPX_F8E4M3: return host_convert_from<AMPX_F8E4M3>(dst);
    case AMPX_F8E5M2: return host_convert_from<AMPX_F8E5M2>(dst);
    case AMPX_DTYPE_MIN_ENUM:
    case AMPX_DTYPE_MAX_ENUM: break;
  }
  return nullptr;
}

template <int D>
std::vector<uint8_t> fill_on_host(double value, size_t count) {
  const ampx::impl::math::storage_t<D> element = ampx::impl::math::store_double<D>(value);
  return as_bytes(std::vector<ampx::impl::math::storage_t<D>>(count, element));
}

std::vector<uint8_t> expected_fill(ampx_dtype dtype, double value, size_t count) {
  switch (dtype) {
    case AMPX_F32: return fill_on_host<AMPX_F32>(value, count);
    case AMPX_F16: return fill_on_host<AMPX_F16>(value, count);
    case AMPX_BF16: return fill_on_host<AMPX_BF16>(value, count);
    case AMPX_I32: return fill_on_host<AMPX_I32>(value, count);
    case AMPX_I64: return fill_on_host<AMPX_I64>(value, count);
    case AMPX_F8E4M3: return fill_on_host<AMPX_F8E4M3>(value, count);
    case AMPX_F8E5M2: return fill_on_host<AMPX_F8E5M2>(value, count);
    case AMPX_DTYPE_MIN_ENUM:
    case AMPX_DTYPE_MAX_ENUM: break;
  }
  return {};
}

// Index of the first element where a and b differ, or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                         size_t elem_size) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += elem_size) {
    if (std::memcmp(a.data() + i, b.data() + i, elem_size) != 0) {
      return static_cast<int64_t>(i / elem_size);
    }
  }
  return -1;
}

std::string hex_element(const std::vector<uint8_t>& bytes, int64_t index, size_t elem_size) {
  if (index < 0 || static_cast<size_t>(index) >= bytes.size() / elem_size) return "(none)";
  uint64_t value = 0;
  std::memcpy(&value, bytes.data() + static_cast<size_t>(index) * elem_size, elem_size);
  char text[32];
  std::snprintf(text, sizeof text, "0x%0*llx", static_cast<int>(2 * elem_size),
                static_cast<unsigned long long>(value));
  return text;
}

// ---- conversion inputs: every edge the rounding rules name ----------------

float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::vector<float> float_inputs(std::mt19937_64& rng) {
  std::vector<float> v = {
      0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, -2.5f, 0.99999994f,
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(),
      float_of(0x7fc00000u), float_of(0xffc00001u), float_of(0x7f800001u), float_of(0x7fbfffffu),
      float_of(0xff812345u),
      65504.0f, 65519.996f, 65520.0f, 65536.0f, -65520.0f,
      std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
      std::ldexp(1.5f, -25), std::nextafter(std::ldexp(1.0f, -25), 1.0f),
      std::ldexp(1.0f, -126), std::ldexp(1.0f, -133),
      2147483520.0f, 2147483648.0f, -2147483648.0f, -2147483904.0f,
      9.2233715e18f, 9.223372e18f, -9.223372e18f, 1e30f, -1e30f, 3.4e38f};
  // Every half and bfloat value, the midpoints between neighbours (ties) and
  // the floats just either side of each midpoint.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float value = ampx::impl::math::half_to_float(static_cast<uint16_t>(h));
    v.push_back(value);
    v.push_back(ampx::impl::math::bf16_to_float(static_cast<uint16_t>(h)));
    if ((h & 0x7fffu) < 0x7bffu) {
      const float next = ampx::impl::math::half_to_float(static_cast<uint16_t>(h + 1));
      const auto mid = static_cast<float>((static_cast<double>(value) + next) / 2);
      v.insert(v.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
    }
    if ((h & 0x7fffu) < 0x7f7fu) {
      const float low = ampx::impl::math::bf16_to_float(static_cast<uint16_t>(h));
      const float high = ampx::impl::math::bf16_to_float(static_cast<uint16_t>(h + 1));
      const auto mid = static_cast<float>((static_cast<double>(low) + high) / 2);
      v.insert(v.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
    }
  }
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    v.push_back(float_of(static_cast<uint32_t>(rng())));
    v.push_back(wide(rng));
    v.push_back(unit(rng) * std::ldexp(1.0f, -14));
  }
  return v;
}

std::vector<uint8_t> conversion_inputs(ampx_dtype dtype, std::mt19937_64& rng) {
  switch (dtype) {
    case AMPX_F16:
    case AMPX_BF16: {
      std::vector<uint16_t> all(0x10000);
      for (uint32_t h = 0; h < 0x10000u; ++h) all[h] = static_cast<uint16_t>(h);
      return as_bytes(all);
    }
    case AMPX_F32: return as_bytes(float_inputs(rng));
    case AMPX_I32: {
      std::vector<int32_t> v = {0, 1, -1, 2, -2, 65504, 65505, 65519, 65520, 65536, -65520,
                                16777216, 16777217, 16777219, -16777217, 2147483647,
                                -2147483647 - 1, 2147483584, 2139095040};
      std::uniform_int_distribution<int32_t> small(-70000, 70000);
      for (int i = 0; i < 50000; ++i) {
        v.push_back(static_cast<int32_t>(rng()));
        v.push_back(small(rng));
      }
      return as_bytes(v);
    }
    case AMPX_I64: {
      std::vector<int64_t> v = {0, 1, -1, 65520, -65520, 16777217, 2147483647, 2147483648LL,
                                -2147483649LL, 9007199254740993LL, -9007199254740993LL,
                                std::numeric_limits<int64_t>::max(),
                                std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max() - 511,
                                std::numeric_limits<int64_t>::max() - 512};
      std::uniform_int_distribution<int64_t> near53(-(int64_t{1} << 54), int64_t{1} << 54);
      for (int i = 0; i < 50000; ++i) {
        v.push_back(static_cast<int64_t>(rng()));
        v.push_back(near53(rng));
      }
      return as_bytes(v);
    }
    case AMPX_F8E4M3:
    case AMPX_F8E5M2: {
      std::vector<uint8_t> all(256);
      for (int b = 0; b < 256; ++b) all[b] = static_cast<uint8_t>(b);
      return all;
    }
    case AMPX_DTYPE_MIN_ENUM:
    case AMPX_DTYPE_MAX_ENUM: break;
  }
  return {};
}

// Holds a stream at a host callback until opened (or 10 s pass, so a test
// that wrongly waits on the stream fails instead of hanging).
struct StreamGate {
  std::atomic<bool> opened{false};
  std::atomic<bool> timed_out{false};

  static void CUDART_CB hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!gate->opened.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate->timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

struct DeleterLog {
  int calls = 0;
  void* data = nullptr;
};

void free_device_memory(void* user_data, void* data) {
  auto* log = static_cast<DeleterLog*>(user_data);
  ++log->calls;
  log->data = data;
  cudaFree(data);
}

void record_only(void* user_data, void* data) {
  auto* log = static_cast<DeleterLog*>(user_data);
  ++log->calls;
  log->data = data;
}

}  // namespace

TEST_CASE("cuda: context on device 0; an out-of-range device index is AMPX_ERR_NO_DEVICE") {
  SKIP_UNLESS_CUDA();
  REQUIRE(ampx_has_cuda() != 0);
  REQUIRE(device_count() >= 1);

  ampx_context_options options = cuda_options(0);
  ampx_context ctx = nullptr;
  REQUIRE_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, last_error());
  ampx_device_type type = AMPX_DEVICE_CPU;
  int32_t index = -1;
  CHECK(ampx_context_device(ctx, &type, &index) == AMPX_OK);
  CHECK(type == AMPX_DEVICE_CUDA);
  CHECK(index == 0);
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
  ampx_context_release(ctx);

  for (int32_t bad : {device_count(), device_count() + 7}) {
    CAPTURE(bad);
    options = cuda_options(bad);
    ampx_context out = nullptr;
    CHECK_FAILS_WITH(ampx_context_create(&options, &out), AMPX_ERR_NO_DEVICE, "out of range");
    CHECK(out == nullptr);
  }
}

TEST_CASE("cuda: a context adopts the caller's stream and enqueues on it without waiting") {
  SKIP_UNLESS_CUDA();
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    ampx_context_options options = cuda_options(0, stream);
    ampx_context ctx = nullptr;
    REQUIRE_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, last_error());

    const int64_t n = 4096;
    Tensor t;
    REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 1, &n, t.out()) == AMPX_OK);
    void* data = nullptr;
    REQUIRE(ampx_tensor_data(t, &data) == AMPX_OK);

    // With the stream held, memset(0x11) is queued first and ampx's fill
    // second. Only if the fill went to this same stream does it land last.
    StreamGate gate;
    REQUIRE(cudaLaunchHostFunc(stream, &StreamGate::hold, &gate) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(data, 0x11, n * sizeof(float), stream) == cudaSuccess);
    CHECK(ampx_tensor_fill(t, 2.0) == AMPX_OK);
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
    cudaGetLastError();  // the runtime records "not ready" as the thread's last error
    gate.opened = true;

    const std::vector<uint8_t> got = to_host(t);
    CHECK_MESSAGE(!gate.timed_out.load(), "ampx_tensor_fill waited for the stream");
    CHECK(first_difference(got, expected_fill(AMPX_F32, 2.0, n), 4) == -1);

    release(t);
    ampx_context_release(ctx);
  }
  // Borrowed: still alive and usable after the context is gone.
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);

#if CUDART_VERSION >= 12080  // earlier runtimes cannot tell a stream's device
  if (device_count() >= 2) {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    cudaStream_t other = nullptr;
    REQUIRE(cudaStreamCreate(&other) == cudaSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    ampx_context_options options = cuda_options(0, other);
    ampx_context out = nullptr;
    CHECK_FAILS_WITH(ampx_context_create(&options, &out), AMPX_ERR_DEVICE, "device 1");
    CHECK(cudaStreamDestroy(other) == cudaSuccess);
  }
#endif
}

TEST_CASE("cuda: from_host, copy and to_host round trip every dtype bit for bit") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  std::mt19937_64 rng(1);
  for (ampx_dtype dtype : kDtypes) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, (size_t{1} << 20) + 7}) {
      CAPTURE(ampx_dtype_name(dtype));
      CAPTURE(n);
      const size_t elem = ampx_dtype_size(dtype);
      const std::vector<uint8_t> bytes = random_bytes(n * elem, rng);
      Tensor src(from_host(ctx, dtype, bytes));
      CHECK(first_difference(to_host(src), bytes, elem) == -1);

      void* data = nullptr;
      REQUIRE(ampx_tensor_data(src, &data) == AMPX_OK);
      CHECK(reinterpret_cast<uintptr_t>(data) % 256 == 0);
      cudaPointerAttributes attributes{};
      REQUIRE(cudaPointerGetAttributes(&attributes, data) == cudaSuccess);
      CHECK(attributes.type == cudaMemoryTypeDevice);
      CHECK(attributes.device == 0);

      const int64_t numel = static_cast<int64_t>(n);
      Tensor dst;
      REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &numel, dst.out()) == AMPX_OK);
      REQUIRE_MESSAGE(ampx_tensor_copy(dst, src) == AMPX_OK, last_error());
      CHECK(first_difference(to_host(dst), bytes, elem) == -1);
      REQUIRE_MESSAGE(ampx_tensor_copy(dst, dst) == AMPX_OK, last_error());
      CHECK(first_difference(to_host(dst), bytes, elem) == -1);

      const std::vector<uint8_t> other = random_bytes(n * elem, rng);
      REQUIRE(ampx_tensor_copy_from_host(dst, other.data(), other.size()) == AMPX_OK);
      CHECK(first_difference(to_host(dst), other, elem) == -1);
    }
  }
}

TEST_CASE("cuda: wrapping device memory; the deleter runs once, on the last release") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  const int64_t n = 1024;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = 0.25f * static_cast<float>(i) - 7.0f;

  void* memory = nullptr;
  REQUIRE(cudaMalloc(&memory, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(memory, values.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);

  const ampx_memory_stats before = memory_stats(ctx);
  DeleterLog log;
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_wrap(ctx, AMPX_F32, 1, &n, memory, n * sizeof(float),
                                   &free_device_memory, &log, &t) == AMPX_OK,
                  last_error());
  CHECK(memory_stats(ctx).current_bytes == before.current_bytes);
  void* data = nullptr;
  CHECK(ampx_tensor_data(t, &data) == AMPX_OK);
  CHECK(data == memory);
  CHECK(first_difference(to_host(t), as_bytes(values), 4) == -1);

  CHECK(ampx_tensor_fill(t, -3.5) == AMPX_OK);
  CHECK(first_difference(to_host(t), expected_fill(AMPX_F32, -3.5, n), 4) == -1);

  REQUIRE(ampx_tensor_retain(t) == AMPX_OK);
  ampx_tensor_release(t);
  CHECK(log.calls == 0);
  ampx_tensor_release(t);
  CHECK(log.calls == 1);
  CHECK(log.data == memory);
}

TEST_CASE("cuda: wrapping host or other-device memory is AMPX_ERR_DEVICE") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  const int64_t n = 64;
  DeleterLog log;

  std::vector<float> host(n, 1.0f);
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, &n, host.data(), n * sizeof(float),
                                    &record_only, &log, &out),
                   AMPX_ERR_DEVICE, "host memory");

  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, n * sizeof(float)) == cudaSuccess);
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, &n, pinned, n * sizeof(float),
                                    &record_only, &log, &out),
                   AMPX_ERR_DEVICE, "host memory");
  CHECK(cudaFreeHost(pinned) == cudaSuccess);

  if (device_count() >= 2) {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    void* remote = nullptr;
    REQUIRE(cudaMalloc(&remote, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, &n, remote, n * sizeof(float),
                                      &record_only, &log, &out),
                     AMPX_ERR_DEVICE, "device 1");
    CHECK(cudaFree(remote) == cudaSuccess);
  }
  CHECK(out == nullptr);
  CHECK(log.calls == 0);
}

TEST_CASE("cuda: memory statistics follow tensors; the cache is reserved, not current") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  const ampx_memory_stats start = memory_stats(ctx);
  const int64_t big = int64_t{1} << 20;   // 4 MiB of f32
  const int64_t small = int64_t{1} << 18; // 1 MiB of f32

  Tensor a;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 1, &big, a.out()) == AMPX_OK);
  const ampx_memory_stats one = memory_stats(ctx);
  CHECK(one.current_bytes >= start.current_bytes + 4 * big);
  CHECK(one.peak_bytes >= one.current_bytes);
  CHECK(one.reserved_bytes >= one.current_bytes);
  CHECK(one.allocation_count == start.allocation_count + 1);

  {
    Tensor b;
    REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 1, &small, b.out()) == AMPX_OK);
    const ampx_memory_stats two = memory_stats(ctx);
    CHECK(two.current_bytes >= one.current_bytes + 4 * small);
    CHECK(two.peak_bytes >= two.current_bytes);
    CHECK(two.reserved_bytes >= two.current_bytes);
  }
  const ampx_memory_stats released = memory_stats(ctx);
  CHECK(released.current_bytes == one.current_bytes);
  CHECK(released.peak_bytes >= one.current_bytes + 4 * small);
  // The pool keeps what it reserved for the next tensor.
  CHECK(released.reserved_bytes >= one.current_bytes + 4 * small);

  release(a);
  CHECK(memory_stats(ctx).current_bytes == start.current_bytes);
  REQUIRE(ampx_memory_reset_peak(ctx) == AMPX_OK);
  const ampx_memory_stats reset = memory_stats(ctx);
  CHECK(reset.peak_bytes == reset.current_bytes);

  // 4 TiB cannot be had: a clean AMPX_ERR_OUT_OF_MEMORY, and the context
  // keeps working (no stale CUDA error is left behind).
  const int64_t huge = int64_t{1} << 40;
  Tensor none;
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 1, &huge, none.out()) == AMPX_ERR_OUT_OF_MEMORY);
  CHECK(none.handle == nullptr);
  CHECK(memory_stats(ctx).current_bytes == start.current_bytes);
  const int64_t n = 100;
  Tensor after;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_I32, 1, &n, after.out()) == AMPX_OK);
  CHECK(ampx_tensor_fill(after, 9.0) == AMPX_OK);
  CHECK(first_difference(to_host(after), expected_fill(AMPX_I32, 9.0, n), 4) == -1);
}

TEST_CASE("cuda: all 49 conversions (FP8 included) are bit-identical to the host math") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  std::mt19937_64 rng(25);
  for (ampx_dtype src_type : kDtypes) {
    const std::vector<uint8_t> input = conversion_inputs(src_type, rng);
    Tensor src(from_host(ctx, src_type, input));
    for (ampx_dtype dst_type : kDtypes) {
      CAPTURE(ampx_dtype_name(src_type));
      CAPTURE(ampx_dtype_name(dst_type));
      Tensor dst;
      REQUIRE_MESSAGE(ampx_tensor_cast(src, dst_type, dst.out()) == AMPX_OK, last_error());
      const std::vector<uint8_t> got = to_host(dst);
      const std::vector<uint8_t> want = host_convert(dst_type, src_type)(input);
      const size_t out_size = ampx_dtype_size(dst_type);
      const int64_t at = first_difference(got, want, out_size);
      CHECK_MESSAGE(at == -1, "element ", at, ": input ",
                    hex_element(input, at, ampx_dtype_size(src_type)), " gave ",
                    hex_element(got, at, out_size), ", host math gives ",
                    hex_element(want, at, out_size));
    }
  }
}

TEST_CASE("cuda: ampx_tensor_fill writes the value converted to each dtype") {
  SKIP_UNLESS_CUDA();
  ampx_test::Ctx ctx;
  const double values[] = {0.0, -0.0, 1.0, -1.5, 0.1, 3.140625, 65519.0, 65520.0, 1e-7,
                           -7.9, 1e10, -3e38, std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  for (ampx_dtype dtype : kDtypes) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1000}, (int64_t{1} << 20) + 5}) {
      Tensor t;
      REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &n, t.out()) == AMPX_OK);
      for (double value : values) {
        CAPTURE(ampx_dtype_name(dtype));
        CAPTURE(n);
        CAPTURE(value);
        REQUIRE_MESSAGE(ampx_tensor_fill(t, value) == AMPX_OK, last_error());
        const std::vector<uint8_t> want = expected_fill(dtype, value, static_cast<size_t>(n));
        CHECK(first_difference(to_host(t), want, ampx_dtype_size(dtype)) == -1);
      }
    }
  }
}

TEST_CASE("cuda backend: fills of 1, 2, 4 and 8 bytes at every alignment leave neighbours intact") {
  SKIP_UNLESS_CUDA();
  auto backend = ampx::impl::make_cuda_backend(0, nullptr);
  auto allocator = backend->make_default_allocator();
  const size_t capacity = 4096;
  auto* base = static_cast<uint8_t*>(allocator->allocate(capacity));
  REQUIRE(base != nullptr);
  // High bytes that must be ignored for the narrower element sizes.
  const uint64_t pattern = 0x8877665544332211ull;
  std::vector<uint8_t> got(capacity);
  for (size_t elem : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    for (size_t offset = 0; offset < 48; offset += elem) {
      for (int64_t count : {0, 1, 2, 3, 5, 15, 16, 17, 31, 32, 33, 100, 333}) {
        CAPTURE(elem);
        CAPTURE(offset);
        CAPTURE(count);
        backend->fill(base, 1, 0xa5, static_cast<int64_t>(capacity));
        backend->fill(base + offset, elem, pattern, count);
        backend->copy_to_host(got.data(), base, capacity);
        size_t bad = capacity;
        for (size_t i = 0; i < capacity && bad == capacity; ++i) {
          const bool inside = i >= offset && i < offset + static_cast<size_t>(count) * elem;
          const uint8_t want = inside ? static_cast<uint8_t>(pattern >> (8 * ((i - offset) % elem)))
                                      : uint8_t{0xa5};
          if (got[i] != want) bad = i;
        }
        CHECK_MESSAGE(bad == capacity, "wrong byte at ", bad);
      }
    }
  }
  allocator->deallocate(base, capacity);
  backend->synchronize();
}

TEST_CASE("cuda backend: allocator alignment, out-of-memory and lifetime") {
  SKIP_UNLESS_CUDA();
  auto backend = ampx::impl::make_cuda_backend(0, nullptr);
  auto allocator = backend->make_default_allocator();
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{3}, size_t{255}, size_t{4097}, size_t{1} << 22}) {
    void* p = allocator->allocate(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % backend->alignment() == 0);
    backend->check_device_pointer(p, "block");
    blocks.emplace_back(p, bytes);
  }
  CHECK(allocator->reserved_bytes() >= (size_t{1} << 22));

  int host_value = 0;
  try {
    backend->check_device_pointer(&host_value, "my_argument");
    FAIL("a host pointer was accepted");
  } catch (const ampx::impl::StatusError& e) {
    CHECK(e.status() == AMPX_ERR_DEVICE);
    CHECK(contains(e.what(), "my_argument"));
  }

  CHECK(allocator->allocate(size_t{1} << 50) == nullptr);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  backend->fill(blocks.back().first, 4, 0x3f800000u, 16);
  backend->synchronize();

  for (auto& [p, bytes] : blocks) allocator->deallocate(p, bytes);
  // The allocator may outlive the backend: it keeps the pool and stream alive.
  backend.reset();
  void* late = allocator->allocate(1024);
  CHECK(late != nullptr);
  allocator->deallocate(late, 1024);
  allocator.reset();
}

TEST_CASE("cuda backend: element counts past 2^31") {
  SKIP_UNLESS_CUDA();
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  const int64_t n = (int64_t{1} << 31) + 24;  // f16 in, f32 out: 12 GiB together
  if (free_bytes < static_cast<size_t>(n) * 6 + (size_t{1} << 30)) {
    MESSAGE("skipped: needs 13 GiB of free device memory");
    return;
  }
  auto backend = ampx::impl::make_cuda_backend(0, nullptr);
  auto allocator = backend->make_default_allocator();
  auto* half = static_cast<uint8_t*>(allocator->allocate(static_cast<size_t>(n) * 2));
  auto* single = static_cast<uint8_t*>(allocator->allocate(static_cast<size_t>(n) * 4));
  REQUIRE(half != nullptr);
  REQUIRE(single != nullptr);

  // 1.0 everywhere, then 2.0 in the last 24 elements (a fill whose start
  // index is past 2^31); convert, and read both ends back.
  backend->fill(half, 2, 0x3c00, n);
  backend->fill(half + (n - 24) * 2, 2, 0x4000, 24);
  backend->convert(single, ampx::impl::DType::F32, half, ampx::impl::DType::F16, n);
  std::vector<float> head(32), tail(32);
  backend->copy_to_host(head.data(), single, 32 * sizeof(float));
  backend->copy_to_host(tail.data(), single + (n - 32) * 4, 32 * sizeof(float));
  for (float v : head) CHECK(v == 1.0f);
  for (int i = 0; i < 32; ++i) CHECK(tail[i] == (i < 8 ? 1.0f : 2.0f));

  // A one-byte fill of more than 2^31 elements, starting off alignment.
  backend->fill(single, 1, 0x00, n);
  backend->fill(single + 1, 1, 0x5a, n - 2);
  std::vector<uint8_t> ends(64);
  backend->copy_to_host(ends.data(), single + n - 64, 64);
  for (int i = 0; i < 64; ++i) CHECK(ends[i] == (i < 63 ? 0x5a : 0x00));
  backend->copy_to_host(ends.data(), single, 64);
  for (int i = 0; i < 64; ++i) CHECK(ends[i] == (i == 0 ? 0x00 : 0x5a));

  allocator->deallocate(single, static_cast<size_t>(n) * 4);
  allocator->deallocate(half, static_cast<size_t>(n) * 2);
}

#else  // !AMPX_WITH_CUDA

TEST_CASE("cuda: a build without the CUDA backend reports no device") {
  CHECK(ampx_has_cuda() == 0);
  CHECK(ampx_cuda_device_count() == 0);
  ampx_context_options options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CUDA;
  ampx_context out = nullptr;
  CHECK(ampx_context_create(&options, &out) == AMPX_ERR_NO_DEVICE);
  CHECK(out == nullptr);
}

#endif  // AMPX_WITH_CUDA
