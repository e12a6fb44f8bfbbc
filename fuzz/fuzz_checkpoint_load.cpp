// fuzz_checkpoint_load.cpp -- libFuzzer target: arbitrary bytes loaded as a
// training checkpoint file (ampx_checkpoint_file_load) into a live model.
//
// The first input byte picks how the rest becomes the file:
//   bit 1 clear: the bytes are the file;
//   bit 1 set:   they are edits (u16 offset, u8 xor) of a valid checkpoint,
//                after an optional cut to the length in the first two bytes;
//   bit 0 set:   then every checksum is recomputed, so the damage reaches
//                the record checks behind them instead of stopping at the
//                first checksum.
// Oracles besides the sanitizers: a refused load leaves the model bit for bit
// as it was and returns a documented status; an accepted one is undone by
// loading the valid checkpoint again.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ampx/ampx.h"
#include "fuzz_support.h"

namespace {

using fuzz_support::require;

// CRC-32C bit by bit: the harness must not share the library's code it
// checks.
uint32_t crc32c(const unsigned char* p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82f63b78u : 0u);
  }
  return ~crc;
}

void put_crc(std::vector<unsigned char>& f, size_t at, uint32_t crc) {
  std::memcpy(f.data() + at, &crc, 4);
}

// Recomputes the header, section and whole-file checksums as far as the
// (possibly nonsensical) framing allows.
void reseal(std::vector<unsigned char>& f) {
  if (f.size() < 36) return;
  put_crc(f, 28, crc32c(f.data(), 28));
  uint32_t sections;
  std::memcpy(&sections, f.data() + 12, 4);
  size_t at = 32;
  const size_t end = f.size() - 4;
  for (uint32_t s = 0; s < sections && end - at >= 20; ++s) {
    uint64_t payload;
    std::memcpy(&payload, f.data() + at + 8, 8);
    if (payload > end - at - 20) break;
    put_crc(f, at + 16 + payload, crc32c(f.data() + at, 16 + payload));
    at += 20 + payload;
  }
  put_crc(f, end, crc32c(f.data(), end));
}

struct Fixture {
  ampx_context ctx = nullptr;
  ampx_tensor tensors[3] = {};
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  fuzz_support::ScratchFile file{"ckpt"};  // the fuzzed file
  std::string reference;                   // a valid checkpoint of this model
  std::vector<unsigned char> reference_bytes;

  Fixture() {
    ampx_context_options o = AMPX_CONTEXT_OPTIONS_INIT;
    o.num_threads = 1;
    require(ampx_context_create(&o, &ctx) == AMPX_OK, "context");
    const ampx_dtype dtypes[3] = {AMPX_F32, AMPX_F16, AMPX_BF16};
    const char* names[3] = {"w", "h", "b"};
    const int64_t dims[3][2] = {{2, 3}, {3, 1}, {2, 1}};
    for (int i = 0; i < 3; ++i) {
      require(ampx_tensor_empty(ctx, dtypes[i], 2, dims[i], &tensors[i]) == AMPX_OK, "tensor");
      require(ampx_tensor_fill(tensors[i], 0.5 + i) == AMPX_OK, "fill");
      require(ampx_tensor_set_name(tensors[i], names[i]) == AMPX_OK, "name");
      ampx_tensor grad = nullptr;
      require(ampx_tensor_zeros(ctx, dtypes[i], 2, dims[i], &grad) == AMPX_OK, "grad");
      require(ampx_tensor_fill(grad, 0.25 * 1024) == AMPX_OK, "grad fill");
      require(ampx_tensor_set_grad(tensors[i], grad) == AMPX_OK, "set grad");
      ampx_tensor_release(grad);
    }
    ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
    sgd.momentum = 0.9;
    require(ampx_optimizer_create_sgd(ctx, tensors, 2, &sgd, &opt) == AMPX_OK, "optimizer");
    require(ampx_optimizer_add_group(opt, tensors + 2, 1, 0.1, 0.0, nullptr) == AMPX_OK, "group");
    ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
    so.init_scale = 1024.0;
    require(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK, "scaler");
    require(ampx_scaler_step(scaler, opt) == AMPX_OK, "step");
    require(ampx_scaler_update(scaler) == AMPX_OK, "update");

    reference = file.path() + ".reference";
    require(ampx_checkpoint_file_save(reference.c_str(), tensors, 3, opt, scaler) == AMPX_OK,
            "saving the reference");
    reference_bytes = fuzz_support::read_file(reference);
  }

  ~Fixture() {
    unlink(reference.c_str());
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : tensors) ampx_tensor_release(t);
    ampx_context_release(ctx);
  }

  std::vector<unsigned char> snapshot() const {
    std::vector<unsigned char> out;
    fuzz_support::append_tensor_bytes(tensors, 3, out);
    size_t n = 0;
    require(ampx_optimizer_state_size(opt, &n) == AMPX_OK, "state_size");
    const size_t at = out.size();
    out.resize(at + n);
    require(ampx_optimizer_save_state(opt, out.data() + at, n) == AMPX_OK, "save_state");
    ampx_scaler_state s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    require(ampx_scaler_get_state(scaler, &s) == AMPX_OK, "scaler state");
    const auto* b = reinterpret_cast<const unsigned char*>(&s);
    out.insert(out.end(), b, b + sizeof s);
    return out;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  const uint8_t mode = data[0];
  ++data;
  --size;
  std::vector<unsigned char> file;
  if (mode & 2) {
    file = fuzz_support::edited(f.reference_bytes, data, size);
  } else {
    file.assign(data, data + size);
  }
  if (mode & 1) reseal(file);
  f.file.write(file);

  const std::vector<unsigned char> before = f.snapshot();
  const ampx_status status =
      ampx_checkpoint_file_load(f.file.path().c_str(), f.tensors, 3, f.opt, f.scaler);
  if (status == AMPX_OK) {
    require(
        ampx_checkpoint_file_load(f.reference.c_str(), f.tensors, 3, f.opt, f.scaler) == AMPX_OK,
        "reloading the reference after an accepted input");
    return 0;
  }
  require(status == AMPX_ERR_CORRUPT || status == AMPX_ERR_SHAPE || status == AMPX_ERR_DTYPE ||
              status == AMPX_ERR_INVALID_ARGUMENT,
          "an undocumented status for a damaged file");
  require(f.snapshot() == before, "a refused load changed the model");
  return 0;
}
