// data_parallel.h -- ampx_data_parallel: an optimizer's gradients averaged
// (or summed) over the ranks of a communicator, as torch's DDP does.
//
// Every parameter's gradient becomes a view of a flat bucket, one dtype per
// bucket, filled in reverse parameter order (the order backward finishes
// them), the first bucket smaller so that communication starts early.
// While backward runs, the grad-ready notifications mark gradients final;
// once a bucket's are all final, it and every complete bucket before it are
// launched: pre-divided by the world size (averaging) or copied to fp32
// (reduce_in_fp32) on the compute stream, then all-reduced on the
// communication stream. When the pass ends, what is left is launched, the
// compute stream waits for the reductions, and fp32 results are converted
// back; so after ampx_backward the gradients are reduced, in stream order.
// An engine's own backward (ampx_grad_ready) has no end: its reduction
// completes at ampx_data_parallel_reduce or at the first read of the
// gradients (the optimizer's GradientSync). Buckets go out in index order
// on every rank, so the ranks' collectives match.
// The scaler's found-inf is MAX-reduced after each unscale, so every rank
// skips the same steps and its scale stays bitwise equal. An FP8 recipe
// attached to the wrapper has its step amaxes MAX-reduced in that same
// all-reduce (or, where no unscale came, on their own at the recipe's
// update), so that every rank's FP8 scales stay bitwise equal too.
//
// No rank is left waiting on another whose own checks failed: at create
// every rank's status rides in the first all-gather, and in a training step
// a rank whose call fails before its collectives still makes them, its
// status riding in the buffers they reduce anyway (found-inf; under ZeRO-1
// the partial norms and the gathered parameters): a verdict, the highest
// failure status with the lowest rank that had it. A non-zero verdict fails
// the call on every rank (where the backend lets the host read it without
// waiting: the CPU) and leaves the wrapper failed there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dist/communicator.h"
#include "fp8/recipe.h"
#include "optim/optimizer.h"

namespace ampx::impl {

struct DataParallelOptions {
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  bool average = true;
  bool reduce_in_fp32 = false;
  // Launch buckets while backward runs (false: all after it, for
  // comparison and debugging).
  bool overlap = true;
  // 1: ZeRO stage 1 -- each bucket is reduce-scattered, this rank keeps the
  // optimizer state of its 1/N of every bucket only and updates that part,
  // then the updated parameters are all-gathered.
  int32_t zero_stage = 0;
};

struct DataParallelStats {
  int32_t bucket_count = 0;
  uint64_t bucket_bytes = 0;           // gradient buckets (and fp32 reduction buffers)
  int32_t buckets_launched = 0;        // in the iteration under way
  int32_t last_launched_early = 0;     // of the last completed reduction: launched before it
  int64_t reductions = 0;              // completed
  uint64_t optimizer_state_bytes = 0;  // this rank's masters and moments
  int64_t shard_elements = 0;          // parameter elements this rank updates
};

class DataParallel : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d444450ull;  // "AMPX-DDP"
  static constexpr uint64_t kDeadMagic = 0x646561642d646470ull;  // "dead-ddp"

  // Collective over the communicator's ranks: agrees on every rank's own
  // checks (`own`: the failure of the caller's checks; optimizer nullptr
  // when its handle was bad), compares the settings and parameters that
  // must agree, broadcasts rank 0's parameters and optimizer state, and
  // makes the buckets. Retains comm and optimizer.
  struct OwnFailure {
    ampx_status status = AMPX_OK;
    std::string message;
  };
  static DataParallel* create(Communicator& comm, FusedOptimizer* optimizer,
                              const DataParallelOptions& options, const OwnFailure& own);
  void release();

  Communicator& communicator() const { return *comm_; }
  FusedOptimizer& optimizer() const { return *optimizer_; }

  // Micro-batches: while off, notifications launch nothing, and reading the
  // gradients for an update is refused (ranks would step apart).
  void set_sync(bool enabled);
  bool sync_enabled() const { return sync_; }
  // The engine's "all gradients are final": launches every bucket not yet
  // launched and completes the reduction (ampx_data_parallel_reduce);
  // nothing when the gradients are reduced already.
  void reduce_now();
  DataParallelStats stats() const;
  // Attaches `recipe` (retained; null detaches the current one): its step
  // amaxes join the found-inf all-reduce. DEVICE for another context,
  // INVALID_ARGUMENT for a recipe another wrapper reduces; nothing changes
  // on error. Not a collective, but every rank must attach a recipe with
  // the same number of slots (the reduction's length).
  void set_fp8_recipe(Fp8Recipe* recipe);

 private:
  struct Member {
    TensorRef param;
    TensorRef grad;  // the view attached as param's gradient
    int32_t bucket = 0;
    int64_t offset = 0;  // of its first element in the bucket
    bool ready = false;
  };
  struct Bucket {
    DType dtype = DType::F32;
    TensorRef grads;       // flat: every member's gradient (a multiple of the world
                           // size of elements under ZeRO-1)
    TensorRef fp32;        // reduce_in_fp32 for F16/BF16: the reduced copy
    TensorRef shard;       // ZeRO-1: this rank's part of the reduced gradients
    TensorRef shard_fp32;  // ZeRO-1 with fp32: the part as reduced, before rounding
    TensorRef gathered;    // ZeRO-1: the updated parameters of every rank's part,
                           // each followed by a verdict word
    std::vector<size_t> members;
    size_t ready = 0;  // members whose gradient is final in this round
  };
  // ZeRO-1: the part of a parameter this rank updates.
  struct Piece {
    TensorRef param;  // a 1-D view of the parameter
    TensorRef grad;   // a view of the bucket's shard, attached as param's gradient
    size_t bucket;
    int64_t offset;  // of its first element in the bucket
  };
  class Sync final : public GradientSync {
   public:
    explicit Sync(DataParallel& owner) : owner_(owner) {}
    void complete_gradients(const char* op) override { owner_.complete(op); }
    void agree_found_inf(float* found_inf) override;
    void global_norm(float* norm, NormType type) override;
    void zero_gradients() override { owner_.zero_gradients(); }
    void finish_step() override { owner_.finish_step(owner_.own_verdict(AMPX_OK)); }
    uint64_t agreements() const override { return owner_.agreements_; }
    void join_failed(Call call, uint64_t before, ampx_status status, const std::string& message,
                     const char* op) noexcept override;

   private:
    DataParallel& owner_;
  };
  // The FP8 recipe's hook: its update reduces the amaxes no unscale did.
  class AmaxSync final : public Fp8Recipe::AmaxReduction {
   public:
    explicit AmaxSync(DataParallel& owner) : owner_(owner) {}
    void reduce_amaxes() override { owner_.reduce_amaxes(); }

   private:
    DataParallel& owner_;
  };

  DataParallel(Communicator& comm, FusedOptimizer& optimizer, const DataParallelOptions& options);
  ~DataParallel();
  static void destroy_shell(Object* shell) { delete static_cast<DataParallel*>(shell); }
  void free_resources();

  void broadcast_state();
  void make_buckets();
  void on_grad_ready(DeviceTensor& leaf);
  void on_backward_end(bool ok);
  void reset_round();
  // Completes the started collectives and orders the compute stream after
  // them (no host wait on a GPU).
  void wait_for_reductions(const char* op);
  void launch_ready_buckets();
  void launch(Bucket& bucket);
  void complete(const char* op);
  // complete() for a rank whose call failed: the same collectives, whether
  // synchronization is on or not.
  void complete_anyway(const char* op);
  void make_shards();
  // The end of the step: under ZeRO-1 the gather of the stepped
  // parameters, carrying `own` (this rank's verdict word, 0 when well);
  // `joined`: this rank's own step failed (join_failed), so its round is
  // not over.
  void finish_step(int64_t own, bool joined = false);
  void zero_gradients();
  void agree_found_inf(float* found_inf, int64_t own, const char* op);
  // The FP8 recipe's amaxes, MAX-reduced alone (its update, no unscale
  // before it).
  void reduce_amaxes();
  int64_t amax_count() const { return fp8_ ? fp8_->slot_count() : 0; }
  // How many amaxes ride in the next reduction: the same number on every
  // rank, whatever their slot counts (see stage_amaxes).
  int64_t amax_length() const;
  // At `keys`: this rank's slot count as two MAX keys (the largest count
  // and the smallest, each with the lowest rank that has it), then the
  // recipe's first `length` step amaxes (zeros past its slot count).
  void stage_amaxes(float* keys, int64_t length);
  // Step amaxes [begin, end) of the recipe (in slot order) to or from
  // amaxes[begin, end) (device floats); staged past the slot count: zeros.
  void move_amaxes(float* amaxes, int64_t begin, int64_t end, bool into_recipe);
  // After the reduction of stage_amaxes' `length` amaxes: on a backend
  // whose results the host reads, fails every rank when the slot counts
  // differ (naming the ranks), and reduces the amaxes of slots added since
  // the last agreement; then the amaxes back into the recipe.
  void finish_amaxes(float* keys, int64_t length, const char* op);
  // agreed_ with room for 5 + `length` amaxes.
  float* agreed_buffer(int64_t length);
  void global_norm(float* norm, NormType type, int64_t own);
  int64_t shard_size(const Bucket& bucket) const { return bucket.grads->numel() / comm_->size(); }
  // AMPX_ERR_ORDER once a verdict failed the wrapper, and the
  // communicator's own failure (a timeout).
  void check_usable();
  // A verdict word for this rank: its own failure, or one a failed pass
  // left pending for this iteration's next verdict.
  int64_t own_verdict(ampx_status status) const;
  // Throws on every rank, naming the rank and status a non-zero verdict
  // encodes, and fails the wrapper unless every rank failed (all_failed).
  void settle(int64_t verdict, bool all_failed, const char* op);

  Communicator* comm_;
  FusedOptimizer* optimizer_;
  DataParallelOptions options_;
  Sync sync_hooks_{*this};
  AmaxSync amax_sync_{*this};
  std::vector<Member> members_;  // in the optimizer's parameter order
  std::unordered_map<const DeviceTensor*, size_t> member_of_;
  std::vector<Bucket> buckets_;  // in launch order
  std::vector<Piece> pieces_;    // ZeRO-1
  TensorRef norms_;              // ZeRO-1: F32[3 world], every rank's gradient norm and verdict
  TensorRef agreed_;             // F32[5 + n]: found-inf, the verdict, -(this rank failed),
                                 // the two slot-count keys, then n step amaxes
  Fp8Recipe* fp8_ = nullptr;     // retained, or null
  // The slot count every rank had at the last reduction of amaxes (0
  // before the first): only reductions change it, so it is the same on
  // every rank, and a reduction of that many amaxes is well-formed even
  // where the ranks' recipes differ.
  int64_t agreed_slots_ = 0;
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool reduced_ = false;        // this iteration's reduction is complete
  bool pass_notified_ = false;  // a gradient of this wrapper became final since the last end
  uint64_t listener_ = 0;
  uint64_t end_listener_ = 0;
  TensorRef inverse_world_;  // F32[1]
  std::unique_ptr<DeviceEvent> gradients_written_;
  std::unique_ptr<DeviceEvent> reduced_event_;
  int32_t launched_early_ = 0;
  int32_t last_launched_early_ = 0;
  int64_t reductions_ = 0;
  uint64_t agreements_ = 0;  // collectives that carried a verdict
  // A pass that failed on this rank after joining the reduction: the
  // status its next verdict carries (this iteration only).
  ampx_status pending_ = AMPX_OK;
  std::string failure_;  // why the wrapper failed; empty while usable
};

}  // namespace ampx::impl
