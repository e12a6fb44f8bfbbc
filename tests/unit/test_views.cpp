// Tensor views (ampx_tensor_view) through the C API: 100 parameters and
// their 100 gradients laid out as views in two flat buffers train exactly --
// bit for bit, parameters, masters and moments -- as the same parameters in
// 100 separate tensors, under every optimizer and the loss scaler, for F32,
// F16 and BF16; the buffers' bytes between the views stay untouched; DLPack
// export of a view; a view keeps its memory alive; bad arguments.
//
// The sizes are odd and the views are separated by one-element gaps, so
// most views start at element offsets that are not multiples of 2, 4 or 8:
// every vectorised path of the backends meets ragged heads and tails.
#include <dlpack/dlpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"
#include "unit/training_fixture.h"

using ampx_fixture::bytes_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;

namespace {

constexpr int kCount = 100;
constexpr int kSteps = 3;

struct Handle {
  ampx_tensor t = nullptr;
  Handle() = default;
  explicit Handle(ampx_tensor h) : t(h) {}
  Handle(Handle&& o) noexcept : t(o.t) { o.t = nullptr; }
  Handle& operator=(Handle&& o) noexcept {
    std::swap(t, o.t);
    return *this;
  }
  ~Handle() { ampx_tensor_release(t); }
  operator ampx_tensor() const { return t; }
};

struct Optimizer {
  ampx_optimizer o = nullptr;
  ~Optimizer() { ampx_optimizer_release(o); }
  operator ampx_optimizer() const { return o; }
};

struct Scaler {
  ampx_scaler s = nullptr;
  ~Scaler() { ampx_scaler_release(s); }
  operator ampx_scaler() const { return s; }
};

struct OptimConfig {
  const char* name;
  bool adam;
  ampx_sgd_options sgd;
  ampx_adam_options adam_options;
};

std::vector<OptimConfig> optimizer_configs() {
  std::vector<OptimConfig> configs;
  ampx_sgd_options sgd = ampx_sgd_options_default();
  sgd.lr = 0.1;
  configs.push_back({"sgd", false, sgd, {}});
  ampx_sgd_options momentum = sgd;
  momentum.momentum = 0.9;
  momentum.dampening = 0.1;
  configs.push_back({"sgd momentum", false, momentum, {}});
  ampx_sgd_options nesterov = sgd;
  nesterov.momentum = 0.9;
  nesterov.nesterov = 1;
  configs.push_back({"sgd nesterov", false, nesterov, {}});
  ampx_sgd_options decay = momentum;
  decay.weight_decay = 0.05;
  configs.push_back({"sgd weight decay", false, decay, {}});
  ampx_adam_options adam = ampx_adam_options_default();
  adam.lr = 0.01;
  adam.weight_decay = 0.02;
  configs.push_back({"adam", true, {}, adam});
  ampx_adam_options adamw = ampx_adamw_options_default();
  adamw.lr = 0.01;
  configs.push_back({"adamw", true, {}, adamw});
  ampx_adam_options amsgrad = adamw;
  amsgrad.amsgrad = 1;
  configs.push_back({"adamw amsgrad", true, {}, amsgrad});
  return configs;
}

int64_t size_of(int i) { return 2 * ((i * 5) % 7) + 1; }  // odd: 1 .. 13

// Element offsets of the views: a one-element gap before each, two after
// the last.
std::vector<int64_t> layout(int64_t* total) {
  std::vector<int64_t> offsets;
  int64_t at = 1;
  for (int i = 0; i < kCount; ++i) {
    offsets.push_back(at);
    at += size_of(i) + 1;
  }
  *total = at + 1;
  return offsets;
}

float value(int tensor, int64_t element, int step, int salt) {
  const uint32_t h = static_cast<uint32_t>(tensor * 7919 + element * 104729 + step * 15485863 +
                                           salt * 2654435761u);
  return static_cast<float>(static_cast<int32_t>((h ^ (h >> 13)) * 2246822519u) % 20001) / 10000.0f;
}

ampx_tensor from_f32(ampx_context ctx, const std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, AMPX_F32, 1, &n, v.data(), v.size() * 4, &t) == AMPX_OK,
                  last_error());
  return t;
}

// One training run's tensors: separate ones, or views into two flat buffers.
struct Model {
  Handle param_buffer, grad_buffer;  // flat runs only
  std::vector<Handle> params, grads;
  std::vector<uint8_t> param_buffer_start, grad_buffer_start;
};

Model make_model(ampx_context ctx, ampx_dtype dtype, bool flat) {
  Model m;
  int64_t total = 0;
  const std::vector<int64_t> offsets = layout(&total);
  const size_t element = ampx_dtype_size(dtype);
  if (flat) {
    REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &total, &m.param_buffer.t) == AMPX_OK);
    REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &total, &m.grad_buffer.t) == AMPX_OK);
    // Sentinels in the gaps, to see that nothing writes outside the views.
    REQUIRE(ampx_tensor_fill(m.param_buffer, -7.25) == AMPX_OK);
    REQUIRE(ampx_tensor_fill(m.grad_buffer, 3.5) == AMPX_OK);
  }
  for (int i = 0; i < kCount; ++i) {
    const int64_t n = size_of(i);
    std::vector<float> init(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) init[static_cast<size_t>(e)] = value(i, e, -1, 1);
    Handle staged(from_f32(ctx, init));
    Handle p, g;
    if (flat) {
      const size_t offset = static_cast<size_t>(offsets[static_cast<size_t>(i)]) * element;
      REQUIRE_MESSAGE(ampx_tensor_view(m.param_buffer, offset, dtype, 1, &n, &p.t) == AMPX_OK,
                      last_error());
      REQUIRE_MESSAGE(ampx_tensor_view(m.grad_buffer, offset, dtype, 1, &n, &g.t) == AMPX_OK,
                      last_error());
    } else {
      REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &n, &p.t) == AMPX_OK);
      REQUIRE(ampx_tensor_zeros(ctx, dtype, 1, &n, &g.t) == AMPX_OK);
    }
    REQUIRE_MESSAGE(ampx_tensor_copy(p, staged) == AMPX_OK, last_error());
    REQUIRE(ampx_tensor_set_requires_grad(p, 1) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_tensor_set_grad(p, g) == AMPX_OK, last_error());
    m.params.push_back(std::move(p));
    m.grads.push_back(std::move(g));
  }
  if (flat) {
    m.param_buffer_start = bytes_of(m.param_buffer);
    m.grad_buffer_start = bytes_of(m.grad_buffer);
  }
  return m;
}

// Writes step `step`'s gradients (the same values in both runs), with an
// inf in one element of tensor 37 when `inject_inf`.
void write_grads(ampx_context ctx, Model& m, int step, bool inject_inf) {
  for (int i = 0; i < kCount; ++i) {
    const int64_t n = size_of(i);
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) g[static_cast<size_t>(e)] = 4.0f * value(i, e, step, 2);
    if (inject_inf && i == 37) g[static_cast<size_t>(n / 2)] = INFINITY;
    Handle staged(from_f32(ctx, g));
    REQUIRE_MESSAGE(ampx_tensor_copy(m.grads[static_cast<size_t>(i)], staged) == AMPX_OK,
                    last_error());
  }
}

ampx_optimizer make_optimizer(ampx_context ctx, const OptimConfig& c, const Model& m) {
  std::vector<ampx_tensor> list;
  for (const Handle& p : m.params) list.push_back(p);
  ampx_optimizer o = nullptr;
  const ampx_status status =
      c.adam ? ampx_optimizer_create_adam(ctx, list.data(), list.size(), &c.adam_options, &o)
             : ampx_optimizer_create_sgd(ctx, list.data(), list.size(), &c.sgd, &o);
  REQUIRE_MESSAGE(status == AMPX_OK, last_error());
  return o;
}

// Everything a run leaves behind, per parameter: the parameter's bytes and
// each optimizer state tensor's bytes (empty where the optimizer has none).
struct Outcome {
  std::vector<std::vector<uint8_t>> params;
  std::vector<std::vector<std::vector<uint8_t>>> states;
  double scale = 0;
};

Outcome collect(ampx_optimizer opt, const Model& m, ampx_scaler scaler) {
  Outcome out;
  for (const Handle& p : m.params) {
    out.params.push_back(bytes_of(p));
    std::vector<std::vector<uint8_t>> states;
    for (ampx_optimizer_state kind : {AMPX_STATE_MASTER, AMPX_STATE_MOMENTUM, AMPX_STATE_EXP_AVG_SQ,
                                      AMPX_STATE_MAX_EXP_AVG_SQ}) {
      Handle state;
      const ampx_status status = ampx_optimizer_state_tensor(opt, p, kind, &state.t);
      REQUIRE_MESSAGE((status == AMPX_OK || status == AMPX_ERR_NOT_SUPPORTED), last_error());
      states.push_back(status == AMPX_OK ? bytes_of(state) : std::vector<uint8_t>{});
    }
    out.states.push_back(std::move(states));
  }
  if (scaler) REQUIRE(ampx_scaler_get_scale(scaler, &out.scale) == AMPX_OK);
  return out;
}

// The bytes of a flat buffer outside its views are what they were.
void check_gaps(const std::vector<uint8_t>& before, const std::vector<uint8_t>& after,
                size_t element) {
  REQUIRE(before.size() == after.size());
  int64_t total = 0;
  const std::vector<int64_t> offsets = layout(&total);
  std::vector<bool> inside(static_cast<size_t>(total), false);
  for (int i = 0; i < kCount; ++i)
    for (int64_t e = 0; e < size_of(i); ++e)
      inside[static_cast<size_t>(offsets[static_cast<size_t>(i)] + e)] = true;
  int64_t changed = 0;
  for (int64_t e = 0; e < total; ++e)
    if (!inside[static_cast<size_t>(e)] &&
        std::memcmp(&before[static_cast<size_t>(e) * element], &after[static_cast<size_t>(e) * element],
                    element) != 0)
      ++changed;
  CHECK_MESSAGE(changed == 0, changed, " gap elements changed");
}

// Trains one model for kSteps steps: with the scaler, step 1 carries an inf
// in tensor 37 (a skipped step) and the scale grows after every clean one.
Outcome train(ampx_context ctx, const OptimConfig& c, ampx_dtype dtype, bool flat, bool scaled,
              std::vector<int32_t>* found_infs) {
  Model m = make_model(ctx, dtype, flat);
  Optimizer opt;
  opt.o = make_optimizer(ctx, c, m);
  Scaler scaler;
  if (scaled) {
    ampx_scaler_options o = ampx_scaler_options_default();
    o.init_scale = 1024;
    o.growth_interval = 1;
    REQUIRE(ampx_scaler_create(ctx, &o, &scaler.s) == AMPX_OK);
  }
  for (int step = 0; step < kSteps; ++step) {
    write_grads(ctx, m, step, scaled && step == 1);
    if (scaled) {
      REQUIRE_MESSAGE(ampx_scaler_unscale(scaler, opt) == AMPX_OK, last_error());
      int32_t found = -1;
      REQUIRE(ampx_scaler_found_inf(scaler, opt, &found) == AMPX_OK);
      if (found_infs) found_infs->push_back(found);
      REQUIRE_MESSAGE(ampx_scaler_step(scaler, opt) == AMPX_OK, last_error());
      REQUIRE_MESSAGE(ampx_scaler_update(scaler) == AMPX_OK, last_error());
    } else {
      REQUIRE_MESSAGE(ampx_optimizer_step(opt) == AMPX_OK, last_error());
    }
  }
  Outcome out = collect(opt, m, scaler.s);
  if (flat) {
    const size_t element = ampx_dtype_size(dtype);
    check_gaps(m.param_buffer_start, bytes_of(m.param_buffer), element);
    check_gaps(m.grad_buffer_start, bytes_of(m.grad_buffer), element);
  }
  return out;
}

void check_same(const Outcome& separate, const Outcome& flat) {
  REQUIRE(separate.params.size() == flat.params.size());
  int params_differ = 0, states_differ = 0, states_missing = 0;
  for (size_t i = 0; i < separate.params.size(); ++i) {
    params_differ += separate.params[i] != flat.params[i];
    for (size_t k = 0; k < separate.states[i].size(); ++k) {
      states_differ += separate.states[i][k] != flat.states[i][k];
      states_missing += separate.states[i][k].empty() != flat.states[i][k].empty();
    }
  }
  CHECK(params_differ == 0);
  CHECK(states_differ == 0);
  CHECK(states_missing == 0);
  CHECK(separate.scale == flat.scale);
}

const ampx_dtype kFloatTypes[] = {AMPX_F32, AMPX_F16, AMPX_BF16};

}  // namespace

TEST_CASE("views: 100 parameter and gradient views train bit for bit as 100 separate tensors") {
  Ctx ctx;
  for (const OptimConfig& c : optimizer_configs())
    for (ampx_dtype dtype : kFloatTypes) {
      CAPTURE(c.name);
      CAPTURE(ampx_dtype_name(dtype));
      const Outcome separate = train(ctx, c, dtype, false, false, nullptr);
      const Outcome flat = train(ctx, c, dtype, true, false, nullptr);
      check_same(separate, flat);
      // The run did train: parameters moved from their starting values.
      Model fresh = make_model(ctx, dtype, false);
      CHECK(bytes_of(fresh.params[5]) != separate.params[5]);
    }
}

TEST_CASE("views: the loss scaler unscales, skips and steps views as separate tensors") {
  Ctx ctx;
  for (const OptimConfig& c : optimizer_configs())
    for (ampx_dtype dtype : kFloatTypes) {
      CAPTURE(c.name);
      CAPTURE(ampx_dtype_name(dtype));
      std::vector<int32_t> found_separate, found_flat;
      const Outcome separate = train(ctx, c, dtype, false, true, &found_separate);
      const Outcome flat = train(ctx, c, dtype, true, true, &found_flat);
      check_same(separate, flat);
      CHECK(found_flat == std::vector<int32_t>{0, 1, 0});
      CHECK(found_separate == found_flat);
      CHECK(flat.scale == 2048.0);  // 1024: grown, backed off, grown
    }
}

TEST_CASE("views: shape, dtype, data and shared memory") {
  Ctx ctx;
  const std::vector<float> values = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  Handle base(ampx_test::upload(ctx, AMPX_F32, values));
  const int64_t shape[] = {2, 3};
  Handle view;
  REQUIRE_MESSAGE(ampx_tensor_view(base, 4 * 5, AMPX_F32, 2, shape, &view.t) == AMPX_OK,
                  last_error());
  int64_t dims[2] = {};
  int32_t ndim = 0;
  ampx_dtype dtype{};
  REQUIRE(ampx_tensor_ndim(view, &ndim) == AMPX_OK);
  REQUIRE(ampx_tensor_shape(view, dims, 2) == AMPX_OK);
  REQUIRE(ampx_tensor_dtype(view, &dtype) == AMPX_OK);
  CHECK(ndim == 2);
  CHECK(dims[0] == 2);
  CHECK(dims[1] == 3);
  CHECK(dtype == AMPX_F32);
  void* base_data = nullptr;
  void* view_data = nullptr;
  REQUIRE(ampx_tensor_data(base, &base_data) == AMPX_OK);
  REQUIRE(ampx_tensor_data(view, &view_data) == AMPX_OK);
  CHECK(static_cast<char*>(view_data) == static_cast<char*>(base_data) + 20);
  CHECK(download<float>(view) == std::vector<float>{5, 6, 7, 8, 9, 10});

  // Writes through either are seen by both.
  REQUIRE(ampx_tensor_fill(view, -1.0) == AMPX_OK);
  CHECK(download<float>(base) == std::vector<float>{0, 1, 2, 3, 4, -1, -1, -1, -1, -1, -1, 11});
  REQUIRE(ampx_tensor_copy_from_host(base, values.data(), values.size() * 4) == AMPX_OK);
  CHECK(download<float>(view) == std::vector<float>{5, 6, 7, 8, 9, 10});

  // A view of a view is a view of the same memory; a view may reinterpret.
  Handle inner;
  const int64_t two = 2;
  REQUIRE(ampx_tensor_view(view, 4, AMPX_I32, 1, &two, &inner.t) == AMPX_OK);
  std::vector<int32_t> bits = download<int32_t>(inner);
  uint32_t six_bits = 0;
  const float six = 6.0f;
  std::memcpy(&six_bits, &six, 4);
  CHECK(static_cast<uint32_t>(bits[0]) == six_bits);

  // A view is a leaf with its own requires_grad, and ops on it work (the
  // reshape of a view reads the view's elements).
  int32_t requires = -1;
  REQUIRE(ampx_tensor_set_requires_grad(base, 1) == AMPX_OK);
  REQUIRE(ampx_tensor_requires_grad(view, &requires) == AMPX_OK);
  CHECK(requires == 0);
  Handle flat_view;
  const int64_t six_elems = 6;
  REQUIRE(ampx_reshape(view, 1, &six_elems, &flat_view.t) == AMPX_OK);
  CHECK(download<float>(flat_view) == std::vector<float>{5, 6, 7, 8, 9, 10});
  Handle doubled;
  REQUIRE(ampx_affine(view, 2.0, 0.0, &doubled.t) == AMPX_OK);
  CHECK(download<float>(doubled) == std::vector<float>{10, 12, 14, 16, 18, 20});
  Handle dropped;
  REQUIRE(ampx_dropout(view, 0.0, 1, &dropped.t) == AMPX_OK);
  CHECK(download<float>(dropped) == std::vector<float>{5, 6, 7, 8, 9, 10});
}

TEST_CASE("views: gradients flow into a view leaf, not into its base") {
  Ctx ctx;
  Handle base(ampx_test::upload(ctx, AMPX_F32, std::vector<float>{1, 2, 3, 4, 5, 6}));
  REQUIRE(ampx_tensor_set_requires_grad(base, 1) == AMPX_OK);
  const int64_t three = 3;
  Handle view;
  REQUIRE(ampx_tensor_view(base, 8, AMPX_F32, 1, &three, &view.t) == AMPX_OK);
  REQUIRE(ampx_tensor_set_requires_grad(view, 1) == AMPX_OK);
  Handle squared, loss;
  REQUIRE(ampx_mul(view, view, &squared.t) == AMPX_OK);
  REQUIRE(ampx_sum(squared, &loss.t) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  ampx_tensor g = nullptr, base_grad = nullptr;
  REQUIRE(ampx_tensor_grad(view, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  CHECK(download<float>(g) == std::vector<float>{6, 8, 10});
  REQUIRE(ampx_tensor_grad(base, &base_grad) == AMPX_OK);
  CHECK(base_grad == nullptr);
}

namespace {

struct DeleterLog {
  int calls = 0;
};

void count_delete(void* user_data, void*) { ++static_cast<DeleterLog*>(user_data)->calls; }

}  // namespace

TEST_CASE("views: a view keeps the memory alive after its base is released") {
  Ctx ctx;
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  Handle view;
  {
    Handle base(ampx_test::upload(ctx, AMPX_F32, values));
    const int64_t n = 3;
    REQUIRE(ampx_tensor_view(base, 12, AMPX_F32, 1, &n, &view.t) == AMPX_OK);
  }  // base released here
  CHECK(download<float>(view) == std::vector<float>{4, 5, 6});
  REQUIRE(ampx_tensor_fill(view, 9.0) == AMPX_OK);
  CHECK(download<float>(view) == std::vector<float>{9, 9, 9});

  // Wrapped memory: the deleter waits for the last view.
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) return;
  std::vector<float> host = values;
  DeleterLog log;
  Handle wrapped_view;
  {
    Handle wrapped;
    const int64_t eight = 8;
    REQUIRE(ampx_tensor_wrap(ctx, AMPX_F32, 1, &eight, host.data(), host.size() * 4, count_delete,
                             &log, &wrapped.t) == AMPX_OK);
    const int64_t two = 2;
    REQUIRE(ampx_tensor_view(wrapped, 24, AMPX_F32, 1, &two, &wrapped_view.t) == AMPX_OK);
  }
  CHECK(log.calls == 0);
  CHECK(download<float>(wrapped_view) == std::vector<float>{7, 8});
  ampx_tensor_release(wrapped_view.t);
  wrapped_view.t = nullptr;
  CHECK(log.calls == 1);
}

TEST_CASE("views: DLPack export of a view gives the allocation, the offset and the view") {
  Ctx ctx;
  const std::vector<uint16_t> halves = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  Handle base(ampx_test::upload(ctx, AMPX_F16, halves));
  const int64_t shape[] = {2, 3};
  Handle view;
  REQUIRE(ampx_tensor_view(base, 2 * 3, AMPX_F16, 2, shape, &view.t) == AMPX_OK);
  void* base_data = nullptr;
  void* view_data = nullptr;
  REQUIRE(ampx_tensor_data(base, &base_data) == AMPX_OK);
  REQUIRE(ampx_tensor_data(view, &view_data) == AMPX_OK);

  DLManagedTensor* managed = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_to_dlpack(view, &managed) == AMPX_OK, last_error());
  const DLTensor& dl = managed->dl_tensor;
  CHECK(dl.data == base_data);
  CHECK(dl.byte_offset == 6);
  CHECK(static_cast<char*>(dl.data) + dl.byte_offset == view_data);
  CHECK(dl.ndim == 2);
  CHECK(dl.shape[0] == 2);
  CHECK(dl.shape[1] == 3);
  CHECK(dl.dtype.code == kDLFloat);
  CHECK(dl.dtype.bits == 16);
  CHECK(dl.dtype.lanes == 1);

  // The export keeps the storage alive after both handles go.
  ampx_tensor_release(view.t);
  view.t = nullptr;
  ampx_tensor_release(base.t);
  base.t = nullptr;
  if (ampx_test::test_device() == AMPX_DEVICE_CPU) {
    const auto* first = reinterpret_cast<const uint16_t*>(static_cast<char*>(dl.data) + dl.byte_offset);
    CHECK(first[0] == 13);
    CHECK(first[5] == 18);
  }
  // Importing it back honours byte_offset and hands the export's deleter
  // to the new tensor.
  Handle imported;
  REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, managed, &imported.t) == AMPX_OK, last_error());
  CHECK(download<uint16_t>(imported) == std::vector<uint16_t>{13, 14, 15, 16, 17, 18});
}

TEST_CASE("views: bad arguments create nothing") {
  Ctx ctx;
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  Handle base(ampx_test::upload(ctx, AMPX_F16, std::vector<uint16_t>(20, 0x3c00)));  // 40 bytes
  ampx_tensor const sentinel = reinterpret_cast<ampx_tensor>(uintptr_t{0x5151});
  ampx_tensor out = sentinel;
  const int64_t twenty = 20, nineteen = 19, one = 1, ten = 10;

  // Out of bounds by one byte, then by one element at the end.
  CHECK_FAILS_WITH(ampx_tensor_view(base, 1, AMPX_F16, 1, &twenty, &out), AMPX_ERR_SHAPE,
                   "does not fit inside 'base'");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 2, AMPX_F16, 1, &twenty, &out), AMPX_ERR_SHAPE, "40 bytes");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 4, AMPX_F32, 1, &ten, &out), AMPX_ERR_SHAPE,
                   "does not fit");
  // Offsets whose sum with the size would wrap around.
  CHECK_FAILS_WITH(ampx_tensor_view(base, SIZE_MAX - 1, AMPX_F16, 1, &one, &out), AMPX_ERR_SHAPE,
                   "does not fit");
  CHECK_FAILS_WITH(ampx_tensor_view(base, SIZE_MAX, AMPX_F16, 0, nullptr, &out), AMPX_ERR_SHAPE,
                   "does not fit");
  CHECK_FAILS_WITH(ampx_tensor_view(base, SIZE_MAX - 3, AMPX_F32, 1, &one, &out), AMPX_ERR_SHAPE,
                   "does not fit");
  // Misaligned, inside the bounds.
  CHECK_FAILS_WITH(ampx_tensor_view(base, 1, AMPX_F16, 1, &nineteen, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "not a multiple of the 2-byte size");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 2, AMPX_F32, 1, &one, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "4-byte size of f32");
  // NULL pointers, bad dtype, bad shape.
  CHECK_FAILS_WITH(ampx_tensor_view(nullptr, 0, AMPX_F16, 1, &one, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'base' is NULL");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, AMPX_F16, 1, &one, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'out' is NULL");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, AMPX_F16, 1, nullptr, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "shape is NULL");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, static_cast<ampx_dtype>(0), 1, &one, &out),
                   AMPX_ERR_DTYPE, "not an ampx_dtype");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, static_cast<ampx_dtype>(99), 1, &one, &out),
                   AMPX_ERR_DTYPE, "not an ampx_dtype");
  const int64_t negative = -1;
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, AMPX_F16, 1, &negative, &out), AMPX_ERR_SHAPE,
                   "extents must be >= 0");
  CHECK_FAILS_WITH(ampx_tensor_view(base, 0, AMPX_F16, AMPX_MAX_DIMS + 1, &one, &out),
                   AMPX_ERR_SHAPE, "ndim");
  CHECK(out == sentinel);

  // Edge cases that fit: the last element, an empty view at the very end.
  Handle last, empty;
  REQUIRE_MESSAGE(ampx_tensor_view(base, 38, AMPX_F16, 1, &one, &last.t) == AMPX_OK, last_error());
  const int64_t zero = 0;
  REQUIRE_MESSAGE(ampx_tensor_view(base, 40, AMPX_F16, 1, &zero, &empty.t) == AMPX_OK, last_error());
  ampx_tensor_release(last.t);
  last.t = nullptr;
  ampx_tensor_release(empty.t);
  empty.t = nullptr;

  // A released base; then nothing holds the memory any more.
  ampx_tensor released = base.t;
  ampx_tensor_release(base.t);
  base.t = nullptr;
  CHECK_FAILS_WITH(ampx_tensor_view(released, 0, AMPX_F16, 1, &one, &out), AMPX_ERR_STALE_HANDLE,
                   "already released");
  CHECK(out == sentinel);
  ampx_memory_stats after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
}
