// api_core.cpp -- versions, statuses, errors, dtypes, contexts.
#include <cstring>
#include <string>

#include "api/guard.h"
#include "core/backend.h"

namespace ampx::impl {
namespace {

// A fixed buffer, so that recording an error never allocates: the error
// may be that memory is exhausted.
struct LastError {
  ampx_status status = AMPX_OK;
  char message[kLastErrorBytes] = {};
  uint64_t count = 0;  // errors set on this thread, see thread_error_count
};

LastError& last_error() {
  thread_local LastError error;
  return error;
}

// ampx_context_options as it was before ampx_allocator gained its
// struct_size (ampx 0.1.0): programs built against that header pass this
// layout, with a struct_size of at most its size.
struct LegacyAllocator {
  void* (*alloc)(void* user_data, size_t bytes, size_t alignment);
  void (*free)(void* user_data, void* ptr, size_t bytes);
  void* user_data;
};
struct LegacyContextOptions {
  size_t struct_size;
  ampx_device_type device_type;
  int32_t device_index;
  int32_t num_threads;
  uint64_t seed;
  LegacyAllocator allocator;
  void* cuda_stream;
};
static_assert(sizeof(LegacyContextOptions) < sizeof(ampx_context_options),
              "the layouts must be told apart by struct_size");

ampx_context_options context_options_arg(const ampx_context_options* given) {
  const ampx_context_options defaults = ampx_context_options_default();
  if (!given) return defaults;
  if (given->struct_size < sizeof(size_t))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'options' has struct_size ", given->struct_size,
         "; set it to sizeof(ampx_context_options) (or use AMPX_CONTEXT_OPTIONS_INIT)");
  if (given->struct_size <= sizeof(LegacyContextOptions)) {
    LegacyContextOptions legacy_defaults{};
    legacy_defaults.struct_size = sizeof(LegacyContextOptions);
    legacy_defaults.device_type = defaults.device_type;
    legacy_defaults.device_index = defaults.device_index;
    legacy_defaults.num_threads = defaults.num_threads;
    legacy_defaults.seed = defaults.seed;
    legacy_defaults.cuda_stream = defaults.cuda_stream;
    const LegacyContextOptions legacy = read_options(
        reinterpret_cast<const LegacyContextOptions*>(given), legacy_defaults, "options");
    ampx_context_options options = defaults;
    options.device_type = legacy.device_type;
    options.device_index = legacy.device_index;
    options.num_threads = legacy.num_threads;
    options.seed = legacy.seed;
    options.allocator.alloc = legacy.allocator.alloc;
    options.allocator.free = legacy.allocator.free;
    options.allocator.user_data = legacy.allocator.user_data;
    options.cuda_stream = legacy.cuda_stream;
    return options;
  }
  if (given->struct_size < sizeof(ampx_context_options))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'options' has struct_size ", given->struct_size,
         ", between the legacy layout (at most ", sizeof(LegacyContextOptions),
         " bytes) and the current one (", sizeof(ampx_context_options),
         "); set it to sizeof(ampx_context_options) (or use AMPX_CONTEXT_OPTIONS_INIT)");
  ampx_context_options options = read_options(given, defaults, "options");
  const ampx_allocator& a = given->allocator;
  const bool all_zero = a.struct_size == 0 && !a.alloc && !a.free && !a.user_data;
  if (all_zero) {
    options.allocator = defaults.allocator;
  } else if (a.struct_size < sizeof(ampx_allocator)) {
    fail(AMPX_ERR_INVALID_ARGUMENT, "options->allocator.struct_size is ", a.struct_size,
         "; set it to sizeof(ampx_allocator) (or use AMPX_ALLOCATOR_INIT)");
  }
  options.allocator.struct_size = sizeof(ampx_allocator);
  return options;
}

}  // namespace

uint64_t thread_error_count() noexcept { return last_error().count; }

void set_last_error(ampx_status status, const char* function, const char* text,
                    const char* more) noexcept {
  LastError& error = last_error();
  error.status = status;
  ++error.count;
  size_t used = 0;
  // Pieces are appended while they fit; a cut message ends in "...".
  auto append = [&](const char* piece) {
    for (; piece && *piece && used + 1 < kLastErrorBytes; ++piece) error.message[used++] = *piece;
    return !piece || *piece == 0;
  };
  const bool whole = (!function || (append(function) && append(": "))) && append(text) &&
                     append(more);
  if (!whole) {
    used = kLastErrorBytes - 1;
    std::memcpy(error.message + used - 3, "...", 3);
  }
  error.message[used] = 0;
}

}  // namespace ampx::impl

using namespace ampx::impl;

#define AMPX_STRINGIFY2(x) #x
#define AMPX_STRINGIFY(x) AMPX_STRINGIFY2(x)

extern "C" {

uint32_t ampx_version(void) { return AMPX_VERSION_NUMBER; }

const char* ampx_version_string(void) {
  return AMPX_STRINGIFY(AMPX_VERSION_MAJOR) "." AMPX_STRINGIFY(AMPX_VERSION_MINOR) "." AMPX_STRINGIFY(
      AMPX_VERSION_PATCH);
}

int ampx_has_cuda(void) {
#if defined(AMPX_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

const char* ampx_status_string(ampx_status status) {
  switch (status) {
    case AMPX_OK: return "AMPX_OK";
    case AMPX_ERR_INVALID_ARGUMENT: return "AMPX_ERR_INVALID_ARGUMENT";
    case AMPX_ERR_SHAPE: return "AMPX_ERR_SHAPE";
    case AMPX_ERR_DTYPE: return "AMPX_ERR_DTYPE";
    case AMPX_ERR_DEVICE: return "AMPX_ERR_DEVICE";
    case AMPX_ERR_OUT_OF_MEMORY: return "AMPX_ERR_OUT_OF_MEMORY";
    case AMPX_ERR_NO_DEVICE: return "AMPX_ERR_NO_DEVICE";
    case AMPX_ERR_NOT_SUPPORTED: return "AMPX_ERR_NOT_SUPPORTED";
    case AMPX_ERR_ORDER: return "AMPX_ERR_ORDER";
    case AMPX_ERR_STALE_HANDLE: return "AMPX_ERR_STALE_HANDLE";
    case AMPX_ERR_IO: return "AMPX_ERR_IO";
    case AMPX_ERR_CORRUPT: return "AMPX_ERR_CORRUPT";
    case AMPX_ERR_INTERNAL: return "AMPX_ERR_INTERNAL";
    case AMPX_STATUS_MIN_ENUM:
    case AMPX_STATUS_MAX_ENUM: break;
  }
  return "AMPX_UNKNOWN_STATUS";
}

const char* ampx_last_error(void) { return last_error().message; }

ampx_status ampx_last_status(void) { return last_error().status; }

ampx_status ampx_set_error(ampx_status status, const char* message) {
  set_last_error(status, nullptr, message);
  return status;
}

size_t ampx_dtype_size(ampx_dtype dtype) {
  return is_valid_dtype(dtype) ? dtype_size(static_cast<DType>(dtype)) : 0;
}

const char* ampx_dtype_name(ampx_dtype dtype) {
  return is_valid_dtype(dtype) ? dtype_name(static_cast<DType>(dtype)) : "invalid";
}

int32_t ampx_cuda_device_count(void) {
  try {
    return cuda_device_count();
  } catch (...) {
    return 0;
  }
}

ampx_context_options ampx_context_options_default(void) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  return options;
}

ampx_status ampx_context_create(const ampx_context_options* options, ampx_context* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    *out = to_handle(DeviceContext::create(context_options_arg(options)));
  });
}

void ampx_context_release(ampx_context ctx) {
  if (!ctx) return;
  guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    if (!c.release_handle())
      fail(AMPX_ERR_STALE_HANDLE, "argument 'ctx' was released more times than it was retained");
  });
}

ampx_status ampx_context_retain(ampx_context ctx) {
  return guard(__func__, [&] { context_arg(ctx, "ctx").retain_handle(); });
}

ampx_status ampx_context_device(ampx_context ctx, ampx_device_type* device_type,
                                int32_t* device_index) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(device_type, "device_type");
    require_pointer(device_index, "device_index");
    *device_type = c.backend().device_type();
    *device_index = c.backend().device_index();
  });
}

ampx_status ampx_context_synchronize(ampx_context ctx) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    c.raise_index_errors();
    c.backend().synchronize();
  });
}

ampx_status ampx_memory_stats_get(ampx_context ctx, ampx_memory_stats* stats) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(stats, "stats");
    if (stats->struct_size < sizeof(size_t))
      fail(AMPX_ERR_INVALID_ARGUMENT, "stats->struct_size is ", stats->struct_size,
           "; set it to sizeof(ampx_memory_stats) (or use AMPX_MEMORY_STATS_INIT)");
    const MemoryStats s = c.memory_stats();
    ampx_memory_stats full = AMPX_MEMORY_STATS_INIT;
    full.current_bytes = s.current_bytes;
    full.peak_bytes = s.peak_bytes;
    full.allocation_count = s.allocation_count;
    full.reserved_bytes = s.reserved_bytes;
    const size_t given = stats->struct_size;
    const size_t known = given < sizeof full ? given : sizeof full;
    std::memcpy(static_cast<void*>(stats), &full, known);
    stats->struct_size = given;
  });
}

ampx_status ampx_memory_reset_peak(ampx_context ctx) {
  return guard(__func__, [&] { context_arg(ctx, "ctx").reset_peak(); });
}

ampx_status ampx_context_set_tf32(ampx_context ctx, int32_t allowed, int32_t* previous) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    if (previous) *previous = c.tf32() ? 1 : 0;
    c.set_tf32(allowed != 0);
  });
}

}  // extern "C"
