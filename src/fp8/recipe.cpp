// recipe.cpp -- FP8 scaling recipes (see recipe.h).
#include "fp8/recipe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "math/fp8.h"
#include "math/fp8_scaling.h"

namespace ampx::impl {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

void validate_fp8_recipe_options(const Fp8RecipeOptions& o) {
  if (o.history_len < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.amax_history_len is ", o.history_len,
         "; a history holds at least one amax");
  if (o.margin < 0 || o.margin > 127)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.margin is ", o.margin,
         "; it must be in [0, 127] (scale = fp8_max / amax / 2^margin)");
}

Fp8Recipe::Fp8Recipe(DeviceContext& ctx, const Fp8RecipeOptions& options)
    : Object(kLiveMagic, &Fp8Recipe::destroy_shell), ctx_(&ctx), options_(options) {
  ctx.retain();
}

Fp8Recipe::~Fp8Recipe() = default;

Fp8Recipe* Fp8Recipe::create(DeviceContext& ctx, const Fp8RecipeOptions& options) {
  validate_fp8_recipe_options(options);
  ctx.backend().require<Fp8Primitives>("ampx_fp8_recipe_create");
  TensorRef scratch(DeviceTensor::empty(ctx, DType::F32, vector_shape(1)));
  auto* recipe = new Fp8Recipe(ctx, options);
  recipe->scratch_ = std::move(scratch);
  return recipe;
}

void Fp8Recipe::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  blocks_.clear();
  scratch_.reset();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

Fp8ScaleRule Fp8Recipe::rule() const {
  Fp8ScaleRule r;
  r.delayed = options_.delayed;
  r.most_recent = options_.most_recent;
  r.margin = options_.margin;
  r.power_of_two = options_.power_of_two;
  return r;
}

DType Fp8Recipe::format_of(Fp8Role role) const {
  return options_.hybrid && role == Fp8Role::Backward ? DType::F8E5M2 : DType::F8E4M3;
}

void Fp8Recipe::check_slot(int64_t slot, const char* arg) const {
  if (slot < 0 || slot >= slot_count())
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", arg, "' is ", slot, "; the recipe has ",
         slot_count(), " slots");
}

void Fp8Recipe::add_block() {
  const int64_t floats =
      kHistory * kSlotsPerBlock + kSlotsPerBlock * static_cast<int64_t>(options_.history_len);
  TensorRef block(DeviceTensor::empty(*ctx_, DType::F32, vector_shape(floats)));
  auto* base = static_cast<float*>(block->data());
  Backend& backend = ctx_->backend();
  // Zero amaxes, position and histories; scales 1 (fp8_max is set per slot).
  backend.fill(base, 4, 0, floats);
  backend.fill(base + kScale * kSlotsPerBlock, 4, bits_of(1.0f), 2 * kSlotsPerBlock);
  blocks_.push_back(std::move(block));
}

int64_t Fp8Recipe::add_slot(Fp8Role role, const std::string& name) {
  if (!name.empty() && by_name_.count(name) != 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the recipe already has a tensor named \"", name, "\"");
  const int64_t slot = slot_count();
  slots_.reserve(slots_.size() + 1);
  if (slot == static_cast<int64_t>(blocks_.size()) * kSlotsPerBlock) add_block();
  slots_.push_back(Slot{role, name, true});
  if (!name.empty()) by_name_[name] = slot;
  const float max = format(slot) == DType::F8E4M3 ? math::Fp8E4M3::kMax : math::Fp8E5M2::kMax;
  ctx_->backend().fill(field(slot, kFp8Max), 4, bits_of(max), 1);
  return slot;
}

int64_t Fp8Recipe::claim(const std::string& name) {
  const auto found = by_name_.find(name);
  if (found == by_name_.end()) return -1;
  Slot& s = slots_[static_cast<size_t>(found->second)];
  if (s.claimed) return -1;
  s.claimed = true;
  return found->second;
}

int64_t Fp8Recipe::add_restored_slot(Fp8Role role, const std::string& name) {
  const int64_t slot = add_slot(role, name);
  slots_[static_cast<size_t>(slot)].claimed = false;
  return slot;
}

int64_t Fp8Recipe::find(const std::string& name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? -1 : found->second;
}

bool Fp8Recipe::name_free(const std::string& name) const {
  const int64_t slot = find(name);
  return slot < 0 || !slots_[static_cast<size_t>(slot)].claimed;
}

int64_t Fp8Recipe::claim_or_add(Fp8Role role, const std::string& name) {
  const int64_t slot = find(name);
  if (slot >= 0 && role == this->role(slot) && claim(name) >= 0) return slot;
  return add_slot(role, name);
}

Fp8Recipe::GemmSlots Fp8Recipe::gemm_slots(const DeviceTensor& weight) {
  const auto found = by_weight_.find(weight.id);
  if (found != by_weight_.end()) return found->second;
  std::string base = weight.name.empty() ? cat("#", unnamed_weights_) : weight.name;
  if (!name_free(base + ":input") || !name_free(base + ":weight") ||
      !name_free(base + ":grad_output"))
    base = cat(base, "#", weight.id);
  by_weight_.reserve(by_weight_.size() + 1);
  GemmSlots s;
  s.input = claim_or_add(Fp8Role::Forward, base + ":input");
  s.weight = claim_or_add(Fp8Role::Forward, base + ":weight");
  s.grad_output = claim_or_add(Fp8Role::Backward, base + ":grad_output");
  if (weight.name.empty()) ++unnamed_weights_;
  by_weight_[weight.id] = s;
  return s;
}

DeviceTensor* Fp8Recipe::scale_view(int64_t slot, bool inverse) const {
  const DeviceTensor& block = *blocks_[static_cast<size_t>(slot / kSlotsPerBlock)];
  const size_t offset = static_cast<size_t>(((inverse ? kScaleInv : kScale) * kSlotsPerBlock +
                                             slot % kSlotsPerBlock) *
                                            static_cast<int64_t>(sizeof(float)));
  return DeviceTensor::alias(*ctx_, block, DType::F32, vector_shape(1), offset);
}

Fp8Slots Fp8Recipe::block_slots(int64_t block) const {
  Fp8Slots s;
  float* base = block_base(block);
  const int64_t first = block * kSlotsPerBlock;
  s.count = std::min(kSlotsPerBlock, slot_count() - first);
  s.amax = base + kAmax * kSlotsPerBlock;
  s.scale = base + kScale * kSlotsPerBlock;
  s.scale_inv = base + kScaleInv * kSlotsPerBlock;
  s.fp8_max = base + kFp8Max * kSlotsPerBlock;
  s.position = reinterpret_cast<int32_t*>(base + kPosition * kSlotsPerBlock);
  s.history = base + kHistory * kSlotsPerBlock;
  s.history_len = options_.history_len;
  return s;
}

void Fp8Recipe::quantize(int64_t slot, const void* x, DType x_type, int64_t rows, int64_t cols,
                         void* y, void* y_t) {
  Fp8Primitives& fp8 = ctx_->backend().require<Fp8Primitives>("FP8 quantization");
  Fp8QuantizeArgs q;
  q.x = x, q.x_type = x_type, q.rows = rows, q.cols = cols;
  q.y_type = format(slot);
  q.saturate = true;
  q.scale = scale(slot);
  if (!options_.delayed) {
    // The scale from this tensor's own amax, computed on the device first.
    ctx_->backend().fill(scratch_->data(), 4, 0, 1);
    q.amax = static_cast<float*>(scratch_->data());
    fp8.quantize(q);
    fp8.scale_from_amax(block_slots(slot / kSlotsPerBlock), slot % kSlotsPerBlock,
                        static_cast<float*>(scratch_->data()), rule());
    q.amax = nullptr;
  } else {
    q.amax = step_amax(slot);
  }
  q.y = y, q.y_t = y_t;
  fp8.quantize(q);
  amaxes_reduced_ = false;
}

void Fp8Recipe::update() {
  Fp8Primitives& fp8 = ctx_->backend().require<Fp8Primitives>("ampx_fp8_recipe_update");
  if (amax_reduction_ && !amaxes_reduced_) amax_reduction_->reduce_amaxes();
  for (int64_t b = 0; b < static_cast<int64_t>(blocks_.size()); ++b)
    fp8.finish_step(block_slots(b), rule());
  amaxes_reduced_ = false;
}

std::vector<Fp8Recipe::AmaxSpan> Fp8Recipe::step_amaxes() const {
  std::vector<AmaxSpan> spans;
  for (int64_t b = 0; b < static_cast<int64_t>(blocks_.size()); ++b) {
    const Fp8Slots s = block_slots(b);
    spans.push_back(AmaxSpan{s.amax, s.count});
  }
  return spans;
}

Fp8SlotState Fp8Recipe::read_slot(int64_t slot) const {
  Fp8SlotState state;
  ctx_->read_to_host(&state.scale, scale(slot), sizeof(float));
  ctx_->read_to_host(&state.scale_inv, scale_inv(slot), sizeof(float));
  ctx_->read_to_host(&state.amax, step_amax(slot), sizeof(float));
  int32_t position = 0;
  ctx_->read_to_host(&position, block_slots(slot / kSlotsPerBlock).position, sizeof position);
  const size_t len = static_cast<size_t>(options_.history_len);
  std::vector<float> ring(len);
  ctx_->read_to_host(ring.data(), history(slot), len * sizeof(float));
  // The entry at `position` is the oldest: the next update overwrites it.
  state.history.resize(len);
  for (size_t i = 0; i < len; ++i) state.history[i] = ring[(static_cast<size_t>(position) + i) % len];
  return state;
}

void Fp8Recipe::write_slot(int64_t slot, const Fp8SlotState& state) {
  const size_t len = static_cast<size_t>(options_.history_len);
  if (state.history.size() != len)
    fail(AMPX_ERR_INTERNAL, "fp8 recipe: a history of ", state.history.size(), " for ", len);
  int32_t position = 0;
  ctx_->read_to_host(&position, block_slots(slot / kSlotsPerBlock).position, sizeof position);
  std::vector<float> ring(len);
  for (size_t i = 0; i < len; ++i) ring[(static_cast<size_t>(position) + i) % len] = state.history[i];
  Backend& backend = ctx_->backend();
  backend.copy_from_host(history(slot), ring.data(), len * sizeof(float));
  backend.copy_from_host(scale(slot), &state.scale, sizeof(float));
  backend.copy_from_host(scale_inv(slot), &state.scale_inv, sizeof(float));
  backend.copy_from_host(step_amax(slot), &state.amax, sizeof(float));
}

const std::string& Fp8Recipe::summary() {
  std::string text = cat("FP8 recipe: ", options_.delayed ? "delayed" : "current", " scaling, ",
                         options_.hybrid ? "HYBRID" : "E4M3", ", amax history ",
                         options_.history_len, options_.delayed && options_.most_recent
                                                   ? " (scaled by the most recent amax)"
                                                   : "",
                         ", margin ", options_.margin, "; ", slot_count(), " tensors\n");
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-6s %13s %13s %13s %13s\n", "tensor", "format",
                "scale", "step amax", "last amax", "history max");
  text += line;
  for (int64_t i = 0; i < slot_count(); ++i) {
    const Fp8SlotState st = read_slot(i);
    uint32_t top = 0;  // as the update takes it (NaN skipped)
    for (float a : st.history) top = std::max(top, math::history_amax_bits(a));
    const std::string& n = name(i);
    std::snprintf(line, sizeof line, "%-32s %-6s %13.6g %13.6g %13.6g %13.6g\n",
                  n.empty() ? cat("#", i).c_str() : n.c_str(),
                  format(i) == DType::F8E4M3 ? "e4m3" : "e5m2", static_cast<double>(st.scale),
                  static_cast<double>(st.amax), static_cast<double>(st.history.back()),
                  static_cast<double>(math::bits_float(top)));
    text += line;
  }
  summary_ = std::move(text);
  return summary_;
}

}  // namespace ampx::impl
