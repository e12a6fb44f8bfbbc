// autocast.h -- precision policies (torch.autocast): which dtype each op
// computes in, the stack of entered regions, and the cast cache.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace ampx::impl {

class Fp8Recipe;

enum class OpClass { LowerPrecision = 1, Fp32 = 2, Promote = 3, Keep = 4 };

class PrecisionPolicy : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d415554ull;  // "AMPX-AUT"
  static constexpr uint64_t kDeadMagic = 0x646561642d617574ull;  // "dead-aut"

  static PrecisionPolicy* create(DeviceContext& ctx, DType dtype, bool enabled, bool cache);
  void release();
  // ampx_autocast_release: ORDER while the policy's regions are entered.
  void release_unentered();

  DeviceContext& context() const { return *ctx_; }
  DType dtype() const { return dtype_; }
  bool enabled() const { return enabled_; }
  bool caches() const { return cache_; }

  void set_op_class(const std::string& op, OpClass op_class) { overrides_[op] = op_class; }
  OpClass op_class(const std::string& op) const;  // override, else the default

  // With `fp8` (retained; null for none), linear and matmul multiply in
  // FP8 with its scales (ops/fp8_product.cpp) when m * n * k >=
  // min_gemm_size. NOT_SUPPORTED when the backend has no FP8 products;
  // nothing changes on error.
  void set_fp8(Fp8Recipe* fp8, int64_t min_gemm_size);
  Fp8Recipe* fp8_recipe() const { return fp8_; }
  int64_t fp8_min_gemm_size() const { return fp8_min_gemm_size_; }

  int64_t hits = 0;
  int64_t misses = 0;
  int entered = 0;  // regions of this policy currently on the stack
  // FP8 products run, and those that fell back to `dtype` (with the last
  // reason).
  int64_t fp8_products = 0;
  int64_t fp8_fallbacks = 0;
  std::string fp8_last_fallback;

 private:
  PrecisionPolicy(DeviceContext& ctx, DType dtype, bool enabled, bool cache);
  ~PrecisionPolicy();
  static void destroy_shell(Object* shell) { delete static_cast<PrecisionPolicy*>(shell); }

  DeviceContext* ctx_;
  DType dtype_;
  bool enabled_;
  bool cache_;
  Fp8Recipe* fp8_ = nullptr;  // retained, or null
  int64_t fp8_min_gemm_size_ = 0;
  std::unordered_map<std::string, OpClass> overrides_;
};

// The class an op has when no policy overrides it; throws INTERNAL for an
// op name the table does not know (every op must be listed).
OpClass default_op_class(const std::string& op);
// Whether `op` names an op (for argument checks).
bool is_known_op(const std::string& op);

// A cast the region's cache holds, with what tells whether it is still
// current: its record (expired once a backward freed or cleared it) and
// the version of the leaf's memory it was cast from.
struct CachedCast {
  TensorRef cast;
  std::weak_ptr<const void> record;
  uint64_t source_version = 0;
};
// Casts of F32 leaves that require grad, by (leaf id, dtype).
using CastCache = std::unordered_map<uint64_t, CachedCast>;

struct AutocastState : ContextExtension {
  std::vector<PrecisionPolicy*> stack;  // entered regions, innermost last (retained)
  CastCache cache;
  ~AutocastState() override;
};

AutocastState& autocast_state(DeviceContext& ctx);
void autocast_enter(PrecisionPolicy& policy);
void autocast_exit(PrecisionPolicy& policy);

// The innermost region's policy when it is enabled, has an FP8 recipe and
// gives `op` the lower-precision class (FP8 products); else null.
PrecisionPolicy* fp8_policy(DeviceContext& ctx, const std::string& op);

// `x` converted to `dtype`, recorded on the tape (its backward converts the
// gradient back); `x` itself when it already has that dtype.
TensorRef cast_to(DeviceContext& ctx, DeviceTensor& x, DType dtype);

// The inputs of op `op` as it must compute on them: cast according to the
// innermost enabled policy's class for the op (promote ops always promote).
// Non-floating inputs are passed through.
std::vector<TensorRef> op_inputs(DeviceContext& ctx, const std::string& op,
                                 const std::vector<DeviceTensor*>& inputs);

}  // namespace ampx::impl
