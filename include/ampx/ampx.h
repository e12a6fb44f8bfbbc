/*
 * ampx.h -- the public C API of ampx, an embeddable mixed-precision training
 * library.
 *
 * This header is the whole contract. It is C99 (it also compiles as C++), and
 * it exposes no C++ or CUDA types. Every symbol it declares starts with
 * ampx_ / AMPX_.
 *
 * Contents
 *   1. Versions
 *   2. Status codes and errors
 *   3. Data types and devices
 *   4. Contexts (device, threads, allocator hooks, memory statistics)
 *   5. Tensors (create, wrap, copy, cast, fill, query, DLPack)
 *
 * General rules (they hold for every function unless its comment says
 * otherwise):
 *
 *   Status.    Every fallible function returns an ampx_status. AMPX_OK is 0;
 *              every other value is an error. A failed call leaves every
 *              object it was given exactly as it was, and sets the calling
 *              thread's last error message (ampx_last_error()). No function
 *              throws, aborts or longjmps across this boundary.
 *   Out args.  Output pointers are written only on success.
 *   Handles.   Handles are opaque, typed pointers. NULL is never a valid
 *              handle. A handle used after its last release is detected on a
 *              best-effort basis (AMPX_ERR_STALE_HANDLE) -- never rely on it.
 *   Threads.   A context and every object made from it may be used by one
 *              thread at a time. Different contexts are fully independent
 *              and may be used from different threads at once. The release
 *              functions (ampx_tensor_release, ampx_context_release) may be
 *              called from any thread, in any order, e.g. from a garbage
 *              collector's finalizer, provided no other thread is using the
 *              same object at that moment.
 *   Options.   Option structs start with `size_t struct_size`. Initialise
 *              them with their AMPX_..._OPTIONS_INIT macro (or the matching
 *              _default() function); fields are only ever appended, so a
 *              program compiled against an older header keeps working and
 *              fields it does not know read as their defaults.
 *   Sync.      Nothing synchronizes with a device unless its comment says so.
 */
#ifndef AMPX_H
#define AMPX_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(AMPX_BUILDING_LIBRARY)
#    define AMPX_API __declspec(dllexport)
#  else
#    define AMPX_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define AMPX_API __attribute__((visibility("default")))
#else
#  define AMPX_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* 1. Versions                                                                */
/* ========================================================================== */

#define AMPX_VERSION_MAJOR 0
#define AMPX_VERSION_MINOR 1
#define AMPX_VERSION_PATCH 0
/** The version as one number: major * 10000 + minor * 100 + patch. */
#define AMPX_VERSION_NUMBER \
  (AMPX_VERSION_MAJOR * 10000 + AMPX_VERSION_MINOR * 100 + AMPX_VERSION_PATCH)

/** The version of the library loaded at run time, as AMPX_VERSION_NUMBER
 *  computes it. Compare with AMPX_VERSION_NUMBER to detect a header/library
 *  mismatch. Thread-safe. */
AMPX_API uint32_t ampx_version(void);

/** The run-time version as a static string, e.g. "0.1.0". Never NULL; owned
 *  by the library. Thread-safe. */
AMPX_API const char *ampx_version_string(void);

/** Non-zero when the library was built with the CUDA backend (whether or not
 *  a device is present). Thread-safe. */
AMPX_API int ampx_has_cuda(void);

/* ========================================================================== */
/* 2. Status codes and errors                                                 */
/* ========================================================================== */

/** Status codes. The numbers are pinned: they never change and are never
 *  reused for another meaning. */
typedef enum ampx_status {
  AMPX_OK = 0,
  AMPX_ERR_INVALID_ARGUMENT = 1, /**< a NULL pointer, a value out of range */
  AMPX_ERR_SHAPE = 2,            /**< shapes, element or byte counts disagree */
  AMPX_ERR_DTYPE = 3,            /**< a data type not allowed here */
  AMPX_ERR_DEVICE = 4,           /**< objects of different contexts/devices mixed,
                                      or a device runtime failure */
  AMPX_ERR_OUT_OF_MEMORY = 5,    /**< an allocation failed; nothing was changed */
  AMPX_ERR_NO_DEVICE = 6,        /**< the requested device does not exist or the
                                      library was built without its backend */
  AMPX_ERR_NOT_SUPPORTED = 7,    /**< valid, but not implemented for this case */
  AMPX_ERR_ORDER = 8,            /**< calls made in an order that is not allowed */
  AMPX_ERR_STALE_HANDLE = 9,     /**< a handle that was released or is not of the
                                      expected type */
  AMPX_ERR_IO = 10,              /**< a file could not be read or written */
  AMPX_ERR_CORRUPT = 11,         /**< data that fails validation */
  AMPX_ERR_INTERNAL = 12         /**< a bug in ampx; please report it */
} ampx_status;

/** A short static English name for a status ("AMPX_ERR_SHAPE"), or
 *  "AMPX_UNKNOWN_STATUS" for a value not listed above. Never NULL.
 *  Thread-safe. */
AMPX_API const char *ampx_status_string(ampx_status status);

/** The message of the most recent failed call made on the calling thread:
 *  which function failed, which argument, and the shapes/dtypes involved.
 *  Successful calls do not clear it. Returns "" when no call has failed on
 *  this thread. The string is owned by the library and stays valid until the
 *  next failing ampx call on the same thread. Thread-safe (per thread). */
AMPX_API const char *ampx_last_error(void);

/** The status of the most recent failed call on the calling thread (AMPX_OK
 *  if none has failed). Thread-safe (per thread). */
AMPX_API ampx_status ampx_last_status(void);

/* ========================================================================== */
/* 3. Data types and devices                                                  */
/* ========================================================================== */

/** Element types. The numbers are pinned; 0 is never a valid type, so a
 *  zero-initialised field is caught. */
typedef enum ampx_dtype {
  AMPX_F32 = 1,  /**< IEEE 754 binary32 */
  AMPX_F16 = 2,  /**< IEEE 754 binary16 (max 65504) */
  AMPX_BF16 = 3, /**< bfloat16: fp32's exponent, 8 significant bits */
  AMPX_I32 = 4,
  AMPX_I64 = 5
} ampx_dtype;

/** Size in bytes of one element of `dtype`, or 0 for an invalid value.
 *  Thread-safe. */
AMPX_API size_t ampx_dtype_size(ampx_dtype dtype);

/** Static name of a dtype ("f32", "f16", "bf16", "i32", "i64"), or
 *  "invalid". Never NULL. Thread-safe. */
AMPX_API const char *ampx_dtype_name(ampx_dtype dtype);

/** Device kinds. Numbers pinned. */
typedef enum ampx_device_type {
  AMPX_DEVICE_CPU = 1,
  AMPX_DEVICE_CUDA = 2
} ampx_device_type;

/** Number of CUDA devices usable by ampx: 0 when the library has no CUDA
 *  backend or no device/driver is present. Never fails. Thread-safe. */
AMPX_API int32_t ampx_cuda_device_count(void);

/* ========================================================================== */
/* 4. Contexts                                                                */
/* ========================================================================== */

/** A context owns one device (the CPU, or one CUDA device with its stream),
 *  an allocator and memory statistics. Every tensor belongs to one context
 *  and keeps it alive: the context is destroyed when the program has
 *  released it AND every tensor made from it is released. */
typedef struct ampx_context_s *ampx_context;

/** A tensor: a dense, contiguous, row-major n-dimensional array (at most
 *  AMPX_MAX_DIMS dimensions) that lives on its context's device. Tensors are
 *  reference counted (ampx_tensor_retain / ampx_tensor_release). */
typedef struct ampx_tensor_s *ampx_tensor;

#define AMPX_MAX_DIMS 8

/** Allocation hooks for a context's tensor memory (host memory for a CPU
 *  context, device memory for a CUDA context). `alloc` returns memory
 *  aligned to at least `alignment` bytes (a power of two, at most 256), or
 *  NULL when it cannot -- ampx then fails the calling function with
 *  AMPX_ERR_OUT_OF_MEMORY and changes nothing. `free` receives exactly the
 *  pointer and size of an earlier alloc. Both may be called from whichever
 *  thread releases a tensor. Leave both NULL for ampx's own allocator; set
 *  both or neither. */
typedef struct ampx_allocator {
  void *(*alloc)(void *user_data, size_t bytes, size_t alignment);
  void (*free)(void *user_data, void *ptr, size_t bytes);
  void *user_data; /**< passed back to alloc and free; borrowed, must outlive
                        the context */
} ampx_allocator;

/** Options for ampx_context_create. */
typedef struct ampx_context_options {
  size_t struct_size;           /**< sizeof(ampx_context_options) */
  ampx_device_type device_type; /**< default AMPX_DEVICE_CPU */
  int32_t device_index;         /**< CUDA device ordinal; default 0 */
  int32_t num_threads;          /**< CPU worker threads; 0 (default) = one per
                                     hardware thread; 1 = no worker threads */
  uint64_t seed;                /**< seed of the context's random streams;
                                     default 0 */
  ampx_allocator allocator;     /**< default: ampx's allocator */
  void *cuda_stream;            /**< a cudaStream_t to adopt (borrowed; must
                                     outlive the context); NULL (default):
                                     the context creates its own stream.
                                     Must be NULL for a CPU context. */
} ampx_context_options;

#define AMPX_CONTEXT_OPTIONS_INIT \
  { sizeof(ampx_context_options), AMPX_DEVICE_CPU, 0, 0, 0, {NULL, NULL, NULL}, NULL }

/** Returns the default options (the same values as the INIT macro), for
 *  languages that cannot use macros. Thread-safe. */
AMPX_API ampx_context_options ampx_context_options_default(void);

/** Creates a context. `options` may be NULL for the defaults (a CPU
 *  context). On success *out holds a new context owned by the caller (release
 *  it with ampx_context_release).
 *  Errors: AMPX_ERR_INVALID_ARGUMENT (out NULL, struct_size too small, bad
 *  device type, negative thread count, only one allocator hook set, a stream
 *  given for the CPU); AMPX_ERR_NO_DEVICE (CUDA requested but the library was
 *  built without CUDA, no device is present, or device_index is out of
 *  range); AMPX_ERR_OUT_OF_MEMORY. Thread-safe. */
AMPX_API ampx_status ampx_context_create(const ampx_context_options *options,
                                         ampx_context *out);

/** Drops the caller's reference to `ctx`. The context is destroyed once its
 *  tensors are released too. NULL is a no-op. Any thread (see the rules at
 *  the top). */
AMPX_API void ampx_context_release(ampx_context ctx);

/** Adds a reference to `ctx` (released with ampx_context_release). */
AMPX_API ampx_status ampx_context_retain(ampx_context ctx);

/** The device of a context. */
AMPX_API ampx_status ampx_context_device(ampx_context ctx,
                                         ampx_device_type *device_type,
                                         int32_t *device_index);

/** Blocks until all work ampx has enqueued on the context's device is done
 *  (a no-op on the CPU). Reports a device failure as AMPX_ERR_DEVICE. */
AMPX_API ampx_status ampx_context_synchronize(ampx_context ctx);

/** Memory statistics of a context's tensor storage (bytes the tensors own,
 *  not the allocator's cache). */
typedef struct ampx_memory_stats {
  size_t struct_size;        /**< set by the caller: sizeof(ampx_memory_stats) */
  uint64_t current_bytes;    /**< bytes held by live tensors */
  uint64_t peak_bytes;       /**< maximum of current_bytes since creation or
                                  the last ampx_memory_reset_peak */
  uint64_t allocation_count; /**< allocations made since creation */
  uint64_t reserved_bytes;   /**< bytes the allocator holds from the system,
                                  cache included (>= current_bytes) */
} ampx_memory_stats;

#define AMPX_MEMORY_STATS_INIT { sizeof(ampx_memory_stats), 0, 0, 0, 0 }

/** Fills *stats (whose struct_size the caller sets) with the context's
 *  memory statistics. Fields beyond struct_size are not written. */
AMPX_API ampx_status ampx_memory_stats_get(ampx_context ctx,
                                           ampx_memory_stats *stats);

/** Sets peak_bytes to current_bytes. */
AMPX_API ampx_status ampx_memory_reset_peak(ampx_context ctx);

/* ========================================================================== */
/* 5. Tensors                                                                 */
/* ========================================================================== */

/* Shapes are given as `ndim` int64 extents (0 <= ndim <= AMPX_MAX_DIMS; an
 * extent may be 0; ndim 0 is a scalar with one element). A shape whose byte
 * size overflows is AMPX_ERR_SHAPE. Every create function returns a tensor
 * with one reference, owned by the caller. */

/** Creates a tensor with uninitialised contents.
 *  Errors: INVALID_ARGUMENT (NULL ctx/out, shape NULL with ndim > 0),
 *  SHAPE (ndim or an extent out of range), DTYPE, OUT_OF_MEMORY,
 *  STALE_HANDLE. */
AMPX_API ampx_status ampx_tensor_empty(ampx_context ctx, ampx_dtype dtype,
                                       int32_t ndim, const int64_t *shape,
                                       ampx_tensor *out);

/** Creates a tensor filled with zeros. Errors as ampx_tensor_empty. */
AMPX_API ampx_status ampx_tensor_zeros(ampx_context ctx, ampx_dtype dtype,
                                       int32_t ndim, const int64_t *shape,
                                       ampx_tensor *out);

/** Creates a tensor and copies `bytes` bytes of host memory into it; `bytes`
 *  must equal numel * ampx_dtype_size(dtype) (else AMPX_ERR_SHAPE). `data` is
 *  borrowed for the duration of the call only. On a CUDA context the copy has
 *  completed when the call returns. */
AMPX_API ampx_status ampx_tensor_from_host(ampx_context ctx, ampx_dtype dtype,
                                           int32_t ndim, const int64_t *shape,
                                           const void *data, size_t bytes,
                                           ampx_tensor *out);

/** Called when a wrapped tensor's memory is no longer used by ampx. */
typedef void (*ampx_deleter)(void *user_data, void *data);

/** Wraps memory the caller owns as a tensor, without copying: host memory
 *  for a CPU context, device memory of the context's device for a CUDA
 *  context. `data` must hold `bytes` bytes (= numel * element size, else
 *  AMPX_ERR_SHAPE) and be aligned to the element size. When the tensor's
 *  last reference is released, `deleter(deleter_user_data, data)` is called
 *  if `deleter` is not NULL; otherwise the memory must simply outlive the
 *  tensor. If this call fails the deleter is NOT called: the memory stays
 *  the caller's. Wrapped memory does not count in ampx_memory_stats. */
AMPX_API ampx_status ampx_tensor_wrap(ampx_context ctx, ampx_dtype dtype,
                                      int32_t ndim, const int64_t *shape,
                                      void *data, size_t bytes,
                                      ampx_deleter deleter,
                                      void *deleter_user_data,
                                      ampx_tensor *out);

/** Adds a reference to `tensor`. */
AMPX_API ampx_status ampx_tensor_retain(ampx_tensor tensor);

/** Drops one reference; the last one frees the tensor (its memory, or calls
 *  the wrap deleter) and the tensor's reference to its context. NULL is a
 *  no-op. Any thread (see the rules at the top). */
AMPX_API void ampx_tensor_release(ampx_tensor tensor);

/** Copies the tensor's contents to host memory `dst` of exactly `bytes`
 *  bytes (numel * element size, else AMPX_ERR_SHAPE). Synchronizes: the
 *  data is in `dst` when the call returns. */
AMPX_API ampx_status ampx_tensor_to_host(ampx_tensor tensor, void *dst,
                                         size_t bytes);

/** Overwrites the tensor's contents with `bytes` bytes of host memory
 *  (numel * element size, else AMPX_ERR_SHAPE). `src` may be reused when the
 *  call returns. */
AMPX_API ampx_status ampx_tensor_copy_from_host(ampx_tensor tensor,
                                                const void *src, size_t bytes);

/** dst = src, converting the element type when they differ (floating types
 *  round to nearest even; float to integer truncates toward zero, NaN
 *  becomes 0 and out-of-range values saturate; integer to float rounds to
 *  nearest). Both tensors must belong to the same context and have the same
 *  number of elements (shapes may differ: the copy is in row-major order).
 *  dst and src may be the same tensor. */
AMPX_API ampx_status ampx_tensor_copy(ampx_tensor dst, ampx_tensor src);

/** Creates a new tensor of `dtype` holding `src` converted as by
 *  ampx_tensor_copy, with src's shape. The name is not copied. */
AMPX_API ampx_status ampx_tensor_cast(ampx_tensor src, ampx_dtype dtype,
                                      ampx_tensor *out);

/** Sets every element to `value` converted to the tensor's type (as by
 *  ampx_tensor_copy from a double). */
AMPX_API ampx_status ampx_tensor_fill(ampx_tensor tensor, double value);

/** Sets the tensor's name (copied; NULL or "" clears it). Names are used in
 *  diagnostics such as non-finite gradient reports. */
AMPX_API ampx_status ampx_tensor_set_name(ampx_tensor tensor, const char *name);

/** *name receives the tensor's name ("" if none), owned by the tensor and
 *  valid until the name is changed or the tensor is destroyed. */
AMPX_API ampx_status ampx_tensor_name(ampx_tensor tensor, const char **name);

/** Element type of a tensor. */
AMPX_API ampx_status ampx_tensor_dtype(ampx_tensor tensor, ampx_dtype *dtype);

/** Number of dimensions of a tensor. */
AMPX_API ampx_status ampx_tensor_ndim(ampx_tensor tensor, int32_t *ndim);

/** Writes the tensor's extents into dims[0..ndim-1]; `capacity` is the
 *  length of `dims` and must be >= ndim (else AMPX_ERR_INVALID_ARGUMENT).
 *  `dims` may be NULL when ndim is 0. */
AMPX_API ampx_status ampx_tensor_shape(ampx_tensor tensor, int64_t *dims,
                                       int32_t capacity);

/** Number of elements (the product of the extents; 1 for ndim 0). */
AMPX_API ampx_status ampx_tensor_numel(ampx_tensor tensor, int64_t *numel);

/** Size of the contents in bytes (numel * element size). */
AMPX_API ampx_status ampx_tensor_nbytes(ampx_tensor tensor, size_t *nbytes);

/** Address of the first element, on the tensor's device (a host pointer for
 *  CPU tensors, a device pointer for CUDA tensors). Borrowed: valid while the
 *  tensor lives. Writing through it is allowed; on a CUDA context order such
 *  writes on the context's stream. */
AMPX_API ampx_status ampx_tensor_data(ampx_tensor tensor, void **data);

/** The context a tensor belongs to (borrowed: no reference is added). */
AMPX_API ampx_status ampx_tensor_context(ampx_tensor tensor, ampx_context *ctx);

/* DLPack interop (DLPack 0.6+ `DLManagedTensor`; include <dlpack/dlpack.h>
 * to use the struct). */
struct DLManagedTensor;

/** Exports a tensor as a DLManagedTensor sharing its memory (no copy). The
 *  DLPack tensor holds a reference to `tensor`; the consumer calls its
 *  `deleter` exactly once when done, which drops that reference. Device:
 *  kDLCPU for CPU contexts, kDLCUDA with the device ordinal for CUDA ones. */
AMPX_API ampx_status ampx_tensor_to_dlpack(ampx_tensor tensor,
                                           struct DLManagedTensor **out);

/** Imports a DLManagedTensor as a tensor sharing its memory (no copy). On
 *  success ampx takes ownership of `src` and calls src->deleter when the
 *  tensor is destroyed; on failure `src` is left untouched and still owned
 *  by the caller. The DLPack tensor must be on the context's device, dense
 *  and row-major (strides NULL or compact), with byte_offset honoured, and of
 *  a supported type (float 32/16, bfloat 16, int 32/64, lanes 1); otherwise
 *  AMPX_ERR_DEVICE, AMPX_ERR_NOT_SUPPORTED or AMPX_ERR_DTYPE. */
AMPX_API ampx_status ampx_tensor_from_dlpack(ampx_context ctx,
                                             struct DLManagedTensor *src,
                                             ampx_tensor *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* AMPX_H */
