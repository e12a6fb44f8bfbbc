/*
 * c_api_test.c -- the public API exercised from plain C99 through ampx.h
 * alone: statuses, messages, handles, ownership. Prints "N passed, N failed"
 * and exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ampx/ampx.h"

static int passed = 0;
static int failed = 0;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (cond) {                                                           \
      ++passed;                                                           \
    } else {                                                              \
      ++failed;                                                           \
      fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n", __FILE__,   \
              __LINE__, #cond, ampx_last_error());                        \
    }                                                                     \
  } while (0)

/* The call fails with `status` and the message contains both `function`
 * and `part`. */
#define EXPECT_ERROR(call, status, function, part)                        \
  do {                                                                    \
    ampx_status got_ = (call);                                            \
    EXPECT(got_ == (status));                                             \
    EXPECT(ampx_last_status() == (status));                               \
    EXPECT(strstr(ampx_last_error(), (function)) != NULL);                \
    EXPECT(strstr(ampx_last_error(), (part)) != NULL);                    \
  } while (0)

typedef struct counting_allocator {
  int allocations;
  int frees;
  int fail_next;
  size_t live_bytes;
} counting_allocator;

static void *counting_alloc(void *user, size_t bytes, size_t alignment) {
  counting_allocator *a = (counting_allocator *)user;
  static unsigned char arena[1 << 16];
  static size_t used = 0;
  const uintptr_t base = (uintptr_t)arena;
  size_t start;
  if (a->fail_next) {
    a->fail_next = 0;
    return NULL;
  }
  start = (size_t)(((base + used + alignment - 1) & ~(uintptr_t)(alignment - 1)) - base);
  if (start + bytes > sizeof arena) return NULL;
  used = start + bytes;
  ++a->allocations;
  a->live_bytes += bytes;
  return arena + start;
}

static void counting_free(void *user, void *ptr, size_t bytes) {
  counting_allocator *a = (counting_allocator *)user;
  (void)ptr;
  ++a->frees;
  a->live_bytes -= bytes;
}

static int deleter_calls = 0;
static void count_deleter(void *user, void *data) {
  EXPECT(user == (void *)&deleter_calls);
  EXPECT(data != NULL);
  ++deleter_calls;
}

static void test_version_and_strings(void) {
  EXPECT(ampx_version() == AMPX_VERSION_NUMBER);
  EXPECT(strcmp(ampx_version_string(), "0.1.0") == 0);
  EXPECT(strcmp(ampx_status_string(AMPX_OK), "AMPX_OK") == 0);
  EXPECT(strcmp(ampx_status_string(AMPX_ERR_ORDER), "AMPX_ERR_ORDER") == 0);
  EXPECT(strcmp(ampx_status_string((ampx_status)999), "AMPX_UNKNOWN_STATUS") == 0);
  EXPECT(ampx_dtype_size(AMPX_BF16) == 2);
  EXPECT(ampx_dtype_size((ampx_dtype)0) == 0);
  EXPECT(strcmp(ampx_dtype_name(AMPX_I64), "i64") == 0);
  /* pinned numbers */
  EXPECT(AMPX_ERR_INTERNAL == 12 && AMPX_ERR_STALE_HANDLE == 9 && AMPX_F32 == 1);
}

static void test_context_errors(void) {
  ampx_context ctx = NULL;
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;

  EXPECT_ERROR(ampx_context_create(NULL, NULL), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "'out'");
  options.struct_size = 0;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "struct_size");
  EXPECT(ctx == NULL);
  options = ampx_context_options_default();
  options.num_threads = -3;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "num_threads");
  options = ampx_context_options_default();
  options.device_type = (ampx_device_type)7;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "device_type");
  options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CUDA;
  options.device_index = 1000;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_NO_DEVICE,
               "ampx_context_create", "");
  options = ampx_context_options_default();
  options.allocator.alloc = counting_alloc;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "allocator");
  EXPECT(ctx == NULL);
  EXPECT_ERROR(ampx_context_synchronize(NULL), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_synchronize", "'ctx'");
  ampx_context_release(NULL); /* a no-op */
}

/* An options struct from an "older" caller: only struct_size and
 * device_type; everything after reads as the defaults. */
static void test_short_options(void) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  ampx_device_type type = (ampx_device_type)0;
  int32_t index = -1;
  options.struct_size = sizeof(size_t) + sizeof(ampx_device_type);
  options.num_threads = -99; /* beyond struct_size: must be ignored */
  EXPECT(ampx_context_create(&options, &ctx) == AMPX_OK);
  EXPECT(ampx_context_device(ctx, &type, &index) == AMPX_OK);
  EXPECT(type == AMPX_DEVICE_CPU && index == 0);
  ampx_context_release(ctx);
}

static void test_tensor_round_trip(void) {
  ampx_context ctx = NULL;
  ampx_tensor t = NULL, h = NULL;
  const int64_t shape[2] = {2, 3};
  const float values[6] = {1.0f, -2.5f, 65504.0f, 1e-8f, 0.1f, -0.0f};
  float back[6];
  int64_t dims[2] = {0, 0};
  int32_t ndim = -1;
  int64_t numel = 0;
  ampx_dtype dtype = (ampx_dtype)0;
  const char *name = NULL;

  EXPECT(ampx_context_create(NULL, &ctx) == AMPX_OK);
  EXPECT(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, values, sizeof values, &t) == AMPX_OK);
  EXPECT(ampx_tensor_ndim(t, &ndim) == AMPX_OK && ndim == 2);
  EXPECT(ampx_tensor_shape(t, dims, 2) == AMPX_OK && dims[0] == 2 && dims[1] == 3);
  EXPECT(ampx_tensor_numel(t, &numel) == AMPX_OK && numel == 6);
  EXPECT(ampx_tensor_dtype(t, &dtype) == AMPX_OK && dtype == AMPX_F32);
  EXPECT(ampx_tensor_to_host(t, back, sizeof back) == AMPX_OK);
  EXPECT(memcmp(values, back, sizeof back) == 0);

  EXPECT(ampx_tensor_cast(t, AMPX_F16, &h) == AMPX_OK);
  EXPECT(ampx_tensor_copy(t, h) == AMPX_OK); /* f16 -> f32 in place */
  EXPECT(ampx_tensor_to_host(t, back, sizeof back) == AMPX_OK);
  EXPECT(back[0] == 1.0f && back[1] == -2.5f && back[2] == 65504.0f);
  EXPECT(back[3] == 0.0f);                          /* 1e-8 underflows in fp16 */
  EXPECT(fabsf(back[4] - 0.1f) < 1e-4f && back[4] != 0.1f); /* rounded */
  EXPECT(back[5] == 0.0f && signbit(back[5]));      /* -0 kept */

  EXPECT(ampx_tensor_set_name(t, "layer1.weight") == AMPX_OK);
  EXPECT(ampx_tensor_name(t, &name) == AMPX_OK && strcmp(name, "layer1.weight") == 0);

  /* errors name the function and the argument, and change nothing */
  EXPECT_ERROR(ampx_tensor_to_host(t, back, 5), AMPX_ERR_SHAPE, "ampx_tensor_to_host", "24 bytes");
  EXPECT_ERROR(ampx_tensor_shape(t, dims, 1), AMPX_ERR_INVALID_ARGUMENT, "ampx_tensor_shape",
               "capacity");
  EXPECT_ERROR(ampx_tensor_from_host(ctx, (ampx_dtype)42, 2, shape, values, sizeof values, &h),
               AMPX_ERR_DTYPE, "ampx_tensor_from_host", "'dtype'");
  EXPECT_ERROR(ampx_tensor_fill(NULL, 1.0), AMPX_ERR_INVALID_ARGUMENT, "ampx_tensor_fill",
               "'tensor'");
  EXPECT(ampx_tensor_name(t, &name) == AMPX_OK && strcmp(name, "layer1.weight") == 0);

  ampx_tensor_release(h);
  ampx_tensor_release(t);
  ampx_context_release(ctx);
}

static void test_allocator_hooks_and_wrap(void) {
  counting_allocator counter = {0, 0, 0, 0};
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  ampx_tensor t = NULL, w = NULL;
  const int64_t shape[1] = {16};
  float host[16];
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  int i;

  options.allocator.alloc = counting_alloc;
  options.allocator.free = counting_free;
  options.allocator.user_data = &counter;
  EXPECT(ampx_context_create(&options, &ctx) == AMPX_OK);
  EXPECT(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &t) == AMPX_OK);
  EXPECT(counter.allocations == 1 && counter.live_bytes == 64);
  EXPECT(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
  EXPECT(stats.current_bytes == 64 && stats.peak_bytes == 64 && stats.allocation_count == 1);

  counter.fail_next = 1;
  EXPECT_ERROR(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &w), AMPX_ERR_OUT_OF_MEMORY,
               "ampx_tensor_zeros", "64 bytes");
  EXPECT(w == NULL);
  EXPECT(ampx_memory_stats_get(ctx, &stats) == AMPX_OK && stats.current_bytes == 64);

  for (i = 0; i < 16; ++i) host[i] = (float)i;
  EXPECT(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, host, sizeof host, count_deleter,
                          &deleter_calls, &w) == AMPX_OK);
  EXPECT(ampx_tensor_fill(w, 2.0) == AMPX_OK);
  EXPECT(host[0] == 2.0f && host[15] == 2.0f); /* no copy: the caller's memory */
  EXPECT(ampx_tensor_retain(w) == AMPX_OK);
  ampx_tensor_release(w);
  EXPECT(deleter_calls == 0);
  ampx_tensor_release(w);
  EXPECT(deleter_calls == 1);
  EXPECT_ERROR(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, host, 3, count_deleter, &deleter_calls,
                                &w),
               AMPX_ERR_SHAPE, "ampx_tensor_wrap", "'bytes'");
  EXPECT(deleter_calls == 1); /* a failed wrap never calls the deleter */

  /* The context outlives its release while a tensor still uses it. */
  ampx_context_release(ctx);
  EXPECT(ampx_tensor_fill(t, 1.0) == AMPX_OK);
  EXPECT(counter.frees == 0);
  ampx_tensor_release(t);
  EXPECT(counter.frees == 1 && counter.live_bytes == 0);
}

/* ampx_context_options as the 0.1.0 header laid it out, before
 * ampx_allocator gained struct_size: a program built then passes this. */
typedef struct legacy_allocator {
  void *(*alloc)(void *user_data, size_t bytes, size_t alignment);
  void (*free)(void *user_data, void *ptr, size_t bytes);
  void *user_data;
} legacy_allocator;
typedef struct legacy_context_options {
  size_t struct_size;
  ampx_device_type device_type;
  int32_t device_index;
  int32_t num_threads;
  uint64_t seed;
  legacy_allocator allocator;
  void *cuda_stream;
} legacy_context_options;

static void test_legacy_options_layout(void) {
  counting_allocator counter = {0, 0, 0, 0};
  legacy_context_options legacy;
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  ampx_tensor t = NULL;
  const int64_t shape[1] = {4};

  /* Without hooks. */
  memset(&legacy, 0, sizeof legacy);
  legacy.struct_size = sizeof legacy;
  legacy.device_type = AMPX_DEVICE_CPU;
  legacy.num_threads = 1;
  EXPECT(ampx_context_create((const ampx_context_options *)(const void *)&legacy, &ctx) ==
         AMPX_OK);
  EXPECT(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &t) == AMPX_OK);
  ampx_tensor_release(t);
  t = NULL;
  ampx_context_release(ctx);
  ctx = NULL;

  /* With hooks: they are called. */
  legacy.allocator.alloc = counting_alloc;
  legacy.allocator.free = counting_free;
  legacy.allocator.user_data = &counter;
  EXPECT(ampx_context_create((const ampx_context_options *)(const void *)&legacy, &ctx) ==
         AMPX_OK);
  EXPECT(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &t) == AMPX_OK);
  EXPECT(counter.allocations == 1 && counter.live_bytes == 16);
  ampx_tensor_release(t);
  t = NULL;
  EXPECT(counter.frees == 1 && counter.live_bytes == 0);
  ampx_context_release(ctx);
  ctx = NULL;
  /* A legacy struct with one hook is refused as before. */
  legacy.allocator.free = NULL;
  EXPECT_ERROR(ampx_context_create((const ampx_context_options *)(const void *)&legacy, &ctx),
               AMPX_ERR_INVALID_ARGUMENT, "ampx_context_create", "allocator");
  EXPECT(ctx == NULL);

  /* The current layout with hooks. */
  counter.allocations = counter.frees = 0;
  options.allocator.alloc = counting_alloc;
  options.allocator.free = counting_free;
  options.allocator.user_data = &counter;
  EXPECT(ampx_context_create(&options, &ctx) == AMPX_OK);
  EXPECT(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &t) == AMPX_OK);
  EXPECT(counter.allocations == 1);
  ampx_tensor_release(t);
  t = NULL;
  EXPECT(counter.frees == 1);
  ampx_context_release(ctx);
  ctx = NULL;

  /* An allocator whose struct_size is too small, and a size between the
   * two layouts, are refused. An all-zero allocator means ampx's own. */
  options.allocator.struct_size = sizeof(size_t);
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "allocator.struct_size");
  options = ampx_context_options_default();
  options.struct_size = sizeof(legacy_context_options) + 1;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "legacy");
  EXPECT(ctx == NULL);
  options = ampx_context_options_default();
  memset(&options.allocator, 0, sizeof options.allocator);
  EXPECT(ampx_context_create(&options, &ctx) == AMPX_OK);
  ampx_context_release(ctx);
}

/* Negative values of every enum a C entry takes are refused by name. */
static void test_negative_enums(void) {
  ampx_context ctx = NULL;
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_tensor t = NULL, out = NULL;
  const int64_t shape[1] = {2};
  const float values[2] = {1.0f, 2.0f};
  ampx_autocast_options autocast_options = AMPX_AUTOCAST_OPTIONS_INIT;
  ampx_bce_with_logits_options bce_options = AMPX_BCE_WITH_LOGITS_OPTIONS_INIT;
  ampx_autocast autocast = NULL;
  ampx_optimizer opt = NULL;

  EXPECT(strcmp(ampx_status_string(AMPX_STATUS_MIN_ENUM), "AMPX_UNKNOWN_STATUS") == 0);
  EXPECT(strcmp(ampx_status_string((ampx_status)-1), "AMPX_UNKNOWN_STATUS") == 0);
  EXPECT(ampx_dtype_size((ampx_dtype)-1) == 0);
  EXPECT(strcmp(ampx_dtype_name(AMPX_DTYPE_MIN_ENUM), "invalid") == 0);
  options.device_type = (ampx_device_type)-1;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "device_type");
  options.device_type = AMPX_DEVICE_MIN_ENUM;
  EXPECT_ERROR(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_context_create", "device_type");
  EXPECT(ctx == NULL);
  if (ampx_context_create(NULL, &ctx) != AMPX_OK) {
    EXPECT(!"context");
    return;
  }
  EXPECT_ERROR(ampx_tensor_zeros(ctx, (ampx_dtype)-5, 1, shape, &t), AMPX_ERR_DTYPE,
               "ampx_tensor_zeros", "dtype");
  EXPECT(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, values, sizeof values, &t) == AMPX_OK);
  EXPECT(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK);
  EXPECT_ERROR(ampx_tensor_cast(t, AMPX_DTYPE_MIN_ENUM, &out), AMPX_ERR_DTYPE,
               "ampx_tensor_cast", "dtype");
  EXPECT_ERROR(ampx_mse_loss(t, t, (ampx_reduction)-1, &out), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_mse_loss", "reduction");
  EXPECT_ERROR(ampx_bce_with_logits(t, t, AMPX_REDUCTION_MIN_ENUM, &out),
               AMPX_ERR_INVALID_ARGUMENT, "ampx_bce_with_logits", "reduction");
  bce_options.reduction = (ampx_reduction)-1;
  EXPECT_ERROR(ampx_bce_with_logits_ex(t, t, NULL, NULL, &bce_options, &out),
               AMPX_ERR_INVALID_ARGUMENT, "ampx_bce_with_logits_ex", "reduction");
  EXPECT(ampx_bce_with_logits_options_default().reduction == AMPX_REDUCTION_MEAN);
  EXPECT_ERROR(ampx_linear(t, t, NULL, (ampx_activation)-1, &out), AMPX_ERR_INVALID_ARGUMENT,
               "ampx_linear", "activation");
  EXPECT(out == NULL);
  autocast_options.dtype = (ampx_dtype)-2;
  EXPECT_ERROR(ampx_autocast_create(ctx, &autocast_options, &autocast), AMPX_ERR_DTYPE,
               "ampx_autocast_create", "");
  autocast_options.dtype = AMPX_BF16;
  EXPECT(ampx_autocast_create(ctx, &autocast_options, &autocast) == AMPX_OK);
  EXPECT_ERROR(ampx_autocast_set_op_class(autocast, "matmul", (ampx_op_class)-1),
               AMPX_ERR_INVALID_ARGUMENT, "ampx_autocast_set_op_class", "op_class");
  EXPECT(ampx_optimizer_create_sgd(ctx, &t, 1, NULL, &opt) == AMPX_OK);
  EXPECT_ERROR(ampx_optimizer_state_tensor(opt, t, (ampx_optimizer_state)-1, &out),
               AMPX_ERR_INVALID_ARGUMENT, "ampx_optimizer_state_tensor", "kind");
  EXPECT(out == NULL);
  ampx_optimizer_release(opt);
  ampx_autocast_release(autocast);
  ampx_tensor_release(t);
  ampx_context_release(ctx);
}

/* A segment that fails with its own words, one that fails without any,
 * and one that counts the releases of its data. */
static ampx_status io_failure_segment(void *user_data, const ampx_tensor *inputs,
                                      size_t input_count, ampx_tensor *outputs,
                                      size_t output_count) {
  (void)user_data;
  (void)inputs;
  (void)input_count;
  (void)outputs;
  (void)output_count;
  return ampx_set_error(AMPX_ERR_IO, "batch file missing");
}

static ampx_status wordless_segment(void *user_data, const ampx_tensor *inputs,
                                    size_t input_count, ampx_tensor *outputs,
                                    size_t output_count) {
  (void)user_data;
  (void)inputs;
  (void)input_count;
  (void)outputs;
  (void)output_count;
  return AMPX_ERR_NOT_SUPPORTED;
}

static ampx_status relu_segment(void *user_data, const ampx_tensor *inputs, size_t input_count,
                                ampx_tensor *outputs, size_t output_count) {
  (void)user_data;
  (void)input_count;
  (void)output_count;
  return ampx_relu(inputs[0], &outputs[0]);
}

static void count_release(void *user_data) { ++*(int *)user_data; }

static void test_segment_errors_and_release(void) {
  ampx_context ctx = NULL;
  ampx_tensor x = NULL, out = NULL, loss = NULL;
  const int64_t shape[1] = {3};
  const float values[3] = {-1.0f, 2.0f, 3.0f};
  ampx_segment segment = AMPX_SEGMENT_INIT;
  int releases = 0;
  int32_t depth = -1;
  ampx_status status;

  if (ampx_context_create(NULL, &ctx) != AMPX_OK) {
    EXPECT(!"context");
    return;
  }
  EXPECT(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, values, sizeof values, &x) == AMPX_OK);
  EXPECT(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);

  segment.fn = io_failure_segment;
  segment.user_data = &releases;
  segment.release = count_release;
  EXPECT_ERROR(ampx_checkpoint_segment(ctx, &segment, &x, 1, &out, 1), AMPX_ERR_IO,
               "ampx_checkpoint_segment", "batch file missing");
  EXPECT(releases == 1); /* the call failed: released before returning */
  EXPECT(out == NULL);

  /* An unrelated failure first; the wordless segment must not inherit it. */
  EXPECT_ERROR(ampx_tensor_fill(NULL, 1.0), AMPX_ERR_INVALID_ARGUMENT, "ampx_tensor_fill",
               "tensor");
  segment.fn = wordless_segment;
  EXPECT_ERROR(ampx_checkpoint_segment(ctx, &segment, &x, 1, &out, 1), AMPX_ERR_NOT_SUPPORTED,
               "ampx_checkpoint_segment", "without a message");
  EXPECT(strstr(ampx_last_error(), "ampx_tensor_fill") == NULL);
  EXPECT(releases == 2);

  /* Recorded, then backpropagated: released once, after backward. */
  segment.fn = relu_segment;
  EXPECT(ampx_scope_push(ctx) == AMPX_OK);
  EXPECT(ampx_scope_depth(ctx, &depth) == AMPX_OK && depth == 1);
  EXPECT(ampx_checkpoint_segment(ctx, &segment, &x, 1, &out, 1) == AMPX_OK);
  EXPECT(releases == 2);
  EXPECT(ampx_sum(out, &loss) == AMPX_OK);
  EXPECT(ampx_backward(loss, NULL) == AMPX_OK);
  EXPECT(releases == 3);
  EXPECT(ampx_scope_pop(ctx) == AMPX_OK);
  EXPECT(releases == 3);
  EXPECT(ampx_scope_depth(ctx, &depth) == AMPX_OK && depth == 0);
  EXPECT_ERROR(ampx_scope_depth(ctx, NULL), AMPX_ERR_INVALID_ARGUMENT, "ampx_scope_depth",
               "depth");

  /* Recorded, never backpropagated, the context released: released then. */
  out = NULL;
  status = ampx_checkpoint_segment(ctx, &segment, &x, 1, &out, 1);
  EXPECT(status == AMPX_OK);
  EXPECT(releases == 3);
  ampx_context_release(ctx);
  EXPECT(releases == 4);
  ampx_tensor_release(out);
  ampx_tensor_release(x);
  EXPECT(releases == 4);
}

int main(void) {
  test_version_and_strings();
  test_context_errors();
  test_short_options();
  test_tensor_round_trip();
  test_allocator_hooks_and_wrap();
  test_legacy_options_layout();
  test_negative_enums();
  test_segment_errors_and_release();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
