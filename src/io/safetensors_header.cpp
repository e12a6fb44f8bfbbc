// safetensors_header.cpp -- reads and writes safetensors headers with
// nlohmann/json. The JSON library parses; this file checks the format's own
// rules on top: duplicate keys (which a JSON object silently collapses),
// dtypes, shapes, byte counts and the ranges of the data area.
#include "io/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ampx::impl::io {
namespace {

using Json = nlohmann::json;

struct FormatDtype {
  const char* name;
  size_t size;
  bool has_dtype;
  DType dtype;
};

// Every byte-sized element type of the format; the ones ampx has map to
// its dtypes, the others can be listed but not loaded.
constexpr FormatDtype kFormatDtypes[] = {
    {"F32", 4, true, DType::F32},      {"F16", 2, true, DType::F16},
    {"BF16", 2, true, DType::BF16},    {"I32", 4, true, DType::I32},
    {"I64", 8, true, DType::I64},      {"F64", 8, false, DType::F32},
    {"I8", 1, false, DType::F32},      {"U8", 1, false, DType::F32},
    {"I16", 2, false, DType::F32},     {"U16", 2, false, DType::F32},
    {"U32", 4, false, DType::F32},     {"U64", 8, false, DType::F32},
    {"BOOL", 1, false, DType::F32},    {"F8_E4M3", 1, true, DType::F8E4M3},
    {"F8_E5M2", 1, true, DType::F8E5M2}, {"F8_E8M0", 1, false, DType::F32},
    {"C64", 8, false, DType::F32},
};

// Valid headers nest three deep (header, entry, shape) and their arrays
// hold at most AMPX_MAX_DIMS numbers; anything far beyond is an attack on
// the parser's memory (a 100 MB header of "0," would become 50 million
// JSON values), refused while parsing.
constexpr int kMaxDepth = 32;
constexpr size_t kMaxArrayElements = 1024;

const FormatDtype* find_format_dtype(const std::string& name) {
  for (const FormatDtype& d : kFormatDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// "'fc1.weight'" -- how messages name an entry.
std::string quoted(const std::string& name) { return cat("'", name, "'"); }

void refuse_nul(const std::string& text, const char* what) {
  if (text.find('\0') != std::string::npos)
    fail(AMPX_ERR_NOT_SUPPORTED, "the header holds a ", what,
         " with a NUL character, which a C string cannot carry");
}

std::string kind_of(const Json& value) {
  if (value.is_number_float()) return cat("the number ", value.dump());
  const std::string type = value.type_name();
  return cat(type == "array" || type == "object" ? "an " : "a ", type);
}

uint64_t non_negative(const Json& value, const std::string& what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer())
    fail(AMPX_ERR_CORRUPT, what, " is negative (", value.get<int64_t>(), ")");
  fail(AMPX_ERR_CORRUPT, what, " is ", kind_of(value), ", not a non-negative integer");
}

// One array or object the parser is inside.
struct OpenContainer {
  bool array = false;
  size_t elements = 0;         // of an array
  std::set<std::string> keys;  // of an object
};

// The JSON text, parsed with every object's keys checked for repeats (the
// format forbids them, and a JSON object would keep only the last one) and
// the nesting and array lengths bounded.
Json parse_json(const unsigned char* text, uint64_t bytes) {
  std::vector<OpenContainer> open;
  const auto count_element = [&] {
    if (open.empty() || !open.back().array) return;
    if (++open.back().elements > kMaxArrayElements)
      fail(AMPX_ERR_CORRUPT, "the header holds an array of more than ", kMaxArrayElements,
           " elements; a safetensors header's arrays hold a shape or two offsets");
  };
  using Event = Json::parse_event_t;
  const Json::parser_callback_t check = [&](int depth, Event event, Json& parsed) {
    if (depth > kMaxDepth)
      fail(AMPX_ERR_CORRUPT, "the header nests deeper than ", kMaxDepth,
           " levels; a safetensors header has three");
    if (event == Event::object_start || event == Event::array_start) {
      count_element();
      open.emplace_back();
      open.back().array = event == Event::array_start;
    } else if (event == Event::object_end || event == Event::array_end) {
      open.pop_back();
    } else if (event == Event::value) {
      count_element();
    } else if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open.back().keys.insert(key).second)
        fail(AMPX_ERR_CORRUPT, "the header has the key ", quoted(key), " twice",
             open.size() > 1 ? " in one object" : "", " (the format forbids duplicate keys)");
    }
    return true;
  };
  try {
    return Json::parse(text, text + bytes, check);
  } catch (const Json::exception& e) {
    fail(AMPX_ERR_CORRUPT, "the header is not valid UTF-8 JSON: ", e.what());
  }
}

SafetensorsEntry parse_entry(const std::string& name, const Json& value) {
  refuse_nul(name, "tensor name");
  const std::string label = cat("tensor ", quoted(name));
  if (!value.is_object())
    fail(AMPX_ERR_CORRUPT, label, " is ", kind_of(value),
         ", not an object with dtype, shape and data_offsets");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!value.contains(field)) fail(AMPX_ERR_CORRUPT, label, " has no '", field, "'");
  SafetensorsEntry entry;
  entry.name = name;

  const Json& dtype = value.at("dtype");
  if (!dtype.is_string())
    fail(AMPX_ERR_CORRUPT, label, ": dtype is ", kind_of(dtype), ", not a string");
  const FormatDtype* format = find_format_dtype(dtype.get_ref<const std::string&>());
  if (!format)
    fail(AMPX_ERR_CORRUPT, label, " has the unknown dtype '", dtype.get_ref<const std::string&>(),
         "'");
  entry.dtype_name = format->name;
  entry.element_size = format->size;
  entry.has_dtype = format->has_dtype;
  entry.dtype = format->dtype;

  const Json& shape = value.at("shape");
  if (!shape.is_array())
    fail(AMPX_ERR_CORRUPT, label, ": shape is ", kind_of(shape), ", not an array");
  if (shape.size() > static_cast<size_t>(kMaxDims))
    fail(AMPX_ERR_NOT_SUPPORTED, label, " has ", shape.size(),
         " dimensions; ampx tensors have at most ", kMaxDims);
  entry.shape.ndim = static_cast<int32_t>(shape.size());
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const uint64_t extent = non_negative(shape[d], cat(label, ": extent ", d));
    if (extent > static_cast<uint64_t>(INT64_MAX))
      fail(AMPX_ERR_CORRUPT, label, ": extent ", d, " (", extent, ") does not fit in an int64");
    entry.shape.dims[d] = static_cast<int64_t>(extent);
    empty = empty || extent == 0;
  }
  // A zero extent anywhere makes the tensor empty, whatever the others are.
  uint64_t bytes = empty ? 0 : format->size;
  for (int32_t d = 0; d < entry.shape.ndim && !empty; ++d)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(entry.shape.dims[d]), &bytes))
      fail(AMPX_ERR_CORRUPT, label, ": shape ", entry.shape.str(), " of ", format->name,
           " overflows a 64-bit byte count");

  const Json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    fail(AMPX_ERR_CORRUPT, label, ": data_offsets is ", kind_of(offsets),
         offsets.is_array() ? cat(" of ", offsets.size(), " element(s)") : std::string(),
         ", not [begin, end]");
  entry.begin = non_negative(offsets[0], cat(label, ": begin offset"));
  entry.end = non_negative(offsets[1], cat(label, ": end offset"));
  if (entry.end < entry.begin)
    fail(AMPX_ERR_CORRUPT, label, ": data_offsets [", entry.begin, ", ", entry.end,
         "] end before they begin");
  if (entry.end - entry.begin != bytes)
    fail(AMPX_ERR_CORRUPT, label, " is ", format->name, entry.shape.str(), ", ", bytes,
         " bytes, but its data_offsets [", entry.begin, ", ", entry.end, "] hold ",
         entry.end - entry.begin);
  return entry;
}

std::vector<std::pair<std::string, std::string>> parse_metadata(const Json& value) {
  std::vector<std::pair<std::string, std::string>> metadata;
  if (value.is_null()) return metadata;
  if (!value.is_object())
    fail(AMPX_ERR_CORRUPT, "__metadata__ is ", kind_of(value), ", not an object of strings");
  for (const auto& [key, text] : value.items()) {
    refuse_nul(key, "metadata key");
    if (!text.is_string())
      fail(AMPX_ERR_CORRUPT, "__metadata__[", quoted(key), "] is ", kind_of(text),
           "; metadata values are strings");
    refuse_nul(text.get_ref<const std::string&>(), "metadata value");
    metadata.emplace_back(key, text.get<std::string>());
  }
  return metadata;  // the JSON object iterates its keys in order
}

// The ranges must tile the data area exactly: each tensor starts where the
// previous one ends, from 0 to the end of the file (as the format's
// reference reader demands), so no byte is read twice or left over.
void check_ranges(std::vector<SafetensorsEntry>& entries, uint64_t data_bytes) {
  for (const SafetensorsEntry& e : entries)
    if (e.end > data_bytes)
      fail(AMPX_ERR_CORRUPT, "tensor ", quoted(e.name), ": data_offsets [", e.begin, ", ", e.end,
           "] run past the end of the data area (", data_bytes, " bytes)");
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin < covered)
      fail(AMPX_ERR_CORRUPT, "tensor ", quoted(e.name), ": data_offsets [", e.begin, ", ", e.end,
           "] overlap tensor ", quoted(previous->name), " at [", previous->begin, ", ",
           previous->end, "]");
    if (e.begin > covered)
      fail(AMPX_ERR_CORRUPT, "bytes [", covered, ", ", e.begin,
           ") of the data area belong to no tensor (the format allows no gaps)");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes)
    fail(AMPX_ERR_CORRUPT, "the data area has ", data_bytes - covered,
         " byte(s) after the last tensor's data (the format allows none)");
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const unsigned char* file, uint64_t size,
                                           const std::string& path) {
  if (size < 8)
    fail(AMPX_ERR_CORRUPT, "'", path, "' is ", size,
         " bytes, too short for a safetensors file (8 bytes of header length first)");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | file[i];
  if (header_bytes > kSafetensorsMaxHeaderBytes)
    fail(AMPX_ERR_CORRUPT, "'", path, "' claims a header of ", header_bytes,
         " bytes, more than the ", kSafetensorsMaxHeaderBytes, " a safetensors header may have");
  if (header_bytes > size - 8)
    fail(AMPX_ERR_CORRUPT, "'", path, "' claims a header of ", header_bytes, " bytes but has only ",
         size - 8, " after the length: the file is truncated or not safetensors");
  try {
    const Json root = parse_json(file + 8, header_bytes);
    if (!root.is_object())
      fail(AMPX_ERR_CORRUPT, "the header is ", kind_of(root), ", not a JSON object");
    SafetensorsHeader header;
    header.data_start = 8 + header_bytes;
    for (const auto& [key, value] : root.items()) {
      if (key == "__metadata__")
        header.metadata = parse_metadata(value);
      else
        header.entries.push_back(parse_entry(key, value));
    }
    check_ranges(header.entries, size - header.data_start);
    return header;
  } catch (const StatusError& e) {
    fail(e.status(), "'", path, "': ", e.what());
  }
}

const char* safetensors_dtype_name(DType dtype) {
  for (const FormatDtype& d : kFormatDtypes)
    if (d.has_dtype && d.dtype == dtype) return d.name;
  fail(AMPX_ERR_INTERNAL, "dtype ", static_cast<int>(dtype), " has no safetensors name");
}

std::string safetensors_header_json(
    const std::vector<SafetensorsRecord>& records,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json strings = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) strings[key] = value;
    header["__metadata__"] = std::move(strings);
  }
  for (const SafetensorsRecord& r : records) {
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int32_t d = 0; d < r.shape.ndim; ++d) shape.push_back(r.shape.dims[d]);
    header[r.name] = {{"dtype", safetensors_dtype_name(r.dtype)},
                      {"shape", std::move(shape)},
                      {"data_offsets", {r.begin, r.end}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::type_error& e) {
    fail(AMPX_ERR_INVALID_ARGUMENT, "a tensor name or metadata string is not valid UTF-8 (",
         e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace ampx::impl::io
