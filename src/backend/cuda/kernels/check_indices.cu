// check_indices.cu -- class labels and embedding indices checked on the
// device, so that cross_entropy and embedding need no round trip to the
// host (Backend::check_indices):
//
//   valid  = #{ i : !(has_ignore && idx[i] == ignore_index) }     (as F32)
//   first  = min { i : idx[i] not ignored and outside [0, limit) }
//   record = {first, idx[first], limit, op, call} if first exists and
//            record[kRecordPosition] == -1 (an earlier finding is kept)
//
// Memory traffic: reads the indices once. Each block reduces its count and
// its smallest bad position and adds them with one 64-bit atomic each into
// two words of scratch; integer sums and minima do not depend on the order
// the atomics land, so the result is the same on every run. A one-thread
// kernel then writes *valid and the record (the clearing and finishing
// kernels are launched as one block, whose thread 0 alone works).
#include <cuda_runtime.h>

#include <cstdint>

#include "multi_tensor.cuh"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr unsigned long long kNone = ~0ull;

// The scratch words: [0] the count, [1] the smallest bad position.
__global__ void clear_kernel(unsigned long long* sums) {
  if (threadIdx.x != 0) return;
  sums[0] = 0;
  sums[1] = kNone;
}

template <class Index>
__global__ void __launch_bounds__(kBlockThreads)
    scan_kernel(const Index* idx, int64_t count, IndexCheck check, unsigned long long* sums) {
  unsigned long long counted = 0;
  unsigned long long first = kNone;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += step) {
    const int64_t v = idx[i];
    if (check.has_ignore && v == check.ignore_index) continue;
    ++counted;
    if ((v < 0 || v >= check.limit) && static_cast<unsigned long long>(i) < first)
      first = static_cast<unsigned long long>(i);
  }
  counted = block_reduce(counted, [](unsigned long long a, unsigned long long b) { return a + b; });
  first = block_reduce(first, [](unsigned long long a, unsigned long long b) { return a < b ? a : b; });
  if (threadIdx.x != 0) return;
  if (counted != 0) atomicAdd(&sums[0], counted);
  if (first != kNone) atomicMin(&sums[1], first);
}

template <class Index>
__global__ void finish_kernel(const Index* idx, IndexCheck check,
                              const unsigned long long* sums, float* valid, int64_t* record) {
  if (threadIdx.x != 0) return;
  if (valid) *valid = static_cast<float>(sums[0]);
  const unsigned long long first = sums[1];
  if (first == kNone || record[kRecordPosition] != -1) return;
  record[kRecordPosition] = static_cast<int64_t>(first);
  record[kRecordValue] = idx[first];
  record[kRecordLimit] = check.limit;
  record[kRecordOp] = check.op;
  record[kRecordCall] = check.call;
}

template <class Index>
cudaError_t check_typed(const Index* idx, int64_t count, const IndexCheck& check, float* valid,
                        int64_t* record, unsigned long long* sums, const LaunchConfig& launch) {
  const LaunchConfig one{launch.stream, 1};
  cudaError_t status = enqueue(clear_kernel, 1, one, sums);
  if (status != cudaSuccess) return status;
  if (count > 0) {
    status = enqueue(scan_kernel<Index>, grid_blocks(count, launch), launch, idx, count, check, sums);
    if (status != cudaSuccess) return status;
  }
  return enqueue(finish_kernel<Index>, 1, one, idx, check, static_cast<const unsigned long long*>(sums),
                 valid, record);
}

}  // namespace

size_t check_indices_scratch_bytes() { return 2 * sizeof(unsigned long long); }

cudaError_t launch_check_indices(const void* indices, DType type, int64_t count,
                                 const IndexCheck& check, float* valid, int64_t* record,
                                 void* scratch, const LaunchConfig& launch) {
  auto* sums = static_cast<unsigned long long*>(scratch);
  if (type == DType::I32)
    return check_typed(static_cast<const int32_t*>(indices), count, check, valid, record, sums,
                       launch);
  if (type == DType::I64)
    return check_typed(static_cast<const int64_t*>(indices), count, check, valid, record, sums,
                       launch);
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace ampx::impl
