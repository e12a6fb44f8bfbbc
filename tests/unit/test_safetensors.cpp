// safetensors files (ampx.h section 16): round trips of every dtype bit for
// bit; files built here byte by byte from the format's description load
// correctly; every malformed header is refused with CORRUPT and changes no
// tensor; I/O failures leave the previous file; on the CPU an aligned
// tensor is loaded on the file's mapping and an unaligned one is copied.
// The files ampx writes are checked against the format with nlohmann/json,
// never with ampx's own reader.
#include <signal.h>
#if !defined(_WIN32)
#include <sys/resource.h>
#endif

#include <cstdio>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support.h"

namespace {

using ampx_test::contains;
using ampx_test::last_error;
using ampx_test::read_bytes;
using ampx_test::TempDir;
using ampx_test::Tensor;
using Bytes = std::vector<unsigned char>;

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::remove(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  REQUIRE(std::fclose(f) == 0);
}

// A safetensors file as the format describes it: the header's length as a
// little-endian u64, the header, the data.
Bytes file_of(const std::string& header, const Bytes& data) {
  Bytes file;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<unsigned char>(n >> (8 * i)));
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

Bytes le_bytes(uint64_t value, int size) {
  Bytes out;
  for (int i = 0; i < size; ++i) out.push_back(static_cast<unsigned char>(value >> (8 * i)));
  return out;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  Bytes out(n);
  for (unsigned char& b : out) b = static_cast<unsigned char>(random());
  return out;
}

ampx_tensor make_tensor(ampx_context ctx, ampx_dtype dtype, const std::vector<int64_t>& dims,
                        const Bytes& bytes, const char* name = nullptr) {
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, static_cast<int32_t>(dims.size()), dims.data(),
                                        bytes.data(), bytes.size(), &t) == AMPX_OK,
                  last_error());
  if (name) REQUIRE(ampx_tensor_set_name(t, name) == AMPX_OK);
  return t;
}

Bytes contents(ampx_tensor t) {
  size_t n = 0;
  REQUIRE(ampx_tensor_nbytes(t, &n) == AMPX_OK);
  Bytes out(n);
  REQUIRE_MESSAGE(ampx_tensor_to_host(t, out.data(), n) == AMPX_OK, last_error());
  return out;
}

std::vector<int64_t> shape_of(ampx_tensor t) {
  int32_t ndim = 0;
  REQUIRE(ampx_tensor_ndim(t, &ndim) == AMPX_OK);
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  REQUIRE(ampx_tensor_shape(t, dims.data(), ndim) == AMPX_OK);
  return dims;
}

ampx_dtype dtype_of(ampx_tensor t) {
  ampx_dtype d = AMPX_F32;
  REQUIRE(ampx_tensor_dtype(t, &d) == AMPX_OK);
  return d;
}

uint64_t current_bytes(ampx_context ctx) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
  return stats.current_bytes;
}

// Owns an opened file.
struct File {
  ampx_safetensors handle = nullptr;
  File(ampx_context ctx, const std::string& path) {
    REQUIRE_MESSAGE(ampx_safetensors_open(ctx, path.c_str(), &handle) == AMPX_OK, last_error());
  }
  ~File() { ampx_safetensors_release(handle); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  operator ampx_safetensors() const { return handle; }

  ampx_tensor load(const char* name, uint32_t flags = 0) const {
    ampx_tensor t = nullptr;
    REQUIRE_MESSAGE(ampx_safetensors_load_tensor(handle, name, flags, &t) == AMPX_OK, last_error());
    return t;
  }
};

struct DtypeCase {
  ampx_dtype dtype;
  const char* format_name;
  size_t size;
};

const DtypeCase kDtypes[] = {{AMPX_F32, "F32", 4},
                             {AMPX_F16, "F16", 2},
                             {AMPX_BF16, "BF16", 2},
                             {AMPX_I32, "I32", 4},
                             {AMPX_I64, "I64", 8}};

TEST_CASE(
    "safetensors: every dtype round-trips bit for bit in a file laid out as the format says") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  // Random bits: NaNs with payloads, subnormals and infinities included.
  std::deque<Tensor> tensors;
  std::vector<Bytes> bits;
  std::vector<ampx_tensor> handles;
  const std::vector<int64_t> dims = {3, 5};
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    bits.push_back(random_bytes(15 * kDtypes[i].size, static_cast<uint32_t>(i + 1)));
    const std::string name = std::string("layer.") + kDtypes[i].format_name;
    tensors.emplace_back(make_tensor(ctx, kDtypes[i].dtype, dims, bits.back(), name.c_str()));
    handles.push_back(tensors.back());
  }
  const char* keys[] = {"format", "note"};
  const char* values[] = {"pt", "ünïcode ✓"};
  REQUIRE_MESSAGE(ampx_safetensors_save(path.c_str(), handles.data(), nullptr, handles.size(), keys,
                                        values, 2) == AMPX_OK,
                  last_error());

  // The bytes, read as the format describes them.
  const Bytes file = read_bytes(path);
  REQUIRE(file.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | file[static_cast<size_t>(i)];
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= file.size());
  const std::string text(file.begin() + 8, file.begin() + 8 + static_cast<long>(n));
  const nlohmann::json header = nlohmann::json::parse(text);
  CHECK(header["__metadata__"] == nlohmann::json({{"format", "pt"}, {"note", "ünïcode ✓"}}));
  uint64_t covered = 0;
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    const nlohmann::json& e = header.at(std::string("layer.") + kDtypes[i].format_name);
    CHECK(e.at("dtype") == kDtypes[i].format_name);
    CHECK(e.at("shape") == nlohmann::json({3, 5}));
    const uint64_t begin = e.at("data_offsets")[0], end = e.at("data_offsets")[1];
    REQUIRE(end - begin == bits[i].size());
    CHECK((8 + n + begin) % kDtypes[i].size == 0);
    CHECK(Bytes(file.begin() + static_cast<long>(8 + n + begin),
                file.begin() + static_cast<long>(8 + n + end)) == bits[i]);
    covered += end - begin;
  }
  CHECK(8 + n + covered == file.size());

  // And back: into existing tensors, and as new ones.
  File f(ctx, path);
  size_t count = 0;
  REQUIRE(ampx_safetensors_count(f, &count) == AMPX_OK);
  CHECK(count == std::size(kDtypes));
  std::deque<Tensor> targets;
  std::vector<ampx_tensor> target_handles;
  std::vector<const char*> names;
  std::vector<std::string> name_store;
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    name_store.push_back(std::string("layer.") + kDtypes[i].format_name);
    ampx_tensor t = nullptr;
    REQUIRE(ampx_tensor_zeros(ctx, kDtypes[i].dtype, 2, dims.data(), &t) == AMPX_OK);
    targets.emplace_back(t);
    target_handles.push_back(t);
  }
  for (const std::string& s : name_store) names.push_back(s.c_str());
  REQUIRE_MESSAGE(ampx_safetensors_load_into(f, names.data(), target_handles.data(),
                                             target_handles.size(), 0) == AMPX_OK,
                  last_error());
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    CHECK(contents(targets[i]) == bits[i]);
    Tensor loaded(f.load(names[i]));
    CHECK(dtype_of(loaded) == kDtypes[i].dtype);
    CHECK(shape_of(loaded) == dims);
    CHECK(contents(loaded) == bits[i]);
    const char* loaded_name = nullptr;
    REQUIRE(ampx_tensor_name(loaded, &loaded_name) == AMPX_OK);
    CHECK(std::string(loaded_name) == names[i]);
  }
  size_t meta = 0;
  REQUIRE(ampx_safetensors_metadata_count(f, &meta) == AMPX_OK);
  REQUIRE(meta == 2);
  const char* key = nullptr;
  const char* value = nullptr;
  REQUIRE(ampx_safetensors_metadata_get(f, 1, &key, &value) == AMPX_OK);
  CHECK(std::string(key) == "note");
  CHECK(std::string(value) == "ünïcode ✓");
}

TEST_CASE("safetensors: a file built byte by byte loads as the format describes it") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("handmade.safetensors");
  // F32 [2, 2] = 1, -2, 0.5, inf; F16 [3] = 1, -2, 65504; I64 [] = -7;
  // BF16 [0, 4] empty; names in the header in no particular order, with
  // spaces, as other writers may put them.
  const Bytes f32 = concat({le_bytes(0x3f800000, 4), le_bytes(0xc0000000, 4),
                            le_bytes(0x3f000000, 4), le_bytes(0x7f800000, 4)});
  const Bytes f16 = concat({le_bytes(0x3c00, 2), le_bytes(0xc000, 2), le_bytes(0x7bff, 2)});
  const Bytes i64 = le_bytes(static_cast<uint64_t>(-7), 8);
  const std::string header =
      "{ \"small\" : {\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},\n"
      "  \"__metadata__\": {\"framework\": \"pt\"},\n"
      "  \"empty\": {\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[30,30]},\n"
      "  \"matrix\": {\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},\n"
      "  \"scalar\": {\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}  ";
  write_bytes(path, file_of(header, concat({i64, f32, f16})));

  File f(ctx, path);
  size_t count = 0;
  REQUIRE(ampx_safetensors_count(f, &count) == AMPX_OK);
  REQUIRE(count == 4);
  // Entries come in the order of their data.
  const char* expected_order[] = {"scalar", "matrix", "small", "empty"};
  for (size_t i = 0; i < 4; ++i) {
    ampx_safetensors_entry e = AMPX_SAFETENSORS_ENTRY_INIT;
    REQUIRE(ampx_safetensors_entry_get(f, i, &e) == AMPX_OK);
    CHECK(std::string(e.name) == expected_order[i]);
  }
  ampx_safetensors_entry e = AMPX_SAFETENSORS_ENTRY_INIT;
  REQUIRE(ampx_safetensors_entry_get(f, 1, &e) == AMPX_OK);
  CHECK(e.dtype == AMPX_F32);
  CHECK(std::string(e.dtype_name) == "F32");
  CHECK(e.ndim == 2);
  CHECK(e.shape[0] == 2);
  CHECK(e.shape[1] == 2);
  CHECK(e.offset == 8 + header.size() + 8);
  CHECK(e.nbytes == 16);
  size_t index = 99;
  REQUIRE(ampx_safetensors_find(f, "small", &index) == AMPX_OK);
  CHECK(index == 2);

  Tensor matrix(f.load("matrix"));
  CHECK(contents(matrix) == f32);
  CHECK(shape_of(matrix) == std::vector<int64_t>{2, 2});
  Tensor small(f.load("small"));
  CHECK(dtype_of(small) == AMPX_F16);
  CHECK(contents(small) == f16);
  Tensor scalar(f.load("scalar"));
  CHECK(shape_of(scalar).empty());
  CHECK(contents(scalar) == i64);
  Tensor empty(f.load("empty"));
  CHECK(shape_of(empty) == std::vector<int64_t>{0, 4});
  CHECK(dtype_of(empty) == AMPX_BF16);

  size_t meta = 0;
  REQUIRE(ampx_safetensors_metadata_count(f, &meta) == AMPX_OK);
  REQUIRE(meta == 1);
  const char* key = nullptr;
  const char* value = nullptr;
  REQUIRE(ampx_safetensors_metadata_get(f, 0, &key, &value) == AMPX_OK);
  CHECK(std::string(key) == "framework");
  CHECK(std::string(value) == "pt");
}

TEST_CASE("safetensors: converting on load only when asked") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("f32.safetensors");
  // 1.5, -2.25, 1024: exact in F16 (0x3e00, 0xc080, 0x6400) and BF16.
  write_bytes(
      path,
      file_of("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
              concat({le_bytes(0x3fc00000, 4), le_bytes(0xc0100000, 4), le_bytes(0x44800000, 4)})));
  File f(ctx, path);
  const Bytes before = concat({le_bytes(0x1111, 2), le_bytes(0x2222, 2), le_bytes(0x3333, 2)});
  Tensor half(make_tensor(ctx, AMPX_F16, {3}, before, "w"));
  ampx_tensor list[] = {half};
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, nullptr, list, 1, 0), AMPX_ERR_DTYPE,
                   "AMPX_SAFETENSORS_CONVERT");
  CHECK(contents(half) == before);
  REQUIRE_MESSAGE(
      ampx_safetensors_load_into(f, nullptr, list, 1, AMPX_SAFETENSORS_CONVERT) == AMPX_OK,
      last_error());
  CHECK(contents(half) == concat({le_bytes(0x3e00, 2), le_bytes(0xc080, 2), le_bytes(0x6400, 2)}));
  Tensor bf(make_tensor(ctx, AMPX_BF16, {3}, before, "w"));
  ampx_tensor bf_list[] = {bf};
  REQUIRE(ampx_safetensors_load_into(f, nullptr, bf_list, 1, AMPX_SAFETENSORS_CONVERT) == AMPX_OK);
  CHECK(contents(bf) == concat({le_bytes(0x3fc0, 2), le_bytes(0xc010, 2), le_bytes(0x4480, 2)}));
}

TEST_CASE("safetensors: a load refused for one tensor changes none of them") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("two.safetensors");
  write_bytes(path, file_of("{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                            "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]}}",
                            random_bytes(24, 7)));
  File f(ctx, path);
  const Bytes old = random_bytes(8, 9);
  Tensor a(make_tensor(ctx, AMPX_I32, {2}, old, "a"));
  Tensor b(make_tensor(ctx, AMPX_I32, {2}, old, "b"));
  Tensor wide(make_tensor(ctx, AMPX_I32, {1, 2}, old, "b"));
  Tensor missing(make_tensor(ctx, AMPX_I32, {2}, old, "nope"));
  Tensor unnamed(make_tensor(ctx, AMPX_I32, {2}, old));
  ampx_tensor with_missing[] = {a, missing};
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, nullptr, with_missing, 2, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "no tensor named 'nope'");
  ampx_tensor with_wide[] = {a, wide};
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, nullptr, with_wide, 2, AMPX_SAFETENSORS_CONVERT),
                   AMPX_ERR_SHAPE, "[2]");
  ampx_tensor with_unnamed[] = {a, unnamed};
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, nullptr, with_unnamed, 2, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "tensors[1] has no name");
  const char* f64_names[] = {"a", "c"};
  ampx_tensor pair[] = {a, b};
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, f64_names, pair, 2, AMPX_SAFETENSORS_CONVERT),
                   AMPX_ERR_DTYPE, "F64");
  CHECK(contents(a) == old);
  CHECK(contents(b) == old);
  CHECK(contents(wide) == old);
  CHECK_FAILS_WITH(ampx_safetensors_load_into(f, nullptr, pair, 2, 4), AMPX_ERR_INVALID_ARGUMENT,
                   "'flags'");
  CHECK(contents(a) == old);

  // F64 is listed, without an ampx dtype, and cannot be made a tensor.
  ampx_safetensors_entry e = AMPX_SAFETENSORS_ENTRY_INIT;
  REQUIRE(ampx_safetensors_entry_get(f, 2, &e) == AMPX_OK);
  CHECK(e.dtype == 0);
  CHECK(std::string(e.dtype_name) == "F64");
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_safetensors_load_tensor(f, "c", 0, &out), AMPX_ERR_DTYPE, "F64");
  CHECK(out == nullptr);
  CHECK_FAILS_WITH(ampx_safetensors_load_tensor(f, "zzz", 0, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "no tensor named 'zzz'");
}

struct BadHeader {
  const char* what;
  std::string header;  // a JSON header; `data` follows it
  Bytes data;
  const char* message;  // a part of the error message
};

// "0,0,...,0": `count` JSON numbers.
std::string zeros(size_t count) {
  std::string text = "0";
  for (size_t i = 1; i < count; ++i) text += ",0";
  return text;
}

// Each breaks one rule of the format; everything else about it is valid.
std::vector<BadHeader> bad_headers() {
  const Bytes eight = random_bytes(8, 3);
  const std::string ok_a = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  return {
      {"not JSON", "hello", eight, "not valid UTF-8 JSON"},
      {"an empty header", "", eight, "not valid UTF-8 JSON"},
      {"a truncated header", "{" + ok_a, eight, "not valid UTF-8 JSON"},
      {"a name that is not UTF-8",
       "{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight, "UTF-8"},
      {"a lone surrogate escape",
       "{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight,
       "not valid UTF-8 JSON"},
      {"a top-level array", "[1, 2]", eight, "not a JSON object"},
      {"a name twice",
       "{" + ok_a + ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight,
       "'a' twice"},
      {"a field twice",
       "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight,
       "'dtype' twice"},
      {"an unknown dtype", "{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       eight, "unknown dtype 'F17'"},
      {"a dtype that is not a string", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}",
       eight, "not a string"},
      {"an entry that is not an object", "{\"a\":[1,2,3]}", eight, "not an object"},
      {"no data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight, "no 'data_offsets'"},
      {"a negative extent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
       eight, "negative"},
      {"a fractional extent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}",
       eight, "not a non-negative integer"},
      {"an extent past int64",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,8]}}", eight,
       "int64"},
      {"a byte count that overflows",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
       eight, "overflows"},
      {"a shape that is not an array",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", eight, "not an array"},
      {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", eight,
       "not [begin, end]"},
      {"a negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}",
       eight, "negative"},
      {"an end before the begin",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", eight,
       "end before they begin"},
      {"a byte count unlike the shape's",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", eight,
       "4 bytes, but its data_offsets [0, 8] hold 8"},
      {"offsets past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
       eight, "past the end of the data area"},
      {"offsets far past the end",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551600,"
       "18446744073709551608]}}",
       eight, "past the end of the data area"},
      {"overlapping ranges",
       "{" + ok_a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", eight,
       "overlap"},
      {"a range inside another",
       "{" + ok_a + ",\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", eight,
       "overlap"},
      {"a gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", eight,
       "belong to no tensor"},
      {"bytes after the last tensor",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", eight,
       "after the last tensor"},
      {"a metadata value that is a number", "{\"__metadata__\":{\"k\":1}," + ok_a + "}", eight,
       "metadata values are strings"},
      {"metadata that is not an object", "{\"__metadata__\":\"pt\"," + ok_a + "}", eight,
       "not an object of strings"},
      {"a metadata key twice", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," + ok_a + "}", eight,
       "'k' twice"},
      // The other values of __metadata__ the reference (PyPI safetensors
      // 0.8.0, safe_open and load) refuses, as found by trying each: a
      // number, a boolean, an array; a value that is null, an object, an
      // array or a boolean. (null itself it reads as no metadata: see
      // the case "__metadata__ null" below.)
      {"metadata that is a number", "{\"__metadata__\":1," + ok_a + "}", eight,
       "not an object of strings"},
      {"metadata that is a fraction", "{\"__metadata__\":1.5," + ok_a + "}", eight,
       "not an object of strings"},
      {"metadata that is a boolean", "{\"__metadata__\":false," + ok_a + "}", eight,
       "not an object of strings"},
      {"metadata that is an empty array", "{\"__metadata__\":[]," + ok_a + "}", eight,
       "not an object of strings"},
      {"metadata that is an array of strings", "{\"__metadata__\":[\"pt\"]," + ok_a + "}", eight,
       "not an object of strings"},
      {"a metadata value that is null", "{\"__metadata__\":{\"k\":null}," + ok_a + "}", eight,
       "metadata values are strings"},
      {"a metadata value that is an object",
       "{\"__metadata__\":{\"k\":{\"x\":\"y\"}}," + ok_a + "}", eight,
       "metadata values are strings"},
      {"a metadata value that is an array", "{\"__metadata__\":{\"k\":[\"a\"]}," + ok_a + "}",
       eight, "metadata values are strings"},
      {"a metadata value that is a boolean", "{\"__metadata__\":{\"k\":true}," + ok_a + "}",
       eight, "metadata values are strings"},
      {"an array bomb",
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[" + zeros(2000) +
           "]}}",
       eight, "more than 1024 elements"},
      {"a nesting bomb", "{\"__metadata__\":" + std::string(200, '[') + std::string(200, ']') + "}",
       eight, "nests deeper"},
  };
}

TEST_CASE("safetensors: every malformed header is CORRUPT and changes nothing") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const Bytes old = random_bytes(8, 11);
  Tensor target(make_tensor(ctx, AMPX_F32, {2}, old, "a"));
  // A valid file first, so that the handle below can be checked unchanged.
  write_bytes(path, file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                            random_bytes(8, 5)));
  { File valid(ctx, path); }
  for (const BadHeader& bad : bad_headers()) {
    INFO(bad.what);
    write_bytes(path, file_of(bad.header, bad.data));
    ampx_safetensors out = reinterpret_cast<ampx_safetensors>(&target);
    CHECK_FAILS_WITH(ampx_safetensors_open(ctx, path.c_str(), &out), AMPX_ERR_CORRUPT, bad.message);
    CHECK(contains(last_error(), path));
    CHECK(out == reinterpret_cast<ampx_safetensors>(&target));
    CHECK(contents(target) == old);
  }

  // The framing: shorter than the length field, a length past the file, a
  // length above the format's limit.
  const std::string ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const Bytes good = file_of(ok, random_bytes(8, 5));
  std::vector<std::pair<Bytes, const char*>> framing = {
      {Bytes{1, 0, 0}, "too short"},
      {Bytes(good.begin(), good.begin() + 20), "truncated"},
      {concat({le_bytes(uint64_t{1} << 62, 8), Bytes(good.begin() + 8, good.end())}), "more than"},
      {concat({le_bytes(100000001, 8), Bytes(good.begin() + 8, good.end())}), "more than"},
      {Bytes(good.begin(), good.end() - 3), "past the end"},
  };
  for (const auto& [bytes, message] : framing) {
    INFO(message);
    write_bytes(path, bytes);
    ampx_safetensors out = nullptr;
    CHECK_FAILS_WITH(ampx_safetensors_open(ctx, path.c_str(), &out), AMPX_ERR_CORRUPT, message);
    CHECK(out == nullptr);
  }

  // What the format allows and ampx cannot represent.
  write_bytes(path, file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
                            "\"data_offsets\":[0,8]}}",
                            random_bytes(8, 5)));
  ampx_safetensors out = nullptr;
  CHECK_FAILS_WITH(ampx_safetensors_open(ctx, path.c_str(), &out), AMPX_ERR_NOT_SUPPORTED,
                   "9 dimensions");
  write_bytes(path,
              file_of("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      random_bytes(8, 5)));
  CHECK_FAILS_WITH(ampx_safetensors_open(ctx, path.c_str(), &out), AMPX_ERR_NOT_SUPPORTED, "NUL");
  CHECK(out == nullptr);
  CHECK(contents(target) == old);
}

// The reference implementation (PyPI safetensors 0.8.0: safe_open(...)
// .metadata() returns None, and load() succeeds) reads "__metadata__": null
// as a file without metadata, and {} as empty metadata; ampx reads both as
// no entries, and the tensors load as from any file.
TEST_CASE("safetensors: __metadata__ null or {} opens as a file without metadata") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const Bytes data = random_bytes(8, 41);
  for (const char* metadata : {"null", "{}", "{\"k\":\"v\"}"}) {
    INFO("__metadata__ ", metadata);
    // Before and after the tensor: the key's place does not matter.
    const std::string entry = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    const std::string meta = std::string("\"__metadata__\":") + metadata;
    for (const std::string& header : {"{" + meta + "," + entry + "}", "{" + entry + "," + meta + "}"}) {
      write_bytes(path, file_of(header, data));
      File file(ctx, path);
      size_t count = 7, metadata_count = 7;
      REQUIRE(ampx_safetensors_count(file, &count) == AMPX_OK);
      CHECK(count == 1);
      REQUIRE(ampx_safetensors_metadata_count(file, &metadata_count) == AMPX_OK);
      const bool has_entry = std::string(metadata) == "{\"k\":\"v\"}";
      CHECK(metadata_count == (has_entry ? 1u : 0u));
      const char* key = nullptr;
      const char* value = nullptr;
      if (has_entry) {
        REQUIRE(ampx_safetensors_metadata_get(file, 0, &key, &value) == AMPX_OK);
        CHECK(std::string(key) == "k");
        CHECK(std::string(value) == "v");
      } else {
        CHECK(ampx_safetensors_metadata_get(file, 0, &key, &value) == AMPX_ERR_INVALID_ARGUMENT);
      }
      Tensor a(file.load("a"));
      CHECK(contents(a) == data);
    }
  }
}

TEST_CASE("safetensors: tensors whose bytes add up past 2^63 - 1 are refused before any file") {
  // One F32 tensor of 2^60 elements (2^62 bytes) saved twice, as two views
  // of one large base could be: each fits in int64, the second's end
  // offset, 2^63, does not. Its memory is never read: the offsets are laid
  // out before the file is created. (Host memory, so a CPU context.)
  ampx_context ctx = nullptr;
  ampx_context_options o = ampx_context_options_default();
  o.device_type = AMPX_DEVICE_CPU;
  REQUIRE(ampx_context_create(&o, &ctx) == AMPX_OK);
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  alignas(64) static unsigned char block[64];
  const int64_t dims[] = {int64_t{1} << 60};
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_wrap(ctx, AMPX_F32, 1, dims, block, size_t{1} << 62, nullptr,
                                   nullptr, &t) == AMPX_OK,
                  last_error());
  Tensor owner(t);
  const ampx_tensor list[] = {t, t};
  const char* names[] = {"first", "second"};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), list, names, 2, nullptr, nullptr, 0),
                   AMPX_ERR_SHAPE, "the data offset of tensor 'second'");
  CHECK(contains(last_error(), "overflows int64"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  CHECK(f == nullptr);
  if (f) std::fclose(f);
  owner.out();
  ampx_context_release(ctx);
}

TEST_CASE("safetensors: on the CPU an aligned tensor is loaded on the mapping, else copied") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("mapped.safetensors");
  const Bytes a = random_bytes(64, 21), b = random_bytes(32, 22);
  Tensor ta(make_tensor(ctx, AMPX_F32, {16}, a, "a"));
  Tensor tb(make_tensor(ctx, AMPX_F16, {16}, b, "b"));
  ampx_tensor list[] = {ta, tb};
  REQUIRE(ampx_safetensors_save(path.c_str(), list, nullptr, 2, nullptr, nullptr, 0) == AMPX_OK);

  ampx_tensor mapped_a = nullptr, mapped_b = nullptr, copied = nullptr;
  const uint64_t before = current_bytes(ctx);
  {
    File f(ctx, path);
    mapped_a = f.load("a");
    mapped_b = f.load("b");
    copied = f.load("a", AMPX_SAFETENSORS_COPY);
  }  // the tensors keep the mapping after the handle is gone
  CHECK(contents(mapped_a) == a);
  CHECK(contents(mapped_b) == b);
  CHECK(contents(copied) == a);
  void* pa = nullptr;
  void* pb = nullptr;
  REQUIRE(ampx_tensor_data(mapped_a, &pa) == AMPX_OK);
  REQUIRE(ampx_tensor_data(mapped_b, &pb) == AMPX_OK);
  if (ampx_test::test_device() == AMPX_DEVICE_CPU) {
    // Zero copy: only the forced copy is new memory, and the two mapped
    // tensors lie as far apart as their data in the file (F32 first).
    CHECK(current_bytes(ctx) == before + a.size());
    CHECK(static_cast<char*>(pb) - static_cast<char*>(pa) == 64);
    // Writing to a mapped tensor changes neither the file nor a copy.
    const Bytes file = read_bytes(path);
    REQUIRE(ampx_tensor_fill(mapped_a, 3.0) == AMPX_OK);
    CHECK(read_bytes(path) == file);
    File again(ctx, path);
    Tensor fresh(again.load("a", AMPX_SAFETENSORS_COPY));
    CHECK(contents(fresh) == a);
  } else {
    CHECK(current_bytes(ctx) == before + 2 * a.size() + b.size());
  }
  ampx_tensor_release(mapped_a);
  ampx_tensor_release(mapped_b);
  ampx_tensor_release(copied);

  // A header of odd length (other writers do not pad) leaves the F32 data
  // unaligned: copied, with the same bits.
  const std::string odd = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
  REQUIRE(odd.size() % 4 != 0);
  const Bytes w = random_bytes(16, 23);
  write_bytes(path, file_of(odd, w));
  File f(ctx, path);
  const uint64_t start = current_bytes(ctx);
  Tensor unaligned(f.load("w"));
  CHECK(contents(unaligned) == w);
  CHECK(current_bytes(ctx) == start + 16);
}

TEST_CASE("safetensors: saving checks its arguments and replaces the file atomically") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Tensor t(make_tensor(ctx, AMPX_F32, {2}, random_bytes(8, 1), "w"));
  Tensor unnamed(make_tensor(ctx, AMPX_F32, {2}, random_bytes(8, 2)));
  ampx_tensor one[] = {t};
  REQUIRE(ampx_safetensors_save(path.c_str(), one, nullptr, 1, nullptr, nullptr, 0) == AMPX_OK);
  const Bytes saved = read_bytes(path);

  ampx_tensor two[] = {t, unnamed};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), two, nullptr, 2, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "tensors[1] has no name");
  const char* same[] = {"x", "x"};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), two, same, 2, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "'x' like an earlier one");
  const char* reserved[] = {"__metadata__"};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), one, reserved, 1, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "__metadata__");
  const char* not_utf8[] = {"\xff"};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), one, not_utf8, 1, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "UTF-8");
  const char* keys[] = {"k", "k"};
  const char* values[] = {"1", "2"};
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), one, nullptr, 1, keys, values, 2),
                   AMPX_ERR_INVALID_ARGUMENT, "'k' is given twice");
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), one, nullptr, 1, keys, nullptr, 1),
                   AMPX_ERR_INVALID_ARGUMENT, "'metadata_values'");
  CHECK_FAILS_WITH(ampx_safetensors_save(nullptr, one, nullptr, 1, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "'path'");
  CHECK_FAILS_WITH(ampx_safetensors_save(path.c_str(), nullptr, nullptr, 1, nullptr, nullptr, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "'tensors'");
  CHECK(read_bytes(path) == saved);
  CHECK(dir.entry_count() == 1);

  CHECK_FAILS_WITH(ampx_safetensors_save(dir.file("no/such/dir/m.safetensors").c_str(), one,
                                         nullptr, 1, nullptr, nullptr, 0),
                   AMPX_ERR_IO, "cannot create the temporary file");

#if !defined(_WIN32)  // POSIX file size limits (RLIMIT_FSIZE)
  // A disk that fills up half-way (a file size limit): IO, the previous file
  // intact and no temporary file left.
  Tensor big;
  const int64_t n = 1 << 20;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 1, &n, big.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(big, "big") == AMPX_OK);
  ampx_tensor with_big[] = {t, big};
  struct rlimit old_limit {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 200000;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  const ampx_status status =
      ampx_safetensors_save(path.c_str(), with_big, nullptr, 2, nullptr, nullptr, 0);
  const std::string message = last_error();
  REQUIRE(setrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  signal(SIGXFSZ, old_handler);
  CHECK_MESSAGE(status == AMPX_ERR_IO, message);
  CHECK_MESSAGE(contains(message, "cannot write"), message);
  CHECK(read_bytes(path) == saved);
  CHECK(dir.entry_count() == 1);
#endif
}

TEST_CASE("safetensors: opening and querying check their arguments") {
  ampx_test::Ctx ctx;
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  ampx_safetensors out = nullptr;
  CHECK_FAILS_WITH(ampx_safetensors_open(ctx, dir.file("missing").c_str(), &out), AMPX_ERR_IO,
                   "No such file");
  CHECK_FAILS_WITH(ampx_safetensors_open(ctx, dir.path.string().c_str(), &out), AMPX_ERR_IO,
                   "not a regular file");
  CHECK_FAILS_WITH(ampx_safetensors_open(ctx, "", &out), AMPX_ERR_INVALID_ARGUMENT, "'path'");
  CHECK_FAILS_WITH(ampx_safetensors_open(nullptr, path.c_str(), &out), AMPX_ERR_INVALID_ARGUMENT,
                   "'ctx'");
  CHECK(out == nullptr);

  write_bytes(path, file_of("{}      ", {}));
  File f(ctx, path);
  size_t count = 7;
  REQUIRE(ampx_safetensors_count(f, &count) == AMPX_OK);
  CHECK(count == 0);
  REQUIRE(ampx_safetensors_metadata_count(f, &count) == AMPX_OK);
  CHECK(count == 0);
  ampx_safetensors_entry e = AMPX_SAFETENSORS_ENTRY_INIT;
  CHECK_FAILS_WITH(ampx_safetensors_entry_get(f, 0, &e), AMPX_ERR_INVALID_ARGUMENT, "'index'");
  const char* key = nullptr;
  const char* value = nullptr;
  CHECK_FAILS_WITH(ampx_safetensors_metadata_get(f, 0, &key, &value), AMPX_ERR_INVALID_ARGUMENT,
                   "'index'");
  CHECK_FAILS_WITH(ampx_safetensors_count(nullptr, &count), AMPX_ERR_INVALID_ARGUMENT, "'file'");
  Tensor t(make_tensor(ctx, AMPX_F32, {1}, random_bytes(4, 1), "x"));
  CHECK_FAILS_WITH(ampx_safetensors_count(reinterpret_cast<ampx_safetensors>(t.handle), &count),
                   AMPX_ERR_STALE_HANDLE, "not an ampx_safetensors");
  ampx_safetensors_release(nullptr);
}

}  // namespace
