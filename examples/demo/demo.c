/*
 * demo.c -- the ampx demo (README command 1).
 *
 * Shows what mixed precision does to numbers before any training happens:
 * it picks the best device present (a CUDA GPU if there is one, else the
 * CPU), stores a few telling fp32 values as fp16 and bf16 tensors on it,
 * reads them back, and prints what each format kept -- the rounding, the
 * overflow to infinity, the flush of tiny gradients to zero that loss
 * scaling exists to prevent -- and the memory each copy took.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    ampx_status status_ = (call);                                              \
    if (status_ != AMPX_OK) {                                                  \
      fprintf(stderr, "%s failed: %s\n", #call, ampx_last_error());           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

enum { kCount = 9 };

static const char *const kLabels[kCount] = {
    "one third",        "1 + 2^-9",        "1000.1",
    "largest fp16",     "70000 (> fp16)",  "1e-5 (fp16 subnormal)",
    "1e-8 (tiny grad)", "1e-8 * 65536",    "3e38"};

int main(void) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  if (ampx_cuda_device_count() > 0) options.device_type = AMPX_DEVICE_CUDA;
  ampx_context ctx = NULL;
  CHECK(ampx_context_create(&options, &ctx));
  printf("ampx %s on %s\n\n", ampx_version_string(),
         options.device_type == AMPX_DEVICE_CUDA ? "CUDA device 0" : "the CPU");

  const float values[kCount] = {1.0f / 3.0f, 1.0f + 1.0f / 512.0f, 1000.1f,
                                65504.0f,    70000.0f,            1e-5f,
                                1e-8f,       1e-8f * 65536.0f,    3e38f};
  const int64_t shape[1] = {kCount};
  ampx_tensor f32 = NULL, f16 = NULL, bf16 = NULL, f16_back = NULL, bf16_back = NULL;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, values, sizeof values, &f32));
  CHECK(ampx_tensor_cast(f32, AMPX_F16, &f16));
  CHECK(ampx_tensor_cast(f32, AMPX_BF16, &bf16));
  CHECK(ampx_tensor_cast(f16, AMPX_F32, &f16_back));
  CHECK(ampx_tensor_cast(bf16, AMPX_F32, &bf16_back));

  float as_f16[kCount], as_bf16[kCount];
  CHECK(ampx_tensor_to_host(f16_back, as_f16, sizeof as_f16));
  CHECK(ampx_tensor_to_host(bf16_back, as_bf16, sizeof as_bf16));

  printf("%-24s %15s %15s %15s\n", "value", "fp32", "fp16", "bf16");
  for (int i = 0; i < kCount; ++i)
    printf("%-24s %15.8g %15.8g %15.8g\n", kLabels[i], values[i], as_f16[i], as_bf16[i]);

  size_t bytes32 = 0, bytes16 = 0;
  CHECK(ampx_tensor_nbytes(f32, &bytes32));
  CHECK(ampx_tensor_nbytes(f16, &bytes16));
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  CHECK(ampx_memory_stats_get(ctx, &stats));
  printf("\nbytes per copy: fp32 %zu, fp16/bf16 %zu; context peak %llu bytes in %llu allocations\n",
         bytes32, bytes16, (unsigned long long)stats.peak_bytes,
         (unsigned long long)stats.allocation_count);
  printf("fp16 keeps ~3 decimal digits up to 65504 and loses gradients below ~6e-8;\n"
         "bf16 keeps fp32's range with ~2-3 digits; a loss scale of 65536 lifts 1e-8 into fp16's range.\n");

  ampx_tensor_release(f32);
  ampx_tensor_release(f16);
  ampx_tensor_release(bf16);
  ampx_tensor_release(f16_back);
  ampx_tensor_release(bf16_back);
  ampx_context_release(ctx);
  return 0;
}
