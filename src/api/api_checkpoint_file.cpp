// api_checkpoint_file.cpp -- training checkpoint files (section 12 of ampx.h).
#include "amp/scaler.h"
#include "api/guard.h"
#include "io/checkpoint_file.h"
#include "optim/optimizer.h"

using namespace ampx;

namespace {

std::string path_arg(const char* path) {
  require_pointer(path, "path");
  if (*path == '\0') fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'path' is an empty string");
  return path;
}

std::vector<Tensor*> tensor_list(const ampx_tensor* params, size_t count) {
  if (count > 0) require_pointer(params, "params");
  std::vector<Tensor*> list;
  list.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string arg = cat("params[", i, "]");
    list.push_back(&tensor_arg(params[i], arg.c_str()));
  }
  return list;
}

Optimizer* optional_optimizer(ampx_optimizer handle) {
  return handle ? &object_arg<Optimizer>(handle, "optimizer", "an ampx_optimizer") : nullptr;
}

Scaler* optional_scaler(ampx_scaler handle) {
  return handle ? &object_arg<Scaler>(handle, "scaler", "an ampx_scaler") : nullptr;
}

// Between unscale/step and update the optimizer has moved on but the scale
// has not: a checkpoint taken there would resume into a different run, and
// restoring into an iteration half done would mix two runs.
void require_between_iterations(const Optimizer* optimizer, const Scaler* scaler,
                                const char* action) {
  if ((optimizer && optimizer->amp_state != AmpState::Ready) ||
      (scaler && scaler->iteration_in_progress()))
    fail(AMPX_ERR_ORDER, "a checkpoint can only be ", action,
         " between iterations (after ampx_scaler_update), not between unscale/step and update");
}

}  // namespace

extern "C" {

ampx_status ampx_checkpoint_file_save(const char* path, const ampx_tensor* params, size_t count,
                                      ampx_optimizer optimizer, ampx_scaler scaler) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<Tensor*> tensors = tensor_list(params, count);
    Optimizer* o = optional_optimizer(optimizer);
    Scaler* s = optional_scaler(scaler);
    require_between_iterations(o, s, "saved");
    io::save_checkpoint_file(file, tensors, o, s);
  });
}

ampx_status ampx_checkpoint_file_load(const char* path, const ampx_tensor* params, size_t count,
                                      ampx_optimizer optimizer, ampx_scaler scaler) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<Tensor*> tensors = tensor_list(params, count);
    Optimizer* o = optional_optimizer(optimizer);
    Scaler* s = optional_scaler(scaler);
    require_between_iterations(o, s, "loaded");
    io::load_checkpoint_file(file, tensors, o, s);
  });
}

}  // extern "C"
