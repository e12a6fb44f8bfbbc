// data_parallel.cpp -- buckets, their reduction during backward, the
// setup checks of ampx_data_parallel, and the verdicts that keep a rank's
// failure from leaving the others waiting (see data_parallel.h).
#include "dist/data_parallel.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <string>

#include "amp/scaler.h"
#include "autograd/tape.h"
#include "core/backend_amp.h"
#include "core/error.h"

namespace ampx::impl {
namespace {

// Bucket members start on this boundary, so every gradient view is as
// aligned as a fresh tensor for the vectorised kernels.
constexpr size_t kMemberAlignment = 64;

// ZeRO-1: each rank's region of a gathered bucket is its part of the
// bucket, then (8-byte aligned) its verdict and whether its own call
// failed (as a rank that joins with join_failed).
size_t verdict_offset(size_t part_bytes) { return (part_bytes + 7) / 8 * 8; }
size_t region_bytes(size_t part_bytes) { return verdict_offset(part_bytes) + 2 * sizeof(int64_t); }

// One parameter as the ranks compare it: dtype, ndim, param group, extents.
constexpr size_t kRecordWords = 3 + kMaxDims;

void append_record(std::vector<int64_t>& records, const DeviceTensor& t, int32_t group) {
  records.push_back(static_cast<int64_t>(t.dtype));
  records.push_back(t.shape.ndim);
  records.push_back(group);
  for (int d = 0; d < kMaxDims; ++d) records.push_back(d < t.shape.ndim ? t.shape.dims[d] : 0);
}

std::string describe_record(const int64_t* record) {
  if (!is_valid_dtype(static_cast<int32_t>(record[0])) || record[1] < 0 || record[1] > kMaxDims)
    return "an unreadable record";
  std::string text = cat(dtype_name(static_cast<DType>(record[0])), "[");
  for (int64_t d = 0; d < record[1]; ++d) text += cat(d ? ", " : "", record[3 + d]);
  text += "]";
  if (record[2] != 0) text += cat(" in param group ", record[2]);
  return text;
}

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t hash = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

// A verdict: a failure status and the rank that had it, as one integer
// that a float holds exactly (it rides in found-inf): the status above the
// rank's complement, so that the maximum over ranks is the highest status,
// and of the ranks that had it the lowest. Ranks from 2^19 on are named
// modulo 2^19.
constexpr int kVerdictRankBits = 19;
constexpr int64_t kVerdictRankMask = (int64_t{1} << kVerdictRankBits) - 1;

int64_t verdict_of(ampx_status status, int32_t rank) {
  if (status == AMPX_OK) return 0;
  return (static_cast<int64_t>(status) << kVerdictRankBits) |
         (kVerdictRankMask - (rank & kVerdictRankMask));
}

// A rank's FP8 slot count as an int32 MAX key: the count (or its
// negation, for the smallest count) above the rank's complement, so that
// the maximum over ranks names the largest count (smallest, negated) and
// the lowest rank that has it. Counts from 2^18 and ranks from 2^12 on are
// named modulo their field.
constexpr int kSlotKeyRankBits = 12;
constexpr int64_t kSlotKeyRankMask = (int64_t{1} << kSlotKeyRankBits) - 1;
constexpr int64_t kMaxKeyedSlots = (int64_t{1} << 18) - 1;

int32_t slot_key(int64_t count, int32_t rank) {
  return static_cast<int32_t>(count * (kSlotKeyRankMask + 1) +
                              (kSlotKeyRankMask - (rank & kSlotKeyRankMask)));
}

struct SlotKey {
  int64_t count;
  int64_t rank;
};

SlotKey slot_key_parts(int32_t key) {
  const int64_t low = static_cast<int64_t>(key) & kSlotKeyRankMask;
  return SlotKey{(static_cast<int64_t>(key) - low) / (kSlotKeyRankMask + 1),
                 kSlotKeyRankMask - low};
}

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// What each rank tells the others before anything else: its library's
// version (a job may mix builds), whether it could take part at all (and
// why not), and digests of its settings and parameters.
struct JoinRecord {
  int64_t version;  // ampx_version()
  int64_t status;   // AMPX_OK, or why this rank's own checks failed
  int64_t count;    // parameters
  uint64_t hash;    // of the parameter records
  int64_t settings_count;
  uint64_t settings_hash;
  char message[208];
};
static_assert(sizeof(JoinRecord) == 256, "a fixed-size record, the same on every rank");

std::vector<int64_t> parameter_records(const FusedOptimizer& optimizer) {
  std::vector<int64_t> records;
  for (const FusedOptimizer::Param& p : optimizer.params())
    append_record(records, *p.param, p.group);
  return records;
}

// One item of what the ranks' setups must agree on, printed exactly.
struct Setting {
  char name[48];
  char value[80];
};
static_assert(sizeof(Setting) == 128, "a fixed-size record, the same on every rank");

class Settings {
 public:
  template <class Value>
  void add(const std::string& name, const Value& value) {
    Setting s{};
    std::snprintf(s.name, sizeof s.name, "%s", name.c_str());
    std::snprintf(s.value, sizeof s.value, "%s", cat(value).c_str());
    list.push_back(s);
  }
  void add_number(const std::string& name, double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", value);  // round-trips: equal text, equal value
    add(name, text);
  }
  std::vector<Setting> list;
};

const char* decay_name(int64_t decay) {
  switch (decay) {
    case math::kLrConstant:
      return "constant";
    case math::kLrLinear:
      return "linear";
    case math::kLrCosine:
      return "cosine";
    case math::kLrStep:
      return "step";
  }
  return "unknown";
}

// Everything that must be equal on every rank for the replicas to stay
// equal, besides the parameters: the wrapper's options, the optimizer's
// kind, hyperparameters, param groups and schedules, and the attached
// scaler's options and state. In an order where a count comes before what
// it counts, so the first difference names the cause.
std::vector<Setting> settings_of(FusedOptimizer& optimizer, const DataParallelOptions& options) {
  Settings s;
  s.add("bucket_bytes", options.bucket_bytes);
  s.add("first_bucket_bytes", options.first_bucket_bytes);
  s.add("average", options.average ? 1 : 0);
  s.add("reduce_in_fp32", options.reduce_in_fp32 ? 1 : 0);
  s.add("overlap", options.overlap ? 1 : 0);
  s.add("zero_stage", options.zero_stage);
  const OptimizerHyper& h = optimizer.hyper();
  if (h.kind == OptimizerKind::Sgd) {
    s.add("optimizer", "SGD");
    s.add_number("momentum", h.sgd.momentum);
    s.add_number("dampening", h.sgd.dampening);
    s.add("nesterov", h.sgd.nesterov ? 1 : 0);
    s.add("maximize", h.sgd.maximize ? 1 : 0);
  } else {
    s.add("optimizer", h.adam.decoupled_weight_decay ? "AdamW" : "Adam");
    s.add_number("beta1", h.adam.beta1);
    s.add_number("beta2", h.adam.beta2);
    s.add_number("eps", h.adam.eps);
    s.add("amsgrad", h.adam.amsgrad ? 1 : 0);
    s.add("maximize", h.adam.maximize ? 1 : 0);
  }
  s.add("param groups", optimizer.group_count());
  for (int32_t g = 0; g < optimizer.group_count(); ++g) {
    const std::string group = cat("group ", g, " ");
    s.add_number(group + "lr", optimizer.lr(g));
    s.add_number(group + "weight_decay", optimizer.weight_decay(g));
    const math::LrSchedule& schedule = optimizer.schedule(g);
    s.add(group + "schedule", decay_name(schedule.decay));
    s.add(group + "schedule warmup_steps", schedule.warmup_steps);
    s.add_number(group + "schedule warmup_start_factor", schedule.warmup_start_factor);
    s.add(group + "schedule decay_steps", schedule.decay_steps);
    s.add_number(group + "schedule end_factor", schedule.end_factor);
    s.add_number(group + "schedule min_lr", schedule.min_lr);
    s.add_number(group + "schedule gamma", schedule.gamma);
  }
  LossScaler* scaler = optimizer.iteration().scaler();
  s.add("scaler", scaler ? "attached" : "none");
  if (scaler) {
    const ScalerOptions& o = scaler->options();
    s.add("scaler enabled", o.enabled ? 1 : 0);
    s.add_number("scaler growth_factor", o.growth_factor);
    s.add_number("scaler backoff_factor", o.backoff_factor);
    s.add("scaler growth_interval", o.growth_interval);
    s.add("scaler hysteresis", o.hysteresis);
    s.add_number("scaler min_scale", o.min_scale);
    s.add_number("scaler max_scale", o.max_scale);
    s.add("scaler consecutive_hysteresis", o.consecutive_hysteresis ? 1 : 0);
    s.add("scaler clamp_to_max_scale", o.clamp_to_max_scale ? 1 : 0);
    const math::ScalerState state = scaler->read_state();
    s.add_number("scaler scale", state.scale);
    s.add("scaler growth_tracker", state.growth_tracker);
    s.add("scaler hysteresis_left", state.hysteresis_left);
  }
  return s.list;
}

// The first place where some rank's list of fixed-size records differs
// from rank 0's: called on every rank once the digests differ, making the
// same collectives on every rank whatever the lists.
struct Difference {
  int32_t rank = 0;   // the rank that differs first (the lowest on a tie)
  int64_t index = 0;  // the record where it does
  std::vector<unsigned char> theirs, first;  // that record of the rank and of rank 0;
                                             // empty where its list is shorter
};

Difference first_difference(Communicator& comm, const void* data, size_t record_bytes,
                            const std::vector<int64_t>& counts, const char* what) {
  const auto* records = static_cast<const unsigned char*>(data);
  const int32_t world = comm.size();
  const int64_t count = counts[static_cast<size_t>(comm.rank())];
  // Rank 0's first `shared` records (as many as every rank has, so no
  // rank's claim sizes another's memory) to everyone, then every rank's
  // first difference.
  const int64_t count0 = counts[0];
  const int64_t shared = *std::min_element(counts.begin(), counts.end());
  std::vector<unsigned char> first(static_cast<size_t>(shared) * record_bytes);
  if (comm.rank() == 0) std::copy(records, records + first.size(), first.begin());
  comm.broadcast_host(first.data(), first.size(), 0, what);
  int64_t difference = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < shared; ++i)
    if (std::memcmp(records + i * record_bytes, first.data() + i * record_bytes, record_bytes)) {
      difference = i;
      break;
    }
  if (difference == std::numeric_limits<int64_t>::max() && count != count0)
    difference = std::min(count, count0);
  std::vector<int64_t> differences(static_cast<size_t>(world));
  comm.all_gather_host(&difference, differences.data(), sizeof difference, what);
  for (int32_t r = 0; r < world; ++r) {
    const int64_t d = differences[static_cast<size_t>(r)];
    if (d != std::numeric_limits<int64_t>::max() &&
        (d < 0 || d > std::min(counts[static_cast<size_t>(r)], count0)))
      fail(AMPX_ERR_CORRUPT, "rank ", r, " sent a malformed comparison (", d, ")");
  }
  Difference found;
  found.rank = 1;
  for (int32_t r = 2; r < world; ++r)
    if (differences[static_cast<size_t>(r)] < differences[static_cast<size_t>(found.rank)])
      found.rank = r;
  found.index = differences[static_cast<size_t>(found.rank)];
  // That record of the culprit and of rank 0, each with a flag saying
  // whether its list reaches that far.
  for (int32_t from : {found.rank, 0}) {
    std::vector<unsigned char> record(record_bytes + 1);
    const int64_t has = counts[static_cast<size_t>(from)];
    if (comm.rank() == from && found.index < has) {
      record[0] = 1;
      std::copy(records + found.index * record_bytes, records + (found.index + 1) * record_bytes,
                record.begin() + 1);
    }
    comm.broadcast_host(record.data(), record.size(), from, what);
    if (record[0]) (from == 0 ? found.first : found.theirs).assign(record.begin() + 1, record.end());
  }
  return found;
}

[[noreturn]] void report_parameter_difference(Communicator& comm,
                                              const std::vector<int64_t>& records,
                                              const std::vector<int64_t>& counts) {
  const Difference d =
      first_difference(comm, records.data(), kRecordWords * sizeof(int64_t), counts,
                       "the comparison of the ranks' parameters (ampx_data_parallel_create)");
  std::string detail;
  if (d.theirs.empty() || d.first.empty()) {
    detail = cat("rank ", d.rank, " has ", counts[static_cast<size_t>(d.rank)],
                 " parameters and rank 0 has ", counts[0]);
  } else {
    int64_t theirs[kRecordWords], first[kRecordWords];
    std::memcpy(theirs, d.theirs.data(), sizeof theirs);
    std::memcpy(first, d.first.data(), sizeof first);
    detail = cat("parameter ", d.index, " is ", describe_record(theirs), " on rank ", d.rank,
                 " but ", describe_record(first), " on rank 0");
  }
  fail(AMPX_ERR_INVALID_ARGUMENT,
       "the ranks registered different parameters (count, order, dtypes, shapes and param "
       "groups must match on every rank): ",
       detail);
}

[[noreturn]] void report_setting_difference(Communicator& comm,
                                            const std::vector<Setting>& settings,
                                            const std::vector<int64_t>& counts) {
  const Difference d =
      first_difference(comm, settings.data(), sizeof(Setting), counts,
                       "the comparison of the ranks' settings (ampx_data_parallel_create)");
  auto text = [](const std::vector<unsigned char>& bytes) {
    Setting s{};
    std::memcpy(&s, bytes.data(), sizeof s);
    s.name[sizeof s.name - 1] = s.value[sizeof s.value - 1] = '\0';
    return s;
  };
  std::string detail;
  if (d.theirs.empty() || d.first.empty()) {
    detail = cat("rank ", d.rank, " has ", counts[static_cast<size_t>(d.rank)],
                 " settings and rank 0 has ", counts[0]);
  } else {
    const Setting theirs = text(d.theirs), first = text(d.first);
    if (std::strcmp(theirs.name, first.name) == 0)
      detail = cat(first.name, ": rank ", d.rank, " has ", theirs.value, ", rank 0 has ",
                   first.value);
    else
      detail = cat("rank ", d.rank, " has ", theirs.name, " ", theirs.value, " where rank 0 has ",
                   first.name, " ", first.value);
  }
  fail(AMPX_ERR_INVALID_ARGUMENT,
       "the ranks were set up differently (the wrapper's options, the optimizer's kind, "
       "hyperparameters, param groups and schedules, and an attached scaler's options and state "
       "must match on every rank): ",
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

DataParallel* DataParallel::create(Communicator& comm, FusedOptimizer* optimizer,
                                   const DataParallelOptions& options, const OwnFailure& own) {
  // Every rank reaches the same collectives, so that a rank whose own checks
  // fail makes the others fail too instead of leaving them waiting.
  JoinRecord mine{};
  mine.version = ampx_version();
  std::vector<int64_t> records;
  std::vector<Setting> settings;
  try {
    if (own.status != AMPX_OK) throw StatusError(own.status, own.message);
    if (!optimizer) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'optimizer' is NULL");
    comm.check_usable();
    if (&optimizer->context() != &comm.context())
      fail(AMPX_ERR_DEVICE, "the optimizer belongs to a different context than the communicator");
    optimizer->iteration().check_sync_attachable();
    if (options.bucket_bytes == 0 || options.first_bucket_bytes == 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "bucket_bytes is ", options.bucket_bytes,
           " and first_bucket_bytes ", options.first_bucket_bytes, "; both must be at least 1");
    if (options.zero_stage != 0 && options.zero_stage != 1)
      fail(AMPX_ERR_INVALID_ARGUMENT, "zero_stage is ", options.zero_stage,
           "; it is 0 (replicated optimizer state) or 1 (sharded)");
    records = parameter_records(*optimizer);
    settings = settings_of(*optimizer, options);
  } catch (const StatusError& e) {
    mine.status = e.status();
    std::snprintf(mine.message, sizeof mine.message, "%s", e.what());
    records.clear();
    settings.clear();
  }
  mine.count = static_cast<int64_t>(records.size() / kRecordWords);
  mine.hash = fnv1a(records.data(), records.size() * sizeof(int64_t));
  mine.settings_count = static_cast<int64_t>(settings.size());
  mine.settings_hash = fnv1a(settings.data(), settings.size() * sizeof(Setting));

  const int32_t world = comm.size();
  std::vector<JoinRecord> all(static_cast<size_t>(world));
  comm.all_gather_host(&mine, all.data(), sizeof mine,
                       "all-gather of the ranks' setup records (ampx_data_parallel_create)");
  for (int32_t r = 0; r < world; ++r) {
    // Another version's record need not even be laid out as this one.
    if (all[r].version != mine.version)
      fail(AMPX_ERR_INVALID_ARGUMENT, "rank ", r, " runs ampx version number ", all[r].version,
           " and rank ", comm.rank(), " runs ", mine.version,
           "; every rank of a data-parallel job needs the same library");
    if (all[r].count < 0 || all[r].count > INT32_MAX || all[r].settings_count < 0 ||
        all[r].settings_count > INT32_MAX || all[r].status < AMPX_OK ||
        all[r].status > AMPX_ERR_INTERNAL)
      fail(AMPX_ERR_CORRUPT, "rank ", r, " sent a malformed setup record (count ", all[r].count,
           ", status ", all[r].status, ")");
  }
  for (int32_t r = 0; r < world; ++r) {
    if (all[r].status == AMPX_OK) continue;
    if (r == comm.rank()) fail(static_cast<ampx_status>(mine.status), mine.message);
    all[r].message[sizeof all[r].message - 1] = '\0';
    fail(static_cast<ampx_status>(all[r].status), "rank ", r, " could not join (",
         ampx_status_string(static_cast<ampx_status>(all[r].status)), "): ", all[r].message);
  }
  bool same_settings = true, same_params = true;
  for (const JoinRecord& r : all) {
    same_settings = same_settings && r.settings_count == all[0].settings_count &&
                    r.settings_hash == all[0].settings_hash;
    same_params = same_params && r.count == all[0].count && r.hash == all[0].hash;
  }
  if (!same_settings) {
    std::vector<int64_t> counts;
    for (const JoinRecord& r : all) counts.push_back(r.settings_count);
    report_setting_difference(comm, settings, counts);
  }
  if (!same_params) {
    std::vector<int64_t> counts;
    for (const JoinRecord& r : all) counts.push_back(r.count);
    report_parameter_difference(comm, records, counts);
  }

  auto* dp = new DataParallel(comm, *optimizer, options);
  try {
    dp->make_buckets();
    DeviceContext& ctx = comm.context();
    dp->inverse_world_ =
        TensorRef(make_filled_f32(ctx, vector_shape(1), 1.0f / static_cast<float>(world)));
    dp->agreed_ = TensorRef(make_filled_f32(ctx, vector_shape(5), 0.0f));
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
  optimizer->refs.fetch_add(1, std::memory_order_relaxed);
  optimizer->iteration().attach_sync(dp->sync_hooks_);
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
    const int64_t size = shard_size(bucket), first = rank * size;
    const size_t element = dtype_size(bucket.dtype);
    // The step sees the reduced gradient in the gradient's own type, as
    // without ZeRO-1: an fp32 reduction is rounded once into `shard`.
    bucket.shard = TensorRef(make_zeros(ctx, bucket.dtype, vector_shape(size)));
    if (bucket.fp32)
      bucket.shard_fp32 = TensorRef(DeviceTensor::empty(ctx, DType::F32, vector_shape(size)));
    const size_t stride = region_bytes(static_cast<size_t>(size) * element);
    bucket.gathered = TensorRef(DeviceTensor::empty(
        ctx, bucket.dtype, vector_shape(static_cast<int64_t>(stride / element) * comm_->size())));
    for (size_t member : bucket.members) {
      const Member& m = members_[member];
      const int64_t begin = std::max(m.offset, first);
      const int64_t end = std::min(m.offset + m.param->numel(), first + size);
      if (begin >= end) continue;
      Piece piece;
      piece.param = TensorRef(
          DeviceTensor::alias(ctx, *m.param, bucket.dtype, vector_shape(end - begin),
                              static_cast<size_t>(begin - m.offset) * element));
      piece.grad =
          TensorRef(DeviceTensor::alias(ctx, *bucket.shard, bucket.dtype, vector_shape(end - begin),
                                        static_cast<size_t>(begin - first) * element));
      piece.bucket = b;
      piece.offset = begin;
      kept.push_back({member, piece.param.get(), begin - m.offset});
      pieces_.push_back(std::move(piece));
    }
  }
  norms_ = TensorRef(DeviceTensor::empty(ctx, DType::F32, vector_shape(3 * comm_->size())));
  optimizer_->keep_pieces(kept);
  for (Piece& piece : pieces_) set_grad(*piece.param, piece.grad.get());
}

void DataParallel::finish_step(int64_t own, bool joined) {
  if (!joined) {
    reduced_ = false;
    pending_ = AMPX_OK;
  }
  if (options_.zero_stage != 1) return;
  check_usable();
  // Every rank's updated part of each bucket, followed by its verdict word,
  // to every rank, then into the parameters (which are not flat, so their
  // bytes go through `gathered`). A rank whose step failed sends its part
  // unchanged, so the replicas stay equal whatever the verdict.
  Backend& backend = comm_->context().backend();
  const int32_t world = comm_->size();
  const size_t rank = static_cast<size_t>(comm_->rank());
  ++agreements_;
  int64_t verdict = 0;
  std::vector<bool> joined_ranks(static_cast<size_t>(world));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const size_t element = dtype_size(bucket.dtype);
    const int64_t shard = shard_size(bucket);
    const size_t part = static_cast<size_t>(shard) * element, stride = region_bytes(part);
    const size_t word = verdict_offset(part);
    char* all = static_cast<char*>(bucket.gathered->data());
    char* mine = all + rank * stride;
    for (const Piece& piece : pieces_)
      if (piece.bucket == b)
        backend.copy(mine + (static_cast<size_t>(piece.offset) * element - rank * part),
                     piece.param->data(), piece.param->nbytes());
    backend.fill(mine + word, sizeof(int64_t), static_cast<uint64_t>(own), 1);
    backend.fill(mine + word + sizeof(int64_t), sizeof(int64_t), joined ? 1 : 0, 1);
    comm_->all_gather({bucket.gathered.get()}, mine, all, stride, Stream::Compute,
                      "all-gather of the stepped parameters (ZeRO-1)");
    for (size_t member : bucket.members) {
      DeviceTensor& param = *members_[member].param;
      const int64_t begin = members_[member].offset, end = begin + param.numel();
      for (int64_t at = begin; at < end;) {
        const int64_t r = at / shard, stop = std::min(end, (r + 1) * shard);
        backend.copy(static_cast<char*>(param.data()) + static_cast<size_t>(at - begin) * element,
                     all + static_cast<size_t>(r) * stride +
                         static_cast<size_t>(at - r * shard) * element,
                     static_cast<size_t>(stop - at) * element);
        at = stop;
      }
      param.storage->note_write();
    }
    if (backend.synchronous())
      for (int32_t r = 0; r < world; ++r) {
        int64_t theirs[2] = {};
        backend.copy_to_host(theirs, all + static_cast<size_t>(r) * stride + word, sizeof theirs);
        verdict = std::max(verdict, theirs[0]);
        if (theirs[1]) joined_ranks[static_cast<size_t>(r)] = true;
      }
  }
  settle(verdict, std::find(joined_ranks.begin(), joined_ranks.end(), false) == joined_ranks.end(),
         "optimizer step");
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

int64_t DataParallel::own_verdict(ampx_status status) const {
  return verdict_of(status != AMPX_OK ? status : pending_, comm_->rank());
}

void DataParallel::settle(int64_t verdict, bool all_failed, const char* op) {
  if (verdict == 0) return;
  const auto status = static_cast<ampx_status>(verdict >> kVerdictRankBits);
  const int64_t rank = kVerdictRankMask - (verdict & kVerdictRankMask);
  if (verdict < 0 || status < AMPX_ERR_INVALID_ARGUMENT || status > AMPX_ERR_INTERNAL) {
    failure_ = cat("a malformed verdict (", verdict, ") in ", op);
    fail(AMPX_ERR_CORRUPT, "the ranks exchanged ", failure_);
  }
  const std::string who =
      rank == comm_->rank() ? cat("this rank (", rank, ")") : cat("rank ", rank);
  const std::string what = cat(who, " failed its ", op,
                               " (or an earlier call of this iteration) with ",
                               ampx_status_string(status));
  // Where every rank's own call failed (all joined), all stopped at the
  // same point and the iteration can go on; otherwise some ranks went
  // further than others.
  if (all_failed)
    fail(status, what, " (its own error message says why), as did every rank");
  failure_ = what;
  fail(status, what,
       " (its own error message says why); so every rank fails this call, and the "
       "data-parallel wrapper can no longer be used on any rank: release it and wrap the "
       "optimizer again (ampx_data_parallel_create, on every rank), or save a checkpoint and "
       "end");
}

void DataParallel::check_usable() {
  comm_->check_usable();
  if (!failure_.empty())
    fail(AMPX_ERR_ORDER, "this data-parallel wrapper failed earlier: ", failure_,
         "; its ranks no longer agree where the iteration is, so every collective call through "
         "it fails: release it (ampx_data_parallel_release) and wrap the optimizer again on every "
         "rank, or save a checkpoint and end");
}

void DataParallel::global_norm(float* norm, NormType type, int64_t own) {
  check_usable();
  DeviceContext& ctx = comm_->context();
  Backend& backend = ctx.backend();
  const int32_t world = comm_->size();
  // Per rank: its norm, its verdict, and 1 where its own call failed (a
  // rank that joins: norm nullptr).
  float* records = static_cast<float*>(norms_->data());
  float* mine = records + 3 * comm_->rank();
  if (norm)
    backend.copy(mine, norm, sizeof(float));
  else
    backend.fill(mine, sizeof(float), 0, 1);
  backend.fill(mine + 1, sizeof(float), float_bits(static_cast<float>(own)), 1);
  backend.fill(mine + 2, sizeof(float), float_bits(norm ? 0.0f : 1.0f), 1);
  ++agreements_;
  comm_->all_gather({norms_.get()}, mine, records, 3 * sizeof(float), Stream::Compute,
                    "all-gather of the partial gradient norms (ZeRO-1 clipping)");
  if (backend.synchronous()) {
    std::vector<float> host(static_cast<size_t>(3 * world));
    backend.copy_to_host(host.data(), records, host.size() * sizeof(float));
    int64_t verdict = 0;
    bool all_joined = true;
    for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
      verdict = std::max(verdict, static_cast<int64_t>(host[3 * r + 1]));
      all_joined = all_joined && host[3 * r + 2] != 0.0f;
    }
    settle(verdict, all_joined, "clipping (ampx_clip_grad_norm)");
  }
  if (!norm) return;
  // The L2 norm of the ranks' L2 norms is the L2 norm of all the gradients;
  // the largest of their largest elements is the largest.
  std::vector<TensorSpan> norms;
  for (int32_t r = 0; r < world; ++r) norms.push_back({records + 3 * r, DType::F32, 1});
  backend.require<AmpPrimitives>("clip_grad_norm").multi_tensor_norm(norms, type, norm);
}

void DataParallel::Sync::global_norm(float* norm, NormType type) {
  // Without ZeRO-1 every rank holds every reduced gradient; one rank holds
  // them all anyway.
  if (owner_.options_.zero_stage != 1 || owner_.comm_->size() == 1) return;
  owner_.global_norm(norm, type, owner_.own_verdict(AMPX_OK));
}

float* DataParallel::agreed_buffer(int64_t length) {
  const int64_t need = 5 + std::max(length, amax_count());
  if (agreed_->numel() < need)
    agreed_ = TensorRef(make_filled_f32(comm_->context(), vector_shape(need), 0.0f));
  return static_cast<float*>(agreed_->data());
}

int64_t DataParallel::amax_length() const {
  // Where the host reads the reduced keys, the count agreed at the last
  // reduction, so the reduction has one length on every rank also when the
  // recipes differ; elsewhere (a GPU) nothing is read back and the length
  // is this rank's own count.
  return comm_->context().backend().synchronous() ? agreed_slots_ : amax_count();
}

void DataParallel::move_amaxes(float* amaxes, int64_t begin, int64_t end, bool into_recipe) {
  Backend& backend = comm_->context().backend();
  int64_t first = 0;  // of the span
  if (fp8_)
    for (const Fp8Recipe::AmaxSpan& span : fp8_->step_amaxes()) {
      const int64_t from = std::max(begin, first), to = std::min(end, first + span.count);
      if (from < to) {
        float* slot = span.data + (from - first);
        const size_t bytes = static_cast<size_t>(to - from) * sizeof(float);
        if (into_recipe)
          backend.copy(slot, amaxes + from, bytes);
        else
          backend.copy(amaxes + from, slot, bytes);
      }
      first += span.count;
    }
  const int64_t past = std::max(begin, first);
  if (!into_recipe && past < end)
    backend.fill(amaxes + past, sizeof(float), 0, end - past);
}

void DataParallel::stage_amaxes(float* keys, int64_t length) {
  Backend& backend = comm_->context().backend();
  const int64_t count = std::min(amax_count(), kMaxKeyedSlots);
  const int32_t rank = comm_->rank();
  backend.fill(keys, sizeof(int32_t), static_cast<uint32_t>(slot_key(count, rank)), 1);
  backend.fill(keys + 1, sizeof(int32_t), static_cast<uint32_t>(slot_key(-count, rank)), 1);
  move_amaxes(keys + 2, 0, length, false);
}

void DataParallel::finish_amaxes(float* keys, int64_t length, const char* op) {
  Backend& backend = comm_->context().backend();
  int64_t reduced = length;
  if (backend.synchronous()) {
    int32_t host[2];
    backend.copy_to_host(host, keys, sizeof host);
    const SlotKey most = slot_key_parts(host[0]);
    SlotKey fewest = slot_key_parts(host[1]);
    fewest.count = -fewest.count;
    if (most.count != fewest.count)
      fail(AMPX_ERR_INVALID_ARGUMENT, "the ranks' FP8 recipes have different slot counts at ", op,
           ": rank ", most.rank, " has ", most.count, ", rank ", fewest.rank, " has ",
           fewest.count, " (this rank, ", comm_->rank(), ", has ", amax_count(),
           "); every rank must attach a recipe with the same slots, in the same order "
           "(ampx_data_parallel_set_fp8_recipe), so every rank fails this call and no amax "
           "was reduced");
    // Slots added since the last agreement (the first step's forward makes
    // them), on every rank alike: their amaxes in a reduction of their own.
    if (most.count > length) {
      float* amaxes = keys + 2;
      move_amaxes(amaxes, length, most.count, false);
      comm_->all_reduce({agreed_.get()}, amaxes + length, most.count - length, DType::I32,
                        ReduceOp::Max, Stream::Compute, "all-reduce of the new FP8 amaxes");
      reduced = most.count;
    }
    agreed_slots_ = most.count;
  }
  if (!fp8_) return;
  move_amaxes(keys + 2, 0, reduced, true);
  fp8_->note_amaxes_reduced();
}

void DataParallel::set_fp8_recipe(Fp8Recipe* recipe) {
  if (recipe) {
    if (&recipe->context() != &comm_->context())
      fail(AMPX_ERR_DEVICE, "'recipe' belongs to another context than the wrapper's communicator");
    if (recipe->amax_reduction() && recipe->amax_reduction() != &amax_sync_)
      fail(AMPX_ERR_INVALID_ARGUMENT,
           "'recipe' is attached to another data-parallel wrapper, which reduces its amaxes; "
           "detach it there first (ampx_data_parallel_set_fp8_recipe(other, NULL))");
    if (recipe == fp8_) return;
    recipe->retain();
  }
  if (fp8_) {
    fp8_->set_amax_reduction(nullptr);
    fp8_->release();
  }
  fp8_ = recipe;
  if (fp8_) fp8_->set_amax_reduction(&amax_sync_);
}

void DataParallel::reduce_amaxes() {
  // As found-inf's reduction below, without found-inf: the amaxes are
  // non-negative floats or NaN, whose bits as int32 order them as
  // backend_fp8.h does (NaN above inf), so an integer MAX needs no NaN rule
  // from the library. Also with no slot: another rank may have some.
  check_usable();
  const int64_t length = amax_length();
  float* agreed = agreed_buffer(length);
  stage_amaxes(agreed + 3, length);
  comm_->all_reduce({agreed_.get()}, agreed + 3, 2 + length, DType::I32, ReduceOp::Max,
                    Stream::Compute, "all-reduce of the FP8 amaxes");
  finish_amaxes(agreed + 3, length, "ampx_fp8_recipe_update");
}

void DataParallel::agree_found_inf(float* found_inf, int64_t own, const char* op) {
  // On the compute stream: after the unscale that wrote it, before the step
  // and the scaler update that read it. With found-inf go the verdict and
  // minus "this rank's own call failed" (a rank that joins: found_inf
  // nullptr), whose maximum is -1 when every rank's did, and the FP8
  // recipe's step amaxes (the forward and backward of this step are done).
  // All are MAX-reduced as int32: found-inf and the verdict are
  // non-negative floats and the amaxes non-negative or NaN, whose bits
  // order as their values (NaN above inf), and of 0 and -1 the larger is 0
  // either way.
  check_usable();
  Backend& backend = comm_->context().backend();
  const int64_t length = amax_length();
  float* agreed = agreed_buffer(length);
  if (found_inf)
    backend.copy(agreed, found_inf, sizeof(float));
  else
    backend.fill(agreed, sizeof(float), 0, 1);
  backend.fill(agreed + 1, sizeof(float), float_bits(static_cast<float>(own)), 1);
  backend.fill(agreed + 2, sizeof(float), float_bits(found_inf ? 0.0f : -1.0f), 1);
  stage_amaxes(agreed + 3, length);
  ++agreements_;
  comm_->all_reduce({agreed_.get()}, agreed, 5 + length, DType::I32, ReduceOp::Max,
                    Stream::Compute, "all-reduce of found-inf");
  if (backend.synchronous()) {
    float host[3];
    backend.copy_to_host(host, agreed, sizeof host);
    settle(static_cast<int64_t>(host[1]), host[2] < 0.0f, op);
  }
  // Where the host does not read the verdict (a GPU), a failed rank still
  // makes every rank skip the step: found-inf is non-zero when either is.
  if (found_inf)
    backend.require<AmpPrimitives>("the found-inf reduction")
        .multi_tensor_norm({{agreed, DType::F32, 2}}, NormType::Inf, found_inf);
  finish_amaxes(agreed + 3, length, op);
}

void DataParallel::Sync::agree_found_inf(float* found_inf) {
  owner_.agree_found_inf(found_inf, owner_.own_verdict(AMPX_OK), "unscale");
}

void DataParallel::Sync::join_failed(Call call, uint64_t before, ampx_status status,
                                     const std::string& message, const char* op) noexcept {
  (void)message;
  DataParallel& dp = owner_;
  try {
    // Nothing is left to join where the wrapper or its communicator has
    // failed (every rank knows), or where this call's verdict went out.
    // Synchronization is state, the same on every rank running the same
    // program: while it is off the others refuse the call too.
    if (!dp.failure_.empty() || dp.comm_->failed() || dp.agreements_ != before || !dp.sync_)
      return;
    const int64_t own = dp.own_verdict(status);
    dp.complete_anyway(op);
    const bool sharded = dp.options_.zero_stage == 1 && dp.comm_->size() > 1;
    switch (call) {
      case Call::ReadGradients:
        return;
      case Call::Unscale:
        dp.agree_found_inf(nullptr, own, "unscale");
        return;
      case Call::ClipNorm:
        if (sharded) dp.global_norm(nullptr, NormType::L2, own);
        return;
      case Call::Step:
        // Unsharded, the step makes no collective: the others have gone
        // on, and this rank may still retry its step.
        if (sharded) dp.finish_step(own, true);
        return;
    }
  } catch (...) {
    // The verdict this rank sent fails it too; its own error is the one
    // its caller reports.
  }
}

void DataParallel::broadcast_state() {
  // Rank 0 owns the parameters and everything the optimizer keeps for
  // them, step counts included (Adam's bias correction, the schedules'
  // position), so that the replicas start equal.
  auto send = [&](DeviceTensor* t) {
    if (!t || t->nbytes() == 0) return;
    comm_->broadcast({t}, t->data(), t->nbytes(), 0, Stream::Compute,
                     "broadcast of rank 0's parameters and optimizer state "
                     "(ampx_data_parallel_create)");
    t->storage->note_write();
  };
  for (const FusedOptimizer::Param& p : optimizer_->params())
    for (DeviceTensor* t : {p.param.get(), p.master.get(), p.state[0].get(), p.state[1].get(),
                            p.state[2].get()})
      send(t);
  send(&optimizer_->param_step_counts());
  send(&optimizer_->steps_taken());
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
  check_usable();
  // Another backward before the step: the gradients now hold the reduced
  // sum plus this rank's new part, and reducing them again adds the new
  // parts' average to the (equal) reduced values, as DDP does.
  if (reduced_) pending_ = AMPX_OK;
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
  comm_->progress();
}

void DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].members.size())
    launch(buckets_[next_launch_++]);
}

void DataParallel::launch(Bucket& bucket) {
  check_usable();
  Backend& backend = comm_->context().backend();
  AmpPrimitives& amp = backend.require<AmpPrimitives>("the data-parallel gradient reduction");
  const int64_t count = bucket.grads->numel();
  const TensorSpan grads{bucket.grads->data(), bucket.dtype, count};
  const auto* inverse_world = static_cast<const float*>(inverse_world_->data());
  const bool divide = options_.average && comm_->size() > 1;
  TensorSpan reduced = grads;
  DeviceTensor* reduced_tensor = bucket.grads.get();
  if (bucket.fp32) {
    reduced = {bucket.fp32->data(), DType::F32, count};
    reduced_tensor = bucket.fp32.get();
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
  if (bucket.shard) {
    DeviceTensor* target = bucket.shard_fp32 ? bucket.shard_fp32.get() : bucket.shard.get();
    comm_->reduce_scatter({reduced_tensor, target}, reduced.data, target->data(),
                          shard_size(bucket), reduced.dtype, ReduceOp::Sum, Stream::Communication,
                          "reduce-scatter of a gradient bucket");
  } else {
    comm_->all_reduce({reduced_tensor}, reduced.data, count, reduced.dtype, ReduceOp::Sum,
                      Stream::Communication, "all-reduce of a gradient bucket");
  }
}

void DataParallel::complete(const char* op) {
  check_usable();
  if (!sync_)
    fail(AMPX_ERR_ORDER, op,
         " reads the gradients while data-parallel synchronization is off "
         "(ampx_data_parallel_set_sync): each rank would update with its own gradients and the "
         "replicas would drift apart; turn it on before the last micro-batch's backward");
  complete_anyway(op);
}

void DataParallel::complete_anyway(const char* op) {
  if (reduced_) return;
  check_usable();
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  wait_for_reductions(op);
  Backend& backend = comm_->context().backend();
  for (Bucket& bucket : buckets_) {
    if (bucket.shard) {
      if (bucket.shard_fp32)
        backend.convert(bucket.shard->data(), bucket.dtype, bucket.shard_fp32->data(), DType::F32,
                        bucket.shard->numel());
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
  // A pass that failed on this rank: the other ranks' passes reduce every
  // bucket, so this one sends the rest too (nobody waits for it), and its
  // next verdict of the iteration carries the failure.
  ampx_status status = AMPX_ERR_INTERNAL;
  try {
    if (std::exception_ptr failure = std::current_exception()) std::rethrow_exception(failure);
  } catch (const StatusError& e) {
    status = e.status();
  } catch (...) {
  }
  try {
    complete_anyway("ampx_backward");
  } catch (...) {
    reset_round();
  }
  pending_ = status;
}

void DataParallel::wait_for_reductions(const char* op) {
  Backend& backend = comm_->context().backend();
  comm_->finish_started(cat("gradient reduction of ", op).c_str());
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

DataParallelStats DataParallel::stats() const {
  DataParallelStats s;
  s.bucket_count = static_cast<int32_t>(buckets_.size());
  for (const Bucket& b : buckets_) {
    s.bucket_bytes += b.grads->nbytes();
    if (b.fp32) s.bucket_bytes += b.fp32->nbytes();
    if (b.shard) s.bucket_bytes += b.shard->nbytes() + b.gathered->nbytes();
    if (b.shard_fp32) s.bucket_bytes += b.shard_fp32->nbytes();
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
  agreed_.reset();
  inverse_world_.reset();
  gradients_written_.reset();
  reduced_event_.reset();
}

void DataParallel::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  try {
    if (!comm_->failed()) comm_->finish_started("the gradient reduction pending at release");
  } catch (...) {
  }
  optimizer_->iteration().detach_sync(sync_hooks_);
  set_fp8_recipe(nullptr);
  free_resources();
  DeviceContext& ctx = comm_->context();
  ctx.retain();
  optimizer_->release();
  comm_->release();
  ctx.quarantine(this);
  ctx.release();
}

}  // namespace ampx::impl
