// support.h -- shared helpers for the unit tests.
//
// The same test cases run against every backend: AMPX_TEST_DEVICE=cpu (the
// default) or cuda selects the device test_context() creates.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "ampx/ampx.h"

namespace ampx_test {

// The device the suite runs against.
ampx_device_type test_device();

// A new context on the test device; the caller releases it.
ampx_context test_context(int32_t num_threads = 0);

// RAII owner for handles in tests.
struct Ctx {
  ampx_context handle;
  explicit Ctx(int32_t num_threads = 0) : handle(test_context(num_threads)) {}
  ~Ctx() { ampx_context_release(handle); }
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;
  operator ampx_context() const { return handle; }
};

struct Tensor {
  ampx_tensor handle = nullptr;
  Tensor() = default;
  explicit Tensor(ampx_tensor t) : handle(t) {}
  ~Tensor() { ampx_tensor_release(handle); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  operator ampx_tensor() const { return handle; }
  ampx_tensor* out() {
    ampx_tensor_release(handle);
    handle = nullptr;
    return &handle;
  }
};

// A scratch directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ampx-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t entry_count() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path),
                                             std::filesystem::directory_iterator()));
  }
};

// A whole file's bytes.
inline std::vector<unsigned char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// The last error message as a std::string, for CHECK(contains(...)).
inline std::string last_error() { return ampx_last_error(); }

// A one-dimensional tensor holding `values` (T must match dtype's size).
template <class T>
ampx_tensor upload(ampx_context ctx, ampx_dtype dtype, const std::vector<T>& values) {
  REQUIRE(ampx_dtype_size(dtype) == sizeof(T));
  const int64_t n = static_cast<int64_t>(values.size());
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, 1, &n, values.data(), values.size() * sizeof(T),
                                        &t) == AMPX_OK,
                  last_error());
  return t;
}

// A tensor's contents as T (T must match its dtype's size).
template <class T>
std::vector<T> download(ampx_tensor t) {
  int64_t n = 0;
  REQUIRE(ampx_tensor_numel(t, &n) == AMPX_OK);
  std::vector<T> out(static_cast<size_t>(n));
  REQUIRE_MESSAGE(ampx_tensor_to_host(t, out.data(), out.size() * sizeof(T)) == AMPX_OK,
                  last_error());
  return out;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace ampx_test

// Marks the test cases of the ops. The CUDA backend now has the primitives
// they use (backend.h, "primitives of the ops"), so they run on every test
// device and the macro does nothing; it stays so they compile unchanged.
#define OPS_REQUIRE_CPU() \
  do {                    \
  } while (0)

// A CUDA-only case reports that and returns unless the suite runs on CUDA
// (the unit_cuda test).
#define SKIP_UNLESS_CUDA()                                                  \
  do {                                                                      \
    if (ampx_test::test_device() != AMPX_DEVICE_CUDA) {                     \
      MESSAGE("CUDA-only case; runs in the unit_cuda test");                \
      return;                                                               \
    }                                                                       \
  } while (0)

// Whether conv2d runs on the test device: the CPU backend always
// convolves, the CUDA backend when it could load cuDNN. Asked once, by
// convolving a 1x1 image.
namespace ampx_test {
inline bool test_device_convolves() {
  static const bool convolves = [] {
    Ctx ctx;
    const int64_t dims[] = {1, 1, 1, 1};
    ampx_tensor x = nullptr, w = nullptr, y = nullptr;
    bool made = ampx_tensor_zeros(ctx, AMPX_F32, 4, dims, &x) == AMPX_OK &&
                ampx_tensor_zeros(ctx, AMPX_F32, 4, dims, &w) == AMPX_OK;
    const bool ran = made && ampx_conv2d(x, w, nullptr, nullptr, &y) == AMPX_OK;
    ampx_tensor_release(y);
    ampx_tensor_release(w);
    ampx_tensor_release(x);
    return ran;
  }();
  return convolves;
}
}  // namespace ampx_test

// Skips a convolution case where the test device cannot convolve (a GPU
// machine without cuDNN), saying so. Pooling needs no such guard.
#define SKIP_UNLESS_CONVOLUTION()                                                 \
  do {                                                                            \
    if (!ampx_test::test_device_convolves()) {                                    \
      MESSAGE("conv2d is not available on this device (no cuDNN); case skipped"); \
      return;                                                                     \
    }                                                                             \
  } while (0)

// Checks that `call` fails with `status` and that the message names `part`.
#define CHECK_FAILS_WITH(call, status, part)                                 \
  do {                                                                       \
    ampx_status check_status_ = (call);                                      \
    CHECK_MESSAGE(check_status_ == (status), ampx_test::last_error());       \
    CHECK_MESSAGE(ampx_test::contains(ampx_test::last_error(), (part)),      \
                  ampx_test::last_error());                                  \
  } while (0)
