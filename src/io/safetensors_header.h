// safetensors_header.h -- the header of a safetensors file (the format
// PyTorch, Hugging Face and JAX exchange weights in): reading it with every
// rule of the format checked, and writing it.
//
// Layout: u64 N (little-endian), N bytes of UTF-8 JSON, then the data area.
// The JSON is one object: each key but "__metadata__" names a tensor and
// maps to {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]},
// offsets relative to the data area; "__metadata__" maps strings to
// strings. The tensors' ranges cover the data area exactly, without gaps or
// overlaps; data is little-endian and row-major.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ampx::impl::io {

// The largest header read, as the format's reference implementation: a
// bigger one is refused before any JSON is parsed.
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100000000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // as the file spells it: "F16"
  size_t element_size = 0;
  bool has_dtype = false;  // whether ampx has this type (else `dtype` is unused)
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // [begin, end) in the data area
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                // 8 + N: where the data area starts in the file
  std::vector<SafetensorsEntry> entries;  // ordered by position in the data area
  std::vector<std::pair<std::string, std::string>> metadata;  // ordered by key
};

// Parses and validates the header of the `size` bytes of a whole file.
// AMPX_ERR_CORRUPT naming the entry and the rule when anything breaks the
// format; NOT_SUPPORTED for what the format allows and ampx cannot
// represent (more than AMPX_MAX_DIMS dimensions, a NUL inside a name).
SafetensorsHeader parse_safetensors_header(const unsigned char* file, uint64_t size,
                                           const std::string& path);

// The safetensors name of an ampx dtype ("BF16").
const char* safetensors_dtype_name(DType dtype);

// A tensor to be written: its name and where its data goes in the data area.
struct SafetensorsRecord {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// The JSON header for `records` (in data order) and `metadata`, padded with
// spaces to a multiple of 8 bytes so the data area, and every tensor laid
// out by decreasing element size, stays aligned. INVALID_ARGUMENT when a
// name, key or value is not valid UTF-8.
std::string safetensors_header_json(
    const std::vector<SafetensorsRecord>& records,
    const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace ampx::impl::io
