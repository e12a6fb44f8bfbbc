// backend.cpp -- the core's front doors and the refusal of a missing
// capability.
#include "core/backend.h"

#include "core/error.h"

namespace ampx::impl {

ScratchBuffer::ScratchBuffer(Allocator& memory, size_t bytes, const char* primitive)
    : memory_(memory), bytes_(bytes) {
  if (bytes == 0) return;
  ptr_ = memory_.allocate(bytes);
  if (ptr_ == nullptr)
    fail(AMPX_ERR_OUT_OF_MEMORY, primitive, ": no device memory for ", bytes, " bytes of scratch");
}

namespace {

// "f32 to bf16", ...: conversions between two floating types, one name
// each; the rest share one.
const char* convert_name(DType to, DType from) {
  static const char* const names[3][3] = {{"f32 to f32", "f32 to f16", "f32 to bf16"},
                                          {"f16 to f32", "f16 to f16", "f16 to bf16"},
                                          {"bf16 to f32", "bf16 to f16", "bf16 to bf16"}};
  auto index = [](DType t) {
    return t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::BF16 ? 2 : -1;
  };
  const int a = index(from), b = index(to);
  return a < 0 || b < 0 ? "other types" : names[a][b];
}

}  // namespace

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::MultiTensorAmp:
      return "multi-tensor AMP primitives";
    case Capability::Nn:
      return "nn primitives";
    case Capability::Gemm:
      return "GEMM";
    case Capability::Fp8Gemm:
      return "FP8 GEMM";
    case Capability::Convolution:
      return "convolution";
    case Capability::Pooling:
      return "pooling";
    case Capability::Attention:
      return "attention";
    case Capability::GradStats:
      return "gradient statistics";
    case Capability::Fp8:
      return "FP8 quantization";
    case Capability::Count:
      break;
  }
  return "an unknown capability";
}

void Backend::refuse(const char* op, Capability capability) const {
  const std::string& why = missing_why_[static_cast<int>(capability)];
  fail(AMPX_ERR_NOT_SUPPORTED, op, " needs the ", capability_name(capability), ", which the ",
       name(), " backend does not provide", why.empty() ? "" : ": ", why);
}

void Backend::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  const ProfileScope timed(profile(), "copy_from_host");
  if (bytes > 0) run_copy_from_host(dst, host_src, bytes);
}

void Backend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  const ProfileScope timed(profile(), "copy_to_host");
  if (bytes > 0) run_copy_to_host(host_dst, src, bytes);
}

void Backend::copy(void* dst, const void* src, size_t bytes) {
  const ProfileScope timed(profile(), "copy");
  if (bytes > 0 && dst != src) run_copy(dst, src, bytes);
}

void Backend::fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) {
  const ProfileScope timed(profile(), "fill");
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
    fail(AMPX_ERR_INTERNAL, "fill: element size ", elem_size, " is not 1, 2, 4 or 8");
  if (count > 0) run_fill(dst, elem_size, pattern, count);
}

void Backend::convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count) {
  const ProfileScope timed(profile(), "convert", convert_name(dst_type, src_type));
  if (count > 0) run_convert(dst, dst_type, src, src_type, count);
}

}  // namespace ampx::impl
