// lost_updates.cu -- counts, around one optimizer step, the updates a
// 16-bit parameter did not take (the precision doctor's lost updates).
//
//   for each element whose fp32 master changed (m != m_before):
//     master_changed      += 1
//     lost_updates        += p == p_before           (bits of the 16-bit value)
//     lost_without_master += store<P>(p_before + (m - m_before)) == p_before
//
// Memory traffic: reads the parameter before and after (2 * 2 bytes) and
// the master before and after (2 * 4 bytes) per element; one 64-bit atomic
// per count per block of 32Ki elements.
#include <cuda_runtime.h>

#include "grad_stats_ops.cuh"
#include "math/convert.h"
#include "multi_tensor.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

// Slot arrays: ptr[0] = parameter, ptr[1] = parameter before, ptr[2] =
// master, ptr[3] = master before; tensor_info = the record index.
template <int P>
__global__ void __launch_bounds__(kBlockThreads)
    lost_updates_kernel(const __grid_constant__ TensorListArgs<4> args,
                        math::GradStatsRecord* records) {
  const BlockChunk c = block_chunk(args);
  const auto* p = static_cast<const uint16_t*>(args.ptr[0][c.slot]);
  const auto* before = static_cast<const uint16_t*>(args.ptr[1][c.slot]);
  const auto* m = static_cast<const float*>(args.ptr[2][c.slot]);
  const auto* m_before = static_cast<const float*>(args.ptr[3][c.slot]);
  int changed = 0, lost = 0, lost_direct = 0;
  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kBlockThreads) {
    const float now = m[j];
    const float was = m_before[j];
    if (now == was) continue;
    ++changed;
    const uint16_t b = before[j];
    lost += p[j] == b;
    lost_direct += math::store_float<P>(math::load_float<P>(b) + (now - was)) == b;
  }
  const auto sum = [](int a, int b) { return a + b; };
  changed = block_reduce(changed, sum);
  lost = block_reduce(lost, sum);
  lost_direct = block_reduce(lost_direct, sum);
  if (threadIdx.x != 0 || changed == 0) return;
  math::GradStatsRecord& r = records[args.tensor_info[c.slot]];
  const auto add = [](int64_t* into, int value) {
    if (value != 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(into),
                static_cast<unsigned long long>(value));
  };
  add(&r.master_changed, changed);
  add(&r.lost_updates, lost);
  add(&r.lost_without_master, lost_direct);
}

}  // namespace

cudaError_t launch_count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                                      math::GradStatsRecord* records, const LaunchConfig& launch) {
  std::vector<DType> types;
  std::vector<int64_t> counts;
  for (const LostUpdateSpan& s : spans) {
    types.push_back(s.param_dtype);
    counts.push_back(s.count);
  }
  for (const DtypeGroup& group : group_by_dtypes(types, types, counts)) {
    const auto run = [&](auto kernel) {
      return launch_group<4>(
          group,
          [&](TensorListArgs<4>& args, int slot, int64_t i) {
            const LostUpdateSpan& s = spans[static_cast<size_t>(i)];
            args.ptr[0][slot] = const_cast<void*>(s.param);
            args.ptr[1][slot] = const_cast<void*>(s.param_before);
            args.ptr[2][slot] = const_cast<float*>(s.master);
            args.ptr[3][slot] = const_cast<float*>(s.master_before);
            args.tensor_info[slot] = s.record;
          },
          [&](const TensorListArgs<4>& args, unsigned int blocks, int64_t) {
            return enqueue(kernel, blocks, launch, args, records);
          });
    };
    const cudaError_t status = group.first == DType::F16 ? run(lost_updates_kernel<AMPX_F16>)
                                                         : run(lost_updates_kernel<AMPX_BF16>);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
