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
 *   5. Tensors (create, wrap, copy, cast, fill, query, gradients, DLPack)
 *   6. Optimizers (SGD, Adam, AdamW; fp32 master weights; param groups)
 *   7. Loss scaling (dynamic loss scaler, after torch.amp.GradScaler)
 *   8. Gradient clipping and diagnostics
 *   9. Autograd: gradients, grad mode, scopes (EXPERIMENTAL)
 *  10. Autocast (EXPERIMENTAL)
 *  11. Ops (EXPERIMENTAL)
 *  12. Training checkpoint files (EXPERIMENTAL)
 *  13. Tensor views and gradient hooks (EXPERIMENTAL)
 *  14. Data-parallel training: communicators, gradient all-reduce (EXPERIMENTAL)
 *  15. The precision doctor: gradient statistics, scale history, findings (EXPERIMENTAL)
 *  16. safetensors files: save, load into tensors, load zero-copy (EXPERIMENTAL)
 *  17. Learning-rate schedules on the device (EXPERIMENTAL)
 *  18. FP8: casts, scaling recipes, FP8 products under autocast (EXPERIMENTAL)
 *  19. ONNX export of a recorded forward pass (EXPERIMENTAL)
 *
 * Stability: sections 1-8 are stable: their functions keep their
 * signatures and meaning within an ABI major version. Sections marked
 * EXPERIMENTAL may still change in a minor version, and are declared only
 * when the program defines AMPX_EXPERIMENTAL before including this header
 * (e.g. `cc -DAMPX_EXPERIMENTAL`, or `#define AMPX_EXPERIMENTAL` first);
 * without it, a call to one of them does not compile (C++) or is an
 * implicit declaration (C). The library exports them either way.
 * A function that is to be removed is first marked AMPX_DEPRECATED (a
 * compiler warning that names its replacement) for at least one minor
 * version.
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
 *   Threads.   A context and every object made from it (tensors,
 *              optimizers, scalers, autocast policies) may be used by one
 *              thread at a time: calls naming objects of one context must
 *              not overlap, whichever objects they name. Different contexts
 *              are fully independent and may be used from different threads
 *              at once. ampx_tensor_release may be called from any thread at
 *              any moment, also while another thread uses the tensor's
 *              context (e.g. from a garbage collector's finalizer), provided
 *              no other thread uses that same tensor; the allocator's free
 *              hook and a wrapped tensor's deleter then run on the releasing
 *              thread. The other release functions may be called from any
 *              thread, in any order, while no other thread uses an object of
 *              the same context. ampx_last_error and ampx_last_status report
 *              the calling thread's own calls. Functions marked Thread-safe
 *              may be called from any thread at any time.
 *   Options.   Option structs start with `size_t struct_size`. Initialise
 *              them with their AMPX_..._OPTIONS_INIT macro (or the matching
 *              _default() function); fields are only ever appended, so a
 *              program compiled against an older header keeps working and
 *              fields it does not know read as their defaults.
 *   Sync.      Nothing synchronizes with a device unless its comment says so.
 *   Flags.     Every int32_t flag the program passes (an argument or an
 *              option field that switches something on or off, e.g.
 *              `average`, `overlap`, `reduce_in_fp32`, the `sync` of
 *              ampx_data_parallel_set_sync, the ops' `training`,
 *              `keepdim`, `causal`) takes any non-zero value as true and
 *              0 as false; where a comment says "1:" it means "non-zero:".
 *              Flags ampx writes (out arguments, statistics) are 0 or 1.
 *   Libraries. The optional libraries are opened at run time, when first
 *              needed: OpenBLAS (AMPX_BLAS), oneDNN (AMPX_DNNL_LIBRARY),
 *              the MPI plugin (AMPX_MPI_PLUGIN), NCCL (AMPX_NCCL_LIBRARY)
 *              and cuDNN (AMPX_CUDNN_LIBRARY). One rule finds each: when its
 *              environment variable is set, only the path it names is tried;
 *              "none" turns the library off; unset, its default names (given
 *              where it is described) are tried in order. Where a library
 *              that cannot be loaded makes a call fail (the MPI plugin, NCCL,
 *              cuDNN: NOT_SUPPORTED), the message lists every path tried
 *              with the loader's reason; without OpenBLAS or oneDNN, ampx's
 *              own kernels compute instead.
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

/* AMPX_DEPRECATED(message) marks a declaration that a later ABI major
 * version removes; using it warns with `message`, which names the
 * replacement. */
#if defined(__GNUC__) || defined(__clang__)
#  define AMPX_DEPRECATED(message) __attribute__((deprecated(message)))
#elif defined(_MSC_VER)
#  define AMPX_DEPRECATED(message) __declspec(deprecated(message))
#else
#  define AMPX_DEPRECATED(message)
#endif

/* AMPX_NODISCARD marks every function that returns an ampx_status, so a
 * compiler warns where a status is ignored (-Wunused-result): an unchecked
 * failure leaves the program working on objects the call did not change.
 * C++17 gets [[nodiscard]] (a (void) cast silences it); GCC and Clang in C
 * get warn_unused_result, which GCC does not let a (void) cast silence --
 * test or store the status instead. A program that wants neither defines
 * AMPX_NODISCARD as empty before including ampx.h. It comes first in a
 * declaration, where every compiler accepts a standard attribute. */
#ifndef AMPX_NODISCARD
#  if defined(__cplusplus) && __cplusplus >= 201703L
#    define AMPX_NODISCARD [[nodiscard]]
#  elif defined(__GNUC__) || defined(__clang__)
#    define AMPX_NODISCARD __attribute__((warn_unused_result))
#  else
#    define AMPX_NODISCARD
#  endif
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
  AMPX_ERR_INTERNAL = 12,        /**< a bug in ampx; please report it */
  AMPX_STATUS_MIN_ENUM = -0x7fffffff - 1, /**< not a status: with MAX_ENUM,
                                         pins the underlying type to a signed
                                         32-bit int, so every value of an
                                         int32_t -- negative ones too -- is
                                         defined to pass through a foreign
                                         function interface; functions
                                         refuse the values not listed */
  AMPX_STATUS_MAX_ENUM = 0x7fffffff /**< not a status (see MIN_ENUM) */
} ampx_status;

/** A short static English name for a status ("AMPX_ERR_SHAPE"), or
 *  "AMPX_UNKNOWN_STATUS" for a value not listed above. Never NULL.
 *  Thread-safe. */
AMPX_API const char *ampx_status_string(ampx_status status);

/** The message of the most recent failed call made on the calling thread:
 *  which function failed, which argument, and the shapes/dtypes involved.
 *  Successful calls do not clear it. Returns "" when no call has failed on
 *  this thread. The string is owned by the library and stays valid until the
 *  next failing ampx call on the same thread; it is at most 4095 bytes (a
 *  longer message is cut and ends in "..."). Recording it allocates nothing,
 *  so an AMPX_ERR_OUT_OF_MEMORY is reported with its message even when
 *  memory stays exhausted. Thread-safe (per thread). */
AMPX_API const char *ampx_last_error(void);

/** The status of the most recent failed call on the calling thread (AMPX_OK
 *  if none has failed). Thread-safe (per thread). */
AMPX_NODISCARD AMPX_API ampx_status ampx_last_status(void);

/** Sets the calling thread's last error -- ampx_last_status() becomes
 *  `status`, ampx_last_error() a copy of `message` -- and returns `status`.
 *  For callbacks the program gives ampx (e.g. an ampx_segment_fn), so the
 *  caller of the ampx function that ran the callback sees the callback's
 *  own words: `return ampx_set_error(AMPX_ERR_IO, "batch file missing");`.
 *  When a callback returns a non-OK status without having set a message
 *  (by this function, or by an ampx call inside it that failed), ampx says
 *  so instead of repeating an older, unrelated message. `message` is
 *  borrowed for the call only; NULL counts as "". `status` AMPX_OK sets the
 *  message and status too (AMPX_OK is not a failure, so nothing is
 *  reported). A message longer than 4095 bytes is cut there and ends in
 *  "..."; nothing is allocated, so this works with memory exhausted.
 *  Never fails. Thread-safe (per thread). */
AMPX_NODISCARD AMPX_API ampx_status ampx_set_error(ampx_status status, const char *message);

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
  AMPX_I64 = 5,
  AMPX_F8E4M3 = 6, /**< OCP FP8 E4M3 ("E4M3FN", torch.float8_e4m3fn): 4
                        exponent bits (bias 7), 3 mantissa bits, max 448,
                        smallest subnormal 2^-9, no infinities, NaN 0x7f /
                        0xff. Storage and FP8 products only (section 18):
                        other ops refuse it with AMPX_ERR_DTYPE */
  AMPX_F8E5M2 = 7, /**< OCP FP8 E5M2 (torch.float8_e5m2): 5 exponent bits
                        (bias 15), 2 mantissa bits, max 57344, smallest
                        subnormal 2^-16, IEEE infinities and NaNs. As
                        AMPX_F8E4M3, storage and FP8 products only */
  AMPX_DTYPE_MIN_ENUM = -0x7fffffff - 1, /**< not a type (see AMPX_STATUS_MIN_ENUM) */
  AMPX_DTYPE_MAX_ENUM = 0x7fffffff /**< not a type (see AMPX_STATUS_MAX_ENUM) */
} ampx_dtype;

/** Size in bytes of one element of `dtype`, or 0 for an invalid value.
 *  Thread-safe. */
AMPX_API size_t ampx_dtype_size(ampx_dtype dtype);

/** Static name of a dtype ("f32", "f16", "bf16", "i32", "i64", "f8e4m3",
 *  "f8e5m2"), or "invalid". Never NULL. Thread-safe. */
AMPX_API const char *ampx_dtype_name(ampx_dtype dtype);

/** Device kinds. Numbers pinned. */
typedef enum ampx_device_type {
  AMPX_DEVICE_CPU = 1,
  AMPX_DEVICE_CUDA = 2,
  AMPX_DEVICE_MIN_ENUM = -0x7fffffff - 1, /**< not a device (see AMPX_STATUS_MIN_ENUM) */
  AMPX_DEVICE_MAX_ENUM = 0x7fffffff /**< not a device (see AMPX_STATUS_MAX_ENUM) */
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
 *  thread releases a tensor, and free may run on one thread while alloc runs
 *  on another, so the hooks must be safe to call concurrently. Leave both NULL for ampx's own allocator; set
 *  both or neither. */
typedef struct ampx_allocator {
  size_t struct_size; /**< sizeof(ampx_allocator); fields are only appended.
                           A smaller value is AMPX_ERR_INVALID_ARGUMENT,
                           except that an allocator left all zero (0, NULL,
                           NULL, NULL) means ampx's own allocator */
  void *(*alloc)(void *user_data, size_t bytes, size_t alignment);
  void (*free)(void *user_data, void *ptr, size_t bytes);
  void *user_data; /**< passed back to alloc and free; borrowed, must outlive
                        the context */
} ampx_allocator;

#define AMPX_ALLOCATOR_INIT { sizeof(ampx_allocator), NULL, NULL, NULL }

/** Options for ampx_context_create.
 *  Layouts: until ampx 0.1.0 the embedded ampx_allocator had no
 *  struct_size, so this struct was 64 bytes on LP64 platforms (the legacy
 *  layout). ampx_context_create reads a struct_size up to that legacy size
 *  as the legacy layout (the allocator's three fields without a
 *  struct_size), and sizeof(ampx_context_options) or more as this one;
 *  a size in between is AMPX_ERR_INVALID_ARGUMENT. Programs built against
 *  the older header therefore keep working unchanged. */
typedef struct ampx_context_options {
  size_t struct_size;           /**< sizeof(ampx_context_options) */
  ampx_device_type device_type; /**< default AMPX_DEVICE_CPU */
  int32_t device_index;         /**< CUDA device ordinal; default 0 */
  int32_t num_threads;          /**< CPU worker threads; 0 (default) = one per
                                     hardware thread; 1 = no worker threads.
                                     Idle workers poll for 50 us after each
                                     op before they sleep. */
  uint64_t seed;                /**< seed of the context's random streams;
                                     default 0 */
  ampx_allocator allocator;     /**< default: ampx's allocator */
  void *cuda_stream;            /**< a cudaStream_t to adopt (borrowed; must
                                     outlive the context); NULL (default):
                                     the context creates its own stream.
                                     Must be NULL for a CPU context. */
} ampx_context_options;

#define AMPX_CONTEXT_OPTIONS_INIT \
  { sizeof(ampx_context_options), AMPX_DEVICE_CPU, 0, 0, 0, AMPX_ALLOCATOR_INIT, NULL }

/** Returns the default options (the same values as the INIT macro), for
 *  languages that cannot use macros. Thread-safe. */
AMPX_API ampx_context_options ampx_context_options_default(void);

/** Creates a context. `options` may be NULL for the defaults (a CPU
 *  context). On success *out holds a new context owned by the caller (release
 *  it with ampx_context_release).
 *  Errors: AMPX_ERR_INVALID_ARGUMENT (out NULL, struct_size too small or
 *  between the legacy and the current layout, allocator.struct_size too
 *  small, bad device type -- negative values included --, negative thread
 *  count, only one allocator hook set, a stream given for the CPU); AMPX_ERR_NO_DEVICE (CUDA requested but the library was
 *  built without CUDA, no device is present, or device_index is out of
 *  range); AMPX_ERR_OUT_OF_MEMORY. Thread-safe.
 *  CPU matrix products use a CBLAS loaded at the first one (the rule of
 *  "Libraries", at the top): OpenBLAS (libopenblas.so.0, then
 *  libopenblas.so) unless the environment variable AMPX_BLAS names another
 *  library or is "none" (ampx's own kernel; also used when none loads). When
 *  ampx loads OpenBLAS itself, it sets two variables the host has not set
 *  for the length of the load and then removes them: OPENBLAS_CORETYPE, to
 *  the kernel family the CPU's features allow (older OpenBLAS releases fall
 *  back to their slowest kernels on CPU models they predate), and
 *  OPENBLAS_THREAD_TIMEOUT=4, so OpenBLAS's idle threads sleep instead of
 *  spinning on the cores ampx's own threads need. On a CPU that multiplies
 *  bf16 natively (AVX512-BF16 or AMX), products of BF16 operands and F32 and
 *  BF16 convolutions go to oneDNN instead (libdnnl.so.2, or the library
 *  AMPX_DNNL_LIBRARY names, by the same rule), loaded at the first one;
 *  AMPX_DNNL_LIBRARY=none or AMPX_BLAS=none turns that off. If no OpenMP runtime is loaded yet and
 *  the host has set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, they are set
 *  to "passive" and "1000" for the length of that load, so that oneDNN's
 *  idle threads poll briefly and then sleep too; a host
 *  that loaded an OpenMP runtime of its own first (PyTorch does) may have
 *  oneDNN's threads run on it, with its wait policy. A host that reads the environment
 *  from another thread at those moments may see these variables. */
AMPX_NODISCARD AMPX_API ampx_status ampx_context_create(const ampx_context_options *options,
                                         ampx_context *out);

/** Drops the caller's reference to `ctx`. The context is destroyed once its
 *  tensors are released too. Once the program's last reference is released,
 *  its tensors stay usable, but ops on them are no longer recorded for
 *  backward, open scopes and autocast regions end, and ampx_autocast_enter
 *  fails with AMPX_ERR_STALE_HANDLE. NULL is a no-op. Any thread (see the
 *  rules at the top). */
AMPX_API void ampx_context_release(ampx_context ctx);

/** Adds a reference to `ctx` (released with ampx_context_release). */
AMPX_NODISCARD AMPX_API ampx_status ampx_context_retain(ampx_context ctx);

/** The device of a context. */
AMPX_NODISCARD AMPX_API ampx_status ampx_context_device(ampx_context ctx,
                                         ampx_device_type *device_type,
                                         int32_t *device_index);

/** Blocks until all work ampx has enqueued on the context's device is done
 *  (a no-op on the CPU). Reports a device failure as AMPX_ERR_DEVICE, and
 *  a bad class label or embedding index that an earlier ampx_cross_entropy
 *  or ampx_embedding found on the device as AMPX_ERR_INVALID_ARGUMENT (see
 *  ampx_cross_entropy; reported once). */
AMPX_NODISCARD AMPX_API ampx_status ampx_context_synchronize(ampx_context ctx);

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
AMPX_NODISCARD AMPX_API ampx_status ampx_memory_stats_get(ampx_context ctx,
                                           ampx_memory_stats *stats);

/** Sets peak_bytes to current_bytes. */
AMPX_NODISCARD AMPX_API ampx_status ampx_memory_reset_peak(ampx_context ctx);

/** Lets f32 matrix products (matmul, linear) and convolutions of the
 *  context run in TF32 (allowed != 0) -- tensor-core math on CUDA devices
 *  of compute capability 8.0 and later: operands rounded to 10 mantissa
 *  bits (about 3 decimal digits), products summed in fp32 -- as torch's
 *  allow_tf32 flags; or not (0, the default: IEEE fp32). f16 and bf16 are
 *  unaffected, and so is the CPU, which has no TF32. Applies to the calls
 *  made after it. *previous (may be NULL) receives the former setting.
 *  Errors: INVALID_ARGUMENT (NULL ctx), STALE_HANDLE. The context's thread
 *  rules apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_context_set_tf32(ampx_context ctx, int32_t allowed,
                                                          int32_t *previous);

/* ========================================================================== */
/* 5. Tensors                                                                 */
/* ========================================================================== */

/* Shapes are given as `ndim` int64 extents (0 <= ndim <= AMPX_MAX_DIMS; an
 * extent may be 0; ndim 0 is a scalar with one element). A shape whose byte
 * size overflows is AMPX_ERR_SHAPE, and so is any size an op computes from
 * its arguments -- an output extent, a window, a product of extents, an
 * offset -- that would not fit in int64: the message names the expression
 * and its operands ("dilation[0] * (kernel_h - 1) = ... overflows int64"),
 * and no wrapped value is ever used. Every create function returns a tensor
 * with one reference, owned by the caller. */

/** Creates a tensor with uninitialised contents.
 *  Errors: INVALID_ARGUMENT (NULL ctx/out, shape NULL with ndim > 0),
 *  SHAPE (ndim or an extent out of range), DTYPE, OUT_OF_MEMORY,
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_empty(ampx_context ctx, ampx_dtype dtype,
                                       int32_t ndim, const int64_t *shape,
                                       ampx_tensor *out);

/** Creates a tensor filled with zeros. Errors as ampx_tensor_empty. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_zeros(ampx_context ctx, ampx_dtype dtype,
                                       int32_t ndim, const int64_t *shape,
                                       ampx_tensor *out);

/** Creates a tensor and copies `bytes` bytes of host memory into it; `bytes`
 *  must equal numel * ampx_dtype_size(dtype) (else AMPX_ERR_SHAPE). `data` is
 *  borrowed for the duration of the call only. On a CUDA context the copy has
 *  completed when the call returns. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_from_host(ampx_context ctx, ampx_dtype dtype,
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
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_wrap(ampx_context ctx, ampx_dtype dtype,
                                      int32_t ndim, const int64_t *shape,
                                      void *data, size_t bytes,
                                      ampx_deleter deleter,
                                      void *deleter_user_data,
                                      ampx_tensor *out);

/** Adds a reference to `tensor`. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_retain(ampx_tensor tensor);

/** Drops one reference; the last one frees the tensor (its memory, or calls
 *  the wrap deleter) and the tensor's reference to its context. NULL is a
 *  no-op. Any thread (see the rules at the top). */
AMPX_API void ampx_tensor_release(ampx_tensor tensor);

/** Copies the tensor's contents to host memory `dst` of exactly `bytes`
 *  bytes (numel * element size, else AMPX_ERR_SHAPE). Synchronizes: the
 *  data is in `dst` when the call returns. Like every call that waits for
 *  the device, it first reports a bad class label or embedding index that
 *  an earlier op found on a GPU (AMPX_ERR_INVALID_ARGUMENT, nothing copied;
 *  see ampx_cross_entropy). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_to_host(ampx_tensor tensor, void *dst,
                                         size_t bytes);

/** Overwrites the tensor's contents with `bytes` bytes of host memory
 *  (numel * element size, else AMPX_ERR_SHAPE). `src` may be reused when the
 *  call returns. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_copy_from_host(ampx_tensor tensor,
                                                const void *src, size_t bytes);

/** dst = src, converting the element type when they differ (floating types
 *  round to nearest even; float to integer truncates toward zero, NaN
 *  becomes 0 and out-of-range values saturate; integer to float rounds to
 *  nearest). Into AMPX_F8E4M3 / AMPX_F8E5M2, as torch's casts: values beyond
 *  the largest finite one saturate in E4M3 (+-inf and 500 become +-448) and
 *  overflow to +-inf in E5M2 (61440 and inf become inf); NaN stays NaN
 *  with its sign (0x7f / 0xff); ampx_tensor_copy_fp8 makes the other
 *  choice. FP8 to any type is exact (integers truncate). Both tensors must belong to the same context and have the same
 *  number of elements (shapes may differ: the copy is in row-major order).
 *  dst and src may be the same tensor. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_copy(ampx_tensor dst, ampx_tensor src);

/** Creates a new tensor of `dtype` holding `src` converted as by
 *  ampx_tensor_copy, with src's shape. The name is not copied. The result
 *  is owned by the caller and is never recorded: it does not require grad
 *  and no gradient flows back through it into `src` (a plain tensor
 *  function, like copying the data out). For a cast that takes part in
 *  autograd, as torch's Tensor.to(dtype) and Tensor.clone() do, use
 *  ampx_cast (section 11). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_cast(ampx_tensor src, ampx_dtype dtype,
                                      ampx_tensor *out);

/** Sets every element to `value` converted to the tensor's type (as by
 *  ampx_tensor_copy from a double). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_fill(ampx_tensor tensor, double value);

/** Sets the tensor's name (copied; NULL or "" clears it). Names are used in
 *  diagnostics such as non-finite gradient reports. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_set_name(ampx_tensor tensor, const char *name);

/** *name receives the tensor's name ("" if none), owned by the tensor and
 *  valid until the name is changed or the tensor is destroyed. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_name(ampx_tensor tensor, const char **name);

/** Element type of a tensor. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_dtype(ampx_tensor tensor, ampx_dtype *dtype);

/** Number of dimensions of a tensor. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_ndim(ampx_tensor tensor, int32_t *ndim);

/** Writes the tensor's extents into dims[0..ndim-1]; `capacity` is the
 *  length of `dims` and must be >= ndim (else AMPX_ERR_INVALID_ARGUMENT).
 *  `dims` may be NULL when ndim is 0. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_shape(ampx_tensor tensor, int64_t *dims,
                                       int32_t capacity);

/** Number of elements (the product of the extents; 1 for ndim 0). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_numel(ampx_tensor tensor, int64_t *numel);

/** Size of the contents in bytes (numel * element size). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_nbytes(ampx_tensor tensor, size_t *nbytes);

/** Address of the first element, on the tensor's device (a host pointer for
 *  CPU tensors, a device pointer for CUDA tensors). Borrowed: valid while the
 *  tensor lives. Writing through it is allowed; on a CUDA context order such
 *  writes on the context's stream. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_data(ampx_tensor tensor, void **data);

/** The context a tensor belongs to (borrowed: no reference is added). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_context(ampx_tensor tensor, ampx_context *ctx);

/** Attaches `grad` as the gradient of `tensor` (the tensor retains it,
 *  replacing -- and releasing -- any previous one; NULL detaches). The
 *  gradient must belong to the same context, have the same number of
 *  elements and a floating type (F32, F16 or BF16; it need not be the
 *  tensor's type). This is how a program that computes its own gradients
 *  (an engine with its own backward pass) hands them to optimizers: attach
 *  once, then write new values into the gradient's memory every step.
 *  Errors: DEVICE (other context), SHAPE, DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_set_grad(ampx_tensor tensor, ampx_tensor grad);

/** *grad receives the gradient attached to `tensor`, or NULL if none. The
 *  handle is borrowed (no reference is added): it stays valid while it is
 *  attached; retain it to keep it longer. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_grad(ampx_tensor tensor, ampx_tensor *grad);

/* DLPack interop (DLPack 0.6+ `DLManagedTensor`; include <dlpack/dlpack.h>
 * to use the struct).
 *
 * DLPack 1.x (`DLManagedTensorVersioned`, "dltensor_versioned" capsules)
 * is not supported by these two functions, which only take and make the
 * unversioned struct (the dlpack headers ampx builds against, libdlpack-dev
 * 0.6, do not define the versioned one). Both structs carry the same
 * DLTensor, so a binding handed a versioned tensor imports it without a
 * copy through ampx_tensor_wrap: check that it is dense row-major, on the
 * context's device and of a supported type as ampx_tensor_from_dlpack
 * does, and refuse it when flags has DLPACK_FLAG_BITMASK_READ_ONLY (ampx
 * may write to a tensor's memory); then wrap dl_tensor.data +
 * byte_offset with a deleter that calls the versioned tensor's deleter.
 * To export a versioned tensor, fill one from ampx_tensor_data,
 * ampx_tensor_shape and ampx_tensor_dtype, holding a reference
 * (ampx_tensor_retain) that its deleter releases. */
struct DLManagedTensor;

/** Exports a tensor as a DLManagedTensor sharing its memory (no copy). The
 *  DLPack tensor holds a reference to `tensor`; the consumer calls its
 *  `deleter` exactly once when done, which drops that reference. Device:
 *  kDLCPU for CPU contexts, kDLCUDA with the device ordinal for CUDA ones. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_to_dlpack(ampx_tensor tensor,
                                           struct DLManagedTensor **out);

/** Imports a DLManagedTensor as a tensor sharing its memory (no copy). On
 *  success ampx takes ownership of `src` and calls src->deleter when the
 *  tensor is destroyed; on failure `src` is left untouched and still owned
 *  by the caller. The DLPack tensor must be on the context's device, dense
 *  and row-major (strides NULL or compact), with byte_offset honoured, and of
 *  a supported type (float 32/16, bfloat 16, int 32/64, or DLPack 1.1's
 *  float8 codes kDLFloat8_e4m3fn = 10 and kDLFloat8_e5m2 = 12 with 8 bits,
 *  which ampx_tensor_to_dlpack writes for AMPX_F8E4M3 / AMPX_F8E5M2;
 *  lanes 1); otherwise
 *  AMPX_ERR_DEVICE, AMPX_ERR_NOT_SUPPORTED or AMPX_ERR_DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_from_dlpack(ampx_context ctx,
                                             struct DLManagedTensor *src,
                                             ampx_tensor *out);

/* ========================================================================== */
/* 6. Optimizers                                                              */
/* ========================================================================== */

/* An optimizer updates a fixed list of parameters, organised in groups that
 * each have their own learning rate and weight decay, from the gradients
 * attached to them (ampx_tensor_set_grad). A parameter without a gradient is
 * left alone in that step, as in torch.optim.
 *
 * Parameters may be F32, F16 or BF16. An F16/BF16 parameter gets an fp32
 * master copy owned by the optimizer: the update runs on the master in fp32
 * and the parameter is rewritten from it, rounded to nearest even, after
 * every step. Moments are fp32. The update order follows torch.optim
 * exactly (see the options below). The optimizer retains its parameters.
 *
 * Everything the step needs (learning rates, step counts, the scaler's
 * found-inf flag) lives in device memory: a step never waits for the device.
 */
typedef struct ampx_optimizer_s *ampx_optimizer;

/** SGD: g = maximize ? -g : g; g += weight_decay * p; with momentum:
 *  buf = (first step taken) ? g : momentum * buf + (1 - dampening) * g,
 *  g = nesterov ? g + momentum * buf : buf; then p -= lr * g. */
typedef struct ampx_sgd_options {
  size_t struct_size;  /**< sizeof(ampx_sgd_options) */
  double lr;           /**< default 1e-3; >= 0 */
  double momentum;     /**< default 0; >= 0 */
  double dampening;    /**< default 0 */
  double weight_decay; /**< default 0; >= 0 */
  int32_t nesterov;    /**< default 0; needs momentum > 0 and dampening 0 */
  int32_t maximize;    /**< default 0 */
} ampx_sgd_options;

#define AMPX_SGD_OPTIONS_INIT { sizeof(ampx_sgd_options), 1e-3, 0.0, 0.0, 0.0, 0, 0 }

/** Adam / AdamW: t += 1; g = maximize ? -g : g; Adam: g += weight_decay * p;
 *  AdamW: p *= 1 - lr * weight_decay; m = b1 m + (1 - b1) g;
 *  v = b2 v + (1 - b2) g^2; vhat = amsgrad ? (vmax = max(vmax, v)) : v;
 *  p -= lr / (1 - b1^t) * m / (sqrt(vhat) / sqrt(1 - b2^t) + eps).
 *  As torch: b1, b2, 1 - b1, 1 - b2, 1 - lr * weight_decay, lr / (1 - b1^t)
 *  and sqrt(1 - b2^t) are each formed in double from the double betas
 *  given here (and the group's lr and weight decay as stored on the device,
 *  in fp32) and rounded once to fp32; the element-wise update runs in fp32.
 *  Saved state keeps the betas' doubles. */
typedef struct ampx_adam_options {
  size_t struct_size;              /**< sizeof(ampx_adam_options) */
  double lr;                       /**< default 1e-3; >= 0 */
  double beta1;                    /**< default 0.9; in [0, 1) */
  double beta2;                    /**< default 0.999; in [0, 1) */
  double eps;                      /**< default 1e-8; >= 0 */
  double weight_decay;             /**< default 0 (Adam), 1e-2 (AdamW); >= 0 */
  int32_t amsgrad;                 /**< default 0 */
  int32_t maximize;                /**< default 0 */
  int32_t decoupled_weight_decay;  /**< 0: Adam (L2 in the gradient);
                                        1: AdamW (decoupled decay) */
} ampx_adam_options;

#define AMPX_ADAM_OPTIONS_INIT \
  { sizeof(ampx_adam_options), 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, 0, 0 }
#define AMPX_ADAMW_OPTIONS_INIT \
  { sizeof(ampx_adam_options), 1e-3, 0.9, 0.999, 1e-8, 1e-2, 0, 0, 1 }

/** @{ */
/** Default options (same as the INIT macros), for languages without macros. */
AMPX_API ampx_sgd_options ampx_sgd_options_default(void);
AMPX_API ampx_adam_options ampx_adam_options_default(void);
AMPX_API ampx_adam_options ampx_adamw_options_default(void);
/** @} */

/** Creates an SGD optimizer over `params[0..count-1]` (param group 0, with
 *  options->lr and options->weight_decay). `options` NULL = defaults.
 *  Parameters: F32/F16/BF16 tensors of `ctx`, each listed once across all
 *  groups; count may be 0. Masters and state are allocated here (fp32
 *  masters start as exact copies of the parameters).
 *  Errors: INVALID_ARGUMENT (bad option values, with the option named;
 *  NULL params with count > 0; a duplicate parameter), DTYPE, DEVICE,
 *  OUT_OF_MEMORY, STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_create_sgd(ampx_context ctx, const ampx_tensor *params,
                                               size_t count, const ampx_sgd_options *options,
                                               ampx_optimizer *out);

/** Creates an Adam or AdamW optimizer (see ampx_adam_options); otherwise as
 *  ampx_optimizer_create_sgd. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_create_adam(ampx_context ctx, const ampx_tensor *params,
                                                size_t count,
                                                const ampx_adam_options *options,
                                                ampx_optimizer *out);

/** Releases the caller's reference. The optimizer (and its masters and
 *  state) is destroyed when no scaler step is pending on it. NULL is a
 *  no-op. Any thread (see the rules at the top). */
AMPX_API void ampx_optimizer_release(ampx_optimizer optimizer);

/** Adds a param group with its own lr and weight decay; *group_index (may
 *  be NULL) receives its index (groups are numbered from 0 in order). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_add_group(ampx_optimizer optimizer,
                                              const ampx_tensor *params, size_t count,
                                              double lr, double weight_decay,
                                              int32_t *group_index);

/** Number of param groups. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_group_count(ampx_optimizer optimizer, int32_t *count);

/** Sets a group's learning rate (>= 0) for the following steps. Does not
 *  wait for the device: the value is written in stream order, so a step
 *  already enqueued keeps the old rate. A group with a schedule (section 17)
 *  takes this as the schedule's base rate. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_set_lr(ampx_optimizer optimizer, int32_t group, double lr);

/** A group's learning rate as last set (no device access). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_get_lr(ampx_optimizer optimizer, int32_t group, double *lr);

/** One optimizer step over every parameter that has a gradient, using the
 *  gradients as they are. Errors: AMPX_ERR_ORDER while the optimizer is
 *  attached to an enabled loss scaler, also after ampx_scaler_unscale (use
 *  ampx_scaler_step, which skips the step on inf/NaN gradients: a plain
 *  step would bypass that check), and, attached or not, while a gradient
 *  carries the scale of a backward with an enabled scaler (ampx_backward)
 *  that no unscale or zero_grad removed; SHAPE/DTYPE/DEVICE for a bad
 *  gradient. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_step(ampx_optimizer optimizer);

/** Sets every attached gradient of the optimizer's parameters to zero (the
 *  gradients stay attached, so an engine's buffers keep their identity).
 *  A gradient that a backward with create_graph made (a recorded tensor)
 *  is instead replaced by a new zero tensor that records nothing, as torch
 *  detaches it: the next backward with create_graph then starts a graph of
 *  its own rather than adding to the old one (a handle to the old gradient
 *  the program retained keeps its values). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_zero_grad(ampx_optimizer optimizer);

/** Kinds of per-parameter optimizer state, for ampx_optimizer_state_tensor. */
typedef enum ampx_optimizer_state {
  AMPX_STATE_MASTER = 1,         /**< fp32 master weights (the parameter
                                      itself when it is F32) */
  AMPX_STATE_MOMENTUM = 2,       /**< SGD momentum buffer / Adam exp_avg */
  AMPX_STATE_EXP_AVG_SQ = 3,     /**< Adam exp_avg_sq */
  AMPX_STATE_MAX_EXP_AVG_SQ = 4, /**< Adam max_exp_avg_sq (amsgrad) */
  AMPX_STATE_MIN_ENUM = -0x7fffffff - 1, /**< not a kind (see AMPX_STATUS_MIN_ENUM) */
  AMPX_STATE_MAX_ENUM = 0x7fffffff /**< not a kind (see AMPX_STATUS_MAX_ENUM) */
} ampx_optimizer_state;

/** *out receives a new reference to one state tensor of `param` (same
 *  shape as the parameter, F32). Writing to it changes the optimizer's
 *  state. Errors: INVALID_ARGUMENT when `param` is not a parameter of this
 *  optimizer; NOT_SUPPORTED when this optimizer has no such state (SGD
 *  without momentum has no momentum buffer). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_state_tensor(ampx_optimizer optimizer, ampx_tensor param,
                                                 ampx_optimizer_state kind, ampx_tensor *out);

/** Number of steps `param` has taken (skipped steps do not count).
 *  Synchronizes with the device. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_param_steps(ampx_optimizer optimizer, ampx_tensor param,
                                                int64_t *steps);

/** Size in bytes of the optimizer's serialised state (hyperparameters,
 *  groups and learning rates, step counts, masters, moments). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_state_size(ampx_optimizer optimizer, size_t *bytes);

/** Serialises the optimizer's state into `buffer` of exactly `bytes` bytes
 *  (ampx_optimizer_state_size). Synchronizes with the device. The format is
 *  versioned and checksummed. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_save_state(ampx_optimizer optimizer, void *buffer,
                                               size_t bytes);

/** Restores state saved by ampx_optimizer_save_state into an optimizer of
 *  the same kind over parameters of the same shapes and types, in the same
 *  groups. Adam and AdamW count as different kinds (as in
 *  ampx_checkpoint_file_load): a state saved from one is refused by the
 *  other, so loading never turns an Adam optimizer into AdamW or back; to
 *  change the flavour, create the optimizer of the other kind. Every other
 *  saved hyperparameter (betas, eps, maximize, momentum, learning rates,
 *  weight decays) replaces the live one. Everything is validated before
 *  anything changes: a corrupt, truncated or mismatching buffer gives
 *  AMPX_ERR_CORRUPT (or SHAPE/DTYPE naming the parameter) and leaves the optimizer as it was. F16/BF16
 *  parameters are rewritten from the restored masters. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_load_state(ampx_optimizer optimizer, const void *buffer,
                                               size_t bytes);

/* ========================================================================== */
/* 7. Loss scaling                                                            */
/* ========================================================================== */

/* A dynamic loss scaler, after torch.amp.GradScaler. The loop is:
 *   loss' = loss * scale  (ampx_scaler_scale_loss, or seed your own backward
 *                          with ampx_scaler_scale_tensor)
 *   backward -> scaled gradients
 *   ampx_scaler_unscale(s, opt)   optional: needed before clipping
 *   ampx_scaler_step(s, opt)      unscales if needed, skips the step on the
 *                                 device when a gradient is inf/NaN
 *   ampx_scaler_update(s)         grows or backs off the scale
 * Per optimizer the scaler tracks READY -> UNSCALED -> STEPPED; update
 * returns all to READY. Calls out of this order fail with AMPX_ERR_ORDER and
 * a message that says what to call instead. The scale, growth tracker,
 * found-inf flags and counters live in device memory: nothing here waits for
 * the device except the calls that say they synchronize.
 *
 * Beyond torch: F16 and BF16 gradients are unscaled into fp32 (kept by the
 * optimizer; the low-precision gradient tensor is left as it was, since
 * unscaling in place would underflow); optional hysteresis and scale bounds;
 * counters. A disabled scaler is a transparent pass-through: scale 1, step =
 * ampx_optimizer_step, update does nothing.
 *
 * An optimizer is attached to the first scaler it is used with (or
 * explicitly with ampx_scaler_attach) and cannot change scalers. */
typedef struct ampx_scaler_s *ampx_scaler;

/** Options of a scaler. An update with an inf/NaN gradient ("overflow")
 *  skips the step, restarts the growth tracker and spends one unit of the
 *  hysteresis allowance (which starts at `hysteresis`); once the allowance
 *  is 0 -- at that overflow and at every further one while it stays 0 --
 *  the scale backs off: scale = max(scale * backoff_factor, min_scale,
 *  FLT_MIN) -- a scale is always a normal float, at least FLT_MIN.
 *  A clean update adds one to the tracker; at the growth_interval-th clean
 *  update in a row the tracker restarts, the allowance is restored to
 *  `hysteresis`, and the scale grows: scale * growth_factor, unless that is
 *  inf or above max_scale (see there). The allowance is restored at that
 *  moment even when the growth is not taken, since a whole interval was
 *  clean. With hysteresis 1 (the default) every overflow backs off, as
 *  torch.amp.GradScaler. Products are taken in double and rounded to the
 *  float scale. */
typedef struct ampx_scaler_options {
  size_t struct_size;      /**< sizeof(ampx_scaler_options) */
  double init_scale;       /**< default 65536; finite and, as the float
                                the scale is kept in, at least FLT_MIN
                                (2^-126, the smallest normal float): a
                                smaller one is refused */
  double growth_factor;    /**< default 2; > 1 */
  double backoff_factor;   /**< default 0.5; in (0, 1). A backoff never
                                takes the scale below FLT_MIN (nor below
                                min_scale): its reciprocal stays finite */
  int32_t growth_interval; /**< default 2000; >= 1 */
  int32_t enabled;         /**< default 1 */
  int32_t hysteresis;      /**< default 1 (back off on every overflow, as
                                torch); >= 1. N: the Nth overflow since the
                                allowance was last restored backs off, and
                                so does every further one until it is
                                restored (at a completed growth interval, or
                                see consecutive_hysteresis). As Megatron-LM's
                                DynamicGradScaler and DeepSpeed's default,
                                the N overflows need not be consecutive. */
  double min_scale;        /**< default 0 (none: the floor is FLT_MIN).
                                Lower bound: a backoff whose result would
                                be below min_scale (or FLT_MIN) sets the
                                scale to that floor; at the floor an
                                overflow leaves the scale as it is, and
                                counters.backoffs counts only the updates
                                that lowered the scale. Non-zero: at least
                                FLT_MIN. */
  double max_scale;        /**< default 0 (none). Upper bound: a growth
                                whose result would be above max_scale is not
                                taken -- the scale stays where it is, so it
                                remains init_scale times powers of the
                                factors (with the default factors, a power
                                of two, and scaling stays exact) and never
                                exceeds max_scale -- unless
                                clamp_to_max_scale. counters.growths counts
                                only the updates that raised the scale. A
                                growth to inf is never taken either. */
  int32_t consecutive_hysteresis; /**< default 0. 1: every clean update
                                       restores the allowance, so only N
                                       consecutive overflows back off
                                       (ampx's rule before this field
                                       existed; DeepSpeed's
                                       consecutive_hysteresis=True). */
  int32_t clamp_to_max_scale;     /**< default 0. 1: a growth above
                                       max_scale sets the scale to max_scale
                                       (ampx's rule before this field
                                       existed), which need not be a
                                       power-of-two multiple of the scale. */
} ampx_scaler_options;

#define AMPX_SCALER_OPTIONS_INIT \
  { sizeof(ampx_scaler_options), 65536.0, 2.0, 0.5, 2000, 1, 1, 0.0, 0.0, 0, 0 }

/** Default options (same as AMPX_SCALER_OPTIONS_INIT). */
AMPX_API ampx_scaler_options ampx_scaler_options_default(void);

/** Creates a scaler on `ctx` (`options` NULL = defaults).
 *  Errors: INVALID_ARGUMENT naming the bad option (growth <= 1, backoff
 *  outside (0,1), interval < 1, scale not finite or below FLT_MIN as a
 *  float, hysteresis < 1, min/max negative or min > max, init outside
 *  [min, max]). */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_create(ampx_context ctx, const ampx_scaler_options *options,
                                        ampx_scaler *out);

/** Releases the caller's reference (optimizers attached to the scaler keep
 *  it alive). NULL is a no-op. Any thread (see the rules at the top). */
AMPX_API void ampx_scaler_release(ampx_scaler scaler);

/** Attaches `optimizer` to `scaler` before its first use, so that misuse in
 *  the very first iteration (clipping or stepping still-scaled gradients) is
 *  detected also for gradients the program wrote itself (the engine path;
 *  gradients ampx_backward scaled are refused without it). Attaching again
 *  to the same scaler is a no-op; to another scaler is
 *  AMPX_ERR_INVALID_ARGUMENT. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_attach(ampx_scaler scaler, ampx_optimizer optimizer);

/** *out receives a new tensor holding loss * scale (F32, loss's shape),
 *  owned by the caller. `loss` must be a floating tensor of the scaler's
 *  context. Disabled scaler: a copy of loss in F32. When loss carries
 *  gradients the product is recorded (its gradient is the incoming one
 *  times the scale this call used), so ampx_grad can differentiate the
 *  scaled loss (see the gradient-penalty recipe in section 9). */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_scale_loss(ampx_scaler scaler, ampx_tensor loss,
                                            ampx_tensor *out);

/** *out receives a new reference to the one-element F32 tensor on the
 *  device that holds the current scale, for programs that seed their own
 *  backward pass with it. Treat it as read-only; it changes at each update. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_scale_tensor(ampx_scaler scaler, ampx_tensor *out);

/** The current scale. Synchronizes with the device. 1 when disabled. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_get_scale(ampx_scaler scaler, double *scale);

/** Divides the gradients of `optimizer`'s parameters by the scale: F32
 *  gradients in place; F16/BF16 gradients into fp32 buffers that the
 *  optimizer's next step and clipping use. Records whether any unscaled
 *  value is inf/NaN (the gradients are unscaled even then).
 *  Errors: ORDER when already unscaled or stepped since the last update;
 *  INVALID_ARGUMENT when the optimizer is attached to another scaler.
 *  Disabled scaler: changes nothing (and attaches nothing), refused as
 *  above for an optimizer attached to another scaler. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_unscale(ampx_scaler scaler, ampx_optimizer optimizer);

/** Unscales first if that has not been done since the last update, then
 *  takes the optimizer step unless an inf/NaN was found -- decided on the
 *  device: a skipped step changes no parameter, master, moment or step
 *  count. Errors: ORDER when already stepped since the last update;
 *  INVALID_ARGUMENT when the optimizer is attached to another scaler.
 *  Disabled scaler: exactly ampx_optimizer_step, its errors included
 *  (ORDER for gradients an enabled scaler's backward scaled), after the
 *  same INVALID_ARGUMENT for an optimizer attached to another scaler. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_step(ampx_scaler scaler, ampx_optimizer optimizer);

/** Ends the iteration: combines the found-inf flags of every optimizer
 *  unscaled since the last update (by ampx_scaler_unscale or
 *  ampx_scaler_step; logical OR), then backs off or grows the scale (see
 *  ampx_scaler_options), and returns every optimizer to READY.
 *  Errors: ORDER when no optimizer was unscaled since the last update
 *  (torch's "No inf checks were recorded"); an unscale without a step is
 *  enough, as torch. Disabled scaler: does nothing. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_update(ampx_scaler scaler);

/** As ampx_scaler_update, but sets the scale to `new_scale` (finite and at
 *  least FLT_MIN as a float, as init_scale; else INVALID_ARGUMENT and
 *  nothing changes) instead of applying the growth/backoff rule; the growth
 *  tracker is left as it is (torch's update(new_scale)). */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_update_to(ampx_scaler scaler, double new_scale);

/** *found receives 1 when the last unscale of `optimizer`'s gradients since
 *  the last update found an inf/NaN, else 0 (under data-parallel training
 *  the flag agreed over the ranks, see section 14). Synchronizes.
 *  Errors: ORDER when the optimizer was not unscaled since the last update. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_found_inf(ampx_scaler scaler, ampx_optimizer optimizer,
                                           int32_t *found);

/** *taken receives 1 if the optimizer's most recent step (through a scaler
 *  or not) was taken, 0 if it was skipped for inf/NaN gradients.
 *  Synchronizes. Errors: ORDER before any step. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_last_step_taken(ampx_optimizer optimizer, int32_t *taken);

/** Counters since creation (or since they were restored). */
typedef struct ampx_scaler_counters {
  size_t struct_size; /**< set by the caller */
  int64_t updates;    /**< update calls */
  int64_t skipped;    /**< updates whose iteration had inf/NaN gradients */
  int64_t backoffs;   /**< times the scale was lowered */
  int64_t growths;    /**< times the scale was raised */
} ampx_scaler_counters;

#define AMPX_SCALER_COUNTERS_INIT { sizeof(ampx_scaler_counters), 0, 0, 0, 0 }

/** Fills *counters (fields up to its struct_size). Synchronizes. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_get_counters(ampx_scaler scaler,
                                              ampx_scaler_counters *counters);

/** The scaler's persistent state (torch's GradScaler.state_dict() plus
 *  ampx's extras). */
typedef struct ampx_scaler_state {
  size_t struct_size;      /**< set by the caller */
  double scale;            /**< the current scale */
  double growth_factor;    /**< as ampx_scaler_options */
  double backoff_factor;   /**< as ampx_scaler_options */
  int32_t growth_interval; /**< as ampx_scaler_options */
  int32_t growth_tracker;  /**< clean updates since the last completed
                                interval or overflow; in [0, interval) */
  int32_t hysteresis;      /**< as ampx_scaler_options */
  int32_t hysteresis_left; /**< the allowance: overflows still tolerated
                                before backing off; in [0, hysteresis] */
  double min_scale;        /**< as ampx_scaler_options */
  double max_scale;        /**< as ampx_scaler_options */
  ampx_scaler_counters counters; /**< as ampx_scaler_get_counters */
  int32_t consecutive_hysteresis; /**< appended; see ampx_scaler_options */
  int32_t clamp_to_max_scale;     /**< appended; see ampx_scaler_options */
} ampx_scaler_state;

/** Reads the whole state (synchronizes). Typically saved with a checkpoint. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_get_state(ampx_scaler scaler, ampx_scaler_state *state);

/** Restores a state from ampx_scaler_get_state; validated like the options
 *  (nothing changes on error). Only allowed between iterations (every
 *  optimizer READY), else AMPX_ERR_ORDER. state->struct_size must be
 *  sizeof(ampx_scaler_state), or offsetof(ampx_scaler_state,
 *  consecutive_hysteresis) for a state from a program built before the two
 *  flags were appended: consecutive_hysteresis and clamp_to_max_scale then
 *  take their defaults (0). Any other size is INVALID_ARGUMENT. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_set_state(ampx_scaler scaler, const ampx_scaler_state *state);

/* ========================================================================== */
/* 8. Gradient clipping and diagnostics                                       */
/* ========================================================================== */

/** Clips the gradients of `optimizer`'s parameters by their total norm
 *  (torch.nn.utils.clip_grad_norm_): total = norm of all gradients together
 *  (norm_type 2, or INFINITY for the max norm); every gradient is multiplied
 *  by min(max_norm / (total + 1e-6), 1) -- computed on the device, no sync.
 *  `total_norm` (may be NULL) receives a new one-element F32 tensor holding
 *  the total. With error_if_nonfinite, a non-finite total fails with
 *  AMPX_ERR_INVALID_ARGUMENT and clips nothing (this synchronizes).
 *  Refused with AMPX_ERR_ORDER while the gradients are still multiplied by
 *  a loss scale (call ampx_scaler_unscale first): those of an optimizer
 *  attached to an enabled scaler before its unscale, and, attached or not,
 *  gradients that a backward with an enabled scaler accumulated into and
 *  no unscale or zero_grad has cleared since. Clipping scaled gradients
 *  silently clips far too hard. */
AMPX_NODISCARD AMPX_API ampx_status ampx_clip_grad_norm(ampx_optimizer optimizer, double max_norm,
                                         double norm_type, int32_t error_if_nonfinite,
                                         ampx_tensor *total_norm);

/** Clamps every gradient element to [-clip_value, clip_value]
 *  (torch.nn.utils.clip_grad_value_). Refused like ampx_clip_grad_norm while
 *  the gradients are scaled. */
AMPX_NODISCARD AMPX_API ampx_status ampx_clip_grad_value(ampx_optimizer optimizer, double clip_value);

/** One parameter whose gradient holds non-finite values. */
typedef struct ampx_nonfinite_grad {
  ampx_tensor param; /**< borrowed */
  const char *name;  /**< the parameter's name, borrowed ("" if unnamed) */
  int64_t nan_count; /**< elements that are NaN */
  int64_t inf_count; /**< elements that are +-inf */
} ampx_nonfinite_grad;

/** Finds the parameters of `optimizer` whose gradients (as the next step
 *  would use them: unscaled copies where they exist) hold NaN or inf, in
 *  parameter order. Writes up to `capacity` entries to `entries` (may be
 *  NULL when capacity is 0) and the total number of such parameters to
 *  *found. Synchronizes. Borrowed pointers stay valid until the next call
 *  that changes the optimizer or the names. */
AMPX_NODISCARD AMPX_API ampx_status ampx_find_nonfinite_grads(ampx_optimizer optimizer,
                                               ampx_nonfinite_grad *entries, size_t capacity,
                                               size_t *found);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* AMPX_H */

/* ========================================================================== */
/* Experimental tier (sections 9-17): AMPX_EXPERIMENTAL                        */
/* ========================================================================== */

/* The declarations below exist only for a translation unit that defines
 * AMPX_EXPERIMENTAL before including ampx.h (as zstd's
 * ZSTD_STATIC_LINKING_ONLY), so using an API that may still change in a
 * minor version is a visible choice. They sit outside the include guard
 * with a guard of their own, so a unit that included ampx.h without the
 * macro (e.g. through another header) can define it and include ampx.h
 * again to get them. */
#if defined(AMPX_EXPERIMENTAL) && !defined(AMPX_H_EXPERIMENTAL)
#define AMPX_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* 9. Autograd: gradients, grad mode, scopes (EXPERIMENTAL)                   */
/* ========================================================================== */

/* Ops (section 11) record themselves on the context's tape when grad mode is
 * on and one of their inputs requires a gradient. ampx_backward walks the
 * tape from a scalar loss back to the leaves (tensors made by the program
 * with requires_grad set) and accumulates into their gradients
 * (ampx_tensor_grad), then clears the tape. A leaf's gradient has the leaf's
 * dtype; gradients accumulate over several backward calls until zeroed. */

/** Marks a tensor made by the program (a leaf) as needing a gradient.
 *  Errors: DTYPE for an integer tensor; INVALID_ARGUMENT for a tensor made
 *  by a recorded op (only leaves can be marked). */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_set_requires_grad(ampx_tensor tensor, int32_t requires_grad);

/** *requires_grad receives 1 when gradients flow to or through `tensor`. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_requires_grad(ampx_tensor tensor, int32_t *requires_grad);

/** Turns recording on (the default) or off for the context (inference, or
 *  work the program does not want differentiated). *previous (may be NULL)
 *  receives the former setting, to restore it. */
AMPX_NODISCARD AMPX_API ampx_status ampx_set_grad_enabled(ampx_context ctx, int32_t enabled, int32_t *previous);

/** Backpropagates from `loss`, a one-element floating tensor made by a
 *  recorded op. The seed gradient is the scaler's scale when `scaler` is
 *  not NULL (so the leaves' gradients come out scaled, ready for
 *  ampx_scaler_unscale/step) and 1 otherwise. Gradients are accumulated
 *  into every leaf that requires one (created on first use, zero-filled,
 *  in the leaf's dtype). With an enabled scaler, the gradients it
 *  accumulated into are marked as scaled until an unscale
 *  (ampx_scaler_unscale/step) or ampx_optimizer_zero_grad of an optimizer
 *  that holds them: ampx_optimizer_step and clipping refuse them meanwhile
 *  (ORDER), whether or not the optimizer was attached to the scaler. The tape is cleared afterwards, also when the
 *  backward pass itself fails; a call refused for its arguments changes
 *  nothing. Records of a forward that is never backpropagated are dropped
 *  once the program releases their outputs (e.g. at ampx_scope_pop).
 *  Errors: SHAPE (more than one element), INVALID_ARGUMENT (not produced by
 *  an op on the current tape), ORDER (a tensor whose values this backward
 *  reads -- an op's input, or the output softmax and linear+ReLU keep --
 *  was written in place after the op ran, by ampx_tensor_copy_from_host,
 *  _copy or _fill, an optimizer step or zero_grad, or a state load: the
 *  gradients would mix old and new values; writes through wrapped or
 *  DLPack-shared memory are not seen). */
AMPX_NODISCARD AMPX_API ampx_status ampx_backward(ampx_tensor loss, ampx_scaler scaler);

/* Higher-order gradients (as torch.autograd.grad and backward's
 * retain_graph / create_graph). Every op of section 11 has its backward
 * written twice: the fused first-order primitives that ampx_backward runs,
 * and the same formula as recorded ops, which a backward with create_graph
 * runs so that the gradients it returns are ordinary recorded tensors that
 * can be differentiated again, to any order (eikonal and gradient-penalty
 * losses, Laplacians of a PINN, Hessian-vector products). Such a backward
 * runs with autocast off and grad mode on: each formula computes in the
 * dtypes its op's forward ran in (a product autocast lowered to F16 has an
 * F16 backward, a softmax F32), so gradients follow the forward's precision
 * classes. Piecewise-linear ops (relu, max pooling, amax, masked_fill) have
 * torch's zero second derivatives. FP8 products (section 18) have theirs
 * in the policy's dtype, not FP8. A record that has no such formula (a
 * checkpointed segment) makes a backward with create_graph fail with
 * NOT_SUPPORTED naming it, before anything changes.
 *
 * retain_graph keeps the tape for another backward over the same graph;
 * without it the records the backward ran are freed, and a later backward
 * that needs one of them fails with ORDER (saying retain_graph) before
 * anything changes. A tensor a kept record saved and the program wrote in
 * place since is refused as in ampx_backward.
 *
 * Gradient penalty under the scaler (torch's AMP recipe), per step:
 *   1. forward under autocast: loss
 *   2. ampx_scaler_scale_loss(scaler, loss, &scaled)   (recorded)
 *   3. ampx_grad(&scaled, 1, NULL, params, n, {create_graph = 1}, g)
 *      -> scaled gradients, recorded (the scale keeps small ones alive)
 *   4. ampx_scaler_unscale_tensor(scaler, g[i], &u[i])  -> g * (1/scale) on
 *      the device (recorded; no host read of the scale)
 *   5. under autocast: penalty from u (e.g. sum of squares), total = loss +
 *      lambda * penalty
 *   6. ampx_backward(total, scaler); ampx_scaler_step; ampx_scaler_update
 * An inf or NaN anywhere on the penalty's path (an overflow of a scaled
 * gradient in step 3 included) reaches the parameters' gradients, so the
 * scaler's step skips and the scale backs off, as for the loss itself. */

/** Options of ampx_grad. */
typedef struct ampx_grad_options {
  size_t struct_size;   /**< sizeof(ampx_grad_options) */
  int32_t create_graph; /**< default 0; 1: the gradients are recorded, so
                             they can be differentiated again */
  int32_t retain_graph; /**< default -1: the value of create_graph (torch's
                             default); 0: free the records the walk ran; 1:
                             keep them for another backward */
  int32_t allow_unused; /**< default 0: an input that no output reaches is
                             an error; 1: its gradient is NULL */
} ampx_grad_options;

#define AMPX_GRAD_OPTIONS_INIT { sizeof(ampx_grad_options), 0, -1, 0 }

/** Default options (same as AMPX_GRAD_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_grad_options ampx_grad_options_default(void);

/** The gradients of outputs[0..output_count-1] with respect to
 *  inputs[0..input_count-1] (torch.autograd.grad): grads[i] receives
 *  sum_k d<outputs[k], grad_outputs[k]>/d inputs[i], a new tensor of
 *  inputs[i]'s shape and dtype owned like an op output (by the innermost
 *  open scope, else by the caller; see ampx_scope_push), or NULL for an
 *  input no output reaches when options->allow_unused. Outputs are floating
 *  tensors made by recorded ops (or leaves that require grad); inputs are
 *  leaves that require grad or tensors recorded ops made (intermediates:
 *  the gradient flowing into that tensor). grad_outputs may be NULL, and so
 *  may any entry of it: a gradient of ones, for one-element outputs only;
 *  a given one must have its output's shape and dtype. `options` NULL:
 *  defaults. ampx_grad accumulates into no tensor's gradient
 *  (ampx_tensor_grad), calls no grad-ready hook and starts no data-parallel
 *  reduction; only records that lead from the outputs to an input run.
 *  The arrays are read during the call only. On any error nothing has
 *  changed (no record freed, no gradient written) and grads is left as it
 *  was.
 *  Errors: INVALID_ARGUMENT (a count of 0, a NULL array, an output or
 *  input that does not require grad, an input not reached without
 *  allow_unused -- the message names it); SHAPE (a non-scalar output
 *  without grad_outputs, grad_outputs of another shape); DTYPE (an integer
 *  tensor, grad_outputs of another dtype); DEVICE; ORDER (the walk needs a
 *  record an earlier backward freed -- see retain_graph -- or a saved
 *  tensor written in place since; called from a hook or a segment during a
 *  backward); NOT_SUPPORTED (create_graph through a record without a
 *  differentiable formula, or any ampx_grad through a checkpointed segment,
 *  whose recompute accumulates into the leaves it reaches); STALE_HANDLE.
 *  Thread rules: those of the context (one thread at a time). */
AMPX_NODISCARD AMPX_API ampx_status ampx_grad(const ampx_tensor *outputs, size_t output_count,
                                              const ampx_tensor *grad_outputs,
                                              const ampx_tensor *inputs, size_t input_count,
                                              const ampx_grad_options *options,
                                              ampx_tensor *grads);

/** Options of ampx_backward_ex. */
typedef struct ampx_backward_options {
  size_t struct_size;   /**< sizeof(ampx_backward_options) */
  int32_t retain_graph; /**< default -1: the value of create_graph; 0: the
                             tape is cleared (as ampx_backward; with
                             create_graph, only the records this backward
                             ran are freed); 1: kept for another backward */
  int32_t create_graph; /**< default 0; 1: the gradients are computed with
                             recorded ops, and each reached leaf's gradient
                             is replaced by a new recorded tensor (the old
                             gradient plus this one, as torch), which can be
                             differentiated */
} ampx_backward_options;

#define AMPX_BACKWARD_OPTIONS_INIT { sizeof(ampx_backward_options), -1, 0 }

/** Default options (same as AMPX_BACKWARD_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_backward_options ampx_backward_options_default(void);

/** ampx_backward with options (NULL: defaults, which make it exactly
 *  ampx_backward). Gradients accumulate into the leaves as there.
 *  Grad-ready hooks (ampx_set_grad_ready_hook) and data-parallel
 *  reductions run only in the final backward over a graph -- one that does
 *  not retain it: a backward with retain_graph accumulates quietly, and the
 *  reduction of its gradients happens in the final one (or at the step).
 *  With create_graph a leaf's gradient tensor is replaced (see
 *  create_graph), so a gradient attached with ampx_tensor_set_grad or by
 *  data-parallel training is not written: use ampx_grad for gradients to
 *  differentiate there.
 *  Errors: those of ampx_backward, except that a loss whose tape an
 *  earlier backward cleared is ORDER (saying retain_graph); ORDER as
 *  ampx_grad for freed records; NOT_SUPPORTED for create_graph through a
 *  record without a differentiable formula (a checkpointed segment). */
AMPX_NODISCARD AMPX_API ampx_status ampx_backward_ex(ampx_tensor loss, ampx_scaler scaler,
                                                     const ampx_backward_options *options);

/** *out = x * (1 / scale) with the scaler's current scale, taken on the
 *  device (no host read; the reciprocal as ampx_scaler_unscale takes it),
 *  a new tensor of x's shape and dtype owned like an op output. Recorded:
 *  its gradient is the incoming one times the same 1/scale (the scale as
 *  it was at this call), so gradients of the scaled loss taken with
 *  create_graph can be unscaled and differentiated (the gradient-penalty
 *  recipe above). A disabled scaler gives a copy of x.
 *  Errors: DTYPE (integer x), DEVICE (x of another context), STALE_HANDLE,
 *  INVALID_ARGUMENT (NULL). */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaler_unscale_tensor(ampx_scaler scaler, ampx_tensor x,
                                                               ampx_tensor *out);

/** Scopes own op outputs, so a training step in C needs no release per
 *  intermediate. While a scope is open on the context, every tensor an op
 *  (section 11) returns is owned by the innermost open scope: the handle is
 *  borrowed, valid until that scope is popped (ampx_tensor_retain it to
 *  keep it longer). With no scope open, op outputs are owned by the caller.
 *  Scopes nest; pushes and pops must pair. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scope_push(ampx_context ctx);

/** Closes the innermost scope, releasing its references. Its cost follows
 *  what it releases, not the length of the recorded forward, so a scope
 *  per op (as bindings use) stays cheap in long forwards.
 *  Errors: ORDER when no scope is open. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scope_pop(ampx_context ctx);

/** *depth receives the number of scopes open on the context (0 when none
 *  is), so a binding can tell whether an op's output will be borrowed from
 *  a scope or owned by the caller. Changes nothing.
 *  Errors: INVALID_ARGUMENT (depth NULL), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_scope_depth(ampx_context ctx, int32_t *depth);

/** A segment of a forward pass for ampx_checkpoint_segment: computes
 *  outputs[0..output_count-1] from inputs[0..input_count-1] with ampx ops
 *  (the handles it stores in `outputs` may be borrowed from the open scope)
 *  and returns AMPX_OK, or an error status -- preferably as
 *  `return ampx_set_error(status, "what went wrong");`, so the caller of
 *  ampx_checkpoint_segment or ampx_backward sees that message. It must be
 *  deterministic and must not release its
 *  inputs: it runs once in the forward pass and again in the backward pass.
 *  Parameters it reads through user_data receive their gradients as usual. */
typedef ampx_status (*ampx_segment_fn)(void *user_data, const ampx_tensor *inputs,
                                       size_t input_count, ampx_tensor *outputs,
                                       size_t output_count);

/** A segment for ampx_checkpoint_segment: the function, its data, and
 *  what ampx calls once it no longer needs the data (a garbage-collected
 *  binding frees the closure there). */
typedef struct ampx_segment {
  size_t struct_size;              /**< sizeof(ampx_segment); fields are
                                        only appended (unknown ones read as
                                        NULL) */
  ampx_segment_fn fn;              /**< required */
  void *user_data;                 /**< passed to fn and release */
  void (*release)(void *user_data); /**< may be NULL; see below */
} ampx_segment;

#define AMPX_SEGMENT_INIT { sizeof(ampx_segment), NULL, NULL, NULL }

/** Gradient checkpointing (torch.utils.checkpoint): runs segment->fn
 *  without keeping its intermediate activations, and runs it again when
 *  backward reaches it, so memory holds only the segment's inputs and
 *  outputs between the passes. Gradients equal those of running fn
 *  directly. The outputs are op outputs (owned as described under
 *  ampx_scope_push). When grad mode is off, fn runs once and nothing is
 *  recorded. `segment` is read during the call only (it may be a local).
 *  release: when segment->release is not NULL, ampx calls
 *  release(user_data) exactly once, on the thread of the ampx call that
 *  ends ampx's last use of user_data, and never again calls fn after it:
 *   - before this call returns, when it fails (refused arguments included)
 *     or records nothing (grad mode off);
 *   - otherwise when the recompute record is destroyed: by the
 *     ampx_backward that runs it (also when that backward fails), by a
 *     backward or ampx_scope_pop that clears or prunes the tape without
 *     running it (the program released the segment's outputs, or the
 *     record was not on the loss's path), by an op or checkpoint call
 *     whose recording prunes the tape, or by the ampx_context_release that
 *     drops the program's last reference to the context.
 *  It is not called when `segment` is NULL or its struct_size too small
 *  (ampx cannot read release then). release must not call ampx functions
 *  on the segment's context.
 *  Errors: INVALID_ARGUMENT (segment NULL, struct_size too small, fn NULL,
 *  output_count 0, outputs NULL, inputs NULL with input_count > 0, an
 *  output left unset); STALE_HANDLE; DEVICE (an input or output of another
 *  context); whatever fn returns, with the message fn set (ampx_set_error,
 *  or a failed ampx call inside fn), or, when it set none, a message saying
 *  that the segment returned that status without one. */
AMPX_NODISCARD AMPX_API ampx_status ampx_checkpoint_segment(ampx_context ctx,
                                                            const ampx_segment *segment,
                                                            const ampx_tensor *inputs,
                                                            size_t input_count,
                                                            ampx_tensor *outputs,
                                                            size_t output_count);

/** Deprecated: ampx_checkpoint_segment with a segment of fn and user_data
 *  and no release (user_data must then outlive the record, which the
 *  program cannot observe). Errors as ampx_checkpoint_segment, with 'fn'
 *  for segment->fn. */
AMPX_NODISCARD AMPX_DEPRECATED("use ampx_checkpoint_segment")
AMPX_API ampx_status ampx_checkpoint(ampx_context ctx, ampx_segment_fn fn, void *user_data,
                                     const ampx_tensor *inputs, size_t input_count,
                                     ampx_tensor *outputs, size_t output_count);

/* ========================================================================== */
/* 10. Autocast (EXPERIMENTAL)                                                */
/* ========================================================================== */

/* An autocast policy makes ops choose their compute precision, as
 * torch.autocast: "lower precision" ops (matmul, linear) cast floating
 * inputs to the policy's dtype and accumulate in fp32; "fp32" ops (softmax,
 * log_softmax, losses, norms, exp/log, sum) cast inputs up to F32;
 * "promote" ops (add, sub, mul, div, concat) compute in the widest input
 * type, inside and outside autocast, by torch's type promotion
 * (torch.result_type): f16 with bf16 is f32, either with f32 is f32, and a
 * 0-D tensor, like a Python number, does not raise the precision of an
 * operand with dimensions -- f16 [3] with an f32 0-D tensor is f16, f16 [3]
 * with a bf16 0-D tensor is f16, an f16 0-D tensor with f32 [3] is f32; the
 * 0-D operands decide only when no operand has dimensions (f16 0-D with
 * bf16 0-D is f32). Each operand's gradient comes back in its own dtype.
 * Other ops (mean among them, as in torch) keep their input type. Casts of
 * F32 leaves that require grad are cached for the life of the outermost
 * autocast region. The gradient
 * of a cast is returned in the source dtype (F32 parameters get F32
 * gradients). Beyond torch: any op's class can be overridden at run time. */
typedef struct ampx_autocast_s *ampx_autocast;

/** Precision classes of ops under autocast. Numbers pinned. */
typedef enum ampx_op_class {
  AMPX_OP_LOWER_PRECISION = 1, /**< cast to the autocast dtype */
  AMPX_OP_FP32 = 2,            /**< cast to F32 */
  AMPX_OP_PROMOTE = 3,         /**< widest input type (torch's promotion,
                                    0-D operands included: see above) */
  AMPX_OP_KEEP = 4,            /**< no cast */
  AMPX_OP_CLASS_MIN_ENUM = -0x7fffffff - 1, /**< not a class (see AMPX_STATUS_MIN_ENUM) */
  AMPX_OP_CLASS_MAX_ENUM = 0x7fffffff
} ampx_op_class;

/** An FP8 scaling recipe (section 18). */
typedef struct ampx_fp8_recipe_s *ampx_fp8_recipe;

/** Options of an autocast policy (ampx_autocast_create). */
typedef struct ampx_autocast_options {
  size_t struct_size; /**< sizeof(ampx_autocast_options) */
  ampx_dtype dtype;   /**< AMPX_F16 (default) or AMPX_BF16 */
  int32_t enabled;    /**< default 1; a disabled policy changes nothing */
  int32_t cache;      /**< default 1: cache casts of F32 leaves */
} ampx_autocast_options;

#define AMPX_AUTOCAST_OPTIONS_INIT { sizeof(ampx_autocast_options), AMPX_F16, 1, 1 }

/** Default options (same as AMPX_AUTOCAST_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_autocast_options ampx_autocast_options_default(void);

/** Creates a policy for `ctx`. Errors: DTYPE unless F16/BF16. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_create(ampx_context ctx, const ampx_autocast_options *options,
                                          ampx_autocast *out);

/** Releases a policy (it must not be entered). NULL is a no-op. */
AMPX_API void ampx_autocast_release(ampx_autocast autocast);

/** Overrides the class of the op named `op_name` (as in the section 11
 *  names, e.g. "softmax", "matmul") for this policy. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_set_op_class(ampx_autocast autocast, const char *op_name,
                                                ampx_op_class op_class);

/** The class `op_name` gets under this policy (its override or default). */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_op_class(ampx_autocast autocast, const char *op_name,
                                            ampx_op_class *op_class);

/** Enters the policy on its context: ops follow it until the matching exit.
 *  Regions nest like a stack. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_enter(ampx_autocast autocast);

/** Leaves the innermost region, which must be this policy's (else ORDER).
 *  Leaving the outermost region drops the cast cache. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_exit(ampx_autocast autocast);

/** Number of casts served from the cache since the policy was created (for
 *  tests and diagnostics) and casts performed into it. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_cache_stats(ampx_autocast autocast, int64_t *hits,
                                               int64_t *misses);

/* ========================================================================== */
/* 11. Ops (EXPERIMENTAL)                                                     */
/* ========================================================================== */

/* Every op takes its inputs as borrowed handles and writes a new tensor to
 * *out (owned as described under ampx_scope_push). Inputs must belong to
 * one context. Under autocast the op's class decides the compute dtype;
 * otherwise floating inputs must share a dtype unless the op says so.
 * Errors: SHAPE (with both shapes in the message), DTYPE, DEVICE. Every op
 * runs on the CPU and CUDA backends. */

/** @{ */
/** Element-wise a + b, a - b, a * b, a / b ("add", "sub", "mul", "div":
 *  promote, with torch's rule for 0-D operands of section 10: an f16
 *  tensor times an f32 0-D tensor is f16; division is IEEE's: x / 0 is
 *  +-inf, 0 / 0 NaN), with NumPy's (and torch's) broadcasting: the shapes
 *  are aligned at the right, missing dimensions count as 1, and each pair
 *  of extents must be equal or one of them 1; the output has the larger
 *  extent of each pair (a [T, T] mask over [B, H, T, T] scores, a [T, D]
 *  table over [B, T, D], a scalar, a column [N, 1]). Each operand's
 *  gradient is summed over the dimensions it was broadcast along.
 *  Errors: SHAPE (shapes that do not broadcast), DTYPE, DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_add(ampx_tensor a, ampx_tensor b, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_sub(ampx_tensor a, ampx_tensor b, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_mul(ampx_tensor a, ampx_tensor b, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_div(ampx_tensor a, ampx_tensor b, ampx_tensor *out);
/** @} */

/** out = x converted to `dtype` as by ampx_tensor_copy, a new tensor also
 *  when `dtype` is x's own (torch's Tensor.to(dtype); with x's dtype,
 *  Tensor.clone()). Unlike ampx_tensor_cast the output is an op output
 *  (owned as described under ampx_scope_push) and, with grad mode on and x
 *  requiring grad, a recorded op: its gradient is the output's gradient
 *  cast back to x's dtype (an F32 x gets an F32 gradient through a BF16
 *  copy), itself recorded under create_graph, so it differentiates again.
 *  Casts between F32, F16 and BF16 are recorded; an integer or FP8 output
 *  is not and does not require grad (as torch's x.to(torch.int32)).
 *  Autocast does not change it. Use ampx_cast in forward code whose
 *  gradients matter, ampx_tensor_cast to convert data outside autograd.
 *  Errors: DTYPE (dtype not an ampx_dtype), INVALID_ARGUMENT (NULL x or
 *  out), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_cast(ampx_tensor x, ampx_dtype dtype, ampx_tensor *out);

/** out = a * scale + shift, element-wise, in a's type ("affine": keep). */
AMPX_NODISCARD AMPX_API ampx_status ampx_affine(ampx_tensor a, double scale, double shift, ampx_tensor *out);

/** @{ */
/** Activations ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh":
 *  keep). gelu is the erf form; gelu_tanh the tanh approximation. */
AMPX_NODISCARD AMPX_API ampx_status ampx_relu(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_gelu(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_gelu_tanh(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_silu(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_sigmoid(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_tanh(ampx_tensor x, ampx_tensor *out);
/** @} */

/** @{ */
/** Element-wise exp, natural log, square root and 1 / square root, with
 *  their backward passes (log' = 1/x, sqrt' = 0.5/sqrt(x), rsqrt' =
 *  -0.5 rsqrt(x)^3). Autocast classes as torch.autocast's on CUDA: "exp",
 *  "log" and "rsqrt" fp32 (under autocast an F16/BF16 input is computed,
 *  and returned, in F32), "sqrt" keep. Outside the domain the IEEE results: log(0) = -inf, NaN for a
 *  negative input to log, sqrt and rsqrt, rsqrt(0) = inf.
 *  Errors: DTYPE (not a floating tensor), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_exp(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_log(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_sqrt(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_rsqrt(ampx_tensor x, ampx_tensor *out);
/** @} */

/** @{ */
/** Sum and mean of all elements, each a one-element tensor, accumulated in
 *  fp32. ampx_sum returns F32 ("sum": fp32). ampx_mean returns x's dtype,
 *  as torch.mean ("mean": keep; it is in neither of torch's autocast lists,
 *  so an F16/BF16 input gives an F16/BF16 mean, under autocast or not): the
 *  fp32 sum times fp32(1 / numel), rounded once to x's dtype (the mean of
 *  no element is NaN). Its gradient, x's dtype, is the output's gradient
 *  times fp32(1 / numel) in fp32, rounded once. */
AMPX_NODISCARD AMPX_API ampx_status ampx_sum(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_mean(ampx_tensor x, ampx_tensor *out);
/** @} */

/** @{ */
/** Softmax / log-softmax over the last dimension ("softmax",
 *  "log_softmax": fp32). */
AMPX_NODISCARD AMPX_API ampx_status ampx_softmax(ampx_tensor x, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_log_softmax(ampx_tensor x, ampx_tensor *out);
/** @} */

/** @{ */
/** Softmax / log-softmax over dimension `dim` (negative counts from the
 *  end), as torch.softmax(x, dim) ("softmax", "log_softmax": fp32).
 *  Errors: INVALID_ARGUMENT (dim outside [-ndim, ndim); x a scalar), DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_softmax_dim(ampx_tensor x, int32_t dim, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_log_softmax_dim(ampx_tensor x, int32_t dim,
                                                         ampx_tensor *out);
/** @} */

/** @{ */
/** Sum, mean and maximum over the `ndims` dimensions listed in dims
 *  (negative count from the end; ndims 0: every dimension), as
 *  torch.sum / torch.mean / torch.amax(x, dim, keepdim): keepdim != 0
 *  keeps them at extent 1, else they are removed. The output has x's dtype
 *  after autocast ("sum": fp32, "mean": keep, "amax": keep); sums are
 *  accumulated in double in a fixed order (the same bits on every run and
 *  on every backend), a mean is that sum rounded to fp32 times
 *  fp32(1 / count). Sums over no element are 0, means NaN. amax propagates
 *  NaN; its gradient is shared evenly among the elements equal to the
 *  maximum (torch.amax's rule).
 *  Errors: INVALID_ARGUMENT (ndims outside 0..ndim, dims NULL with ndims >
 *  0, a dim out of range or named twice), SHAPE (amax over an extent 0),
 *  DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_sum_dims(ampx_tensor x, const int32_t *dims, int32_t ndims,
                                                  int32_t keepdim, ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_mean_dims(ampx_tensor x, const int32_t *dims,
                                                   int32_t ndims, int32_t keepdim,
                                                   ampx_tensor *out);
AMPX_NODISCARD AMPX_API ampx_status ampx_amax(ampx_tensor x, const int32_t *dims, int32_t ndims,
                                              int32_t keepdim, ampx_tensor *out);
/** @} */

/** Loss reductions. A reduced loss is a one-element F32 tensor; an
 *  unreduced one (AMPX_REDUCTION_NONE, torch's reduction='none') is an F32
 *  tensor of one loss per row or element, as each loss says, whose
 *  gradient may be any tensor of that shape. */
typedef enum ampx_reduction {
  AMPX_REDUCTION_MEAN = 1,
  AMPX_REDUCTION_SUM = 2,
  AMPX_REDUCTION_NONE = 3,
  AMPX_REDUCTION_MIN_ENUM = -0x7fffffff - 1, /**< not a reduction (see AMPX_STATUS_MIN_ENUM) */
  AMPX_REDUCTION_MAX_ENUM = 0x7fffffff
} ampx_reduction;

/** Cross-entropy of logits [N, C] against class labels [N] (I32 or I64),
 *  with torch's other shapes too: logits [N, C, d1, ..., dk] against labels
 *  [N, d1, ..., dk] (a loss per position, e.g. per pixel of a segmentation;
 *  the logits are copied with the classes last first), and logits [C]
 *  against a 0-D label. AMPX_REDUCTION_NONE gives the labels' shape, one
 *  loss per label (0 where ignored). Labels equal to ignore_index
 *  contribute nothing and are not counted in
 *  the mean (a mean over no counted label is NaN, as in PyTorch). Other
 *  labels outside [0, C) are AMPX_ERR_INVALID_ARGUMENT, naming the first
 *  one. The labels are checked where they live, without waiting for the
 *  device: on the CPU this call fails; on a GPU it succeeds (its loss and
 *  gradients are then NaN) and the error is reported by the next call on
 *  the context that waits for the device -- ampx_context_synchronize,
 *  ampx_tensor_to_host, ampx_scaler_get_scale and the other readers of
 *  device values -- so a training step needs no host round trip and can be
 *  captured in a CUDA graph. ("cross_entropy": fp32.) */
AMPX_NODISCARD AMPX_API ampx_status ampx_cross_entropy(ampx_tensor logits, ampx_tensor labels,
                                        ampx_reduction reduction, int64_t ignore_index,
                                        ampx_tensor *out);

/** Options of ampx_cross_entropy_ex; fields are only appended. */
typedef struct ampx_cross_entropy_options {
  size_t struct_size;       /**< sizeof(ampx_cross_entropy_options) */
  ampx_reduction reduction; /**< AMPX_REDUCTION_MEAN (default), _SUM or _NONE */
  int64_t ignore_index;     /**< labels equal to it count for nothing (-100) */
  double label_smoothing;   /**< in [0, 1]; 0: none (torch's label_smoothing) */
} ampx_cross_entropy_options;

#define AMPX_CROSS_ENTROPY_OPTIONS_INIT \
  { sizeof(ampx_cross_entropy_options), AMPX_REDUCTION_MEAN, -100, 0.0 }

/** Default options (same as AMPX_CROSS_ENTROPY_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_cross_entropy_options ampx_cross_entropy_options_default(void);

/** ampx_cross_entropy with class weights and label smoothing, as
 *  torch.nn.functional.cross_entropy(logits, labels, weight, ignore_index,
 *  reduction, label_smoothing): in a row labelled y (not ignored), class c
 *  has target mass q_c = (1 - eps) w_y [c == y] + eps / C * w_c and the
 *  row's loss is sum_c q_c (logsumexp - x_c); the mean divides the sum by
 *  the summed w_y of the counted rows (their number without weights).
 *  weight (NULL: all 1) is [C], any floating type (used in fp32), a
 *  constant (no gradient). With no weight and eps 0 this is
 *  ampx_cross_entropy. options NULL: defaults. Labels are checked as there.
 *  Errors: those of ampx_cross_entropy, SHAPE (weight not [C]), DTYPE
 *  (weight not floating), INVALID_ARGUMENT (struct_size too small,
 *  label_smoothing outside [0, 1], reduction). */
AMPX_NODISCARD AMPX_API ampx_status ampx_cross_entropy_ex(ampx_tensor logits, ampx_tensor labels,
                                                          ampx_tensor weight,
                                                          const ampx_cross_entropy_options *options,
                                                          ampx_tensor *out);

/** Mean-squared error between two tensors of one shape ("mse_loss": fp32);
 *  AMPX_REDUCTION_NONE gives each element's squared difference, F32, in
 *  their shape. The result is F32 for every input dtype: each difference
 *  and its square are formed in fp32 from the inputs (f16/bf16 ones too,
 *  never rounded to 16 bits), so it carries fp32's accuracy. This differs
 *  from torch on purpose: torch's mse_loss of f16 or bf16 tensors outside
 *  autocast returns their dtype (under autocast it is fp32 there too).
 *  Gradients, in the inputs' dtype, flow to both.
 *  Errors: SHAPE, DTYPE, DEVICE, INVALID_ARGUMENT (reduction). */
AMPX_NODISCARD AMPX_API ampx_status ampx_mse_loss(ampx_tensor input, ampx_tensor target,
                                   ampx_reduction reduction, ampx_tensor *out);

/** Matrix product with torch.matmul's shapes ("matmul": lower precision):
 *  a [..., M, K] times b [..., K, N] gives [..., M, N], the batch dimensions
 *  (all but the last two) broadcasting as in ampx_add (aligned at the
 *  right, each extent equal or 1). A 1-D a [K] is one row (its M is dropped
 *  from the output), a 1-D b [K] one column (its N is dropped): [K] x [K]
 *  is a 0-D dot product, [M, K] x [K] is [M], [K] x [B, K, N] is [B, N].
 *  Accumulates in fp32. A batch times one matrix ([B, M, K] x [K, N]) is a
 *  single [B*M, K] product; an operand broadcast along some batch
 *  dimensions but not all is copied out to the output's batch first, and
 *  its gradient is summed over those dimensions in fp32, rounded once.
 *  Errors: SHAPE (a 0-D operand, K differs, batches that do not
 *  broadcast, an output too large), DTYPE (a and b differ outside
 *  autocast, not floating), DEVICE (different contexts). */
AMPX_NODISCARD AMPX_API ampx_status ampx_matmul(ampx_tensor a, ampx_tensor b, ampx_tensor *out);

/** Activation fused into ampx_linear. */
typedef enum ampx_activation {
  AMPX_ACTIVATION_NONE = 0,
  AMPX_ACTIVATION_RELU = 1,
  AMPX_ACTIVATION_GELU = 2,
  AMPX_ACTIVATION_MIN_ENUM = -0x7fffffff - 1, /**< not an activation (see AMPX_STATUS_MIN_ENUM) */
  AMPX_ACTIVATION_MAX_ENUM = 0x7fffffff
} ampx_activation;

/** y = act(x W^T + b) ("linear": lower precision): x [..., in], weight
 *  [out, in], bias [out] or NULL. The bias is added in fp32 inside the
 *  matrix product (cuBLASLt's bias epilogue on a GPU), so x W^T + b is
 *  rounded to the compute dtype once. ReLU keeps no pre-activation copy for
 *  backward (its derivative is read from y); GELU (the erf form) keeps
 *  x W^T + b. */
AMPX_NODISCARD AMPX_API ampx_status ampx_linear(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                                 ampx_activation activation, ampx_tensor *out);

/** Layer normalisation over the last dimension ("layer_norm": fp32):
 *  y = (x - mean) / sqrt(var + eps) * weight + bias, with each row's mean
 *  and biased variance computed in fp32 whatever x's type. x [..., D] (at
 *  least one dimension); weight [D] and bias [D] may each be NULL (no
 *  scale, no shift) and outside autocast share x's dtype. The output has
 *  x's shape and the compute dtype. Gradients flow to x, weight and bias.
 *  Errors: SHAPE (x a scalar, weight/bias not [D]), DTYPE, DEVICE,
 *  INVALID_ARGUMENT (eps negative or not finite). */
AMPX_NODISCARD AMPX_API ampx_status ampx_layer_norm(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                                     double eps, ampx_tensor *out);

/** RMS normalisation over the last dimension ("rms_norm": fp32), as
 *  torch.nn.functional.rms_norm(x, (D,), weight, eps): y = x / sqrt(mean(x^2)
 *  + eps) * weight, each row's mean of squares computed in fp32 whatever
 *  x's type. x [..., D] (at least one dimension); weight [D] may be NULL
 *  (no scale) and outside autocast shares x's dtype. Gradients flow to x
 *  and weight. eps has no default here; torch's (eps=None) is float32's
 *  machine epsilon, 2^-23 = 1.1920929e-07, for every input dtype (f16 and
 *  bf16 too, since it normalises in fp32): pass that to match it.
 *  Errors: SHAPE (x a scalar, weight not [D]), DTYPE, DEVICE,
 *  INVALID_ARGUMENT (eps negative or not finite). */
AMPX_NODISCARD AMPX_API ampx_status ampx_rms_norm(ampx_tensor x, ampx_tensor weight, double eps,
                                                  ampx_tensor *out);

/** Batch normalisation of x [N, C] or [N, C, ...] ([N, C, L],
 *  [N, C, H, W], ...; L below is the product of the dimensions after C) per
 *  channel ("batch_norm": keep): y = (x - mean[c]) / sqrt(var[c] + eps) *
 *  weight[c] + bias[c]. weight, bias, running_mean and running_var are
 *  F32 [C] -- also under autocast and for f16/bf16 x: statistics are
 *  computed and kept in fp32, and y has x's dtype. weight and bias may each
 *  be NULL; running_mean and running_var are both given or both NULL.
 *  training != 0: normalises with the batch's mean and biased variance
 *  over N * L values (N * L > 1), and updates the running statistics in
 *  place as torch: r = (1 - momentum) * r + momentum * batch, with the
 *  unbiased variance for running_var (torch's default momentum is 0.1).
 *  training == 0: normalises with the running statistics and changes
 *  nothing (without running statistics, with the batch's, as torch).
 *  Gradients flow to x, weight and bias in both modes (the running
 *  statistics are constants).
 *  Errors: SHAPE (x under 2-D, a parameter not [C], training with
 *  N * L <= 1), DTYPE (x not floating, a parameter or statistic not F32),
 *  DEVICE, INVALID_ARGUMENT (only one running statistic, momentum outside
 *  [0, 1], eps negative or not finite). */
AMPX_NODISCARD AMPX_API ampx_status ampx_batch_norm(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                                     ampx_tensor running_mean, ampx_tensor running_var,
                                     int32_t training, double momentum, double eps,
                                     ampx_tensor *out);

/** Inverted dropout ("dropout": keep): while training, each element is
 *  zeroed with probability p and the others are multiplied by 1 / (1 - p)
 *  (as a product: a dropped NaN or inf gives NaN, as torch). The mask comes
 *  from a counter-based generator (Philox4x32-10) keyed by the context's
 *  seed (ampx_context_options.seed) and numbered by the count of dropout
 *  calls that drew a mask on the context before: a program that repeats
 *  its calls on a context with the same seed gets the same masks, on every
 *  backend and thread count. The gradient is masked by the same mask. With
 *  p == 0 or training == 0 nothing is drawn, the output shares x's memory
 *  (as for ampx_reshape) and the gradient passes unchanged.
 *  Errors: INVALID_ARGUMENT (p not in [0, 1)), DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_dropout(ampx_tensor x, double p, int32_t training, ampx_tensor *out);

/** Rows of a table ("embedding": keep): out[i..., :] = weight[indices[i...],
 *  :] for weight [V, D] (floating) and indices of any shape (I32 or I64),
 *  giving indices' shape + [D] in weight's dtype. The gradient of weight is
 *  the sum of the rows' gradients into the rows they came from (summed in
 *  fp32 in a fixed order: deterministic). indices get no gradient.
 *  Errors: INVALID_ARGUMENT (an index outside [0, V), reported as
 *  ampx_cross_entropy reports a bad label: by this call on the CPU, by the
 *  next call that waits for the device on a GPU, where meanwhile its row
 *  reads as zeros and gets no gradient), SHAPE (weight not 2-D, indices
 *  with AMPX_MAX_DIMS dimensions), DTYPE, DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_embedding(ampx_tensor weight, ampx_tensor indices, ampx_tensor *out);

/** The elements of x with the shape shape[0..ndim-1] ("reshape": keep), in
 *  row-major order; one extent may be -1, inferred from the others. The
 *  output shares x's memory, without a copy: writes through either are
 *  seen by both, and the memory (a wrapped tensor's deleter included) lives
 *  until both are released. Its gradient is copied back to x's shape. Any
 *  dtype.
 *  Errors: SHAPE (another number of elements, two -1, an extent below -1,
 *  a -1 that cannot be inferred, ndim outside 0..AMPX_MAX_DIMS),
 *  INVALID_ARGUMENT (shape NULL with ndim > 0). */
AMPX_NODISCARD AMPX_API ampx_status ampx_reshape(ampx_tensor x, int32_t ndim, const int64_t *shape,
                                  ampx_tensor *out);

/** x with dimensions dim0 and dim1 exchanged, copied into a new contiguous
 *  tensor ("transpose": keep). Negative dims count from the end (-1 is the
 *  last). Any dtype.
 *  Errors: INVALID_ARGUMENT (a dim outside [-ndim, ndim)). */
AMPX_NODISCARD AMPX_API ampx_status ampx_transpose(ampx_tensor x, int32_t dim0, int32_t dim1,
                                    ampx_tensor *out);

/** x with its dimensions reordered, copied into a new contiguous tensor
 *  ("permute": keep), as torch.permute(x, dims).contiguous(): dimension k
 *  of the output is dimension dims[k] of x; dims (ndim entries, negative
 *  counting from the end) is a permutation of x's dimensions. Any dtype.
 *  Errors: INVALID_ARGUMENT (ndim not x's, dims NULL, an entry out of range
 *  or repeated). */
AMPX_NODISCARD AMPX_API ampx_status ampx_permute(ampx_tensor x, int32_t ndim, const int32_t *dims,
                                                 ampx_tensor *out);

/** Splits x along `dim` (negative counts from the end) into `count` pieces
 *  of sizes[0..count-1] elements (which add up to x's extent there), each a
 *  new contiguous tensor written to outs[k] ("split": keep), as
 *  torch.split(x, sizes, dim) followed by .contiguous(). Each piece's
 *  gradient flows back into its slice of x's (zeros for pieces no gradient
 *  reached). outs must hold count handles; on error none is written.
 *  Errors: INVALID_ARGUMENT (count 0, sizes or outs NULL, a negative size,
 *  dim out of range, x a scalar), SHAPE (sizes that do not add up). */
AMPX_NODISCARD AMPX_API ampx_status ampx_split(ampx_tensor x, const int64_t *sizes, size_t count,
                                               int32_t dim, ampx_tensor *outs);

/** Splits x along `dim` into pieces of ceil(extent / chunks) elements, the
 *  last one smaller, as torch.chunk: *count receives how many (at most
 *  `chunks`; `chunks` empty pieces for an extent 0), written to outs, which
 *  must hold `chunks` handles. Otherwise as ampx_split.
 *  Errors: INVALID_ARGUMENT (chunks < 1, outs or count NULL, dim out of
 *  range, x a scalar). */
AMPX_NODISCARD AMPX_API ampx_status ampx_chunk(ampx_tensor x, int32_t chunks, int32_t dim,
                                               ampx_tensor *outs, int32_t *count);

/** Joins tensors[0..count-1] along `dim` ("concat": promote): their shapes
 *  agree except in dim (negative counts from the end), and the output's
 *  extent there is the sum. Floating tensors compute in the widest of their
 *  types; integer tensors must share one. Each input gets the gradient of
 *  its slice.
 *  Errors: INVALID_ARGUMENT (count 0, tensors NULL, dim out of range),
 *  SHAPE (shapes that differ elsewhere, 0-D tensors), DTYPE (floating mixed
 *  with integer, two integer types), DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_concat(const ampx_tensor *tensors, size_t count, int32_t dim,
                                 ampx_tensor *out);

/** x with value written where `mask` is set ("masked_fill": keep), as
 *  torch.Tensor.masked_fill(mask, value): the mask has any dtype (non-zero
 *  -- NaN included -- is set, as a bool of it in torch) and broadcasts to
 *  x's shape (e.g. a [T, T] causal mask over [B, H, T, T] scores); value
 *  is rounded to x's dtype (-inf allowed). The gradient flows to x where
 *  the mask is not set; the mask gets none.
 *  Errors: SHAPE (a mask that does not broadcast to x's shape), DTYPE (x
 *  not floating), DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_masked_fill(ampx_tensor x, ampx_tensor mask, double value,
                                                     ampx_tensor *out);

/** x^exponent element-wise for a number exponent ("pow": fp32), as
 *  torch.pow(x, exponent): C's powf on fp32 (x^0 is 1 even for NaN),
 *  exactly x * x for 2 and sqrt for 0.5. Gradient exponent *
 *  x^(exponent - 1), 0 for exponent 0. Errors: DTYPE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_pow(ampx_tensor x, double exponent, ampx_tensor *out);

/** Rotary position embeddings ("rotary_embedding": keep), as LLaMA-style
 *  models apply them to queries and keys: x [..., T, D] (D even; e.g.
 *  [B, H, T, D]) and tables cos, sin [T, D / 2] (any floating type, one
 *  for both; usually cos(t * theta_i), sin(t * theta_i) with theta_i =
 *  base^(-2i / D)). Pair i of position t, (x_a, x_b), becomes
 *  (x_a cos - x_b sin, x_b cos + x_a sin) with a = i, b = i + D / 2 (the
 *  rotate-half convention of Hugging Face's LLaMA) or, interleaved != 0,
 *  a = 2i, b = 2i + 1 (Meta's original). Computed in fp32, rounded to x's
 *  dtype once. The gradient, the inverse rotation of the output's, flows
 *  to x; the tables get none.
 *  Errors: SHAPE (x not [..., T, D] with D even, a table not [T, D / 2]),
 *  DTYPE (not floating, tables of two dtypes), DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_rotary_embedding(ampx_tensor x, ampx_tensor cos,
                                                          ampx_tensor sin, int32_t interleaved,
                                                          ampx_tensor *out);

/** Binary cross-entropy of logits against targets of the same shape
 *  (torch's binary_cross_entropy_with_logits; "bce_with_logits": fp32), a
 *  one-element F32 tensor: the mean or sum over the elements of
 *  max(x, 0) - x * t + log1p(exp(-|x|)), a form that stays finite and
 *  accurate for any finite logit (AMPX_REDUCTION_NONE: those element
 *  losses, F32, in the logits' shape). The mean of no element is NaN, as torch.
 *  Gradients flow to the logits and, when they require one, to the targets.
 *  Errors: SHAPE, DTYPE, DEVICE, INVALID_ARGUMENT (reduction). */
AMPX_NODISCARD AMPX_API ampx_status ampx_bce_with_logits(ampx_tensor logits, ampx_tensor targets,
                                          ampx_reduction reduction, ampx_tensor *out);

/** Options of ampx_bce_with_logits_ex; fields are only appended. */
typedef struct ampx_bce_with_logits_options {
  size_t struct_size;       /**< sizeof(ampx_bce_with_logits_options) */
  ampx_reduction reduction; /**< AMPX_REDUCTION_MEAN (default), _SUM or _NONE */
} ampx_bce_with_logits_options;

#define AMPX_BCE_WITH_LOGITS_OPTIONS_INIT \
  { sizeof(ampx_bce_with_logits_options), AMPX_REDUCTION_MEAN }

/** Default options (same as AMPX_BCE_WITH_LOGITS_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_bce_with_logits_options ampx_bce_with_logits_options_default(void);

/** ampx_bce_with_logits with torch's `weight` and `pos_weight`, as
 *  torch.nn.functional.binary_cross_entropy_with_logits(logits, targets,
 *  weight, reduction=..., pos_weight=...): element i's loss is
 *  -w_i [p_i t_i log sigmoid(x_i) + (1 - t_i) log(1 - sigmoid(x_i))],
 *  computed (in fp32, F32 result) as w_i [(1 - t) x + (1 + (p - 1) t)
 *  (log1p(exp(-|x|)) - min(x, 0))], which neither overflows nor takes
 *  log(0). weight (NULL: 1) rescales each element's loss; pos_weight (NULL:
 *  1) the positive term, torch's per-class weight: a [C] pos_weight applies
 *  along the last dimension of [..., C] logits. Each broadcasts to the
 *  logits' shape without changing it (aligned at the right, each extent
 *  equal or 1: [C], [N, 1], a 0-D tensor, the full shape), may be of any
 *  floating type (used in fp32), and is a constant (no gradient flows to
 *  it). The mean divides by the number of elements, whatever the weights
 *  (as torch); the mean of no element is NaN. Gradients, in the logits'
 *  and targets' dtype, flow to the logits, w ((1 + (p - 1) t) sigmoid(x) -
 *  p t), and, when they require one, to the targets, w (log sigmoid(-x) -
 *  p log sigmoid(x)) (-w x without pos_weight), each times the output's
 *  gradient (and 1/n for a mean). With NULL weights this is
 *  ampx_bce_with_logits. options NULL: defaults.
 *  Errors: those of ampx_bce_with_logits, SHAPE (a weight that does not
 *  broadcast to the logits' shape), DTYPE (a weight not floating), DEVICE
 *  (a weight of another context), INVALID_ARGUMENT (struct_size too small,
 *  reduction). */
AMPX_NODISCARD AMPX_API ampx_status ampx_bce_with_logits_ex(
    ampx_tensor logits, ampx_tensor targets, ampx_tensor weight, ampx_tensor pos_weight,
    const ampx_bce_with_logits_options *options, ampx_tensor *out);

/** Options of ampx_scaled_dot_product_attention; fields are only appended. */
typedef struct ampx_attention_options {
  size_t struct_size; /**< sizeof(ampx_attention_options) */
  int32_t causal;     /**< non-zero: query i attends to keys j <= i only
                           (torch's is_causal, aligned at the top left) */
  double scale;       /**< score scale; 0 selects 1 / sqrt(head_dim) */
  double dropout_p;   /**< probability of zeroing each attention weight,
                           in [0, 1); applied whenever > 0, as torch */
} ampx_attention_options;

#define AMPX_ATTENTION_OPTIONS_INIT { sizeof(ampx_attention_options), 0, 0.0, 0.0 }

/** Default options (same as AMPX_ATTENTION_OPTIONS_INIT): not causal,
 *  scale 1 / sqrt(head_dim), no dropout. Thread-safe. */
AMPX_API ampx_attention_options ampx_attention_options_default(void);

/** Scaled dot-product attention ("scaled_dot_product_attention": lower
 *  precision), torch.nn.functional.scaled_dot_product_attention's math:
 *  q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] give out
 *  [B, H, Tq, Dv] = softmax(scale * q k^T + mask) v, row by row. As torch,
 *  B may be any number of leading extents (equal in q, k and v) or none:
 *  [H, T, D] is one batch, [T, D] one head. Hkv must
 *  divide H: query head h uses key/value head h / (H / Hkv) (grouped-query
 *  attention, torch's enable_gqa). `mask` (NULL: none) broadcasts to the
 *  scores [B, H, Tq, Tk] (from 2 dimensions to q's; e.g. [Tq, Tk],
 *  [B, 1, 1, Tk]): a floating mask is added to them (use -inf to exclude a
 *  key); an I32 or I64 mask is torch's boolean one, non-zero where the key
 *  takes part (it is turned into an additive F32 copy first).
 *  A row whose every key is excluded gives zeros (and zero gradients), as
 *  torch 2.5 and later do. Dropout (options->dropout_p > 0) zeroes
 *  each weight with that probability and scales the others by 1 / (1 - p);
 *  weight (b, h, i, j) is dropped exactly when ampx_dropout, drawing next on
 *  this context, would drop element (b, h, i, j) of a [B, H, Tq, Tk]
 *  tensor, and it counts as one dropout call.
 *  Softmax statistics and accumulations are fp32; no Tq x Tk matrix is
 *  stored, forward or backward (the backward pass recomputes the weights
 *  from the log-sum-exp the forward keeps, B * H * Tq floats). Gradients
 *  flow to q, k and v; the mask is a constant. D and Dv are at most 256.
 *  On CUDA, f16 and bf16 with D == Dv a multiple of 8 up to 128 (and
 *  16-byte aligned data) run on the tensor cores, the weights rounded to
 *  the inputs' type before they multiply v, as flash attention does; other
 *  cases, or a context made with the environment variable
 *  AMPX_CUDA_ATTENTION=tiled, multiply in fp32 tiles.
 *  options NULL: ampx_attention_options_default().
 *  Errors: SHAPE (under 2 dimensions, an extent 0 -- T = 0 included --,
 *  ranks, leading extents, kv_len or head_dim that disagree, Hkv not
 *  dividing H, D or Dv over 256, a mask that does not broadcast), DTYPE (q,
 *  k or v not floating, a mask neither floating nor I32/I64, q, k and v of different types
 *  outside autocast), DEVICE, INVALID_ARGUMENT (struct_size too small,
 *  dropout_p outside [0, 1), a scale that is not finite, both a mask and
 *  causal: fold the causal part into the mask). */
AMPX_NODISCARD AMPX_API ampx_status ampx_scaled_dot_product_attention(
    ampx_tensor q, ampx_tensor k, ampx_tensor v, ampx_tensor mask,
    const ampx_attention_options *options, ampx_tensor *out);

/** Options of ampx_conv2d; fields are only appended. */
typedef struct ampx_conv2d_options {
  size_t struct_size;  /**< sizeof(ampx_conv2d_options) */
  int64_t stride[2];   /**< rows, columns between windows; each >= 1 (1, 1) */
  int64_t padding[2];  /**< zero rows / columns added on each side; >= 0 (0, 0) */
  int64_t dilation[2]; /**< spacing of the kernel's taps; each >= 1 (1, 1) */
  int64_t groups;      /**< channel groups; divides both channel counts (1);
                            groups == in_channels is a depthwise convolution */
} ampx_conv2d_options;

#define AMPX_CONV2D_OPTIONS_INIT { sizeof(ampx_conv2d_options), {1, 1}, {0, 0}, {1, 1}, 1 }

/** Default options (same as AMPX_CONV2D_OPTIONS_INIT): stride 1, no
 *  padding, no dilation, one group. Thread-safe. */
AMPX_API ampx_conv2d_options ampx_conv2d_options_default(void);

/** 2-D convolution ("conv2d": lower precision), as
 *  torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation,
 *  groups): x [N, C, H, W] (or an unbatched [C, H, W]), weight
 *  [O, C / groups, kh, kw], bias [O] or NULL; out [N, O, OH, OW] with
 *  OH = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1 (rounded down;
 *  likewise OW). Products accumulate in fp32 (f32 tensors: IEEE fp32, or
 *  TF32 where ampx_context_set_tf32 allows it). On the CPU the bias is added before the one rounding to the
 *  output's type; on CUDA (cuDNN 9, loaded at run time) it is added to the
 *  rounded product, as torch's CUDA conv2d does. N may be 0 (an empty
 *  output).
 *  Gradients flow to x, weight and bias. options NULL: defaults.
 *  Errors: SHAPE (x not 3-D or 4-D or without channels, rows or columns;
 *  weight not 4-D; groups not dividing the channels; weight's dimension 1
 *  not C / groups; a kernel larger than the padded input; bias not [O] --
 *  the message gives both shapes; dilation (kh - 1) + 1, H + 2 padding or
 *  another size of the window beyond int64 -- the message names it), DTYPE (not floating, types that differ
 *  outside autocast), DEVICE, INVALID_ARGUMENT (struct_size too small, a
 *  stride or dilation under 1, negative padding, groups under 1),
 *  NOT_SUPPORTED (a backend without convolution: a CUDA context where
 *  cuDNN 9 could not be loaded -- the message lists the paths tried;
 *  libcudnn.so.9, or the file AMPX_CUDNN_LIBRARY names, by the rule of
 *  "Libraries" at the top). */
AMPX_NODISCARD AMPX_API ampx_status ampx_conv2d(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                                                const ampx_conv2d_options *options,
                                                ampx_tensor *out);

/** Options of ampx_max_pool2d and ampx_avg_pool2d; fields are only
 *  appended. */
typedef struct ampx_pool2d_options {
  size_t struct_size;        /**< sizeof(ampx_pool2d_options) */
  int64_t stride[2];         /**< each >= 1; (0, 0) selects the kernel size
                                  (torch's stride=None, the default) */
  int64_t padding[2];        /**< added on each side, at most half the
                                  dilated kernel, (dilation (kernel - 1) +
                                  1) / 2 (0, 0) */
  int64_t dilation[2];       /**< max pooling only; average takes (1, 1) */
  int32_t ceil_mode;         /**< non-zero: output extents round up (a last
                                  window may hang over the edge) (0) */
  int32_t count_include_pad; /**< average only: padding counts in the
                                  divisor (1, as torch) */
  int64_t divisor_override;  /**< average only: divide by this instead
                                  (0: none) */
} ampx_pool2d_options;

#define AMPX_POOL2D_OPTIONS_INIT \
  { sizeof(ampx_pool2d_options), {0, 0}, {0, 0}, {1, 1}, 0, 1, 0 }

/** Default options (same as AMPX_POOL2D_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_pool2d_options ampx_pool2d_options_default(void);

/** Max pooling over kernel_h x kernel_w windows of each channel
 *  ("max_pool2d": keep), as torch.nn.functional.max_pool2d: x [N, C, H, W]
 *  or [C, H, W]; OH = (H + 2 padding - dilation (kernel_h - 1) - 1 +
 *  (ceil_mode ? stride - 1 : 0)) / stride + 1, rounded down, less one when
 *  ceil_mode would start the last window in the right padding (likewise
 *  OW). Padding never wins: the maximum is over the window's elements inside
 *  the image; a NaN wins, and of equal maxima the first (row-major) takes
 *  the gradient. Gradients flow to x. options NULL: defaults.
 *  The cost does not grow with the kernel's extent: the part of each window
 *  inside the image is found in constant time, so a kernel of 2^40 with
 *  padding 2^39 on a 3x3 input costs what a 3x3 kernel does.
 *  Errors: SHAPE (x not 3-D or 4-D or without channels, rows or columns, a
 *  window that does not fit the padded input; dilation (kernel - 1) + 1 or
 *  H + 2 padding beyond int64 -- the message names the expression, and a
 *  dilated kernel beyond int64 is this error, not the padding's), DTYPE,
 *  DEVICE, INVALID_ARGUMENT (struct_size too small, a kernel extent or
 *  stride under 1 -- stride (0, 0) excepted --, dilation under 1, negative
 *  padding or over half the dilated kernel), NOT_SUPPORTED. */
AMPX_NODISCARD AMPX_API ampx_status ampx_max_pool2d(ampx_tensor x, int64_t kernel_h,
                                                    int64_t kernel_w,
                                                    const ampx_pool2d_options *options,
                                                    ampx_tensor *out);

/** Average pooling ("avg_pool2d": keep), as torch.nn.functional.avg_pool2d:
 *  output sizes as ampx_max_pool2d's (dilation 1); each output is the sum
 *  of its window's elements inside the image divided by divisor_override
 *  when set, else by the window's size clipped to the padded image
 *  (count_include_pad) or to the image. Gradients flow to x. options NULL:
 *  defaults. Errors: those of ampx_max_pool2d, INVALID_ARGUMENT (a
 *  dilation other than (1, 1), divisor_override negative), SHAPE (with
 *  count_include_pad and no divisor_override, a divisor min(kernel_h,
 *  H + 2 padding) * min(kernel_w, W + 2 padding) beyond int64). */
AMPX_NODISCARD AMPX_API ampx_status ampx_avg_pool2d(ampx_tensor x, int64_t kernel_h,
                                                    int64_t kernel_w,
                                                    const ampx_pool2d_options *options,
                                                    ampx_tensor *out);

/** Global average pooling, torch's adaptive_avg_pool2d(x, 1): the mean of
 *  each channel over H and W, x [N, C, H, W] -> [N, C, 1, 1] (or [C, H, W]
 *  -> [C, 1, 1]); ampx_mean_dims over the last two dimensions with keepdim
 *  ("mean": keep). Gradients flow to x.
 *  Errors: SHAPE (x not 3-D or 4-D or without channels, rows or columns),
 *  DTYPE, DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_global_avg_pool2d(ampx_tensor x, ampx_tensor *out);

/* ========================================================================== */
/* 12. Training checkpoint files (EXPERIMENTAL)                               */
/* ========================================================================== */

/* A training checkpoint file holds everything needed to resume training bit
 * for bit: tensors (parameters and any other tensors the program names,
 * e.g. batch-norm running statistics) with their names, dtypes, shapes and
 * contents; an optimizer's state (as ampx_optimizer_save_state: masters,
 * moments, step counts, groups, learning rates, hyperparameters); and a
 * loss scaler's state (ampx_scaler_state plus the options it was made
 * with). The context's dropout stream is not saved.
 *
 * Format: little-endian; a header with the magic "AMPXCKPT", the format
 * version and the file size; then sections, each with its own CRC-32C
 * (Castagnoli); then a CRC-32C of the whole file. This library reads and
 * writes format version 1. Its scaler section comes in two layouts: 104
 * bytes, written by this library, with consecutive_hysteresis and
 * clamp_to_max_scale; and 96 bytes, written by libraries from before those
 * options, which this library still reads, as the rule they applied: both
 * options 1. Libraries from before the options refuse a 104-byte scaler
 * section as CORRUPT.
 *
 * Crash safety: the file is written to a temporary file in the same
 * directory (named <path>.tmp-<random hex>), flushed to disk (fsync),
 * renamed over `path`, and the directory is flushed, so a crash or power
 * loss at any instant leaves `path` holding either the old complete file or
 * the new complete one, never a mix. A writer killed before the rename may
 * leave its temporary file behind; such files are never read and may be
 * deleted once no save to that path is running. Windows: FlushFileBuffers and
 * MoveFileExW(MOVEFILE_WRITE_THROUGH); POSIX: rename must be atomic.
 *
 * Both calls use the objects they are given as any other call does: the
 * contexts of the tensors, the optimizer and the scaler must not be in use
 * by another thread during the call. Different paths may be saved and
 * loaded concurrently from threads with separate contexts; two saves to
 * one path at once are safe (the last rename wins), and a load racing a
 * save sees one complete file or the other. */

/** Writes a checkpoint of tensors params[0..count-1], `optimizer` (may be
 *  NULL) and `scaler` (may be NULL) to `path`, replacing it atomically (see
 *  above). The tensors may be of any dtype and device (CUDA tensors are
 *  copied through host memory a piece at a time); count may be 0. The
 *  optimizer's state is held in host memory while the file is written.
 *  Synchronizes with the devices. Only allowed between iterations (every
 *  optimizer READY, see section 7), else AMPX_ERR_ORDER: a checkpoint taken
 *  between step and update would resume with the scale of the previous
 *  iteration. All handles are borrowed.
 *  Errors: INVALID_ARGUMENT (NULL or empty path, NULL params with count >
 *  0); STALE_HANDLE; ORDER; IO (the temporary file cannot be created,
 *  written, flushed or renamed -- `path` is then unchanged and the
 *  temporary file removed; or, after the rename, the directory could not be
 *  flushed -- `path` then holds the new file, which a power loss may undo,
 *  and the message says so); OUT_OF_MEMORY; DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_checkpoint_file_save(const char *path, const ampx_tensor *params,
                                               size_t count, ampx_optimizer optimizer,
                                               ampx_scaler scaler);

/** Restores a checkpoint written by ampx_checkpoint_file_save into live
 *  objects: params[0..count-1] must be the same list (same count and order,
 *  each with the saved name, dtype and shape); `optimizer`, when not NULL,
 *  must be of the saved kind (SGD, Adam or AdamW, with momentum buffers /
 *  amsgrad as saved) over parameters with the saved names, dtypes, shapes
 *  and groups; `scaler`, when not NULL, must be enabled or disabled as
 *  saved. The saved hyperparameters, learning rates and scaler options
 *  replace the live ones (as torch's load_state_dict). Passing NULL for the
 *  optimizer or scaler skips that part of the file (e.g. to evaluate a
 *  model); passing one the file does not hold is INVALID_ARGUMENT.
 *  The whole file is read into host memory and validated -- magic, version,
 *  size, every checksum, every record, and every tensor, the optimizer and
 *  the scaler against the file -- before anything changes; on any error
 *  nothing changes. Tensors end up holding exactly the saved bits, F16/BF16
 *  parameters included (their fp32 masters are restored separately).
 *  Synchronizes with the devices. Only allowed between iterations, else
 *  AMPX_ERR_ORDER. All handles are borrowed.
 *  Errors: INVALID_ARGUMENT (NULL or empty path, NULL params with count >
 *  0; a different model: another tensor count, a name that differs, another
 *  optimizer kind, state buffers, group count, parameter count or group, a
 *  scaler enabled differently, an optimizer or scaler the file lacks -- the
 *  message names the tensor and gives the expected and found values);
 *  SHAPE and DTYPE (a tensor or optimizer parameter whose shape or dtype
 *  differs, named in the message with both values); CORRUPT (not a
 *  checkpoint file, another format version, a truncated or extended file,
 *  a checksum mismatch, an inconsistent record -- the message says which
 *  part); IO (the file cannot be opened or read); STALE_HANDLE; ORDER;
 *  OUT_OF_MEMORY; DEVICE (a device failure while the checked data is being
 *  copied in, the one case that can leave the objects partly restored). */
AMPX_NODISCARD AMPX_API ampx_status ampx_checkpoint_file_load(const char *path, const ampx_tensor *params,
                                               size_t count, ampx_optimizer optimizer,
                                               ampx_scaler scaler);

/** ampx_checkpoint_file_save, plus the state of an FP8 recipe (section
 *  18; NULL for none) in a section of its own: its options and, per slot,
 *  name, role, scale, inverse scale, step amax and amax history. A file
 *  with this section is read by ampx_checkpoint_file_load too, which skips
 *  the section; libraries from before it refuse such a file as CORRUPT.
 *  Errors as ampx_checkpoint_file_save. */
AMPX_NODISCARD AMPX_API ampx_status ampx_checkpoint_file_save_fp8(const char *path,
                                                                  const ampx_tensor *params,
                                                                  size_t count,
                                                                  ampx_optimizer optimizer,
                                                                  ampx_scaler scaler,
                                                                  ampx_fp8_recipe recipe);

/** ampx_checkpoint_file_load, plus the FP8 recipe's state when `recipe` is
 *  not NULL: it must have been created with the saved options (scaling,
 *  format, history length, amax algorithm, margin, power-of-two scales).
 *  Each saved slot is matched by name: a live slot of that name and role
 *  gets the saved state; a saved name the recipe lacks is added as a slot
 *  that autocast takes over at the first use of the weight it belongs to
 *  (its slots' names, see "FP8 under autocast"), so training resumes with
 *  the saved scales and histories. Validated before anything changes, as
 *  the rest of the file.
 *  Errors: as ampx_checkpoint_file_load; INVALID_ARGUMENT also for a file
 *  without a recipe section, other recipe options, or a name whose role
 *  differs. */
AMPX_NODISCARD AMPX_API ampx_status ampx_checkpoint_file_load_fp8(const char *path,
                                                                  const ampx_tensor *params,
                                                                  size_t count,
                                                                  ampx_optimizer optimizer,
                                                                  ampx_scaler scaler,
                                                                  ampx_fp8_recipe recipe);

/* ========================================================================== */
/* 13. Tensor views and gradient hooks (EXPERIMENTAL)                         */
/* ========================================================================== */

/* Views let a program lay many tensors out in one flat buffer (parameters
 * and gradients in buckets, flat optimizer state) and still name each one;
 * gradient hooks tell it when each parameter's gradient is final during
 * backward, so communication can overlap the rest of the pass. */

/** Creates a view: a new tensor of `dtype` and shape shape[0..ndim-1] whose
 *  first element lies `byte_offset` bytes past the first element of `base`,
 *  on base's memory (no copy). Writes through either are seen by both, and
 *  the memory -- a wrapped tensor's deleter and DLPack owner included --
 *  lives until the base and every view of it are released, in any order.
 *  The view must lie wholly inside base's bytes (byte_offset + its byte
 *  size <= base's ampx_tensor_nbytes; an offset near SIZE_MAX is refused,
 *  never wrapped). byte_offset must be a multiple of dtype's size, and the
 *  first element's address aligned to it. Any dtype: a view may reinterpret
 *  base's bytes (an F32 view of I32 bits). A view of a view is a view of
 *  the same memory. In-place writes through a view count as writes to its
 *  base for ampx_backward's check of saved tensors, and the other way round.
 *  A view is a leaf: making it records nothing on the tape, so gradients
 *  do not flow between a view and its base, and its requires_grad (off at
 *  creation), gradient and name are its own. ampx_tensor_data of a view is
 *  its first element; ampx_tensor_to_dlpack exports the allocation's
 *  address as `data` and the view's offset as `byte_offset` (consumers add
 *  them, as DLPack asks). Views may be optimizer parameters and gradients
 *  (ampx_tensor_set_grad); ampx does not check that views given to one
 *  optimizer do not overlap.
 *  Ownership: *out is a new tensor owned by the caller (release it with
 *  ampx_tensor_release); `base` is borrowed and may be released at once;
 *  `shape` is read during the call only.
 *  Threads: as any call on base's context (see the rules at the top).
 *  Errors: SHAPE (the view does not fit inside base; ndim or an extent out
 *  of range; a byte size that overflows); INVALID_ARGUMENT (out or base
 *  NULL, shape NULL with ndim > 0, byte_offset not a multiple of the element
 *  size or an address that is not aligned); DTYPE (not an ampx_dtype);
 *  STALE_HANDLE. On error nothing is created. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_view(ampx_tensor base, size_t byte_offset, ampx_dtype dtype,
                                      int32_t ndim, const int64_t *shape, ampx_tensor *out);

/** A grad-ready hook: told that the gradient of `param` (ampx_tensor_grad)
 *  is final for the running backward pass. `param` is borrowed for the call
 *  (retain it to keep it). Return AMPX_OK, or an error status to stop the
 *  backward pass (ampx_backward then fails with that status). */
typedef ampx_status (*ampx_grad_ready_fn)(void *user_data, ampx_tensor param);

/** Installs `fn` as the context's grad-ready hook, replacing the previous
 *  one; fn NULL removes it. During ampx_backward the hook is called once
 *  for every leaf that received a gradient in that pass (parameters, and
 *  any other tensor with requires_grad set), as soon as the last
 *  accumulation into that gradient has been enqueued, in the order the
 *  pass finishes them (roughly reverse forward order), so a program can
 *  start copying or reducing a gradient while the rest of backward runs.
 *  Gradient accumulation: every ampx_backward notifies again (the gradient
 *  then holds the sum so far). A parameter used several times (a tied
 *  weight) is notified once, after its last use. Parameters that a
 *  checkpointed segment (ampx_checkpoint) reads through its user_data are
 *  notified after the segment's recompute, and any parameter whose last
 *  use comes after (in backward order) the oldest checkpoint the pass
 *  recomputes waits for that recompute too, since the segment might use
 *  it again. On a CUDA context the gradient is complete in stream order:
 *  work the hook enqueues on the context's stream (or a copy to the host,
 *  which synchronizes) sees it.
 *  What the hook may do: read and copy tensors (e.g. ampx_tensor_to_host
 *  of the gradient), write the gradient in place (e.g. average it over
 *  ranks), run ops, which are not recorded (grad mode is off during the
 *  call and restored after it). It must not call ampx_backward or
 *  ampx_grad_ready (refused with AMPX_ERR_ORDER), nor
 *  ampx_set_grad_ready_hook (refused likewise), nor write tensors the rest
 *  of the backward pass reads, nor release objects it does not own.
 *  If the hook returns an error, the backward pass stops with that status;
 *  its message names the hook and the parameter and ends with the message
 *  the hook left in ampx_last_error during the call, if it left one (a
 *  hook that sets none gives just its status). The tape is cleared as for
 *  any failed ampx_backward, and gradients hold what was accumulated before
 *  the stop: zero them before the next step.
 *  Ownership: ampx takes `user_data` and `release` over in every case:
 *  release(user_data), when release is not NULL, is called exactly once --
 *  when the hook is replaced or removed, or when the program releases its
 *  last reference to the context (ampx_context_release; at the latest
 *  when the context is destroyed); and at once, before this call returns,
 *  when fn is NULL or the call fails (so a garbage-collected binding keeps
 *  its closure alive until release and never needs to branch). release runs
 *  on the thread making that call and must not call ampx functions on this
 *  context other than releasing objects.
 *  Threads: the hook runs on the thread that calls ampx_backward (or
 *  ampx_grad_ready), inside that call; as any call on `ctx` otherwise.
 *  Errors: INVALID_ARGUMENT (ctx NULL); STALE_HANDLE (a released context);
 *  ORDER (called while a backward pass or a notification runs on `ctx`: from
 *  a hook, or from a checkpointed segment's recompute). On error the hook
 *  in place stays as it was. */
AMPX_NODISCARD AMPX_API ampx_status ampx_set_grad_ready_hook(ampx_context ctx, ampx_grad_ready_fn fn,
                                              void *user_data,
                                              void (*release)(void *user_data));

/** For engines with their own backward pass: tells the grad-ready hook (and
 *  ampx's other listeners) that `param`'s gradient (ampx_tensor_grad) is
 *  final for this step, exactly as ampx_backward does for its leaves; the
 *  hook runs inside this call, on this thread. The engine calls it once
 *  per parameter per step, when its own backward has written that
 *  gradient (on a CUDA context: enqueued it on the context's stream).
 *  After the program released its last reference to the context there is
 *  no hook, and the call does nothing. `param` is borrowed.
 *  Threads: as any call on param's context.
 *  Errors: INVALID_ARGUMENT (param NULL, or it has no gradient attached);
 *  STALE_HANDLE; ORDER (called from a grad-ready hook, or while
 *  ampx_backward runs on the context); whatever the hook returns, with the
 *  message formed as under ampx_set_grad_ready_hook. */
AMPX_NODISCARD AMPX_API ampx_status ampx_grad_ready(ampx_tensor param);

/* ========================================================================== */
/* 14. Data-parallel training: communicators, gradient all-reduce             */
/*     (EXPERIMENTAL)                                                         */
/* ========================================================================== */

/* One process per device; every process runs the same training loop on its
 * own part of the batch. ampx moves no bytes itself: it uses the host's MPI
 * (CPU contexts) or NCCL (CUDA contexts), found at run time, so libampx
 * loads and runs single-process where neither is installed.
 *
 * An ampx_data_parallel wraps an optimizer: every parameter's gradient
 * becomes a view of a flat bucket; during ampx_backward each bucket is
 * all-reduced as soon as its gradients are final (the grad-ready hooks of
 * section 13), overlapping the rest of the pass, and when ampx_backward
 * returns the gradients are reduced (in stream order on a GPU: no host
 * wait). Another backward before the step adds its part as DDP does: the
 * gradients become the reduced ones plus the average of the new parts.
 * Engines that signal gradients themselves (ampx_grad_ready) complete the
 * reduction with ampx_data_parallel_reduce, or at the first call that
 * reads the gradients (ampx_scaler_unscale, ampx_scaler_step,
 * ampx_clip_grad_*, ampx_optimizer_step, ampx_find_nonfinite_grads). Each
 * unscale MAX-reduces the scaler's found-inf over the
 * ranks, so every rank skips the same steps and its scale stays equal; the
 * optimizer step stays on the device, with no host sync. After each step
 * every rank's parameters are bitwise identical.
 *
 * Collective calls: ampx_comm_from_mpi, ampx_comm_init_nccl and
 * ampx_data_parallel_create, and every call that completes a reduction or
 * reads the wrapped gradients (ampx_backward, ampx_grad_ready,
 * ampx_data_parallel_reduce, ampx_scaler_unscale, ampx_scaler_step,
 * ampx_clip_grad_norm, ampx_clip_grad_value, ampx_optimizer_step,
 * ampx_find_nonfinite_grads), must be made by every rank of the
 * communicator, in the same order.
 *
 * found_inf. Each unscale MAX-reduces the scaler's found-inf over the
 * ranks before anything reads it: what ampx_scaler_found_inf,
 * ampx_optimizer_last_step_taken, the scaler's counters and the doctor's
 * history (ampx_doctor_sample.found_inf) report is that agreed flag, the
 * same on every rank. The doctor's per-parameter findings
 * (first_overflow_param, overflow_params, the statistics) describe this
 * rank's own gradients.
 *
 * No rank left waiting. A check that fails on one rank only is agreed on
 * by every rank before any of them waits on another:
 *  - ampx_data_parallel_create: every rank's own checks (a NULL or
 *    wrong-type optimizer or out, a bad struct_size or option value, a
 *    foreign-context, wrapped or mid-iteration optimizer) travel in its
 *    first exchange; the rank fails with its own message, every other rank
 *    with the same status and a message naming that rank.
 *  - In a training step, a call that fails this rank's own checks (a NULL
 *    or wrong-type scaler, a bad norm_type, max_norm or clip value) still
 *    makes the collectives the other ranks make in it, and carries its
 *    status in the buffers they reduce anyway, adding no host wait: the found-inf reduction of
 *    an unscale (ampx_scaler_unscale, ampx_scaler_step) and, under ZeRO-1,
 *    the partial norms of ampx_clip_grad_norm and the parameters gathered
 *    after the step. There every rank fails the call -- this rank with its
 *    own message, the others with its status, naming the rank and the
 *    status -- and the wrapper is failed on every rank: each later
 *    collective call through it fails at once (ORDER) until it is
 *    released; wrap the optimizer again (after ampx_scaler_attach on every
 *    rank: the failed unscale may have attached the scaler on some ranks
 *    only) or save a checkpoint and end. The parameters, masters, moments
 *    and the scale are as before the call (the gradients may be reduced
 *    and unscaled; under ZeRO-1, a failure carried by the step's gather
 *    leaves the other ranks' parts stepped, the failing rank's part not,
 *    and every replica equal). Where every rank's own call failed alike,
 *    nothing is failed: the call may be retried.
 *  - A call whose only collective is completing the gradient reduction
 *    (ampx_clip_grad_value, ampx_find_nonfinite_grads, and without ZeRO-1
 *    ampx_clip_grad_norm and the step) completes it and fails on this rank
 *    alone; the others go on, so retry the call (the reduction is done) or
 *    end the job.
 *  - An ampx_backward pass that fails on this rank part-way sends the
 *    buckets it did not reach, so the others' reductions complete, and the
 *    failure rides in the iteration's next verdict (an unscale, or ZeRO-1's
 *    norms and gather).
 *  - Checks of state -- the iteration's order (unscale twice, a step
 *    before the unscale), synchronization turned off -- are taken to fail
 *    alike on every rank, as every rank runs the same program: such a call
 *    fails without collectives and changes nothing.
 *  - What no rank can report: a NULL, released or wrong-type handle of the
 *    object that leads to the others -- the communicator (to
 *    ampx_data_parallel_create), the wrapper (to ampx_data_parallel_reduce),
 *    the optimizer of a training-step call, the loss of ampx_backward --
 *    ampx_backward's own argument checks, and a state that differs on one
 *    rank (synchronization left off there). The other ranks then wait
 *    until the communicator's timeout. On a CUDA context, where reading an
 *    agreed status is a host wait, the other ranks do not fail in that
 *    call: the unscale's verdict makes every rank skip the step on the
 *    device, and they fail at their next wait on the communicator or its
 *    timeout.
 * A scaler attached (ampx_scaler_attach) before ampx_data_parallel_create
 * is compared across ranks with the rest of the setup, and tells a rank
 * whose scaler argument is bad what the others do.
 *
 * Timeouts. Nothing waits on a collective longer than the communicator's
 * timeout (ampx_comm_set_timeout, default 600 s): MPI's are started
 * nonblocking and each host wait polls them against it; NCCL's, which the
 * host does not wait for in a step, are watched by a thread that polls an
 * event after each, from when it was enqueued. Past it the communicator fails: its pending collectives
 * are abandoned (ncclCommAbort ends NCCL's; MPI can neither cancel a
 * collective nor, in Open MPI 4.1, revoke a communicator, so ampx keeps
 * the MPI requests and the memory they may still write until the process
 * ends), the call fails with AMPX_ERR_DEVICE and a message naming the
 * collective that timed out, and every later call on the communicator or
 * a wrapper using it fails alike, at once. Calls that need no collective
 * still work, so the program can save a checkpoint
 * (ampx_optimizer_save_state, ampx_checkpoint_file_save) and end -- under
 * MPI without MPI_Finalize, which would wait for the abandoned collective.
 * A rank that dies mid-step under mpirun ends the whole job. */

/** A group of ranks, bound to one context. */
typedef struct ampx_comm_s *ampx_comm;

/** Makes a communicator for a CPU context from the host's MPI communicator:
 *  `mpi_comm` points to an MPI_Comm (e.g. `&comm`; with mpi4py,
 *  `MPI._addressof(comm)`). ampx duplicates it (MPI_Comm_dup), so its
 *  messages never mix with the host's; the host keeps owning its own. The
 *  MPI code lives in the plugin libampx_mpi.so, built against one MPI
 *  implementation: the host must use that same MPI, initialised
 *  (MPI_Init) and not finalized. It is found by the rule of "Libraries" at
 *  the top, with AMPX_MPI_PLUGIN: libampx_mpi.so beside libampx, then by
 *  the dynamic loader's search path (a missing file where AMPX_MPI_PLUGIN
 *  points is NOT_SUPPORTED, even with a plugin beside libampx).
 *  Collective over the MPI communicator.
 *  Ownership: *out is the caller's (ampx_comm_release); it retains ctx.
 *  Threads: MPI is called on the calling thread only; an MPI initialised
 *  with MPI_THREAD_SINGLE or FUNNELED suffices when only that thread calls.
 *  Errors: INVALID_ARGUMENT (a NULL argument; MPI not initialised;
 *  MPI_COMM_NULL); NOT_SUPPORTED (a CUDA context: use NCCL; the plugin or
 *  libmpi cannot be loaded -- the message names what is missing);
 *  STALE_HANDLE; DEVICE (MPI failed). */
AMPX_NODISCARD AMPX_API ampx_status ampx_comm_from_mpi(ampx_context ctx, const void *mpi_comm,
                                                       ampx_comm *out);

/** Makes a communicator for a CUDA context from the host's ncclComm_t
 *  (passed as a pointer, so ampx.h needs no NCCL header). The host keeps
 *  owning it and destroys it after releasing the ampx_comm -- unless ampx
 *  aborted it after a timeout (ampx_comm_set_timeout): ncclCommAbort frees
 *  it, and the host must not destroy it again. It must be on
 *  the context's device. NCCL (libnccl.so.2, then libnccl.so, or the path
 *  AMPX_NCCL_LIBRARY names, by the rule of "Libraries" at the top) is
 *  loaded at run time. Collectives run on the context's
 *  communication stream, ordered with its compute stream by events.
 *  Errors: INVALID_ARGUMENT (NULL); NOT_SUPPORTED (a CPU context: use MPI;
 *  NCCL cannot be loaded); DEVICE (the communicator is on another device);
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_comm_from_nccl(ampx_context ctx, void *nccl_comm,
                                                        ampx_comm *out);

/** The bytes of an NCCL unique id. */
#define AMPX_NCCL_UNIQUE_ID_BYTES 128

/** For hosts without MPI (Go, Rust, an engine): rank 0 makes an NCCL unique
 *  id with this call and sends its AMPX_NCCL_UNIQUE_ID_BYTES bytes to every
 *  other rank by its own means; then every rank calls ampx_comm_init_nccl.
 *  Errors: INVALID_ARGUMENT (id NULL, or bytes not
 *  AMPX_NCCL_UNIQUE_ID_BYTES); NOT_SUPPORTED (NCCL cannot be loaded);
 *  DEVICE. Thread-safe. */
AMPX_NODISCARD AMPX_API ampx_status ampx_nccl_unique_id(void *id, size_t bytes);

/** Makes an NCCL communicator of `world_size` ranks, this process being
 *  `rank`, from the id rank 0 made (ampx_nccl_unique_id); ampx owns it and
 *  destroys it with the ampx_comm. Collective: blocks until every rank has
 *  called it. Errors: INVALID_ARGUMENT (NULL, bytes not
 *  AMPX_NCCL_UNIQUE_ID_BYTES, world_size < 1, rank outside [0, world_size));
 *  NOT_SUPPORTED (a CPU context, or no NCCL); DEVICE (NCCL failed);
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_comm_init_nccl(ampx_context ctx, const void *id,
                                                        size_t bytes, int32_t world_size,
                                                        int32_t rank, ampx_comm *out);

/** *rank and *size receive this process's rank and the number of ranks;
 *  either may be NULL. Errors: INVALID_ARGUMENT (comm NULL), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_comm_rank(ampx_comm comm, int32_t *rank, int32_t *size);

/** The longest the host waits for this communicator's collectives (MPI:
 *  each wait polls them against it) and the longest a collective may stay
 *  incomplete after it was enqueued (NCCL: watched by a thread), before
 *  the communicator fails: its pending collectives are abandoned (NCCL:
 *  ncclCommAbort), the call fails with AMPX_ERR_DEVICE and a message naming
 *  the collective that timed out, and every later call on the communicator
 *  fails so (see Timeouts above). While it waits, ampx polls NCCL's
 *  asynchronous errors. Default 600 s; applies from the next wait on. Not
 *  collective: set the same value on every rank. Errors: INVALID_ARGUMENT
 *  (seconds not finite or <= 0), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_comm_set_timeout(ampx_comm comm, double seconds);

/** Releases the caller's reference; the communicator lives on while a
 *  data-parallel wrapper uses it. Pending collectives are completed first
 *  (within the timeout); a failed communicator's are left abandoned.
 *  NULL is a no-op; a stale handle only sets the last error. */
AMPX_API void ampx_comm_release(ampx_comm comm);

/** An optimizer whose gradients are reduced over a communicator's ranks. */
typedef struct ampx_data_parallel_s *ampx_data_parallel;

/** Options of ampx_data_parallel_create. */
typedef struct ampx_data_parallel_options {
  size_t struct_size;        /**< sizeof(ampx_data_parallel_options) */
  size_t bucket_bytes;       /**< gradient bytes per bucket: 25 MiB (DDP's bucket_cap_mb) */
  size_t first_bucket_bytes; /**< the first bucket of each dtype, reduced first: 1 MiB */
  int32_t average;           /**< non-zero: gradients averaged over ranks (sum / world
                                  size, the division done before the sum, as DDP does);
                                  0: summed. Default 1. */
  int32_t reduce_in_fp32;    /**< non-zero: F16/BF16 gradients are converted to fp32,
                                  reduced in fp32 and rounded back once to their
                                  dtype before the step reads them (under ZeRO-1 too:
                                  each rank's part, so ZeRO-0 and ZeRO-1 step alike,
                                  bit for bit, except that clipping's norm is formed
                                  from the ranks' partial norms); 0 (default):
                                  reduced in their own dtype */
  int32_t overlap;           /**< non-zero (default): buckets are reduced while
                                  backward runs; 0: all after it (for comparison) */
  int32_t zero_stage;        /**< 0 (default): every rank keeps the whole optimizer
                                  state. 1: ZeRO stage 1 -- each bucket is
                                  reduce-scattered, and this rank keeps the fp32
                                  masters and moments of its 1/N of every bucket
                                  only, steps that part, then the updated parameters
                                  are all-gathered into every rank's parameters (a
                                  skipped step gathers the unchanged values). The
                                  optimizer then holds pieces of parameters:
                                  ampx_optimizer_state_tensor and _param_steps are
                                  NOT_SUPPORTED, ampx_optimizer_save_state /
                                  load_state save and load this rank's part (resume
                                  with the same world size), a parameter's own
                                  gradient holds this rank's unreduced sum, and the
                                  optimizer stays sharded after the wrapper is
                                  released. Optimizer memory per parameter: Megatron's
                                  18 -> 6 + 12/N bytes (fp16 params, fp32 grads). */
} ampx_data_parallel_options;

#define AMPX_DATA_PARALLEL_OPTIONS_INIT \
  { sizeof(ampx_data_parallel_options), (size_t)25 << 20, (size_t)1 << 20, 1, 0, 1, 0 }

/** The defaults (the same as AMPX_DATA_PARALLEL_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_data_parallel_options ampx_data_parallel_options_default(void);

/** Wraps `optimizer` for data-parallel training over `comm`. Collective:
 *  every rank calls it with the same setup, which it checks before
 *  anything changes:
 *   - these must be equal on every rank, else every rank fails naming the
 *     first difference and both values ("zero_stage: rank 1 has 1, rank 0
 *     has 0"): the options (bucket_bytes, first_bucket_bytes, and average,
 *     reduce_in_fp32 and overlap as flags, zero_stage); the optimizer's
 *     kind (SGD, Adam, AdamW) and hyperparameters (momentum, dampening,
 *     nesterov, betas, eps, amsgrad, maximize); its param groups, each
 *     group's lr, weight decay and schedule (section 17); whether a scaler
 *     is attached (ampx_scaler_attach) and, if so, its options and state
 *     (scale, growth tracker, hysteresis allowance); and the parameters in
 *     order, with their count, dtypes, shapes and groups ("parameter 1 is
 *     f32[3, 4] on rank 1 but f32[4, 3] on rank 0");
 *   - rank 0's values are broadcast to every rank: the parameters, fp32
 *     master weights, moments, each parameter's step count (Adam's bias
 *     correction) and the optimizer's steps taken (the schedules'
 *     position), so the replicas start bitwise equal whatever each rank
 *     held before.
 *  A rank whose own arguments are wrong makes every rank fail, never a
 *  hang (see "No rank left waiting" above; a bad `comm` is the one case no
 *  rank can report). It then makes the gradient buckets (reverse
 *  parameter order, one dtype per bucket): each parameter's gradient
 *  becomes a view of its bucket (a gradient already attached is copied in
 *  and released). Keep those gradients attached: ampx_optimizer_zero_grad
 *  zeroes them in place; replacing one with ampx_tensor_set_grad makes the
 *  next backward fail (AMPX_ERR_ORDER). A parameter no backward reaches has
 *  a zero gradient, and the optimizer steps it with that, as DDP does.
 *  The optimizer's param groups are fixed from here on
 *  (ampx_optimizer_add_group is refused). options NULL: the defaults.
 *  Ownership: *out is the caller's (ampx_data_parallel_release); it retains
 *  comm and optimizer.
 *  Errors: INVALID_ARGUMENT (a NULL argument; bucket sizes 0; zero_stage
 *  not 0 or 1; an optimizer already wrapped; setups or parameters that
 *  differ across ranks); DEVICE (comm and optimizer of different
 *  contexts, or a communicator that failed); ORDER (the optimizer is
 *  between unscale/step and update); STALE_HANDLE; OUT_OF_MEMORY; any of
 *  these with another rank's status when that rank failed. On error
 *  nothing changed on this rank. */
AMPX_NODISCARD AMPX_API ampx_status ampx_data_parallel_create(
    ampx_comm comm, ampx_optimizer optimizer, const ampx_data_parallel_options *options,
    ampx_data_parallel *out);

/** Gradient accumulation (DDP's no_sync): with sync 0, backward passes only
 *  accumulate, and nothing is communicated; turn it back on (non-zero)
 *  before the last micro-batch's backward, whose pass reduces the sum. Reading the
 *  gradients for an update while it is off (unscale, clip, step) is refused
 *  (AMPX_ERR_ORDER): each rank would step on its own gradients.
 *  Errors: ORDER (turning it off while buckets of the iteration are being
 *  reduced); INVALID_ARGUMENT; STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_data_parallel_set_sync(ampx_data_parallel dp,
                                                                int32_t sync);

/** For engines with their own backward pass: reduces every bucket not yet
 *  reduced and completes the reduction now (gradients signalled one by one
 *  with ampx_grad_ready, section 13, go out as their buckets fill; this
 *  call sends the rest; an engine that signals none reduces everything
 *  here). Collective. Does nothing when the gradients are reduced already
 *  (ampx_backward reduces them as it ends; the first read does the same).
 *  Errors: ORDER (sync off; the wrapper failed, see above); DEVICE (the
 *  communicator failed or timed out); INVALID_ARGUMENT; STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_data_parallel_reduce(ampx_data_parallel dp);

/** FP8 (section 18): makes `dp` MAX-reduce the step amaxes of `recipe`
 *  over the ranks, so that every rank's FP8 scales and amax histories stay
 *  bitwise equal (as Transformer Engine reduces amaxes over its group).
 *  The amaxes ride in the all-reduce of found-inf that ampx_scaler_unscale
 *  makes (no extra collective in a loop with a scaler); where no unscale
 *  came between the step's last quantization and ampx_fp8_recipe_update,
 *  that update reduces them itself (one all-reduce, collective then). A
 *  NaN amax on any rank becomes every rank's. `recipe` is retained until
 *  another is attached, NULL detaches it, or dp is released. Not a
 *  collective itself, but every rank must attach a recipe with the same
 *  slots (autocast adds them in the same order on ranks that run the same
 *  program): each reduction carries every rank's slot count, and on a CPU
 *  context a mismatch fails that reduction (ampx_scaler_unscale's or
 *  ampx_fp8_recipe_update's) on every rank with INVALID_ARGUMENT, naming a
 *  rank with the most slots and one with the fewest, no amax reduced (on
 *  a GPU the counts are not read back: a mismatch is not detected).
 *  Errors: INVALID_ARGUMENT (a recipe another wrapper reduces: detach it
 *  there first), DEVICE (the recipe belongs to another context),
 *  STALE_HANDLE. Nothing changes on error. The context's thread rules
 *  apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_data_parallel_set_fp8_recipe(ampx_data_parallel dp,
                                                                      ampx_fp8_recipe recipe);

/** What ampx_data_parallel_get_stats reports. */
typedef struct ampx_data_parallel_stats {
  size_t struct_size;             /**< set by the caller: sizeof(ampx_data_parallel_stats) */
  int32_t rank, world_size;
  int32_t bucket_count;
  uint64_t bucket_bytes;          /**< gradient buckets and fp32 reduction buffers */
  int32_t buckets_launched;       /**< of the iteration under way, so far */
  int32_t last_launched_early;    /**< of the last reduction: buckets sent before
                                       the gradients were first read (during backward) */
  int64_t reductions;             /**< reductions completed */
  uint64_t optimizer_state_bytes; /**< this rank's fp32 masters and moments */
  int64_t shard_elements;         /**< parameter elements this rank's optimizer
                                       updates: all of them, or its part (ZeRO-1) */
} ampx_data_parallel_stats;

#define AMPX_DATA_PARALLEL_STATS_INIT \
  { sizeof(ampx_data_parallel_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/** Fills *stats (whose struct_size the caller sets; fields beyond it are
 *  not written). Changes nothing; no sync.
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_data_parallel_get_stats(ampx_data_parallel dp,
                                                                 ampx_data_parallel_stats *stats);

/** Releases the wrapper: pending reductions are completed (within the
 *  timeout; not on a failed communicator), the optimizer reads its
 *  gradients as they are from then on, and the gradient views stay
 *  attached to the parameters. NULL is a no-op; a stale handle only sets
 *  the last error. */
AMPX_API void ampx_data_parallel_release(ampx_data_parallel dp);

/* ========================================================================== */
/* 15. The precision doctor: gradient statistics, scale history, findings    */
/*     (EXPERIMENTAL)                                                         */
/* ========================================================================== */

/* A doctor watches one optimizer (and the scaler it is attached to, if
 * any). Every `interval`-th step (steps 1, 1 + interval, ...) it takes, on
 * the device and in the unscale's own pass over the gradients, per
 * parameter: an exponent histogram of the true (unscaled) gradient, its
 * largest magnitude, and which elements are zero, subnormal or infinite in
 * fp16 at the current scale and without loss scaling; around the step, the
 * updates a 16-bit parameter did not take. Every step with a scaler it
 * records (step, scale, skipped, which parameter overflowed first) in a
 * ring on the device. Nothing is read back until a read function below is
 * called, which synchronizes; then the history is diagnosed into findings.
 * With interval 0 the doctor costs nothing.
 *
 * Definitions. For a gradient element x as stored (scaled by the loss scale
 * S) and its true value u = x * (1/S) in fp32 (S = 1 without an enabled
 * scaler): "fp16(v)" is v rounded to fp16 (nearest, ties to even); zero
 * means fp16(v) == 0 (|v| <= 2^-25: exact zeros included -- an fp16
 * gradient that underflowed in the backward is already zero), subnormal
 * 0 < |fp16(v)| < 2^-14, overflow fp16(v) infinite (|v| >= 65520, or v not
 * finite). "Unscaled" fractions are of u, "scaled" ones of x. Fractions are
 * of all the parameter's elements.
 *
 * Thread rules: as the optimizer's (a doctor is used with its optimizer,
 * from one thread at a time). */

typedef struct ampx_doctor_s *ampx_doctor;

/** Histogram bins of |u|: bin 0 is u == 0; bin 1 is 0 < |u| < 2^-64;
 *  bin AMPX_DOCTOR_BIN_BINADE(e) is 2^e <= |u| < 2^(e+1) for e in
 *  [-64, 15]; AMPX_DOCTOR_BIN_HUGE is 2^16 <= |u| < inf (always infinite in
 *  fp16); AMPX_DOCTOR_BIN_NONFINITE holds inf and NaN. fp16's subnormals
 *  are the binades -24..-15, its normals -14..15. */
#define AMPX_DOCTOR_BINS 84
#define AMPX_DOCTOR_BIN_ZERO 0
#define AMPX_DOCTOR_BIN_TINY 1
#define AMPX_DOCTOR_BIN_BINADE(e) (2 + (e) + 64)
#define AMPX_DOCTOR_BIN_HUGE 82
#define AMPX_DOCTOR_BIN_NONFINITE 83

/** Options of ampx_doctor_create. */
typedef struct ampx_doctor_options {
  size_t struct_size; /**< sizeof(ampx_doctor_options) */
  int32_t interval;   /**< sample every interval-th step; 0: off. Default 100. */
  int32_t history;    /**< steps kept in the history ring (the latest); default 4096,
                           at most 16777216 (56 bytes each, device memory) */
} ampx_doctor_options;

#define AMPX_DOCTOR_OPTIONS_INIT \
  { sizeof(ampx_doctor_options), 100, 4096 }

/** The defaults (AMPX_DOCTOR_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_doctor_options ampx_doctor_options_default(void);

/** Attaches a doctor, in context `ctx`, to `optimizer`. options NULL: the
 *  defaults. Statistics
 *  buffers (about 800 bytes per parameter; on a sampled step a copy of the
 *  16-bit parameters and their masters) are made as steps need them: when
 *  memory runs out, that step goes unobserved (the summary counts it) and
 *  training goes on unaffected.
 *  Ownership: *out is the caller's (ampx_doctor_release); it retains the
 *  optimizer.
 *  Errors: INVALID_ARGUMENT (NULL, interval < 0, history outside its range,
 *  the optimizer has a doctor already); DEVICE (the optimizer belongs to
 *  another context); NOT_SUPPORTED (the backend has no gradient
 *  statistics); STALE_HANDLE; OUT_OF_MEMORY. On error nothing changed. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_create(ampx_context ctx, ampx_optimizer optimizer,
                                                       const ampx_doctor_options *options,
                                                       ampx_doctor *out);

/** Changes the sampling interval from the next step (0: off).
 *  Errors: INVALID_ARGUMENT (negative); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_set_interval(ampx_doctor doctor, int32_t interval);

/** What ampx_doctor_examine reports: counts and the latest sample. */
typedef struct ampx_doctor_overview {
  size_t struct_size;    /**< set by the caller: sizeof(ampx_doctor_overview) */
  int64_t steps;         /**< optimizer steps seen */
  int64_t sample_step;   /**< the latest sampled step (0: none yet) */
  double sample_scale;   /**< the loss scale of that step (1 without a scaler) */
  int32_t param_count;   /**< parameters with statistics (ampx_doctor_param_stats) */
  int32_t history_count; /**< entries in the history (at most options.history) */
  int32_t finding_count; /**< findings (ampx_doctor_get_finding) */
  int64_t missed_steps;  /**< steps not observed for lack of memory */
} ampx_doctor_overview;

#define AMPX_DOCTOR_OVERVIEW_INIT \
  { sizeof(ampx_doctor_overview), 0, 0, 0, 0, 0, 0, 0 }

/** Reads the doctor's device state (synchronizes; only when steps were
 *  taken since the last read), diagnoses it and fills *overview (fields
 *  beyond struct_size are not written). The per-parameter statistics,
 *  history and findings the functions below return are those of the
 *  latest read; each of them reads first when steps were taken since.
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small); STALE_HANDLE;
 *  a device error of the training steps. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_examine(ampx_doctor doctor,
                                                        ampx_doctor_overview *overview);

/** One parameter's statistics of the latest sample (ampx_doctor_get_param_stats). */
typedef struct ampx_doctor_param_stats {
  size_t struct_size; /**< set by the caller: sizeof(ampx_doctor_param_stats) */
  int32_t index;      /**< the parameter's index in the optimizer */
  const char *name;   /**< its name ("" if unnamed), owned by the doctor, valid
                           until the next read */
  ampx_dtype param_dtype;
  ampx_dtype grad_dtype;               /**< as stored (AMPX_F32 also when it had no gradient) */
  int64_t elements;                    /**< elements sampled (0: no gradient on that step) */
  int64_t histogram[AMPX_DOCTOR_BINS]; /**< of |u|, see AMPX_DOCTOR_BIN_* */
  double amax;                         /**< max |u| over finite elements */
  double amax_scaled;                  /**< max |x| over finite elements */
  double grad_norm;                    /**< L2 norm of u over finite elements */
  double fp16_zero_unscaled;           /**< fraction with fp16(u) == 0 */
  double fp16_subnormal_unscaled;      /**< fraction with fp16(u) subnormal */
  double fp16_zero_scaled;             /**< fraction with fp16(x) == 0 */
  double fp16_subnormal_scaled;        /**< fraction with fp16(x) subnormal */
  double fp16_overflow_scaled;         /**< fraction with fp16(x) infinite */
  int32_t headroom;                    /**< doublings of the scale left: the largest k with
                                            amax_scaled * 2^k <= 65504 (negative: overflowing) */
  int32_t headroom_unbounded;          /**< 1 when every element is zero (headroom 0 then) */
  double lost_update_fraction;         /**< 16-bit parameters: fraction of elements whose fp32
                                            master changed in the sampled step while the
                                            parameter kept its value (the update was below
                                            half an ulp); -1 for fp32 parameters */
  double lost_without_master_fraction; /**< the same without a master: fraction whose
                                    value p + (new master - old master), rounded to
                                    the parameter's dtype, equals p; -1 for fp32 */
} ampx_doctor_param_stats;

/** Fills *stats with parameter `index`'s statistics of the latest sample.
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small, index outside
 *  [0, param_count)); ORDER (no step sampled yet); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_get_param_stats(ampx_doctor doctor, int32_t index,
                                                                ampx_doctor_param_stats *stats);

/** One step of the history (ampx_doctor_get_history). */
typedef struct ampx_doctor_sample {
  int64_t step;                 /**< the optimizer step, counted from 1 */
  double scale;                 /**< the scale the step's gradients carried */
  int32_t found_inf;            /**< 1: a gradient was not finite (with an enabled
                                     scaler: the step overflowed and was skipped;
                                     data-parallel: on any rank, see section 14) */
  int32_t sampled;              /**< 1: statistics were taken on this step */
  double grad_norm;             /**< sampled steps: L2 norm of the finite true gradients */
  int32_t first_overflow_param; /**< the parameter backward reached first among those
                                     with a non-finite gradient: the highest index
                                     (parameters listed in forward order); -1: none */
  int32_t overflow_params;      /**< parameters with a non-finite gradient */
  double fp16_lost_scaled;      /**< sampled: fraction zero or subnormal in fp16 at the scale */
  double fp16_lost_unscaled;    /**< ... without loss scaling */
} ampx_doctor_sample;

/** Copies up to `capacity` history entries, oldest first, into `samples`
 *  (NULL with capacity 0 to ask), and the number there are into *count.
 *  Without an enabled scaler only sampled steps are recorded.
 *  Errors: INVALID_ARGUMENT (NULL count, NULL samples with capacity > 0,
 *  negative capacity); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_get_history(ampx_doctor doctor,
                                                            ampx_doctor_sample *samples,
                                                            int32_t capacity, int32_t *count);

/** What a finding is. */
typedef enum ampx_doctor_finding_code {
  AMPX_DOCTOR_SCALE_OSCILLATION = 1,              /**< the scale keeps backing off at scales that
                                                       had worked (two or more such overflows) */
  AMPX_DOCTOR_SCALE_AT_MINIMUM = 2,               /**< the scale sits at min_scale and overflows, or
                                                       16+ steps in a row were skipped at the end */
  AMPX_DOCTOR_SCALE_TOO_LOW = 3,                  /**< gradients lost to fp16 underflow while the
                                                       scale could be higher: without a scaler,
                                                       every fp16 gradient zero, or a quarter or
                                                       more zero or subnormal with 1% or more
                                                       subnormal and the largest 2^4 or more below
                                                       fp16's limit; with one, 5% or more non-zero
                                                       gradients lost while the scale is held down
                                                       by one parameter or 2^8 below its limit */
  AMPX_DOCTOR_GRADIENTS_VANISHED = 4,             /**< the gradients were alive (a sample before
                                                       the last quarter with a tenth or more of them
                                                       representable), then 99% or more zero or
                                                       subnormal in fp16 in every sample of the
                                                       last quarter (dead ReLUs, saturated
                                                       units) */
  AMPX_DOCTOR_FINDING_MIN_ENUM = -0x7fffffff - 1, /**< not a code (see AMPX_STATUS_MIN_ENUM) */
  AMPX_DOCTOR_FINDING_MAX_ENUM = 0x7fffffff
} ampx_doctor_finding_code;

/** Its likely cause, from the evidence. */
typedef enum ampx_doctor_cause {
  AMPX_DOCTOR_CAUSE_NONE = 0,
  AMPX_DOCTOR_CAUSE_LEARNING_RATE = 1,          /**< the gradient norm rose 4x or more over the
                                                     sampled clean steps before the overflows; or
                                                     every gradient overflowed whatever the scale
                                                     (the weights blew up); or the gradients died */
  AMPX_DOCTOR_CAUSE_UNSTABLE_OP = 2,            /**< overflows in some parameters only, most of
                                                     them first in one (named), or one parameter's
                                                     gradients 2^12 times the typical ones */
  AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES = 3,        /**< isolated single-step overflows of every
                                                     gradient */
  AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING = 4,        /**< fp16 gradients without a scaler */
  AMPX_DOCTOR_CAUSE_MIN_ENUM = -0x7fffffff - 1, /**< not a cause (see AMPX_STATUS_MIN_ENUM) */
  AMPX_DOCTOR_CAUSE_MAX_ENUM = 0x7fffffff
} ampx_doctor_cause;

/** One finding (ampx_doctor_get_finding). */
typedef struct ampx_doctor_finding {
  size_t struct_size;     /**< set by the caller: sizeof(ampx_doctor_finding) */
  int32_t code;           /**< ampx_doctor_finding_code */
  int32_t cause;          /**< ampx_doctor_cause */
  int32_t param;          /**< the parameter named (unstable op), or -1 */
  const char *param_name; /**< its name, or "" (owned by the doctor, valid until the next read) */
  int64_t first_step;     /**< the first step that shows it */
  int64_t last_step;      /**< the last step that shows it */
  const char *message; /**< one or two English sentences with the evidence (owned as name) */
} ampx_doctor_finding;

/** Fills *finding with finding `index` (most important first).
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small, index outside
 *  [0, finding_count)); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_get_finding(ampx_doctor doctor, int32_t index,
                                                            ampx_doctor_finding *finding);

/** @{ */
/** Static names: "scale_oscillation", ...; "learning_rate", ... ("" for
 *  AMPX_DOCTOR_CAUSE_NONE); NULL for an unknown value. Thread-safe. */
AMPX_API const char *ampx_doctor_finding_code_name(int32_t code);
AMPX_API const char *ampx_doctor_cause_name(int32_t cause);
/** @} */

/** *text receives a one-line summary for logs (steps, the latest sample's
 *  fp16 losses and headroom, overflows, the findings' codes), owned by the
 *  doctor and valid until the next read.
 *  Errors: INVALID_ARGUMENT (NULL); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_summary(ampx_doctor doctor, const char **text);

/** Writes the report -- one self-contained HTML file (inline CSS and SVG, no
 *  script, no network): findings, scale history, and per parameter its
 *  histogram over fp16's range and figures -- to `path` (replaced if it
 *  exists).
 *  Errors: INVALID_ARGUMENT (NULL); IO (the file cannot be written; the
 *  message names the path and the system's reason; a partial file is
 *  removed); STALE_HANDLE. Training is unaffected either way. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_write_report(ampx_doctor doctor, const char *path);

/** Detaches the doctor from its optimizer and releases it. NULL is a
 *  no-op; a stale handle only sets the last error. */
AMPX_API void ampx_doctor_release(ampx_doctor doctor);

/** What FP8 would do to a tensor at a slot's current scale
 *  (ampx_doctor_fp8_inspect), in both formats, so a program sees why a
 *  layer should stay in bf16: a large flushed fraction means the scale is
 *  too small for the tensor's small values, a saturated one that it is
 *  too large (or the amax history lags a growing tensor). */
typedef struct ampx_fp8_tensor_report {
  size_t struct_size;    /**< set by the caller: sizeof(ampx_fp8_tensor_report) */
  int64_t count;         /**< the tensor's non-zero finite elements */
  double flushed_e4m3;   /**< fraction of them x * scale rounds to 0 in E4M3 */
  double saturated_e4m3; /**< fraction beyond 448 (saturated) in E4M3 */
  double flushed_e5m2;   /**< the same in E5M2 */
  double saturated_e5m2; /**< beyond 57344 in E5M2 */
  float scale;           /**< the slot's scale the fractions are for */
  ampx_dtype dtype;      /**< the slot's own format */
} ampx_fp8_tensor_report;

#define AMPX_FP8_TENSOR_REPORT_INIT \
  { sizeof(ampx_fp8_tensor_report), 0, 0.0, 0.0, 0.0, 0.0, 0.0f, (ampx_dtype)0 }

/** Fills *report (whose struct_size the caller sets) for `tensor` (F32,
 *  F16 or BF16, of the recipe's context) quantized with slot `slot`'s
 *  current scale: of its non-zero finite elements, the fractions that
 *  round to zero and that lie beyond the largest finite value, in E4M3 and
 *  in E5M2 (fractions 0 when it has none). Changes nothing; synchronizes.
 *  The slot's amax history comes from ampx_fp8_recipe_slot_get.
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small, slot out of
 *  range), DTYPE, DEVICE (another context), STALE_HANDLE, OUT_OF_MEMORY. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_fp8_inspect(ampx_fp8_recipe recipe, int64_t slot,
                                                            ampx_tensor tensor,
                                                            ampx_fp8_tensor_report *report);

/** *text receives a table of `recipe`'s slots, one line each: name,
 *  format, scale, step amax and the history's maximum and length filled
 *  so far. Owned by the recipe, valid until its next summary or its
 *  release. Synchronizes.
 *  Errors: INVALID_ARGUMENT (NULL), STALE_HANDLE, DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_doctor_fp8_summary(ampx_fp8_recipe recipe,
                                                            const char **text);

/* ========================================================================== */
/* 16. safetensors files (EXPERIMENTAL)                                       */
/* ========================================================================== */

/* safetensors is the file format PyTorch (safetensors.torch), Hugging Face
 * and JAX exchange weights in: an 8-byte little-endian header length N, N
 * bytes of UTF-8 JSON naming each tensor's dtype, shape and byte range,
 * then the data, little-endian and row-major. ampx writes files those
 * libraries read, and reads theirs. A tensor's format dtype "F32", "F16",
 * "BF16", "I32" or "I64" is the ampx_dtype of that name, "F8_E4M3" is
 * AMPX_F8E4M3 and "F8_E5M2" AMPX_F8E5M2; files may list other format
 * dtypes (F64, I8, U8, BOOL, F8_E8M0, ...), which can be listed but not
 * loaded.
 *
 * Validation: ampx_safetensors_open checks the whole header before it
 * returns, against the format's rules: a header length within the file and
 * at most 100,000,000 bytes; valid UTF-8 JSON whose top level is an object;
 * no key twice in any object; per tensor a known dtype, a shape of
 * non-negative integer extents whose byte size does not overflow and equals
 * end - begin of its data_offsets; ranges that tile the data area exactly
 * (each tensor starts where the one before it ends, from byte 0 to the end
 * of the file: nothing overlaps, nothing is left over); "__metadata__", if
 * present, an object of strings, or null, which reads as no metadata (as
 * the reference implementation, PyPI safetensors 0.8, reads it; any other
 * value, and a metadata value that is not a string, null included, is
 * refused, as there); and, against attacks on the parser's
 * memory, nesting at most 32 deep and arrays of at most 1024 elements
 * (real headers nest three deep; their arrays hold a shape or two
 * offsets). A file that breaks any rule is AMPX_ERR_CORRUPT with a message
 * naming the file, the tensor and the rule. What the format allows but ampx
 * cannot hold is AMPX_ERR_NOT_SUPPORTED: more than AMPX_MAX_DIMS
 * dimensions, a NUL character in a name, key or value.
 *
 * Memory: an opened file is mapped into memory (mmap, copy-on-write), not
 * read. On the CPU, ampx_safetensors_load_tensor returns a tensor on the
 * mapping itself (no copy) when the tensor's data is aligned to its element
 * size in the file -- always so for files from ampx and from the reference
 * writer, which pad the header to 8 bytes and order tensors by decreasing
 * element size. Such a tensor holds a reference to the mapping, which stays
 * until the file handle and every such tensor are released, and it is a
 * full tensor: ampx may write to it (an optimizer step), and the written
 * pages become the process's own memory; the file never changes. Like
 * wrapped memory, it does not count in ampx_memory_stats. While mapped, the
 * file must not be truncated or rewritten in place by anyone (reading a
 * truncated mapping raises SIGBUS, as for every mapped file); replacing it
 * by rename, as ampx_safetensors_save does, is safe: the mapping keeps the
 * old file.
 *
 * Threads: a file handle belongs to the context it was opened in, and
 * follows the rules at the top for that context's objects; loads also use
 * the contexts of the tensors they are given. ampx_safetensors_release
 * follows the rule of the other release functions (see the top). Saves
 * to different paths may run concurrently from threads with separate
 * contexts; two saves to one path at once are safe (the last rename wins). */

/** An opened, validated safetensors file (see above). */
typedef struct ampx_safetensors_s *ampx_safetensors;

/** Flag of ampx_safetensors_load_into: convert a tensor whose dtype differs
 *  from the file's (as ampx_tensor_copy converts) instead of refusing it
 *  with AMPX_ERR_DTYPE. */
#define AMPX_SAFETENSORS_CONVERT 1u
/** Flag of ampx_safetensors_load_tensor: always copy, never a tensor on the
 *  mapping (e.g. to let the mapping go with the file handle). */
#define AMPX_SAFETENSORS_COPY 2u

/** Writes tensors[0..count-1] to `path` as a safetensors file, with the
 *  string pairs metadata_keys[i] / metadata_values[i] (i < metadata_count)
 *  as its "__metadata__" (none when metadata_count is 0). Tensor i is named
 *  names[i], or, when `names` is NULL, by its own name (ampx_tensor_set_name).
 *  Names and keys must be unique, non-empty (names) and valid UTF-8; a
 *  tensor may not be named "__metadata__". The tensors may be of any dtype
 *  and device (CUDA tensors are copied through host memory a piece at a
 *  time; synchronizes) and are laid out by decreasing element size, then by
 *  name, behind a header padded with spaces to a multiple of 8 bytes, as the
 *  format's reference writer lays them out; count may be 0. The file is
 *  replaced atomically as by ampx_checkpoint_file_save: written to a
 *  temporary file in the same directory, flushed, renamed over `path`. All
 *  arguments are borrowed for the call.
 *  Errors: INVALID_ARGUMENT (NULL or empty path; NULL tensors, names,
 *  metadata_keys or metadata_values with a non-zero count, or a NULL
 *  string in them; a tensor without a name, a repeated or reserved name, a
 *  repeated key; a string that is not UTF-8); STALE_HANDLE; IO (the
 *  temporary file cannot be created, written, flushed or renamed -- `path`
 *  is then unchanged and the temporary file removed); OUT_OF_MEMORY;
 *  DEVICE; SHAPE (the tensors' bytes add up past 2^63 - 1, as views of one
 *  large base can: no file offset may). */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_save(
    const char *path, const ampx_tensor *tensors, const char *const *names, size_t count,
    const char *const *metadata_keys, const char *const *metadata_values, size_t metadata_count);

/** Opens `path` in `ctx`: maps the file and validates its whole header (see
 *  above). On success *out is a new handle owned by the caller (release it
 *  with ampx_safetensors_release); it holds a reference to `ctx`. Nothing is
 *  read from the data area until a load.
 *  Errors: INVALID_ARGUMENT (NULL ctx, path or out; empty path);
 *  STALE_HANDLE; IO (the file cannot be opened, is not a regular file, or
 *  cannot be mapped); CORRUPT (any rule broken, named in the message);
 *  NOT_SUPPORTED (see above); OUT_OF_MEMORY. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_open(ampx_context ctx, const char *path,
                                                          ampx_safetensors *out);

/** Drops the handle. The mapping goes once no tensor made by
 *  ampx_safetensors_load_tensor without a copy uses it. NULL is a no-op. */
AMPX_API void ampx_safetensors_release(ampx_safetensors file);

/** *count receives the number of tensors in the file.
 *  Errors: INVALID_ARGUMENT (NULL); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_count(ampx_safetensors file, size_t *count);

/** One tensor of a file, as ampx_safetensors_entry_get describes it. */
typedef struct ampx_safetensors_entry {
  size_t struct_size;     /**< set by the caller: sizeof(ampx_safetensors_entry) */
  const char *name;       /**< owned by the handle, valid until it is released */
  ampx_dtype dtype;       /**< 0 when ampx has no such type (see dtype_name) */
  const char *dtype_name; /**< the format's name, "F16"; owned by the handle */
  int32_t ndim;
  int64_t shape[AMPX_MAX_DIMS]; /**< shape[0..ndim-1] */
  uint64_t offset;              /**< of the tensor's first byte, from the file's start */
  uint64_t nbytes;              /**< of its data (0 for an empty tensor) */
} ampx_safetensors_entry;

#define AMPX_SAFETENSORS_ENTRY_INIT \
  { sizeof(ampx_safetensors_entry), NULL, (ampx_dtype)0, NULL, 0, {0}, 0, 0 }

/** Fills *entry (whose struct_size the caller sets; fields beyond it are not
 *  written) with tensor `index` of the file; tensors are numbered in the
 *  order of their data in the file.
 *  Errors: INVALID_ARGUMENT (NULL entry, struct_size too small, index >=
 *  ampx_safetensors_count); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_entry_get(ampx_safetensors file, size_t index,
                                                               ampx_safetensors_entry *entry);

/** *index receives the index of the tensor named `name`.
 *  Errors: INVALID_ARGUMENT (NULL; the file has no tensor of that name, which
 *  the message says); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_find(ampx_safetensors file, const char *name,
                                                          size_t *index);

/** *count receives the number of "__metadata__" entries (0 without any). */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_metadata_count(ampx_safetensors file,
                                                                    size_t *count);

/** *key and *value receive metadata entry `index` (entries ordered by key),
 *  owned by the handle and valid until it is released.
 *  Errors: INVALID_ARGUMENT (NULL; index >= the count); STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_metadata_get(ampx_safetensors file,
                                                                  size_t index, const char **key,
                                                                  const char **value);

/** Loads the file's tensor names[i] into the existing tensors[i], for i <
 *  count (`names` NULL: each tensor's own name). Every pair is checked
 *  before any tensor is written: the name is in the file, the shapes are
 *  equal, and so are the dtypes unless `flags` has AMPX_SAFETENSORS_CONVERT
 *  (then converted as ampx_tensor_copy does); a tensor converted is staged
 *  on its context first, so running out of memory changes nothing.
 *  Tensors may be of any context and device (CUDA: copied from the
 *  mapping; synchronizes). A tensor equal in dtype ends up holding exactly
 *  the file's bits. count may be 0. All handles are borrowed.
 *  Errors: INVALID_ARGUMENT (NULL tensors with count > 0, a NULL name, a
 *  tensor without a name when `names` is NULL, a name the file lacks, an
 *  unknown flag); SHAPE; DTYPE (another dtype without the flag, or a format
 *  dtype ampx lacks); STALE_HANDLE; OUT_OF_MEMORY; DEVICE (a device failure
 *  during the copies, the one case that can leave tensors partly loaded). */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_load_into(ampx_safetensors file,
                                                               const char *const *names,
                                                               const ampx_tensor *tensors,
                                                               size_t count, uint32_t flags);

/** *out receives a new tensor of the file's context (owned by the caller)
 *  holding the tensor named `name`, with the file's dtype and shape, and
 *  named `name`. On a CPU context it is a tensor on the file's mapping (no
 *  copy; see "Memory" above) when the data is aligned to the element size
 *  and `flags` lacks AMPX_SAFETENSORS_COPY; otherwise the data is copied
 *  into new memory of the context (CUDA: synchronizes).
 *  Errors: INVALID_ARGUMENT (NULL; a name the file lacks; an unknown flag);
 *  DTYPE (a format dtype ampx lacks); STALE_HANDLE (also when the program
 *  has released the file's context); OUT_OF_MEMORY; DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_safetensors_load_tensor(ampx_safetensors file,
                                                                 const char *name, uint32_t flags,
                                                                 ampx_tensor *out);

/* ========================================================================== */
/* 17. Learning-rate schedules on the device (EXPERIMENTAL)                   */
/* ========================================================================== */

/* A param group can follow a schedule: a linear warm-up, then a constant
 * rate or a linear, cosine or step decay. The rate of each step is computed
 * on the device, before the update, from the optimizer's count of taken
 * steps, so a step captured in a CUDA graph replays with the rate of its own
 * step and no host call is needed per step. A step the loss scaler skips
 * (inf/NaN gradients) does not advance the count, so it leaves every
 * schedule where it was.
 *
 * With k the optimizer's count of steps taken before this one (0 at the
 * first step), W = warmup_steps, s = warmup_start_factor, base the group's
 * learning rate (set at creation, by ampx_optimizer_add_group or
 * ampx_optimizer_set_lr), j = k - W and T = total_steps - W:
 *
 *   k < W      base * (s + (1 - s) * k / W)
 *   CONSTANT   base
 *   LINEAR     base * (1 + (end_factor - 1) * min(j, T) / T)
 *   COSINE     min_lr + (base - min_lr) * (1 + cos(pi * j / T)) / 2
 *   STEP       base * gamma^floor(j / step_size)
 *
 * These are the closed forms of torch.optim.lr_scheduler's LinearLR
 * (start_factor s, end_factor 1, total_iters W) for the warm-up and of
 * LinearLR (start_factor 1, end_factor, total_iters T), CosineAnnealingLR
 * (T_max T, eta_min min_lr) and StepLR (step_size, gamma) after it, joined
 * as SequentialLR(milestones=[W]) joins them; k is torch's last_epoch when
 * scheduler.step() is called after every optimizer step that was taken.
 * As CosineAnnealingLR, COSINE continues past total_steps as a cosine of
 * period 2T (rising again); LINEAR stays at end_factor * base. Each value is
 * computed in double and rounded once to the fp32 rate the update reads.
 *
 * The count starts at 0 when the optimizer is created and is saved and
 * restored with its state (ampx_optimizer_save_state, checkpoint files),
 * together with each group's schedule. A schedule set after some steps
 * starts at the current count: its warm-up may already be over. */

/** The decay after the warm-up. */
typedef enum ampx_lr_decay {
  AMPX_LR_CONSTANT = 0, /**< the group's rate */
  AMPX_LR_LINEAR = 1,   /**< linear to end_factor * rate at total_steps */
  AMPX_LR_COSINE = 2,   /**< cosine to min_lr at total_steps */
  AMPX_LR_STEP = 3,     /**< times gamma every step_size steps */
  AMPX_LR_DECAY_MIN_ENUM = -0x7fffffff - 1, /**< not a decay (see AMPX_STATUS_MIN_ENUM) */
  AMPX_LR_DECAY_MAX_ENUM = 0x7fffffff       /**< not a decay (see AMPX_STATUS_MAX_ENUM) */
} ampx_lr_decay;

/** A param group's schedule (see the formulas above). Fields a decay does
 *  not use are not checked and read back as their defaults. */
typedef struct ampx_lr_schedule {
  size_t struct_size;         /**< sizeof(ampx_lr_schedule) */
  int64_t warmup_steps;       /**< default 0 (no warm-up); >= 0 */
  double warmup_start_factor; /**< default 0: the first step's rate is
                                   0 with a warm-up; in [0, 1] */
  ampx_lr_decay decay;        /**< default AMPX_LR_CONSTANT */
  int64_t total_steps;        /**< LINEAR, COSINE: the step at which the
                                   decay ends, warm-up included; must be
                                   > warmup_steps. Default 0 */
  double end_factor;          /**< LINEAR: the final fraction of the rate;
                                   default 0; in [0, 1] */
  double min_lr;              /**< COSINE: the final rate (eta_min);
                                   default 0; >= 0, at most FLT_MAX */
  int64_t step_size;          /**< STEP: steps between decays; default 1; > 0 */
  double gamma;               /**< STEP: the factor; default 0.1; in (0, 1] */
} ampx_lr_schedule;

#define AMPX_LR_SCHEDULE_INIT \
  { sizeof(ampx_lr_schedule), 0, 0.0, AMPX_LR_CONSTANT, 0, 0.0, 0.0, 1, 0.1 }

/** Default schedule (as AMPX_LR_SCHEDULE_INIT: the group's constant rate),
 *  for languages without macros. Any thread. */
AMPX_API ampx_lr_schedule ampx_lr_schedule_default(void);

/** Gives `group` of `optimizer` the schedule `schedule` (NULL: the
 *  default, a constant rate) from its next step on; the group's learning
 *  rate is the schedule's base, and ampx_optimizer_set_lr changes the base.
 *  Does not wait for the device: the schedule is written in stream order,
 *  so set it before capturing a CUDA graph of the step (a graph captured
 *  while every group's rate was constant does not compute schedules).
 *  Errors: INVALID_ARGUMENT (a group out of range; a field out of range,
 *  named: negative warm-up, total_steps not above warmup_steps for LINEAR
 *  or COSINE, a factor outside its range, an unknown decay; struct_size
 *  too small), STALE_HANDLE; the optimizer is unchanged on error. Thread
 *  rules: as every call on the optimizer (see the top). */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_set_lr_schedule(ampx_optimizer optimizer,
                                                                   int32_t group,
                                                                   const ampx_lr_schedule *schedule);

/** Writes `group`'s schedule into *out (out->struct_size set by the
 *  caller; fields beyond it are left alone). No device access.
 *  Errors: INVALID_ARGUMENT (NULL, a group out of range, struct_size too
 *  small), STALE_HANDLE. Thread rules: as every call on the optimizer. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_get_lr_schedule(ampx_optimizer optimizer,
                                                                   int32_t group,
                                                                   ampx_lr_schedule *out);

/** *steps receives the number of steps `optimizer` has taken (skipped
 *  steps do not count): the position of its groups' schedules.
 *  Synchronizes with the device. Errors: INVALID_ARGUMENT (NULL),
 *  STALE_HANDLE, DEVICE. Thread rules: as every call on the optimizer. */
AMPX_NODISCARD AMPX_API ampx_status ampx_optimizer_step_count(ampx_optimizer optimizer,
                                                              int64_t *steps);

/** *lr receives the rate `schedule` gives a group of rate `base_lr` when k
 *  = `step` steps were taken before, in double (the device rounds it to
 *  fp32), computed by the same code as the device's. For logging and
 *  tests; touches no optimizer, any thread.
 *  Errors: INVALID_ARGUMENT (NULL schedule or lr, step < 0, base_lr not a
 *  valid rate, a field out of range as in ampx_optimizer_set_lr_schedule). */
AMPX_NODISCARD AMPX_API ampx_status ampx_lr_schedule_value(const ampx_lr_schedule *schedule,
                                                           double base_lr, int64_t step,
                                                           double *lr);

/* ========================================================================== */
/* 18. FP8: casts, scaling recipes, FP8 products (EXPERIMENTAL)               */
/* ========================================================================== */

/* FP8 training after NVIDIA's Transformer Engine: tensors of AMPX_F8E4M3
 * and AMPX_F8E5M2 (section 3), conversions into them with a choice of
 * overflow rule, per-tensor scaling recipes whose state lives on the
 * device, and FP8 matrix products under autocast. Values convert with
 * round to nearest even and keep subnormals; the CPU and the CUDA backend
 * give the same bits (cuda_fp8.h's conversions on the GPU). */

/** What a conversion into FP8 does with a magnitude beyond the format's
 *  largest finite value (E4M3 448, E5M2 57344), infinities included.
 *  Numbers pinned. */
typedef enum ampx_fp8_overflow {
  AMPX_FP8_SATURATE = 1,    /**< +-max (Transformer Engine's casts,
                                 cuda_fp8.h's __NV_SATFINITE, torch's
                                 float8_e4m3fn cast) */
  AMPX_FP8_NO_SATURATE = 2, /**< NaN in E4M3, +-inf in E5M2 (__NV_NOSAT,
                                 torch's float8_e5m2 cast) */
  AMPX_FP8_OVERFLOW_MIN_ENUM = -0x7fffffff - 1, /**< not a rule (see AMPX_STATUS_MIN_ENUM) */
  AMPX_FP8_OVERFLOW_MAX_ENUM = 0x7fffffff /**< not a rule (see AMPX_STATUS_MAX_ENUM) */
} ampx_fp8_overflow;

/** dst = src converted into dst's FP8 type with the overflow rule
 *  `overflow` (ampx_tensor_copy uses each type's torch rule: E4M3
 *  saturates, E5M2 does not). Rounding to nearest even, subnormals kept,
 *  NaN to NaN with its sign. src is F32, F16 or BF16, dst F8E4M3 or
 *  F8E5M2; same context, same number of elements. Enqueued on the
 *  device; no synchronisation.
 *  Errors: INVALID_ARGUMENT (NULL, an unknown rule), DTYPE (types as
 *  above), SHAPE, DEVICE (other contexts), STALE_HANDLE. dst is unchanged
 *  on error. The context's thread rules apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_tensor_copy_fp8(ampx_tensor dst, ampx_tensor src,
                                                         ampx_fp8_overflow overflow);

/* Scaling recipes. FP8's range is narrow (E4M3 spans 2^-9 .. 448), so
 * each tensor is multiplied by a scale before it is rounded to FP8, and a
 * product of FP8 tensors is multiplied back by their inverse scales. A
 * recipe (Transformer Engine's DelayedScaling or Float8CurrentScaling)
 * keeps, per tensor it scales -- a "slot" --, the scale and its inverse,
 * the amax of the current step (the largest |x| quantized into the slot
 * since the last update) and a history of the amaxes of past steps, all in
 * device memory: quantizing and updating never wait for the device.
 *
 * Delayed scaling (the default), with the rules of Transformer Engine's
 * default update (the fused CUDA kernel of common/recipe/delayed_scaling.cu
 * run after the amax reduction, TE 1.x-2.x; not TE's older Python update):
 * a tensor is quantized with the scale the last ampx_fp8_recipe_update
 * computed; each update then, for a slot whose step amax is not 0, puts
 * the step's amax into the slot's history (the last amax_history_len ones)
 * and sets
 *   amax  = the history's maximum taken as fmaxf does: a NaN entry is
 *           skipped (AMPX_FP8_AMAX_MAX), or this step's (MOST_RECENT);
 *   scale = (fp8_max * 2^-margin) / amax -- the scaled maximum formed
 *           first, then one division --, where fp8_max is 448 (E4M3) or
 *           57344 (E5M2); the previous scale when amax is 0, inf or NaN;
 *           FLT_MAX where that quotient is infinite (a tiny amax);
 *   scale_inv = 1 / scale;
 * a slot whose step amax is 0 (nothing non-zero was quantized into it)
 * keeps its history as it was (not rolled) and its scale.
 * Scales start at 1. Current scaling: a tensor is quantized with
 * fp8_max / amax of its own values (1 when that amax is 0 or not finite,
 * FLT_MAX where infinite, optionally rounded down to a power of two),
 * computed on the device just before; updates only keep the histories.
 *
 * Formats: HYBRID (the default) quantizes FORWARD slots (activations,
 * weights) to E4M3 and BACKWARD slots (gradients) to E5M2; E4M3 uses E4M3
 * for both. Quantization saturates (values beyond the format's max become
 * +-max), as Transformer Engine's casts do.
 *
 * Data parallel: attach the recipe to the wrapper
 * (ampx_data_parallel_set_fp8_recipe, section 14) and every rank's step
 * amaxes are MAX-reduced over the ranks before the update, so that their
 * scales stay bitwise equal; a recipe not attached scales each rank by its
 * own amaxes. */
/* ampx_fp8_recipe is declared in section 10. */

/** How a recipe scales. Numbers pinned. */
typedef enum ampx_fp8_scaling {
  AMPX_FP8_DELAYED = 1, /**< from the amax history of past steps (TE's DelayedScaling) */
  AMPX_FP8_CURRENT = 2, /**< from the tensor's own amax (TE's Float8CurrentScaling) */
  AMPX_FP8_SCALING_MIN_ENUM = -0x7fffffff - 1, /**< not a value (see AMPX_STATUS_MIN_ENUM) */
  AMPX_FP8_SCALING_MAX_ENUM = 0x7fffffff /**< not a value (see AMPX_STATUS_MAX_ENUM) */
} ampx_fp8_scaling;

/** Which FP8 type each role gets. Numbers pinned. */
typedef enum ampx_fp8_format {
  AMPX_FP8_HYBRID = 1, /**< E4M3 forward, E5M2 for gradients */
  AMPX_FP8_E4M3 = 2,   /**< E4M3 everywhere */
  AMPX_FP8_FORMAT_MIN_ENUM = -0x7fffffff - 1, /**< not a value (see AMPX_STATUS_MIN_ENUM) */
  AMPX_FP8_FORMAT_MAX_ENUM = 0x7fffffff /**< not a value (see AMPX_STATUS_MAX_ENUM) */
} ampx_fp8_format;

/** Which amax a delayed update scales by. Numbers pinned. */
typedef enum ampx_fp8_amax_algo {
  AMPX_FP8_AMAX_MAX = 1,         /**< the maximum over the history */
  AMPX_FP8_AMAX_MOST_RECENT = 2, /**< the step's own amax */
  AMPX_FP8_AMAX_ALGO_MIN_ENUM = -0x7fffffff - 1, /**< not a value (see AMPX_STATUS_MIN_ENUM) */
  AMPX_FP8_AMAX_ALGO_MAX_ENUM = 0x7fffffff /**< not a value (see AMPX_STATUS_MAX_ENUM) */
} ampx_fp8_amax_algo;

/** What a slot holds, which decides its format. Numbers pinned. */
typedef enum ampx_fp8_role {
  AMPX_FP8_FORWARD = 1,  /**< an activation or a weight */
  AMPX_FP8_BACKWARD = 2, /**< a gradient */
  AMPX_FP8_ROLE_MIN_ENUM = -0x7fffffff - 1, /**< not a value (see AMPX_STATUS_MIN_ENUM) */
  AMPX_FP8_ROLE_MAX_ENUM = 0x7fffffff /**< not a value (see AMPX_STATUS_MAX_ENUM) */
} ampx_fp8_role;

/** Options of ampx_fp8_recipe_create (Transformer Engine's defaults). */
typedef struct ampx_fp8_recipe_options {
  size_t struct_size;                   /**< sizeof(ampx_fp8_recipe_options) */
  ampx_fp8_scaling scaling;             /**< default AMPX_FP8_DELAYED */
  ampx_fp8_format format;               /**< default AMPX_FP8_HYBRID */
  int32_t amax_history_len;             /**< default 1024; >= 1 */
  ampx_fp8_amax_algo amax_compute_algo; /**< default AMPX_FP8_AMAX_MAX */
  int32_t margin;                       /**< default 0; 0 .. 127 (delayed) */
  int32_t power_of_two_scales;          /**< default 0; current scaling only */
} ampx_fp8_recipe_options;

#define AMPX_FP8_RECIPE_OPTIONS_INIT                                                   \
  { sizeof(ampx_fp8_recipe_options), AMPX_FP8_DELAYED, AMPX_FP8_HYBRID, 1024, AMPX_FP8_AMAX_MAX, \
    0, 0 }

/** Default options (as AMPX_FP8_RECIPE_OPTIONS_INIT). Thread-safe. */
AMPX_API ampx_fp8_recipe_options ampx_fp8_recipe_options_default(void);

/** Creates a recipe on `ctx` with no slots (NULL options: the defaults).
 *  *out is owned by the caller (ampx_fp8_recipe_release); it holds a
 *  reference to the context.
 *  Errors: INVALID_ARGUMENT (NULL ctx or out; struct_size too small; an
 *  unknown enum value; amax_history_len < 1; margin outside 0 .. 127 --
 *  the option is named), NOT_SUPPORTED (a backend without FP8
 *  quantization), OUT_OF_MEMORY, STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_create(ampx_context ctx,
                                                           const ampx_fp8_recipe_options *options,
                                                           ampx_fp8_recipe *out);

/** Drops the caller's reference; the recipe goes with the last one
 *  (autocast policies using it hold one). NULL is a no-op. Any thread, as
 *  ampx_tensor_release. */
AMPX_API void ampx_fp8_recipe_release(ampx_fp8_recipe recipe);

/** Adds a slot of `role` named `name` (copied; NULL or "" for none; a
 *  name is unique in the recipe) with scale 1, amax 0 and an empty
 *  history; *slot receives its index (slots are numbered 0, 1, ... in the
 *  order they are added; autocast adds its own too). Device memory comes
 *  64 slots at a time; nothing synchronizes.
 *  Errors: INVALID_ARGUMENT (NULL slot, an unknown role, a name in use),
 *  OUT_OF_MEMORY, STALE_HANDLE. The context's thread rules apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_add_tensor(ampx_fp8_recipe recipe,
                                                               ampx_fp8_role role,
                                                               const char *name, int64_t *slot);

/** *count receives the number of slots. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_slot_count(ampx_fp8_recipe recipe,
                                                               int64_t *count);

/** Quantizes `src` (F32, F16 or BF16) with slot `slot`'s scale into `dst`
 *  (the slot's format: F8E4M3, or F8E5M2 for a BACKWARD slot under
 *  HYBRID; src's element count), saturating, and folds src's amax into the
 *  slot's step amax (a tensor quantized twice in a step counts once, at
 *  its largest). `dst_transposed` (may be NULL; dst may be NULL when it is
 *  not) receives the same values transposed, for the TN layout FP8 GEMMs
 *  need: src is read as a [rows, cols] matrix (cols its last extent, rows
 *  the product of the others) and dst_transposed, of the slot's format and
 *  src's element count, is written [cols, rows] -- cast and transpose in one
 *  pass. Current scaling computes the scale from src first. Enqueued; no
 *  synchronisation.
 *  Errors: INVALID_ARGUMENT (NULL recipe or src, both outputs NULL, slot
 *  out of range), DTYPE (src not F32/F16/BF16, an output not of the slot's
 *  format), SHAPE (element counts differ), DEVICE (another context),
 *  STALE_HANDLE. Nothing changes on error. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_quantize(ampx_fp8_recipe recipe, int64_t slot,
                                                      ampx_tensor src, ampx_tensor dst,
                                                      ampx_tensor dst_transposed);

/** Ends a step for every slot: its amax joins its history and (delayed
 *  scaling) its scale and inverse are recomputed (see above); amaxes start
 *  again from 0. Call it once per training step, after backward (e.g.
 *  beside ampx_scaler_update). Enqueued; no synchronisation. For a recipe
 *  attached to a data-parallel wrapper (ampx_data_parallel_set_fp8_recipe)
 *  whose amaxes no unscale has reduced since the step's last quantization,
 *  a collective: the amaxes are MAX-reduced over the ranks first.
 *  Errors: INVALID_ARGUMENT (NULL), STALE_HANDLE, DEVICE (also: that
 *  reduction's communicator failed or timed out), ORDER (that wrapper
 *  failed earlier); nothing changes on error. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_update(ampx_fp8_recipe recipe);

/** *out receives a new F32 tensor of shape [1] (owned by the caller) that
 *  is slot `slot`'s scale (inverse 0) or inverse scale (inverse != 0) in
 *  the recipe's device memory -- a view, not a copy: it follows every
 *  update, and keeps that memory alive. An engine with its own FP8 GEMM
 *  passes the inverse scales' ampx_tensor_data as the GEMM's A/B scale
 *  pointers (cuBLASLt: CUBLASLT_MATMUL_DESC_A_SCALE_POINTER).
 *  Errors: INVALID_ARGUMENT (NULL, slot out of range), OUT_OF_MEMORY,
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_scale_tensor(ampx_fp8_recipe recipe,
                                                                 int64_t slot, int32_t inverse,
                                                                 ampx_tensor *out);

/** A slot as ampx_fp8_recipe_slot_get reads it. */
typedef struct ampx_fp8_slot_info {
  size_t struct_size;    /**< set by the caller: sizeof(ampx_fp8_slot_info) */
  const char *name;      /**< owned by the recipe, valid while it lives */
  ampx_fp8_role role;
  ampx_dtype dtype;      /**< the slot's format, AMPX_F8E4M3 or AMPX_F8E5M2 */
  float scale;
  float scale_inv;
  float amax;            /**< this step's, not yet in the history */
  int32_t history_len;   /**< the recipe's amax_history_len */
} ampx_fp8_slot_info;

#define AMPX_FP8_SLOT_INFO_INIT \
  { sizeof(ampx_fp8_slot_info), NULL, (ampx_fp8_role)0, (ampx_dtype)0, 0.0f, 0.0f, 0.0f, 0 }

/** Fills *info (whose struct_size the caller sets; fields beyond it are
 *  not written) with slot `slot`, and, when `history` is not NULL, writes
 *  the slot's amax history into history[0 .. capacity-1], oldest first
 *  (the last entry is the most recent update's; entries never filled are
 *  0); capacity must be the history length then. Synchronizes.
 *  Errors: INVALID_ARGUMENT (NULL recipe or info, struct_size too small,
 *  slot out of range, a capacity other than the history length),
 *  STALE_HANDLE, DEVICE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_fp8_recipe_slot_get(ampx_fp8_recipe recipe, int64_t slot,
                                                             ampx_fp8_slot_info *info,
                                                             float *history, int32_t capacity);

/* FP8 under autocast. A policy given a recipe (ampx_autocast_set_fp8)
 * runs linear and matmul in FP8 while it is the innermost region -- unless
 * the op's class is overridden away from AMPX_OP_LOWER_PRECISION -- and
 * every other op as a plain policy of its dtype would:
 *  - forward: the input x (matmul's a) and the weight (matmul's b, a 2-D
 *    tensor; a is [..., M, K]) are quantized with their slots' scales to
 *    E4M3, multiplied in FP8 with fp32 accumulation and their inverse
 *    scales, and the output (and bias, added in fp32) written in the
 *    policy's dtype; a fused activation follows in that dtype;
 *  - backward: the output gradient is quantized to its slot's format (E5M2
 *    under HYBRID) and both products -- dgrad (dx = dy W) and wgrad (dW =
 *    dy^T x) -- run in FP8 with the forward's quantized operands and
 *    scales; gradients come back in the inputs' own dtypes (an F32 weight
 *    gets an F32 gradient), the bias's as the sum of dy. Which gradients
 *    are computed is decided at the forward: an input whose requires_grad
 *    the program turns on between forward and backward gets none from the
 *    product (as torch, whose graph has no edge to it);
 *  - backward with create_graph (section 9): the same formulas as recorded
 *    ops in the policy's dtype (bf16 or f16), not FP8 -- dx = dy W and
 *    dW = dy^T x from the operands themselves (cast to that dtype), not
 *    their quantized copies -- so they can be differentiated again with
 *    respect to both; their values differ from the FP8 backward's by
 *    FP8's rounding. The product then reads x and the weight at backward,
 *    so writing either in place in between is ORDER, as for linear.
 * Slots: per weight tensor, three -- "<name>:input", "<name>:weight",
 * "<name>:grad_output" (name: the weight's name, or "#k" for the k-th
 * unnamed weight the recipe meets) -- added to the recipe at the weight's
 * first use and shared by every use of it: a weight used twice in a step
 * has one history, and the step's amax is the larger of both uses. Call
 * ampx_fp8_recipe_update once per step, after backward.
 * Fallback (documented, not an error): a product with m * n * k below
 * the policy's min_gemm_size, a shape the device's FP8 GEMM does not take (CUDA:
 * m, n and k multiples of 16, 16-byte aligned data), a batched matmul
 * (b not 2-D), or a weight operand that may be an activation -- made by a
 * recorded op, or, with grad mode off, one that does not require gradients
 * (slots are per weight tensor, and an activation is new every step; a
 * frozen weight used with grad mode off therefore runs unquantized) -- runs in the policy's dtype as plain autocast would, and the
 * policy's FP8 statistics count it with the reason. */

/** The default of ampx_autocast_set_fp8's min_gemm_size: 2^33. FP8 loses
 *  to bf16 on small products (torchao measured 0.80x at 1024 x 2048 x 1024
 *  and 1.39x at 4096 x 8192 x 16384 on an H100); ampx's own crossover is
 *  bench/bench_fp8_gpu's to measure. */
#define AMPX_FP8_DEFAULT_MIN_GEMM_SIZE ((int64_t)1 << 33)

/** Makes `autocast` an FP8 policy with `recipe` (borrowed; the policy
 *  holds a reference until it is released or given another), or a plain
 *  one again with recipe NULL. A product whose m * n * k is below
 *  `min_gemm_size` (>= 0; AMPX_FP8_DEFAULT_MIN_GEMM_SIZE is a start) stays
 *  in the policy's dtype. Applies to the ops run after the call, also
 *  while the policy is entered. On error the policy is unchanged.
 *  Errors: INVALID_ARGUMENT (a negative size), DEVICE (the recipe belongs
 *  to another context), STALE_HANDLE, and NOT_SUPPORTED when the context's
 *  device has no FP8 products (a CUDA device below compute capability 8.9;
 *  the message names the device and its capability) -- the program then
 *  keeps the plain bf16 policy. The context's thread rules apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_set_fp8(ampx_autocast autocast,
                                                          ampx_fp8_recipe recipe,
                                                          int64_t min_gemm_size);

/** A policy's FP8 counts (ampx_autocast_fp8_stats). */
typedef struct ampx_fp8_stats {
  size_t struct_size;        /**< set by the caller: sizeof(ampx_fp8_stats) */
  int64_t fp8_products;      /**< linear/matmul calls run in FP8 */
  int64_t fallbacks;         /**< those run in the policy's dtype instead */
  const char *last_fallback; /**< why the last fallback happened ("" for
                                  none); owned by the policy, valid until
                                  its next op or its release */
} ampx_fp8_stats;

#define AMPX_FP8_STATS_INIT { sizeof(ampx_fp8_stats), 0, 0, NULL }

/** Fills *stats (whose struct_size the caller sets; fields beyond it are
 *  not written) with the counts of `autocast` since its creation (zeros
 *  for a policy that never had a recipe). No device access.
 *  Errors: INVALID_ARGUMENT (NULL, struct_size too small), STALE_HANDLE. */
AMPX_NODISCARD AMPX_API ampx_status ampx_autocast_fp8_stats(ampx_autocast autocast,
                                                            ampx_fp8_stats *stats);

/* ========================================================================== */
/* 19. ONNX export (EXPERIMENTAL)                                             */
/* ========================================================================== */

/* A forward pass recorded on the tape, written as an ONNX model for the
 * inference runtimes engines ship (ONNX Runtime, Unity's Inference Engine).
 * Each op knows its ONNX form, as it knows its backward formula; the
 * export walks the records from the named outputs back to the named
 * inputs. Everything else the outputs depend on -- parameters, buffers
 * such as batch norm's running statistics, constants -- becomes an
 * initializer holding its current values.
 *
 * Recording: an op is recorded when grad mode is on and one of its inputs
 * requires grad, so run the forward to export with grad mode on and each
 * input marked with ampx_tensor_set_requires_grad (as an input of
 * torch.onnx's tracer is a traced value). Export before backward (which
 * frees the records) and before popping the scope that owns the outputs.
 *
 * Semantics: the graph computes at inference in fp32 -- its floating
 * inputs, outputs and values are FLOAT whatever dtypes the forward ran in:
 * autocast's casts are dropped, F16 and BF16 tensors are read as FLOAT
 * (ONNX Runtime's CPU provider has no bf16 MatMul and Unity's importer
 * refuses BFLOAT16 initializers), so ONNX Runtime's results match ampx's
 * fp32 forward, not a forward run under autocast. Dropout is the identity;
 * batch norm normalises with its running statistics (a forward in training
 * mode exports as the same model in evaluation mode); a checkpointed
 * segment exports its recomputed ops. An op without an ONNX form, or
 * without one at the chosen opset, is AMPX_ERR_NOT_SUPPORTED naming the op
 * and the opset.
 *
 * Coverage: add/sub/mul/div (broadcasting), affine, relu, gelu (both
 * forms; Gelu from opset 20, decomposed below), silu, sigmoid, tanh,
 * exp, log, sqrt, rsqrt, pow, softmax, log_softmax, sum/mean/amax (all
 * elements or dimensions; axes an attribute below opset 13 for ReduceSum,
 * 18 for the others, an input from there), matmul, linear (Gemm with transB
 * for 2-D inputs, else MatMul and Add; its fused activations), reshape,
 * transpose, permute, concat, split, chunk, embedding (Gather),
 * masked_fill, dropout. */

/** The element type of the exported floating initializers. Numbers pinned. */
typedef enum ampx_onnx_weight_type {
  AMPX_ONNX_WEIGHTS_F32 = 1, /**< FLOAT (F16 and BF16 parameters widened) */
  AMPX_ONNX_WEIGHTS_F16 = 2, /**< FLOAT16, each followed by a Cast to FLOAT
                                  (what Unity's importer and ONNX Runtime's
                                  CPU provider both take); half the bytes */
  AMPX_ONNX_WEIGHT_TYPE_MIN_ENUM = -0x7fffffff - 1, /**< not a type (see AMPX_STATUS_MIN_ENUM) */
  AMPX_ONNX_WEIGHT_TYPE_MAX_ENUM = 0x7fffffff       /**< not a type (see AMPX_STATUS_MAX_ENUM) */
} ampx_onnx_weight_type;

/** Where the initializers' bytes go. Numbers pinned. */
typedef enum ampx_onnx_external_data {
  AMPX_ONNX_EXTERNAL_NEVER = 1,   /**< inside the model; a model beyond
                                       protobuf's 2 GiB is NOT_SUPPORTED */
  AMPX_ONNX_EXTERNAL_BEYOND_2GIB = 2, /**< inside the model, unless it would
                                       pass 2 GiB: then in a file beside it
                                       (ONNX's external-data form) */
  AMPX_ONNX_EXTERNAL_ALWAYS = 3,  /**< always in the file beside the model */
  AMPX_ONNX_EXTERNAL_DATA_MIN_ENUM = -0x7fffffff - 1, /**< not a choice (see AMPX_STATUS_MIN_ENUM) */
  AMPX_ONNX_EXTERNAL_DATA_MAX_ENUM = 0x7fffffff       /**< not a choice (see AMPX_STATUS_MAX_ENUM) */
} ampx_onnx_external_data;

/** Options of ampx_onnx_export (fields only appended). */
typedef struct ampx_onnx_options {
  size_t struct_size;     /**< sizeof(ampx_onnx_options) */
  int32_t opset;          /**< ai.onnx opset, 9 to 23; 0: 17 */
  int32_t ir_version;     /**< the model's IR version; 0: 8, or the IR the
                               opset came with if newer (9 for opsets 19-20,
                               10 for 21-22, 11 for 23). ONNX Runtime 1.15,
                               which godot_rl_agents pins, reads IR 8 and
                               opsets up to 19 */
  const char *batch_dim;  /**< NULL: every shape as exported; else the name
                               of dim 0 of every input and output (a
                               symbolic batch: "batch") -- the shapes the
                               ops record then hold the batch extent as -1
                               in dim 0 only, so the batch must stay in dim 0 */
  int32_t weight_type;    /**< ampx_onnx_weight_type; 0: F32 */
  int32_t external_data;  /**< ampx_onnx_external_data; 0: BEYOND_2GIB. The
                               side file is `path` + ".data" (its name as
                               written in the model: the part after the
                               last '/'), written atomically before the
                               model, 4096-byte aligned */
  const ampx_tensor *constant_outputs;       /**< extra outputs holding these
                                                  tensors' values (Constant
                                                  nodes; ML-Agents'
                                                  version_number and
                                                  memory_size); borrowed */
  const char *const *constant_output_names;  /**< their names */
  size_t constant_output_count;              /**< how many (0: none) */
} ampx_onnx_options;

#define AMPX_ONNX_OPTIONS_INIT { sizeof(ampx_onnx_options), 0, 0, NULL, 0, 0, NULL, NULL, 0 }

/** Default options (same as AMPX_ONNX_OPTIONS_INIT): opset 17, IR 8,
 *  static shapes, F32 weights, external data beyond 2 GiB only, no
 *  constant outputs. Thread-safe. */
AMPX_API ampx_onnx_options ampx_onnx_options_default(void);

/** Writes the recorded computation of outputs[0..output_count-1] from
 *  inputs[0..input_count-1] (see above) to `path` as an ONNX model: graph
 *  inputs named input_names[i], with inputs[i]'s shape and FLOAT (INT32
 *  and INT64 for integer tensors, such as embedding indices); graph
 *  outputs named output_names[i]; then the constant outputs. An output
 *  that is itself one of the inputs passes it through (an Identity: the
 *  godot_rl_agents layout's state_ins -> state_outs). Initializers take
 *  the tensors' own names (ampx_tensor_set_name) where free, and hold their
 *  values at the call. The file is replaced atomically as by
 *  ampx_checkpoint_file_save (a temporary file in the same directory,
 *  flushed, renamed over `path`): on any error no file is left. All
 *  arguments are borrowed for the call; nothing is changed (the tape
 *  included). Synchronizes with the device (initializers are read).
 *  Errors: INVALID_ARGUMENT (NULL or empty path; NULL arrays with a
 *  non-zero count, no outputs; a NULL, empty or repeated name among the
 *  inputs, outputs and constant outputs; an input listed twice; an input
 *  with a gradient attached, which is a parameter (the export makes those
 *  initializers itself); an output that depends on no input -- a forward
 *  not recorded, see above --; an option out of range), STALE_HANDLE (a
 *  tensor released since), DEVICE (tensors of different contexts), ORDER (a
 *  record the outputs need was freed by a backward pass), NOT_SUPPORTED (an
 *  op without a form at the opset, named; an FP8 tensor; a model beyond
 *  2 GiB with AMPX_ONNX_EXTERNAL_NEVER), IO (the file cannot be written;
 *  no file is left), OUT_OF_MEMORY. Threads: the context's rules apply. */
AMPX_NODISCARD AMPX_API ampx_status ampx_onnx_export(const char *path, const ampx_tensor *inputs,
                                                     const char *const *input_names,
                                                     size_t input_count,
                                                     const ampx_tensor *outputs,
                                                     const char *const *output_names,
                                                     size_t output_count,
                                                     const ampx_onnx_options *options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* AMPX_EXPERIMENTAL && !AMPX_H_EXPERIMENTAL */
