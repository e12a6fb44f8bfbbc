// data_parallel.cpp -- buckets, their reduction during backward, and the
// setup checks of ampx_data_parallel (see data_parallel.h).
#include "dist/data_parallel.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "autograd/tape.h"
#include "core/backend_amp.h"
#include "core/error.h"

namespace ampx::impl {
namespace {

// Bucket members start on this boundary, so every gradient view is as
// aligned as a fresh tensor for the vectorised kernels.
constexpr size_t kMemberAlignment = 64;

// One parameter as the ranks compare it: dtype, ndim, extents.
constexpr size_t kRecordWords = 2 + kMaxDims;

void append_record(std::vector<int64_t>& records, const DeviceTensor& t) {
  records.push_back(static_cast<int64_t>(t.dtype));
  records.push_back(t.shape.ndim);
  for (int d = 0; d < kMaxDims; ++d) records.push_back(d < t.shape.ndim ? t.shape.dims[d] : 0);
}

std::string describe_record(const int64_t* record) {
  if (!is_valid_dtype(static_cast<int32_t>(record[0])) || record[1] < 0 || record[1] > kMaxDims)
    return "an unreadable record";
  std::string text = cat(dtype_name(static_cast<DType>(record[0])), "[");
  for (int64_t d = 0; d < record[1]; ++d) text += cat(d ? ", " : "", record[2 + d]);
  return text + "]";
}

uint64_t fnv1a(const std::vector<int64_t>& words) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(words.data());
  for (size_t i = 0; i < words.size() * sizeof(int64_t); ++i)
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// What each rank tells the others before anything else: its library's
// version (a job may mix builds), whether it could take part at all (and
// why not), and a digest of its parameters.
struct JoinRecord {
  int64_t version;  // ampx_version()
  int64_t status;   // AMPX_OK, or why this rank's own checks failed
  int64_t count;
  uint64_t hash;
  char message[224];
};
static_assert(sizeof(JoinRecord) == 256, "a fixed-size record, the same on every rank");

std::vector<int64_t> parameter_records(const FusedOptimizer& optimizer) {
  std::vector<int64_t> records;
  for (const FusedOptimizer::Param& p : optimizer.params()) append_record(records, *p.param);
  return records;
}

// Called on every rank once the digests differ: finds the first parameter
// (or count) where some rank differs from rank 0 and throws on every rank
// with both descriptions. The same collectives on every rank, whatever the
// lists, so none is left waiting.
[[noreturn]] void report_first_difference(Communicator& comm, const std::vector<int64_t>& records,
                                          const std::vector<int64_t>& counts) {
  const int32_t world = comm.size();
  const int64_t count = counts[static_cast<size_t>(comm.rank())];
  // Rank 0's first `shared` parameters (as many as every rank has, so no
  // rank's claim sizes another's memory) to everyone, then every rank's
  // first difference.
  const int64_t count0 = counts[0];
  const int64_t shared = *std::min_element(counts.begin(), counts.end());
  std::vector<int64_t> first(static_cast<size_t>(shared) * kRecordWords);
  if (comm.rank() == 0) std::copy(records.begin(), records.begin() + first.size(), first.begin());
  comm.broadcast_host(first.data(), first.size() * sizeof(int64_t), 0);
  int64_t difference = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < shared; ++i)
    if (!std::equal(records.begin() + i * kRecordWords, records.begin() + (i + 1) * kRecordWords,
                    first.begin() + i * kRecordWords)) {
      difference = i;
      break;
    }
  if (difference == std::numeric_limits<int64_t>::max() && count != count0)
    difference = std::min(count, count0);
  std::vector<int64_t> differences(static_cast<size_t>(world));
  comm.all_gather_host(&difference, differences.data(), sizeof difference);
  for (int32_t r = 0; r < world; ++r) {
    const int64_t d = differences[static_cast<size_t>(r)];
    if (d != std::numeric_limits<int64_t>::max() &&
        (d < 0 || d > std::min(counts[static_cast<size_t>(r)], count0)))
      fail(AMPX_ERR_CORRUPT, "rank ", r, " sent a malformed parameter comparison (", d, ")");
  }
  // The rank with the earliest difference (the lowest such rank on a tie).
  int32_t culprit = 1;
  for (int32_t r = 2; r < world; ++r)
    if (differences[r] < differences[culprit]) culprit = r;
  const int64_t at = differences[culprit];
  int64_t theirs[1 + kRecordWords] = {};
  if (comm.rank() == culprit && at < count) {
    theirs[0] = 1;
    std::copy(records.begin() + at * kRecordWords, records.begin() + (at + 1) * kRecordWords,
              theirs + 1);
  }
  comm.broadcast_host(theirs, sizeof theirs, culprit);
  std::string detail;
  if (at >= shared || !theirs[0])
    detail = cat("rank ", culprit, " has ", counts[static_cast<size_t>(culprit)],
                 " parameters and rank 0 has ", count0);
  else
    detail = cat("parameter ", at, " is ", describe_record(theirs + 1), " on rank ", culprit,
                 " but ", describe_record(first.data() + at * kRecordWords), " on rank 0");
  fail(AMPX_ERR_INVALID_ARGUMENT,
       "the ranks registered different parameters (count, order, dtypes and shapes must match "
       "on every rank): ",
       detail);
}

}  // namespace

DataParallel::DataParallel(Communicator& comm, FusedOptimizer& optimizer,
                           const DataParallelOptions& options)
    : Object(kLiveMagic, &DataParallel::destroy_shell),
      comm_(&comm),
      optimizer_(&optimizer),
      options_(options) {}

DataParallel::~DataParallel() = default;

DataParallel* DataParallel::create(Communicator& comm, FusedOptimizer& optimizer,
                                   const DataParallelOptions& options) {
  // Every rank reaches the same collectives, so that a rank whose own checks
  // fail makes the others fail too instead of leaving them waiting.
  JoinRecord mine{};
  mine.version = ampx_version();
  try {
    comm.check_usable();
    if (&optimizer.context() != &comm.context())
      fail(AMPX_ERR_DEVICE, "the optimizer belongs to a different context than the communicator");
    if (optimizer.grad_sync)
      fail(AMPX_ERR_INVALID_ARGUMENT,
           "the optimizer is already wrapped by another ampx_data_parallel; release that first");
    if (optimizer.amp_state != AmpState::Ready)
      fail(AMPX_ERR_ORDER,
           "the optimizer is between unscale/step and update; create the "
           "data-parallel wrapper between iterations");
    if (options.bucket_bytes == 0 || options.first_bucket_bytes == 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "bucket_bytes is ", options.bucket_bytes,
           " and first_bucket_bytes ", options.first_bucket_bytes, "; both must be at least 1");
    if (options.zero_stage != 0 && options.zero_stage != 1)
      fail(AMPX_ERR_INVALID_ARGUMENT, "zero_stage is ", options.zero_stage,
           "; it is 0 (replicated optimizer state) or 1 (sharded)");
  } catch (const StatusError& e) {
    mine.status = e.status();
    std::snprintf(mine.message, sizeof mine.message, "%s", e.what());
  }
  const std::vector<int64_t> records = parameter_records(optimizer);
  mine.count = static_cast<int64_t>(optimizer.params().size());
  mine.hash = fnv1a(records);

  const int32_t world = comm.size();
  std::vector<JoinRecord> all(static_cast<size_t>(world));
  comm.all_gather_host(&mine, all.data(), sizeof mine);
  for (int32_t r = 0; r < world; ++r) {
    // Another version's record need not even be laid out as this one.
    if (all[r].version != mine.version)
      fail(AMPX_ERR_INVALID_ARGUMENT, "rank ", r, " runs ampx version number ", all[r].version,
           " and rank ", comm.rank(), " runs ", mine.version,
           "; every rank of a data-parallel job needs the same library");
    if (all[r].count < 0 || all[r].count > INT32_MAX || all[r].status < AMPX_OK ||
        all[r].status > AMPX_ERR_INTERNAL)
      fail(AMPX_ERR_CORRUPT, "rank ", r, " sent a malformed setup record (count ", all[r].count,
           ", status ", all[r].status, ")");
  }
  for (int32_t r = 0; r < world; ++r) {
    if (all[r].status == AMPX_OK) continue;
    if (r == comm.rank()) fail(static_cast<ampx_status>(mine.status), mine.message);
    all[r].message[sizeof all[r].message - 1] = '\0';
    fail(static_cast<ampx_status>(all[r].status), "rank ", r, " could not join: ", all[r].message);
  }
  bool same = true;
  for (const JoinRecord& r : all) same = same && r.count == all[0].count && r.hash == all[0].hash;
  if (!same) {
    std::vector<int64_t> counts;
    for (const JoinRecord& r : all) counts.push_back(r.count);
    report_first_difference(comm, records, counts);
  }

  auto* dp = new DataParallel(comm, optimizer, options);
  try {
    dp->make_buckets();
    DeviceContext& ctx = comm.context();
    dp->inverse_world_ =
        TensorRef(make_filled_f32(ctx, vector_shape(1), 1.0f / static_cast<float>(world)));
    dp->gradients_written_ = ctx.backend().make_event();
    dp->reduced_event_ = ctx.backend().make_event();
    dp->listener_ =
        add_grad_ready_listener(ctx, [dp](DeviceTensor& leaf) { dp->on_grad_ready(leaf); });
    dp->end_listener_ = add_backward_end_listener(ctx, [dp](bool ok) { dp->on_backward_end(ok); });
    // Last, as they change the program's objects: rank 0's values, then
    // (ZeRO-1) the optimizer cut to this rank's pieces, which commits only
    // once everything it needs is allocated.
    dp->broadcast_state();
    if (options.zero_stage == 1) dp->make_shards();
  } catch (...) {
    dp->free_resources();
    delete dp;
    throw;
  }
  // Nothing fails from here on: the wrapper takes the gradients over.
  for (Member& m : dp->members_) {
    DeviceTensor& param = *m.param;
    if (param.grad) copy_converting(*m.grad, *param.grad);
    set_grad(param, m.grad.get());
  }
  comm.retain();
  optimizer.refs.fetch_add(1, std::memory_order_relaxed);
  optimizer.grad_sync = &dp->sync_hooks_;
  return dp;
}

void DataParallel::make_buckets() {
  const std::vector<FusedOptimizer::Param>& params = optimizer_->params();
  DeviceContext& ctx = comm_->context();
  members_.resize(params.size());
  // The bucket of each dtype that is being filled; the first of a dtype
  // is the small one.
  struct Open {
    size_t bucket;
    size_t bytes;
    bool first;
  };
  std::map<DType, Open> open;
  std::vector<std::vector<std::pair<size_t, size_t>>> layout;  // per bucket: (member, byte offset)
  std::vector<size_t> sizes;
  for (size_t i = params.size(); i-- > 0;) {
    const DeviceTensor& p = *params[i].param;
    const size_t bytes = (p.nbytes() + kMemberAlignment - 1) / kMemberAlignment * kMemberAlignment;
    auto it = open.find(p.dtype);
    bool first = it == open.end();
    if (!first) {
      const size_t cap = it->second.first ? options_.first_bucket_bytes : options_.bucket_bytes;
      if (it->second.bytes > 0 && it->second.bytes + bytes > cap) {
        open.erase(it);
        it = open.end();
      }
    }
    if (it == open.end()) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype;
      layout.emplace_back();
      sizes.push_back(0);
      it = open.emplace(p.dtype, Open{buckets_.size() - 1, 0, first}).first;
    }
    const size_t b = it->second.bucket;
    layout[b].emplace_back(i, it->second.bytes);
    members_[i].offset = static_cast<int64_t>(it->second.bytes / dtype_size(p.dtype));
    buckets_[b].members.push_back(i);
    it->second.bytes += bytes;
    sizes[b] = it->second.bytes;
    members_[i].bucket = static_cast<int32_t>(b);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    int64_t elements = static_cast<int64_t>(sizes[b] / dtype_size(bucket.dtype));
    // Under ZeRO-1 every rank's part of the bucket is the same size.
    const int64_t world = comm_->size();
    if (options_.zero_stage == 1) elements = (elements + world - 1) / world * world;
    bucket.grads = TensorRef(make_zeros(ctx, bucket.dtype, vector_shape(elements)));
    if (options_.reduce_in_fp32 && bucket.dtype != DType::F32)
      bucket.fp32 = TensorRef(DeviceTensor::empty(ctx, DType::F32, vector_shape(elements)));
    for (const auto& [member, offset] : layout[b]) {
      const DeviceTensor& p = *params[member].param;
      members_[member].param = retained(*params[member].param);
      members_[member].grad =
          TensorRef(DeviceTensor::alias(ctx, *bucket.grads, p.dtype, p.shape, offset));
      member_of_[&p] = member;
    }
  }
}

void DataParallel::make_shards() {
  DeviceContext& ctx = comm_->context();
  const int64_t rank = comm_->rank();
  std::vector<FusedOptimizer::Piece> kept;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const DType reduced = bucket.fp32 ? DType::F32 : bucket.dtype;
    const int64_t size = shard_size(bucket), first = rank * size;
    bucket.shard = TensorRef(make_zeros(ctx, reduced, vector_shape(size)));
    bucket.gathered = TensorRef(DeviceTensor::empty(ctx, bucket.dtype, bucket.grads->shape));
    for (size_t member : bucket.members) {
      const Member& m = members_[member];
      const int64_t begin = std::max(m.offset, first);
      const int64_t end = std::min(m.offset + m.param->numel(), first + size);
      if (begin >= end) continue;
      Piece piece;
      piece.param = TensorRef(
          DeviceTensor::alias(ctx, *m.param, bucket.dtype, vector_shape(end - begin),
                              static_cast<size_t>(begin - m.offset) * dtype_size(bucket.dtype)));
      piece.grad =
          TensorRef(DeviceTensor::alias(ctx, *bucket.shard, reduced, vector_shape(end - begin),
                                        static_cast<size_t>(begin - first) * dtype_size(reduced)));
      piece.bucket = b;
      piece.offset = begin;
      kept.push_back({member, piece.param.get(), begin - m.offset});
      pieces_.push_back(std::move(piece));
    }
  }
  norms_ = TensorRef(DeviceTensor::empty(ctx, DType::F32, vector_shape(comm_->size())));
  optimizer_->keep_pieces(kept);
  for (Piece& piece : pieces_) set_grad(*piece.param, piece.grad.get());
}

void DataParallel::finish_step() {
  reduced_ = false;
  if (options_.zero_stage != 1) return;
  // Every rank's updated part of each bucket to every rank, then into the
  // parameters (which are not flat, so their bytes go through `gathered`).
  Backend& backend = comm_->context().backend();
  const size_t rank = static_cast<size_t>(comm_->rank());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const size_t element = dtype_size(bucket.dtype);
    const size_t part = static_cast<size_t>(shard_size(bucket)) * element;
    char* all = static_cast<char*>(bucket.gathered->data());
    char* mine = all + rank * part;
    for (const Piece& piece : pieces_)
      if (piece.bucket == b)
        backend.copy(mine + (static_cast<size_t>(piece.offset) * element - rank * part),
                     piece.param->data(), piece.param->nbytes());
    comm_->transport().all_gather(mine, all, part, Stream::Compute);
    for (size_t member : bucket.members) {
      DeviceTensor& param = *members_[member].param;
      backend.copy(param.data(), all + static_cast<size_t>(members_[member].offset) * element,
                   param.nbytes());
      param.storage->note_write();
    }
  }
}

void DataParallel::zero_gradients() {
  Backend& backend = comm_->context().backend();
  for (Bucket& bucket : buckets_)
    for (DeviceTensor* t : {bucket.grads.get(), bucket.shard.get()})
      if (t && t->numel() > 0) {
        backend.fill(t->data(), dtype_size(t->dtype), 0, t->numel());
        t->storage->note_write();
      }
}

void DataParallel::Sync::global_norm(float* norm, NormType type) {
  // Without ZeRO-1 every rank holds every reduced gradient; one rank holds
  // them all anyway.
  if (owner_.options_.zero_stage != 1 || owner_.comm_->size() == 1) return;
  Transport& transport = owner_.comm_->transport();
  float* norms = static_cast<float*>(owner_.norms_->data());
  transport.all_gather(norm, norms, sizeof(float), Stream::Compute);
  // The L2 norm of the ranks' L2 norms is the L2 norm of all the gradients;
  // the largest of their largest elements is the largest.
  owner_.comm_->context()
      .backend()
      .require<AmpPrimitives>("clip_grad_norm")
      .multi_tensor_norm({{norms, DType::F32, owner_.comm_->size()}}, type, norm);
}

void DataParallel::broadcast_state() {
  Transport& transport = comm_->transport();
  for (const FusedOptimizer::Param& p : optimizer_->params()) {
    DeviceTensor* tensors[] = {p.param.get(), p.master.get(), p.state[0].get(), p.state[1].get(),
                               p.state[2].get()};
    for (DeviceTensor* t : tensors)
      if (t && t->nbytes() > 0) {
        transport.broadcast(t->data(), t->nbytes(), 0, Stream::Compute);
        t->storage->note_write();
      }
  }
}

void DataParallel::on_grad_ready(DeviceTensor& leaf) {
  const auto found = member_of_.find(&leaf);
  if (found == member_of_.end() || !sync_) return;
  Member& m = members_[found->second];
  if (leaf.grad != m.grad.get())
    fail(AMPX_ERR_ORDER, "the gradient of ", leaf.describe(),
         " is no longer the bucket view ampx_data_parallel_create attached (it was replaced "
         "with ampx_tensor_set_grad), so its reduction would be lost; keep the attached "
         "gradient (ampx_optimizer_zero_grad zeroes it in place)");
  // Another backward before the step: the gradients now hold the reduced
  // sum plus this rank's new part, and reducing them again adds the new
  // parts' average to the (equal) reduced values, as DDP does.
  reduced_ = false;
  if (m.ready)
    fail(AMPX_ERR_ORDER, "the gradient of ", leaf.describe(),
         " was reported final twice in one iteration; to accumulate gradients over "
         "micro-batches, turn synchronization off (ampx_data_parallel_set_sync(dp, 0)) for "
         "every micro-batch but the last");
  m.ready = true;
  pass_notified_ = true;
  Bucket& bucket = buckets_[static_cast<size_t>(m.bucket)];
  ++bucket.ready;
  if (options_.overlap && bucket.ready == bucket.members.size()) {
    const size_t before = next_launch_;
    launch_ready_buckets();
    launched_early_ += static_cast<int32_t>(next_launch_ - before);
  }
  comm_->transport().progress();
}

void DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].members.size())
    launch(buckets_[next_launch_++]);
}

void DataParallel::launch(Bucket& bucket) {
  comm_->check_usable();
  Backend& backend = comm_->context().backend();
  AmpPrimitives& amp = backend.require<AmpPrimitives>("the data-parallel gradient reduction");
  const int64_t count = bucket.grads->numel();
  const TensorSpan grads{bucket.grads->data(), bucket.dtype, count};
  const auto* inverse_world = static_cast<const float*>(inverse_world_->data());
  const bool divide = options_.average && comm_->size() > 1;
  TensorSpan reduced = grads;
  if (bucket.fp32) {
    reduced = {bucket.fp32->data(), DType::F32, count};
    if (divide)
      amp.multi_tensor_scale({grads}, {reduced}, inverse_world, false, nullptr);
    else
      backend.convert(reduced.data, DType::F32, grads.data, bucket.dtype, count);
  } else if (divide) {
    // Dividing before the sum, as DDP does, keeps a 16-bit sum in range.
    amp.multi_tensor_scale({grads}, {grads}, inverse_world, false, nullptr);
  }
  backend.record_event(*gradients_written_, Stream::Compute);
  backend.wait_event(Stream::Communication, *gradients_written_);
  if (bucket.shard)
    comm_->transport().reduce_scatter(reduced.data, bucket.shard->data(), shard_size(bucket),
                                      reduced.dtype, ReduceOp::Sum, Stream::Communication);
  else
    comm_->transport().all_reduce(reduced.data, count, reduced.dtype, ReduceOp::Sum,
                                  Stream::Communication);
}

void DataParallel::complete(const char* op) {
  if (!sync_)
    fail(AMPX_ERR_ORDER, op,
         " reads the gradients while data-parallel synchronization is off "
         "(ampx_data_parallel_set_sync): each rank would update with its own gradients and the "
         "replicas would drift apart; turn it on before the last micro-batch's backward");
  if (reduced_) return;
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  wait_for_reductions();
  Backend& backend = comm_->context().backend();
  for (Bucket& bucket : buckets_) {
    if (bucket.shard) {
      bucket.shard->storage->note_write();
      continue;
    }
    if (bucket.fp32)
      backend.convert(bucket.grads->data(), bucket.dtype, bucket.fp32->data(), DType::F32,
                      bucket.grads->numel());
    bucket.grads->storage->note_write();
  }
  last_launched_early_ = launched_early_;
  reset_round();
  ++reductions_;
  reduced_ = true;
}

void DataParallel::on_backward_end(bool ok) {
  if (!pass_notified_) return;
  pass_notified_ = false;
  if (ok) {
    complete("ampx_backward");
    return;
  }
  // A failed pass: wait for what was sent, so no collective still writes a
  // bucket, and start the next round afresh.
  wait_for_reductions();
  reset_round();
}

void DataParallel::wait_for_reductions() {
  Backend& backend = comm_->context().backend();
  comm_->transport().finish_started();
  backend.record_event(*reduced_event_, Stream::Communication);
  backend.wait_event(Stream::Compute, *reduced_event_);
}

void DataParallel::reset_round() {
  for (Bucket& bucket : buckets_) bucket.ready = 0;
  for (Member& m : members_) m.ready = false;
  next_launch_ = 0;
  launched_early_ = 0;
}

void DataParallel::reduce_now() {
  if (!sync_)
    fail(AMPX_ERR_ORDER,
         "synchronization is off (ampx_data_parallel_set_sync); turn it on to "
         "reduce the accumulated gradients");
  complete("ampx_data_parallel_reduce");
}

void DataParallel::set_sync(bool enabled) {
  if (!enabled && next_launch_ > 0)
    fail(AMPX_ERR_ORDER,
         "buckets of this iteration are already being reduced; turn "
         "synchronization off before the micro-batch's backward, not during it");
  sync_ = enabled;
}

void DataParallel::Sync::agree_found_inf(float* found_inf) {
  // On the compute stream: after the unscale that wrote it, before the step
  // and the scaler update that read it.
  owner_.comm_->check_usable();
  owner_.comm_->transport().all_reduce(found_inf, 1, DType::F32, ReduceOp::Max, Stream::Compute);
}

DataParallelStats DataParallel::stats() const {
  DataParallelStats s;
  s.bucket_count = static_cast<int32_t>(buckets_.size());
  for (const Bucket& b : buckets_) {
    s.bucket_bytes += b.grads->nbytes();
    if (b.fp32) s.bucket_bytes += b.fp32->nbytes();
    if (b.shard) s.bucket_bytes += b.shard->nbytes() + b.gathered->nbytes();
  }
  s.buckets_launched = static_cast<int32_t>(next_launch_);
  s.last_launched_early = last_launched_early_;
  s.reductions = reductions_;
  for (const FusedOptimizer::Param& p : optimizer_->params()) {
    s.shard_elements += p.param->numel();
    if (p.master) s.optimizer_state_bytes += p.master->nbytes();
    for (const TensorRef& t : p.state)
      if (t) s.optimizer_state_bytes += t->nbytes();
  }
  return s;
}

void DataParallel::free_resources() {
  if (listener_) remove_grad_ready_listener(comm_->context(), listener_);
  if (end_listener_) remove_backward_end_listener(comm_->context(), end_listener_);
  listener_ = end_listener_ = 0;
  members_.clear();
  member_of_.clear();
  pieces_.clear();
  buckets_.clear();
  norms_.reset();
  inverse_world_.reset();
  gradients_written_.reset();
  reduced_event_.reset();
}

void DataParallel::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  try {
    comm_->transport().finish_started();
  } catch (...) {
  }
  optimizer_->grad_sync = nullptr;
  free_resources();
  DeviceContext& ctx = comm_->context();
  ctx.retain();
  optimizer_->release();
  comm_->release();
  ctx.quarantine(this);
  ctx.release();
}

}  // namespace ampx::impl
