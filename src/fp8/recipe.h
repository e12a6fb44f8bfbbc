// recipe.h -- FP8 scaling recipes (ampx_fp8_recipe): the per-tensor
// scaling state of FP8 training on the device, and Transformer Engine's two
// rules for turning amaxes into scales (kernels/math/fp8_scaling.h).
//
// A recipe holds slots, one per tensor it scales (an activation, a weight,
// an output gradient). Each has a format (E4M3, or E5M2 for gradients under
// the HYBRID format), a step amax (the largest |x| quantized into it since
// the last update), a ring of the last history_len amaxes, a scale and its
// inverse -- all device memory, updated by kernels (Fp8Primitives), so a
// training step never waits for the device.
//
// Slots live in blocks of kSlotsPerBlock, allocated as slots are added and
// never moved, so a view of a slot's scale stays valid for the recipe's
// life and adding a slot costs no copy and no synchronisation.
//
// Names: each slot has one (unique in the recipe; "" allowed, not unique),
// which checkpoint files and the precision doctor use. A slot restored from
// a checkpoint file is "unclaimed" until claim() hands it to the first user
// asking for its name (autocast's weights), so restored scales and
// histories continue where they were.
//
// Data parallel (src/dist/data_parallel.h): a recipe attached to a
// data-parallel wrapper has its step amaxes MAX-reduced over the ranks
// before each update, so that every rank computes bitwise equal scales:
// in the all-reduce of found-inf when the scaler's unscale comes first (the
// usual loop), else on their own at update(). Transformer Engine's order:
// local amaxes into one buffer, reduce, then finish the step.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend_fp8.h"
#include "core/context.h"
#include "core/tensor.h"

namespace ampx::impl {

enum class Fp8Role { Forward = 1, Backward = 2 };

struct Fp8RecipeOptions {
  bool delayed = true;         // false: current scaling
  bool hybrid = true;          // false: E4M3 for every slot
  int32_t history_len = 1024;  // >= 1
  bool most_recent = false;    // delayed: amax of the last step only
  int32_t margin = 0;          // delayed: 0 .. 127
  bool power_of_two = false;   // current: scales rounded down to powers of two
};

// Throws AMPX_ERR_INVALID_ARGUMENT naming the first bad option.
void validate_fp8_recipe_options(const Fp8RecipeOptions& options);

// One slot as the host reads it (synchronizes).
struct Fp8SlotState {
  float scale = 1.0f;
  float scale_inv = 1.0f;
  float amax = 0.0f;             // this step's, not yet in the history
  std::vector<float> history;    // history_len amaxes, oldest first
};

class Fp8Recipe : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d465038ull;  // "AMPX-FP8"
  static constexpr uint64_t kDeadMagic = 0x646561642d667038ull;  // "dead-fp8"
  static constexpr int64_t kSlotsPerBlock = 64;

  static Fp8Recipe* create(DeviceContext& ctx, const Fp8RecipeOptions& options);
  void retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release();

  DeviceContext& context() const { return *ctx_; }
  const Fp8RecipeOptions& options() const { return options_; }
  Fp8ScaleRule rule() const;

  // A new slot (amax 0, history zeros, scale 1). INVALID_ARGUMENT for a
  // non-empty name the recipe already has.
  int64_t add_slot(Fp8Role role, const std::string& name);
  int64_t slot_count() const { return static_cast<int64_t>(slots_.size()); }
  // INVALID_ARGUMENT naming `arg` when `slot` is out of range.
  void check_slot(int64_t slot, const char* arg) const;
  Fp8Role role(int64_t slot) const { return slots_[static_cast<size_t>(slot)].role; }
  DType format(int64_t slot) const { return format_of(role(slot)); }
  DType format_of(Fp8Role role) const;
  const std::string& name(int64_t slot) const { return slots_[static_cast<size_t>(slot)].name; }
  // The unclaimed slot named `name`, now claimed, or -1.
  int64_t claim(const std::string& name);
  // A slot restored from a checkpoint file: unclaimed until claim().
  int64_t add_restored_slot(Fp8Role role, const std::string& name);
  // The slot named `name`, or -1.
  int64_t find(const std::string& name) const;

  // The slots of an FP8 product whose weight is `weight` (autocast's
  // linear and matmul), by the weight's id: made at its first use -- or
  // claimed, when restored slots carry the names -- and shared by every
  // later use. Names: "<base>:input", ":weight", ":grad_output", where base
  // is the weight's name, or "#k" for the k-th unnamed weight met (a
  // second weight of a name already in use gets "<name>#<id>").
  struct GemmSlots {
    int64_t input, weight, grad_output;
  };
  GemmSlots gemm_slots(const DeviceTensor& weight);

  // Device scalars of a slot (stable for the recipe's life).
  float* scale(int64_t slot) const { return field(slot, kScale); }
  float* scale_inv(int64_t slot) const { return field(slot, kScaleInv); }
  float* step_amax(int64_t slot) const { return field(slot, kAmax); }
  // A new F32 [1] tensor on a slot's scale or inverse scale, keeping the
  // recipe's memory alive.
  DeviceTensor* scale_view(int64_t slot, bool inverse) const;

  // Quantizes x (rows x cols of F32/F16/BF16) into y and/or y_t (cols x
  // rows) of the slot's format, saturating, with the slot's scale: the
  // delayed rule's current scale, or (current rule) a scale computed now
  // from x's amax. x's amax joins the slot's step amax.
  void quantize(int64_t slot, const void* x, DType x_type, int64_t rows, int64_t cols, void* y,
                void* y_t);

  // Ends a step: every slot's amax into its history, and (delayed rule)
  // new scales -- after the data-parallel MAX reduction of the amaxes, run
  // here when the found-inf reduction did not carry them.
  void update();

  // Every block's step amaxes, `count` device floats each (the block's
  // slots, in slot order): what a data-parallel wrapper MAX-reduces.
  struct AmaxSpan {
    float* data;
    int64_t count;
  };
  std::vector<AmaxSpan> step_amaxes() const;

  // The data-parallel wrapper that reduces this recipe's amaxes (one at a
  // time), or null.
  class AmaxReduction {
   public:
    // MAX-reduces the recipe's step amaxes over the ranks, in place.
    virtual void reduce_amaxes() = 0;

   protected:
    ~AmaxReduction() = default;
  };
  AmaxReduction* amax_reduction() const { return amax_reduction_; }
  void set_amax_reduction(AmaxReduction* reduction) {
    amax_reduction_ = reduction;
    amaxes_reduced_ = false;
  }
  // The wrapper's reduction carried this step's amaxes; a quantization
  // after it adds a local amax again.
  void note_amaxes_reduced() { amaxes_reduced_ = true; }

  // Host reads and writes of a slot's state (synchronize). write_slot's
  // history is oldest first, history_len entries.
  Fp8SlotState read_slot(int64_t slot) const;
  void write_slot(int64_t slot, const Fp8SlotState& state);

  // The precision doctor's table of the slots (synchronizes); the text
  // lives until the next call or the recipe's release.
  const std::string& summary();

 private:
  // A block's floats: fields of kSlotsPerBlock each, then the position
  // (an int32 in the first float of its field), then the histories.
  enum Field { kAmax = 0, kScale = 1, kScaleInv = 2, kFp8Max = 3, kPosition = 4, kHistory = 5 };
  struct Slot {
    Fp8Role role;
    std::string name;
    bool claimed;
  };

  Fp8Recipe(DeviceContext& ctx, const Fp8RecipeOptions& options);
  ~Fp8Recipe();
  static void destroy_shell(Object* shell) { delete static_cast<Fp8Recipe*>(shell); }
  float* block_base(int64_t block) const { return static_cast<float*>(blocks_[static_cast<size_t>(block)]->data()); }
  float* field(int64_t slot, Field f) const {
    return block_base(slot / kSlotsPerBlock) + f * kSlotsPerBlock + slot % kSlotsPerBlock;
  }
  Fp8Slots block_slots(int64_t block) const;
  float* history(int64_t slot) const {
    return block_base(slot / kSlotsPerBlock) + kHistory * kSlotsPerBlock +
           (slot % kSlotsPerBlock) * options_.history_len;
  }
  void add_block();

  DeviceContext* ctx_;
  Fp8RecipeOptions options_;
  std::vector<TensorRef> blocks_;
  TensorRef scratch_;  // one float: a tensor's amax under current scaling
  // The slot named `name` when it is unclaimed (claimed now), else a new one.
  int64_t claim_or_add(Fp8Role role, const std::string& name);
  bool name_free(const std::string& name) const;

  std::vector<Slot> slots_;
  std::unordered_map<std::string, int64_t> by_name_;
  std::unordered_map<uint64_t, GemmSlots> by_weight_;
  int64_t unnamed_weights_ = 0;
  std::string summary_;
  AmaxReduction* amax_reduction_ = nullptr;
  bool amaxes_reduced_ = false;
};

}  // namespace ampx::impl
