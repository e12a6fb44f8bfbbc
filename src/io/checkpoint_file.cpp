#include "io/checkpoint_file.h"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <optional>

#include "amp/scaler.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "optim/optimizer.h"
#include "platform/platform.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian, and tensor data is written as it lies in memory"
#endif

namespace ampx::impl::io {
namespace {

// ---- the format (version 1; every number little-endian) ---------------------
//
// header, 32 bytes: "AMPXCKPT", u32 version, u32 section count, u64 file size,
//   u32 reserved (0), u32 CRC-32C of the 28 bytes before it
// sections: u32 tag, u32 reserved (0), u64 payload size, the payload, u32
//   CRC-32C of the section's bytes before it
//   "PARM": u64 count; per tensor: u32 name size, name, u32 dtype, u32 ndim,
//           i64 dims[ndim], u64 data size, data
//   "OPTM": u32 kind (1 SGD, 2 Adam, 3 AdamW), u32 state flag (SGD: momentum
//           buffers; Adam: amsgrad), u32 groups, u32 count; per parameter:
//           u32 name size, name, u32 dtype, u32 group, u32 ndim, i64
//           dims[ndim]; then u64 size and the bytes of
//           ampx_optimizer_save_state
//   "SCAL": the scaler, kScalerPayloadBytes (see write_scaler); files from
//           before consecutive_hysteresis and clamp_to_max_scale hold the
//           kScalerPayloadBytesV1 bytes before those two flags
//   "FP8R": an FP8 recipe: u32 scaling (1 delayed, 2 current), u32 hybrid,
//           i32 history length, u32 most recent, i32 margin, u32 power of
//           two; u64 slot count; per slot: u32 name size, name, u32 role
//           (1 forward, 2 backward), f32 scale, f32 inverse scale, f32 step
//           amax, f32 history[history length] (oldest first). Files
//           without it (all before it) load as before.
// trailer: u32 CRC-32C of every byte before it
//
// The header is checked before the rest is read, so a file that is not a
// checkpoint is rejected without reading it; the per-section checksums say
// which part is damaged; the trailer covers the framing between sections.

constexpr char kMagic[8] = {'A', 'M', 'P', 'X', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kSectionHeadBytes = 16;
constexpr size_t kChecksumBytes = 4;
constexpr uint64_t kScalerPayloadBytes = 104;
constexpr uint64_t kScalerPayloadBytesV1 = 96;

constexpr uint32_t tag_of(const char (&text)[5]) {
  return static_cast<uint32_t>(static_cast<unsigned char>(text[0])) |
         static_cast<uint32_t>(static_cast<unsigned char>(text[1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(text[2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(text[3])) << 24;
}

constexpr uint32_t kParamsTag = tag_of("PARM");
constexpr uint32_t kOptimizerTag = tag_of("OPTM");
constexpr uint32_t kScalerTag = tag_of("SCAL");
constexpr uint32_t kFp8Tag = tag_of("FP8R");

enum : uint32_t { kKindSgd = 1, kKindAdam = 2, kKindAdamW = 3 };

uint32_t kind_code(const OptimizerHyper& h) {
  if (h.kind == OptimizerKind::Sgd) return kKindSgd;
  return h.adam.decoupled_weight_decay ? kKindAdamW : kKindAdam;
}

const char* kind_name(uint32_t code) {
  return code == kKindSgd ? "SGD" : code == kKindAdam ? "Adam" : "AdamW";
}

// Which state buffers exist is fixed when an optimizer is created, so it
// must match; the other hyperparameters are restored from the file, as
// torch's load_state_dict restores them.
uint32_t state_flag(const OptimizerHyper& h) {
  return h.kind == OptimizerKind::Sgd ? (h.sgd.momentum != 0.0f) : h.adam.amsgrad;
}

const char* state_flag_name(uint32_t kind) {
  return kind == kKindSgd ? "momentum buffers" : "amsgrad's max_exp_avg_sq";
}

std::string tag_text(uint32_t tag) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((tag >> (8 * i)) & 0xffu);
    text += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return text;
}

// "params[2] 'fc1.weight'" -- how messages name a tensor.
std::string tensor_label(const char* list, size_t index, const std::string& name) {
  return name.empty() ? cat(list, "[", index, "]") : cat(list, "[", index, "] '", name, "'");
}

std::string describe(DType dtype, const Shape& shape) {
  return cat(dtype_name(dtype), shape.str());
}

// ---- writing -------------------------------------------------------------------

// Buffers writes into pieces of kChunkBytes and keeps the running checksums
// of the file and of the current section.
class Writer {
 public:
  static constexpr size_t kChunkBytes = size_t{1} << 16;

  explicit Writer(AtomicFile& file) : file_(file), buffer_(kChunkBytes) {}

  void bytes(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0) {
      const size_t n = std::min(size, room());
      std::memcpy(buffer_.data() + used_, p, n);
      appended(n);
      p += n;
      size -= n;
    }
  }

  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }

  void text(const std::string& s) {
    value(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }

  void shape(const Shape& shape) {
    value(static_cast<uint32_t>(shape.ndim));
    for (int32_t d = 0; d < shape.ndim; ++d) value(shape.dims[d]);
  }

  // Device memory through the buffer, a piece at a time, so a CUDA tensor
  // needs no host copy of its own.
  void device_bytes(Backend& backend, const void* src, size_t size) {
    const auto* p = static_cast<const unsigned char*>(src);
    while (size > 0) {
      const size_t n = std::min(size, room());
      backend.copy_to_host(buffer_.data() + used_, p, n);
      appended(n);
      p += n;
      size -= n;
    }
  }

  void begin_section(uint32_t tag, uint64_t payload_bytes) {
    section_crc_ = 0;
    value(tag);
    value(uint32_t{0});
    value(payload_bytes);
  }

  void end_section() { value(section_crc_); }

  void finish() {
    value(file_crc_);
    flush();
  }

  uint64_t written() const { return written_; }

 private:
  size_t room() {
    if (used_ == buffer_.size()) flush();
    return buffer_.size() - used_;
  }

  void appended(size_t n) {
    section_crc_ = crc32c_update(section_crc_, buffer_.data() + used_, n);
    file_crc_ = crc32c_update(file_crc_, buffer_.data() + used_, n);
    used_ += n;
    written_ += n;
  }

  void flush() {
    file_.write(buffer_.data(), used_);
    used_ = 0;
  }

  AtomicFile& file_;
  std::vector<unsigned char> buffer_;
  size_t used_ = 0;
  uint64_t written_ = 0;
  uint32_t section_crc_ = 0;
  uint32_t file_crc_ = 0;
};

uint64_t shape_bytes(const Shape& shape) { return 4 + 8 * static_cast<uint64_t>(shape.ndim); }

uint64_t params_payload_bytes(const std::vector<DeviceTensor*>& tensors) {
  uint64_t bytes = 8;
  for (const DeviceTensor* t : tensors)
    bytes += 4 + t->name.size() + 4 + shape_bytes(t->shape) + 8 + t->nbytes();
  return bytes;
}

uint64_t optimizer_payload_bytes(const FusedOptimizer& o, size_t blob_bytes) {
  uint64_t bytes = 16 + 8 + blob_bytes;
  for (const FusedOptimizer::Param& p : o.params())
    bytes += 4 + p.param->name.size() + 4 + 4 + shape_bytes(p.param->shape);
  return bytes;
}

void write_params(Writer& w, const std::vector<DeviceTensor*>& tensors) {
  w.value(static_cast<uint64_t>(tensors.size()));
  for (const DeviceTensor* t : tensors) {
    w.text(t->name);
    w.value(static_cast<uint32_t>(t->dtype));
    w.shape(t->shape);
    w.value(static_cast<uint64_t>(t->nbytes()));
    if (t->nbytes() > 0) w.device_bytes(t->ctx->backend(), t->data(), t->nbytes());
  }
}

void write_optimizer(Writer& w, const FusedOptimizer& o, const std::vector<unsigned char>& blob) {
  w.value(kind_code(o.hyper()));
  w.value(state_flag(o.hyper()));
  w.value(static_cast<uint32_t>(o.group_count()));
  w.value(static_cast<uint32_t>(o.params().size()));
  for (const FusedOptimizer::Param& p : o.params()) {
    w.text(p.param->name);
    w.value(static_cast<uint32_t>(p.param->dtype));
    w.value(static_cast<uint32_t>(p.group));
    w.shape(p.param->shape);
  }
  w.value(static_cast<uint64_t>(blob.size()));
  w.bytes(blob.data(), blob.size());
}

struct ScalerRecord {
  bool enabled = true;
  ScalerOptions options;
  math::ScalerState state{};
};

// Everything the scaler's behaviour depends on, bit for bit: the device
// state as it lies (the scale is a float there) and every option.
void write_scaler(Writer& w, const ScalerRecord& s) {
  const uint64_t start = w.written();
  w.value(static_cast<uint32_t>(s.enabled));
  w.value(s.state.scale);
  w.value(s.state.growth_tracker);
  w.value(s.state.hysteresis_left);
  w.value(s.state.updates);
  w.value(s.state.skipped);
  w.value(s.state.backoffs);
  w.value(s.state.growths);
  w.value(s.options.init_scale);
  w.value(s.options.growth_factor);
  w.value(s.options.backoff_factor);
  w.value(s.options.growth_interval);
  w.value(s.options.hysteresis);
  w.value(s.options.min_scale);
  w.value(s.options.max_scale);
  w.value(static_cast<uint32_t>(s.options.consecutive_hysteresis));
  w.value(static_cast<uint32_t>(s.options.clamp_to_max_scale));
  if (w.written() - start != kScalerPayloadBytes)
    fail(AMPX_ERR_INTERNAL, "the scaler record is ", w.written() - start, " bytes, not ",
         kScalerPayloadBytes);
}

// One recipe's options and slots, as saved (read from the device when
// written, parsed from the file when loaded).
struct RecipeRecord {
  Fp8RecipeOptions options;
  struct Slot {
    std::string name;
    Fp8Role role = Fp8Role::Forward;
    Fp8SlotState state;
  };
  std::vector<Slot> slots;
};

RecipeRecord record_of(const Fp8Recipe& r) {
  RecipeRecord record;
  record.options = r.options();
  for (int64_t i = 0; i < r.slot_count(); ++i)
    record.slots.push_back(RecipeRecord::Slot{r.name(i), r.role(i), r.read_slot(i)});
  return record;
}

uint64_t recipe_payload_bytes(const RecipeRecord& r) {
  uint64_t bytes = 24 + 8;
  for (const RecipeRecord::Slot& s : r.slots)
    bytes += 4 + s.name.size() + 4 + 12 + 4 * static_cast<uint64_t>(r.options.history_len);
  return bytes;
}

void write_recipe(Writer& w, const RecipeRecord& r) {
  const Fp8RecipeOptions& o = r.options;
  w.value(static_cast<uint32_t>(o.delayed ? 1 : 2));
  w.value(static_cast<uint32_t>(o.hybrid));
  w.value(o.history_len);
  w.value(static_cast<uint32_t>(o.most_recent));
  w.value(o.margin);
  w.value(static_cast<uint32_t>(o.power_of_two));
  w.value(static_cast<uint64_t>(r.slots.size()));
  for (const RecipeRecord::Slot& s : r.slots) {
    w.text(s.name);
    w.value(static_cast<uint32_t>(s.role));
    w.value(s.state.scale);
    w.value(s.state.scale_inv);
    w.value(s.state.amax);
    w.bytes(s.state.history.data(), s.state.history.size() * sizeof(float));
  }
}

// ---- reading -------------------------------------------------------------------

// Bounds-checked reads from one part of the file; running off its end is
// corruption (a crafted or damaged file with valid checksums).
class Reader {
 public:
  Reader(const unsigned char* data, uint64_t size, std::string what)
      : p_(data), left_(size), what_(std::move(what)) {}

  template <class T>
  T value() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }

  const unsigned char* take(uint64_t n) {
    if (n > left_)
      fail(AMPX_ERR_CORRUPT, "the ", what_, " ends early: ", n, " more bytes are needed but ",
           left_, " are left");
    const unsigned char* at = p_;
    p_ += n;
    left_ -= n;
    return at;
  }

  std::string text() {
    const uint32_t size = value<uint32_t>();
    const unsigned char* at = take(size);
    return std::string(reinterpret_cast<const char*>(at), size);
  }

  DType dtype() {
    const uint32_t code = value<uint32_t>();
    if (!is_valid_dtype(static_cast<int32_t>(code)))
      fail(AMPX_ERR_CORRUPT, "the ", what_, " names dtype ", code, ", which is not an ampx_dtype");
    return static_cast<DType>(code);
  }

  Shape shape() {
    const uint32_t ndim = value<uint32_t>();
    if (ndim > static_cast<uint32_t>(kMaxDims))
      fail(AMPX_ERR_CORRUPT, "the ", what_, " holds a shape with ", ndim, " dimensions (at most ",
           kMaxDims, ")");
    Shape shape;
    shape.ndim = static_cast<int32_t>(ndim);
    for (uint32_t d = 0; d < ndim; ++d) {
      shape.dims[d] = value<int64_t>();
      if (shape.dims[d] < 0)
        fail(AMPX_ERR_CORRUPT, "the ", what_, " holds a negative extent ", shape.dims[d]);
    }
    return shape;
  }

  void expect_end() const {
    if (left_ != 0)
      fail(AMPX_ERR_CORRUPT, "the ", what_, " has ", left_, " bytes after its last field");
  }

 private:
  const unsigned char* p_;
  uint64_t left_;
  std::string what_;
};

// numel * element size, or fail when that exceeds `limit`: a size a file
// of this length cannot hold is corruption (and might overflow).
uint64_t data_bytes(DType dtype, const Shape& shape, uint64_t limit, const std::string& what) {
  for (int32_t d = 0; d < shape.ndim; ++d)
    if (shape.dims[d] == 0) return 0;
  uint64_t bytes = dtype_size(dtype);
  for (int32_t d = 0; d < shape.ndim; ++d) {
    const uint64_t extent = static_cast<uint64_t>(shape.dims[d]);
    if (bytes > limit / extent)
      fail(AMPX_ERR_CORRUPT, what, " claims shape ", shape.str(), ", larger than the file");
    bytes *= extent;
  }
  return bytes;
}

struct TensorRecord {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const unsigned char* data = nullptr;
  uint64_t bytes = 0;
};

struct OptimizerRecord {
  uint32_t kind = 0;
  uint32_t flag = 0;
  uint32_t groups = 0;
  std::vector<TensorRecord> params;  // data unused
  std::vector<uint32_t> param_groups;
  const unsigned char* blob = nullptr;
  uint64_t blob_bytes = 0;
};

struct Contents {
  std::vector<TensorRecord> tensors;
  std::optional<OptimizerRecord> optimizer;
  std::optional<ScalerRecord> scaler;
  std::optional<RecipeRecord> recipe;
};

RecipeRecord parse_recipe(Reader r, uint64_t payload_bytes) {
  RecipeRecord record;
  Fp8RecipeOptions& o = record.options;
  const uint32_t scaling = r.value<uint32_t>(), hybrid = r.value<uint32_t>();
  o.history_len = r.value<int32_t>();
  const uint32_t most_recent = r.value<uint32_t>();
  o.margin = r.value<int32_t>();
  const uint32_t power_of_two = r.value<uint32_t>();
  if (scaling < 1 || scaling > 2 || hybrid > 1 || most_recent > 1 || power_of_two > 1)
    fail(AMPX_ERR_CORRUPT, "the FP8 recipe section holds unknown option values (scaling ",
         scaling, ", flags ", hybrid, most_recent, power_of_two, ")");
  o.delayed = scaling == 1, o.hybrid = hybrid != 0, o.most_recent = most_recent != 0;
  o.power_of_two = power_of_two != 0;
  try {
    validate_fp8_recipe_options(o);
  } catch (const StatusError& e) {
    fail(AMPX_ERR_CORRUPT, "the FP8 recipe section holds invalid options: ", e.what());
  }
  const uint64_t count = r.value<uint64_t>();
  const uint64_t slot_bytes = 20 + 4 * static_cast<uint64_t>(o.history_len);
  if (count > payload_bytes / slot_bytes)
    fail(AMPX_ERR_CORRUPT, "the FP8 recipe section claims ", count, " slots in ", payload_bytes,
         " bytes");
  record.slots.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < record.slots.size(); ++i) {
    RecipeRecord::Slot& s = record.slots[i];
    s.name = r.text();
    const uint32_t role = r.value<uint32_t>();
    if (role != 1 && role != 2)
      fail(AMPX_ERR_CORRUPT, "FP8 recipe slot ", i, " of the file has role ", role);
    s.role = static_cast<Fp8Role>(role);
    s.state.scale = r.value<float>();
    s.state.scale_inv = r.value<float>();
    s.state.amax = r.value<float>();
    // A scale is a positive float at most FLT_MAX (recipe.h's rules).
    if (!(s.state.scale > 0.0f) || !(s.state.scale <= FLT_MAX) || !(s.state.scale_inv > 0.0f))
      fail(AMPX_ERR_CORRUPT, "FP8 recipe slot ", i, " of the file holds scale ", s.state.scale,
           " and inverse ", s.state.scale_inv);
    s.state.history.resize(static_cast<size_t>(o.history_len));
    std::memcpy(s.state.history.data(), r.take(4 * static_cast<uint64_t>(o.history_len)),
                4 * static_cast<size_t>(o.history_len));
  }
  r.expect_end();
  return record;
}

std::vector<TensorRecord> parse_params(Reader r, uint64_t payload_bytes) {
  const uint64_t count = r.value<uint64_t>();
  // Each record takes at least 20 bytes: refuse a count the payload cannot
  // hold before reserving memory for it.
  if (count > payload_bytes / 20)
    fail(AMPX_ERR_CORRUPT, "the tensor section claims ", count, " tensors in ", payload_bytes,
         " bytes");
  std::vector<TensorRecord> tensors(static_cast<size_t>(count));
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorRecord& t = tensors[i];
    t.name = r.text();
    t.dtype = r.dtype();
    t.shape = r.shape();
    t.bytes = r.value<uint64_t>();
    const uint64_t expected =
        data_bytes(t.dtype, t.shape, payload_bytes, cat("tensor ", i, " of the file"));
    if (t.bytes != expected)
      fail(AMPX_ERR_CORRUPT, "tensor ", i, " of the file is ", describe(t.dtype, t.shape),
           " but holds ", t.bytes, " bytes of data (", expected, " expected)");
    t.data = r.take(t.bytes);
  }
  r.expect_end();
  return tensors;
}

OptimizerRecord parse_optimizer(Reader r, uint64_t payload_bytes) {
  OptimizerRecord o;
  o.kind = r.value<uint32_t>();
  if (o.kind < kKindSgd || o.kind > kKindAdamW)
    fail(AMPX_ERR_CORRUPT, "the optimizer section names kind ", o.kind, ", which is unknown");
  o.flag = r.value<uint32_t>();
  if (o.flag > 1) fail(AMPX_ERR_CORRUPT, "the optimizer section's state flag is ", o.flag);
  o.groups = r.value<uint32_t>();
  const uint32_t count = r.value<uint32_t>();
  if (count > payload_bytes / 16)
    fail(AMPX_ERR_CORRUPT, "the optimizer section claims ", count, " parameters in ",
         payload_bytes, " bytes");
  o.params.resize(count);
  o.param_groups.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    TensorRecord& p = o.params[i];
    p.name = r.text();
    p.dtype = r.dtype();
    o.param_groups[i] = r.value<uint32_t>();
    if (o.param_groups[i] >= o.groups)
      fail(AMPX_ERR_CORRUPT, "optimizer parameter ", i, " of the file is in group ",
           o.param_groups[i], " of ", o.groups);
    p.shape = r.shape();
  }
  o.blob_bytes = r.value<uint64_t>();
  o.blob = r.take(o.blob_bytes);
  r.expect_end();
  return o;
}

ScalerRecord parse_scaler(Reader r, uint64_t payload) {
  if (payload != kScalerPayloadBytes && payload != kScalerPayloadBytesV1)
    fail(AMPX_ERR_CORRUPT, "the scaler section is ", payload, " bytes; expected ",
         kScalerPayloadBytes, " (or ", kScalerPayloadBytesV1, " from an older ampx)");
  ScalerRecord s;
  const uint32_t enabled = r.value<uint32_t>();
  if (enabled > 1) fail(AMPX_ERR_CORRUPT, "the scaler section's enabled flag is ", enabled);
  s.enabled = enabled != 0;
  s.state.scale = r.value<float>();
  s.state.growth_tracker = r.value<int32_t>();
  s.state.hysteresis_left = r.value<int32_t>();
  s.state.updates = r.value<int64_t>();
  s.state.skipped = r.value<int64_t>();
  s.state.backoffs = r.value<int64_t>();
  s.state.growths = r.value<int64_t>();
  s.options.enabled = s.enabled;
  s.options.init_scale = r.value<double>();
  s.options.growth_factor = r.value<double>();
  s.options.backoff_factor = r.value<double>();
  s.options.growth_interval = r.value<int32_t>();
  s.options.hysteresis = r.value<int32_t>();
  s.options.min_scale = r.value<double>();
  s.options.max_scale = r.value<double>();
  if (payload == kScalerPayloadBytesV1) {
    // The rule those files' scalers ran under, so they resume as they ran.
    s.options.consecutive_hysteresis = true;
    s.options.clamp_to_max_scale = true;
  } else {
    const uint32_t consecutive = r.value<uint32_t>();
    const uint32_t clamp = r.value<uint32_t>();
    if (consecutive > 1 || clamp > 1)
      fail(AMPX_ERR_CORRUPT, "the scaler section's consecutive_hysteresis and clamp_to_max_scale "
                             "flags are ", consecutive, " and ", clamp, "; each must be 0 or 1");
    s.options.consecutive_hysteresis = consecutive != 0;
    s.options.clamp_to_max_scale = clamp != 0;
  }
  r.expect_end();
  // What ampx_scaler_set_state would refuse, so a crafted file cannot put
  // the scaler in a state no program could.
  try {
    validate_scaler_options(s.options);
  } catch (const StatusError& e) {
    fail(AMPX_ERR_CORRUPT, "the scaler section holds invalid options: ", e.what());
  }
  const math::ScalerState& d = s.state;
  // ampx's scale never leaves [FLT_MIN, FLT_MAX] (backoff stops at FLT_MIN).
  if (!(d.scale >= FLT_MIN) || !(d.scale <= FLT_MAX))
    fail(AMPX_ERR_CORRUPT, "the scaler section holds scale ", d.scale,
         ", outside the normal floats a scale can be");
  if (d.growth_tracker < 0 || d.growth_tracker >= s.options.growth_interval ||
      d.hysteresis_left < 0 || d.hysteresis_left > s.options.hysteresis)
    fail(AMPX_ERR_CORRUPT, "the scaler section holds growth tracker ", d.growth_tracker,
         " and hysteresis allowance ", d.hysteresis_left, ", outside their ranges");
  if (d.updates < 0 || d.skipped < 0 || d.backoffs < 0 || d.growths < 0 || d.skipped > d.updates)
    fail(AMPX_ERR_CORRUPT, "the scaler section holds inconsistent counters");
  return s;
}

// Checks the header of a file of `file_bytes` bytes.
uint32_t check_header(const unsigned char* h, uint64_t file_bytes, const std::string& path) {
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0)
    fail(AMPX_ERR_CORRUPT, "'", path, "' is not an ampx checkpoint file (its first bytes are not "
                               "\"AMPXCKPT\")");
  uint32_t version, sections, reserved, crc;
  uint64_t declared;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&sections, h + 12, 4);
  std::memcpy(&declared, h + 16, 8);
  std::memcpy(&reserved, h + 24, 4);
  std::memcpy(&crc, h + 28, 4);
  if (crc != crc32c(h, 28))
    fail(AMPX_ERR_CORRUPT, "the header of '", path, "' is damaged (checksum mismatch)");
  if (version != kVersion)
    fail(AMPX_ERR_CORRUPT, "'", path, "' has checkpoint format version ", version,
         "; this library reads version ", kVersion);
  if (reserved != 0)
    fail(AMPX_ERR_CORRUPT, "the header of '", path, "' has a non-zero reserved field");
  if (declared != file_bytes)
    fail(AMPX_ERR_CORRUPT, "'", path, "' is ", file_bytes, " bytes but its header says ", declared,
         file_bytes < declared ? ": the file is truncated" : ": the file has extra bytes");
  return sections;
}

// A section's head: tag, reserved field, payload size.
struct SectionHead {
  uint32_t tag = 0;
  uint32_t reserved = 0;
  uint64_t payload = 0;
};

SectionHead read_section_head(const unsigned char* at) {
  SectionHead head;
  std::memcpy(&head.tag, at, 4);
  std::memcpy(&head.reserved, at + 4, 4);
  std::memcpy(&head.payload, at + 8, 8);
  return head;
}

// The structure of a file read_file has checked (sizes, checksums, tags).
Contents parse(const std::vector<unsigned char>& file, uint32_t section_count,
               const std::string& path) {
  const unsigned char* base = file.data();
  Contents contents;
  bool have_params = false;
  uint64_t at = kHeaderBytes;
  for (uint32_t s = 0; s < section_count; ++s) {
    const SectionHead head = read_section_head(base + at);
    const unsigned char* data = base + at + kSectionHeadBytes;
    auto once = [&](bool seen) {
      if (seen) fail(AMPX_ERR_CORRUPT, "'", path, "' holds two '", tag_text(head.tag), "' sections");
    };
    if (head.tag == kParamsTag) {
      once(have_params);
      have_params = true;
      contents.tensors = parse_params(Reader(data, head.payload, "tensor section"), head.payload);
    } else if (head.tag == kOptimizerTag) {
      once(contents.optimizer.has_value());
      contents.optimizer =
          parse_optimizer(Reader(data, head.payload, "optimizer section"), head.payload);
    } else if (head.tag == kFp8Tag) {
      once(contents.recipe.has_value());
      contents.recipe = parse_recipe(Reader(data, head.payload, "FP8 recipe section"), head.payload);
    } else {
      once(contents.scaler.has_value());
      contents.scaler = parse_scaler(Reader(data, head.payload, "scaler section"), head.payload);
    }
    at += kSectionHeadBytes + head.payload + kChecksumBytes;
  }
  if (!have_params) fail(AMPX_ERR_CORRUPT, "'", path, "' has no tensor section");
  return contents;
}

void read_exactly(platform::File& file, unsigned char* dst, size_t bytes, uint64_t offset,
                  uint64_t total, const std::string& path) {
  while (bytes > 0) {
    const size_t n = file.read(dst, bytes, path);
    if (n == 0)
      fail(AMPX_ERR_CORRUPT, "'", path, "' ended after ", offset, " of its ", total,
           " bytes while it was being read");
    dst += n;
    bytes -= n;
    offset += n;
  }
}

// The whole file, checked as it is read: the header first, then each
// section's head (tag, reserved field, a size within what is left) before
// its payload is read and its checksum compared. So a file that is not a
// checkpoint, or whose sizes are wrong, is refused after a few bytes rather
// than after reading all of it. A FIFO or device is refused without
// blocking on it (platform::File::open_for_reading).
std::vector<unsigned char> read_file(const std::string& path, uint32_t* section_count) {
  platform::File file = platform::File::open_for_reading(path);
  const uint64_t size = file.size(path);
  if (size < kHeaderBytes + kChecksumBytes)
    fail(AMPX_ERR_CORRUPT, "'", path, "' is ", size,
         " bytes, too short to be an ampx checkpoint file");
  std::vector<unsigned char> bytes(kHeaderBytes);
  read_exactly(file, bytes.data(), kHeaderBytes, 0, size, path);
  *section_count = check_header(bytes.data(), size, path);
  bytes.reserve(static_cast<size_t>(size));
  const uint64_t end = size - kChecksumBytes;  // where the trailer starts
  uint64_t at = kHeaderBytes;
  for (uint32_t s = 0; s < *section_count; ++s) {
    if (end - at < kSectionHeadBytes + kChecksumBytes)
      fail(AMPX_ERR_CORRUPT, "'", path, "' ends inside section ", s, " of ", *section_count,
           " (offset ", at, ")");
    bytes.resize(at + kSectionHeadBytes);
    read_exactly(file, bytes.data() + at, kSectionHeadBytes, at, size, path);
    const SectionHead head = read_section_head(bytes.data() + at);
    if (head.tag != kParamsTag && head.tag != kOptimizerTag && head.tag != kScalerTag &&
        head.tag != kFp8Tag)
      fail(AMPX_ERR_CORRUPT, "section ", s, " of '", path, "' has the unknown tag '",
           tag_text(head.tag), "'");
    if (head.reserved != 0)
      fail(AMPX_ERR_CORRUPT, "section ", s, " of '", path, "' has a non-zero reserved field");
    if (head.payload > end - at - kSectionHeadBytes - kChecksumBytes)
      fail(AMPX_ERR_CORRUPT, "section ", s, " ('", tag_text(head.tag), "') of '", path,
           "' claims ", head.payload, " bytes, more than the file holds");
    const uint64_t section_bytes = kSectionHeadBytes + head.payload;
    bytes.resize(at + section_bytes + kChecksumBytes);
    read_exactly(file, bytes.data() + at + kSectionHeadBytes, head.payload + kChecksumBytes,
                 at + kSectionHeadBytes, size, path);
    uint32_t crc;
    std::memcpy(&crc, bytes.data() + at + section_bytes, 4);
    if (crc != crc32c(bytes.data() + at, section_bytes))
      fail(AMPX_ERR_CORRUPT, "section ", s, " ('", tag_text(head.tag), "', offset ", at, ") of '",
           path, "' is damaged (checksum mismatch)");
    at += section_bytes + kChecksumBytes;
  }
  if (at != end)
    fail(AMPX_ERR_CORRUPT, "'", path, "' has ", end - at, " unexpected bytes after its ",
         *section_count, " sections");
  bytes.resize(size);
  read_exactly(file, bytes.data() + end, kChecksumBytes, end, size, path);
  uint32_t crc;
  std::memcpy(&crc, bytes.data() + end, 4);
  if (crc != crc32c(bytes.data(), end))
    fail(AMPX_ERR_CORRUPT, "'", path, "' is damaged (the whole-file checksum does not match)");
  return bytes;
}

// ---- matching the file to the live objects ---------------------------------------

// Compares one live tensor with its record: the name first (a different
// name means the lists are not the same model), then dtype and shape.
void match(const DeviceTensor& live, const TensorRecord& file, const std::string& label) {
  if (live.name != file.name)
    fail(AMPX_ERR_INVALID_ARGUMENT, label, " is ", live.describe(), " named '", live.name,
         "' but the checkpoint has '", file.name, "' (", describe(file.dtype, file.shape),
         ") in its place");
  if (live.dtype != file.dtype)
    fail(AMPX_ERR_DTYPE, label, " is ", live.describe(), " but the checkpoint holds it as ",
         describe(file.dtype, file.shape));
  if (!(live.shape == file.shape))
    fail(AMPX_ERR_SHAPE, label, " is ", live.describe(), " but the checkpoint holds it as ",
         describe(file.dtype, file.shape));
}

// For a count mismatch: the first tensor one side has and the other lacks.
template <class Name>
std::string count_mismatch(const char* list, const char* file_list, size_t live_count,
                           Name live_name, const std::vector<TensorRecord>& file) {
  if (live_count > file.size())
    return cat(tensor_label(list, file.size(), live_name(file.size())),
               " has no counterpart in the checkpoint");
  const std::string& name = file[live_count].name;
  return cat("the checkpoint's ", file_list, " ", live_count,
             name.empty() ? "" : cat(" ('", name, "')"), " has no counterpart in '", list, "'");
}

void check_tensors(const Contents& c, const std::vector<DeviceTensor*>& tensors) {
  if (c.tensors.size() != tensors.size())
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint holds ", c.tensors.size(), " tensor(s) but ",
         tensors.size(), " were given in 'params'; ",
         count_mismatch("params", "tensor", tensors.size(),
                        [&](size_t i) { return tensors[i]->name; }, c.tensors));
  for (size_t i = 0; i < tensors.size(); ++i)
    match(*tensors[i], c.tensors[i], tensor_label("params", i, tensors[i]->name));
}

void check_optimizer(const Contents& c, const FusedOptimizer& o) {
  if (!c.optimizer)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint holds no optimizer state, but 'optimizer' was "
                                    "given (pass NULL to restore the rest)");
  const OptimizerRecord& f = *c.optimizer;
  const uint32_t kind = kind_code(o.hyper());
  if (f.kind != kind)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint holds the state of ", kind_name(f.kind),
         " but 'optimizer' is ", kind_name(kind));
  const uint32_t flag = state_flag(o.hyper());
  if (f.flag != flag)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint's ", kind_name(f.kind),
         f.flag ? " keeps " : " keeps no ", state_flag_name(f.kind), " but 'optimizer'",
         flag ? " keeps them" : " keeps none",
         f.kind == kKindSgd ? " (momentum 0 or not)" : " (amsgrad on or off)");
  if (f.groups != static_cast<uint32_t>(o.group_count()))
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint's optimizer has ", f.groups,
         " param group(s) but 'optimizer' has ", o.group_count());
  const std::vector<FusedOptimizer::Param>& params = o.params();
  if (f.params.size() != params.size())
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint's optimizer has ", f.params.size(),
         " parameter(s) but 'optimizer' has ", params.size(), "; ",
         count_mismatch("optimizer parameter", "optimizer parameter", params.size(),
                        [&](size_t i) { return params[i].param->name; }, f.params));
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string label = tensor_label("optimizer parameter", i, params[i].param->name);
    match(*params[i].param, f.params[i], label);
    if (f.param_groups[i] != static_cast<uint32_t>(params[i].group))
      fail(AMPX_ERR_INVALID_ARGUMENT, label, " is in param group ", params[i].group,
           " but the checkpoint has it in group ", f.param_groups[i]);
  }
  if (!o.loads_state_of_size(f.blob_bytes))
    fail(AMPX_ERR_CORRUPT, "the checkpoint's optimizer state is ", f.blob_bytes,
         " bytes but an optimizer of this model keeps ", o.state_size());
}

void check_scaler(const Contents& c, const LossScaler& s) {
  if (!c.scaler)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint holds no scaler state, but 'scaler' was given "
                                    "(pass NULL to restore the rest)");
  if (c.scaler->enabled != s.enabled())
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint's scaler is ",
         c.scaler->enabled ? "enabled" : "disabled", " but 'scaler' is ",
         s.enabled() ? "enabled" : "disabled");
}

// The live slot each saved one goes to (named: the slot of that name;
// unnamed: the live unnamed slots in order), or -1 where the recipe lacks
// it and a restored slot will be added.
std::vector<int64_t> match_recipe(const Contents& c, const Fp8Recipe& r) {
  if (!c.recipe)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint holds no FP8 recipe state, but 'recipe' was "
                                    "given (pass NULL to restore the rest)");
  const Fp8RecipeOptions& f = c.recipe->options;
  const Fp8RecipeOptions& live = r.options();
  if (f.delayed != live.delayed || f.hybrid != live.hybrid || f.history_len != live.history_len ||
      f.most_recent != live.most_recent || f.margin != live.margin ||
      f.power_of_two != live.power_of_two)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpoint's FP8 recipe has other options (",
         f.delayed ? "delayed" : "current", " scaling, ", f.hybrid ? "HYBRID" : "E4M3",
         ", history ", f.history_len, ", ", f.most_recent ? "most recent" : "max", ", margin ",
         f.margin, f.power_of_two ? ", power-of-two scales" : "", ") than 'recipe'");
  std::vector<int64_t> unnamed;
  for (int64_t i = 0; i < r.slot_count(); ++i)
    if (r.name(i).empty()) unnamed.push_back(i);
  std::vector<int64_t> targets;
  size_t next_unnamed = 0;
  for (const RecipeRecord::Slot& s : c.recipe->slots) {
    int64_t slot = -1;
    if (s.name.empty())
      slot = next_unnamed < unnamed.size() ? unnamed[next_unnamed++] : -1;
    else
      slot = r.find(s.name);
    if (slot >= 0 && r.role(slot) != s.role)
      fail(AMPX_ERR_INVALID_ARGUMENT, "FP8 recipe slot '", s.name, "' is a ",
           r.role(slot) == Fp8Role::Forward ? "forward" : "backward",
           " slot but the checkpoint holds it as a ",
           s.role == Fp8Role::Forward ? "forward" : "backward", " one");
    targets.push_back(slot);
  }
  return targets;
}

// Between unscale/step and update the optimizer has moved on but the scale
// has not: a checkpoint taken there would resume into a different run, and
// restoring into an iteration half done would mix two runs.
void require_between_iterations(const FusedOptimizer* optimizer, const LossScaler* scaler,
                                const char* action) {
  if ((optimizer && !optimizer->iteration().between_iterations()) ||
      (scaler && scaler->iteration_in_progress()))
    fail(AMPX_ERR_ORDER, "a checkpoint can only be ", action,
         " between iterations (after ampx_scaler_update), not between unscale/step and update");
}

}  // namespace

void save_checkpoint_file(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                          FusedOptimizer* optimizer, LossScaler* scaler, Fp8Recipe* recipe) {
  require_between_iterations(optimizer, scaler, "saved");
  // Everything that can fail for a reason other than the disk happens
  // before the temporary file exists.
  std::vector<unsigned char> blob;
  if (optimizer) {
    blob.resize(optimizer->state_size());
    optimizer->save_state(blob.data(), blob.size());
  }
  ScalerRecord scaler_record;
  if (scaler) {
    scaler_record.enabled = scaler->enabled();
    scaler_record.options = scaler->options();
    scaler_record.state = scaler->read_state();
  }
  RecipeRecord recipe_record;
  if (recipe) recipe_record = record_of(*recipe);
  const uint64_t framing = kSectionHeadBytes + kChecksumBytes;
  const uint64_t params_bytes = params_payload_bytes(tensors);
  const uint64_t optimizer_bytes = optimizer ? optimizer_payload_bytes(*optimizer, blob.size()) : 0;
  const uint64_t recipe_bytes = recipe ? recipe_payload_bytes(recipe_record) : 0;
  const uint32_t sections = 1 + (optimizer ? 1 : 0) + (scaler ? 1 : 0) + (recipe ? 1 : 0);
  const uint64_t file_bytes = kHeaderBytes + framing + params_bytes +
                              (optimizer ? framing + optimizer_bytes : 0) +
                              (scaler ? framing + kScalerPayloadBytes : 0) +
                              (recipe ? framing + recipe_bytes : 0) + kChecksumBytes;

  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  std::memcpy(header + 8, &kVersion, 4);
  std::memcpy(header + 12, &sections, 4);
  std::memcpy(header + 16, &file_bytes, 8);
  const uint32_t header_crc = crc32c(header, 28);
  std::memcpy(header + 28, &header_crc, 4);

  AtomicFile file(path);
  Writer w(file);
  w.bytes(header, sizeof header);
  w.begin_section(kParamsTag, params_bytes);
  write_params(w, tensors);
  w.end_section();
  if (optimizer) {
    w.begin_section(kOptimizerTag, optimizer_bytes);
    write_optimizer(w, *optimizer, blob);
    w.end_section();
  }
  if (scaler) {
    w.begin_section(kScalerTag, kScalerPayloadBytes);
    write_scaler(w, scaler_record);
    w.end_section();
  }
  if (recipe) {
    w.begin_section(kFp8Tag, recipe_bytes);
    write_recipe(w, recipe_record);
    w.end_section();
  }
  w.finish();
  if (w.written() != file_bytes)
    fail(AMPX_ERR_INTERNAL, "wrote ", w.written(), " bytes of a checkpoint sized ", file_bytes);
  file.commit();
}

void load_checkpoint_file(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                          FusedOptimizer* optimizer, LossScaler* scaler, Fp8Recipe* recipe) {
  require_between_iterations(optimizer, scaler, "loaded");
  uint32_t section_count = 0;
  const std::vector<unsigned char> file = read_file(path, &section_count);
  const Contents contents = parse(file, section_count, path);
  check_tensors(contents, tensors);
  if (optimizer) check_optimizer(contents, *optimizer);
  if (scaler) check_scaler(contents, *scaler);
  std::vector<int64_t> recipe_slots;
  if (recipe) recipe_slots = match_recipe(contents, *recipe);

  // Everything is validated. The optimizer goes first: it validates its
  // own bytes once more and changes nothing if they fail, so this is the
  // last point where the call can still be refused as a whole. It also
  // rewrites F16/BF16 parameters from their masters; the tensors written
  // after it then hold exactly the saved bits.
  if (optimizer) optimizer->load_state(contents.optimizer->blob, contents.optimizer->blob_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRecord& record = contents.tensors[i];
    if (record.bytes > 0)
      tensors[i]->ctx->backend().copy_from_host(tensors[i]->data(), record.data, record.bytes);
    tensors[i]->storage->note_write();
  }
  if (scaler) scaler->restore(contents.scaler->options, contents.scaler->state);
  for (size_t i = 0; i < recipe_slots.size(); ++i) {
    const RecipeRecord::Slot& saved = contents.recipe->slots[i];
    const int64_t slot =
        recipe_slots[i] >= 0 ? recipe_slots[i] : recipe->add_restored_slot(saved.role, saved.name);
    recipe->write_slot(slot, saved.state);
  }
}

}  // namespace ampx::impl::io
