// DLPack exchange through the public C API: what an export describes and how
// long it keeps the tensor alive; what an import accepts, refuses, and when
// it calls the producer's deleter.
//
// Hand-built DLPack tensors point at the memory of an ampx tensor, so they
// are valid on whichever device the suite runs on.
#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::test_device;

using ampx_test::download;
using ampx_test::upload;

namespace {

const ampx_dtype kAllDtypes[] = {AMPX_F32, AMPX_F16, AMPX_BF16, AMPX_I32, AMPX_I64};

ampx_tensor sentinel_tensor() { return reinterpret_cast<ampx_tensor>(uintptr_t{0x4321}); }

DLDeviceType test_dl_device() { return test_device() == AMPX_DEVICE_CPU ? kDLCPU : kDLCUDA; }

uint64_t current_bytes(ampx_context ctx) {
  ampx_memory_stats s = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &s) == AMPX_OK);
  return s.current_bytes;
}

void* data_of(ampx_tensor t) {
  void* data = nullptr;
  REQUIRE(ampx_tensor_data(t, &data) == AMPX_OK);
  return data;
}

// A DLManagedTensor built the way a foreign producer would, with a deleter
// that only counts: the memory belongs to an ampx tensor the test owns.
struct Producer {
  DLManagedTensor managed{};
  int64_t shape[9] = {};
  int64_t strides[9] = {};
  int deleter_calls = 0;

  static void deleter(DLManagedTensor* self) {
    ++static_cast<Producer*>(self->manager_ctx)->deleter_calls;
  }

  Producer(void* data, DLDataType dtype, std::vector<int64_t> dims) {
    DLTensor& dl = managed.dl_tensor;
    dl.data = data;
    dl.device = DLDevice{test_dl_device(), 0};
    dl.ndim = static_cast<int32_t>(dims.size());
    dl.dtype = dtype;
    for (size_t i = 0; i < dims.size() && i < 9; ++i) shape[i] = dims[i];
    dl.shape = shape;
    dl.strides = nullptr;
    dl.byte_offset = 0;
    managed.manager_ctx = this;
    managed.deleter = &Producer::deleter;
  }
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  void set_strides(std::vector<int64_t> s) {
    for (size_t i = 0; i < s.size(); ++i) strides[i] = s[i];
    managed.dl_tensor.strides = strides;
  }
};

DLDataType dl_type(uint8_t code, uint8_t bits, uint16_t lanes = 1) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = lanes;
  return t;
}

const DLDataType kDlF32 = dl_type(kDLFloat, 32);

// Import must leave a refused DLManagedTensor exactly as it was.
bool same_bytes(const DLManagedTensor& a, const DLManagedTensor& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

TEST_CASE("dlpack: an export describes the tensor and shares its memory") {
  Ctx ctx;
  const int64_t shape[3] = {2, 3, 4};
  struct Expected {
    ampx_dtype dtype;
    uint8_t code;
    uint8_t bits;
  };
  const Expected cases[] = {{AMPX_F32, kDLFloat, 32}, {AMPX_F16, kDLFloat, 16},
                            {AMPX_BF16, kDLBfloat, 16}, {AMPX_I32, kDLInt, 32},
                            {AMPX_I64, kDLInt, 64}};
  for (const Expected& e : cases) {
    CAPTURE(e.dtype);
    Tensor t;
    REQUIRE(ampx_tensor_zeros(ctx, e.dtype, 3, shape, t.out()) == AMPX_OK);
    DLManagedTensor* m = nullptr;
    REQUIRE(ampx_tensor_to_dlpack(t, &m) == AMPX_OK);
    REQUIRE(m != nullptr);
    const DLTensor& dl = m->dl_tensor;
    CHECK(dl.ndim == 3);
    REQUIRE(dl.shape != nullptr);
    CHECK(dl.shape[0] == 2);
    CHECK(dl.shape[1] == 3);
    CHECK(dl.shape[2] == 4);
    REQUIRE(dl.strides != nullptr);  // DLPack >= 0.6 consumers may require them
    CHECK(dl.strides[0] == 12);
    CHECK(dl.strides[1] == 4);
    CHECK(dl.strides[2] == 1);
    CHECK(dl.dtype.code == e.code);
    CHECK(dl.dtype.bits == e.bits);
    CHECK(dl.dtype.lanes == 1);
    CHECK(dl.device.device_type == test_dl_device());
    CHECK(dl.device.device_id == 0);
    CHECK(dl.data == data_of(t));
    CHECK(dl.byte_offset == 0);
    const bool has_deleter = m->deleter != nullptr;  // doctest cannot print it
    REQUIRE(has_deleter);
    m->deleter(m);
  }
}

TEST_CASE("dlpack: exports of a scalar and of a zero-size tensor") {
  Ctx ctx;
  Tensor scalar;
  const float value = 2.0f;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 0, nullptr, &value, 4, scalar.out()) == AMPX_OK);
  DLManagedTensor* m = nullptr;
  REQUIRE(ampx_tensor_to_dlpack(scalar, &m) == AMPX_OK);
  CHECK(m->dl_tensor.ndim == 0);
  CHECK(m->dl_tensor.data == data_of(scalar));
  m->deleter(m);

  const int64_t shape[2] = {3, 0};
  Tensor empty;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_I32, 2, shape, empty.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_to_dlpack(empty, &m) == AMPX_OK);
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[0] == 3);
  CHECK(m->dl_tensor.shape[1] == 0);
  m->deleter(m);
}

TEST_CASE("dlpack: an export keeps the tensor alive after ampx_tensor_release until its deleter") {
  ampx_context ctx = ampx_test::test_context();
  ampx_tensor t = upload<float>(ctx, AMPX_F32, {1.5f, 2.5f, 3.5f});
  void* data = data_of(t);
  DLManagedTensor* m = nullptr;
  REQUIRE(ampx_tensor_to_dlpack(t, &m) == AMPX_OK);
  ampx_tensor_release(t);
  CHECK(current_bytes(ctx) == 12);  // still allocated for the DLPack consumer
  CHECK(m->dl_tensor.data == data);
  if (test_device() == AMPX_DEVICE_CPU) {
    const float* values = static_cast<const float*>(m->dl_tensor.data);
    CHECK(values[0] == 1.5f);
    CHECK(values[2] == 3.5f);
  }
  // Importing it back is one way to read it on any device.
  Tensor again;
  REQUIRE(ampx_tensor_from_dlpack(ctx, m, again.out()) == AMPX_OK);
  CHECK(download<float>(again) == std::vector<float>{1.5f, 2.5f, 3.5f});
  again.out();  // calls the export's deleter, the last reference
  CHECK(current_bytes(ctx) == 0);
  ampx_context_release(ctx);
}

TEST_CASE("dlpack: the export outlives the program's context handle too") {
  ampx_context ctx = ampx_test::test_context();
  ampx_tensor t = upload<int32_t>(ctx, AMPX_I32, {7, 8});
  DLManagedTensor* m = nullptr;
  REQUIRE(ampx_tensor_to_dlpack(t, &m) == AMPX_OK);
  ampx_tensor_release(t);
  ampx_context_release(ctx);
  // Only the DLPack tensor holds anything now; its deleter frees it all.
  if (test_device() == AMPX_DEVICE_CPU) CHECK(static_cast<int32_t*>(m->dl_tensor.data)[1] == 8);
  m->deleter(m);
}

TEST_CASE("dlpack: a failed export writes nothing and adds no reference") {
  Ctx ctx;
  ampx_tensor t = upload<float>(ctx, AMPX_F32, {1});
  CHECK_FAILS_WITH(ampx_tensor_to_dlpack(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'out'");
  CHECK(contains(last_error(), "ampx_tensor_to_dlpack"));
  DLManagedTensor* m = reinterpret_cast<DLManagedTensor*>(uintptr_t{0x99});
  CHECK_FAILS_WITH(ampx_tensor_to_dlpack(nullptr, &m), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_to_dlpack(reinterpret_cast<ampx_tensor>(ctx.handle), &m),
                   AMPX_ERR_STALE_HANDLE, "not an ampx_tensor");
  CHECK(m == reinterpret_cast<DLManagedTensor*>(uintptr_t{0x99}));
  ampx_tensor_release(t);
  CHECK(current_bytes(ctx) == 0);  // the one reference was the last
  CHECK_FAILS_WITH(ampx_tensor_to_dlpack(t, &m), AMPX_ERR_STALE_HANDLE, "already released");
}

TEST_CASE("dlpack: an import shares the memory and calls the deleter once, at the last release") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, {0, 1, 2, 3, 4, 5}));
  Producer p(data_of(backing), kDlF32, {2, 3});
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_dlpack(ctx, &p.managed, &t) == AMPX_OK);
  CHECK(data_of(t) == data_of(backing));
  int64_t dims[2] = {};
  REQUIRE(ampx_tensor_shape(t, dims, 2) == AMPX_OK);
  CHECK(dims[0] == 2);
  CHECK(dims[1] == 3);
  ampx_dtype dtype = static_cast<ampx_dtype>(0);
  REQUIRE(ampx_tensor_dtype(t, &dtype) == AMPX_OK);
  CHECK(dtype == AMPX_F32);
  CHECK(download<float>(t) == std::vector<float>{0, 1, 2, 3, 4, 5});
  REQUIRE(ampx_tensor_fill(t, 9.0) == AMPX_OK);
  CHECK(download<float>(backing) == std::vector<float>(6, 9.0f));

  REQUIRE(ampx_tensor_retain(t) == AMPX_OK);
  ampx_tensor_release(t);
  CHECK(p.deleter_calls == 0);
  ampx_tensor_release(t);
  CHECK(p.deleter_calls == 1);
}

TEST_CASE("dlpack: import maps each supported DLPack type to its ampx dtype") {
  Ctx ctx;
  Tensor backing(upload<int64_t>(ctx, AMPX_I64, {0, 0, 0, 0}));
  struct Case {
    DLDataType type;
    ampx_dtype expected;
  };
  const Case cases[] = {{dl_type(kDLFloat, 32), AMPX_F32}, {dl_type(kDLFloat, 16), AMPX_F16},
                        {dl_type(kDLBfloat, 16), AMPX_BF16}, {dl_type(kDLInt, 32), AMPX_I32},
                        {dl_type(kDLInt, 64), AMPX_I64}};
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    Producer p(data_of(backing), c.type, {2});
    Tensor t;
    REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
    ampx_dtype dtype = static_cast<ampx_dtype>(0);
    REQUIRE(ampx_tensor_dtype(t, &dtype) == AMPX_OK);
    CHECK(dtype == c.expected);
    size_t nbytes = 0;
    REQUIRE(ampx_tensor_nbytes(t, &nbytes) == AMPX_OK);
    CHECK(nbytes == 2 * ampx_dtype_size(c.expected));
    t.out();
    CHECK(p.deleter_calls == 1);
  }
}

TEST_CASE("dlpack: import honours byte_offset") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, {0, 1, 2, 3, 4, 5, 6, 7}));
  Producer p(data_of(backing), kDlF32, {5});
  p.managed.dl_tensor.byte_offset = 3 * sizeof(float);
  Tensor t;
  REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
  CHECK(data_of(t) == static_cast<void*>(static_cast<char*>(data_of(backing)) + 12));
  CHECK(download<float>(t) == std::vector<float>{3, 4, 5, 6, 7});
  REQUIRE(ampx_tensor_fill(t, -1.0) == AMPX_OK);
  CHECK(download<float>(backing) == std::vector<float>{0, 1, 2, -1, -1, -1, -1, -1});
  t.out();
  CHECK(p.deleter_calls == 1);

  // An offset that breaks the element alignment is refused.
  Producer odd(data_of(backing), kDlF32, {2});
  odd.managed.dl_tensor.byte_offset = 2;
  ampx_tensor out = sentinel_tensor();
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &odd.managed, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "aligned");
  CHECK(out == sentinel_tensor());
  CHECK(odd.deleter_calls == 0);
}

TEST_CASE("dlpack: compact strides are accepted, with any stride on extent-1 dimensions") {
  Ctx ctx;
  Tensor backing(upload<int32_t>(ctx, AMPX_I32, {10, 11, 12, 13, 14, 15}));
  const DLDataType i32 = dl_type(kDLInt, 32);
  SUBCASE("explicit row-major strides") {
    Producer p(data_of(backing), i32, {2, 3});
    p.set_strides({3, 1});
    Tensor t;
    REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
    CHECK(download<int32_t>(t) == std::vector<int32_t>{10, 11, 12, 13, 14, 15});
  }
  SUBCASE("extent-1 dimensions with arbitrary strides") {
    Producer p(data_of(backing), i32, {2, 1, 3, 1});
    p.set_strides({3, 99, 1, -7});
    Tensor t;
    REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
    int32_t ndim = 0;
    REQUIRE(ampx_tensor_ndim(t, &ndim) == AMPX_OK);
    CHECK(ndim == 4);
    CHECK(download<int32_t>(t) == std::vector<int32_t>{10, 11, 12, 13, 14, 15});
  }
  SUBCASE("a scalar has no strides to check") {
    Producer p(data_of(backing), i32, {});
    p.managed.dl_tensor.strides = p.strides;
    Tensor t;
    REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
    CHECK(download<int32_t>(t) == std::vector<int32_t>{10});
  }
}

TEST_CASE("dlpack: non-compact strides are AMPX_ERR_NOT_SUPPORTED and leave src untouched") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, std::vector<float>(16, 1.0f)));
  const std::vector<std::vector<int64_t>> bad_strides = {
      {1, 2},  // column-major
      {6, 1},  // padded rows
      {3, 2},  // every other element
      {0, 1},  // a broadcast dimension
  };
  for (const std::vector<int64_t>& strides : bad_strides) {
    CAPTURE(strides[0]);
    CAPTURE(strides[1]);
    Producer p(data_of(backing), kDlF32, {2, 3});
    p.set_strides(strides);
    const DLManagedTensor before = p.managed;
    ampx_tensor out = sentinel_tensor();
    CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &p.managed, &out), AMPX_ERR_NOT_SUPPORTED,
                     "stride");
    CHECK(contains(last_error(), "ampx_tensor_from_dlpack"));
    CHECK(out == sentinel_tensor());
    CHECK(p.deleter_calls == 0);
    CHECK(same_bytes(before, p.managed));
    CHECK(p.strides[0] == strides[0]);
  }
}

TEST_CASE("dlpack: a zero-size tensor imports whatever its strides say") {
  // PyTorch gives torch.empty(3, 0) the strides {1, 1}; with no elements
  // there is nothing for a stride to misplace.
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, {0}));
  Producer p(data_of(backing), kDlF32, {3, 0});
  p.set_strides({1, 1});
  Tensor t;
  CHECK_MESSAGE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK, last_error());
  int64_t numel = -1;
  if (t.handle) {
    CHECK(ampx_tensor_numel(t, &numel) == AMPX_OK);
    CHECK(numel == 0);
  }
}

TEST_CASE("dlpack: lanes other than 1 and types ampx lacks are AMPX_ERR_DTYPE") {
  Ctx ctx;
  Tensor backing(upload<int64_t>(ctx, AMPX_I64, {0, 0, 0, 0}));
  const DLDataType bad_types[] = {
      dl_type(kDLFloat, 32, 2), dl_type(kDLFloat, 16, 4), dl_type(kDLUInt, 8),
      dl_type(kDLUInt, 32),     dl_type(kDLFloat, 64),    dl_type(kDLInt, 8),
      dl_type(kDLInt, 16),      dl_type(kDLBfloat, 32),   dl_type(kDLFloat, 8),
      dl_type(kDLOpaqueHandle, 64), dl_type(kDLComplex, 64)};
  for (const DLDataType& type : bad_types) {
    CAPTURE(int{type.code});
    CAPTURE(int{type.bits});
    CAPTURE(int{type.lanes});
    Producer p(data_of(backing), type, {2});
    const DLManagedTensor before = p.managed;
    ampx_tensor out = sentinel_tensor();
    CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &p.managed, &out), AMPX_ERR_DTYPE,
                     "ampx_tensor_from_dlpack");
    CHECK(out == sentinel_tensor());
    CHECK(p.deleter_calls == 0);
    CHECK(same_bytes(before, p.managed));
  }
  Producer two_lanes(data_of(backing), dl_type(kDLFloat, 32, 2), {2});
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &two_lanes.managed, &out), AMPX_ERR_DTYPE,
                   "lanes");
}

TEST_CASE("dlpack: a tensor on another device is AMPX_ERR_DEVICE") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, {1, 2}));
  std::vector<DLDevice> wrong = {{kDLOpenCL, 0}, {kDLVulkan, 0}, {kDLROCM, 0}};
  if (test_device() == AMPX_DEVICE_CPU) {
    wrong.push_back({kDLCUDA, 0});
  } else {
    wrong.push_back({kDLCPU, 0});
    wrong.push_back({kDLCUDA, 1 + ampx_cuda_device_count()});  // not this context's ordinal
  }
  for (const DLDevice& device : wrong) {
    CAPTURE(int{device.device_type});
    CAPTURE(device.device_id);
    Producer p(data_of(backing), kDlF32, {2});
    p.managed.dl_tensor.device = device;
    const DLManagedTensor before = p.managed;
    ampx_tensor out = sentinel_tensor();
    CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &p.managed, &out), AMPX_ERR_DEVICE, "device");
    CHECK(out == sentinel_tensor());
    CHECK(p.deleter_calls == 0);
    CHECK(same_bytes(before, p.managed));
  }
}

TEST_CASE("dlpack: import rejects NULL arguments, bad shapes and stale contexts") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, {1, 2, 3, 4}));
  Producer p(data_of(backing), kDlF32, {4});
  ampx_tensor out = sentinel_tensor();
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(nullptr, &p.managed, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, nullptr, &out), AMPX_ERR_INVALID_ARGUMENT, "'src'");
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &p.managed, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "'out'");
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(reinterpret_cast<ampx_context>(backing.handle),
                                           &p.managed, &out),
                   AMPX_ERR_STALE_HANDLE, "not an ampx_context");

  Producer nine(data_of(backing), kDlF32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &nine.managed, &out), AMPX_ERR_SHAPE, "ndim");
  Producer negative(data_of(backing), kDlF32, {2, -2});
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &negative.managed, &out), AMPX_ERR_SHAPE, "-2");
  Producer no_shape(data_of(backing), kDlF32, {4});
  no_shape.managed.dl_tensor.shape = nullptr;
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &no_shape.managed, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "shape");
  Producer no_data(nullptr, kDlF32, {4});
  CHECK_FAILS_WITH(ampx_tensor_from_dlpack(ctx, &no_data.managed, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "data");
  CHECK(out == sentinel_tensor());
  for (const Producer* q : {&p, &nine, &negative, &no_shape, &no_data}) CHECK(q->deleter_calls == 0);

  // None of that spoiled the producer for a real import.
  Tensor t;
  REQUIRE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK);
  CHECK(download<float>(t) == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("dlpack: import does not add to the context's memory statistics") {
  Ctx ctx;
  Tensor backing(upload<float>(ctx, AMPX_F32, std::vector<float>(64, 0.0f)));
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  Producer p(data_of(backing), kDlF32, {8, 8});
  Tensor t;
  REQUIRE(ampx_tensor_from_dlpack(ctx, &p.managed, t.out()) == AMPX_OK);
  ampx_memory_stats after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.allocation_count == before.allocation_count);
}

TEST_CASE("dlpack: export then import into the same context shares the memory both ways") {
  Ctx ctx;
  const int64_t shape[2] = {2, 2};
  for (ampx_dtype dtype : kAllDtypes) {
    CAPTURE(dtype);
    ampx_tensor original = nullptr;
    REQUIRE(ampx_tensor_zeros(ctx, dtype, 2, shape, &original) == AMPX_OK);
    DLManagedTensor* m = nullptr;
    REQUIRE(ampx_tensor_to_dlpack(original, &m) == AMPX_OK);
    ampx_tensor imported = nullptr;
    REQUIRE(ampx_tensor_from_dlpack(ctx, m, &imported) == AMPX_OK);
    CHECK(data_of(imported) == data_of(original));
    ampx_dtype got = static_cast<ampx_dtype>(0);
    REQUIRE(ampx_tensor_dtype(imported, &got) == AMPX_OK);
    CHECK(got == dtype);
    int64_t dims[2] = {};
    REQUIRE(ampx_tensor_shape(imported, dims, 2) == AMPX_OK);
    CHECK(dims[0] == 2);
    CHECK(dims[1] == 2);

    // Written through one, read through the other.
    REQUIRE(ampx_tensor_fill(original, 3.0) == AMPX_OK);
    Tensor as_f32;
    REQUIRE(ampx_tensor_cast(imported, AMPX_F32, as_f32.out()) == AMPX_OK);
    CHECK(download<float>(as_f32) == std::vector<float>(4, 3.0f));
    REQUIRE(ampx_tensor_fill(imported, -2.0) == AMPX_OK);
    REQUIRE(ampx_tensor_cast(original, AMPX_F32, as_f32.out()) == AMPX_OK);
    CHECK(download<float>(as_f32) == std::vector<float>(4, -2.0f));
    as_f32.out();

    // Released in either order, the memory goes once both are gone.
    const uint64_t bytes = 4 * ampx_dtype_size(dtype);
    ampx_tensor_release(original);
    CHECK(current_bytes(ctx) == bytes);
    ampx_tensor_release(imported);
    CHECK(current_bytes(ctx) == 0);
  }
}

TEST_CASE("dlpack: an export imported into another context on the same device") {
  Ctx ctx, other;
  ampx_tensor t = upload<int32_t>(ctx, AMPX_I32, {4, 5, 6});
  DLManagedTensor* m = nullptr;
  REQUIRE(ampx_tensor_to_dlpack(t, &m) == AMPX_OK);
  ampx_tensor_release(t);
  Tensor imported;
  REQUIRE(ampx_tensor_from_dlpack(other, m, imported.out()) == AMPX_OK);
  CHECK(download<int32_t>(imported) == std::vector<int32_t>{4, 5, 6});
  ampx_context owner = nullptr;
  REQUIRE(ampx_tensor_context(imported, &owner) == AMPX_OK);
  CHECK(owner == other.handle);
  CHECK(current_bytes(ctx) == 12);  // the producer's memory, kept by the export
  imported.out();
  CHECK(current_bytes(ctx) == 0);
}
