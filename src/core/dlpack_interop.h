// dlpack_interop.h -- tensors to and from DLPack's DLManagedTensor.
#pragma once

#include <dlpack/dlpack.h>

#include "core/tensor.h"

namespace ampx::impl {

// A DLManagedTensor sharing t's memory (data = the allocation, byte_offset
// = a view's offset) that holds a reference to t until its deleter runs.
DLManagedTensor* export_dlpack(DeviceTensor& t);

// A tensor sharing src's memory; it calls src.deleter when destroyed. src
// must be on ctx's device, dense row-major and of a type ampx has; on
// error (DEVICE, NOT_SUPPORTED, DTYPE, SHAPE, INVALID_ARGUMENT) src is
// untouched and still the caller's.
DeviceTensor* import_dlpack(DeviceContext& ctx, DLManagedTensor& src);

}  // namespace ampx::impl
