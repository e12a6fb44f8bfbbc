// fuzz_dlpack.cpp -- libFuzzer target: DLPack tensors with every field
// taken from the input, imported with ampx_tensor_from_dlpack.
//
// Unlike fuzz_api's DLPack calls, which draw fields from lists of likely
// values, every field here is raw: ndim, each extent and stride (any
// int64), the dtype's code, bits and lanes, the device type as any 32-bit
// value (not only DLDeviceType's enumerators), the device id and the byte
// offset. The harness never lies about memory: a tensor gets a block only
// when the block holds every byte its fields claim, otherwise its data is
// NULL (which ampx must refuse for a tensor with elements).
//
// Oracles besides the sanitizers: a status within ampx_status and never
// INTERNAL; a failed import leaves the output alone and does not call the
// deleter (the caller still owns the tensor); an accepted one reports the
// claimed dtype and shape, and its deleter runs exactly once, when the
// ampx tensor is released.
#include <dlpack/dlpack.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ampx/ampx.h"

namespace {

constexpr size_t kMaxBacked = size_t{1} << 16;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_dlpack finding: %s (last error: %s)\n", what, ampx_last_error());
  std::abort();
}

struct Capsule {
  DLManagedTensor managed{};
  int64_t shape[AMPX_MAX_DIMS + 2] = {};
  int64_t strides[AMPX_MAX_DIMS + 2] = {};
  void* memory = nullptr;
  int deletions = 0;
};

void delete_capsule(DLManagedTensor* m) { ++static_cast<Capsule*>(m->manager_ctx)->deletions; }

// Bytes the fields claim (elements x element size + offset), or SIZE_MAX
// when that is not a small, well-formed count.
size_t claimed_bytes(const DLTensor& dl) {
  if (dl.ndim < 0 || dl.ndim > AMPX_MAX_DIMS + 1 || (dl.ndim > 0 && !dl.shape)) return SIZE_MAX;
  unsigned __int128 elements = 1;
  for (int32_t i = 0; i < dl.ndim; ++i) {
    if (dl.shape[i] < 0) return SIZE_MAX;
    elements *= static_cast<uint64_t>(dl.shape[i]);
    if (elements > kMaxBacked) elements = kMaxBacked + 1;  // still 0 if a later extent is
  }
  const unsigned __int128 bytes =
      elements * ((dl.dtype.bits + 7u) / 8u) * (dl.dtype.lanes ? dl.dtype.lanes : 1u) +
      dl.byte_offset;
  return bytes > kMaxBacked ? SIZE_MAX : static_cast<size_t>(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  options.num_threads = 1;
  ampx_context ctx = nullptr;
  if (ampx_context_create(&options, &ctx) != AMPX_OK) finding("no CPU context");

  auto* capsule = new Capsule();
  DLTensor& dl = capsule->managed.dl_tensor;
  dl.ndim = in.ConsumeIntegral<int32_t>() % (AMPX_MAX_DIMS + 3);
  for (int64_t& extent : capsule->shape)
    extent = in.ConsumeBool() ? in.ConsumeIntegral<int64_t>() : in.ConsumeIntegralInRange(0, 6);
  for (int64_t& stride : capsule->strides)
    stride = in.ConsumeBool() ? in.ConsumeIntegral<int64_t>() : in.ConsumeIntegralInRange(0, 64);
  dl.shape = in.ConsumeIntegral<uint8_t>() < 8 ? nullptr : capsule->shape;
  dl.strides = in.ConsumeBool() ? nullptr : capsule->strides;
  dl.dtype.code = in.ConsumeIntegral<uint8_t>();
  dl.dtype.bits = in.ConsumeIntegral<uint8_t>();
  dl.dtype.lanes = in.ConsumeIntegral<uint8_t>() < 200 ? 1 : in.ConsumeIntegral<uint16_t>();
  const int32_t device_type = in.ConsumeBool() ? int32_t{kDLCPU} : in.ConsumeIntegral<int32_t>();
  std::memcpy(&dl.device.device_type, &device_type, sizeof device_type);
  dl.device.device_id = in.ConsumeBool() ? 0 : in.ConsumeIntegral<int32_t>();
  dl.byte_offset = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint64_t>() % 65;
  const size_t claimed = claimed_bytes(dl);
  if (claimed != SIZE_MAX && in.ConsumeIntegral<uint8_t>() < 240) {
    capsule->memory = std::aligned_alloc(64, (claimed + 64) / 64 * 64);
    dl.data = capsule->memory;
  }
  capsule->managed.manager_ctx = capsule;
  capsule->managed.deleter = &delete_capsule;

  ampx_tensor sentinel = reinterpret_cast<ampx_tensor>(capsule);
  ampx_tensor t = sentinel;
  const ampx_status status = ampx_tensor_from_dlpack(ctx, &capsule->managed, &t);
  if (static_cast<uint32_t>(status) > static_cast<uint32_t>(AMPX_ERR_INTERNAL))
    finding("a status outside ampx_status");
  if (status == AMPX_ERR_INTERNAL) finding("AMPX_ERR_INTERNAL");
  if (status != AMPX_OK) {
    if (t != sentinel) finding("a failed import wrote its output");
    if (capsule->deletions != 0) finding("a failed import called the deleter");
  } else {
    int32_t ndim = -1;
    int64_t dims[AMPX_MAX_DIMS] = {};
    if (ampx_tensor_ndim(t, &ndim) != AMPX_OK || ndim != dl.ndim ||
        ampx_tensor_shape(t, dims, AMPX_MAX_DIMS) != AMPX_OK)
      finding("an imported tensor reports another rank");
    for (int32_t i = 0; i < ndim; ++i)
      if (dims[i] != dl.shape[i]) finding("an imported tensor reports another shape");
    ampx_tensor_release(t);
    if (capsule->deletions != 1) finding("the deleter did not run exactly once on release");
  }
  ampx_context_release(ctx);
  std::free(capsule->memory);
  delete capsule;
  return 0;
}
