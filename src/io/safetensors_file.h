// safetensors_file.h -- safetensors files (section 16 of ampx.h): writing
// named tensors atomically, and an opened file whose tensors load into
// existing tensors or become new ones -- on the CPU without a copy, as
// tensors on the file's memory mapping.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors_header.h"

namespace ampx::impl::io {

// Writes `tensors` under `names` (same length; unique, non-empty, not
// "__metadata__") with string `metadata` to `path`, replacing it atomically:
// a failure leaves the old file and no temporary. Tensors are laid out by
// decreasing element size, then by name, as the format's reference writer
// does, so every tensor is aligned in a mapped file.
void save_safetensors(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                      const std::vector<std::string>& names,
                      const std::vector<std::pair<std::string, std::string>>& metadata);

// A whole file mapped copy-on-write: tensors on it may be written (their
// pages become the process's own; the file never changes).
class FileMapping;

// An opened, validated safetensors file. It keeps its context alive; the
// tensors it makes keep the mapping alive, not the file object.
class SafetensorsFile : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d535446ull;  // "AMPX-STF"
  static constexpr uint64_t kDeadMagic = 0x646561642d737466ull;  // "dead-stf"

  // Maps `path` and validates its whole header before returning.
  static SafetensorsFile* open(DeviceContext& ctx, const std::string& path);
  void release();

  const SafetensorsHeader& header() const { return header_; }
  // The entry named `name`; INVALID_ARGUMENT when the file has none.
  size_t find(const std::string& name) const;
  // Copies entries `names[i]` into `tensors[i]` after checking every one:
  // same shape, and the same dtype unless `convert`. Nothing changes when it
  // throws before the copies (a device failure during them is the exception).
  void load_into(const std::vector<std::string>& names, const std::vector<DeviceTensor*>& tensors,
                 bool convert) const;
  // A new tensor of the file's context holding entry `index`, named after
  // it: on the CPU a tensor on the mapping when its data is aligned to its
  // element size and `copy` is false, else a copy.
  DeviceTensor* load_tensor(size_t index, bool copy) const;

  DeviceContext& context() const { return *ctx_; }

 private:
  SafetensorsFile(DeviceContext& ctx, std::shared_ptr<FileMapping> mapping,
                  SafetensorsHeader header);
  static void destroy_shell(Object* shell);

  const unsigned char* data_of(const SafetensorsEntry& e) const;
  // The entry's data as a tensor of `ctx` without a copy, or null when the
  // context is not the CPU's or the data is not aligned.
  DeviceTensor* map_entry(DeviceContext& ctx, const SafetensorsEntry& e) const;

  DeviceContext* ctx_;
  std::shared_ptr<FileMapping> mapping_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace ampx::impl::io
