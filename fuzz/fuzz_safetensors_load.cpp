// fuzz_safetensors_load.cpp -- libFuzzer target: arbitrary bytes opened as a
// safetensors file (ampx_safetensors_open) and loaded into a live model and
// as new tensors.
//
// The first input byte picks how the rest becomes the file:
//   bit 1 set:   the rest are edits (u16 offset, u8 xor) of a valid file
//                ampx saved, after an optional cut to the length in the
//                first two bytes;
//   else bit 0:  the rest is the JSON header, framed with its true length
//                and followed by the valid file's data, so inputs reach
//                the format's rules instead of stopping at the length;
//   else:        the rest is the file.
// Oracles besides the sanitizers: a refused open or load returns a
// documented status and leaves the model bit for bit as it was; every
// tensor an accepted file lists lies inside the file and loads (read
// through, so a bad range is an ASan report); an accepted load into the
// model is undone by loading the valid file again.
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

struct Fixture {
  ampx_context ctx = nullptr;
  ampx_tensor tensors[3] = {};
  fuzz_support::ScratchFile file{"st"};  // the fuzzed file
  std::string reference;                 // a valid file of this model
  std::vector<unsigned char> reference_bytes;
  std::vector<unsigned char> reference_data;  // its data area

  Fixture() {
    ampx_context_options o = AMPX_CONTEXT_OPTIONS_INIT;
    o.num_threads = 1;
    require(ampx_context_create(&o, &ctx) == AMPX_OK, "context");
    const ampx_dtype dtypes[3] = {AMPX_F32, AMPX_BF16, AMPX_I64};
    const char* names[3] = {"w", "h", "b"};
    const int64_t dims[3][2] = {{2, 3}, {3, 1}, {2, 1}};
    for (int i = 0; i < 3; ++i) {
      require(ampx_tensor_empty(ctx, dtypes[i], 2, dims[i], &tensors[i]) == AMPX_OK, "tensor");
      require(ampx_tensor_fill(tensors[i], 0.5 + i) == AMPX_OK, "fill");
      require(ampx_tensor_set_name(tensors[i], names[i]) == AMPX_OK, "name");
    }
    reference = file.path() + ".reference";
    const char* keys[] = {"format"};
    const char* values[] = {"pt"};
    require(
        ampx_safetensors_save(reference.c_str(), tensors, nullptr, 3, keys, values, 1) == AMPX_OK,
        "saving the reference");
    reference_bytes = fuzz_support::read_file(reference);
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | reference_bytes[static_cast<size_t>(i)];
    reference_data.assign(reference_bytes.begin() + static_cast<long>(8 + header),
                          reference_bytes.end());
  }

  ~Fixture() {
    unlink(reference.c_str());
    for (ampx_tensor t : tensors) ampx_tensor_release(t);
    ampx_context_release(ctx);
  }

  std::vector<unsigned char> snapshot() const {
    std::vector<unsigned char> out;
    fuzz_support::append_tensor_bytes(tensors, 3, out);
    return out;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<unsigned char> file_from(const uint8_t* data, size_t size, const Fixture& f) {
  const uint8_t mode = data[0];
  ++data;
  --size;
  std::vector<unsigned char> file;
  if (mode & 2) {
    file = fuzz_support::edited(f.reference_bytes, data, size);
  } else if (mode & 1) {
    for (int i = 0; i < 8; ++i)
      file.push_back(static_cast<unsigned char>(uint64_t{size} >> (8 * i)));
    file.insert(file.end(), data, data + size);
    file.insert(file.end(), f.reference_data.begin(), f.reference_data.end());
  } else {
    file.assign(data, data + size);
  }
  return file;
}

// Every tensor the file lists lies inside it and loads, without a copy and
// with one, with every byte read.
void load_every_entry(ampx_safetensors file, uint64_t file_size) {
  size_t count = 0;
  require(ampx_safetensors_count(file, &count) == AMPX_OK, "count");
  for (size_t i = 0; i < count; ++i) {
    ampx_safetensors_entry e = AMPX_SAFETENSORS_ENTRY_INIT;
    require(ampx_safetensors_entry_get(file, i, &e) == AMPX_OK, "entry");
    require(e.offset <= file_size && e.nbytes <= file_size - e.offset, "an entry outside the file");
    size_t index = count;
    require(ampx_safetensors_find(file, e.name, &index) == AMPX_OK, "find");
    const uint32_t flags[2] = {0, AMPX_SAFETENSORS_COPY};
    for (uint32_t flag : flags) {
      ampx_tensor t = nullptr;
      const ampx_status status = ampx_safetensors_load_tensor(file, e.name, flag, &t);
      if (e.dtype == 0) {
        require(status == AMPX_ERR_DTYPE, "a dtype ampx lacks was loaded");
        continue;
      }
      require(status == AMPX_OK, "an entry of an accepted file did not load");
      std::vector<unsigned char> bytes(static_cast<size_t>(e.nbytes));
      require(ampx_tensor_to_host(t, bytes.data(), bytes.size()) == AMPX_OK, "reading a tensor");
      ampx_tensor_release(t);
    }
  }
  size_t metadata = 0;
  require(ampx_safetensors_metadata_count(file, &metadata) == AMPX_OK, "metadata count");
  for (size_t i = 0; i < metadata; ++i) {
    const char* key = nullptr;
    const char* value = nullptr;
    require(ampx_safetensors_metadata_get(file, i, &key, &value) == AMPX_OK, "metadata");
    require(std::strlen(key) + std::strlen(value) <= file_size, "metadata longer than the file");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  const std::vector<unsigned char> bytes = file_from(data, size, f);
  f.file.write(bytes);

  const std::vector<unsigned char> before = f.snapshot();
  ampx_safetensors file = nullptr;
  const ampx_status opened = ampx_safetensors_open(f.ctx, f.file.path().c_str(), &file);
  if (opened != AMPX_OK) {
    require(opened == AMPX_ERR_CORRUPT || opened == AMPX_ERR_NOT_SUPPORTED,
            "an undocumented status for a damaged file");
    require(file == nullptr, "a refused open wrote its output");
    return 0;
  }
  load_every_entry(file, bytes.size());
  const ampx_status loaded =
      ampx_safetensors_load_into(file, nullptr, f.tensors, 3, AMPX_SAFETENSORS_CONVERT);
  ampx_safetensors_release(file);
  if (loaded == AMPX_OK) {
    ampx_safetensors valid = nullptr;
    require(ampx_safetensors_open(f.ctx, f.reference.c_str(), &valid) == AMPX_OK,
            "opening the reference");
    require(ampx_safetensors_load_into(valid, nullptr, f.tensors, 3, 0) == AMPX_OK,
            "reloading the reference after an accepted input");
    ampx_safetensors_release(valid);
    return 0;
  }
  require(
      loaded == AMPX_ERR_INVALID_ARGUMENT || loaded == AMPX_ERR_SHAPE || loaded == AMPX_ERR_DTYPE,
      "an undocumented status for a load into the model");
  require(f.snapshot() == before, "a refused load changed the model");
  return 0;
}
