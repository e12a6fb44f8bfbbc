// dlpack_interop.cpp -- zero-copy exchange with other frameworks through
// DLPack: the dtype and device mapping, and the checks on imported tensors.
#include "core/dlpack_interop.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"

namespace ampx::impl {
namespace {

// What an exported DLManagedTensor points back to: the tensor it keeps alive
// and the shape/strides arrays DLTensor borrows.
struct ExportedTensor {
  DLManagedTensor managed{};
  DeviceTensor* tensor = nullptr;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// DLPack 1.1's type codes of the two FP8 formats (DLDataTypeCode:
// kDLFloat8_e4m3fn, kDLFloat8_e5m2, with bits 8), defined here because the
// dlpack.h ampx builds against (Debian's 0.6) predates them. A producer of
// any DLPack version writes these numbers into the same DLDataType field.
constexpr uint8_t kDLFloat8E4M3fnCode = 10;
constexpr uint8_t kDLFloat8E5M2Code = 12;

void delete_exported(DLManagedTensor* managed) {
  auto* exported = static_cast<ExportedTensor*>(managed->manager_ctx);
  exported->tensor->release();
  delete exported;
}

DLDataType dlpack_type(DType type) {
  DLDataType t{};
  t.lanes = 1;
  switch (type) {
    case DType::F32: t.code = kDLFloat; t.bits = 32; break;
    case DType::F16: t.code = kDLFloat; t.bits = 16; break;
    case DType::BF16: t.code = kDLBfloat; t.bits = 16; break;
    case DType::I32: t.code = kDLInt; t.bits = 32; break;
    case DType::I64: t.code = kDLInt; t.bits = 64; break;
    case DType::F8E4M3: t.code = kDLFloat8E4M3fnCode; t.bits = 8; break;
    case DType::F8E5M2: t.code = kDLFloat8E5M2Code; t.bits = 8; break;
  }
  return t;
}

DType ampx_type(const DLDataType& t) {
  if (t.lanes != 1)
    fail(AMPX_ERR_DTYPE, "DLPack tensor has ", t.lanes, " lanes; only 1 is supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::F32;
  if (t.code == kDLFloat && t.bits == 16) return DType::F16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
  if (t.code == kDLInt && t.bits == 32) return DType::I32;
  if (t.code == kDLInt && t.bits == 64) return DType::I64;
  if (t.code == kDLFloat8E4M3fnCode && t.bits == 8) return DType::F8E4M3;
  if (t.code == kDLFloat8E5M2Code && t.bits == 8) return DType::F8E5M2;
  fail(AMPX_ERR_DTYPE, "DLPack type code ", static_cast<int>(t.code), " with ",
       static_cast<int>(t.bits), " bits has no ampx_dtype");
}

// A producer may put any integer in the enum's field; loading one outside
// DLDeviceType's enumerators as the enum would be undefined behaviour.
int32_t raw_device_type(const DLDevice& device) {
  static_assert(sizeof device.device_type == sizeof(int32_t), "DLDeviceType is a 32-bit enum");
  int32_t raw = 0;
  std::memcpy(&raw, &device.device_type, sizeof raw);
  return raw;
}

void check_dlpack_device(DeviceContext& ctx, const DLDevice& device) {
  const int32_t index = ctx.backend().device_index();
  const bool on_cpu = ctx.backend().device_type() == AMPX_DEVICE_CPU;
  const int32_t type = raw_device_type(device);
  const bool matches = on_cpu ? type == kDLCPU
                              : (type == kDLCUDA || type == kDLCUDAManaged) &&
                                    device.device_id == index;
  if (!matches)
    fail(AMPX_ERR_DEVICE, "DLPack tensor is on DLPack device type ", type, " id ",
         device.device_id, " but the context is ",
         on_cpu ? std::string("the CPU (kDLCPU)") : cat("CUDA device ", index, " (kDLCUDA)"));
}

void release_imported(void* managed, void*) {
  auto* m = static_cast<DLManagedTensor*>(managed);
  if (m->deleter) m->deleter(m);
}

}  // namespace

DLManagedTensor* export_dlpack(DeviceTensor& t) {
  auto exported = std::make_unique<ExportedTensor>();
  for (int32_t i = 0; i < t.shape.ndim; ++i) {
    exported->shape[i] = t.shape.dims[i];
    exported->strides[i] = t.shape.extent_product(i + 1, t.shape.ndim);
  }
  DLTensor& dl = exported->managed.dl_tensor;
  // As the DLPack spec asks: the allocation's address plus an offset (a
  // consumer that ignored byte_offset would read the base's elements).
  dl.data = t.storage->data();
  dl.device.device_type = t.ctx->backend().device_type() == AMPX_DEVICE_CPU ? kDLCPU : kDLCUDA;
  dl.device.device_id = t.ctx->backend().device_index();
  dl.ndim = t.shape.ndim;
  dl.dtype = dlpack_type(t.dtype);
  dl.shape = exported->shape;
  dl.strides = exported->strides;
  dl.byte_offset = t.byte_offset;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_exported;
  t.retain();
  exported->tensor = &t;
  return &exported.release()->managed;
}

DeviceTensor* import_dlpack(DeviceContext& c, DLManagedTensor& src) {
  const DLTensor& dl = src.dl_tensor;
  check_dlpack_device(c, dl.device);
  const DType type = ampx_type(dl.dtype);
  const Shape shape = make_shape(dl.ndim, dl.shape, type);
  if (dl.strides && shape.numel() > 0) {
    // Row-major compact; the stride of an extent-1 dimension is irrelevant,
    // and so are all strides of a tensor without elements.
    int64_t expected = 1;
    for (int32_t i = dl.ndim - 1; i >= 0; --i) {
      if (shape.dims[i] != 1 && dl.strides[i] != expected)
        fail(AMPX_ERR_NOT_SUPPORTED, "DLPack tensor is not dense row-major: stride[", i, "] is ",
             dl.strides[i], ", expected ", expected, " (copy it to a contiguous tensor first)");
      expected *= shape.dims[i];
    }
  }
  // No offset is applied to a NULL pointer (undefined behaviour): an empty
  // tensor may come without memory.
  void* data = dl.data ? static_cast<char*>(dl.data) + dl.byte_offset : nullptr;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(type);
  if (bytes > 0) {
    if (dl.data == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "src->dl_tensor.data is NULL");
    if (reinterpret_cast<uintptr_t>(data) % dtype_size(type) != 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "DLPack data + byte_offset (", data,
           ") is not aligned to the element size ", dtype_size(type));
    c.backend().check_device_pointer(data, "DLPack data");
  }
  auto storage = Storage::external(c, data, bytes);
  DeviceTensor* t = DeviceTensor::create(c, type, shape, storage);
  storage->set_release(release_imported, &src);
  return t;
}

}  // namespace ampx::impl
