// api_safetensors.cpp -- safetensors files (section 16 of ampx.h).
#include "api/guard.h"
#include "io/safetensors_file.h"

using namespace ampx::impl;
using io::SafetensorsFile;

namespace {

constexpr uint32_t kKnownFlags = AMPX_SAFETENSORS_CONVERT | AMPX_SAFETENSORS_COPY;

std::string path_arg(const char* path) {
  require_pointer(path, "path");
  if (*path == '\0') fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'path' is an empty string");
  return path;
}

SafetensorsFile& file_arg(ampx_safetensors handle) {
  return object_arg<SafetensorsFile>(handle, "file", "an ampx_safetensors");
}

uint32_t flags_arg(uint32_t flags) {
  if (flags & ~kKnownFlags)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'flags' is ", flags,
         "; only AMPX_SAFETENSORS_CONVERT (1) and AMPX_SAFETENSORS_COPY (2) are defined");
  return flags;
}

std::vector<std::string> string_list_arg(const char* const* strings, size_t count,
                                         const char* arg) {
  if (count > 0) require_pointer(strings, arg);
  std::vector<std::string> list;
  list.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string name = cat(arg, "[", i, "]");
    list.emplace_back(require_pointer(strings[i], name.c_str()));
  }
  return list;
}

// The names given, or else the tensors' own (ampx_tensor_set_name).
std::vector<std::string> names_arg(const char* const* names,
                                   const std::vector<DeviceTensor*>& tensors) {
  if (names) return string_list_arg(names, tensors.size(), "names");
  std::vector<std::string> list;
  list.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i]->name.empty())
      fail(AMPX_ERR_INVALID_ARGUMENT, "tensors[", i,
           "] has no name: name it with ampx_tensor_set_name, or pass 'names'");
    list.push_back(tensors[i]->name);
  }
  return list;
}

size_t index_arg(size_t index, size_t count, const char* what) {
  if (index >= count)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'index' is ", index, " but the file has ", count, " ",
         what);
  return index;
}

}  // namespace

extern "C" {

ampx_status ampx_safetensors_save(const char* path, const ampx_tensor* tensors,
                                  const char* const* names, size_t count,
                                  const char* const* metadata_keys,
                                  const char* const* metadata_values, size_t metadata_count) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<DeviceTensor*> list = tensor_list_arg(tensors, count, "tensors");
    const std::vector<std::string> tensor_names = names_arg(names, list);
    const std::vector<std::string> keys =
        string_list_arg(metadata_keys, metadata_count, "metadata_keys");
    const std::vector<std::string> values =
        string_list_arg(metadata_values, metadata_count, "metadata_values");
    std::vector<std::pair<std::string, std::string>> metadata;
    metadata.reserve(metadata_count);
    for (size_t i = 0; i < metadata_count; ++i) metadata.emplace_back(keys[i], values[i]);
    io::save_safetensors(file, list, tensor_names, metadata);
  });
}

ampx_status ampx_safetensors_open(ampx_context ctx, const char* path, ampx_safetensors* out) {
  return guard(__func__, [&] {
    DeviceContext& context = context_arg(ctx, "ctx");
    const std::string file = path_arg(path);
    require_pointer(out, "out");
    *out = reinterpret_cast<ampx_safetensors>(SafetensorsFile::open(context, file));
  });
}

void ampx_safetensors_release(ampx_safetensors file) {
  if (!file) return;
  guard(__func__, [&] { file_arg(file).release(); });
}

ampx_status ampx_safetensors_count(ampx_safetensors file, size_t* count) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(count, "count");
    *count = f.header().entries.size();
  });
}

ampx_status ampx_safetensors_entry_get(ampx_safetensors file, size_t index,
                                       ampx_safetensors_entry* entry) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(entry, "entry");
    const io::SafetensorsEntry& e =
        f.header().entries[index_arg(index, f.header().entries.size(), "tensor(s)")];
    ampx_safetensors_entry full{};
    full.name = e.name.c_str();
    full.dtype = e.has_dtype ? static_cast<ampx_dtype>(e.dtype) : static_cast<ampx_dtype>(0);
    full.dtype_name = e.dtype_name.c_str();
    full.ndim = e.shape.ndim;
    for (int32_t d = 0; d < e.shape.ndim; ++d) full.shape[d] = e.shape.dims[d];
    full.offset = f.header().data_start + e.begin;
    full.nbytes = e.end - e.begin;
    write_struct(entry, full, "entry");
  });
}

ampx_status ampx_safetensors_find(ampx_safetensors file, const char* name, size_t* index) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(name, "name");
    require_pointer(index, "index");
    *index = f.find(name);
  });
}

ampx_status ampx_safetensors_metadata_count(ampx_safetensors file, size_t* count) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(count, "count");
    *count = f.header().metadata.size();
  });
}

ampx_status ampx_safetensors_metadata_get(ampx_safetensors file, size_t index, const char** key,
                                          const char** value) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(key, "key");
    require_pointer(value, "value");
    const auto& entry =
        f.header().metadata[index_arg(index, f.header().metadata.size(), "metadata entries")];
    *key = entry.first.c_str();
    *value = entry.second.c_str();
  });
}

ampx_status ampx_safetensors_load_into(ampx_safetensors file, const char* const* names,
                                       const ampx_tensor* tensors, size_t count, uint32_t flags) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    const std::vector<DeviceTensor*> list = tensor_list_arg(tensors, count, "tensors");
    const std::vector<std::string> tensor_names = names_arg(names, list);
    const bool convert = (flags_arg(flags) & AMPX_SAFETENSORS_CONVERT) != 0;
    f.load_into(tensor_names, list, convert);
  });
}

ampx_status ampx_safetensors_load_tensor(ampx_safetensors file, const char* name, uint32_t flags,
                                         ampx_tensor* out) {
  return guard(__func__, [&] {
    const SafetensorsFile& f = file_arg(file);
    require_pointer(name, "name");
    require_pointer(out, "out");
    const bool copy = (flags_arg(flags) & AMPX_SAFETENSORS_COPY) != 0;
    if (!f.context().is_open())
      fail(
          AMPX_ERR_STALE_HANDLE,
          "the file's context was released with ampx_context_release; no tensor can be made in it");
    *out = to_handle(f.load_tensor(f.find(name), copy));
  });
}

}  // extern "C"
