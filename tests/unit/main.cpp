// Test runner: doctest, with the device chosen by AMPX_TEST_DEVICE. A CUDA
// run on a machine without a device exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include "support.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ampx_test {

ampx_device_type test_device() {
  const char* name = std::getenv("AMPX_TEST_DEVICE");
  return (name && std::strcmp(name, "cuda") == 0) ? AMPX_DEVICE_CUDA : AMPX_DEVICE_CPU;
}

ampx_context test_context(int32_t num_threads) {
  ampx_context_options options = ampx_context_options_default();
  options.device_type = test_device();
  options.num_threads = num_threads;
  ampx_context ctx = nullptr;
  REQUIRE_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, ampx_last_error());
  return ctx;
}

}  // namespace ampx_test

int main(int argc, char** argv) {
  if (ampx_test::test_device() == AMPX_DEVICE_CUDA && ampx_cuda_device_count() == 0) {
    std::printf("SKIPPED: %s\n", ampx_has_cuda() ? "no CUDA device is present"
                                                 : "ampx was built without the CUDA backend");
    return 77;
  }
  std::printf("ampx %s, tests on %s\n", ampx_version_string(),
              ampx_test::test_device() == AMPX_DEVICE_CUDA ? "CUDA device 0" : "the CPU");
  doctest::Context context(argc, argv);
  return context.run();
}
