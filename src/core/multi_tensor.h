// multi_tensor.h -- how a multi-tensor operation is cut into work, on the
// host, for every backend.
//
// A multi-tensor primitive (backend.h) processes a whole list of tensors in
// one pass. Its work is a list of chunks -- a stretch of at most chunk_size
// elements of one tensor -- that threads (CPU) or thread blocks (CUDA) take
// independently. A CUDA kernel receives its chunks in an argument block of
// fixed capacity, so a long list is launched several times; plan_launches
// says which chunks and tensors go into each launch.
//
// Plain C++ with no device code, so the CPU unit tests cover it for both
// backends. (The primitives' argument checks are their front doors, in
// backend_amp.cpp.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend_amp.h"

namespace ampx::impl {

// Elements [begin, end) of tensor number `tensor` of the list.
struct Chunk {
  int64_t tensor;
  int64_t begin;
  int64_t end;
};

// The chunks of a list of tensors of counts[i] elements: every element of
// every tensor exactly once, tensor by tensor and in increasing offsets, each
// chunk chunk_size long except a tensor's last one, which may be shorter.
// Zero-size tensors have no chunk. Throws AMPX_ERR_INTERNAL when chunk_size
// is below 1 or a count is negative.
std::vector<Chunk> plan_chunks(const std::vector<int64_t>& counts, int64_t chunk_size);

// A chunk inside a launch: `slot` indexes the launch's tensor list.
struct LaunchChunk {
  int32_t slot;
  int64_t begin;
  int64_t end;
};

// One kernel launch: the tensors whose addresses its argument block carries
// and the chunks it processes.
struct PlannedLaunch {
  std::vector<int64_t> tensors;     // indices into the operation's list, in order
  std::vector<LaunchChunk> chunks;  // in plan order
};

// Groups a plan's chunks, in order, into launches of at most max_chunks
// chunks and max_tensors tensors each. A launch ends only when the next chunk
// would exceed one of the limits; a tensor split between two launches
// appears in both. Throws AMPX_ERR_INTERNAL when a limit is below 1.
std::vector<PlannedLaunch> plan_launches(const std::vector<Chunk>& chunks, int max_chunks,
                                         int max_tensors);

// The element counts of a list, for plan_chunks.
std::vector<int64_t> element_counts(const std::vector<TensorSpan>& tensors);
std::vector<int64_t> element_counts(const std::vector<OptimParam>& params);

}  // namespace ampx::impl
