#include "core/multi_tensor.h"

#include <algorithm>

#include "core/error.h"

namespace ampx {

std::vector<Chunk> plan_chunks(const std::vector<int64_t>& counts, int64_t chunk_size) {
  if (chunk_size < 1) fail(AMPX_ERR_INTERNAL, "plan_chunks: chunk_size is ", chunk_size);
  size_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0)
      fail(AMPX_ERR_INTERNAL, "plan_chunks: tensor ", i, " has ", counts[i], " elements");
    // Written so that no intermediate can pass INT64_MAX.
    total += static_cast<size_t>(counts[i] / chunk_size + (counts[i] % chunk_size != 0));
  }
  std::vector<Chunk> chunks;
  chunks.reserve(total);
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t count = counts[i];
    for (int64_t begin = 0; begin < count;) {
      const int64_t end = begin + std::min(chunk_size, count - begin);
      chunks.push_back({static_cast<int64_t>(i), begin, end});
      begin = end;
    }
  }
  return chunks;
}

std::vector<Launch> plan_launches(const std::vector<Chunk>& chunks, int max_chunks,
                                  int max_tensors) {
  if (max_chunks < 1 || max_tensors < 1)
    fail(AMPX_ERR_INTERNAL, "plan_launches: max_chunks is ", max_chunks, " and max_tensors is ",
         max_tensors, "; both must be at least 1");
  std::vector<Launch> launches;
  for (const Chunk& chunk : chunks) {
    bool new_tensor = launches.empty() || launches.back().tensors.back() != chunk.tensor;
    if (launches.empty() || launches.back().chunks.size() == static_cast<size_t>(max_chunks) ||
        (new_tensor && launches.back().tensors.size() == static_cast<size_t>(max_tensors))) {
      launches.emplace_back();
      new_tensor = true;
    }
    Launch& launch = launches.back();
    if (new_tensor) launch.tensors.push_back(chunk.tensor);
    launch.chunks.push_back(
        {static_cast<int32_t>(launch.tensors.size() - 1), chunk.begin, chunk.end});
  }
  return launches;
}

std::vector<int64_t> element_counts(const std::vector<TensorSpan>& tensors) {
  std::vector<int64_t> counts;
  counts.reserve(tensors.size());
  for (const TensorSpan& t : tensors) counts.push_back(t.count);
  return counts;
}

std::vector<int64_t> element_counts(const std::vector<OptimParam>& params) {
  std::vector<int64_t> counts;
  counts.reserve(params.size());
  for (const OptimParam& p : params) counts.push_back(p.count);
  return counts;
}

void check_float_tensors(const char* primitive, const std::vector<TensorSpan>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpan& t = tensors[i];
    if (!is_floating(t.dtype))
      fail(AMPX_ERR_DTYPE, primitive, ": tensor ", i, " is ", dtype_name(t.dtype),
           "; only f32, f16 and bf16 are accepted");
    if (t.count < 0) fail(AMPX_ERR_SHAPE, primitive, ": tensor ", i, " has ", t.count, " elements");
    if (t.count > 0 && t.data == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": tensor ", i, " has ", t.count,
           " elements and no data");
  }
}

void check_scale_args(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                      const float* factor) {
  check_float_tensors("multi_tensor_scale (input)", ins);
  check_float_tensors("multi_tensor_scale (output)", outs);
  if (factor == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "multi_tensor_scale: factor is null");
  if (outs.empty()) return;
  if (outs.size() != ins.size())
    fail(AMPX_ERR_SHAPE, "multi_tensor_scale: ", ins.size(), " inputs but ", outs.size(),
         " outputs");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (outs[i].count != ins[i].count)
      fail(AMPX_ERR_SHAPE, "multi_tensor_scale: input ", i, " has ", ins[i].count,
           " elements but its output ", outs[i].count);
    if (outs[i].data == ins[i].data && ins[i].count > 0 && outs[i].dtype != ins[i].dtype)
      fail(AMPX_ERR_DTYPE, "multi_tensor_scale: output ", i, " is its input but ",
           dtype_name(outs[i].dtype), " instead of ", dtype_name(ins[i].dtype));
  }
}

namespace {

void check_scalars(const char* primitive, const StepScalars& scalars) {
  if (scalars.lr == nullptr || scalars.weight_decay == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": lr and weight_decay must both be given");
}

// The checks every optimizer applies; needs_state[s] says that the
// configuration reads state<s>, which must then be present.
void check_params(const char* primitive, const std::vector<OptimParam>& params,
                  const bool (&needs_state)[3]) {
  for (size_t i = 0; i < params.size(); ++i) {
    const OptimParam& p = params[i];
    if (!is_floating(p.param_dtype) || !is_floating(p.grad_dtype))
      fail(AMPX_ERR_DTYPE, primitive, ": parameter ", i, " is ", dtype_name(p.param_dtype),
           " with a ", dtype_name(p.grad_dtype), " gradient; only f32, f16 and bf16 are accepted");
    if (p.count < 0)
      fail(AMPX_ERR_SHAPE, primitive, ": parameter ", i, " has ", p.count, " elements");
    if (p.group < 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has group ", p.group);
    if (p.step == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has no step counter");
    if ((p.master != nullptr) != (p.param_dtype != DType::F32))
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " is ",
           dtype_name(p.param_dtype), p.master ? " and has" : " and has no",
           " fp32 master (f16 and bf16 parameters need one, f32 parameters are their own)");
    if (p.count == 0) continue;
    if (p.param == nullptr || p.grad == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " lacks its data or gradient");
    float* const state[3] = {p.state0, p.state1, p.state2};
    for (int s = 0; s < 3; ++s)
      if (needs_state[s] && state[s] == nullptr)
        fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has no state", s,
             " buffer, which this configuration uses");
  }
}

}  // namespace

void check_sgd_args(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                    const StepScalars& scalars) {
  check_scalars("sgd_step", scalars);
  if (config.nesterov && (config.momentum <= 0.0f || config.dampening != 0.0f))
    fail(AMPX_ERR_INVALID_ARGUMENT, "sgd_step: nesterov needs momentum > 0 and dampening 0 (got ",
         config.momentum, " and ", config.dampening, ")");
  const bool needs_state[3] = {config.momentum != 0.0f, false, false};
  check_params("sgd_step", params, needs_state);
}

void check_adam_args(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                     const StepScalars& scalars) {
  check_scalars("adam_step", scalars);
  const bool needs_state[3] = {true, true, config.amsgrad};
  check_params("adam_step", params, needs_state);
}

}  // namespace ampx
