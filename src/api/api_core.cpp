// api_core.cpp -- versions, statuses, errors, dtypes, contexts.
#include <string>

#include "api/guard.h"
#include "core/backend.h"

namespace ampx {
namespace {

struct LastError {
  ampx_status status = AMPX_OK;
  std::string message;
};

LastError& last_error() {
  thread_local LastError error;
  return error;
}

}  // namespace

void set_last_error(ampx_status status, const std::string& message) noexcept {
  LastError& error = last_error();
  error.status = status;
  try {
    error.message = message;
  } catch (...) {
    error.message.clear();  // no memory for the text; the status still tells
  }
}

}  // namespace ampx

using namespace ampx;

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
    case AMPX_STATUS_MAX_ENUM: break;
  }
  return "AMPX_UNKNOWN_STATUS";
}

const char* ampx_last_error(void) { return last_error().message.c_str(); }

ampx_status ampx_last_status(void) { return last_error().status; }

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
    const ampx_context_options merged =
        read_options(options, ampx_context_options_default(), "options");
    *out = to_handle(Context::create(merged));
  });
}

void ampx_context_release(ampx_context ctx) {
  if (!ctx) return;
  guard(__func__, [&] {
    Context& c = context_arg(ctx, "ctx");
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
    Context& c = context_arg(ctx, "ctx");
    require_pointer(device_type, "device_type");
    require_pointer(device_index, "device_index");
    *device_type = c.backend().device_type();
    *device_index = c.backend().device_index();
  });
}

ampx_status ampx_context_synchronize(ampx_context ctx) {
  return guard(__func__, [&] {
    Context& c = context_arg(ctx, "ctx");
    c.raise_index_errors();
    c.backend().synchronize();
  });
}

ampx_status ampx_memory_stats_get(ampx_context ctx, ampx_memory_stats* stats) {
  return guard(__func__, [&] {
    Context& c = context_arg(ctx, "ctx");
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

}  // extern "C"
