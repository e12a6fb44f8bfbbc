// safetensors_file.cpp -- saving tensors as a safetensors file, and the
// opened file: a copy-on-write mapping of the whole file, its validated
// header, and the loads from it.
#include "io/safetensors_file.h"

#include <algorithm>
#include <set>

#include "core/checked_math.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "platform/platform.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian, and tensors are written and mapped as they lie in memory"
#endif

namespace ampx::impl::io {

// A FIFO or device is refused without blocking (platform::MappedFile).
class FileMapping : public platform::MappedFile {
 public:
  static std::shared_ptr<FileMapping> open(const std::string& path) {
    return std::make_shared<FileMapping>(path);
  }
  explicit FileMapping(const std::string& path) : platform::MappedFile(path) {}
};

namespace {

// What a tensor on the mapping holds: one reference to the mapping, dropped
// by the tensor's storage when its last user is gone.
void drop_mapping(void* reference, void*) {
  delete static_cast<std::shared_ptr<FileMapping>*>(reference);
}

std::string quoted(const std::string& name) { return cat("'", name, "'"); }

void check_names(const std::vector<std::string>& names) {
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) fail(AMPX_ERR_INVALID_ARGUMENT, "tensor ", i, " has no name");
    if (names[i] == "__metadata__")
      fail(AMPX_ERR_INVALID_ARGUMENT, "tensor ", i,
           " is named '__metadata__', the key the format keeps for metadata");
    if (!seen.insert(names[i]).second)
      fail(AMPX_ERR_INVALID_ARGUMENT, "tensor ", i, " is named ", quoted(names[i]),
           " like an earlier one; names in a file are unique");
  }
}

void check_metadata(const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::set<std::string> seen;
  for (const auto& [key, value] : metadata)
    if (!seen.insert(key).second)
      fail(AMPX_ERR_INVALID_ARGUMENT, "metadata key ", quoted(key), " is given twice");
}

// Writes a tensor's bytes, copying device memory through a host buffer a
// piece at a time so a CUDA tensor needs no host copy of its own.
void write_tensor_data(AtomicFile& file, const DeviceTensor& t,
                       std::vector<unsigned char>& buffer) {
  const auto* src = static_cast<const unsigned char*>(t.data());
  size_t left = t.nbytes();
  if (t.ctx->backend().device_type() == AMPX_DEVICE_CPU) {
    file.write(src, left);
    return;
  }
  while (left > 0) {
    const size_t n = std::min(left, buffer.size());
    t.ctx->read_to_host(buffer.data(), src, n);
    file.write(buffer.data(), n);
    src += n;
    left -= n;
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                      const std::vector<std::string>& names,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  check_names(names);
  check_metadata(metadata);
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t size_a = dtype_size(tensors[a]->dtype), size_b = dtype_size(tensors[b]->dtype);
    return size_a != size_b ? size_a > size_b : names[a] < names[b];
  });
  std::vector<SafetensorsRecord> records;
  records.reserve(order.size());
  // Each tensor's bytes fit in int64, their sum need not (views of one
  // base, each as large as it): a file's offsets stay within int64, where
  // readers (and off_t) can hold them.
  int64_t offset = 0;
  for (size_t i : order) {
    const DeviceTensor& t = *tensors[i];
    const int64_t end = checked_add(offset, static_cast<int64_t>(t.nbytes()),
                                    "the data offset of tensor '", names[i], "'");
    records.push_back({names[i], t.dtype, t.shape, static_cast<uint64_t>(offset),
                       static_cast<uint64_t>(end)});
    offset = end;
  }
  // Everything that can fail for a reason other than the disk happens
  // before the temporary file exists.
  const std::string header = safetensors_header_json(records, metadata);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(uint64_t{header.size()} >> (8 * i));
  std::vector<unsigned char> buffer(size_t{1} << 16);

  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(reinterpret_cast<const unsigned char*>(header.data()), header.size());
  for (size_t i : order) write_tensor_data(file, *tensors[i], buffer);
  file.commit();
}

SafetensorsFile::SafetensorsFile(DeviceContext& ctx, std::shared_ptr<FileMapping> mapping,
                                 SafetensorsHeader header)
    : Object(kLiveMagic, &SafetensorsFile::destroy_shell),
      ctx_(&ctx),
      mapping_(std::move(mapping)),
      header_(std::move(header)) {
  index_.reserve(header_.entries.size());
  for (size_t i = 0; i < header_.entries.size(); ++i) index_.emplace(header_.entries[i].name, i);
}

void SafetensorsFile::destroy_shell(Object* shell) { delete static_cast<SafetensorsFile*>(shell); }

SafetensorsFile* SafetensorsFile::open(DeviceContext& ctx, const std::string& path) {
  std::shared_ptr<FileMapping> mapping = FileMapping::open(path);
  SafetensorsHeader header = parse_safetensors_header(mapping->data(), mapping->size(), path);
  auto* file = new SafetensorsFile(ctx, std::move(mapping), std::move(header));
  ctx.retain();
  return file;
}

void SafetensorsFile::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  mapping_.reset();
  header_ = SafetensorsHeader{};
  index_.clear();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

size_t SafetensorsFile::find(const std::string& name) const {
  const auto at = index_.find(name);
  if (at == index_.end())
    fail(AMPX_ERR_INVALID_ARGUMENT, "the file has no tensor named ", quoted(name), " (it has ",
         header_.entries.size(), " tensor(s))");
  return at->second;
}

const unsigned char* SafetensorsFile::data_of(const SafetensorsEntry& e) const {
  return mapping_->data() + header_.data_start + e.begin;
}

DeviceTensor* SafetensorsFile::map_entry(DeviceContext& ctx, const SafetensorsEntry& e) const {
  if (ctx.backend().device_type() != AMPX_DEVICE_CPU) return nullptr;
  unsigned char* data = mapping_->data() + header_.data_start + e.begin;
  if (reinterpret_cast<uintptr_t>(data) % e.element_size != 0) return nullptr;
  const size_t bytes = static_cast<size_t>(e.end - e.begin);
  if (bytes == 0) return DeviceTensor::empty(ctx, e.dtype, e.shape);
  auto* reference = new std::shared_ptr<FileMapping>(mapping_);
  try {
    return wrap_memory(ctx, e.dtype, e.shape, data, bytes, &drop_mapping, reference);
  } catch (...) {
    delete reference;
    throw;
  }
}

void SafetensorsFile::load_into(const std::vector<std::string>& names,
                                const std::vector<DeviceTensor*>& tensors, bool convert) const {
  std::vector<const SafetensorsEntry*> sources(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsEntry& e = header_.entries[find(names[i])];
    const DeviceTensor& t = *tensors[i];
    const std::string label = cat("tensors[", i, "] (", quoted(names[i]), ", ", t.describe(), ")");
    if (!e.has_dtype)
      fail(AMPX_ERR_DTYPE, label, ": the file holds it as ", e.dtype_name, e.shape.str(),
           ", a type ampx does not have");
    if (!(e.shape == t.shape))
      fail(AMPX_ERR_SHAPE, label, ": the file holds it with shape ", e.shape.str());
    if (e.dtype != t.dtype && !convert)
      fail(AMPX_ERR_DTYPE, label, ": the file holds it as ", e.dtype_name,
           " (pass AMPX_SAFETENSORS_CONVERT to convert)");
    sources[i] = &e;
  }
  // Tensors to convert go through a tensor of the file's type on the
  // target's context; all are made before the first target is written, so
  // running out of memory changes nothing.
  std::vector<TensorRef> staged(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsEntry& e = *sources[i];
    DeviceTensor& t = *tensors[i];
    if (e.dtype == t.dtype || t.numel() == 0) continue;
    staged[i] = TensorRef(map_entry(*t.ctx, e));
    if (!staged[i])
      staged[i] =
          TensorRef(tensor_from_host(*t.ctx, e.dtype, e.shape, data_of(e), e.end - e.begin));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    DeviceTensor& t = *tensors[i];
    if (staged[i])
      copy_converting(t, *staged[i]);
    else
      copy_tensor_from_host(t, data_of(*sources[i]), t.nbytes());
  }
}

DeviceTensor* SafetensorsFile::load_tensor(size_t index, bool copy) const {
  const SafetensorsEntry& e = header_.entries[index];
  if (!e.has_dtype)
    fail(AMPX_ERR_DTYPE, "tensor ", quoted(e.name), " is ", e.dtype_name, e.shape.str(),
         ", a type ampx does not have");
  TensorRef t(copy ? nullptr : map_entry(*ctx_, e));
  if (!t) t = TensorRef(tensor_from_host(*ctx_, e.dtype, e.shape, data_of(e), e.end - e.begin));
  t->name = e.name;
  return t.take();
}

}  // namespace ampx::impl::io
