// cuda_test_support.h -- helpers shared by the test_cuda_*.cpp files that
// check GPU kernels against the CPU backend: values of the floating types
// as raw bytes (encode, decode, random values, a 16-bit format's ulp), the
// two backends and device buffers, the element comparisons, a refusal's
// status, free device memory, and a CUDA graph captured from a stream.
// Each file's bounds are derived in its own top comment.
#pragma once

#include "support.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "math/convert.h"

namespace cuda_test {

using ampx::impl::DType;
using Bytes = std::vector<uint8_t>;

inline constexpr double kEps = 0x1p-24;     // fp32's unit roundoff
inline constexpr double kTiny = 0x1p-140;  // added to bounds for results below fp32's normal range
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

inline std::string name(DType t) { return ampx::impl::dtype_name(t); }
inline size_t width(DType t) { return ampx::impl::dtype_size(t); }

// ---- values ------------------------------------------------------------------

inline uint32_t bits_of(DType t, float v) {
  switch (t) {
    case DType::F16:
      return ampx::impl::math::float_to_half(v);
    case DType::BF16:
      return ampx::impl::math::float_to_bf16(v);
    default:
      return ampx::impl::math::float_bits(v);
  }
}

inline float value_of(DType t, uint32_t bits) {
  switch (t) {
    case DType::F16:
      return ampx::impl::math::half_to_float(static_cast<uint16_t>(bits));
    case DType::BF16:
      return ampx::impl::math::bf16_to_float(static_cast<uint16_t>(bits));
    default:
      return ampx::impl::math::bits_float(bits);
  }
}

// The floating types are at most 4 bytes wide (clamped so the compiler can
// see that the copy stays inside `bits`).
inline size_t float_width(DType t) { return std::min(width(t), sizeof(uint32_t)); }

inline void put(Bytes& b, DType t, size_t i, float v) {
  const uint32_t bits = bits_of(t, v);
  std::memcpy(&b[i * width(t)], &bits, float_width(t));  // little endian
}

inline float get(const Bytes& b, DType t, size_t i) {
  uint32_t bits = 0;
  std::memcpy(&bits, &b[i * width(t)], float_width(t));
  return value_of(t, bits);
}

inline Bytes encode(DType t, const std::vector<float>& values) {
  Bytes b(values.size() * width(t));
  for (size_t i = 0; i < values.size(); ++i) put(b, t, i, values[i]);
  return b;
}

inline std::vector<float> decode(DType t, const Bytes& b) {
  std::vector<float> values(b.size() / width(t));
  for (size_t i = 0; i < values.size(); ++i) values[i] = get(b, t, i);
  return values;
}

// n values mean + N(0, sigma).
inline std::vector<float> normal_floats(size_t n, std::mt19937& rng, float sigma,
                                        float mean = 0.0f) {
  std::normal_distribution<float> normal(mean, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// n values mean + N(0, sigma), as stored in type t.
inline Bytes random_values(DType t, size_t n, std::mt19937& rng, float sigma, float mean = 0.0f) {
  return encode(t, normal_floats(n, rng, sigma, mean));
}

// The spacing of a 16-bit format around v (0 for f32, whose results are
// compared at fp32 precision already).
inline double ulp16(DType t, double v) {
  if (t == DType::F32) return 0.0;
  const int mantissa = t == DType::F16 ? 10 : 7;
  const int min_exp = t == DType::F16 ? -14 : -126;
  int e = min_exp;
  if (v != 0 && std::isfinite(v)) {
    std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
    e -= 1;
  }
  return std::ldexp(1.0, (e > min_exp ? e : min_exp) - mantissa);
}

// ---- both backends ---------------------------------------------------------

struct Backends {
  std::unique_ptr<ampx::impl::Backend> cpu;
  std::unique_ptr<ampx::impl::Backend> gpu;
  std::unique_ptr<ampx::impl::Allocator> memory;

  explicit Backends(void* stream = nullptr) {
    ampx::impl::BackendOptions options;
    cpu = ampx::impl::create_backend(options);
    options.device_type = AMPX_DEVICE_CUDA;
    options.cuda_stream = stream;
    gpu = ampx::impl::create_backend(options);
    memory = gpu->make_default_allocator();
  }
};

// Device memory holding `bytes` (or `zero_bytes` zeros), `offset` bytes (a
// multiple of the element size) past a 256-byte-aligned allocation, so that
// the kernels' vector paths meet heads and arrays of every phase.
class Gpu {
 public:
  Gpu(Backends& b, const Bytes& bytes, size_t offset = 0)
      : b_(&b), size_(bytes.size()), offset_(offset) {
    block_ = static_cast<uint8_t*>(b.memory->allocate(offset_ + size_ + 1));
    REQUIRE(block_ != nullptr);
    if (size_ > 0) b.gpu->copy_from_host(ptr(), bytes.data(), size_);
  }
  Gpu(Backends& b, size_t zero_bytes, size_t offset = 0) : Gpu(b, Bytes(zero_bytes), offset) {}
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() { b_->memory->deallocate(block_, offset_ + size_ + 1); }

  void* ptr() const { return block_ + offset_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr());
  }
  float* f32() const { return as<float>(); }
  Bytes bytes() const {
    Bytes host(size_);
    if (size_ > 0) b_->gpu->copy_to_host(host.data(), ptr(), size_);
    return host;
  }

 private:
  Backends* b_;
  size_t size_;
  size_t offset_;
  uint8_t* block_;
};

// ---- comparisons ---------------------------------------------------------------

// Collects the elements outside their bound; reports the count and the
// first few in one CHECK.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  ~Mismatches() { CHECK_MESSAGE(count_ == 0, what_, ": ", count_, " wrong", first_.str()); }
  Mismatches(const Mismatches&) = delete;
  Mismatches& operator=(const Mismatches&) = delete;

  // A finite CPU value must be within bound, a non-finite one matched.
  void check(size_t i, double got, double want, double bound) {
    const bool ok = std::isfinite(want)
                        ? std::fabs(got - want) <= bound
                        : (std::isnan(want) ? std::isnan(got) : got == want);
    if (!ok) note(i, got, want, bound);
  }
  // Bit for bit, except that any NaN equals any NaN (GPU arithmetic returns
  // the canonical NaN where the CPU may pass a payload through).
  void exact(size_t i, DType t, const Bytes& got, const Bytes& want) {
    const float g = get(got, t, i), w = get(want, t, i);
    if (std::isnan(g) && std::isnan(w)) return;
    if (std::memcmp(&got[i * width(t)], &want[i * width(t)], width(t)) != 0) note(i, g, w, 0.0);
  }

 private:
  void note(size_t i, double got, double want, double bound) {
    if (++count_ <= 5) {
      first_.precision(17);
      first_ << "\n  [" << i << "] got " << got << ", want " << want << " (bound " << bound << ")";
    }
  }
  std::string what_;
  int count_ = 0;
  std::ostringstream first_;
};

// Bit for bit, except that any NaN equals any NaN: GPU arithmetic returns
// the canonical NaN where the CPU passes an input's payload through.
// Reports how many elements differ.
inline void compare_exact(const std::string& what, DType t, const Bytes& got, const Bytes& want) {
  REQUIRE(got.size() == want.size());
  size_t differing = 0;
  for (size_t i = 0; i < want.size() / width(t); ++i) {
    const float g = get(got, t, i), w = get(want, t, i);
    if (std::isnan(g) && std::isnan(w)) continue;
    differing += std::memcmp(&got[i * width(t)], &want[i * width(t)], width(t)) != 0;
  }
  CHECK_MESSAGE(differing == 0, what, ": ", differing, " elements' bits differ from the CPU's");
}

// ---- refusals, memory, graphs ------------------------------------------------

// The status a call throws, AMPX_OK if it returns.
inline ampx_status status_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ampx::impl::StatusError& e) {
    return e.status();
  }
  return AMPX_OK;
}

// Free device memory, for the cases that need gigabytes.
inline size_t free_device_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  return free_bytes;
}

// What `work` enqueues on `stream`, captured into a CUDA graph (in
// thread-local mode: any synchronization or host copy inside would fail the
// capture) and instantiated. Destroying it checks that the graph and its
// instance are released.
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& work) : stream_(stream) {
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    std::string error;
    try {
      work();
    } catch (const ampx::impl::StatusError& e) {
      error = e.what();
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    REQUIRE_MESSAGE(error.empty(), error);
    REQUIRE(ended == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec_, graph_, 0) == cudaSuccess);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    CHECK(cudaGraphExecDestroy(exec_) == cudaSuccess);
    CHECK(cudaGraphDestroy(graph_) == cudaSuccess);
  }

  // Replays the graph on the stream it was captured from.
  void launch() const { REQUIRE(cudaGraphLaunch(exec_, stream_) == cudaSuccess); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace cuda_test

#endif  // AMPX_WITH_CUDA
