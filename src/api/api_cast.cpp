// api_cast.cpp -- the C entry point of the recorded cast (section 11 of
// ampx.h); ampx_tensor_cast, its unrecorded sibling, is in api_tensor.cpp.
#include "api/op_api.h"

using namespace ampx::impl;

ampx_status ampx_cast(ampx_tensor x, ampx_dtype dtype, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    DeviceTensor& t = tensor_arg(x, "x");
    return op_cast(t, dtype_arg(dtype, "dtype"));
  });
}
