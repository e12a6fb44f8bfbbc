#include "autocast/autocast.h"

#include "autograd/tape.h"
#include "core/backend_fp8.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "onnx/emitter.h"

namespace ampx::impl {
namespace {

// torch.autocast's lists, for the ops ampx has.
const std::unordered_map<std::string, OpClass>& op_table() {
  static const std::unordered_map<std::string, OpClass> table = {
      {"matmul", OpClass::LowerPrecision}, {"linear", OpClass::LowerPrecision},
      {"softmax", OpClass::Fp32},          {"log_softmax", OpClass::Fp32},
      {"cross_entropy", OpClass::Fp32},    {"mse_loss", OpClass::Fp32},
      {"sum", OpClass::Fp32},              {"mean", OpClass::Keep},
      {"add", OpClass::Promote},           {"sub", OpClass::Promote},
      {"mul", OpClass::Promote},           {"affine", OpClass::Keep},
      {"relu", OpClass::Keep},             {"gelu", OpClass::Keep},
      {"gelu_tanh", OpClass::Keep},        {"silu", OpClass::Keep},
      {"sigmoid", OpClass::Keep},          {"tanh", OpClass::Keep},
      {"layer_norm", OpClass::Fp32},       {"bce_with_logits", OpClass::Fp32},
      {"concat", OpClass::Promote},        {"batch_norm", OpClass::Keep},
      {"dropout", OpClass::Keep},          {"embedding", OpClass::Keep},
      {"reshape", OpClass::Keep},          {"transpose", OpClass::Keep},
      {"exp", OpClass::Fp32},              {"log", OpClass::Fp32},
      {"rsqrt", OpClass::Fp32},            {"sqrt", OpClass::Keep},
      {"div", OpClass::Promote},
      {"scaled_dot_product_attention", OpClass::LowerPrecision},
      {"rms_norm", OpClass::Fp32},         {"amax", OpClass::Keep},
      {"permute", OpClass::Keep},          {"masked_fill", OpClass::Keep},
      {"pow", OpClass::Fp32},              {"rotary_embedding", OpClass::Keep},
      {"split", OpClass::Keep},           {"conv2d", OpClass::LowerPrecision},
      {"max_pool2d", OpClass::Keep},      {"avg_pool2d", OpClass::Keep},
  };
  return table;
}

class CastNode final : public Node {
 public:
  // Expires with the record (a backward that frees or clears it), for the
  // region's cache.
  std::shared_ptr<const void> alive = std::make_shared<char>(0);
  const char* name() const override { return "cast"; }
  // The exported graph computes in fp32: autocast's casts are dropped.
  void onnx(onnx::Emitter& e) const override { e.output(0, e.input(0)); }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& source = *inputs[0];
    TensorRef grad(DeviceTensor::empty(ctx, source.dtype, source.shape));
    if (grad->numel() > 0)
      ctx.backend().convert(grad->data(), source.dtype, grads[0]->data(), grads[0]->dtype,
                            grad->numel());
    std::vector<TensorRef> result;
    result.push_back(std::move(grad));
    return result;
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    std::vector<TensorRef> result;
    result.push_back(cast_to(ctx, *grads[0], inputs[0]->dtype));
    return result;
  }
};

DType widest(DType a, DType b) {
  if (a == b) return a;
  return DType::F32;  // f16 with bf16, or either with f32
}

// torch.result_type of the floating inputs: tensors with dimensions decide,
// and 0-D tensors (like Python numbers) only when no floating input has
// dimensions -- a 0-D tensor raises the result's category, never its
// precision within the category (f16 [3] with an f32 0-D tensor is f16).
// Integer inputs are passed through (ops that promote take no integer
// operand together with a floating one), so the category is floating.
DType promoted_type(const std::vector<DeviceTensor*>& inputs) {
  DType dimensioned = DType::F32, zero_dim = DType::F32;
  bool any_dimensioned = false, any_zero_dim = false;
  for (const DeviceTensor* t : inputs) {
    if (!t || !is_floating(t->dtype)) continue;
    DType& acc = t->shape.ndim > 0 ? dimensioned : zero_dim;
    bool& seen = t->shape.ndim > 0 ? any_dimensioned : any_zero_dim;
    acc = seen ? widest(acc, t->dtype) : t->dtype;
    seen = true;
  }
  return any_dimensioned || !any_zero_dim ? dimensioned : zero_dim;
}

}  // namespace

OpClass default_op_class(const std::string& op) {
  auto it = op_table().find(op);
  if (it == op_table().end()) fail(AMPX_ERR_INTERNAL, "op '", op, "' has no autocast class");
  return it->second;
}

bool is_known_op(const std::string& op) { return op_table().count(op) != 0; }

PrecisionPolicy::PrecisionPolicy(DeviceContext& ctx, DType dtype, bool enabled, bool cache)
    : Object(kLiveMagic, &PrecisionPolicy::destroy_shell),
      ctx_(&ctx),
      dtype_(dtype),
      enabled_(enabled),
      cache_(cache) {
  ctx.retain();
}

PrecisionPolicy::~PrecisionPolicy() = default;

PrecisionPolicy* PrecisionPolicy::create(DeviceContext& ctx, DType dtype, bool enabled,
                                         bool cache) {
  if (dtype != DType::F16 && dtype != DType::BF16)
    fail(AMPX_ERR_DTYPE, "options.dtype is ", dtype_name(dtype), "; autocast lowers to f16 or bf16");
  return new PrecisionPolicy(ctx, dtype, enabled, cache);
}

void PrecisionPolicy::set_fp8(Fp8Recipe* fp8, int64_t min_gemm_size) {
  if (fp8) {
    if (&fp8->context() != ctx_)
      fail(AMPX_ERR_DEVICE, "'recipe' belongs to another context than the policy");
    if (min_gemm_size < 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'min_gemm_size' is ", min_gemm_size,
           "; it must be >= 0");
    ctx_->backend().require<Fp8GemmPrimitives>("an autocast policy with an FP8 recipe");
    fp8->retain();
  }
  if (fp8_) fp8_->release();
  fp8_ = fp8;
  fp8_min_gemm_size_ = min_gemm_size;
}

void PrecisionPolicy::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  if (fp8_) fp8_->release();
  fp8_ = nullptr;
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

void PrecisionPolicy::release_unentered() {
  if (entered > 0) fail(AMPX_ERR_ORDER, "the policy is still entered; exit its regions first");
  release();
}

OpClass PrecisionPolicy::op_class(const std::string& op) const {
  auto it = overrides_.find(op);
  return it != overrides_.end() ? it->second : default_op_class(op);
}

AutocastState::~AutocastState() {
  // Regions still open when the context is released end here, so that the
  // program can release their policies.
  for (PrecisionPolicy* policy : stack) {
    --policy->entered;
    policy->release();
  }
}

AutocastState& autocast_state(DeviceContext& ctx) {
  if (!ctx.autocast) ctx.autocast = std::make_unique<AutocastState>();
  return static_cast<AutocastState&>(*ctx.autocast);
}

void autocast_enter(PrecisionPolicy& policy) {
  // The region stack retains the policy, which retains the context; on a
  // context the program released, nothing would drop the stack again.
  if (!policy.context().is_open())
    fail(AMPX_ERR_STALE_HANDLE, "the policy's context was already released with "
                                "ampx_context_release");
  AutocastState& state = autocast_state(policy.context());
  state.stack.reserve(state.stack.size() + 1);
  policy.refs.fetch_add(1, std::memory_order_relaxed);
  state.stack.push_back(&policy);
  ++policy.entered;
}

void autocast_exit(PrecisionPolicy& policy) {
  AutocastState& state = autocast_state(policy.context());
  if (state.stack.empty() || state.stack.back() != &policy)
    fail(AMPX_ERR_ORDER, state.stack.empty()
                             ? "no autocast region is open"
                             : "this policy's region is not the innermost one; exit regions in "
                               "the reverse order of entering them");
  state.stack.pop_back();
  --policy.entered;
  if (state.stack.empty()) state.cache.clear();
  policy.release();
}

PrecisionPolicy* fp8_policy(DeviceContext& ctx, const std::string& op) {
  AutocastState& state = autocast_state(ctx);
  if (state.stack.empty()) return nullptr;
  PrecisionPolicy* policy = state.stack.back();
  if (!policy->enabled() || !policy->fp8_recipe()) return nullptr;
  return policy->op_class(op) == OpClass::LowerPrecision ? policy : nullptr;
}

namespace {

// cast_to, telling *record (when not null) the token of the record made.
TensorRef cast_recorded(DeviceContext& ctx, DeviceTensor& x, DType dtype,
                        std::weak_ptr<const void>* record_token) {
  if (x.dtype == dtype) {
    x.retain();
    return TensorRef(&x);
  }
  TensorRef out(DeviceTensor::empty(ctx, dtype, x.shape));
  if (out->numel() > 0) ctx.backend().convert(out->data(), dtype, x.data(), x.dtype, x.numel());
  if (should_record(ctx, {&x})) {
    auto node = std::make_unique<CastNode>();
    node->inputs.push_back(retained(x));
    if (record_token) *record_token = node->alive;
    record(ctx, std::move(node), {out.get()});
  }
  return out;
}

}  // namespace

TensorRef cast_to(DeviceContext& ctx, DeviceTensor& x, DType dtype) {
  return cast_recorded(ctx, x, dtype, nullptr);
}

namespace {

// A cast through the region's cache: F32 leaves that require grad (the
// weights) are cast once per region. An entry is current while its record
// lives and the leaf's memory is unchanged; a backward that cleared the
// tape, or freed the record without clearing it (ampx_grad, a backward
// with create_graph), or a write to the weights (a step), makes it stale,
// and it is replaced.
TensorRef cached_cast(DeviceContext& ctx, PrecisionPolicy& policy, DeviceTensor& x, DType dtype) {
  const bool cacheable = policy.caches() && x.dtype == DType::F32 && x.requires_grad &&
                         !on_tape(ctx, x) && is_floating(dtype);
  if (!cacheable) return cast_to(ctx, x, dtype);
  AutocastState& state = autocast_state(ctx);
  const uint64_t key = x.id * 8 + static_cast<uint64_t>(dtype);
  auto it = state.cache.find(key);
  if (it != state.cache.end() && on_tape(ctx, *it->second.cast) &&
      !it->second.record.expired() && it->second.source_version == x.storage->version()) {
    ++policy.hits;
    return retained(*it->second.cast);
  }
  CachedCast entry;
  entry.source_version = x.storage->version();
  TensorRef cast = cast_recorded(ctx, x, dtype, &entry.record);
  ++policy.misses;
  entry.cast = retained(*cast);
  state.cache[key] = std::move(entry);
  return cast;
}

}  // namespace

std::vector<TensorRef> op_inputs(DeviceContext& ctx, const std::string& op,
                                 const std::vector<DeviceTensor*>& inputs) {
  AutocastState& state = autocast_state(ctx);
  // The innermost region decides, as torch.autocast(enabled=False) inside
  // an enabled region turns autocast off there.
  PrecisionPolicy* policy = nullptr;
  if (!state.stack.empty() && state.stack.back()->enabled()) policy = state.stack.back();
  const OpClass op_class = policy ? policy->op_class(op) : default_op_class(op);
  std::vector<TensorRef> result;
  const DType promoted = promoted_type(inputs);
  for (DeviceTensor* t : inputs) {
    if (!t) {
      result.emplace_back();
      continue;
    }
    DType target = t->dtype;
    if (is_floating(t->dtype)) {
      if (op_class == OpClass::Promote) target = promoted;
      else if (policy && op_class == OpClass::LowerPrecision) target = policy->dtype();
      else if (policy && op_class == OpClass::Fp32) target = DType::F32;
    }
    if (policy && target != t->dtype)
      result.push_back(cached_cast(ctx, *policy, *t, target));
    else
      result.push_back(cast_to(ctx, *t, target));
  }
  return result;
}

}  // namespace ampx::impl
