// Contexts through the public C API: options, handle lifetime, memory
// statistics, allocator hooks and independent contexts on several threads.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "platform/platform.h"
#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::test_context;
using ampx_test::test_device;

namespace {

// A sentinel that no successful create would return, to prove that out
// arguments are written only on success.
ampx_context bogus_context() { return reinterpret_cast<ampx_context>(uintptr_t{0x1234}); }

ampx_memory_stats stats_of(ampx_context ctx) {
  ampx_memory_stats s = AMPX_MEMORY_STATS_INIT;
  REQUIRE_MESSAGE(ampx_memory_stats_get(ctx, &s) == AMPX_OK, last_error());
  return s;
}

ampx_tensor make_f32(ampx_context ctx, int64_t n) {
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_empty(ctx, AMPX_F32, 1, &n, &t) == AMPX_OK, last_error());
  return t;
}

// Host-memory allocator hooks that record every call, so tests can prove that
// each allocation is freed exactly once with its own size, and can inject
// failures (NULL) or misaligned results.
struct HookLog {
  std::mutex mutex;
  int alloc_calls = 0;        // every call, failed ones included
  int fail_call = 0;          // 1-based alloc call that returns NULL; 0: none
  bool misalign = false;      // return base + 1 instead of aligned memory
  int frees = 0;
  int bad_frees = 0;          // unknown pointer or wrong size
  std::vector<size_t> alignments;
  std::map<void*, size_t> live;      // pointer handed out -> size
  std::map<void*, void*> raw;        // pointer handed out -> what malloc gave
};

void* hook_alloc(void* user, size_t bytes, size_t alignment) {
  auto* log = static_cast<HookLog*>(user);
  std::lock_guard<std::mutex> lock(log->mutex);
  ++log->alloc_calls;
  log->alignments.push_back(alignment);
  if (log->alloc_calls == log->fail_call) return nullptr;
  const size_t rounded = (bytes + 256 + 255) / 256 * 256;
  void* base = ampx::impl::platform::aligned_alloc(256, rounded);
  if (!base) return nullptr;
  void* given = log->misalign ? static_cast<char*>(base) + 1 : base;
  log->live[given] = bytes;
  log->raw[given] = base;
  return given;
}

void hook_free(void* user, void* ptr, size_t bytes) {
  auto* log = static_cast<HookLog*>(user);
  std::lock_guard<std::mutex> lock(log->mutex);
  ++log->frees;
  auto it = log->live.find(ptr);
  if (it == log->live.end() || it->second != bytes) {
    ++log->bad_frees;
    return;
  }
  log->live.erase(it);
  ampx::impl::platform::aligned_free(log->raw[ptr]);
  log->raw.erase(ptr);
}

ampx_context hooked_context(HookLog& log) {
  ampx_context_options options = ampx_context_options_default();
  options.allocator.alloc = hook_alloc;
  options.allocator.free = hook_free;
  options.allocator.user_data = &log;
  ampx_context ctx = nullptr;
  REQUIRE_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, last_error());
  return ctx;
}

ampx_context_options cpu_options() {
  ampx_context_options options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CPU;
  return options;
}

// The fields an "older" program's options struct had: everything up to and
// including num_threads.
struct OldContextOptions {
  size_t struct_size;
  ampx_device_type device_type;
  int32_t device_index;
  int32_t num_threads;
};

}  // namespace

TEST_CASE("context: options_default returns the INIT macro's values") {
  const ampx_context_options macro = AMPX_CONTEXT_OPTIONS_INIT;
  const ampx_context_options fn = ampx_context_options_default();
  CHECK(fn.struct_size == sizeof(ampx_context_options));
  CHECK(macro.struct_size == fn.struct_size);
  CHECK(fn.device_type == AMPX_DEVICE_CPU);
  CHECK(macro.device_type == fn.device_type);
  CHECK(fn.device_index == 0);
  CHECK(fn.num_threads == 0);
  CHECK(fn.seed == 0);
  // doctest cannot print function pointers: compare outside the macro.
  const bool no_alloc_hook = fn.allocator.alloc == nullptr;
  const bool no_free_hook = fn.allocator.free == nullptr;
  CHECK(no_alloc_hook);
  CHECK(no_free_hook);
  CHECK(fn.allocator.user_data == nullptr);
  CHECK(fn.cuda_stream == nullptr);
}

TEST_CASE("context: NULL options create a CPU context") {
  ampx_context ctx = nullptr;
  REQUIRE(ampx_context_create(nullptr, &ctx) == AMPX_OK);
  REQUIRE(ctx != nullptr);
  ampx_device_type type = static_cast<ampx_device_type>(0);
  int32_t index = -1;
  CHECK(ampx_context_device(ctx, &type, &index) == AMPX_OK);
  CHECK(type == AMPX_DEVICE_CPU);
  CHECK(index == 0);
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
  ampx_context_release(ctx);
}

TEST_CASE("context: the test device's context reports its device and synchronizes") {
  Ctx ctx;
  ampx_device_type type = static_cast<ampx_device_type>(0);
  int32_t index = -1;
  REQUIRE(ampx_context_device(ctx, &type, &index) == AMPX_OK);
  CHECK(type == test_device());
  CHECK(index == 0);
  Tensor t(make_f32(ctx, 1000));
  CHECK(ampx_tensor_fill(t, 3.0) == AMPX_OK);
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
  if (test_device() == AMPX_DEVICE_CUDA) CHECK(ampx_cuda_device_count() >= 1);
}

TEST_CASE("context: create rejects a NULL out and a too-small struct_size") {
  CHECK_FAILS_WITH(ampx_context_create(nullptr, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'out'");
  CHECK(contains(last_error(), "ampx_context_create"));
  CHECK(ampx_last_status() == AMPX_ERR_INVALID_ARGUMENT);

  ampx_context_options options = cpu_options();
  for (size_t size : {size_t{0}, size_t{1}, sizeof(size_t) - 1}) {
    CAPTURE(size);
    options.struct_size = size;
    ampx_context ctx = bogus_context();
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
                     "struct_size");
    CHECK(ctx == bogus_context());
  }
}

TEST_CASE("context: a short (older) options struct reads its missing tail as defaults") {
  SUBCASE("only struct_size: every field defaults") {
    size_t only_size = sizeof(size_t);
    ampx_context ctx = nullptr;
    REQUIRE_MESSAGE(ampx_context_create(reinterpret_cast<const ampx_context_options*>(&only_size),
                                        &ctx) == AMPX_OK,
                    last_error());
    ampx_device_type type = static_cast<ampx_device_type>(0);
    int32_t index = -1;
    CHECK(ampx_context_device(ctx, &type, &index) == AMPX_OK);
    CHECK(type == AMPX_DEVICE_CPU);
    ampx_context_release(ctx);
  }
  SUBCASE("an old struct up to num_threads, with nothing after it in memory") {
    static_assert(sizeof(OldContextOptions) <= offsetof(ampx_context_options, seed),
                  "the old struct must end before the fields it does not know");
    OldContextOptions old{sizeof(OldContextOptions), AMPX_DEVICE_CPU, 0, 1};
    ampx_context ctx = nullptr;
    REQUIRE_MESSAGE(
        ampx_context_create(reinterpret_cast<const ampx_context_options*>(&old), &ctx) == AMPX_OK,
        last_error());
    Tensor t(make_f32(ctx, 4));
    CHECK(ampx_tensor_fill(t, 1.5) == AMPX_OK);
    ampx_context_release(ctx);
  }
  SUBCASE("fields past struct_size are ignored even when they hold invalid values") {
    HookLog log;
    ampx_context_options options = cpu_options();
    options.struct_size = offsetof(ampx_context_options, allocator);
    options.allocator.alloc = hook_alloc;  // alone it would be refused
    options.allocator.user_data = &log;
    options.cuda_stream = &log;  // refused for a CPU context if it were read
    ampx_context ctx = nullptr;
    REQUIRE_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, last_error());
    Tensor t(make_f32(ctx, 16));
    CHECK(log.alloc_calls == 0);  // the default allocator, not the ignored hook
    t.out();
    ampx_context_release(ctx);
  }
  SUBCASE("num_threads past struct_size is ignored") {
    ampx_context_options options = cpu_options();
    options.struct_size = offsetof(ampx_context_options, num_threads);
    options.num_threads = -5;
    ampx_context ctx = nullptr;
    CHECK_MESSAGE(ampx_context_create(&options, &ctx) == AMPX_OK, last_error());
    ampx_context_release(ctx);
  }
}

TEST_CASE("context: invalid device type, negative thread count and negative index") {
  ampx_context ctx = bogus_context();
  // Either side of the two valid values.
  for (int bad_type : {0, 3}) {
    CAPTURE(bad_type);
    ampx_context_options options = cpu_options();
    options.device_type = static_cast<ampx_device_type>(bad_type);
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
                     "device_type");
  }
  for (int32_t threads : {-1, -64, INT32_MIN}) {
    CAPTURE(threads);
    ampx_context_options options = cpu_options();
    options.num_threads = threads;
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
                     "num_threads");
  }
  ampx_context_options options = cpu_options();
  options.device_type = AMPX_DEVICE_CUDA;
  options.device_index = -1;
  CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT,
                   "device_index");
  CHECK(contains(last_error(), "ampx_context_create"));
  CHECK(ctx == bogus_context());
}

TEST_CASE("context: a CUDA device index past the last device is AMPX_ERR_NO_DEVICE") {
  ampx_context_options options = ampx_context_options_default();
  options.device_type = AMPX_DEVICE_CUDA;
  // Without the CUDA backend the count is 0, so index 0 is already missing.
  for (int32_t index : {ampx_cuda_device_count(), ampx_cuda_device_count() + 7, INT32_MAX}) {
    CAPTURE(index);
    options.device_index = index;
    ampx_context ctx = bogus_context();
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_NO_DEVICE,
                     "ampx_context_create");
    CHECK(ctx == bogus_context());
  }
  if (!ampx_has_cuda()) {
    options.device_index = 0;
    ampx_context ctx = bogus_context();
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_NO_DEVICE, "CUDA");
    CHECK(ampx_cuda_device_count() == 0);
  }
}

TEST_CASE("context: setting only one allocator hook is refused") {
  HookLog log;
  ampx_context ctx = bogus_context();
  SUBCASE("alloc without free") {
    ampx_context_options options = cpu_options();
    options.allocator.alloc = hook_alloc;
    options.allocator.user_data = &log;
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT, "allocator");
  }
  SUBCASE("free without alloc") {
    ampx_context_options options = cpu_options();
    options.allocator.free = hook_free;
    options.allocator.user_data = &log;
    CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT, "allocator");
  }
  CHECK(ctx == bogus_context());
  CHECK(log.alloc_calls == 0);
  CHECK(log.frees == 0);
}

TEST_CASE("context: a CUDA stream given for a CPU context is refused") {
  ampx_context_options options = cpu_options();
  int not_a_stream = 0;
  options.cuda_stream = &not_a_stream;
  ampx_context ctx = bogus_context();
  CHECK_FAILS_WITH(ampx_context_create(&options, &ctx), AMPX_ERR_INVALID_ARGUMENT, "cuda_stream");
  CHECK(ctx == bogus_context());
}

TEST_CASE("context: one or several CPU threads give the same conversion results") {
  // Large enough for the CPU backend to split the work between threads.
  const int64_t n = 100003;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 2049) - 1024.0f;
  for (int32_t threads : {1, 3}) {
    CAPTURE(threads);
    Ctx ctx(threads);
    Tensor src, half, back;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 1, &n, values.data(), values.size() * 4,
                                  src.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_cast(src, AMPX_F16, half.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_cast(half, AMPX_F32, back.out()) == AMPX_OK);
    std::vector<float> out(values.size());
    REQUIRE(ampx_tensor_to_host(back, out.data(), out.size() * 4) == AMPX_OK);
    // Integers of magnitude <= 2048 are exact in f16.
    CHECK(out == values);
  }
}

TEST_CASE("context: retain and release count the program's references") {
  ampx_context ctx = test_context();
  REQUIRE(ampx_context_retain(ctx) == AMPX_OK);
  REQUIRE(ampx_context_retain(ctx) == AMPX_OK);

  // A tensor keeps the context object alive so that probing the handle after
  // the last release is well defined.
  Tensor keeper(make_f32(ctx, 8));
  ampx_context_release(ctx);
  ampx_context_release(ctx);
  {
    Tensor t(make_f32(ctx, 2));  // one reference left: still usable
    CHECK(t.handle != nullptr);
  }
  ampx_context_release(ctx);  // the last one
  ampx_tensor t = nullptr;
  int64_t n = 2;
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, 1, &n, &t), AMPX_ERR_STALE_HANDLE,
                   "already released");
  CHECK(t == nullptr);
  ampx_context_release(nullptr);  // a no-op
}

TEST_CASE("context: a handle the program released is stale while tensors keep the context alive") {
  ampx_context ctx = test_context();
  const float values[3] = {1.0f, 2.0f, 3.0f};
  const int64_t n = 3;
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 1, &n, values, sizeof values, &t) == AMPX_OK);
  ampx_context_release(ctx);

  ampx_device_type type;
  int32_t index;
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_tensor other = nullptr;
  CHECK_FAILS_WITH(ampx_context_retain(ctx), AMPX_ERR_STALE_HANDLE, "ampx_context_retain");
  CHECK(contains(last_error(), "already released"));
  CHECK_FAILS_WITH(ampx_context_device(ctx, &type, &index), AMPX_ERR_STALE_HANDLE, "'ctx'");
  CHECK_FAILS_WITH(ampx_context_synchronize(ctx), AMPX_ERR_STALE_HANDLE, "'ctx'");
  CHECK_FAILS_WITH(ampx_memory_stats_get(ctx, &stats), AMPX_ERR_STALE_HANDLE, "'ctx'");
  CHECK_FAILS_WITH(ampx_memory_reset_peak(ctx), AMPX_ERR_STALE_HANDLE, "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, AMPX_F32, 1, &n, &other), AMPX_ERR_STALE_HANDLE, "'ctx'");
  CHECK(other == nullptr);

  // A second release is a double release: reported, not a crash. Set a
  // different last status first so the check sees the release's own one.
  CHECK(ampx_context_create(nullptr, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  ampx_context_release(ctx);
  CHECK(ampx_last_status() == AMPX_ERR_STALE_HANDLE);
  CHECK(contains(last_error(), "ampx_context_release"));

  // The tensor still works and still names its context.
  float back[3] = {};
  CHECK(ampx_tensor_to_host(t, back, sizeof back) == AMPX_OK);
  CHECK(back[2] == 3.0f);
  ampx_context owner = nullptr;
  CHECK(ampx_tensor_context(t, &owner) == AMPX_OK);
  CHECK(owner == ctx);
  ampx_tensor_release(t);  // destroys the context as well
}

TEST_CASE("context: a tensor handle passed as a context is not an ampx_context") {
  Ctx ctx;
  Tensor t(make_f32(ctx, 2));
  const auto fake = reinterpret_cast<ampx_context>(t.handle);
  ampx_tensor other = nullptr;
  int64_t n = 1;
  CHECK_FAILS_WITH(ampx_tensor_empty(fake, AMPX_F32, 1, &n, &other), AMPX_ERR_STALE_HANDLE,
                   "not an ampx_context");
  CHECK_FAILS_WITH(ampx_context_synchronize(fake), AMPX_ERR_STALE_HANDLE, "not an ampx_context");
  CHECK(other == nullptr);
  CHECK(ampx_tensor_fill(t, 0.0) == AMPX_OK);
}

TEST_CASE("context: NULL handles and NULL out arguments are INVALID_ARGUMENT") {
  Ctx ctx;
  ampx_device_type type = static_cast<ampx_device_type>(0);
  int32_t index = -1;
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  CHECK_FAILS_WITH(ampx_context_retain(nullptr), AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_context_device(nullptr, &type, &index), AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_context_device(ctx, nullptr, &index), AMPX_ERR_INVALID_ARGUMENT,
                   "'device_type'");
  CHECK_FAILS_WITH(ampx_context_device(ctx, &type, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "'device_index'");
  CHECK(type == static_cast<ampx_device_type>(0));
  CHECK(index == -1);
  CHECK_FAILS_WITH(ampx_context_synchronize(nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "ampx_context_synchronize");
  CHECK_FAILS_WITH(ampx_memory_stats_get(nullptr, &stats), AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_memory_stats_get(ctx, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'stats'");
  CHECK_FAILS_WITH(ampx_memory_reset_peak(nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "ampx_memory_reset_peak");
}

TEST_CASE("context: memory stats move exactly as tensors are created and released") {
  Ctx ctx;
  const ampx_memory_stats s0 = stats_of(ctx);
  CHECK(s0.struct_size == sizeof(ampx_memory_stats));
  CHECK(s0.current_bytes == 0);
  CHECK(s0.peak_bytes == 0);
  CHECK(s0.allocation_count == 0);

  ampx_tensor a = make_f32(ctx, 100);  // 400 bytes
  const int64_t shape[2] = {10, 20};
  ampx_tensor b = nullptr;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F16, 2, shape, &b) == AMPX_OK);  // 400 bytes
  ampx_tensor c = nullptr;
  REQUIRE(ampx_tensor_cast(a, AMPX_I64, &c) == AMPX_OK);  // 800 bytes

  ampx_memory_stats s = stats_of(ctx);
  CHECK(s.current_bytes == 1600);
  CHECK(s.peak_bytes == 1600);
  CHECK(s.allocation_count == 3);
  CHECK(s.reserved_bytes >= s.current_bytes);
  if (test_device() == AMPX_DEVICE_CPU) CHECK(s.reserved_bytes == 1600);

  // Another reference does not allocate; only the last release frees.
  REQUIRE(ampx_tensor_retain(c) == AMPX_OK);
  ampx_tensor_release(c);
  CHECK(stats_of(ctx).current_bytes == 1600);
  ampx_tensor_release(c);
  s = stats_of(ctx);
  CHECK(s.current_bytes == 800);
  CHECK(s.peak_bytes == 1600);
  CHECK(s.allocation_count == 3);

  // Zero-element tensors own no memory.
  const int64_t empty_shape[2] = {4, 0};
  Tensor z;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 2, empty_shape, z.out()) == AMPX_OK);
  CHECK(stats_of(ctx).current_bytes == 800);

  ampx_tensor_release(a);
  ampx_tensor_release(b);
  s = stats_of(ctx);
  CHECK(s.current_bytes == 0);
  CHECK(s.peak_bytes == 1600);
  CHECK(s.allocation_count == 3);
}

// The CPU allocator keeps blocks of 256 KiB and more for the next request
// of their size (a training step allocates the same sizes every time), at
// most as many bytes as were in use at the peak, and counts them as
// reserved; smaller blocks go back at once.
TEST_CASE("context: the CPU allocator reuses large blocks, keeping at most its peak") {
  if (test_device() != AMPX_DEVICE_CPU) return;
  Ctx ctx;
  const int64_t big = int64_t{1} << 18;  // 1 MiB of f32
  const uint64_t big_bytes = uint64_t{1} << 20;
  ampx_tensor a = make_f32(ctx, big);
  void* a_data = nullptr;
  REQUIRE(ampx_tensor_data(a, &a_data) == AMPX_OK);
  ampx_tensor_release(a);
  ampx_memory_stats s = stats_of(ctx);
  CHECK(s.current_bytes == 0);
  CHECK(s.reserved_bytes == big_bytes);  // kept

  Tensor b(make_f32(ctx, big));
  void* b_data = nullptr;
  REQUIRE(ampx_tensor_data(b, &b_data) == AMPX_OK);
  CHECK(b_data == a_data);  // the kept block again
  s = stats_of(ctx);
  CHECK(s.current_bytes == big_bytes);
  CHECK(s.reserved_bytes == big_bytes);

  // Another size gets a block of its own; releasing both keeps both (2 MiB
  // were in use at the peak).
  ampx_tensor c = make_f32(ctx, big + 16);
  ampx_tensor d = make_f32(ctx, 10);  // small: never kept
  s = stats_of(ctx);
  CHECK(s.reserved_bytes == 2 * big_bytes + 64 + 40);
  ampx_tensor_release(c);
  ampx_tensor_release(d);
  s = stats_of(ctx);
  CHECK(s.current_bytes == big_bytes);
  CHECK(s.reserved_bytes == 2 * big_bytes + 64);
}

TEST_CASE("context: reset_peak sets the peak to the current usage") {
  Ctx ctx;
  ampx_tensor big = make_f32(ctx, 1000);
  Tensor small(make_f32(ctx, 10));
  CHECK(stats_of(ctx).peak_bytes == 4040);
  ampx_tensor_release(big);
  CHECK(stats_of(ctx).peak_bytes == 4040);
  REQUIRE(ampx_memory_reset_peak(ctx) == AMPX_OK);
  ampx_memory_stats s = stats_of(ctx);
  CHECK(s.peak_bytes == 40);
  CHECK(s.current_bytes == 40);
  CHECK(s.allocation_count == 2);  // not a peak: untouched
  {
    Tensor more(make_f32(ctx, 5));
    CHECK(stats_of(ctx).peak_bytes == 60);
  }
  CHECK(stats_of(ctx).peak_bytes == 60);
  CHECK(stats_of(ctx).current_bytes == 40);
}

TEST_CASE("context: a short ampx_memory_stats gets only the fields within its struct_size") {
  Ctx ctx;
  Tensor t(make_f32(ctx, 25));
  const uint64_t untouched = 0xdeadbeefcafef00dull;

  ampx_memory_stats s{};
  s.struct_size = offsetof(ampx_memory_stats, allocation_count);
  s.current_bytes = s.peak_bytes = s.allocation_count = s.reserved_bytes = untouched;
  REQUIRE(ampx_memory_stats_get(ctx, &s) == AMPX_OK);
  CHECK(s.struct_size == offsetof(ampx_memory_stats, allocation_count));
  CHECK(s.current_bytes == 100);
  CHECK(s.peak_bytes == 100);
  CHECK(s.allocation_count == untouched);
  CHECK(s.reserved_bytes == untouched);

  // Only struct_size itself: nothing else is written.
  ampx_memory_stats tiny{};
  tiny.struct_size = sizeof(size_t);
  tiny.current_bytes = untouched;
  REQUIRE(ampx_memory_stats_get(ctx, &tiny) == AMPX_OK);
  CHECK(tiny.struct_size == sizeof(size_t));
  CHECK(tiny.current_bytes == untouched);

  for (size_t size : {size_t{0}, sizeof(size_t) - 1}) {
    CAPTURE(size);
    ampx_memory_stats bad{};
    bad.struct_size = size;
    bad.current_bytes = untouched;
    CHECK_FAILS_WITH(ampx_memory_stats_get(ctx, &bad), AMPX_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK(bad.current_bytes == untouched);
    CHECK(bad.struct_size == size);
  }
}

TEST_CASE("context: allocator hooks see every allocation freed exactly once with its size") {
  if (test_device() != AMPX_DEVICE_CPU) {
    MESSAGE("host-memory allocator hooks only apply to a CPU context");
    return;
  }
  HookLog log;
  ampx_context ctx = hooked_context(log);
  ampx_tensor a = make_f32(ctx, 10);
  ampx_tensor b = nullptr;
  REQUIRE(ampx_tensor_cast(a, AMPX_F16, &b) == AMPX_OK);
  const int64_t empty = 0;
  ampx_tensor z = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_I64, 1, &empty, &z) == AMPX_OK);
  CHECK(log.alloc_calls == 2);  // a zero-byte tensor needs no memory
  REQUIRE(log.live.size() == 2);
  CHECK(log.live.begin()->second + std::next(log.live.begin())->second == 60);
  for (size_t alignment : log.alignments) {
    CAPTURE(alignment);
    CHECK(alignment >= 4);
    CHECK(alignment <= 256);
    CHECK((alignment & (alignment - 1)) == 0);
  }
  void* data = nullptr;
  REQUIRE(ampx_tensor_data(a, &data) == AMPX_OK);
  CHECK(log.live.count(data) == 1);
  CHECK(stats_of(ctx).reserved_bytes == 60);

  // Releases in any order, the context first: memory goes back only when
  // the tensors that use it go.
  ampx_context_release(ctx);
  CHECK(log.frees == 0);
  ampx_tensor_release(a);
  CHECK(log.frees == 1);
  ampx_tensor_release(z);
  ampx_tensor_release(b);
  CHECK(log.frees == 2);
  CHECK(log.bad_frees == 0);
  CHECK(log.live.empty());
}

TEST_CASE("context: an allocation hook failing the Nth call gives OOM and changes nothing") {
  if (test_device() != AMPX_DEVICE_CPU) {
    MESSAGE("host-memory allocator hooks only apply to a CPU context");
    return;
  }
  HookLog log;
  ampx_context ctx = hooked_context(log);
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const int64_t shape[2] = {2, 3};
  Tensor src;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, values, sizeof values, src.out()) ==
          AMPX_OK);
  REQUIRE(ampx_tensor_set_name(src, "w") == AMPX_OK);
  const ampx_tensor sentinel = reinterpret_cast<ampx_tensor>(uintptr_t{0x5678});

  struct Attempt {
    const char* function;
    const char* bytes;
    std::function<ampx_status(ampx_tensor*)> call;
  };
  const std::vector<Attempt> attempts = {
      {"ampx_tensor_cast", "12 bytes",
       [&](ampx_tensor* out) { return ampx_tensor_cast(src, AMPX_BF16, out); }},
      {"ampx_tensor_empty", "48 bytes",
       [&](ampx_tensor* out) { return ampx_tensor_empty(ctx, AMPX_I64, 2, shape, out); }},
      {"ampx_tensor_zeros", "24 bytes",
       [&](ampx_tensor* out) { return ampx_tensor_zeros(ctx, AMPX_I32, 2, shape, out); }},
      {"ampx_tensor_from_host", "24 bytes",
       [&](ampx_tensor* out) {
         return ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, values, sizeof values, out);
       }},
  };
  for (const Attempt& attempt : attempts) {
    const std::string function = attempt.function;
    CAPTURE(function);
    const ampx_memory_stats before = stats_of(ctx);
    log.fail_call = log.alloc_calls + 1;
    ampx_tensor out = sentinel;
    CHECK_FAILS_WITH(attempt.call(&out), AMPX_ERR_OUT_OF_MEMORY, attempt.function);
    CHECK_MESSAGE(contains(last_error(), attempt.bytes), last_error());
    CHECK(out == sentinel);
    const ampx_memory_stats after = stats_of(ctx);
    CHECK(after.current_bytes == before.current_bytes);
    CHECK(after.peak_bytes == before.peak_bytes);
    CHECK(after.allocation_count == before.allocation_count);
    CHECK(after.reserved_bytes == before.reserved_bytes);
    CHECK(log.live.size() == 1);

    // The next attempt, with memory available again, succeeds.
    Tensor ok;
    CHECK_MESSAGE(attempt.call(ok.out()) == AMPX_OK, last_error());
  }
  // The source was not touched by any of it.
  float back[6] = {};
  REQUIRE(ampx_tensor_to_host(src, back, sizeof back) == AMPX_OK);
  CHECK(std::memcmp(back, values, sizeof back) == 0);
  const char* name = nullptr;
  REQUIRE(ampx_tensor_name(src, &name) == AMPX_OK);
  CHECK(std::string(name) == "w");

  src.out();
  ampx_context_release(ctx);
  CHECK(log.bad_frees == 0);
  CHECK(log.live.empty());
  // Every successful allocation (the source and one per attempt) was freed.
  CHECK(log.frees == 1 + static_cast<int>(attempts.size()));
}

TEST_CASE("context: memory a hook returns misaligned is refused and handed back") {
  if (test_device() != AMPX_DEVICE_CPU) {
    MESSAGE("host-memory allocator hooks only apply to a CPU context");
    return;
  }
  HookLog log;
  log.misalign = true;
  ampx_context ctx = hooked_context(log);
  const int64_t n = 8;
  ampx_tensor t = nullptr;
  const ampx_status status = ampx_tensor_zeros(ctx, AMPX_F32, 1, &n, &t);
  CHECK(status != AMPX_OK);
  CHECK(ampx_last_status() == status);
  CHECK_MESSAGE(contains(last_error(), "ampx_tensor_zeros"), last_error());
  CHECK_MESSAGE(contains(last_error(), "aligned"), last_error());
  CHECK(t == nullptr);
  CHECK(log.alloc_calls == 1);
  CHECK(log.frees == 1);
  CHECK(log.bad_frees == 0);
  CHECK(log.live.empty());
  const ampx_memory_stats s = stats_of(ctx);
  CHECK(s.current_bytes == 0);
  CHECK(s.allocation_count == 0);
  CHECK(s.reserved_bytes == 0);
  ampx_context_release(ctx);
}

TEST_CASE("context: separate contexts work concurrently on several threads") {
  constexpr int kThreads = 6;
  constexpr int kRounds = 20;
  std::vector<std::string> failures(kThreads);
  std::vector<ampx_tensor> handed_over(kThreads, nullptr);

  auto worker = [&](int id) {
    std::string& failure = failures[static_cast<size_t>(id)];
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok && failure.empty()) failure = what + " (last error: " + ampx_last_error() + ")";
    };
    ampx_context_options options = ampx_context_options_default();
    options.device_type = test_device();
    options.num_threads = 1 + id % 2;
    ampx_context ctx = nullptr;
    if (ampx_context_create(&options, &ctx) != AMPX_OK) {
      expect(false, "create");
      return;
    }
    const int64_t n = 257;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(id * 1000 + i);
    for (int round = 0; round < kRounds && failure.empty(); ++round) {
      ampx_tensor src = nullptr, ints = nullptr, back = nullptr;
      expect(ampx_tensor_from_host(ctx, AMPX_F32, 1, &n, values.data(), values.size() * 4, &src) ==
                 AMPX_OK, "from_host");
      expect(ampx_tensor_cast(src, AMPX_I32, &ints) == AMPX_OK, "cast");
      expect(ampx_tensor_empty(ctx, AMPX_F32, 1, &n, &back) == AMPX_OK, "empty");
      expect(ampx_tensor_copy(back, ints) == AMPX_OK, "copy");
      std::vector<float> out(values.size());
      expect(ampx_tensor_to_host(back, out.data(), out.size() * 4) == AMPX_OK, "to_host");
      expect(out == values, "values after the round trip");

      // Each thread's last error is its own.
      const size_t wrong = 1000 + static_cast<size_t>(id);
      expect(ampx_tensor_copy_from_host(src, values.data(), wrong) == AMPX_ERR_SHAPE, "bad copy");
      expect(contains(ampx_last_error(), std::to_string(wrong) + " bytes"), "own message");
      ampx_tensor_release(ints);
      ampx_tensor_release(back);
      if (round + 1 == kRounds) handed_over[static_cast<size_t>(id)] = src;
      else ampx_tensor_release(src);
    }
    ampx_memory_stats s = AMPX_MEMORY_STATS_INIT;
    expect(ampx_memory_stats_get(ctx, &s) == AMPX_OK, "stats");
    expect(s.current_bytes == static_cast<uint64_t>(n) * 4, "only the handed-over tensor is live");
    ampx_context_release(ctx);
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(worker, id);
  for (std::thread& thread : threads) thread.join();
  for (int id = 0; id < kThreads; ++id) {
    CAPTURE(id);
    CHECK_MESSAGE(failures[static_cast<size_t>(id)].empty(), failures[static_cast<size_t>(id)]);
  }
  // Tensors made on the worker threads are usable and releasable here; the
  // last release also destroys each thread's context.
  for (int id = 0; id < kThreads; ++id) {
    ampx_tensor t = handed_over[static_cast<size_t>(id)];
    if (!t) continue;
    std::vector<float> all(257);
    CHECK(ampx_tensor_to_host(t, all.data(), all.size() * 4) == AMPX_OK);
    CHECK(all[0] == static_cast<float>(id * 1000));
    CHECK(all[256] == static_cast<float>(id * 1000 + 256));
    ampx_tensor_release(t);
  }
}
