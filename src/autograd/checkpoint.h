// checkpoint.h -- gradient checkpointing: run a segment without keeping its
// inner activations, and recompute it during backward.
#pragma once

#include <vector>

#include "ampx/ampx.h"
#include "core/tensor.h"

namespace ampx::impl {

// The program's segment together with the promise made in ampx.h: its
// release hook runs exactly once, when this object (or the one it was
// moved into, the recompute record) is destroyed.
class Segment {
 public:
  Segment(ampx_segment_fn fn, void* user_data, void (*release)(void*)) noexcept
      : fn(fn), user_data(user_data), release_(release) {}
  Segment(Segment&& other) noexcept
      : fn(other.fn), user_data(other.user_data), release_(other.release_) {
    other.release_ = nullptr;
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment& operator=(Segment&&) = delete;
  ~Segment() {
    if (release_) release_(user_data);
  }

  ampx_segment_fn fn;
  void* user_data;

 private:
  void (*release_)(void*);
};

// Runs segment.fn(user_data, inputs, outputs) with recording off, inside
// its own scope (its intermediates are freed at once), and records one node
// that recomputes the segment with recording on when the backward pass
// reaches it; the node then owns `segment`. Returns the outputs, one
// reference each.
std::vector<TensorRef> checkpoint(DeviceContext& ctx, Segment segment,
                                  const std::vector<DeviceTensor*>& inputs, size_t output_count);

}  // namespace ampx::impl
