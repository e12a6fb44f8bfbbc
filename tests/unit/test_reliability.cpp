// Regression tests for the defects an independent probe found (issue 15):
// shapes whose element count wraps, zero extents in any position, signed
// overflow in concat and batch norm, a loss scale that reached 0, rates
// beyond float, a DLPack device type outside the enum, a FIFO that blocked
// a load, temporary names past NAME_MAX, stale temporaries, and headers
// that made a load read a whole (sparse) file before refusing it. Each case
// failed, crashed or reported UB under ASan/UBSan before its fix.
#include <dlpack/dlpack.h>
#if !defined(_WIN32)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "io/crc32c.h"
#include "platform/platform.h"
#include "training_fixture.h"

using namespace ampx_fixture;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// An empty tensor of `dims`, or nullptr with the status in *status.
ampx_tensor empty(ampx_context ctx, ampx_dtype dtype, std::vector<int64_t> dims,
                  ampx_status* status = nullptr) {
  ampx_tensor t = nullptr;
  const ampx_status s =
      ampx_tensor_empty(ctx, dtype, static_cast<int32_t>(dims.size()), dims.data(), &t);
  if (status) *status = s;
  if (!status) REQUIRE_MESSAGE(s == AMPX_OK, last_error());
  return t;
}

int64_t numel_of(ampx_tensor t) {
  int64_t n = -1;
  REQUIRE(ampx_tensor_numel(t, &n) == AMPX_OK);
  return n;
}

using ampx_test::read_bytes;
using ampx_test::TempDir;

// The names in a directory.
std::vector<std::string> entries(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    names.push_back(e.path().filename().string());
  return names;
}

// A small model to save: one named f32 parameter with SGD and a scaler.
struct SmallModel {
  ampx_test::Ctx ctx;
  Tensor w;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  SmallModel() : w(make(ctx, AMPX_F32, {1.0, 2.0, 3.0})) {
    REQUIRE(ampx_tensor_set_name(w, "w") == AMPX_OK);
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    ampx_tensor params[] = {w};
    REQUIRE(ampx_optimizer_create_sgd(ctx, params, 1, &o, &opt) == AMPX_OK);
    REQUIRE(ampx_scaler_create(ctx, nullptr, &scaler) == AMPX_OK);
  }
  ~SmallModel() {
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
  }
  ampx_status save(const std::string& path) {
    ampx_tensor params[] = {w};
    return ampx_checkpoint_file_save(path.c_str(), params, 1, opt, scaler);
  }
  ampx_status load(const std::string& path) {
    ampx_tensor params[] = {w};
    return ampx_checkpoint_file_load(path.c_str(), params, 1, opt, scaler);
  }
};

}  // namespace

TEST_CASE("reliability: an output shape whose element count wraps is SHAPE, not a tiny buffer") {
  ampx_test::Ctx ctx;
  // 274177 x 67280421310721 = 2^64 + 1: the wrapped count is 1.
  Tensor flat(empty(ctx, AMPX_F32, {0}));
  Tensor a;
  const int64_t a_dims[] = {274177, 0};
  REQUIRE(ampx_reshape(flat, 2, a_dims, a.out()) == AMPX_OK);
  Tensor b(empty(ctx, AMPX_F32, {0, 67280421310721}));
  ampx_tensor out = reinterpret_cast<ampx_tensor>(&ctx);  // must stay untouched
  const ampx_tensor untouched = out;
  CHECK(ampx_matmul(a, b, &out) == AMPX_ERR_SHAPE);
  CHECK(out == untouched);
  CHECK(last_error().find("matmul's output") != std::string::npos);

  SUBCASE("linear, with and without a fused activation, in f32 and f16") {
    for (ampx_dtype dtype : {AMPX_F32, AMPX_F16}) {
      Tensor x(empty(ctx, dtype, {274177, 0}));
      Tensor w(empty(ctx, dtype, {67280421310721, 0}));
      for (ampx_activation act : {AMPX_ACTIVATION_NONE, AMPX_ACTIVATION_RELU, AMPX_ACTIVATION_GELU}) {
        CAPTURE(act);
        CHECK(ampx_linear(x, w, nullptr, act, &out) == AMPX_ERR_SHAPE);
        CHECK(out == untouched);
      }
    }
  }
  SUBCASE("batched [B, m, 0] x [B, 0, n] with m = n = 2^31 - 1") {
    const int64_t m = (int64_t{1} << 31) - 1;
    Tensor x(empty(ctx, AMPX_F32, {2, m, 0}));
    Tensor y(empty(ctx, AMPX_F32, {2, 0, m}));
    CHECK(ampx_matmul(x, y, &out) == AMPX_ERR_SHAPE);
  }
  SUBCASE("[2^40, 0] x [0, 2^40]: 2^80 elements") {
    Tensor x(empty(ctx, AMPX_F32, {int64_t{1} << 40, 0}));
    Tensor y(empty(ctx, AMPX_F32, {0, int64_t{1} << 40}));
    CHECK(ampx_matmul(x, y, &out) == AMPX_ERR_SHAPE);
    CHECK(out == untouched);
  }
  SUBCASE("a batch of none: [0, 2^40, 2^40] x [0, 2^40, 2^40], forward and backward") {
    const int64_t big = int64_t{1} << 40;
    Tensor x(empty(ctx, AMPX_F32, {0, big, big}));
    REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, total = nullptr;
    REQUIRE_MESSAGE(ampx_matmul(x, x, &y) == AMPX_OK, last_error());
    CHECK(dims_of(y) == std::vector<int64_t>{0, big, big});
    REQUIRE(ampx_sum(y, &total) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(total, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  SUBCASE("k = 0 with a representable output is still zeros (plus the bias)") {
    Tensor x(empty(ctx, AMPX_F32, {3, 0}));
    Tensor w(empty(ctx, AMPX_F32, {2, 0}));
    Tensor bias(make(ctx, AMPX_F32, {1.5, -2.0}));
    Tensor y;
    REQUIRE(ampx_linear(x, w, bias, AMPX_ACTIVATION_NONE, y.out()) == AMPX_OK);
    CHECK(values_of(y) == std::vector<double>{1.5, -2.0, 1.5, -2.0, 1.5, -2.0});
  }
}

TEST_CASE("reliability: a zero extent makes a shape empty in any position") {
  ampx_test::Ctx ctx;
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{kMax, 0}, {0, kMax}, {kMax, kMax, 0}, {2, int64_t{1} << 62, 0},
        {int64_t{1} << 62, int64_t{1} << 62, 0, 3}}) {
    CAPTURE(dims.size());
    ampx_status s = AMPX_OK;
    Tensor t(empty(ctx, AMPX_F32, dims, &s));
    REQUIRE_MESSAGE(s == AMPX_OK, last_error());
    CHECK(numel_of(t) == 0);
    CHECK(dims_of(t) == dims);
  }
  ampx_status s = AMPX_OK;
  Tensor refused(empty(ctx, AMPX_F32, {kMax, 2}, &s));
  CHECK(s == AMPX_ERR_SHAPE);
  Tensor negative(empty(ctx, AMPX_F32, {0, -1}, &s));
  CHECK(s == AMPX_ERR_SHAPE);

  Tensor flat(empty(ctx, AMPX_F32, {0}));
  Tensor r;
  const int64_t to[] = {2, int64_t{1} << 62, 0};
  REQUIRE_MESSAGE(ampx_reshape(flat, 3, to, r.out()) == AMPX_OK, last_error());
  CHECK(numel_of(r) == 0);
  const int64_t back[] = {0, kMax};
  Tensor r2;
  CHECK(ampx_reshape(r, 2, back, r2.out()) == AMPX_OK);
  // torch: "-1 can be any value" for an empty tensor with a zero extent.
  const int64_t ambiguous[] = {-1, 0};
  Tensor r3;
  CHECK(ampx_reshape(flat, 2, ambiguous, r3.out()) == AMPX_ERR_SHAPE);
  // Given extents whose product overflows (no zero among them) are refused.
  Tensor four(make(ctx, AMPX_F32, {1.0, 2.0, 3.0, 4.0}));
  const int64_t huge[] = {int64_t{1} << 62, 4, -1};
  Tensor r4;
  CHECK(ampx_reshape(four, 3, huge, r4.out()) == AMPX_ERR_SHAPE);
}

TEST_CASE("reliability: concat and batch norm compute their counts without overflow") {
  ampx_test::Ctx ctx;
  SUBCASE("extents along the dimension that add up past 2^63 - 1") {
    Tensor a(empty(ctx, AMPX_F32, {kMax, 0}));
    Tensor b(empty(ctx, AMPX_F32, {1, 0}));
    const ampx_tensor list[] = {a, b};
    ampx_tensor out = nullptr;
    CHECK(ampx_concat(list, 2, 0, &out) == AMPX_ERR_SHAPE);
    CHECK(out == nullptr);
    // 2^62 and 2^62: 2^63 is one past int64.
    Tensor c(empty(ctx, AMPX_F32, {int64_t{1} << 62, 0}));
    const ampx_tensor pair[] = {c, c};
    CHECK(ampx_concat(pair, 2, 0, &out) == AMPX_ERR_SHAPE);
    // 2^62 and 2^62 - 1: the sum fits, and the result is empty.
    Tensor d(empty(ctx, AMPX_F32, {(int64_t{1} << 62) - 1, 0}));
    const ampx_tensor fits[] = {c, d};
    Tensor joined;
    REQUIRE_MESSAGE(ampx_concat(fits, 2, 0, joined.out()) == AMPX_OK, last_error());
    CHECK(dims_of(joined) == std::vector<int64_t>{kMax, 0});
  }
  SUBCASE("an inner product past 2^63 in an empty tensor") {
    Tensor a(empty(ctx, AMPX_F32, {0, int64_t{1} << 62, int64_t{1} << 62}));
    const ampx_tensor list[] = {a, a};
    Tensor joined;
    REQUIRE_MESSAGE(ampx_concat(list, 2, 0, joined.out()) == AMPX_OK, last_error());
    CHECK(dims_of(joined) == std::vector<int64_t>{0, int64_t{1} << 62, int64_t{1} << 62});
    // Along a later dimension (found by fuzz_api after the first fixes):
    // each piece is 3 x 2^62 elements per outer index, of which there are 0.
    Tensor b(empty(ctx, AMPX_F32, {0, 3, int64_t{1} << 62}));
    REQUIRE(ampx_tensor_set_requires_grad(b, 1) == AMPX_OK);
    const ampx_tensor pieces[] = {b, b};
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor side = nullptr, total = nullptr;
    REQUIRE_MESSAGE(ampx_concat(pieces, 2, 1, &side) == AMPX_OK, last_error());
    CHECK(dims_of(side) == std::vector<int64_t>{0, 6, int64_t{1} << 62});
    REQUIRE(ampx_sum(side, &total) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(total, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  SUBCASE("batch norm over [N, 0, L] with N * L past 2^63") {
    Tensor x(empty(ctx, AMPX_F32, {int64_t{1} << 62, 0, 8}));
    Tensor y;
    REQUIRE_MESSAGE(ampx_batch_norm(x, nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5, y.out()) ==
                        AMPX_OK,
                    last_error());
    CHECK(numel_of(y) == 0);
  }
  SUBCASE("layer norm and linear over leading extents whose product passes 2^63") {
    Tensor x(empty(ctx, AMPX_F32, {int64_t{1} << 62, int64_t{1} << 62, 0}));
    Tensor y;
    REQUIRE_MESSAGE(ampx_layer_norm(x, nullptr, nullptr, 1e-5, y.out()) == AMPX_OK, last_error());
    CHECK(dims_of(y) == dims_of(x));
    Tensor w(empty(ctx, AMPX_F32, {0, 0}));
    Tensor z;
    REQUIRE_MESSAGE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_NONE, z.out()) == AMPX_OK,
                    last_error());
    CHECK(dims_of(z) == dims_of(x));
  }
}

TEST_CASE("reliability: the loss scale stops at FLT_MIN, and what ampx saves it loads") {
  ampx_test::Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {1.0}));
  const ampx_tensor g = attach_grad(ctx, p, AMPX_F32);  // borrowed: p holds it
  write(g, {INFINITY});
  ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
  ampx_optimizer opt = nullptr;
  ampx_tensor params[] = {p};
  REQUIRE(ampx_optimizer_create_sgd(ctx, params, 1, &so, &opt) == AMPX_OK);
  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, nullptr, &scaler) == AMPX_OK);
  for (int i = 0; i < 200; ++i) {
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  }
  // 65536 = 2^16 halves 142 times to 2^-126 = FLT_MIN, and stays there.
  CHECK(scale_of(scaler) == static_cast<double>(FLT_MIN));
  const ampx_scaler_state state = scaler_state_of(scaler);
  CHECK(state.counters.backoffs == 142);
  CHECK(ampx_scaler_set_state(scaler, &state) == AMPX_OK);
  TempDir dir;
  const std::string path = dir.file("floor.ampx");
  REQUIRE(ampx_checkpoint_file_save(path.c_str(), params, 1, opt, scaler) == AMPX_OK);
  CHECK_MESSAGE(ampx_checkpoint_file_load(path.c_str(), params, 1, opt, scaler) == AMPX_OK,
                last_error());

  SUBCASE("scales that are 0 or subnormal as a float are refused everywhere") {
    for (double bad : {1e-50, 1e-40, 5e-324, 0.0, -1.0, 1e39, static_cast<double>(INFINITY)}) {
      CAPTURE(bad);
      ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
      o.init_scale = bad;
      ampx_scaler s = nullptr;
      CHECK(ampx_scaler_create(ctx, &o, &s) == AMPX_ERR_INVALID_ARGUMENT);
      CHECK(s == nullptr);
      ampx_scaler_state st = state;
      st.scale = bad;
      CHECK(ampx_scaler_set_state(scaler, &st) == AMPX_ERR_INVALID_ARGUMENT);
      REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
      CHECK(ampx_scaler_update_to(scaler, bad) == AMPX_ERR_INVALID_ARGUMENT);
      REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
      CHECK(scale_of(scaler) == static_cast<double>(FLT_MIN));
    }
    ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
    o.init_scale = FLT_MIN;
    ampx_scaler s = nullptr;
    CHECK(ampx_scaler_create(ctx, &o, &s) == AMPX_OK);
    ampx_scaler_release(s);
    o.init_scale = 1.0;
    o.min_scale = 1e-50;  // 0 as a float: not "no floor" in disguise
    CHECK(ampx_scaler_create(ctx, &o, &s) == AMPX_ERR_INVALID_ARGUMENT);
    o.min_scale = 0.0;
    o.max_scale = 1e300;
    CHECK(ampx_scaler_create(ctx, &o, &s) == AMPX_ERR_INVALID_ARGUMENT);
  }
  SUBCASE("a min_scale above FLT_MIN is the floor instead") {
    ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
    o.init_scale = 8.0;
    o.min_scale = 1.0;
    ampx_scaler s = nullptr;
    REQUIRE(ampx_scaler_create(ctx, &o, &s) == AMPX_OK);
    Tensor q(make(ctx, AMPX_F32, {1.0}));
    write(attach_grad(ctx, q, AMPX_F32), {NAN});
    ampx_tensor own[] = {q};
    ampx_optimizer opt2 = nullptr;  // an optimizer belongs to one scaler
    REQUIRE(ampx_optimizer_create_sgd(ctx, own, 1, &so, &opt2) == AMPX_OK);
    for (int i = 0; i < 10; ++i) {
      REQUIRE(ampx_scaler_step(s, opt2) == AMPX_OK);
      REQUIRE(ampx_scaler_update(s) == AMPX_OK);
    }
    CHECK(scale_of(s) == 1.0);
    ampx_optimizer_release(opt2);
    ampx_scaler_release(s);
  }
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
}

TEST_CASE("reliability: learning rates and weight decays beyond float are refused") {
  ampx_test::Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {1.0, 2.0}));
  ampx_tensor params[] = {p};
  for (double bad : {1e300, 3.5e38, static_cast<double>(INFINITY), static_cast<double>(NAN), -1e-3}) {
    CAPTURE(bad);
    ampx_optimizer opt = nullptr;
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    so.lr = bad;
    CHECK(ampx_optimizer_create_sgd(ctx, params, 1, &so, &opt) == AMPX_ERR_INVALID_ARGUMENT);
    ampx_adam_options ao = AMPX_ADAMW_OPTIONS_INIT;
    ao.weight_decay = bad;
    CHECK(ampx_optimizer_create_adam(ctx, params, 1, &ao, &opt) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(opt == nullptr);
  }
  ampx_optimizer opt = nullptr;
  ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
  so.lr = 0.25;
  REQUIRE(ampx_optimizer_create_sgd(ctx, params, 1, &so, &opt) == AMPX_OK);
  CHECK(ampx_optimizer_set_lr(opt, 0, 1e300) == AMPX_ERR_INVALID_ARGUMENT);
  double lr = 0;
  REQUIRE(ampx_optimizer_get_lr(opt, 0, &lr) == AMPX_OK);
  CHECK(lr == 0.25);
  Tensor q(make(ctx, AMPX_F32, {3.0}));
  ampx_tensor more[] = {q};
  CHECK(ampx_optimizer_add_group(opt, more, 1, 1e300, 0.0, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_optimizer_add_group(opt, more, 1, 0.1, 1e300, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_optimizer_set_lr(opt, 0, FLT_MAX) == AMPX_OK);
  REQUIRE(ampx_optimizer_set_lr(opt, 0, 0.25) == AMPX_OK);

  // A state blob whose group lr is 1e300, with its checksum (FNV-1a of
  // everything before it) redone so that the value itself is judged.
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(opt, &bytes) == AMPX_OK);
  std::vector<unsigned char> blob(bytes);
  REQUIRE(ampx_optimizer_save_state(opt, blob.data(), bytes) == AMPX_OK);
  const double old_lr = 0.25, new_lr = 1e300;
  size_t at = 0;
  for (; at + 8 <= bytes; ++at)
    if (std::memcmp(blob.data() + at, &old_lr, 8) == 0) break;
  REQUIRE(at + 8 <= bytes - 8);
  std::memcpy(blob.data() + at, &new_lr, 8);
  reseal_optimizer_state(blob);
  CHECK(ampx_optimizer_load_state(opt, blob.data(), bytes) == AMPX_ERR_CORRUPT);
  REQUIRE(ampx_optimizer_get_lr(opt, 0, &lr) == AMPX_OK);
  CHECK(lr == 0.25);
  ampx_optimizer_release(opt);
}

TEST_CASE("reliability: a DLPack device type outside DLDeviceType is DEVICE, read as an integer") {
  ampx_test::Ctx ctx;
  float data[2] = {1.0f, 2.0f};
  int64_t shape[1] = {2};
  DLManagedTensor m{};
  m.dl_tensor.data = data;
  m.dl_tensor.ndim = 1;
  m.dl_tensor.shape = shape;
  m.dl_tensor.dtype.code = kDLFloat;
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  for (int32_t type : {12345, -7, 0, std::numeric_limits<int32_t>::max()}) {
    CAPTURE(type);
    std::memcpy(&m.dl_tensor.device.device_type, &type, sizeof type);
    ampx_tensor t = nullptr;
    CHECK(ampx_tensor_from_dlpack(ctx, &m, &t) == AMPX_ERR_DEVICE);
    CHECK(t == nullptr);
    CHECK(last_error().find(std::to_string(type)) != std::string::npos);
  }
}

#if !defined(_WIN32)  // no FIFOs in Windows file systems
TEST_CASE("reliability: loading from a FIFO is IO at once, without waiting for a writer") {
  TempDir dir;
  const std::string path = dir.file("pipe");
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  SmallModel m;
  auto load = std::async(std::launch::async, [&] {
    const ampx_status s = m.load(path);
    return std::make_pair(s, last_error());
  });
  if (load.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // Unblock the load so that the test can end, then fail.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    load.wait();
    FAIL("ampx_checkpoint_file_load blocked on a FIFO");
  }
  const auto result = load.get();
  CHECK(result.first == AMPX_ERR_IO);
  CHECK(result.second.find("not a regular file") != std::string::npos);
}
#endif

TEST_CASE("reliability: names up to NAME_MAX save and load, and no temporary is left") {
  TempDir dir;
  SmallModel m;
  for (size_t length : {200, 234, 235, 240, 255}) {
    CAPTURE(length);
    const std::string path = dir.file(std::string(length - 5, 'n') + ".ampx");
    REQUIRE_MESSAGE(m.save(path) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(m.save(path) == AMPX_OK, last_error());
    CHECK_MESSAGE(m.load(path) == AMPX_OK, last_error());
    CHECK(std::filesystem::remove(path));
    CHECK(entries(dir).empty());
  }
}

TEST_CASE("reliability: a save removes the temporaries killed saves left, not a live writer's") {
  TempDir dir;
  SmallModel m;
  const std::string path = dir.file("model.ampx");
  const std::string stale = path + ".tmp-00000000deadbeef";
  const std::string live = path + ".tmp-00000000cafef00d";
  const std::string other = dir.file("other.ampx.tmp-0123456789abcdef");
  const std::string text = "a partial checkpoint";
  for (const std::string& f : {stale, other}) std::ofstream(f) << text;
  // Held open as the library's own writer holds its temporary (as a save in
  // another process would).
  namespace platform = ampx::impl::platform;
  platform::File held = platform::File::create_new(live, "cannot create " + live);
  REQUIRE(held.is_open());
  held.write_all(reinterpret_cast<const unsigned char*>(text.data()), text.size(), live);
  REQUIRE_MESSAGE(m.save(path) == AMPX_OK, last_error());
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));  // another target's
  CHECK(std::filesystem::exists(path));
}

#if !defined(_WIN32)  // Linux's /proc/self/io counts the bytes read
TEST_CASE("reliability: a header that does not fit the file is refused before the file is read") {
  TempDir dir;
  SmallModel m;
  const std::string path = dir.file("big.ampx");
  REQUIRE(m.save(path) == AMPX_OK);
  std::vector<unsigned char> file = read_bytes(path);
  REQUIRE(file.size() > 48);
  // The same header, declaring a sparse 1 GiB file, with its checksum
  // redone; the first section's head is then zeros (an unknown tag).
  const uint64_t size = uint64_t{1} << 30;
  std::memcpy(file.data() + 16, &size, 8);
  const uint32_t crc = ampx::impl::io::crc32c(file.data(), 28);
  std::memcpy(file.data() + 28, &crc, 4);
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, file.data(), 32) == 32);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
  ::close(fd);
  // Bytes read by this process (Linux's /proc/self/io), before and after.
  auto read_so_far = []() -> int64_t {
    std::ifstream io("/proc/self/io");
    std::string key;
    int64_t value = -1;
    while (io >> key >> value)
      if (key == "rchar:") return value;
    return -1;
  };
  const int64_t before = read_so_far();
  CHECK(m.load(path) == AMPX_ERR_CORRUPT);
  CHECK(last_error().find("unknown tag") != std::string::npos);
  const int64_t after = read_so_far();
  if (before >= 0 && after >= 0) CHECK(after - before < (int64_t{1} << 20));
}
#endif

TEST_CASE("reliability: every op that computes a shape, over empty tensors with huge extents") {
  // Empty inputs whose other extents reach 2^62 and 2^63 - 1: each op gives
  // an empty result of the right shape, or SHAPE where that shape would
  // need more than 2^63 bytes; the backward runs too. ASan and UBSan in CI
  // watch for the overflow itself.
  ampx_test::Ctx ctx;
  const int64_t big = int64_t{1} << 62;
  Tensor x(empty(ctx, AMPX_F32, {big, 0, big}));
  REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor y = nullptr;
  auto expect_empty = [&](ampx_status s, std::vector<int64_t> dims) {
    REQUIRE_MESSAGE(s == AMPX_OK, last_error());
    CHECK(numel_of(y) == 0);
    CHECK(dims_of(y) == dims);
  };
  expect_empty(ampx_relu(x, &y), {big, 0, big});
  expect_empty(ampx_gelu(x, &y), {big, 0, big});
  expect_empty(ampx_softmax(x, &y), {big, 0, big});
  expect_empty(ampx_log_softmax(x, &y), {big, 0, big});
  expect_empty(ampx_add(x, x, &y), {big, 0, big});
  expect_empty(ampx_transpose(x, 0, 2, &y), {big, 0, big});
  expect_empty(ampx_transpose(x, 1, 2, &y), {big, big, 0});
  expect_empty(ampx_layer_norm(x, nullptr, nullptr, 1e-5, &y), {big, 0, big});
  const int64_t flat[] = {-1};
  expect_empty(ampx_reshape(x, 1, flat, &y), {0});
  Tensor w(empty(ctx, AMPX_F32, {0, big}));
  expect_empty(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_GELU, &y), {big, 0, 0});
  // [2^62, 0] x [2^62, 0]^T would be [2^62, 2^62].
  Tensor w_huge(empty(ctx, AMPX_F32, {big, 0}));
  const int64_t two_d[] = {big, 0};
  ampx_tensor rows = nullptr;
  REQUIRE(ampx_reshape(x, 2, two_d, &rows) == AMPX_OK);
  ampx_tensor refused = nullptr;
  CHECK(ampx_linear(rows, w_huge, nullptr, AMPX_ACTIVATION_NONE, &refused) == AMPX_ERR_SHAPE);
  CHECK(refused == nullptr);
  ampx_tensor sum = nullptr;
  REQUIRE_MESSAGE(ampx_sum(x, &sum) == AMPX_OK, last_error());
  CHECK(values_of(sum) == std::vector<double>{0.0});
  REQUIRE(ampx_backward(sum, nullptr) == AMPX_OK);

  // An embedding of no indices into rows of 2^62 columns.
  Tensor table(empty(ctx, AMPX_F32, {0, big}));
  Tensor indices(empty(ctx, AMPX_I64, {big, 0, 4}));
  expect_empty(ampx_embedding(table, indices, &y), {big, 0, 4, big});

  // cross_entropy over no rows of 2^63 - 1 classes, and over rows of none.
  Tensor logits(empty(ctx, AMPX_F32, {0, kMax}));
  Tensor no_labels(empty(ctx, AMPX_I64, {0}));
  ampx_tensor loss = nullptr;
  REQUIRE_MESSAGE(ampx_cross_entropy(logits, no_labels, AMPX_REDUCTION_SUM, -100, &loss) == AMPX_OK,
                  last_error());
  CHECK(values_of(loss) == std::vector<double>{0.0});
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("reliability: error messages live in a fixed buffer, cut at 4095 bytes") {
  // Recording an error allocates nothing (tests/oom runs it with memory
  // exhausted); a longer message is cut and says so.
  const std::string long_message(10000, 'x');
  CHECK(ampx_set_error(AMPX_ERR_IO, long_message.c_str()) == AMPX_ERR_IO);
  const std::string got = ampx_last_error();
  CHECK(got.size() == 4095);
  CHECK(got.compare(got.size() - 3, 3, "...") == 0);
  CHECK(got.compare(0, 4092, long_message, 0, 4092) == 0);
  CHECK(ampx_last_status() == AMPX_ERR_IO);
  const std::string exact(4095, 'y');
  REQUIRE(ampx_set_error(AMPX_ERR_SHAPE, exact.c_str()) == AMPX_ERR_SHAPE);
  CHECK(std::string(ampx_last_error()) == exact);
  // A failing call's message is "<function>: <what>", cut the same way: a
  // tensor name longer than the buffer shows in part.
  ampx_test::Ctx ctx;
  Tensor t(make(ctx, AMPX_F32, {1.0, 2.0}));
  REQUIRE(ampx_tensor_set_name(t, long_message.c_str()) == AMPX_OK);
  Tensor other(make(ctx, AMPX_F32, {1.0, 2.0, 3.0}));
  ampx_tensor out = nullptr;
  CHECK(ampx_add(t, other, &out) == AMPX_ERR_SHAPE);
  CHECK(std::string(ampx_last_error()).rfind("ampx_add: ", 0) == 0);
  CHECK(std::strlen(ampx_last_error()) <= 4095);
  REQUIRE(ampx_set_error(AMPX_OK, nullptr) == AMPX_OK);
  CHECK(std::string(ampx_last_error()).empty());
}
