// api_fp8.cpp -- section 18 of ampx.h: FP8 casts, scaling recipes and
// their state.
#include <string>

#include "api/guard.h"
#include "core/backend_fp8.h"
#include "fp8/recipe.h"

using namespace ampx::impl;

namespace {

bool saturate_arg(ampx_fp8_overflow overflow) {
  switch (overflow) {
    case AMPX_FP8_SATURATE: return true;
    case AMPX_FP8_NO_SATURATE: return false;
    default: break;
  }
  fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'overflow' is ", static_cast<int>(overflow),
       "; use AMPX_FP8_SATURATE or AMPX_FP8_NO_SATURATE");
}

Fp8Recipe& recipe_arg(ampx_fp8_recipe handle, const char* arg) {
  return object_arg<Fp8Recipe>(handle, arg, "an ampx_fp8_recipe");
}

ampx_fp8_recipe to_handle(Fp8Recipe* r) { return reinterpret_cast<ampx_fp8_recipe>(r); }

Fp8Role role_arg(ampx_fp8_role role) {
  if (role != AMPX_FP8_FORWARD && role != AMPX_FP8_BACKWARD)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'role' is ", static_cast<int>(role),
         "; use AMPX_FP8_FORWARD or AMPX_FP8_BACKWARD");
  return static_cast<Fp8Role>(role);
}

Fp8RecipeOptions recipe_options(const ampx_fp8_recipe_options& o) {
  if (o.scaling != AMPX_FP8_DELAYED && o.scaling != AMPX_FP8_CURRENT)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.scaling is ", static_cast<int>(o.scaling),
         "; use AMPX_FP8_DELAYED or AMPX_FP8_CURRENT");
  if (o.format != AMPX_FP8_HYBRID && o.format != AMPX_FP8_E4M3)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.format is ", static_cast<int>(o.format),
         "; use AMPX_FP8_HYBRID or AMPX_FP8_E4M3");
  if (o.amax_compute_algo != AMPX_FP8_AMAX_MAX && o.amax_compute_algo != AMPX_FP8_AMAX_MOST_RECENT)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.amax_compute_algo is ",
         static_cast<int>(o.amax_compute_algo),
         "; use AMPX_FP8_AMAX_MAX or AMPX_FP8_AMAX_MOST_RECENT");
  Fp8RecipeOptions r;
  r.delayed = o.scaling == AMPX_FP8_DELAYED;
  r.hybrid = o.format == AMPX_FP8_HYBRID;
  r.history_len = o.amax_history_len;
  r.most_recent = o.amax_compute_algo == AMPX_FP8_AMAX_MOST_RECENT;
  r.margin = o.margin;
  r.power_of_two = o.power_of_two_scales != 0;
  validate_fp8_recipe_options(r);
  return r;
}

// The [rows, cols] matrix a tensor is read as: cols its last extent.
void matrix_of(const DeviceTensor& t, int64_t* rows, int64_t* cols) {
  *cols = t.shape.ndim == 0 ? 1 : t.shape.dims[t.shape.ndim - 1];
  *rows = t.shape.ndim == 0 ? 1 : t.shape.extent_product(0, t.shape.ndim - 1);
}

}  // namespace

extern "C" {

ampx_fp8_recipe_options ampx_fp8_recipe_options_default(void) {
  ampx_fp8_recipe_options o = AMPX_FP8_RECIPE_OPTIONS_INIT;
  return o;
}

ampx_status ampx_fp8_recipe_create(ampx_context ctx, const ampx_fp8_recipe_options* options,
                                   ampx_fp8_recipe* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(out, "out");
    const ampx_fp8_recipe_options o =
        read_options(options, ampx_fp8_recipe_options_default(), "options");
    *out = to_handle(Fp8Recipe::create(c, recipe_options(o)));
  });
}

void ampx_fp8_recipe_release(ampx_fp8_recipe recipe) {
  if (!recipe) return;
  guard(__func__, [&] { recipe_arg(recipe, "recipe").release(); });
}

ampx_status ampx_fp8_recipe_add_tensor(ampx_fp8_recipe recipe, ampx_fp8_role role,
                                       const char* name, int64_t* slot) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    require_pointer(slot, "slot");
    const Fp8Role checked = role_arg(role);
    *slot = r.add_slot(checked, name ? name : "");
  });
}

ampx_status ampx_fp8_recipe_slot_count(ampx_fp8_recipe recipe, int64_t* count) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    require_pointer(count, "count");
    *count = r.slot_count();
  });
}

ampx_status ampx_fp8_quantize(ampx_fp8_recipe recipe, int64_t slot, ampx_tensor src,
                              ampx_tensor dst, ampx_tensor dst_transposed) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    DeviceTensor& x = tensor_arg(src, "src");
    DeviceTensor* y = dst ? &tensor_arg(dst, "dst") : nullptr;
    DeviceTensor* y_t = dst_transposed ? &tensor_arg(dst_transposed, "dst_transposed") : nullptr;
    if (!y && !y_t)
      fail(AMPX_ERR_INVALID_ARGUMENT, "arguments 'dst' and 'dst_transposed' are both NULL");
    r.check_slot(slot, "slot");
    if (x.ctx != &r.context()) fail(AMPX_ERR_DEVICE, "'src' belongs to another context than the recipe");
    if (!is_floating(x.dtype))
      fail(AMPX_ERR_DTYPE, "'src' is ", x.describe(), "; it must be f32, f16 or bf16");
    const DType format = r.format(slot);
    for (const auto& [t, arg] : {std::pair<DeviceTensor*, const char*>{y, "dst"},
                                 std::pair<DeviceTensor*, const char*>{y_t, "dst_transposed"}}) {
      if (!t) continue;
      if (t->ctx != x.ctx) fail(AMPX_ERR_DEVICE, "'", arg, "' and 'src' belong to different contexts");
      if (t->dtype != format)
        fail(AMPX_ERR_DTYPE, "'", arg, "' is ", t->describe(), "; slot ", slot, " quantizes to ",
             dtype_name(format));
      if (t->numel() != x.numel())
        fail(AMPX_ERR_SHAPE, "'", arg, "' is ", t->describe(), " and 'src' ", x.describe(),
             "; they must have as many elements");
    }
    if (x.numel() == 0) return;
    int64_t rows = 0, cols = 0;
    matrix_of(x, &rows, &cols);
    r.quantize(slot, x.data(), x.dtype, rows, cols, y ? y->data() : nullptr,
               y_t ? y_t->data() : nullptr);
    if (y) y->storage->note_write();
    if (y_t) y_t->storage->note_write();
  });
}

ampx_status ampx_fp8_recipe_update(ampx_fp8_recipe recipe) {
  return guard(__func__, [&] { recipe_arg(recipe, "recipe").update(); });
}

ampx_status ampx_fp8_recipe_scale_tensor(ampx_fp8_recipe recipe, int64_t slot, int32_t inverse,
                                         ampx_tensor* out) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    require_pointer(out, "out");
    r.check_slot(slot, "slot");
    *out = to_handle(r.scale_view(slot, inverse != 0));
  });
}

ampx_status ampx_fp8_recipe_slot_get(ampx_fp8_recipe recipe, int64_t slot,
                                     ampx_fp8_slot_info* info, float* history, int32_t capacity) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    require_pointer(info, "info");
    if (info->struct_size < sizeof(size_t))
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'info' has struct_size ", info->struct_size,
           "; set it to sizeof(ampx_fp8_slot_info)");
    r.check_slot(slot, "slot");
    if (history && capacity != r.options().history_len)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'capacity' is ", capacity,
           "; the history holds ", r.options().history_len, " amaxes");
    const Fp8SlotState state = r.read_slot(slot);
    ampx_fp8_slot_info full = AMPX_FP8_SLOT_INFO_INIT;
    full.name = r.name(slot).c_str();
    full.role = static_cast<ampx_fp8_role>(r.role(slot));
    full.dtype = static_cast<ampx_dtype>(r.format(slot));
    full.scale = state.scale;
    full.scale_inv = state.scale_inv;
    full.amax = state.amax;
    full.history_len = r.options().history_len;
    if (history)
      for (size_t i = 0; i < state.history.size(); ++i) history[i] = state.history[i];
    write_struct(info, full, "info");
  });
}

ampx_status ampx_tensor_copy_fp8(ampx_tensor dst, ampx_tensor src, ampx_fp8_overflow overflow) {
  return guard(__func__, [&] {
    DeviceTensor& d = tensor_arg(dst, "dst");
    DeviceTensor& s = tensor_arg(src, "src");
    const bool saturate = saturate_arg(overflow);
    if (d.ctx != s.ctx) fail(AMPX_ERR_DEVICE, "'dst' and 'src' belong to different contexts");
    if (!is_fp8(d.dtype))
      fail(AMPX_ERR_DTYPE, "'dst' is ", d.describe(), "; it must be f8e4m3 or f8e5m2");
    if (!is_floating(s.dtype))
      fail(AMPX_ERR_DTYPE, "'src' is ", s.describe(), "; it must be f32, f16 or bf16");
    if (d.numel() != s.numel())
      fail(AMPX_ERR_SHAPE, "'dst' is ", d.describe(), " (", d.numel(), " elements) but 'src' is ",
           s.describe(), " (", s.numel(), " elements)");
    Fp8Primitives& fp8 = d.ctx->backend().require<Fp8Primitives>("ampx_tensor_copy_fp8");
    if (d.numel() == 0) return;
    Fp8QuantizeArgs q;
    q.x = s.data(), q.x_type = s.dtype, q.rows = 1, q.cols = s.numel();
    q.y = d.data(), q.y_type = d.dtype, q.saturate = saturate;
    fp8.quantize(q);
    d.storage->note_write();
  });
}

ampx_status ampx_doctor_fp8_inspect(ampx_fp8_recipe recipe, int64_t slot, ampx_tensor tensor,
                                    ampx_fp8_tensor_report* report) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    DeviceTensor& x = tensor_arg(tensor, "tensor");
    require_pointer(report, "report");
    if (report->struct_size < sizeof(size_t))
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'report' has struct_size ", report->struct_size,
           "; set it to sizeof(ampx_fp8_tensor_report)");
    r.check_slot(slot, "slot");
    if (x.ctx != &r.context())
      fail(AMPX_ERR_DEVICE, "'tensor' belongs to another context than the recipe");
    if (!is_floating(x.dtype))
      fail(AMPX_ERR_DTYPE, "'tensor' is ", x.describe(), "; it must be f32, f16 or bf16");
    DeviceContext& ctx = r.context();
    Fp8Primitives& fp8 = ctx.backend().require<Fp8Primitives>("ampx_doctor_fp8_inspect");
    TensorRef counts(DeviceTensor::empty(ctx, DType::I64, vector_shape(6)));
    ctx.backend().fill(counts->data(), 8, 0, 6);
    auto* c = static_cast<int64_t*>(counts->data());
    if (x.numel() > 0) {
      fp8.count_fp8_range(x.data(), x.dtype, x.numel(), r.scale(slot), DType::F8E4M3, c);
      fp8.count_fp8_range(x.data(), x.dtype, x.numel(), r.scale(slot), DType::F8E5M2, c + 3);
    }
    int64_t host[6] = {};
    ctx.read_to_host(host, c, sizeof host);
    float scale = 1.0f;
    ctx.read_to_host(&scale, r.scale(slot), sizeof scale);
    ampx_fp8_tensor_report full = AMPX_FP8_TENSOR_REPORT_INIT;
    const double n = static_cast<double>(host[0]);
    full.count = host[0];
    if (host[0] > 0) {
      full.flushed_e4m3 = static_cast<double>(host[1]) / n;
      full.saturated_e4m3 = static_cast<double>(host[2]) / n;
      full.flushed_e5m2 = static_cast<double>(host[4]) / n;
      full.saturated_e5m2 = static_cast<double>(host[5]) / n;
    }
    full.scale = scale;
    full.dtype = static_cast<ampx_dtype>(r.format(slot));
    write_struct(report, full, "report");
  });
}

ampx_status ampx_doctor_fp8_summary(ampx_fp8_recipe recipe, const char** text) {
  return guard(__func__, [&] {
    Fp8Recipe& r = recipe_arg(recipe, "recipe");
    require_pointer(text, "text");
    *text = r.summary().c_str();
  });
}

}  // extern "C"
