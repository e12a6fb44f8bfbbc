// The thread rules of ampx.h, exercised (and run under ThreadSanitizer by
// the tsan preset, tools/reliability.sh):
//  - separate contexts trained from separate threads at once give, bit for
//    bit, what the same training gives run one after another;
//  - ampx_tensor_release from another thread while the owning thread keeps
//    training in the same context (a garbage collector's finalizer), with
//    the allocator's free hook and a wrap deleter running on that thread;
//  - every object made on one thread released from another, in any order;
//  - ampx_last_error / ampx_last_status per thread;
//  - the functions marked thread-safe, called from many threads at once.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "platform/platform.h"
#include "training_fixture.h"

using namespace ampx_fixture;

namespace {

constexpr int64_t kBatch = 16, kIn = 8, kHidden = 32, kClasses = 4;

// A small classifier trained with autocast f16, a dynamic loss scaler and
// AdamW, every step inside a scope. `ctx` is borrowed.
struct Trainer {
  ampx_context ctx;
  ampx_tensor x = nullptr, labels = nullptr, w1 = nullptr, b1 = nullptr, w2 = nullptr, b2 = nullptr;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_autocast policy = nullptr;

  Trainer(ampx_context context, uint64_t seed) : ctx(context) {
    Rng rng(seed);
    x = make(ctx, AMPX_F32, std::vector<int64_t>{kBatch, kIn}, rng.vector(kBatch * kIn, -1, 1));
    std::vector<int32_t> label_values(kBatch);
    for (int32_t& l : label_values) l = static_cast<int32_t>(rng.next() % kClasses);
    const int64_t n = kBatch;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_I32, 1, &n, label_values.data(),
                                  sizeof(int32_t) * kBatch, &labels) == AMPX_OK);
    w1 = make(ctx, AMPX_F32, std::vector<int64_t>{kHidden, kIn},
              rng.vector(kHidden * kIn, -0.35, 0.35), true);
    b1 = make(ctx, AMPX_F32, std::vector<int64_t>{kHidden}, rng.vector(kHidden, -0.35, 0.35), true);
    w2 = make(ctx, AMPX_F16, std::vector<int64_t>{kClasses, kHidden},
              rng.vector(kClasses * kHidden, -0.18, 0.18), true);
    b2 = make(ctx, AMPX_F32, std::vector<int64_t>{kClasses}, rng.vector(kClasses, -0.18, 0.18),
              true);
    const ampx_tensor params[] = {w1, b1, w2, b2};
    ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
    adam.lr = 1e-2;
    REQUIRE(ampx_optimizer_create_adam(ctx, params, 4, &adam, &opt) == AMPX_OK);
    ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
    so.growth_interval = 3;
    REQUIRE(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK);
    REQUIRE(ampx_autocast_create(ctx, nullptr, &policy) == AMPX_OK);
  }

  ~Trainer() {
    ampx_autocast_release(policy);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : {x, labels, w1, b1, w2, b2}) ampx_tensor_release(t);
  }

  // One step. `keep` (may be NULL) receives a new reference to the step's
  // logits, which outlive the scope.
  void step(ampx_tensor* keep = nullptr) {
    ampx_tensor h = nullptr, d = nullptr, logits = nullptr, loss = nullptr;
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    REQUIRE(ampx_linear(x, w1, b1, AMPX_ACTIVATION_GELU, &h) == AMPX_OK);
    REQUIRE(ampx_dropout(h, 0.1, 1, &d) == AMPX_OK);
    REQUIRE(ampx_linear(d, w2, b2, AMPX_ACTIVATION_NONE, &logits) == AMPX_OK);
    REQUIRE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -100, &loss) == AMPX_OK);
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    REQUIRE(ampx_backward(loss, scaler) == AMPX_OK);
    REQUIRE(ampx_scaler_unscale(scaler, opt) == AMPX_OK);
    REQUIRE(ampx_clip_grad_norm(opt, 5.0, 2.0, 0, nullptr) == AMPX_OK);
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
    if (keep) REQUIRE(ampx_tensor_retain(*keep = logits) == AMPX_OK);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }

  // Parameters, masters, moments, step counts and the scaler's state.
  std::pair<Snapshot, std::vector<double>> result() const {
    const ampx_scaler_state s = scaler_state_of(scaler);
    return {
        snapshot(opt, {w1, b1, w2, b2}),
        {s.scale, static_cast<double>(s.growth_tracker), static_cast<double>(s.counters.skipped)}};
  }
};

constexpr int kSteps = 6;

using Result = std::pair<Snapshot, std::vector<double>>;

ampx_context make_context(uint64_t seed, int32_t threads) {
  ampx_context_options o = ampx_context_options_default();
  o.device_type = ampx_test::test_device();
  o.num_threads = threads;
  o.seed = seed;
  ampx_context ctx = nullptr;
  REQUIRE_MESSAGE(ampx_context_create(&o, &ctx) == AMPX_OK, last_error());
  return ctx;
}

Result train(uint64_t seed) {
  ampx_context ctx = make_context(seed, 2);
  Result out;
  {
    Trainer t(ctx, seed);
    for (int s = 0; s < kSteps; ++s) t.step();
    out = t.result();
  }
  ampx_context_release(ctx);
  return out;
}

// Host memory hooks that count what is live and which threads freed it.
struct CountingAllocator {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> freed_elsewhere{0};
  std::thread::id owner = std::this_thread::get_id();

  static void* alloc(void* user, size_t bytes, size_t alignment) {
    void* p = ampx::impl::platform::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (p) ++static_cast<CountingAllocator*>(user)->live;
    return p;
  }
  static void release(void* user, void* ptr, size_t) {
    auto& self = *static_cast<CountingAllocator*>(user);
    if (std::this_thread::get_id() != self.owner) ++self.freed_elsewhere;
    --self.live;
    ampx::impl::platform::aligned_free(ptr);
  }
};

ampx_context counting_context(CountingAllocator& memory) {
  ampx_context_options o = ampx_context_options_default();
  o.num_threads = 2;
  o.allocator = {sizeof(ampx_allocator), &CountingAllocator::alloc, &CountingAllocator::release, &memory};
  ampx_context ctx = nullptr;
  REQUIRE_MESSAGE(ampx_context_create(&o, &ctx) == AMPX_OK, last_error());
  return ctx;
}

// A queue of handles a "finalizer" thread releases.
struct ReleaseQueue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<ampx_tensor> handles;
  bool closed = false;

  void push(ampx_tensor t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      handles.push_back(t);
    }
    ready.notify_one();
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      closed = true;
    }
    ready.notify_one();
  }
  // Releases handles as they come until closed and drained.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      ready.wait(lock, [&] { return closed || !handles.empty(); });
      if (handles.empty()) return;
      const ampx_tensor t = handles.front();
      handles.pop_front();
      lock.unlock();
      ampx_tensor_release(t);
      lock.lock();
    }
  }
};

struct Deleted {
  std::atomic<int> count{0};
  static void deleter(void* user, void* data) {
    ++static_cast<Deleted*>(user)->count;
    ampx::impl::platform::aligned_free(data);
  }
};

}  // namespace

TEST_CASE("threads: separate contexts train at once, bit for bit as one after another") {
  constexpr int kModels = 4;
  std::vector<Result> sequential;
  for (int i = 0; i < kModels; ++i) sequential.push_back(train(100 + i));

  std::vector<Result> threaded(kModels);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kModels; ++i)
    threads.emplace_back([i, &threaded, &failures] {
      try {
        threaded[i] = train(100 + i);
      } catch (...) {
        ++failures;  // a REQUIRE that failed on this thread (doctest reports it)
      }
    });
  for (std::thread& t : threads) t.join();
  REQUIRE(failures == 0);
  for (int i = 0; i < kModels; ++i) {
    CAPTURE(i);
    CHECK(threaded[i].first == sequential[i].first);
    CHECK(threaded[i].second == sequential[i].second);
  }
}

TEST_CASE("threads: tensors released by another thread while their context trains") {
  CountingAllocator memory;
  Deleted deleted;
  constexpr int kWrapped = 3;
  Result with_finalizer;
  {
    ampx_context ctx = counting_context(memory);
    ReleaseQueue queue;
    std::thread finalizer([&queue] { queue.drain(); });
    {
      Trainer t(ctx, 5);
      for (int s = 0; s < kSteps; ++s) {
        // The step's logits, a cast and a wrapped host buffer: each last
        // reference goes to the other thread while this one trains on.
        ampx_tensor logits = nullptr, cast = nullptr, wrapped = nullptr;
        t.step(&logits);
        REQUIRE(ampx_tensor_cast(logits, AMPX_BF16, &cast) == AMPX_OK);
        queue.push(logits);
        queue.push(cast);
        if (s < kWrapped) {
          const int64_t n = 64;
          void* data = ampx::impl::platform::aligned_alloc(64, n * sizeof(float));
          REQUIRE(ampx_tensor_wrap(ctx, AMPX_F32, 1, &n, data, n * sizeof(float), &Deleted::deleter,
                                   &deleted, &wrapped) == AMPX_OK);
          queue.push(wrapped);
        }
      }
      queue.close();
      finalizer.join();
      with_finalizer = t.result();
    }
    ampx_context_release(ctx);
  }
  CHECK(deleted.count == kWrapped);
  CHECK(memory.live == 0);
  CHECK(memory.freed_elsewhere > 0);
  // Releasing elsewhere changes nothing about the training itself.
  Result alone;
  {
    ampx_context ctx = counting_context(memory);
    {
      Trainer t(ctx, 5);
      for (int s = 0; s < kSteps; ++s) t.step();
      alone = t.result();
    }
    ampx_context_release(ctx);
  }
  CHECK(with_finalizer.first == alone.first);
  CHECK(with_finalizer.second == alone.second);
}

TEST_CASE("threads: everything made on one thread is released on another, in any order") {
  CountingAllocator memory;
  ampx_context ctx = nullptr;
  ampx_tensor handles[6] = {};
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_autocast policy = nullptr;
  std::thread maker([&] {
    ctx = counting_context(memory);
    Trainer t(ctx, 9);
    t.step();
    t.step();
    // Take over the trainer's references.
    const ampx_tensor own[6] = {t.x, t.labels, t.w1, t.b1, t.w2, t.b2};
    std::copy(own, own + 6, handles);
    opt = t.opt;
    scaler = t.scaler;
    policy = t.policy;
    t.x = t.labels = t.w1 = t.b1 = t.w2 = t.b2 = nullptr;
    t.opt = nullptr;
    t.scaler = nullptr;
    t.policy = nullptr;
  });
  maker.join();
  REQUIRE(memory.live > 0);
  // The context first, the optimizer before its scaler's last holder, the
  // parameters after the optimizer that retains them: all from this thread.
  std::thread releaser([&] {
    ampx_context_release(ctx);
    ampx_tensor_release(handles[2]);
    ampx_scaler_release(scaler);
    ampx_autocast_release(policy);
    ampx_optimizer_release(opt);
    for (int i = 0; i < 6; ++i)
      if (i != 2) ampx_tensor_release(handles[i]);
  });
  releaser.join();
  CHECK(memory.live == 0);
}

TEST_CASE("threads: the last error is per thread") {
  constexpr int kThreads = 4;
  std::atomic<int> arrived{0};
  std::vector<ampx_status> status(kThreads), last(kThreads);
  std::vector<std::string> message(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      // Every thread fails differently (thread 3 not at all), all at once.
      ++arrived;
      while (arrived < kThreads) std::this_thread::yield();
      ampx_tensor t = nullptr;
      const int64_t bad[1] = {-1};
      switch (i) {
        case 0:
          status[i] = ampx_tensor_empty(nullptr, AMPX_F32, 0, nullptr, &t);
          break;
        case 1:
          status[i] = ampx_tensor_retain(nullptr);
          break;
        case 2: {
          ampx_context ctx = nullptr;
          if (ampx_context_create(nullptr, &ctx) == AMPX_OK) {
            status[i] = ampx_tensor_empty(ctx, AMPX_F32, 1, bad, &t);
            ampx_context_release(ctx);
          }
          break;
        }
        default:
          status[i] = AMPX_OK;
          break;
      }
      last[i] = ampx_last_status();
      message[i] = ampx_last_error();
    });
  for (std::thread& t : threads) t.join();
  CHECK(status[0] == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_test::contains(message[0], "ampx_tensor_empty"));
  CHECK(status[1] == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_test::contains(message[1], "ampx_tensor_retain"));
  CHECK(status[2] == AMPX_ERR_SHAPE);
  CHECK(ampx_test::contains(message[2], "shape[0] is -1"));
  CHECK(status[3] == AMPX_OK);
  CHECK(message[3].empty());
  for (int i = 0; i < kThreads; ++i) CHECK(last[i] == status[i]);
}

TEST_CASE("threads: the thread-safe functions, from many threads at once") {
  constexpr int kThreads = 6;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&failures] {
      for (int round = 0; round < 20; ++round) {
        bool ok = ampx_version() == AMPX_VERSION_NUMBER &&
                  std::string(ampx_version_string()).size() > 0 &&
                  std::string(ampx_status_string(AMPX_ERR_SHAPE)) == "AMPX_ERR_SHAPE" &&
                  ampx_dtype_size(AMPX_BF16) == 2 &&
                  std::string(ampx_dtype_name(AMPX_F16)) == "f16" &&
                  ampx_cuda_device_count() >= 0 && ampx_has_cuda() >= 0 &&
                  ampx_context_options_default().struct_size == sizeof(ampx_context_options) &&
                  ampx_autocast_options_default().dtype == AMPX_F16;
        ampx_context ctx = nullptr;
        ok = ok && ampx_context_create(nullptr, &ctx) == AMPX_OK;
        ampx_context_release(ctx);
        if (!ok) ++failures;
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(failures == 0);
}
