// persistent_oom_test.cpp -- memory that runs out and stays out.
//
// test_fault_injection refuses one allocation and lets the next succeed;
// here every allocation from the Nth on fails, for every N across a
// mixed-precision training step, a checkpoint save and a load: host heap
// allocations (this program replaces the global operator new, so the
// library's std::string, vector and node allocations fail too) and the
// context's allocator hooks alike. The program stops at the first call that
// fails, as a careful C program would, and checks:
//  - the call returned AMPX_ERR_OUT_OF_MEMORY with a message (no abort, no
//    other status: recording the error must not allocate);
//  - once memory is back, the program can clean up (pop its scope, zero the
//    gradients), run a whole step and save and load again;
//  - after everything is released, no block is left in the hooks.
// A plain program rather than a doctest case: the replaced operator new
// would fail doctest's own allocations too.
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

#include "ampx/ampx.h"

namespace {

// -1: memory is plentiful; otherwise allocations left before all fail.
std::atomic<int64_t> allowance{-1};
std::atomic<int64_t> refused{0};

bool refuse_now() {
  if (allowance.load(std::memory_order_relaxed) < 0) return false;
  if (allowance.fetch_sub(1, std::memory_order_relaxed) > 0) return false;
  allowance.store(0, std::memory_order_relaxed);
  refused.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void* heap_alloc(size_t bytes, size_t alignment) {
  if (refuse_now()) return nullptr;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes ? bytes : 1);
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

struct Hooks {
  std::atomic<int64_t> live{0};
  static void* alloc(void* user, size_t bytes, size_t alignment) {
    void* p = heap_alloc(bytes, alignment < 64 ? 64 : alignment);
    if (p) static_cast<Hooks*>(user)->live.fetch_add(1);
    return p;
  }
  static void release(void* user, void* ptr, size_t) {
    static_cast<Hooks*>(user)->live.fetch_sub(1);
    std::free(ptr);
  }
};

[[noreturn]] void fail(const char* what, int64_t n) {
  std::fprintf(stderr, "persistent_oom_test: N = %lld: %s (last error: %s)\n",
               static_cast<long long>(n), what, ampx_last_error());
  std::exit(1);
}

constexpr int64_t kBatch = 8, kIn = 6, kHidden = 16, kClasses = 4;

struct Model {
  Hooks hooks;
  ampx_context ctx = nullptr;
  ampx_tensor x = nullptr, labels = nullptr, w1 = nullptr, b1 = nullptr, w2 = nullptr, b2 = nullptr;
  ampx_tensor g[4] = {};
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_autocast policy = nullptr;

  ampx_tensor param(ampx_dtype dtype, std::vector<int64_t> dims, const char* name, int index) {
    ampx_tensor t = nullptr, grad = nullptr;
    const int32_t ndim = static_cast<int32_t>(dims.size());
    if (ampx_tensor_empty(ctx, dtype, ndim, dims.data(), &t) != AMPX_OK ||
        ampx_tensor_fill(t, 0.05 * (index + 1)) != AMPX_OK ||
        ampx_tensor_set_name(t, name) != AMPX_OK || ampx_tensor_set_requires_grad(t, 1) != AMPX_OK ||
        ampx_tensor_zeros(ctx, dtype, ndim, dims.data(), &grad) != AMPX_OK ||
        ampx_tensor_set_grad(t, grad) != AMPX_OK)
      fail("setting up a parameter", -1);
    g[index] = grad;
    return t;
  }

  Model() {
    ampx_context_options o = AMPX_CONTEXT_OPTIONS_INIT;
    o.num_threads = 1;
    o.allocator = {sizeof(ampx_allocator), &Hooks::alloc, &Hooks::release, &hooks};
    if (ampx_context_create(&o, &ctx) != AMPX_OK) fail("ampx_context_create", -1);
    const int64_t xd[] = {kBatch, kIn}, ld[] = {kBatch};
    std::vector<int64_t> label_values(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) label_values[i] = i % kClasses;
    if (ampx_tensor_zeros(ctx, AMPX_F32, 2, xd, &x) != AMPX_OK || ampx_tensor_fill(x, 0.5) != AMPX_OK ||
        ampx_tensor_from_host(ctx, AMPX_I64, 1, ld, label_values.data(),
                              label_values.size() * sizeof(int64_t), &labels) != AMPX_OK)
      fail("setting up the data", -1);
    w1 = param(AMPX_F32, {kHidden, kIn}, "w1", 0);
    b1 = param(AMPX_F32, {kHidden}, "b1", 1);
    w2 = param(AMPX_F16, {kClasses, kHidden}, "w2", 2);
    b2 = param(AMPX_F32, {kClasses}, "b2", 3);
    ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
    ampx_tensor params[] = {w1, b1, w2, b2};
    if (ampx_optimizer_create_adam(ctx, params, 4, &adam, &opt) != AMPX_OK ||
        ampx_scaler_create(ctx, nullptr, &scaler) != AMPX_OK ||
        ampx_autocast_create(ctx, nullptr, &policy) != AMPX_OK)
      fail("setting up the optimizer", -1);
  }

  ~Model() {
    ampx_autocast_release(policy);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : {x, labels, w1, b1, w2, b2, g[0], g[1], g[2], g[3]}) ampx_tensor_release(t);
    ampx_context_release(ctx);
    if (hooks.live != 0) fail("blocks left in the allocator hooks after everything was released", -1);
  }
};

// The program under test. Returns false at the first call that fails,
// which must be an OUT_OF_MEMORY with its message.
struct Program {
  Model& m;
  std::string path;
  int64_t n;
  bool scope_open = false, region_open = false;

  bool ok(ampx_status s) {
    if (s == AMPX_OK) return true;
    if (s != AMPX_ERR_OUT_OF_MEMORY) fail("a call failed with another status than OUT_OF_MEMORY", n);
    if (std::strstr(ampx_last_error(), "memory") == nullptr)
      fail("OUT_OF_MEMORY without a message that says so", n);
    return false;
  }

  bool step() {
    ampx_tensor h = nullptr, d = nullptr, logits = nullptr, loss = nullptr, total = nullptr;
    if (!ok(ampx_scope_push(m.ctx))) return false;
    scope_open = true;
    if (!ok(ampx_autocast_enter(m.policy))) return false;
    region_open = true;
    if (!ok(ampx_linear(m.x, m.w1, m.b1, AMPX_ACTIVATION_RELU, &h))) return false;
    if (!ok(ampx_dropout(h, 0.25, 1, &d))) return false;
    if (!ok(ampx_linear(d, m.w2, m.b2, AMPX_ACTIVATION_NONE, &logits))) return false;
    if (!ok(ampx_cross_entropy(logits, m.labels, AMPX_REDUCTION_MEAN, -100, &loss))) return false;
    if (!ok(ampx_autocast_exit(m.policy))) return false;
    region_open = false;
    if (!ok(ampx_backward(loss, m.scaler))) return false;
    if (!ok(ampx_scaler_unscale(m.scaler, m.opt))) return false;
    if (!ok(ampx_clip_grad_norm(m.opt, 1.0, 2.0, 0, &total))) return false;
    ampx_tensor_release(total);
    if (!ok(ampx_scaler_step(m.scaler, m.opt))) return false;
    if (!ok(ampx_scaler_update(m.scaler))) return false;
    if (!ok(ampx_optimizer_zero_grad(m.opt))) return false;
    if (!ok(ampx_scope_pop(m.ctx))) return false;
    scope_open = false;
    return true;
  }

  bool save_and_load() {
    ampx_tensor params[] = {m.w1, m.b1, m.w2, m.b2};
    return ok(ampx_checkpoint_file_save(path.c_str(), params, 4, m.opt, m.scaler)) &&
           ok(ampx_checkpoint_file_load(path.c_str(), params, 4, m.opt, m.scaler));
  }

  // With memory back: undo what a stopped program left open, as the
  // program would, so that the next iteration starts clean.
  void recover() {
    if (region_open && ampx_autocast_exit(m.policy) != AMPX_OK) fail("autocast_exit after", n);
    if (scope_open && ampx_scope_pop(m.ctx) != AMPX_OK) fail("scope_pop after", n);
    region_open = scope_open = false;
    // An interrupted iteration (unscaled, or stepped without update) is
    // finished by an update; one that never recorded an inf check has
    // nothing to finish.
    ampx_status s = ampx_scaler_update(m.scaler);
    if (s != AMPX_OK && s != AMPX_ERR_ORDER) fail("scaler_update after", n);
    if (ampx_optimizer_zero_grad(m.opt) != AMPX_OK) fail("zero_grad after", n);
  }
};

}  // namespace

// ---- the replaced global allocation functions ----------------------------------

void* operator new(size_t bytes) {
  if (void* p = heap_alloc(bytes, alignof(std::max_align_t))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void* operator new(size_t bytes, std::align_val_t a) {
  if (void* p = heap_alloc(bytes, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes, std::align_val_t a) { return operator new(bytes, a); }
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  return heap_alloc(bytes, alignof(std::max_align_t));
}
void* operator new[](size_t bytes, const std::nothrow_t&) noexcept {
  return heap_alloc(bytes, alignof(std::max_align_t));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

int main() {
  char dir[] = "/tmp/ampx-oom-XXXXXX";
  if (!::mkdtemp(dir)) return 2;
  const std::string path = std::string(dir) + "/model.ampx";
  int64_t points = 0;
  for (int64_t n = 0;; ++n) {
    bool completed = false;
    {
      Model m;
      Program p{m, path, n};
      // A first clean step, so that the one under test runs with the
      // gradients and optimizer state a training loop has.
      if (!p.step() || !p.save_and_load()) fail("the clean step failed", n);
      refused = 0;
      allowance = n;
      completed = p.step() && p.save_and_load();
      allowance = -1;
      if (!completed && refused == 0) fail("a call failed but no allocation was refused", n);
      p.recover();
      if (!p.step() || !p.save_and_load()) fail("the step after memory came back failed", n);
    }
    if (completed) break;
    ++points;
  }
  ::unlink(path.c_str());
  ::rmdir(dir);
  std::printf("persistent_oom_test: memory exhausted from each of %lld allocation points of a "
              "step, a save and a load: OUT_OF_MEMORY each time, then a clean step\n",
              static_cast<long long>(points));
  return 0;
}
