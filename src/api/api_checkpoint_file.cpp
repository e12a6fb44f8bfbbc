// api_checkpoint_file.cpp -- training checkpoint files (section 12 of ampx.h).
#include "amp/scaler.h"
#include "api/guard.h"
#include "fp8/recipe.h"
#include "io/checkpoint_file.h"
#include "optim/optimizer.h"

using namespace ampx::impl;

namespace {

std::string path_arg(const char* path) {
  require_pointer(path, "path");
  if (*path == '\0') fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'path' is an empty string");
  return path;
}

FusedOptimizer* optional_optimizer(ampx_optimizer handle) {
  return handle ? &object_arg<FusedOptimizer>(handle, "optimizer", "an ampx_optimizer") : nullptr;
}

LossScaler* optional_scaler(ampx_scaler handle) {
  return handle ? &object_arg<LossScaler>(handle, "scaler", "an ampx_scaler") : nullptr;
}

}  // namespace

extern "C" {

ampx_status ampx_checkpoint_file_save(const char* path, const ampx_tensor* params, size_t count,
                                      ampx_optimizer optimizer, ampx_scaler scaler) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<DeviceTensor*> tensors = tensor_list_arg(params, count, "params");
    FusedOptimizer* o = optional_optimizer(optimizer);
    LossScaler* s = optional_scaler(scaler);
    io::save_checkpoint_file(file, tensors, o, s);
  });
}

ampx_status ampx_checkpoint_file_load(const char* path, const ampx_tensor* params, size_t count,
                                      ampx_optimizer optimizer, ampx_scaler scaler) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<DeviceTensor*> tensors = tensor_list_arg(params, count, "params");
    FusedOptimizer* o = optional_optimizer(optimizer);
    LossScaler* s = optional_scaler(scaler);
    io::load_checkpoint_file(file, tensors, o, s);
  });
}

ampx_status ampx_checkpoint_file_save_fp8(const char* path, const ampx_tensor* params,
                                          size_t count, ampx_optimizer optimizer,
                                          ampx_scaler scaler, ampx_fp8_recipe recipe) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<DeviceTensor*> tensors = tensor_list_arg(params, count, "params");
    FusedOptimizer* o = optional_optimizer(optimizer);
    LossScaler* s = optional_scaler(scaler);
    Fp8Recipe* r = recipe ? &object_arg<Fp8Recipe>(recipe, "recipe", "an ampx_fp8_recipe") : nullptr;
    io::save_checkpoint_file(file, tensors, o, s, r);
  });
}

ampx_status ampx_checkpoint_file_load_fp8(const char* path, const ampx_tensor* params,
                                          size_t count, ampx_optimizer optimizer,
                                          ampx_scaler scaler, ampx_fp8_recipe recipe) {
  return guard(__func__, [&] {
    const std::string file = path_arg(path);
    const std::vector<DeviceTensor*> tensors = tensor_list_arg(params, count, "params");
    FusedOptimizer* o = optional_optimizer(optimizer);
    LossScaler* s = optional_scaler(scaler);
    Fp8Recipe* r = recipe ? &object_arg<Fp8Recipe>(recipe, "recipe", "an ampx_fp8_recipe") : nullptr;
    io::load_checkpoint_file(file, tensors, o, s, r);
  });
}

}  // extern "C"
