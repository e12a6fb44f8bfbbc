// The optional libraries opened at run time: the one loader rule
// (core/optional_library.h, ampx.h "Libraries") and the oneDNN plans a
// context keeps (freed with it).
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/dnnl_library.h"
#include "core/optional_library.h"
#include "platform/platform.h"
#include "support.h"

using ampx::impl::LibrarySearch;
using ampx_test::contains;

namespace {

constexpr const char* kVariable = "AMPX_TEST_OPTIONAL_LIBRARY";

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = getenv(name);
    had_ = before != nullptr;
    if (had_) before_ = before;
    if (value)
      ampx::impl::platform::set_environment(name, value);
    else
      ampx::impl::platform::unset_environment(name);
  }
  ~ScopedEnv() {
    if (had_)
      ampx::impl::platform::set_environment(name_, before_.c_str());
    else
      ampx::impl::platform::unset_environment(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string before_;
};

// A library every process can load.
#if defined(_WIN32)
constexpr const char* kLoadable = "kernel32.dll";
#else
constexpr const char* kLoadable = "libm.so.6";
#endif

}  // namespace

TEST_CASE("optional libraries: unset, the defaults are tried in order; the error lists each") {
  const ScopedEnv env(kVariable, nullptr);
  LibrarySearch missing("the test library", kVariable,
                        {"/nonexistent/first.so", "/nonexistent/second.so"});
  CHECK_FALSE(missing.off());
  CHECK_FALSE(missing.chosen());
  CHECK(missing.open() == nullptr);
  const std::string error = missing.error();
  CAPTURE(error);
  CHECK(contains(error, "the test library could not be loaded"));
  CHECK(contains(error, kVariable));
  const size_t first = error.find("\n  /nonexistent/first.so: ");
  const size_t second = error.find("\n  /nonexistent/second.so: ");
  CHECK(first != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(first < second);

  LibrarySearch found("the test library", kVariable, {"/nonexistent/first.so", kLoadable});
  void* handle = found.open();
  REQUIRE(handle != nullptr);
  CHECK(found.path() == kLoadable);
  ampx::impl::platform::close_library(handle);

  // Empty is unset.
  const ScopedEnv empty(kVariable, "");
  LibrarySearch defaults("the test library", kVariable, {kLoadable});
  CHECK_FALSE(defaults.chosen());
  REQUIRE(defaults.paths().size() == 1);
  CHECK(defaults.paths()[0] == kLoadable);
}

TEST_CASE("optional libraries: a path the variable names is the only one tried") {
  const ScopedEnv env(kVariable, "/nonexistent/chosen.so");
  LibrarySearch search("the test library", kVariable, {kLoadable});
  CHECK(search.chosen());
  REQUIRE(search.paths().size() == 1);
  CHECK(search.paths()[0] == "/nonexistent/chosen.so");
  // The loadable default is not tried in its place.
  CHECK(search.open() == nullptr);
  const std::string error = search.error();
  CAPTURE(error);
  CHECK(contains(error, "\n  /nonexistent/chosen.so: "));
  CHECK(contains(error, "the only one tried"));
  CHECK_FALSE(contains(error, kLoadable));

  const ScopedEnv loadable(kVariable, kLoadable);
  LibrarySearch named("the test library", kVariable, {"/nonexistent/default.so"});
  void* handle = named.open();
  REQUIRE(handle != nullptr);
  CHECK(named.path() == kLoadable);
  ampx::impl::platform::close_library(handle);
}

TEST_CASE("optional libraries: none turns the library off; nothing is opened") {
  const ScopedEnv env(kVariable, "none");
  LibrarySearch search("the test library", kVariable, {kLoadable});
  CHECK(search.off());
  CHECK(search.paths().empty());
  CHECK(search.open() == nullptr);
  const std::string error = search.error();
  CAPTURE(error);
  CHECK(contains(error, "the test library is turned off"));
  CHECK(contains(error, std::string(kVariable) + " is \"none\""));
}

// NCCL by the same rule, through the C API (no device needed). NCCL is
// loaded once per process: where an earlier case of this run loaded it,
// the variable is no longer read (the optional_libraries ctest runs these
// cases alone).
TEST_CASE("optional libraries: NCCL follows the rule (none, a missing path)") {
  unsigned char id[AMPX_NCCL_UNIQUE_ID_BYTES] = {};
  {
    const ScopedEnv env("AMPX_NCCL_LIBRARY", "none");
    const ampx_status status = ampx_nccl_unique_id(id, sizeof id);
    if (status == AMPX_OK) {
      MESSAGE("NCCL was loaded earlier in this process; the optional_libraries ctest checks this");
      return;
    }
    CHECK(status == AMPX_ERR_NOT_SUPPORTED);
    CHECK(contains(ampx_last_error(), "AMPX_NCCL_LIBRARY is \"none\""));
  }
  const ScopedEnv env("AMPX_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  CHECK(ampx_nccl_unique_id(id, sizeof id) == AMPX_ERR_NOT_SUPPORTED);
  const std::string error = ampx_last_error();
  CAPTURE(error);
  CHECK(contains(error, "\n  /nonexistent/libnccl.so.2: "));
  CHECK(contains(error, "the only one tried"));
  CHECK_FALSE(contains(error, "\n  libnccl.so"));
}

namespace {

// A bf16 product and an f32 convolution on `ctx` (both oneDNN's where it
// is used); `size` varies the shapes, so the plans.
void run_oneDNN_ops(ampx_context ctx, int64_t size) {
  using ampx_test::Tensor;
  const int64_t square[] = {size, size};
  Tensor a, b, product;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_BF16, 2, square, a.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_BF16, 2, square, b.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_matmul(a, b, product.out()) == AMPX_OK, ampx_last_error());
  const int64_t image[] = {1, 2, size, size}, filter[] = {3, 2, 3, 3};
  Tensor x, w, y;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 4, image, x.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 4, filter, w.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_conv2d(x, w, nullptr, nullptr, y.out()) == AMPX_OK, ampx_last_error());
}

}  // namespace

TEST_CASE("optional libraries: a context's oneDNN plans are freed with it") {
  if (ampx_test::test_device() != AMPX_DEVICE_CPU || !ampx::impl::cpu::dnnl_available()) {
    MESSAGE("oneDNN does not compute here (", ampx::impl::cpu::dnnl_description(), ")");
    return;
  }
  using ampx::impl::cpu::dnnl_live_plans;
  const int64_t before = dnnl_live_plans();
  ampx_context first = ampx_test::test_context(2), second = ampx_test::test_context(2);
  run_oneDNN_ops(first, 16);
  const int64_t first_plans = dnnl_live_plans() - before;
  CHECK(first_plans >= 2);  // a matmul and a convolution at least
  // The same shapes again reuse the plans.
  run_oneDNN_ops(first, 16);
  CHECK(dnnl_live_plans() - before == first_plans);
  // Another context makes its own, for the same shapes too.
  run_oneDNN_ops(second, 16);
  run_oneDNN_ops(second, 24);
  const int64_t second_plans = dnnl_live_plans() - before - first_plans;
  CHECK(second_plans >= 2 * first_plans);

  ampx_context_release(first);
  CHECK(dnnl_live_plans() - before == second_plans);
  ampx_context_release(second);
  CHECK(dnnl_live_plans() == before);
}
