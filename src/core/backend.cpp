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
void Backend::layer_norm(const void*, const void*, const void*, DType, int64_t, int64_t, float,
                         void*, float*, float*) {
  not_ported(*this, "layer_norm");
}
void Backend::layer_norm_backward(const void*, const void*, const void*, DType, int64_t, int64_t,
                                  const float*, const float*, void*, void*, void*) {
  not_ported(*this, "layer_norm_backward");
}
void Backend::batch_norm_stats(const void*, DType, int64_t, int64_t, int64_t, float, float*,
                               float*, float*, float*) {
  not_ported(*this, "batch_norm_stats");
}
void Backend::batch_norm(const void*, DType, int64_t, int64_t, int64_t, const float*, const float*,
                         const float*, const float*, float, void*) {
  not_ported(*this, "batch_norm");
}
void Backend::batch_norm_backward(const void*, const void*, DType, int64_t, int64_t, int64_t,
                                  const float*, const float*, const float*, float, bool, void*,
                                  float*, float*) {
  not_ported(*this, "batch_norm_backward");
}
void Backend::gather_rows(const void*, size_t, int64_t, const void*, DType, int64_t, void*) {
  not_ported(*this, "gather_rows");
}
void Backend::scatter_add_rows(const void*, DType, int64_t, const void*, DType, int64_t, float*,
                               int64_t) {
  not_ported(*this, "scatter_add_rows");
}
void Backend::copy_strided(void*, const void*, size_t, const StridedCopy&) {
  not_ported(*this, "copy_strided");
}
void Backend::dropout(const void*, void*, DType, int64_t, uint64_t, uint64_t, uint32_t, float) {
  not_ported(*this, "dropout");
}
void Backend::bce_with_logits(const void*, const void*, DType, int64_t, float*) {
  not_ported(*this, "bce_with_logits");
}
void Backend::check_indices(const void*, DType, int64_t, const IndexCheck&, float*, int64_t*) {
  not_ported(*this, "check_indices");
}

}  // namespace ampx
