// backend.cpp -- the defaults of the optional primitives: a clear refusal.
#include "core/backend.h"

#include "core/error.h"

namespace ampx {
namespace {

[[noreturn]] void not_ported(const Backend& backend, const char* primitive) {
  fail(AMPX_ERR_NOT_SUPPORTED, primitive, " is not implemented on the ",
       backend.device_type() == AMPX_DEVICE_CPU ? "CPU" : "CUDA", " backend yet");
}

}  // namespace

void Backend::unary(UnaryOp, const void*, void*, DType, int64_t) { not_ported(*this, "unary"); }
void Backend::unary_backward(UnaryOp, const void*, const void*, void*, DType, int64_t) {
  not_ported(*this, "unary_backward");
}
void Backend::binary(BinaryOp, const void*, const void*, void*, DType, int64_t, int64_t) {
  not_ported(*this, "binary");
}
void Backend::affine(const void*, void*, DType, int64_t, float, float) { not_ported(*this, "affine"); }
void Backend::add_into(void*, DType, const void*, DType, int64_t) { not_ported(*this, "add_into"); }
void Backend::sum_rows(const void*, DType, int64_t, int64_t, void*, DType) {
  not_ported(*this, "sum_rows");
}
void Backend::sum_all(const void*, DType, int64_t, float*) { not_ported(*this, "sum_all"); }
void Backend::softmax(const void*, void*, DType, int64_t, int64_t, bool) {
  not_ported(*this, "softmax");
}
void Backend::softmax_backward(const void*, const void*, void*, DType, int64_t, int64_t, bool) {
  not_ported(*this, "softmax_backward");
}
void Backend::cross_entropy(const void*, DType, const void*, DType, int64_t, int64_t, int64_t,
                            float*) {
  not_ported(*this, "cross_entropy");
}
void Backend::cross_entropy_backward(const void*, DType, const void*, DType, int64_t, int64_t,
                                     int64_t, const float*, float, void*) {
  not_ported(*this, "cross_entropy_backward");
}
void Backend::gemm(const GemmArgs&) { not_ported(*this, "gemm"); }

}  // namespace ampx
