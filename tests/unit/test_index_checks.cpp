// test_index_checks.cpp -- class labels and embedding indices are checked
// where they live (Backend::check_indices), so cross_entropy needs no round
// trip to the host: the primitive against a plain host reference on the
// test device, and the C API's reporting -- at once on the CPU, at the next
// call that waits for the device on a GPU, once either way, with every
// object as it was.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/backend.h"
#include "support.h"
#include "training_fixture.h"
#include "unit/backend_caps.h"

using ampx_fixture::make;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using ampx::impl::DType;
using ampx::impl::IndexCheck;

constexpr int kFields = ampx::impl::kRecordFields;
using Record = std::array<int64_t, kFields>;

// Device memory of the test device's backend, with host copies in and out.
struct DeviceBuffers {
  std::unique_ptr<ampx::impl::Backend> backend;
  std::unique_ptr<ampx::impl::Allocator> memory;
  std::vector<std::pair<void*, size_t>> owned;

  DeviceBuffers() {
    ampx::impl::BackendOptions options;
    options.device_type = ampx_test::test_device();
    backend = ampx::impl::create_backend(options);
    memory = backend->make_default_allocator();
  }
  ~DeviceBuffers() {
    backend->synchronize();
    for (auto& [p, n] : owned) memory->deallocate(p, n);
  }
  void* upload(const void* host, size_t bytes) {
    void* p = memory->allocate(bytes == 0 ? 1 : bytes);
    REQUIRE(p != nullptr);
    owned.emplace_back(p, bytes == 0 ? 1 : bytes);
    if (bytes) backend->copy_from_host(p, host, bytes);
    return p;
  }
  template <class T>
  T download(const void* p) {
    T value{};
    backend->copy_to_host(&value, p, sizeof value);
    return value;
  }
};

struct Found {
  float valid = 0;
  Record record{};
};

// What check_indices must compute, on the host.
template <class Index>
Found reference(const std::vector<Index>& idx, const IndexCheck& check, Record record) {
  Found f;
  int64_t counted = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i];
    if (check.has_ignore && v == check.ignore_index) continue;
    ++counted;
    if ((v < 0 || v >= check.limit) && record[ampx::impl::kRecordPosition] == -1)
      record = {static_cast<int64_t>(i), v, check.limit, check.op, check.call};
  }
  f.valid = static_cast<float>(counted);
  f.record = record;
  return f;
}

template <class Index>
Found run(DeviceBuffers& d, const std::vector<Index>& idx, DType type, const IndexCheck& check,
          const Record& before) {
  void* indices = d.upload(idx.data(), idx.size() * sizeof(Index));
  const float sentinel = -1.0f;
  void* valid = d.upload(&sentinel, sizeof sentinel);
  void* record = d.upload(before.data(), sizeof before);
  ampx_test::nn_of(d.backend).check_indices(indices, type, static_cast<int64_t>(idx.size()), check,
                                            static_cast<float*>(valid),
                                            static_cast<int64_t*>(record));
  Found f;
  f.valid = d.download<float>(valid);
  f.record = d.download<Record>(record);
  return f;
}

// An integer tensor of `dims` holding `values`.
template <class T>
ampx_tensor ints(ampx_context ctx, ampx_dtype dtype, const std::vector<int64_t>& dims,
                 const std::vector<T>& values) {
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, static_cast<int32_t>(dims.size()), dims.data(),
                                        values.data(), values.size() * sizeof(T), &t) == AMPX_OK,
                  last_error());
  return t;
}

const Record kClear = {-1, -1, -1, -1, -1};

template <class Index>
void check_cases(DType type) {
  DeviceBuffers d;
  std::mt19937 rng(3);
  // Sizes around a block, many blocks, and past what the grid covers at
  // once; bad indices at random places, several per case so the first must
  // be found among them.
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{257}, size_t{100000}, size_t{3000001}}) {
    for (int bad : {0, 1, 5}) {
      CAPTURE(n);
      CAPTURE(bad);
      std::vector<Index> idx(n);
      std::uniform_int_distribution<int> label(0, 9);
      for (Index& v : idx) v = static_cast<Index>(label(rng));
      for (size_t i = 0; i < idx.size(); i += 7) idx[i] = -100;  // ignored
      if (n > 0) {
        std::uniform_int_distribution<size_t> where(0, n - 1);
        for (int b = 0; b < bad; ++b) idx[where(rng)] = static_cast<Index>(b % 2 ? -3 : 10 + b);
      }
      IndexCheck check;
      check.limit = 10;
      check.has_ignore = true;
      check.ignore_index = -100;
      check.op = ampx::impl::kCheckCrossEntropyLabels;
      check.call = 41;
      const Found want = reference(idx, check, kClear);
      const Found got = run(d, idx, type, check, kClear);
      CHECK(got.valid == want.valid);
      CHECK(got.record == want.record);

      // An earlier finding is kept, whatever this call finds.
      const Record earlier = {3, 99, 7, ampx::impl::kCheckEmbeddingIndices, 2};
      CHECK(run(d, idx, type, check, earlier).record == earlier);
      // Without ignore_index, -100 is out of range and every index counts.
      check.has_ignore = false;
      const Found plain = run(d, idx, type, check, kClear);
      CHECK(plain.valid == static_cast<float>(n));
      CHECK(plain.record == reference(idx, check, kClear).record);
    }
  }
}

}  // namespace

TEST_CASE("index checks: counts and the first bad index as a host loop finds them, i32 and i64") {
  check_cases<int32_t>(DType::I32);
  check_cases<int64_t>(DType::I64);
}

TEST_CASE("index checks: i64 values beyond i32 and the extremes are bad, not wrapped") {
  DeviceBuffers d;
  const std::vector<int64_t> idx = {1, int64_t{1} << 32, std::numeric_limits<int64_t>::min(), 2};
  IndexCheck check;
  check.limit = 4;
  check.op = ampx::impl::kCheckEmbeddingIndices;
  const Found got = run(d, idx, DType::I64, check, kClear);
  CHECK(got.record[ampx::impl::kRecordPosition] == 1);
  CHECK(got.record[ampx::impl::kRecordValue] == (int64_t{1} << 32));
  CHECK(got.valid == 4.0f);
}

TEST_CASE("index checks: a bad label is reported once, at once on the CPU, at the next wait on a GPU") {
  Ctx ctx;
  const bool cpu = ampx_test::test_device() == AMPX_DEVICE_CPU;
  Tensor logits(make(ctx, AMPX_F32, {3, 4}, {0.1, 0.2, 0.3, 0.4, 1, 2, 3, 4, -1, 0, 1, 2}, true));
  Tensor bad(ints<int64_t>(ctx, AMPX_I64, {3}, {0, 7, 1}));
  Tensor good(ints<int64_t>(ctx, AMPX_I64, {3}, {0, 3, 1}));
  Tensor loss;
  const ampx_status status = ampx_cross_entropy(logits, bad, AMPX_REDUCTION_MEAN, -100, loss.out());
  if (cpu) {
    CHECK(status == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(loss.handle == nullptr);
  } else {
    // Enqueued; the loss of a batch with a bad label is NaN, and the first
    // call that waits for the device reports the label instead of the data.
    REQUIRE(status == AMPX_OK);
    float value = 0.0f;
    CHECK(ampx_tensor_to_host(loss, &value, sizeof value) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(value == 0.0f);
    CHECK_MESSAGE(contains(last_error(), "first call after it that waits"), last_error());
  }
  CHECK_MESSAGE(contains(last_error(), "labels[1] is 7 but there are 4 classes"), last_error());
  CHECK_MESSAGE(contains(last_error(), "cross_entropy (checked op 1 "), last_error());
  // Reported once: the context is usable again, and the next batch trains.
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
  REQUIRE(ampx_cross_entropy(logits, good, AMPX_REDUCTION_MEAN, -100, loss.out()) == AMPX_OK);
  float value = 0.0f;
  REQUIRE(ampx_tensor_to_host(loss, &value, sizeof value) == AMPX_OK);
  // Reference: mean over rows of logsumexp(x_r) - x_r[label_r].
  const double rows[3][4] = {{0.1, 0.2, 0.3, 0.4}, {1, 2, 3, 4}, {-1, 0, 1, 2}};
  const int labels[3] = {0, 3, 1};
  double want = 0.0;
  for (int r = 0; r < 3; ++r) {
    double s = 0.0;
    for (double x : rows[r]) s += std::exp(x);
    want += std::log(s) - rows[r][labels[r]];
  }
  want /= 3.0;
  CHECK(std::fabs(value - want) <= 1e-6 * std::fabs(want));
}

TEST_CASE("index checks: the mean divides by the labels not ignored; none counted gives NaN") {
  Ctx ctx;
  Tensor logits(make(ctx, AMPX_F32, {4, 3}, {1, 2, 3, 0, 0, 0, -2, 5, 1, 3, 3, -3}, true));
  Tensor labels(ints<int32_t>(ctx, AMPX_I32, {4}, {2, -1, 1, -1}));
  Tensor loss;
  REQUIRE(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -1, loss.out()) == AMPX_OK);
  REQUIRE(ampx_backward(loss, nullptr) == AMPX_OK);
  float value = 0.0f;
  REQUIRE(ampx_tensor_to_host(loss, &value, sizeof value) == AMPX_OK);
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double lse2 = std::log(std::exp(-2.0) + std::exp(5.0) + std::exp(1.0));
  const double want = ((lse0 - 3.0) + (lse2 - 5.0)) / 2.0;
  CHECK(std::fabs(value - want) <= 1e-6 * want);
  // Gradient of row 0: (softmax - onehot) / 2; ignored rows get zeros.
  Tensor grad;
  REQUIRE(ampx_tensor_grad(logits, grad.out()) == AMPX_OK);
  const std::vector<float> g = ampx_test::download<float>(grad);
  REQUIRE(g.size() == 12);
  for (int j = 0; j < 3; ++j) {
    const double p = std::exp((j + 1.0) - lse0);
    CHECK(std::fabs(g[static_cast<size_t>(j)] - (p - (j == 2)) / 2.0) <= 1e-6);
    CHECK(g[static_cast<size_t>(3 + j)] == 0.0f);
    CHECK(g[static_cast<size_t>(9 + j)] == 0.0f);
  }

  Tensor all_ignored(ints<int32_t>(ctx, AMPX_I32, {4}, {-1, -1, -1, -1}));
  REQUIRE(ampx_cross_entropy(logits, all_ignored, AMPX_REDUCTION_MEAN, -1, loss.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_to_host(loss, &value, sizeof value) == AMPX_OK);
  CHECK(std::isnan(value));
}

TEST_CASE("index checks: a bad embedding index, at once on the CPU, later on a GPU with a zero row") {
  Ctx ctx;
  Tensor weight(make(ctx, AMPX_F32, {5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, true));
  Tensor indices(ints<int32_t>(ctx, AMPX_I32, {2, 2}, {0, 4, 5, 1}));
  Tensor out;
  const ampx_status status = ampx_embedding(weight, indices, out.out());
  if (ampx_test::test_device() == AMPX_DEVICE_CPU) {
    CHECK(status == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(out.handle == nullptr);
  } else {
    REQUIRE(status == AMPX_OK);
    // Backward through it: the bad index's gradient row goes nowhere.
    Tensor total;
    REQUIRE(ampx_sum(out, total.out()) == AMPX_OK);
    REQUIRE(ampx_backward(total, nullptr) == AMPX_OK);
    CHECK(ampx_context_synchronize(ctx) == AMPX_ERR_INVALID_ARGUMENT);
    const std::vector<float> rows = ampx_test::download<float>(out);
    CHECK(rows == std::vector<float>{0, 1, 8, 9, 0, 0, 2, 3});
    Tensor grad;
    REQUIRE(ampx_tensor_grad(weight, grad.out()) == AMPX_OK);
    CHECK(ampx_test::download<float>(grad) == std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0, 1, 1});
  }
  CHECK_MESSAGE(contains(last_error(), "indices[2] (in row-major order) is 5 but 'weight' has 5 rows"),
                last_error());
  CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
}

TEST_CASE("index checks: gathers and scatter-adds skip rows outside the table") {
  // The kernels' own guard, for indices the op reports only later.
  DeviceBuffers d;
  const std::vector<float> table = {0, 1, 2, 3, 4, 5};  // 3 rows of 2
  const std::vector<int64_t> idx = {2, -1, 3, 0, std::numeric_limits<int64_t>::max()};
  void* t = d.upload(table.data(), table.size() * sizeof(float));
  void* i = d.upload(idx.data(), idx.size() * sizeof(int64_t));
  std::vector<float> out_host(10, 7.0f);
  void* out = d.upload(out_host.data(), out_host.size() * sizeof(float));
  ampx_test::nn_of(d.backend).gather_rows(t, 2 * sizeof(float), 3, i, DType::I64, 5, out);
  d.backend->copy_to_host(out_host.data(), out, out_host.size() * sizeof(float));
  CHECK(out_host == std::vector<float>{4, 5, 0, 0, 0, 0, 0, 1, 0, 0});
  const std::vector<float> src = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  void* s = d.upload(src.data(), src.size() * sizeof(float));
  std::vector<float> dst_host(6, 0.0f);
  void* dst = d.upload(dst_host.data(), dst_host.size() * sizeof(float));
  ampx_test::nn_of(d.backend).scatter_add_rows(s, DType::F32, 2, i, DType::I64, 5,
                                               static_cast<float*>(dst), 3);
  d.backend->copy_to_host(dst_host.data(), dst, dst_host.size() * sizeof(float));
  CHECK(dst_host == std::vector<float>{4, 4, 0, 0, 1, 1});
}
