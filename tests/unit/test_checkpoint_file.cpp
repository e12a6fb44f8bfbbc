// Training checkpoint files (ampx_checkpoint_file_save/load): a saved and
// restored run continues bit for bit; every damaged, truncated or foreign
// file and every mismatched model is refused with the right status and
// changes nothing; I/O failures leave the previous file in place.
#include <signal.h>
#if !defined(_WIN32)
#include <sys/resource.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "io/crc32c.h"
#include "training_fixture.h"

namespace {

namespace fs = std::filesystem;
using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::last_error;

using ampx_test::read_bytes;
using ampx_test::TempDir;

void write_bytes(const std::string& path, const unsigned char* data, size_t size) {
  // A new file rather than a truncated one: ext4 flushes a file that was
  // truncated and rewritten when it is closed, which would make the
  // thousands of damaged files below take minutes.
  std::remove(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(data, 1, size, f) == size);
  REQUIRE(std::fclose(f) == 0);
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}

enum class Kind { Sgd, SgdMomentum, Adam, AdamW, AdamAmsgrad };

struct TensorSpec {
  std::string name;
  ampx_dtype dtype;
  std::vector<int64_t> dims;
  bool optimized;  // a parameter of the optimizer (else a buffer)
};

struct Setup {
  std::vector<TensorSpec> tensors;
  Kind kind = Kind::SgdMomentum;
  bool optimizer = true;
  int groups = 2;  // the first optimized tensor in group 0, the others in 1
  bool scaler = true;
  bool scaler_enabled = true;
};

// Tensors, gradients, optimizer and scaler of a small model trained with
// host-made gradients that depend on the parameters (so a wrong restored
// state shows in later steps) and with an overflow every few steps (so the
// scaler backs off and grows, and steps are skipped).
struct Model {
  ampx_context ctx;
  std::vector<ampx_tensor> tensors;
  std::vector<ampx_tensor> optimized;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;

  Model(ampx_context context, const Setup& setup, int seed) : ctx(context) {
    for (size_t i = 0; i < setup.tensors.size(); ++i) {
      const TensorSpec& spec = setup.tensors[i];
      int64_t n = 1;
      for (int64_t d : spec.dims) n *= d;
      std::vector<double> values(static_cast<size_t>(n));
      for (size_t k = 0; k < values.size(); ++k)
        values[k] = std::sin(seed * 13.0 + static_cast<double>(k) * 0.37 + static_cast<double>(i));
      ampx_tensor t = make(ctx, spec.dtype, spec.dims, values);
      REQUIRE(ampx_tensor_set_name(t, spec.name.c_str()) == AMPX_OK);
      tensors.push_back(t);
      if (spec.optimized) {
        optimized.push_back(t);
        ampx_fixture::attach_grad(ctx, t, spec.dtype);
      }
    }
    if (setup.optimizer) {
      const size_t first = std::min<size_t>(optimized.size(), setup.groups == 2 ? 1 : optimized.size());
      if (setup.kind == Kind::Sgd || setup.kind == Kind::SgdMomentum) {
        ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
        o.lr = 0.05;
        o.momentum = setup.kind == Kind::SgdMomentum ? 0.9 : 0.0;
        o.nesterov = setup.kind == Kind::SgdMomentum;
        o.weight_decay = 0.01;
        REQUIRE_MESSAGE(ampx_optimizer_create_sgd(ctx, optimized.data(), first, &o, &opt) == AMPX_OK,
                        last_error());
      } else {
        ampx_adam_options o =
            setup.kind == Kind::AdamW ? ampx_adamw_options_default() : ampx_adam_options_default();
        o.lr = 0.01;
        o.amsgrad = setup.kind == Kind::AdamAmsgrad;
        REQUIRE_MESSAGE(ampx_optimizer_create_adam(ctx, optimized.data(), first, &o, &opt) == AMPX_OK,
                        last_error());
      }
      if (setup.groups == 2)
        REQUIRE_MESSAGE(ampx_optimizer_add_group(opt, optimized.data() + first,
                                                 optimized.size() - first, 0.003, 0.02,
                                                 nullptr) == AMPX_OK,
                        last_error());
    }
    if (setup.scaler) {
      ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
      o.init_scale = 1024.0;
      o.growth_interval = 3;
      o.hysteresis = 2;
      o.enabled = setup.scaler_enabled;
      REQUIRE_MESSAGE(ampx_scaler_create(ctx, &o, &scaler) == AMPX_OK, last_error());
    }
  }

  ~Model() {
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : tensors) ampx_tensor_release(t);
  }

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void train(int step) {
    double scale = 1.0;
    if (scaler) REQUIRE(ampx_scaler_get_scale(scaler, &scale) == AMPX_OK);
    for (size_t i = 0; i < optimized.size(); ++i) {
      const std::vector<double> p = values_of(optimized[i]);
      std::vector<double> g(p.size());
      for (size_t k = 0; k < g.size(); ++k)
        g[k] = (0.3 * (p[k] - 0.25) + 0.05 * std::sin(step * 0.7 + static_cast<double>(k + i))) *
               scale;
      if (scaler && step % 5 >= 3 && i == 0 && !g.empty()) g[0] = INFINITY;
      ampx_fixture::write(ampx_fixture::grad_of(optimized[i]), g);
    }
    if (opt) {
      if (scaler) {
        REQUIRE_MESSAGE(ampx_scaler_step(scaler, opt) == AMPX_OK, last_error());
        REQUIRE_MESSAGE(ampx_scaler_update(scaler) == AMPX_OK, last_error());
      } else {
        REQUIRE_MESSAGE(ampx_optimizer_step(opt) == AMPX_OK, last_error());
      }
      double lr = 0.0;
      REQUIRE(ampx_optimizer_get_lr(opt, 0, &lr) == AMPX_OK);
      REQUIRE(ampx_optimizer_set_lr(opt, 0, lr * 0.97) == AMPX_OK);
    }
    // The buffers (tensors outside the optimizer) change too, as running
    // statistics would.
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (std::find(optimized.begin(), optimized.end(), tensors[i]) != optimized.end()) continue;
      std::vector<double> v = values_of(tensors[i]);
      for (double& x : v) x = 0.9 * x + 0.01 * step;
      ampx_fixture::write(tensors[i], v);
    }
  }

  // Every bit of the state: tensor contents, the optimizer's serialised
  // state (masters, moments, step counts, learning rates, hyperparameters)
  // and the scaler's state.
  std::vector<unsigned char> snapshot() const {
    std::vector<unsigned char> out;
    for (ampx_tensor t : tensors) {
      const std::vector<unsigned char> b = ampx_fixture::bytes_of(t);
      out.insert(out.end(), b.begin(), b.end());
    }
    if (opt) {
      size_t n = 0;
      REQUIRE(ampx_optimizer_state_size(opt, &n) == AMPX_OK);
      std::vector<unsigned char> b(n);
      REQUIRE(ampx_optimizer_save_state(opt, b.data(), n) == AMPX_OK);
      out.insert(out.end(), b.begin(), b.end());
    }
    if (scaler) {
      ampx_scaler_state s;
      std::memset(&s, 0, sizeof s);
      s.struct_size = sizeof s;
      REQUIRE(ampx_scaler_get_state(scaler, &s) == AMPX_OK);
      const auto* b = reinterpret_cast<const unsigned char*>(&s);
      out.insert(out.end(), b, b + sizeof s);
    }
    return out;
  }

  ampx_status save(const std::string& path) const {
    return ampx_checkpoint_file_save(path.c_str(), tensors.data(), tensors.size(), opt, scaler);
  }
  ampx_status load(const std::string& path) const {
    return ampx_checkpoint_file_load(path.c_str(), tensors.data(), tensors.size(), opt, scaler);
  }
};

std::vector<TensorSpec> mixed_tensors() {
  return {{"embed", AMPX_F32, {4, 3}, true},
          {"fc.weight", AMPX_F16, {3, 5}, true},
          {"fc.bias", AMPX_BF16, {5}, true},
          {"norm.running_mean", AMPX_F32, {5}, false},
          {"empty", AMPX_F32, {0, 3}, false}};
}

std::vector<TensorSpec> small_tensors() {
  return {{"w", AMPX_F32, {2, 3}, true}, {"h", AMPX_F16, {3}, true}, {"b", AMPX_BF16, {2}, true}};
}

// Recomputes every checksum of a file after a test edited it, so the edit
// reaches the checks behind them.
void reseal(std::vector<unsigned char>& f) {
  using ampx::impl::io::crc32c;
  uint32_t crc = crc32c(f.data(), 28);
  std::memcpy(f.data() + 28, &crc, 4);
  uint32_t sections;
  std::memcpy(&sections, f.data() + 12, 4);
  size_t at = 32;
  for (uint32_t s = 0; s < sections; ++s) {
    uint64_t payload;
    std::memcpy(&payload, f.data() + at + 8, 8);
    crc = crc32c(f.data() + at, 16 + payload);
    std::memcpy(f.data() + at + 16 + payload, &crc, 4);
    at += 16 + payload + 4;
  }
  crc = crc32c(f.data(), f.size() - 4);
  std::memcpy(f.data() + f.size() - 4, &crc, 4);
}

// Offset of the first payload byte of section `index`.
size_t section_payload(const std::vector<unsigned char>& f, uint32_t index) {
  size_t at = 32;
  for (uint32_t s = 0; s < index; ++s) {
    uint64_t payload;
    std::memcpy(&payload, f.data() + at + 8, 8);
    at += 16 + payload + 4;
  }
  return at + 16;
}

}  // namespace

TEST_CASE("checkpoint file: a restored run continues bit for bit like the uninterrupted one") {
  struct Variant {
    const char* what;
    Kind kind;
    bool scaler;
  };
  const Variant variants[] = {{"AdamW with masters and a scaler", Kind::AdamW, true},
                              {"SGD with nesterov momentum and a scaler", Kind::SgdMomentum, true},
                              {"Adam with amsgrad, no scaler", Kind::AdamAmsgrad, false}};
  for (const Variant& v : variants) {
    const std::string what = v.what;
    CAPTURE(what);
    ampx_test::Ctx ctx;
    TempDir dir;
    const std::string path = dir.file("run.ampx");
    Setup setup;
    setup.tensors = mixed_tensors();
    setup.kind = v.kind;
    setup.scaler = v.scaler;

    Model a(ctx, setup, 1);
    for (int step = 0; step < 9; ++step) a.train(step);
    if (v.scaler) {
      ampx_scaler_counters c = AMPX_SCALER_COUNTERS_INIT;
      REQUIRE(ampx_scaler_get_counters(a.scaler, &c) == AMPX_OK);
      CHECK(c.backoffs > 0);  // the checkpoint holds a scaler after backoff...
      CHECK(c.growths > 0);   // ...and growth
    }
    REQUIRE_MESSAGE(a.save(path) == AMPX_OK, last_error());
    CHECK(dir.entry_count() == 1);  // no temporary file left behind
    const std::vector<unsigned char> saved = a.snapshot();

    Model b(ctx, setup, 2);  // other initial values
    b.train(0);
    REQUIRE(b.snapshot() != saved);
    REQUIRE_MESSAGE(b.load(path) == AMPX_OK, last_error());
    CHECK(b.snapshot() == saved);

    for (int step = 9; step < 20; ++step) {
      a.train(step);
      b.train(step);
    }
    CHECK(a.snapshot() == b.snapshot());
  }
}

TEST_CASE("checkpoint file: saving again replaces the file; NULL optimizer or scaler skips that part") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("model.ampx");
  Setup setup;
  setup.tensors = small_tensors();
  Model a(ctx, setup, 1);
  a.train(0);
  REQUIRE(a.save(path) == AMPX_OK);
  a.train(1);
  REQUIRE(a.save(path) == AMPX_OK);
  const std::vector<unsigned char> second = a.snapshot();
  CHECK(dir.entry_count() == 1);

  // Only the tensors: the optimizer and scaler of b stay as they are.
  Model b(ctx, setup, 5);
  const std::vector<unsigned char> b_before = b.snapshot();
  REQUIRE_MESSAGE(ampx_checkpoint_file_load(path.c_str(), b.tensors.data(), b.tensors.size(),
                                            nullptr, nullptr) == AMPX_OK,
                  last_error());
  for (size_t i = 0; i < b.tensors.size(); ++i)
    CHECK(ampx_fixture::bytes_of(b.tensors[i]) == ampx_fixture::bytes_of(a.tensors[i]));
  CHECK(b.snapshot() != b_before);
  REQUIRE(b.load(path) == AMPX_OK);
  CHECK(b.snapshot() == second);

  // A file of tensors alone, and one with no tensors at all.
  REQUIRE(ampx_checkpoint_file_save(path.c_str(), a.tensors.data(), a.tensors.size(), nullptr,
                                    nullptr) == AMPX_OK);
  CHECK_FAILS_WITH(b.load(path), AMPX_ERR_INVALID_ARGUMENT, "holds no optimizer state");
  CHECK_FAILS_WITH(ampx_checkpoint_file_load(path.c_str(), b.tensors.data(), b.tensors.size(),
                                             nullptr, b.scaler),
                   AMPX_ERR_INVALID_ARGUMENT, "holds no scaler state");
  REQUIRE(ampx_checkpoint_file_save(path.c_str(), nullptr, 0, a.opt, a.scaler) == AMPX_OK);
  CHECK(ampx_checkpoint_file_load(path.c_str(), nullptr, 0, b.opt, b.scaler) == AMPX_OK);
}

TEST_CASE("checkpoint file: every truncation and every single-bit flip is CORRUPT and changes nothing") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string good = dir.file("good.ampx");
  const std::string bad = dir.file("bad.ampx");
  Setup setup;
  setup.tensors = small_tensors();
  Model m(ctx, setup, 1);
  for (int step = 0; step < 4; ++step) m.train(step);
  REQUIRE(m.save(good) == AMPX_OK);
  // The live state must differ from the file's, or "unchanged" would prove
  // nothing about a partial restore.
  for (int step = 4; step < 7; ++step) m.train(step);
  const std::vector<unsigned char> live = m.snapshot();
  const std::vector<unsigned char> file = read_bytes(good);

  size_t truncations = 0, truncations_ok = 0;
  for (size_t length = 0; length < file.size(); ++length) {
    write_bytes(bad, file.data(), length);
    const ampx_status status = m.load(bad);
    ++truncations;
    if (status == AMPX_ERR_CORRUPT && m.snapshot() == live) {
      ++truncations_ok;
    } else {
      CHECK_MESSAGE(false, "prefix of ", length, " bytes: ", ampx_status_string(status), ": ",
                    last_error());
    }
  }

  size_t flips = 0, flips_ok = 0;
  std::vector<unsigned char> damaged = file;
  for (size_t offset = 0; offset < file.size(); ++offset) {
    for (int bit = 0; bit < 8; ++bit) {
      damaged[offset] ^= static_cast<unsigned char>(1u << bit);
      write_bytes(bad, damaged);
      const ampx_status status = m.load(bad);
      damaged[offset] = file[offset];
      ++flips;
      if (status == AMPX_ERR_CORRUPT && m.snapshot() == live) {
        ++flips_ok;
      } else {
        CHECK_MESSAGE(false, "bit ", bit, " of byte ", offset, ": ", ampx_status_string(status),
                      ": ", last_error());
      }
    }
  }
  CHECK(truncations_ok == truncations);
  CHECK(flips_ok == flips);
  MESSAGE("file of ", file.size(), " bytes: ", truncations_ok, "/", truncations,
          " truncations and ", flips_ok, "/", flips,
          " single-bit flips refused with AMPX_ERR_CORRUPT, state unchanged");

  // One more byte, and the messages of the common cases.
  std::vector<unsigned char> longer = file;
  longer.push_back(0);
  write_bytes(bad, longer);
  CHECK_FAILS_WITH(m.load(bad), AMPX_ERR_CORRUPT, "extra bytes");
  write_bytes(bad, file.data(), file.size() - 1);
  CHECK_FAILS_WITH(m.load(bad), AMPX_ERR_CORRUPT, "truncated");
  write_bytes(bad, file.data(), 10);
  CHECK_FAILS_WITH(m.load(bad), AMPX_ERR_CORRUPT, "too short");
  damaged[file.size() / 2] ^= 0x10;
  write_bytes(bad, damaged);
  CHECK_FAILS_WITH(m.load(bad), AMPX_ERR_CORRUPT, "checksum mismatch");
  CHECK(m.snapshot() == live);
  REQUIRE_MESSAGE(m.load(good) == AMPX_OK, last_error());
}

TEST_CASE("checkpoint file: a foreign, newer or inconsistent file is CORRUPT and changes nothing") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string good = dir.file("good.ampx");
  const std::string bad = dir.file("bad.ampx");
  Setup setup;
  setup.tensors = small_tensors();
  Model m(ctx, setup, 1);
  m.train(0);
  REQUIRE(m.save(good) == AMPX_OK);
  m.train(1);
  const std::vector<unsigned char> live = m.snapshot();
  const std::vector<unsigned char> file = read_bytes(good);
  int cases = 0;

  auto refused = [&](std::vector<unsigned char> bytes, bool seal, const char* part) {
    if (seal) reseal(bytes);
    write_bytes(bad, bytes);
    CHECK_FAILS_WITH(m.load(bad), AMPX_ERR_CORRUPT, part);
    CHECK(m.snapshot() == live);
    ++cases;
  };

  std::vector<unsigned char> f = file;
  std::memcpy(f.data(), "PK\x03\x04", 4);
  refused(f, true, "not an ampx checkpoint file");

  f = file;
  f[8] = 2;  // format version 2, resealed as a newer writer would
  refused(f, true, "format version 2");
  refused(f, false, "header");  // the same edit without a valid header checksum

  const size_t params = section_payload(file, 0);
  f = file;
  f[params + 8 + 4 + 1] = 9;  // the first tensor's dtype ("w": u32 name size, 1 byte)
  refused(f, true, "not an ampx_dtype");

  f = file;
  f[params + 8 + 4 + 1 + 4] = 9;  // its ndim
  refused(f, true, "9 dimensions");

  f = file;
  f[params + 8 + 4 + 1 + 4 + 4 + 8 + 8] = 0xff;  // its data size
  refused(f, true, "bytes of data");

  f = file;
  f[params] = 0xff;  // tensor count
  refused(f, true, "tensors in");

  f = file;
  f[params - 16] = 'X';  // the tag of the tensor section
  refused(f, true, "unknown tag");

  f = file;
  std::memcpy(f.data() + section_payload(file, 1) - 16, "PARM", 4);  // two tensor sections
  refused(f, true, "two 'PARM' sections");

  f = file;
  const size_t optimizer = section_payload(file, 1);
  f[optimizer] = 7;  // optimizer kind
  refused(f, true, "kind 7");

  f = file;
  const size_t scaler = section_payload(file, 2);
  f[scaler + 4 + 3] = 0xff;  // scale -> NaN
  refused(f, true, "scale");

  f = file;
  f[scaler + 4 + 4] = 0x7f;  // growth tracker beyond the interval
  refused(f, true, "growth tracker");

  f = file;
  f[scaler + 56 + 7] = 0x80;  // growth_factor -> negative
  refused(f, true, "invalid options");

  f = file;
  f[section_payload(file, 1) + 16 + 4 + 1 + 4] = 5;  // optimizer param 0 in group 5
  refused(f, true, "group 5");

  MESSAGE(cases, " foreign/newer/inconsistent files refused with AMPX_ERR_CORRUPT, state unchanged");
  REQUIRE_MESSAGE(m.load(good) == AMPX_OK, last_error());
}

TEST_CASE("checkpoint file: a different model is refused naming the tensor, and nothing changes") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("model.ampx");
  Setup base;
  base.tensors = small_tensors();
  {
    Model saved(ctx, base, 1);
    saved.train(0);
    REQUIRE(saved.save(path) == AMPX_OK);
  }
  struct Case {
    const char* what;
    Setup setup;
    ampx_status status;
    const char* part;
  };
  std::vector<Case> cases;
  auto variant = [&](const char* what, ampx_status status, const char* part, auto edit) {
    Case c{what, base, status, part};
    edit(c.setup);
    cases.push_back(c);
  };
  variant("an extra tensor", AMPX_ERR_INVALID_ARGUMENT, "params[3] 'x' has no counterpart",
          [](Setup& s) { s.tensors.push_back({"x", AMPX_F32, {2}, false}); });
  variant("a missing tensor", AMPX_ERR_INVALID_ARGUMENT, "tensor 2 ('b') has no counterpart in 'params'",
          [](Setup& s) { s.tensors.pop_back(); });
  variant("another shape", AMPX_ERR_SHAPE, "params[0] 'w' is f32[3, 2] but the checkpoint holds it as f32[2, 3]",
          [](Setup& s) { s.tensors[0].dims = {3, 2}; });
  variant("another dtype", AMPX_ERR_DTYPE, "params[1] 'h' is f32[3] but the checkpoint holds it as f16[3]",
          [](Setup& s) { s.tensors[1].dtype = AMPX_F32; });
  variant("another name", AMPX_ERR_INVALID_ARGUMENT, "named 'bias' but the checkpoint has 'b'",
          [](Setup& s) { s.tensors[2].name = "bias"; });
  variant("another optimizer kind", AMPX_ERR_INVALID_ARGUMENT, "the state of SGD but 'optimizer' is AdamW",
          [](Setup& s) { s.kind = Kind::AdamW; });
  variant("SGD without momentum", AMPX_ERR_INVALID_ARGUMENT, "keeps momentum buffers",
          [](Setup& s) { s.kind = Kind::Sgd; });
  variant("one param group", AMPX_ERR_INVALID_ARGUMENT, "2 param group(s) but 'optimizer' has 1",
          [](Setup& s) { s.groups = 1; });
  variant("a parameter the optimizer does not update", AMPX_ERR_INVALID_ARGUMENT,
          "optimizer parameter 2 ('b') has no counterpart", [](Setup& s) { s.tensors[2].optimized = false; });
  variant("a disabled scaler", AMPX_ERR_INVALID_ARGUMENT, "scaler is enabled but 'scaler' is disabled",
          [](Setup& s) { s.scaler_enabled = false; });

  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    Model m(ctx, c.setup, 3);
    m.train(0);
    m.train(1);
    const std::vector<unsigned char> before = m.snapshot();
    CHECK_FAILS_WITH(m.load(path), c.status, c.part);
    CHECK(m.snapshot() == before);
  }
  // The optimizer's parameters checked on their own (the tensor list
  // matches): a parameter of another shape inside the optimizer.
  {
    Model m(ctx, base, 3);
    Setup other = base;
    other.tensors[2].dims = {4};
    Model o(ctx, other, 3);
    const std::vector<unsigned char> before = m.snapshot();
    CHECK_FAILS_WITH(ampx_checkpoint_file_load(path.c_str(), m.tensors.data(), m.tensors.size(),
                                               o.opt, nullptr),
                     AMPX_ERR_SHAPE, "optimizer parameter[2] 'b' is bf16[4]");
    CHECK(m.snapshot() == before);
  }
  MESSAGE((cases.size() + 1), " mismatched models refused with the right status, state unchanged");
}

TEST_CASE("checkpoint file: arguments, order and I/O errors") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("model.ampx");
  Setup setup;
  setup.tensors = small_tensors();
  Model m(ctx, setup, 1);
  m.train(0);
  REQUIRE(m.save(path) == AMPX_OK);
  const std::vector<unsigned char> file = read_bytes(path);
  const std::vector<unsigned char> live = m.snapshot();

  CHECK_FAILS_WITH(ampx_checkpoint_file_save(nullptr, m.tensors.data(), 1, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'path'");
  CHECK_FAILS_WITH(ampx_checkpoint_file_load("", m.tensors.data(), 1, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'path'");
  CHECK_FAILS_WITH(ampx_checkpoint_file_save(path.c_str(), nullptr, 2, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'params'");
  CHECK_FAILS_WITH(ampx_checkpoint_file_load(path.c_str(), nullptr, 2, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'params'");
  CHECK_FAILS_WITH(ampx_checkpoint_file_load(path.c_str(), m.tensors.data(), m.tensors.size(),
                                             reinterpret_cast<ampx_optimizer>(m.scaler), nullptr),
                   AMPX_ERR_STALE_HANDLE, "'optimizer'");

  CHECK_FAILS_WITH(m.load(dir.file("missing.ampx")), AMPX_ERR_IO, "No such file");
  CHECK_FAILS_WITH(m.load(dir.path.string()), AMPX_ERR_IO, "not a regular file");
  CHECK_FAILS_WITH(m.save(dir.file("no/such/dir/model.ampx")), AMPX_ERR_IO,
                   "cannot create the temporary file");

  // Mid-iteration: the optimizer has unscaled gradients, the scale is not
  // updated yet.
  for (size_t i = 0; i < m.optimized.size(); ++i)
    ampx_fixture::write(ampx_fixture::grad_of(m.optimized[i]),
                        values_of(ampx_fixture::grad_of(m.optimized[i])));
  REQUIRE(ampx_scaler_unscale(m.scaler, m.opt) == AMPX_OK);
  CHECK_FAILS_WITH(m.save(path), AMPX_ERR_ORDER, "between iterations");
  CHECK_FAILS_WITH(m.load(path), AMPX_ERR_ORDER, "between iterations");
  REQUIRE(ampx_scaler_step(m.scaler, m.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update(m.scaler) == AMPX_OK);
  CHECK(read_bytes(path) == file);
  REQUIRE(m.load(path) == AMPX_OK);
  CHECK(m.snapshot() == live);

#if !defined(_WIN32)  // POSIX file size limits (RLIMIT_FSIZE)
  // A disk that fills up half-way (a file size limit): the save fails with
  // IO, the previous file is intact and no temporary file is left.
  std::vector<ampx_tensor> big_list = m.tensors;
  ampx_tensor big = nullptr;
  const int64_t n = 1 << 20;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 1, &n, &big) == AMPX_OK);
  big_list.push_back(big);
  struct rlimit old_limit {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 200000;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  const ampx_status status = ampx_checkpoint_file_save(path.c_str(), big_list.data(),
                                                       big_list.size(), m.opt, m.scaler);
  const std::string message = last_error();
  REQUIRE(setrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  signal(SIGXFSZ, old_handler);
  ampx_tensor_release(big);
  CHECK_MESSAGE(status == AMPX_ERR_IO, message);
  CHECK_MESSAGE(ampx_test::contains(message, "cannot write"), message);
  CHECK(read_bytes(path) == file);
  CHECK(dir.entry_count() == 1);
#endif
}
