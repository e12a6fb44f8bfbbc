// convert.cu -- element type conversion between any two ampx dtypes.
//
//   dst[i] = math::convert_value<Dst, Src>(src[i]), i < count
//
// except that a floating value rounds to FP8 with cuda_fp8.h's conversion
// (fp8_cast.cuh), which gives convert.h's bits.
//
// Memory traffic: reads count * sizeof(Src) bytes, writes count * sizeof(Dst)
// bytes; one element per thread per grid-stride iteration, coalesced.
//
// The per-element rounding is kernels/math/convert.h, the very code the CPU
// backend runs, so both backends produce the same bits. Equal types are a
// plain device-to-device copy.
#include <cuda_runtime.h>

#include "fill_convert.cuh"
#include "fp8_cast.cuh"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {
namespace {

template <int Dst, int Src>
__global__ void convert_kernel(math::storage_t<Dst>* __restrict__ dst,
                               const math::storage_t<Src>* __restrict__ src, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if constexpr (math::is_fp8_dtype<Dst> && math::is_floating_dtype<Src>)
      dst[i] = fp8_from_float<Dst>(math::load_float<Src>(src[i]), math::fp8_saturates_by_default<Dst>);
    else
      dst[i] = math::convert_value<Dst, Src>(src[i]);
  }
}

template <int Dst, int Src>
cudaError_t convert_pair(void* dst, const void* src, int64_t count, const LaunchConfig& launch) {
  if constexpr (Dst == Src) {
    if (dst == src) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * sizeof(math::storage_t<Src>),
                           cudaMemcpyDeviceToDevice, launch.stream);
  } else {
    return enqueue(convert_kernel<Dst, Src>, grid_blocks(count, launch), launch,
                   static_cast<math::storage_t<Dst>*>(dst),
                   static_cast<const math::storage_t<Src>*>(src), count);
  }
}

template <int Src>
cudaError_t convert_from(void* dst, DType dst_type, const void* src, int64_t count,
                         const LaunchConfig& launch) {
  switch (dst_type) {
    case DType::F32: return convert_pair<AMPX_F32, Src>(dst, src, count, launch);
    case DType::F16: return convert_pair<AMPX_F16, Src>(dst, src, count, launch);
    case DType::BF16: return convert_pair<AMPX_BF16, Src>(dst, src, count, launch);
    case DType::I32: return convert_pair<AMPX_I32, Src>(dst, src, count, launch);
    case DType::I64: return convert_pair<AMPX_I64, Src>(dst, src, count, launch);
    case DType::F8E4M3: return convert_pair<AMPX_F8E4M3, Src>(dst, src, count, launch);
    case DType::F8E5M2: return convert_pair<AMPX_F8E5M2, Src>(dst, src, count, launch);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_convert(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  switch (src_type) {
    case DType::F32: return convert_from<AMPX_F32>(dst, dst_type, src, count, launch);
    case DType::F16: return convert_from<AMPX_F16>(dst, dst_type, src, count, launch);
    case DType::BF16: return convert_from<AMPX_BF16>(dst, dst_type, src, count, launch);
    case DType::I32: return convert_from<AMPX_I32>(dst, dst_type, src, count, launch);
    case DType::I64: return convert_from<AMPX_I64>(dst, dst_type, src, count, launch);
    case DType::F8E4M3: return convert_from<AMPX_F8E4M3>(dst, dst_type, src, count, launch);
    case DType::F8E5M2: return convert_from<AMPX_F8E5M2>(dst, dst_type, src, count, launch);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace ampx::impl
