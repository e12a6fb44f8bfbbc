// api_dlpack.cpp -- zero-copy exchange with other frameworks through DLPack.
#include "api/guard.h"
#include "core/dlpack_interop.h"

using namespace ampx::impl;

extern "C" {

ampx_status ampx_tensor_to_dlpack(ampx_tensor tensor, struct DLManagedTensor** out) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(out, "out");
    *out = export_dlpack(t);
  });
}

ampx_status ampx_tensor_from_dlpack(ampx_context ctx, struct DLManagedTensor* src,
                                    ampx_tensor* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(src, "src");
    require_pointer(out, "out");
    *out = to_handle(import_dlpack(c, *src));
  });
}

}  // extern "C"
