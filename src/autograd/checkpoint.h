// checkpoint.h -- gradient checkpointing: run a segment without keeping its
// inner activations, and recompute it during backward.
#pragma once

#include <vector>

#include "ampx/ampx.h"
#include "core/tensor.h"

namespace ampx {

// Runs fn(user_data, inputs, outputs) with recording off, inside its own
// scope (its intermediates are freed at once), and records one node that
// recomputes the segment with recording on when the backward pass reaches
// it. Returns the outputs, one reference each.
std::vector<TensorRef> checkpoint(Context& ctx, ampx_segment_fn fn, void* user_data,
                                  const std::vector<Tensor*>& inputs, size_t output_count);

}  // namespace ampx
