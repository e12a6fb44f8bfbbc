// fuzz_api.cpp -- libFuzzer target for the whole C API.
//
// The input is read as a program: a sequence of ampx calls with arguments
// taken from the bytes, over a small pool of handles -- contexts, tensors,
// optimizers, scalers, autocast policies -- that includes NULL, handles of
// the wrong type and handles the program has already released. Contexts
// get allocator hooks that refuse every k-th request (k from the input),
// so out-of-memory paths run too. (Every context has the hooks: ampx's own
// allocator would pass a huge shape's size to aligned_alloc, which ASan and
// libFuzzer stop as an out-of-memory crash before it can return NULL.)
//
// Sizes: extents, kernel sizes, strides, paddings, dilations, groups, split
// sizes and byte offsets are mostly small and sometimes at the edges of
// int64 (2^31, 2^40, 2^62, INT64_MAX, negative), or 8 input bytes taken
// whole, which is how the dictionary's values (fuzz_api.dict) arrive; the
// convolution, pooling, attention, view and split calls get them, on
// tensors of the pool or on new 3-D and 4-D ones (small, or empty with
// extents whose products pass int64). A window the header accepts must
// answer within libFuzzer's -timeout whatever its extent.
//
// What counts as a finding (besides what ASan, UBSan and LeakSanitizer
// report): a status outside the ampx_status values, an output argument
// written by a failed call, a release that the library refuses or accepts
// against what the header says, wrap/DLPack deleters not called exactly
// once, or hook memory still allocated once everything is released.
//
// The harness itself follows the rules a correct program must follow, so
// that what it finds is the library's: it releases only references it
// owns, and keeps every context alive to the end with one tensor of its own
// (released handles then stay in the context's quarantine, where the
// library can recognise them; after the context is gone they would be
// dangling pointers, which no library can detect).
#include <dlpack/dlpack.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ampx/ampx.h"

namespace {

constexpr size_t kMaxCalls = 160;
constexpr size_t kMaxHandles = 48;
constexpr size_t kMaxContexts = 3;
// The hooks refuse larger requests, so huge shapes end as OUT_OF_MEMORY
// instead of tripping libFuzzer's malloc limit.
constexpr size_t kMaxBlock = size_t{1} << 20;

// Host memory aligned for any element type (aligned_alloc wants whole
// multiples of the alignment).
void* host_block(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_api finding: %s (last error: %s)\n", what, ampx_last_error());
  std::abort();
}

struct Memory {
  uint32_t refuse_every = 0;  // 0: never
  uint64_t requests = 0;
  int64_t live = 0;

  static void* alloc(void* user, size_t bytes, size_t alignment) {
    auto& self = *static_cast<Memory*>(user);
    ++self.requests;
    if (bytes > kMaxBlock) return nullptr;
    if (self.refuse_every && self.requests % self.refuse_every == 0) return nullptr;
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (p) ++self.live;
    return p;
  }
  static void release(void* user, void* ptr, size_t) {
    --static_cast<Memory*>(user)->live;
    std::free(ptr);
  }
};

enum class Kind { Tensor, Optimizer, Scaler, Autocast };

struct Handle {
  Kind kind;
  void* ptr;
  size_t ctx;                    // index into State::contexts
  int owned = 0;                 // references the program holds
  int scope = 0;                 // depth of the scope that owns it (0: none)
  int entered = 0;               // autocast regions of this policy open
  bool shares_exported = false;  // imported from an ampx DLPack export
};

struct Context {
  ampx_context handle = nullptr;
  int handle_refs = 0;
  int scopes = 0;
  ampx_tensor anchor = nullptr;
  Memory* memory = nullptr;
};

// A checkpointed segment: what it does is fixed when ampx_checkpoint is
// called, since it runs again in backward.
struct Segment {
  uint8_t mode = 0;
};

struct Deleted {
  int64_t expected = 0;
  int64_t calls = 0;
};

// A DLPack tensor the harness made: its memory and arrays live with it.
struct Made {
  DLManagedTensor managed{};
  int64_t shape[AMPX_MAX_DIMS + 1] = {};
  int64_t strides[AMPX_MAX_DIMS + 1] = {};
  void* memory = nullptr;
  Deleted* deleted = nullptr;
};

void delete_made(DLManagedTensor* m) {
  auto* made = static_cast<Made*>(m->manager_ctx);
  ++made->deleted->calls;
  std::free(made->memory);
  delete made;
}

// `data` may lie one byte into its host_block (a one-byte element type
// accepts any address); the block itself starts at the 64-byte boundary.
void free_wrapped(void* user, void* data) {
  ++static_cast<Deleted*>(user)->calls;
  std::free(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(data) & ~uintptr_t{63}));
}

ampx_status segment_fn(void* user, const ampx_tensor* in, size_t n_in, ampx_tensor* out,
                       size_t n_out) {
  const Segment& s = *static_cast<const Segment*>(user);
  for (size_t i = 0; i < n_out; ++i) {
    ampx_status st = AMPX_OK;
    switch (s.mode % 6) {
      case 0:
        st = n_in ? ampx_relu(in[i % n_in], &out[i]) : AMPX_ERR_INVALID_ARGUMENT;
        break;
      case 1:
        if (n_in) out[i] = in[i % n_in];
        break;  // an input as an output
      case 2:
        return AMPX_ERR_SHAPE;
      case 3:
        return AMPX_OK;  // outputs left unset
      case 4:
        st = n_in ? ampx_linear(in[0], in[(i + 1) % n_in], nullptr, AMPX_ACTIVATION_GELU, &out[i])
                  : AMPX_ERR_INVALID_ARGUMENT;
        break;
      default:
        st = n_in ? ampx_dropout(in[i % n_in], 0.5, 1, &out[i]) : AMPX_OK;
        break;
    }
    if (st != AMPX_OK) return st;
  }
  return AMPX_OK;
}

// The optimizer state format's checksum (FNV-1a over everything before it),
// so that mutated states get past the checksum to the field validation.
uint64_t fnv1a(const unsigned char* data, size_t bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

class Program {
 public:
  explicit Program(const uint8_t* data, size_t size) : in_(data, size) {}

  void run() {
    for (size_t call = 0; call < kMaxCalls && in_.remaining_bytes() > 0; ++call) step();
    finish();
  }

 private:
  FuzzedDataProvider in_;
  std::deque<Memory> memories_;  // outlive the contexts
  std::vector<Context> contexts_;
  std::vector<Handle> handles_;
  std::deque<Segment> segments_;  // checkpoint nodes keep pointers to them
  std::vector<DLManagedTensor*> exported_;
  std::vector<unsigned char> saved_state_;
  Deleted deleted_;

  // ---- the oracles ---------------------------------------------------------

  static ampx_status checked(ampx_status s) {
    if (static_cast<uint32_t>(s) > static_cast<uint32_t>(AMPX_ERR_INTERNAL))
      finding("a status outside ampx_status");
    if (s == AMPX_ERR_INTERNAL) finding("AMPX_ERR_INTERNAL");
    return s;
  }

  // Runs a call with an output argument: a failed call must leave it alone.
  template <class T, class Call>
  ampx_status with_out(T& out, T sentinel, Call call) {
    out = sentinel;
    const ampx_status s = checked(call(&out));
    if (s != AMPX_OK && std::memcmp(&out, &sentinel, sizeof out) != 0)
      finding("a failed call wrote its output argument");
    return s;
  }

  // Whether a void release function refused (it reports through the last
  // error only): a known failure is put there first.
  template <class Call>
  static bool refused(const char* function, Call call) {
    (void)ampx_tensor_retain(nullptr);  // fails on purpose: a known last error
    call();
    return std::strncmp(ampx_last_error(), function, std::strlen(function)) == 0;
  }

  // ---- picking arguments ------------------------------------------------------

  bool chance(int in_256) { return in_.ConsumeIntegral<uint8_t>() < in_256; }

  Handle* pick(Kind kind) {
    std::vector<Handle*> of_kind;
    for (Handle& h : handles_)
      if (h.kind == kind) of_kind.push_back(&h);
    if (of_kind.empty()) return nullptr;
    return of_kind[in_.ConsumeIntegralInRange<size_t>(0, of_kind.size() - 1)];
  }

  // A handle argument of `kind`: usually one of that kind in any state,
  // sometimes NULL or a handle of another type.
  void* pick_arg(Kind kind) {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 12) return nullptr;
    if (r < 24 && !handles_.empty())
      return handles_[in_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)].ptr;
    if (r < 30 && !contexts_.empty())
      return contexts_[in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1)].handle;
    Handle* h = pick(kind);
    return h ? h->ptr : nullptr;
  }

  ampx_tensor tensor() { return static_cast<ampx_tensor>(pick_arg(Kind::Tensor)); }
  ampx_optimizer optimizer() { return static_cast<ampx_optimizer>(pick_arg(Kind::Optimizer)); }
  ampx_scaler scaler() { return static_cast<ampx_scaler>(pick_arg(Kind::Scaler)); }
  ampx_autocast policy() { return static_cast<ampx_autocast>(pick_arg(Kind::Autocast)); }

  ampx_context context() {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 10 || contexts_.empty()) return nullptr;
    if (r < 18 && !handles_.empty())
      return static_cast<ampx_context>(
          handles_[in_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)].ptr);
    return contexts_[in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1)].handle;
  }

  // A value for an ampx enum: mostly small, sometimes the largest. Only
  // values in [0, 0x7fffffff]: the enums' range in C++ (see the report on
  // the *_MAX_ENUM sentinels), beyond which merely holding one is undefined.
  int32_t enum_value() {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    return r < 8 ? 0x7fffffff : r % 10;
  }

  ampx_dtype dtype() {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 8) {
      static const int32_t bad[] = {0, 8, 99, 0x7fffffff};
      return static_cast<ampx_dtype>(bad[r % 4]);
    }
    return static_cast<ampx_dtype>(1 + r % 7);
  }

  // Mostly small extents (zero included, so empty tensors of every shape
  // come up); sometimes ones whose products wrap or pass 2^31, 2^32 or
  // 2^63, and sometimes any int64 (the dictionary, fuzz_api.dict, seeds
  // factors of 2^64 + 1 such as 274177 and 67280421310721).
  int64_t extent() {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 24) {
      static const int64_t large[] = {-1,
                                      -2,
                                      std::numeric_limits<int64_t>::min(),
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::max() - 1,
                                      (int64_t{1} << 31) - 1,
                                      int64_t{1} << 31,
                                      (int64_t{1} << 32) - 1,
                                      int64_t{1} << 32,
                                      (int64_t{1} << 32) + 1,
                                      int64_t{1} << 40,
                                      int64_t{1} << 62,
                                      (int64_t{1} << 62) + 1,
                                      int64_t{3074457345618258603},  // ~2^63 / 3
                                      274177,
                                      67280421310721,
                                      641,
                                      6700417,
                                      int64_t{1} << 21,
                                      int64_t{1} << 43,
                                      65537};
      return large[r % (sizeof large / sizeof large[0])];
    }
    if (r < 32) return in_.ConsumeIntegral<int64_t>();
    static const int64_t small[] = {0, 1, 1, 2, 2, 3, 4, 4, 5, 8};
    return small[r % 10];
  }

  int32_t shape(int64_t* dims) {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    int32_t ndim = r < 4 ? (r < 2 ? -1 : AMPX_MAX_DIMS + 1) : r % 4;
    for (int32_t i = 0; i < AMPX_MAX_DIMS; ++i) dims[i] = i < ndim ? extent() : 1;
    return ndim;
  }

  // Values at the edges of float and double: beyond FLT_MAX (finite as a
  // double, inf as the float a device keeps), below FLT_MIN (0 or
  // subnormal as a float), subnormal doubles, -0, NaN, inf.
  double number() {
    static const double special[] = {0.0,       -0.0,      1.0,      -1.0,      0.5,
                                     2.0,       1e-8,      0.1,      65504.0,   1e38,
                                     3.4e38,    INFINITY,  -INFINITY, NAN,      5e-324,
                                     0.999,     1.0 - 1e-9, 1e300,   -1e300,    1e-50,
                                     1e-40,     1.1754943508222875e-38, 3.4028234663852886e38,
                                     3.4028235677973366e38, 1.7976931348623157e308,
                                     2.2250738585072014e-308, -5e-324, 1e-45};
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 200) return special[r % (sizeof special / sizeof special[0])];
    return in_.ConsumeFloatingPoint<double>();
  }

  // A size argument (see the top comment). Taken whole, 8 bytes are read
  // as an unsigned value and reinterpreted: ConsumeIntegral<int64_t> would
  // add INT64_MIN to the dictionary's little-endian values.
  int64_t size_arg() {
    static const int64_t edges[] = {std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::max() - 1,
                                    std::numeric_limits<int64_t>::min(),
                                    (int64_t{1} << 62) - 1,
                                    int64_t{1} << 62,
                                    (int64_t{1} << 62) + 1,
                                    int64_t{1} << 41,
                                    int64_t{1} << 40,
                                    (int64_t{1} << 40) + 1,
                                    int64_t{1} << 39,
                                    int64_t{1} << 33,
                                    int64_t{1} << 32,
                                    (int64_t{1} << 31) - 1,
                                    int64_t{1} << 31,
                                    int64_t{1} << 21,
                                    int64_t{1} << 20,
                                    int64_t{3074457345618258603},  // ~2^63 / 3
                                    -1,
                                    -2,
                                    0};
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 40) return edges[r % (sizeof edges / sizeof edges[0])];
    if (r < 56) return static_cast<int64_t>(in_.ConsumeIntegral<uint64_t>());
    static const int64_t small[] = {0, 1, 1, 1, 2, 2, 3, 4};
    return small[r % 8];
  }

  int32_t small_int() {
    const uint8_t r = in_.ConsumeIntegral<uint8_t>();
    if (r < 8)
      return r % 2 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
    return static_cast<int32_t>(r % 12) - 4;
  }

  size_t context_index(ampx_context c) const {
    for (size_t i = 0; i < contexts_.size(); ++i)
      if (contexts_[i].handle == c) return i;
    finding("an object of a context the harness does not know");
  }

  // A new reference (or a borrowed op output) enters the pool; past the
  // pool's size an owned one is dropped at once.
  void adopt(Kind kind, void* ptr, bool op_output) {
    if (!ptr) finding("a successful call returned a NULL handle");
    ampx_context c = nullptr;
    if (kind == Kind::Tensor) {
      if (ampx_tensor_context(static_cast<ampx_tensor>(ptr), &c) != AMPX_OK)
        finding("a new tensor is not usable");
    }
    Handle h{kind, ptr, 0};
    h.ctx = kind == Kind::Tensor ? context_index(c) : pending_ctx_;
    Context& owner = contexts_[h.ctx];
    if (op_output && owner.scopes > 0 && owner.handle_refs > 0)
      h.scope = owner.scopes;
    else
      h.owned = 1;
    if (handles_.size() >= kMaxHandles) {
      if (h.owned) release_owned(h);
      return;
    }
    handles_.push_back(h);
  }

  void release_owned(Handle& h) {
    const char* name = h.kind == Kind::Tensor      ? "ampx_tensor_release"
                       : h.kind == Kind::Optimizer ? "ampx_optimizer_release"
                       : h.kind == Kind::Scaler    ? "ampx_scaler_release"
                                                   : "ampx_autocast_release";
    const bool was_refused = refused(name, [&] {
      switch (h.kind) {
        case Kind::Tensor:
          ampx_tensor_release(static_cast<ampx_tensor>(h.ptr));
          break;
        case Kind::Optimizer:
          ampx_optimizer_release(static_cast<ampx_optimizer>(h.ptr));
          break;
        case Kind::Scaler:
          ampx_scaler_release(static_cast<ampx_scaler>(h.ptr));
          break;
        case Kind::Autocast:
          ampx_autocast_release(static_cast<ampx_autocast>(h.ptr));
          break;
      }
    });
    // Only a policy that is still entered may refuse.
    if (was_refused != (h.kind == Kind::Autocast && h.entered > 0))
      finding(was_refused ? "a release of an owned handle was refused"
                          : "an entered autocast policy was released");
    if (!was_refused) --h.owned;
  }

  Handle* find(void* ptr) {
    for (Handle& h : handles_)
      if (h.ptr == ptr) return &h;
    return nullptr;
  }

  // The program's last handle reference closes a context: its scopes and
  // autocast regions end.
  void context_closed(size_t index) {
    for (Handle& h : handles_) {
      if (h.ctx != index) continue;
      h.scope = 0;
      h.entered = 0;
    }
    contexts_[index].scopes = 0;
  }

  // ---- the calls --------------------------------------------------------------

  size_t pending_ctx_ = 0;  // the context of an optimizer/scaler/policy being made

  bool object_context(ampx_context c) {
    for (size_t i = 0; i < contexts_.size(); ++i)
      if (contexts_[i].handle == c && contexts_[i].handle_refs > 0) {
        pending_ctx_ = i;
        return true;
      }
    return false;
  }

  void create_context() {
    if (contexts_.size() >= kMaxContexts) return;
    memories_.emplace_back();
    Memory& memory = memories_.back();
    ampx_context_options o = ampx_context_options_default();
    o.num_threads = chance(16) ? 2 : 1;
    o.seed = in_.ConsumeIntegral<uint8_t>();
    o.allocator = {sizeof(ampx_allocator), &Memory::alloc, &Memory::release, &memory};
    switch (in_.ConsumeIntegral<uint8_t>() % 16) {
      case 0:
        o.struct_size = 4;
        break;
      case 1:
        o.device_type = static_cast<ampx_device_type>(enum_value());
        break;
      case 2:
        o.device_index = small_int();
        break;
      case 3:
        o.num_threads = small_int();
        break;
      case 4:
        o.allocator.free = nullptr;
        break;
      case 5:
        o.cuda_stream = &memory;
        break;
      case 6:
        o.device_type = AMPX_DEVICE_CUDA;
        break;
      default:
        break;
    }
    if (o.num_threads > 2) o.num_threads = 2;
    ampx_context c = nullptr;
    if (with_out(c, ampx_context{},
                 [&](ampx_context* out) { return ampx_context_create(&o, out); }) != AMPX_OK)
      return;
    Context ctx;
    ctx.handle = c;
    ctx.handle_refs = 1;
    ctx.memory = &memory;
    if (ampx_tensor_empty(c, AMPX_F32, 0, nullptr, &ctx.anchor) != AMPX_OK)
      finding("no scalar for a new context");
    memory.refuse_every = chance(64) ? 2 + in_.ConsumeIntegral<uint8_t>() % 40 : 0;
    contexts_.push_back(ctx);
  }

  // The bytes a shape's data takes (something small when the shape is
  // invalid or too large to back with host memory here).
  static size_t host_bytes(ampx_dtype type, int32_t ndim, const int64_t* dims) {
    size_t bytes = ampx_dtype_size(type);
    for (int32_t i = 0; i < ndim && i < AMPX_MAX_DIMS; ++i) {
      if (dims[i] < 0 || dims[i] > 4096) return 16;
      bytes *= static_cast<size_t>(dims[i]);
      if (bytes > kMaxBlock) return 16;
    }
    return bytes;
  }

  alignas(64) static inline unsigned char static_block_[1 << 16];

  void new_tensor() {
    ampx_context c = context();
    int64_t dims[AMPX_MAX_DIMS];
    const ampx_dtype type = dtype();
    const int32_t ndim = shape(dims);
    const int64_t* shape_arg = chance(8) ? nullptr : dims;
    ampx_tensor t = nullptr;
    ampx_status s = AMPX_OK;
    switch (in_.ConsumeIntegral<uint8_t>() % 4) {
      case 0:
        s = with_out(t, ampx_tensor{}, [&](ampx_tensor* out) {
          return ampx_tensor_empty(c, type, ndim, shape_arg, out);
        });
        break;
      case 1:
        s = with_out(t, ampx_tensor{}, [&](ampx_tensor* out) {
          return ampx_tensor_zeros(c, type, ndim, shape_arg, out);
        });
        break;
      case 2: {
        size_t bytes = host_bytes(type, ndim, dims);
        if (chance(16)) bytes += 1;
        std::vector<unsigned char> host = in_.ConsumeBytes<unsigned char>(bytes);
        host.resize(bytes);
        s = with_out(t, ampx_tensor{}, [&](ampx_tensor* out) {
          return ampx_tensor_from_host(c, type, ndim, shape_arg, host.data(), bytes, out);
        });
        break;
      }
      default: {
        size_t bytes = host_bytes(type, ndim, dims);
        // Misaligned only with a size: empty memory is never read.
        const size_t offset = bytes > 0 && chance(16) ? 1 : 0;
        if (chance(96)) {
          // Memory that outlives every tensor needs no deleter.
          if (bytes + offset > sizeof static_block_) bytes = 16;
          s = with_out(t, ampx_tensor{}, [&](ampx_tensor* out) {
            return ampx_tensor_wrap(c, type, ndim, shape_arg, static_block_ + offset, bytes,
                                    nullptr, nullptr, out);
          });
        } else {
          void* block = host_block(bytes + 64);
          s = with_out(t, ampx_tensor{}, [&](ampx_tensor* out) {
            return ampx_tensor_wrap(c, type, ndim, shape_arg, static_cast<char*>(block) + offset,
                                    bytes, &free_wrapped, &deleted_, out);
          });
          if (s == AMPX_OK && offset != 0 && ampx_dtype_size(type) > 1)
            finding("memory not aligned to the element was wrapped");
          if (s == AMPX_OK)
            ++deleted_.expected;
          else
            std::free(block);  // a failed wrap leaves the memory the caller's
        }
        break;
      }
    }
    if (s == AMPX_OK) adopt(Kind::Tensor, t, false);
  }

  std::vector<Made*> orphans_;

  // A new tensor of `ndim` dimensions: extents 1 .. max_extent, sometimes
  // 0 or a size_arg (an empty tensor may have any others), values from the
  // input, on context `context` (an index; the last one made by default);
  // it joins the pool (NULL when it could not be made). `given`, when not
  // NULL, fixes the extents instead.
  ampx_tensor fresh(int32_t ndim, int64_t max_extent, const int64_t* given = nullptr,
                    size_t context = SIZE_MAX) {
    if (contexts_.empty()) return nullptr;
    Context& c = contexts_[context == SIZE_MAX ? contexts_.size() - 1 : context % contexts_.size()];
    if (c.handle_refs == 0) return nullptr;
    int64_t dims[AMPX_MAX_DIMS] = {};
    for (int32_t i = 0; i < ndim; ++i) {
      if (given) {
        dims[i] = given[i];
        continue;
      }
      const uint8_t r = in_.ConsumeIntegral<uint8_t>();
      dims[i] = r < 12 ? 0 : r < 24 ? size_arg() : 1 + r % max_extent;
    }
    static const ampx_dtype types[] = {AMPX_F32, AMPX_F32, AMPX_F16, AMPX_BF16, AMPX_I32};
    const ampx_dtype type = types[in_.ConsumeIntegral<uint8_t>() % 5];
    const size_t bytes = host_bytes(type, ndim, dims);
    std::vector<unsigned char> host = in_.ConsumeBytes<unsigned char>(bytes);
    host.resize(bytes);
    ampx_tensor t = nullptr;
    if (with_out(t, ampx_tensor{}, [&](ampx_tensor* o) {
          return ampx_tensor_from_host(c.handle, type, ndim, dims, host.data(), bytes, o);
        }) != AMPX_OK)
      return nullptr;
    adopt(Kind::Tensor, t, false);
    return t;
  }

  // A tensor argument of `ndim` dimensions: usually a new one, sometimes
  // one of the pool (of any shape, NULL, another type, released).
  ampx_tensor shaped(int32_t ndim, int64_t max_extent) {
    return chance(80) ? tensor() : fresh(ndim, max_extent);
  }

  // t's extents when it is a live tensor of `ndim` dimensions.
  static bool extents_of(ampx_tensor t, int32_t ndim, int64_t* dims) {
    int32_t n = -1;
    return ampx_tensor_ndim(t, &n) == AMPX_OK && n == ndim &&
           ampx_tensor_shape(t, dims, ndim) == AMPX_OK;
  }

  void step();
  void tensor_call();
  void op_call();
  void size_call(uint8_t which, ampx_tensor a, ampx_tensor b);
  void optimizer_call();
  void scaler_call();
  void autograd_call();
  void dlpack_call();
  void release_call();
  void finish();
};

void Program::step() {
  // The top 32 values of the byte (which % 16 made 0 .. 15 a fifteenth and
  // sixteenth time) call the functions of windows, attention, views and
  // splits; the others keep their meaning for the inputs of the corpus.
  const uint8_t r = in_.ConsumeIntegral<uint8_t>();
  if (r >= 224) {
    const uint8_t which = in_.ConsumeIntegral<uint8_t>() % 22;
    ampx_tensor a = tensor(), b = tensor();
    size_call(which, a, b);
    return;
  }
  switch (r % 16) {
    case 0:
      create_context();
      break;
    case 1:
    case 2:
      new_tensor();
      break;
    case 3:
    case 4:
      tensor_call();
      break;
    case 5:
    case 6:
    case 7:
      op_call();
      break;
    case 8:
    case 9:
      optimizer_call();
      break;
    case 10:
    case 11:
      scaler_call();
      break;
    case 12:
    case 13:
      autograd_call();
      break;
    case 14:
      dlpack_call();
      break;
    default:
      release_call();
      break;
  }
}

void Program::tensor_call() {
  ampx_tensor t = tensor();
  int64_t dims[AMPX_MAX_DIMS] = {};
  std::vector<unsigned char> buffer(256);
  switch (in_.ConsumeIntegral<uint8_t>() % 18) {
    case 0: {
      size_t n = 0;
      if (ampx_tensor_nbytes(t, &n) == AMPX_OK && n <= buffer.size() && chance(220))
        buffer.resize(n);
      checked(ampx_tensor_to_host(t, chance(8) ? nullptr : buffer.data(), buffer.size()));
      break;
    }
    case 1: {
      size_t n = 0;
      if (ampx_tensor_nbytes(t, &n) == AMPX_OK && n <= buffer.size() && chance(220))
        buffer.resize(n);
      const std::vector<unsigned char> bytes = in_.ConsumeBytes<unsigned char>(buffer.size());
      std::copy(bytes.begin(), bytes.end(), buffer.begin());
      checked(ampx_tensor_copy_from_host(t, chance(8) ? nullptr : buffer.data(), buffer.size()));
      break;
    }
    case 2:
      checked(ampx_tensor_copy(t, tensor()));
      break;
    case 3: {
      ampx_tensor out = nullptr;
      const ampx_dtype type = dtype();
      if (with_out(out, ampx_tensor{},
                   [&](ampx_tensor* o) { return ampx_tensor_cast(t, type, o); }) == AMPX_OK)
        adopt(Kind::Tensor, out, false);
      break;
    }
    case 4:
      checked(ampx_tensor_fill(t, number()));
      break;
    case 5: {
      const std::string name = in_.ConsumeRandomLengthString(24);
      checked(ampx_tensor_set_name(t, chance(16) ? nullptr : name.c_str()));
      const char* got = nullptr;
      if (with_out(got, static_cast<const char*>(nullptr),
                   [&](const char** o) { return ampx_tensor_name(t, o); }) == AMPX_OK &&
          std::strlen(got) > 24)
        finding("a name longer than the one set");
      break;
    }
    case 6: {
      ampx_dtype d{};
      int32_t ndim = 0;
      int64_t numel = 0;
      void* data = nullptr;
      ampx_context c = nullptr;
      with_out(d, ampx_dtype{}, [&](ampx_dtype* o) { return ampx_tensor_dtype(t, o); });
      with_out(ndim, -7, [&](int32_t* o) { return ampx_tensor_ndim(t, o); });
      with_out(numel, int64_t{-7}, [&](int64_t* o) { return ampx_tensor_numel(t, o); });
      with_out(data, static_cast<void*>(nullptr), [&](void** o) { return ampx_tensor_data(t, o); });
      with_out(c, ampx_context{}, [&](ampx_context* o) { return ampx_tensor_context(t, o); });
      checked(ampx_tensor_shape(t, chance(16) ? nullptr : dims, small_int()));
      break;
    }
    case 7:
    case 8: {
      ampx_tensor g = tensor();
      Handle* a = find(t);
      Handle* b = find(g);
      // A tensor that holds an ampx export of another tensor could close a
      // reference cycle through the export, which no library can see.
      if ((a && a->shares_exported) || (b && b->shares_exported)) break;
      checked(ampx_tensor_set_grad(t, chance(24) ? nullptr : g));
      break;
    }
    case 9: {
      ampx_tensor g = nullptr;
      if (with_out(g, ampx_tensor{}, [&](ampx_tensor* o) { return ampx_tensor_grad(t, o); }) ==
              AMPX_OK &&
          g && !find(g) && handles_.size() < kMaxHandles) {
        // Borrowed: usable, never released by the harness.
        Handle h{Kind::Tensor, g, 0};
        ampx_context c = nullptr;
        if (ampx_tensor_context(g, &c) != AMPX_OK) finding("a gradient is not a usable tensor");
        h.ctx = context_index(c);
        handles_.push_back(h);
      }
      break;
    }
    case 10:
      checked(ampx_tensor_set_requires_grad(t, chance(200) ? 1 : 0));
      break;
    case 11: {
      int32_t r = 0;
      with_out(r, -7, [&](int32_t* o) { return ampx_tensor_requires_grad(t, o); });
      break;
    }
    case 12: {
      // A retain gives the program a reference: only of a tensor known
      // alive (one it holds no reference to may be alive or released).
      Handle* h = find(t);
      const bool is_tensor = h && h->kind == Kind::Tensor;
      if (is_tensor && (h->owned > 0 || h->scope > 0)) {
        if (checked(ampx_tensor_retain(t)) != AMPX_OK) finding("retain of a live tensor failed");
        ++h->owned;
      } else if (!is_tensor && checked(ampx_tensor_retain(t)) == AMPX_OK) {
        finding("retain of something that is not a tensor succeeded");
      }
      break;
    }
    case 13: {
      ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
      if (chance(32)) stats.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof stats);
      checked(ampx_memory_stats_get(context(), chance(8) ? nullptr : &stats));
      checked(ampx_memory_reset_peak(context()));
      break;
    }
    case 14: {
      ampx_device_type type{};
      int32_t index = 0;
      checked(ampx_context_device(context(), chance(8) ? nullptr : &type, &index));
      checked(ampx_context_synchronize(context()));
      break;
    }
    case 15: {
      if (contexts_.empty()) break;
      Context& c = contexts_[in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1)];
      const ampx_status st = checked(ampx_context_retain(c.handle));
      if ((st == AMPX_OK) != (c.handle_refs > 0))
        finding("context retain disagrees with its state");
      if (st == AMPX_OK) ++c.handle_refs;
      break;
    }
    case 16: {
      if (contexts_.empty()) break;
      const size_t index = in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1);
      Context& c = contexts_[index];
      // A closed context is kept alive by its anchor, so a second release
      // must be reported, not crash.
      const bool was_refused =
          refused("ampx_context_release", [&] { ampx_context_release(c.handle); });
      if (was_refused != (c.handle_refs == 0)) finding("context release disagrees with its state");
      if (!was_refused && --c.handle_refs == 0) context_closed(index);
      break;
    }
    default: {
      int32_t previous = 0;
      checked(
          ampx_set_grad_enabled(context(), chance(200) ? 1 : 0, chance(128) ? &previous : nullptr));
      break;
    }
  }
}

void Program::op_call() {
  ampx_tensor out = nullptr;
  ampx_tensor a = tensor(), b = tensor();
  ampx_status s = AMPX_OK;
  auto run = [&](auto call) { s = with_out(out, ampx_tensor{}, call); };
  const ampx_reduction reduction = chance(16) ? static_cast<ampx_reduction>(enum_value())
                                              : static_cast<ampx_reduction>(1 + chance(128));
  switch (in_.ConsumeIntegral<uint8_t>() % 26) {
    case 0:
      run([&](ampx_tensor* o) { return ampx_add(a, b, o); });
      break;
    case 1:
      run([&](ampx_tensor* o) { return ampx_sub(a, b, o); });
      break;
    case 2:
      run([&](ampx_tensor* o) { return ampx_mul(a, b, o); });
      break;
    case 3: {
      const double scale = number(), shift = number();
      run([&](ampx_tensor* o) { return ampx_affine(a, scale, shift, o); });
      break;
    }
    case 4:
      run([&](ampx_tensor* o) { return ampx_relu(a, o); });
      break;
    case 5:
      run([&](ampx_tensor* o) { return ampx_gelu(a, o); });
      break;
    case 6:
      run([&](ampx_tensor* o) { return ampx_gelu_tanh(a, o); });
      break;
    case 7:
      run([&](ampx_tensor* o) { return ampx_silu(a, o); });
      break;
    case 8:
      run([&](ampx_tensor* o) { return ampx_sigmoid(a, o); });
      break;
    case 9:
      run([&](ampx_tensor* o) { return ampx_tanh(a, o); });
      break;
    case 10:
      run([&](ampx_tensor* o) { return chance(128) ? ampx_sum(a, o) : ampx_mean(a, o); });
      break;
    case 11:
      run([&](ampx_tensor* o) {
        return chance(128) ? ampx_softmax(a, o) : ampx_log_softmax(a, o);
      });
      break;
    case 12: {
      const int64_t ignore = chance(128) ? -100 : small_int();
      run([&](ampx_tensor* o) { return ampx_cross_entropy(a, b, reduction, ignore, o); });
      break;
    }
    case 13:
      run([&](ampx_tensor* o) { return ampx_mse_loss(a, b, reduction, o); });
      break;
    case 14:
      run([&](ampx_tensor* o) { return ampx_matmul(a, b, o); });
      break;
    case 15: {
      ampx_tensor bias = tensor();
      const auto act = static_cast<ampx_activation>(
          chance(16) ? enum_value() : in_.ConsumeIntegral<uint8_t>() % 3);
      run([&](ampx_tensor* o) { return ampx_linear(a, b, bias, act, o); });
      break;
    }
    case 16: {
      ampx_tensor bias = chance(128) ? nullptr : tensor();
      const double eps = chance(200) ? 1e-5 : number();
      run([&](ampx_tensor* o) {
        return ampx_layer_norm(a, chance(128) ? nullptr : b, bias, eps, o);
      });
      break;
    }
    case 17: {
      ampx_tensor rm = chance(128) ? nullptr : tensor(), rv = chance(128) ? nullptr : tensor();
      const int32_t training = chance(128);
      const double momentum = chance(200) ? 0.1 : number(), eps = chance(200) ? 1e-5 : number();
      run([&](ampx_tensor* o) {
        return ampx_batch_norm(a, chance(128) ? nullptr : b, nullptr, rm, rv, training, momentum,
                               eps, o);
      });
      break;
    }
    case 18: {
      const double p = chance(200) ? 0.25 : number();
      const int32_t training = chance(200);
      run([&](ampx_tensor* o) { return ampx_dropout(a, p, training, o); });
      break;
    }
    case 19:
      run([&](ampx_tensor* o) { return ampx_embedding(a, b, o); });
      break;
    case 20: {
      int64_t dims[AMPX_MAX_DIMS];
      const int32_t ndim = shape(dims);
      if (chance(64)) dims[0] = -1;
      run([&](ampx_tensor* o) { return ampx_reshape(a, ndim, chance(8) ? nullptr : dims, o); });
      break;
    }
    case 21: {
      const int32_t d0 = small_int(), d1 = small_int();
      run([&](ampx_tensor* o) { return ampx_transpose(a, d0, d1, o); });
      break;
    }
    case 22: {
      ampx_tensor list[4] = {a, b, tensor(), tensor()};
      const size_t count = in_.ConsumeIntegralInRange<size_t>(0, 4);
      const int32_t dim = small_int();
      run([&](ampx_tensor* o) { return ampx_concat(chance(8) ? nullptr : list, count, dim, o); });
      break;
    }
    case 23:
      run([&](ampx_tensor* o) { return ampx_bce_with_logits(a, b, reduction, o); });
      break;
    case 24: {
      // A checkpointed segment over up to three inputs.
      segments_.emplace_back();
      segments_.back().mode = in_.ConsumeIntegral<uint8_t>();
      ampx_tensor inputs[3] = {a, b, tensor()};
      const size_t n_in = in_.ConsumeIntegralInRange<size_t>(0, 3);
      ampx_tensor outputs[2] = {};
      const size_t n_out = in_.ConsumeIntegralInRange<size_t>(0, 2);
      ampx_context c = context();
      // The segments live as long as the fuzzer's run: no release hook.
      ampx_segment segment = AMPX_SEGMENT_INIT;
      segment.fn = chance(8) ? nullptr : &segment_fn;
      segment.user_data = &segments_.back();
      if (checked(ampx_checkpoint_segment(c, &segment, inputs, n_in, outputs, n_out)) == AMPX_OK)
        for (size_t i = 0; i < n_out; ++i) adopt(Kind::Tensor, outputs[i], true);
      return;
    }
    default: {
      ampx_tensor scaled = nullptr;
      ampx_scaler sc = scaler();
      if (with_out(scaled, ampx_tensor{},
                   [&](ampx_tensor* o) { return ampx_scaler_scale_loss(sc, a, o); }) == AMPX_OK)
        adopt(Kind::Tensor, scaled, false);
      return;
    }
  }
  if (s == AMPX_OK) adopt(Kind::Tensor, out, true);
}

// conv2d, the pools, attention, views, split, chunk and permute, fed with
// size arguments.
void Program::size_call(uint8_t which, ampx_tensor a, ampx_tensor b) {
  ampx_tensor out = nullptr;
  ampx_status s = AMPX_OK;
  auto run = [&](auto call) { s = with_out(out, ampx_tensor{}, call); };
  switch (which) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4: {
      ampx_tensor x = chance(32) ? a : shaped(chance(200) ? 4 : 3, 6);
      ampx_conv2d_options o = ampx_conv2d_options_default();
      for (int d = 0; d < 2; ++d) {
        if (chance(96)) o.stride[d] = size_arg();
        if (chance(128)) o.padding[d] = size_arg();
        if (chance(96)) o.dilation[d] = size_arg();
      }
      if (chance(48)) o.groups = size_arg();
      if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
      // Usually a weight whose channels fit x's (groups dividing them or not).
      ampx_tensor w = b;
      int64_t xd[4] = {};
      const int32_t xn = extents_of(x, 4, xd) ? 4 : extents_of(x, 3, xd) ? 3 : 0;
      if (xn > 0 && chance(200)) {
        const int64_t groups = o.groups > 0 ? o.groups : 1;
        const int64_t per_group = 1 + in_.ConsumeIntegral<uint8_t>() % 4;
        const int64_t wd[4] = {groups <= 16 ? per_group * groups : per_group, xd[xn - 3] / groups,
                               1 + in_.ConsumeIntegral<uint8_t>() % 3,
                               1 + in_.ConsumeIntegral<uint8_t>() % 3};
        w = fresh(4, 4, wd);
      } else if (chance(128)) {
        w = shaped(4, 4);
      }
      ampx_tensor bias = chance(128) ? nullptr : chance(128) ? tensor() : fresh(1, 8);
      run([&](ampx_tensor* y) { return ampx_conv2d(x, w, bias, chance(8) ? nullptr : &o, y); });
      break;
    }
    case 5:
    case 6:
    case 7:
    case 8:
    case 9:
    case 10:
    case 11: {
      ampx_tensor x = chance(32) ? a : shaped(chance(128) ? 4 : 3, 6);
      const int64_t kernel[2] = {size_arg(), size_arg()};
      ampx_pool2d_options o = ampx_pool2d_options_default();
      for (int d = 0; d < 2; ++d) {
        if (chance(96)) o.stride[d] = size_arg();
        if (chance(64)) o.dilation[d] = size_arg();
        // Often the largest padding the header allows, half the dilated
        // kernel (when that fits int64), for windows far larger than x.
        const uint8_t pad = in_.ConsumeIntegral<uint8_t>();
        if (pad < 64 && kernel[d] > 0 && o.dilation[d] > 0 &&
            kernel[d] - 1 <= (std::numeric_limits<int64_t>::max() - 1) / o.dilation[d])
          o.padding[d] = ((kernel[d] - 1) * o.dilation[d] + 1) / 2;
        else if (pad < 160)
          o.padding[d] = size_arg();
      }
      o.ceil_mode = chance(64);
      o.count_include_pad = chance(200);
      if (chance(32)) o.divisor_override = size_arg();
      if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
      const ampx_pool2d_options* options = chance(8) ? nullptr : &o;
      const int64_t kh = kernel[0], kw = kernel[1];
      if (which <= 8)
        run([&](ampx_tensor* y) { return ampx_max_pool2d(x, kh, kw, options, y); });
      else if (which <= 10)
        run([&](ampx_tensor* y) { return ampx_avg_pool2d(x, kh, kw, options, y); });
      else
        run([&](ampx_tensor* y) { return ampx_global_avg_pool2d(x, y); });
      break;
    }
    case 12:
    case 13:
    case 14: {
      // q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], mostly
      // agreeing (Hkv dividing H), else as the pool and fresh() give.
      ampx_tensor q, k, v;
      const int32_t nd = 2 + in_.ConsumeIntegral<uint8_t>() % 3;
      if (chance(200)) {
        int64_t qd[4], kd[4], vd[4];
        const int64_t batch = 1 + in_.ConsumeIntegral<uint8_t>() % 2;
        const int64_t kv_heads = 1 + in_.ConsumeIntegral<uint8_t>() % 2;
        const int64_t heads = kv_heads * (1 + in_.ConsumeIntegral<uint8_t>() % 2);
        const int64_t tq = 1 + in_.ConsumeIntegral<uint8_t>() % 5, tk = in_.ConsumeIntegral<uint8_t>() % 6;
        const int64_t dim = chance(16) ? size_arg() : 1 + in_.ConsumeIntegral<uint8_t>() % 9;
        const int64_t dv = chance(200) ? dim : 1 + in_.ConsumeIntegral<uint8_t>() % 9;
        const int64_t lead[2] = {batch, heads}, kv_lead[2] = {batch, kv_heads};
        for (int32_t i = 0; i < nd - 2; ++i) {
          qd[i] = lead[i + 4 - nd];
          kd[i] = vd[i] = kv_lead[i + 4 - nd];
        }
        qd[nd - 2] = tq, kd[nd - 2] = vd[nd - 2] = tk;
        qd[nd - 1] = kd[nd - 1] = dim, vd[nd - 1] = dv;
        const size_t context = in_.ConsumeIntegral<uint8_t>();
        q = fresh(nd, 1, qd, context), k = fresh(nd, 1, kd, context);
        v = fresh(nd, 1, vd, context);
      } else {
        q = chance(64) ? a : shaped(nd, 5), k = chance(64) ? b : shaped(nd, 5), v = shaped(nd, 5);
      }
      ampx_tensor mask = chance(160) ? nullptr : chance(64) ? tensor() : fresh(2, 6);
      ampx_attention_options o = ampx_attention_options_default();
      o.causal = chance(64);
      if (chance(32)) o.scale = number();
      if (chance(32)) o.dropout_p = number();
      if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
      run([&](ampx_tensor* y) {
        return ampx_scaled_dot_product_attention(q, k, v, mask, chance(8) ? nullptr : &o, y);
      });
      break;
    }
    case 15:
    case 16: {
      int64_t dims[AMPX_MAX_DIMS];
      const int32_t ndim = shape(dims);
      for (int32_t i = 0; i < ndim && i < AMPX_MAX_DIMS; ++i)
        if (chance(24)) dims[i] = size_arg();
      const ampx_dtype type = dtype();
      const uint8_t r = in_.ConsumeIntegral<uint8_t>();
      const size_t offset = r < 64 ? static_cast<size_t>(size_arg()) : r % 5 * 2;
      const ampx_status st = with_out(out, ampx_tensor{}, [&](ampx_tensor* o) {
        return ampx_tensor_view(a, offset, type, ndim, chance(8) ? nullptr : dims, o);
      });
      if (st != AMPX_OK) return;
      adopt(Kind::Tensor, out, false);
      if (Handle* base = find(a); base && base->shares_exported)
        if (Handle* h = find(out)) h->shares_exported = true;
      return;
    }
    case 17:
    case 18:
    case 19: {
      // split: sizes that add up to a's extent (mostly), or size_args; or chunk.
      const int32_t dim = small_int();
      ampx_tensor pieces[8];
      for (ampx_tensor& p : pieces) p = reinterpret_cast<ampx_tensor>(&deleted_);  // a sentinel
      int32_t count = -7;
      ampx_status st;
      if (which <= 18) {
        int64_t sizes[4] = {};
        const size_t n = in_.ConsumeIntegralInRange<size_t>(0, 4);
        int64_t dims[AMPX_MAX_DIMS] = {};
        int32_t nd = -1;
        const bool known = ampx_tensor_ndim(a, &nd) == AMPX_OK && nd > 0 &&
                           ampx_tensor_shape(a, dims, nd) == AMPX_OK;
        int64_t left = known ? dims[((dim % nd) + nd) % nd] : 0;
        for (size_t i = 0; i < n; ++i) {
          if (known && chance(200)) {
            sizes[i] = i + 1 == n ? left : left / 2 + (left > 0 && chance(64));
            left -= sizes[i];
          } else {
            sizes[i] = size_arg();
          }
        }
        st = checked(ampx_split(a, chance(8) ? nullptr : sizes, n, dim, pieces));
        if (st == AMPX_OK) count = static_cast<int32_t>(n);
      } else {
        const int32_t chunks = chance(16) ? small_int() : 1 + in_.ConsumeIntegral<uint8_t>() % 8;
        if (chunks > 8) return;  // outs must hold `chunks` handles
        st = checked(ampx_chunk(a, chunks, dim, pieces, &count));
      }
      const int32_t written = st == AMPX_OK ? count : 0;
      for (int32_t i = 0; i < 8; ++i) {
        const bool sentinel = pieces[i] == reinterpret_cast<ampx_tensor>(&deleted_);
        if (i < written && sentinel) finding("split or chunk left an output unwritten");
        if (i >= written && !sentinel) finding("split or chunk wrote past its outputs");
      }
      for (int32_t i = 0; i < written; ++i) adopt(Kind::Tensor, pieces[i], true);
      return;
    }
    default: {
      int32_t dims[AMPX_MAX_DIMS + 1];
      int32_t nd = -1;
      if (ampx_tensor_ndim(a, &nd) != AMPX_OK || nd < 0 || nd > AMPX_MAX_DIMS || chance(32))
        nd = small_int();
      for (int32_t i = 0; i <= AMPX_MAX_DIMS; ++i) dims[i] = chance(32) ? small_int() : i;
      // A permutation of 0 .. nd - 1 mostly: a few swaps of the identity.
      const int swaps = in_.ConsumeIntegralInRange<int>(0, 3);
      for (int i = 0; i < swaps && nd > 1 && nd <= AMPX_MAX_DIMS; ++i)
        std::swap(dims[in_.ConsumeIntegralInRange<int32_t>(0, nd - 1)],
                  dims[in_.ConsumeIntegralInRange<int32_t>(0, nd - 1)]);
      run([&](ampx_tensor* y) { return ampx_permute(a, nd, chance(8) ? nullptr : dims, y); });
      break;
    }
  }
  if (s == AMPX_OK) adopt(Kind::Tensor, out, true);
}

void Program::optimizer_call() {
  ampx_optimizer opt = optimizer();
  switch (in_.ConsumeIntegral<uint8_t>() % 16) {
    case 0:
    case 1: {
      ampx_context c = context();
      ampx_tensor params[4] = {tensor(), tensor(), tensor(), tensor()};
      const size_t count = in_.ConsumeIntegralInRange<size_t>(0, 4);
      ampx_optimizer out = nullptr;
      ampx_status st;
      if (chance(128)) {
        ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
        o.lr = chance(200) ? 0.1 : number();
        o.momentum = chance(128) ? 0.0 : number();
        o.dampening = chance(200) ? 0.0 : number();
        o.weight_decay = chance(200) ? 0.0 : number();
        o.nesterov = chance(64);
        o.maximize = chance(32);
        if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
        st = with_out(out, ampx_optimizer{}, [&](ampx_optimizer* p) {
          return ampx_optimizer_create_sgd(c, chance(8) ? nullptr : params, count,
                                           chance(16) ? nullptr : &o, p);
        });
      } else {
        ampx_adam_options o =
            chance(128) ? ampx_adamw_options_default() : ampx_adam_options_default();
        o.lr = chance(200) ? 1e-2 : number();
        if (chance(32)) o.beta1 = number();
        if (chance(32)) o.beta2 = number();
        if (chance(32)) o.eps = number();
        if (chance(32)) o.weight_decay = number();
        o.amsgrad = chance(64);
        o.maximize = chance(32);
        if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
        st = with_out(out, ampx_optimizer{}, [&](ampx_optimizer* p) {
          return ampx_optimizer_create_adam(c, chance(8) ? nullptr : params, count,
                                            chance(16) ? nullptr : &o, p);
        });
      }
      if (st == AMPX_OK) {
        if (!object_context(c)) finding("an optimizer was made on a closed or unknown context");
        adopt(Kind::Optimizer, out, false);
      }
      break;
    }
    case 2: {
      ampx_tensor params[3] = {tensor(), tensor(), tensor()};
      int32_t group = -1;
      checked(ampx_optimizer_add_group(opt, params, in_.ConsumeIntegralInRange<size_t>(0, 3),
                                       number(), chance(200) ? 0.0 : number(),
                                       chance(128) ? &group : nullptr));
      break;
    }
    case 3: {
      int32_t n = 0;
      double lr = 0;
      with_out(n, -7, [&](int32_t* o) { return ampx_optimizer_group_count(opt, o); });
      checked(ampx_optimizer_set_lr(opt, small_int(), number()));
      with_out(lr, -7.0, [&](double* o) { return ampx_optimizer_get_lr(opt, small_int(), o); });
      break;
    }
    case 4:
    case 5:
      checked(ampx_optimizer_step(opt));
      break;
    case 6:
      checked(ampx_optimizer_zero_grad(opt));
      break;
    case 7: {
      ampx_tensor out = nullptr;
      ampx_tensor p = tensor();
      const auto kind = static_cast<ampx_optimizer_state>(enum_value());
      if (with_out(out, ampx_tensor{}, [&](ampx_tensor* o) {
            return ampx_optimizer_state_tensor(opt, p, kind, o);
          }) == AMPX_OK)
        adopt(Kind::Tensor, out, false);
      int64_t steps = 0;
      with_out(steps, int64_t{-7},
               [&](int64_t* o) { return ampx_optimizer_param_steps(opt, p, o); });
      break;
    }
    case 8:
    case 9: {
      size_t bytes = 0;
      if (with_out(bytes, size_t{7},
                   [&](size_t* o) { return ampx_optimizer_state_size(opt, o); }) != AMPX_OK)
        break;
      if (bytes > (size_t{1} << 24)) break;
      std::vector<unsigned char> buffer(bytes + 8);
      const size_t given = chance(16) ? in_.ConsumeIntegralInRange<size_t>(0, bytes + 8) : bytes;
      if (checked(ampx_optimizer_save_state(opt, buffer.data(), given)) == AMPX_OK) {
        buffer.resize(bytes);
        saved_state_ = buffer;
      }
      break;
    }
    case 10:
    case 11: {
      // A saved state, mutated, with its checksum made right again (or not).
      std::vector<unsigned char> state = saved_state_;
      if (state.empty() || chance(16))
        state = in_.ConsumeBytes<unsigned char>(in_.ConsumeIntegral<uint8_t>());
      const int flips = in_.ConsumeIntegralInRange<int>(0, 4);
      for (int i = 0; i < flips && !state.empty(); ++i)
        state[in_.ConsumeIntegralInRange<size_t>(0, state.size() - 1)] =
            in_.ConsumeIntegral<uint8_t>();
      if (chance(16) && !state.empty())
        state.resize(in_.ConsumeIntegralInRange<size_t>(0, state.size()));
      if (state.size() >= 8 && chance(220)) {
        const uint64_t sum = fnv1a(state.data(), state.size() - 8);
        std::memcpy(state.data() + state.size() - 8, &sum, 8);
      }
      checked(ampx_optimizer_load_state(opt, chance(8) ? nullptr : state.data(), state.size()));
      break;
    }
    case 12: {
      int32_t taken = 0;
      with_out(taken, -7, [&](int32_t* o) { return ampx_optimizer_last_step_taken(opt, o); });
      break;
    }
    case 13: {
      ampx_tensor total = nullptr;
      const double max_norm = number();
      const double type = chance(200) ? 2.0 : number();
      const int32_t strict = chance(64);
      const bool want = chance(200);
      const ampx_status st =
          checked(ampx_clip_grad_norm(opt, max_norm, type, strict, want ? &total : nullptr));
      if (st == AMPX_OK && want) adopt(Kind::Tensor, total, false);
      if (st != AMPX_OK && total) finding("a failed clip returned a total");
      break;
    }
    case 14:
      checked(ampx_clip_grad_value(opt, number()));
      break;
    default: {
      ampx_nonfinite_grad entries[3];
      size_t found = 0;
      const size_t capacity = in_.ConsumeIntegralInRange<size_t>(0, 3);
      with_out(found, size_t{777}, [&](size_t* o) {
        return ampx_find_nonfinite_grads(opt, chance(8) ? nullptr : entries, capacity, o);
      });
      break;
    }
  }
}

void Program::scaler_call() {
  ampx_scaler sc = scaler();
  switch (in_.ConsumeIntegral<uint8_t>() % 14) {
    case 0:
    case 1: {
      ampx_context c = context();
      ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
      if (chance(64)) o.init_scale = number();
      if (chance(32)) o.growth_factor = number();
      if (chance(32)) o.backoff_factor = number();
      o.growth_interval = chance(128) ? 1 + in_.ConsumeIntegral<uint8_t>() % 4 : small_int();
      o.enabled = chance(220);
      o.hysteresis = chance(200) ? 1 : small_int();
      if (chance(32)) o.min_scale = number();
      if (chance(32)) o.max_scale = number();
      if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
      ampx_scaler out = nullptr;
      if (with_out(out, ampx_scaler{}, [&](ampx_scaler* p) {
            return ampx_scaler_create(c, chance(16) ? nullptr : &o, p);
          }) == AMPX_OK) {
        if (!object_context(c)) finding("a scaler was made on a closed or unknown context");
        adopt(Kind::Scaler, out, false);
      }
      break;
    }
    case 2:
      checked(ampx_scaler_attach(sc, optimizer()));
      break;
    case 3: {
      ampx_tensor out = nullptr;
      if (with_out(out, ampx_tensor{},
                   [&](ampx_tensor* o) { return ampx_scaler_scale_tensor(sc, o); }) == AMPX_OK)
        adopt(Kind::Tensor, out, false);
      double scale = 0;
      with_out(scale, -7.0, [&](double* o) { return ampx_scaler_get_scale(sc, o); });
      break;
    }
    case 4:
      checked(ampx_scaler_unscale(sc, optimizer()));
      break;
    case 5:
    case 6:
      checked(ampx_scaler_step(sc, optimizer()));
      break;
    case 7:
      checked(ampx_scaler_update(sc));
      break;
    case 8:
      checked(ampx_scaler_update_to(sc, number()));
      break;
    case 9: {
      int32_t found = 0;
      ampx_optimizer opt = optimizer();
      with_out(found, -7, [&](int32_t* o) { return ampx_scaler_found_inf(sc, opt, o); });
      break;
    }
    case 10: {
      ampx_scaler_counters c = AMPX_SCALER_COUNTERS_INIT;
      if (chance(32)) c.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof c);
      checked(ampx_scaler_get_counters(sc, chance(8) ? nullptr : &c));
      break;
    }
    case 11:
    case 12: {
      ampx_scaler_state st{};
      st.struct_size = sizeof st;
      if (checked(ampx_scaler_get_state(sc, &st)) != AMPX_OK) st.scale = 1.0;
      switch (in_.ConsumeIntegral<uint8_t>() % 10) {
        case 0:
          st.scale = number();
          break;
        case 1:
          st.growth_factor = number();
          break;
        case 2:
          st.backoff_factor = number();
          break;
        case 3:
          st.growth_interval = small_int();
          break;
        case 4:
          st.growth_tracker = small_int();
          break;
        case 5:
          st.hysteresis = small_int();
          break;
        case 6:
          st.hysteresis_left = small_int();
          break;
        case 7:
          st.min_scale = number();
          st.max_scale = number();
          break;
        case 8:
          st.counters.skipped = small_int();
          st.counters.updates = small_int();
          break;
        default:
          st.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof st);
          break;
      }
      checked(ampx_scaler_set_state(sc, chance(8) ? nullptr : &st));
      break;
    }
    default: {
      int32_t taken = 0;
      ampx_optimizer opt = optimizer();
      with_out(taken, -7, [&](int32_t* o) { return ampx_optimizer_last_step_taken(opt, o); });
      break;
    }
  }
}

void Program::autograd_call() {
  switch (in_.ConsumeIntegral<uint8_t>() % 12) {
    case 0:
    case 1:
      checked(ampx_backward(tensor(), chance(128) ? nullptr : scaler()));
      break;
    case 2:
    case 3: {
      if (contexts_.empty()) break;
      Context& c = contexts_[in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1)];
      const ampx_status st = checked(ampx_scope_push(c.handle));
      if ((st == AMPX_OK) != (c.handle_refs > 0)) finding("scope push disagrees with the context");
      if (st == AMPX_OK) ++c.scopes;
      break;
    }
    case 4:
    case 5: {
      if (contexts_.empty()) break;
      const size_t index = in_.ConsumeIntegralInRange<size_t>(0, contexts_.size() - 1);
      Context& c = contexts_[index];
      const ampx_status st = checked(ampx_scope_pop(c.handle));
      if ((st == AMPX_OK) != (c.handle_refs > 0 && c.scopes > 0))
        finding("scope pop disagrees with the scopes opened");
      if (st != AMPX_OK) break;
      for (Handle& h : handles_)
        if (h.ctx == index && h.scope == c.scopes) h.scope = 0;
      --c.scopes;
      break;
    }
    case 6: {
      ampx_context c = context();
      ampx_autocast_options o = ampx_autocast_options_default();
      if (chance(32)) o.dtype = dtype();
      o.enabled = chance(220);
      o.cache = chance(200);
      if (chance(16)) o.struct_size = in_.ConsumeIntegralInRange<size_t>(0, sizeof o);
      ampx_autocast out = nullptr;
      if (with_out(out, ampx_autocast{}, [&](ampx_autocast* p) {
            return ampx_autocast_create(c, chance(16) ? nullptr : &o, p);
          }) == AMPX_OK) {
        if (!object_context(c)) finding("a policy was made on a closed or unknown context");
        adopt(Kind::Autocast, out, false);
      }
      break;
    }
    case 7:
    case 8: {
      ampx_autocast a = policy();
      const ampx_status st = checked(ampx_autocast_enter(a));
      Handle* h = find(a);
      if (st == AMPX_OK) {
        if (!h || h->kind != Kind::Autocast) finding("a non-policy was entered");
        ++h->entered;
      }
      break;
    }
    case 9: {
      ampx_autocast a = policy();
      if (checked(ampx_autocast_exit(a)) == AMPX_OK) {
        Handle* h = find(a);
        if (!h || h->entered == 0) finding("a region that was not entered was exited");
        --h->entered;
      }
      break;
    }
    case 10: {
      static const char* names[] = {"matmul", "softmax", "add", "relu", "layer_norm", "nope", ""};
      const char* name = chance(16) ? nullptr : names[in_.ConsumeIntegral<uint8_t>() % 7];
      ampx_autocast a = policy();
      checked(ampx_autocast_set_op_class(a, name, static_cast<ampx_op_class>(enum_value())));
      ampx_op_class c{};
      with_out(c, ampx_op_class{},
               [&](ampx_op_class* o) { return ampx_autocast_op_class(a, name, o); });
      break;
    }
    default: {
      int64_t hits = 0, misses = 0;
      checked(ampx_autocast_cache_stats(policy(), chance(16) ? nullptr : &hits, &misses));
      break;
    }
  }
}

void Program::dlpack_call() {
  switch (in_.ConsumeIntegral<uint8_t>() % 4) {
    case 0: {
      DLManagedTensor* m = nullptr;
      if (with_out(m, static_cast<DLManagedTensor*>(nullptr), [&](DLManagedTensor** o) {
            return ampx_tensor_to_dlpack(tensor(), o);
          }) == AMPX_OK)
        exported_.push_back(m);
      break;
    }
    case 1: {
      // An export back into a context: ampx owns it on success only.
      if (exported_.empty()) break;
      DLManagedTensor* m = exported_.back();
      exported_.pop_back();
      ampx_tensor t = nullptr;
      if (with_out(t, ampx_tensor{}, [&](ampx_tensor* o) {
            return ampx_tensor_from_dlpack(context(), m, o);
          }) == AMPX_OK) {
        adopt(Kind::Tensor, t, false);
        if (Handle* h = find(t)) h->shares_exported = true;
      } else {
        m->deleter(m);
      }
      break;
    }
    case 2: {
      if (exported_.empty()) break;
      DLManagedTensor* m = exported_.back();
      exported_.pop_back();
      m->deleter(m);
      break;
    }
    default: {
      // A foreign DLPack tensor with fields from the input; its memory
      // holds whatever its shape could need.
      auto* made = new Made();
      made->deleted = &deleted_;
      DLTensor& dl = made->managed.dl_tensor;
      dl.ndim = in_.ConsumeIntegralInRange<int32_t>(-1, AMPX_MAX_DIMS + 1);
      // Memory is given only where the shape is small enough to back, so
      // that the harness never lies about how much there is.
      size_t numel = 1;
      bool backed = true;
      for (int32_t i = 0; i < AMPX_MAX_DIMS + 1; ++i) {
        made->shape[i] = extent();
        if (i >= dl.ndim) continue;
        if (made->shape[i] < 0 || made->shape[i] > 64)
          backed = false;
        else
          numel *= static_cast<size_t>(made->shape[i]);
      }
      backed = backed && numel <= 4096;
      const size_t offset = chance(32) ? in_.ConsumeIntegralInRange<size_t>(1, 16) : 0;
      if (backed && (numel > 0 || chance(128))) made->memory = host_block(numel * 8 + 128);
      dl.data = made->memory;
      dl.byte_offset = made->memory ? offset : in_.ConsumeIntegralInRange<size_t>(0, 16);
      dl.shape = chance(8) ? nullptr : made->shape;
      if (chance(128)) {
        int64_t stride = 1;
        for (int32_t i = dl.ndim - 1; i >= 0 && i <= AMPX_MAX_DIMS; --i) {
          made->strides[i] = chance(220) ? stride : small_int();
          stride *= made->shape[i] > 0 && made->shape[i] <= 64 ? made->shape[i] : 1;
        }
        dl.strides = made->strides;
      }
      dl.device.device_type =
          chance(220) ? kDLCPU : static_cast<DLDeviceType>(in_.ConsumeIntegral<uint8_t>() % 16);
      dl.device.device_id = chance(220) ? 0 : small_int();
      static const uint8_t codes[] = {kDLFloat, kDLBfloat, kDLInt, kDLUInt, kDLComplex};
      dl.dtype.code = codes[in_.ConsumeIntegral<uint8_t>() % 5];
      static const uint8_t bits[] = {32, 16, 64, 8};
      dl.dtype.bits = bits[in_.ConsumeIntegral<uint8_t>() % 4];
      dl.dtype.lanes = chance(230) ? 1 : in_.ConsumeIntegral<uint16_t>();
      made->managed.manager_ctx = made;
      made->managed.deleter = chance(230) ? &delete_made : nullptr;
      // Read now: once adopted, the tensor (and with it `made`) may be gone.
      const bool has_deleter = made->managed.deleter != nullptr;
      ++deleted_.expected;
      ampx_tensor t = nullptr;
      DLManagedTensor* m = &made->managed;
      const ampx_status st = with_out(t, ampx_tensor{}, [&](ampx_tensor* o) {
        return ampx_tensor_from_dlpack(context(), chance(8) ? nullptr : m, o);
      });
      if (st == AMPX_OK) {
        if (!has_deleter) {
          // Without a deleter ampx never frees it: the harness does, at the end.
          orphans_.push_back(made);
          --deleted_.expected;
        }
        adopt(Kind::Tensor, t, false);
      } else {
        delete_made(m);
      }
      break;
    }
  }
}

void Program::release_call() {
  if (handles_.empty()) return;
  Handle& h = handles_[in_.ConsumeIntegralInRange<size_t>(0, handles_.size() - 1)];
  if (h.owned > 0) release_owned(h);
}

// Releases everything the program owns, then the contexts' anchors: the
// hooks must then hold nothing, and every deleter must have run once.
void Program::finish() {
  for (DLManagedTensor* m : exported_) m->deleter(m);
  exported_.clear();
  // Regions and scopes are left open on purpose: releasing the context
  // must end them.
  for (Handle& h : handles_) {
    if (h.kind == Kind::Autocast && h.entered > 0) continue;
    while (h.owned > 0) release_owned(h);
  }
  for (size_t i = 0; i < contexts_.size(); ++i) {
    Context& c = contexts_[i];
    while (c.handle_refs > 0) {
      ampx_context_release(c.handle);
      --c.handle_refs;
    }
    context_closed(i);
  }
  for (Handle& h : handles_)
    while (h.owned > 0) release_owned(h);
  for (Context& c : contexts_) ampx_tensor_release(c.anchor);
  for (Made* made : orphans_) {
    std::free(made->memory);
    delete made;
  }
  for (const Memory& m : memories_)
    if (m.live != 0) finding("hook memory is still allocated after everything was released");
  if (deleted_.calls != deleted_.expected) finding("a deleter was not called exactly once");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Program(data, size).run();
  return 0;
}
