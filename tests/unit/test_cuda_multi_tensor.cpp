// test_cuda_multi_tensor.cpp -- what only a GPU run can check of the CUDA
// multi-tensor kernels (src/backend/cuda/kernels/multi_tensor.cuh and the primitives built on
// it), beyond the device-agnostic cases of test_amp_primitives.cpp:
//  - tensors at every element offset from 16-byte alignment, alone and in
//    mixed lists, so each kernel takes its vector path with heads and tails
//    and its one-element path (arrays whose phases differ); results must
//    equal the CPU backend's bit for bit (the L2 norm: within one rounding);
//  - a training step's primitives captured in a CUDA graph and replayed
//    give exactly what direct calls give (nothing synchronizes or copies to
//    the host on the way);
//  - the limit on found-inf flags in one scaler update;
//  - element indices past 2^31.
// The cases run when the suite targets CUDA (the unit_cuda test).
#include "support.h"
#include "unit/backend_caps.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/backend.h"
#include "core/error.h"
#include "cuda_test_support.h"
#include "math/amp.h"
#include "math/convert.h"

namespace {

using ampx::impl::DType;
using ampx::impl::NormType;
using ampx::impl::OptimParam;
using ampx::impl::TensorSpan;

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// Offsets (in elements) from a 256-byte-aligned allocation: every phase of
// 2- and 4-byte elements against 16 bytes.
const size_t kOffsets[] = {0, 1, 2, 3, 4, 5, 6, 7};

// Lengths around one packet, several packets, one and two chunks.
const size_t kCounts[] = {1, 7, 8, 9, 17, 33, 1000, 32768 + 13, 70001};

// Random values of the given type, roughly N(0, sigma), as raw bytes.
std::vector<uint8_t> random_bytes(DType t, size_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<uint8_t> bytes(n * ampx::impl::dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    if (t == DType::F32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h =
          t == DType::F16 ? ampx::impl::math::float_to_half(v) : ampx::impl::math::float_to_bf16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// The bit pattern of +inf or NaN in type t.
uint32_t special_raw(DType t, bool nan) {
  switch (t) {
    case DType::F32: return nan ? 0x7fc00000u : 0x7f800000u;
    case DType::F16: return nan ? 0x7e00u : 0x7c00u;
    default: return nan ? 0x7fc0u : 0x7f80u;
  }
}

void set_raw(std::vector<uint8_t>& bytes, DType t, size_t i, uint32_t raw) {
  std::memcpy(&bytes[i * ampx::impl::dtype_size(t)], &raw, ampx::impl::dtype_size(t));
}

// Both backends: the CPU one as the reference, the GPU one under test.
struct Backends {
  std::unique_ptr<ampx::impl::Backend> cpu;
  std::unique_ptr<ampx::impl::Backend> gpu;
  std::unique_ptr<ampx::impl::Allocator> gpu_memory;

  Backends() {
    ampx::impl::BackendOptions options;
    options.device_type = AMPX_DEVICE_CPU;
    cpu = ampx::impl::create_backend(options);
    gpu = ampx::impl::make_cuda_backend(0, nullptr);
    gpu_memory = gpu->make_default_allocator();
  }
};

// One tensor held twice: on the host for the CPU backend, and on the GPU
// `offset` elements past an aligned allocation.
class Mirrored {
 public:
  Mirrored(Backends& b, DType t, std::vector<uint8_t> bytes, size_t offset)
      : b_(&b),
        dtype_(t),
        host_(std::move(bytes)),
        offset_(offset),
        offset_bytes_(offset * ampx::impl::dtype_size(t)) {
    allocation_ = b.gpu_memory->allocate(offset_bytes_ + host_.size() + 1);
    REQUIRE(allocation_ != nullptr);
    if (!host_.empty()) b.gpu->copy_from_host(device(), host_.data(), host_.size());
  }
  Mirrored(const Mirrored&) = delete;
  Mirrored& operator=(const Mirrored&) = delete;
  ~Mirrored() { b_->gpu_memory->deallocate(allocation_, offset_bytes_ + host_.size() + 1); }

  void* device() const { return static_cast<uint8_t*>(allocation_) + offset_bytes_; }
  size_t offset() const { return offset_; }
  int64_t count() const {
    return static_cast<int64_t>(host_.size() / ampx::impl::dtype_size(dtype_));
  }
  TensorSpan cpu_span() { return {host_.data(), dtype_, count()}; }
  TensorSpan gpu_span() const { return {device(), dtype_, count()}; }
  const std::vector<uint8_t>& host() const { return host_; }
  std::vector<uint8_t> gpu_bytes() const {
    std::vector<uint8_t> bytes(host_.size());
    if (!bytes.empty()) b_->gpu->copy_to_host(bytes.data(), device(), bytes.size());
    return bytes;
  }

 private:
  Backends* b_;
  DType dtype_;
  std::vector<uint8_t> host_;
  size_t offset_;
  size_t offset_bytes_;
  void* allocation_ = nullptr;
};

using MirroredList = std::vector<std::unique_ptr<Mirrored>>;

std::vector<TensorSpan> cpu_spans(MirroredList& list) {
  std::vector<TensorSpan> spans;
  for (auto& m : list) spans.push_back(m->cpu_span());
  return spans;
}

std::vector<TensorSpan> gpu_spans(const MirroredList& list) {
  std::vector<TensorSpan> spans;
  for (const auto& m : list) spans.push_back(m->gpu_span());
  return spans;
}

// Every (offset, count) of type t, random; with `special`, one inf (or NaN)
// somewhere in one tensor.
MirroredList sweep(Backends& b, DType t, std::mt19937& rng, bool special, bool nan = false) {
  MirroredList list;
  for (size_t offset : kOffsets)
    for (size_t count : kCounts)
      list.push_back(std::make_unique<Mirrored>(b, t, random_bytes(t, count, rng, 4.0f), offset));
  if (special) {
    Mirrored& victim = *list[list.size() / 2 + 3];
    std::vector<uint8_t> bytes = victim.host();
    set_raw(bytes, t, bytes.size() / ampx::impl::dtype_size(t) - 1, special_raw(t, nan));
    list[list.size() / 2 + 3] = std::make_unique<Mirrored>(b, t, bytes, 5);
  }
  return list;
}

// Zeroed outputs for `ins`, of type t, each `shift` elements further from
// alignment than its input: 0 keeps the input's phase (for equal types),
// others do not.
MirroredList outputs_for(Backends& b, const MirroredList& ins, DType t, size_t shift) {
  MirroredList outs;
  for (const auto& in : ins)
    outs.push_back(std::make_unique<Mirrored>(
        b, t, std::vector<uint8_t>(static_cast<size_t>(in->count()) * ampx::impl::dtype_size(t)),
        (in->offset() + shift) % 8));
  return outs;
}

float gpu_scalar(Backends& b, const float* p) {
  float v = 0.0f;
  b.gpu->copy_to_host(&v, p, sizeof v);
  return v;
}

// A float on the GPU, freed with the Backends.
float* gpu_float(Backends& b, float value) {
  auto* p = static_cast<float*>(b.gpu_memory->allocate(sizeof(float)));
  REQUIRE(p != nullptr);
  b.gpu->copy_from_host(p, &value, sizeof value);
  return p;
}

struct GpuFloats {
  Backends& b;
  std::vector<float*> held;
  float* make(float value) {
    held.push_back(gpu_float(b, value));
    return held.back();
  }
  ~GpuFloats() {
    for (float* p : held) b.gpu_memory->deallocate(p, sizeof(float));
  }
};

int differing_tensors(const MirroredList& list) {
  int differ = 0;
  for (const auto& m : list) differ += m->gpu_bytes() != m->host();
  return differ;
}

}  // namespace

TEST_CASE("cuda multi-tensor: scaling at every alignment equals the CPU bit for bit") {
  SKIP_UNLESS_CUDA();
  Backends b;
  GpuFloats scalars{b, {}};
  std::mt19937 rng(41);
  const float scale = 49152.0f;  // 3 * 2^14: products round
  for (DType in : kFloatTypes) {
    for (bool special : {false, true}) {
      CAPTURE(ampx::impl::dtype_name(in));
      CAPTURE(special);
      MirroredList ins = sweep(b, in, rng, special);
      float cpu_factor = scale;
      for (DType out : kFloatTypes) {
        CAPTURE(ampx::impl::dtype_name(out));
        for (size_t shift : {0, 3}) {
          CAPTURE(shift);
          MirroredList outs = outputs_for(b, ins, out, shift);
          float cpu_found = 0.0f;
          float* gpu_found = scalars.make(0.0f);
          ampx_test::amp_of(b.cpu).multi_tensor_scale(cpu_spans(ins), cpu_spans(outs), &cpu_factor,
                                                      true, &cpu_found);
          ampx_test::amp_of(b.gpu).multi_tensor_scale(gpu_spans(ins), gpu_spans(outs),
                                                      scalars.make(scale), true, gpu_found);
          CHECK(differing_tensors(outs) == 0);
          CHECK(gpu_scalar(b, gpu_found) == cpu_found);
          CHECK(cpu_found == (special ? 1.0f : 0.0f));
        }
      }
      // Check only, and in place (which then equals the CPU's in place).
      float cpu_found = 0.0f;
      float* gpu_found = scalars.make(0.0f);
      ampx_test::amp_of(b.gpu).multi_tensor_scale(gpu_spans(ins), {}, scalars.make(scale), true,
                                                  gpu_found);
      CHECK(gpu_scalar(b, gpu_found) == (special ? 1.0f : 0.0f));
      CHECK(differing_tensors(ins) == 0);
      gpu_found = scalars.make(0.0f);
      ampx_test::amp_of(b.cpu).multi_tensor_scale(cpu_spans(ins), cpu_spans(ins), &cpu_factor,
                                                  false, &cpu_found);
      ampx_test::amp_of(b.gpu).multi_tensor_scale(gpu_spans(ins), gpu_spans(ins),
                                                  scalars.make(scale), false, gpu_found);
      CHECK(differing_tensors(ins) == 0);
      CHECK(gpu_scalar(b, gpu_found) == cpu_found);
    }
  }
}

TEST_CASE("cuda multi-tensor: clamp, counts and norms at every alignment equal the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(43);
  float* out = gpu_float(b, -1.0f);
  for (DType t : kFloatTypes) {
    CAPTURE(ampx::impl::dtype_name(t));
    for (bool nan : {false, true}) {
      CAPTURE(nan);
      MirroredList list = sweep(b, t, rng, true, nan);

      for (NormType type : {NormType::L2, NormType::Inf}) {
        float want = 0.0f;
        ampx_test::amp_of(b.cpu).multi_tensor_norm(cpu_spans(list), type, &want);
        ampx_test::amp_of(b.gpu).multi_tensor_norm(gpu_spans(list), type, out);
        const float got = gpu_scalar(b, out);
        CHECK(std::isnan(got) == nan);
        CHECK(std::isnan(want) == nan);
        CHECK(std::isinf(got) == !nan);
        CHECK(std::isinf(want) == !nan);
      }

      std::vector<int64_t> want(2 * list.size());
      ampx_test::amp_of(b.cpu).multi_tensor_count_nonfinite(cpu_spans(list), want.data());
      auto* counts = static_cast<int64_t*>(b.gpu_memory->allocate(want.size() * sizeof(int64_t)));
      REQUIRE(counts != nullptr);
      ampx_test::amp_of(b.gpu).multi_tensor_count_nonfinite(gpu_spans(list), counts);
      std::vector<int64_t> got(want.size());
      b.gpu->copy_to_host(got.data(), counts, got.size() * sizeof(int64_t));
      b.gpu_memory->deallocate(counts, want.size() * sizeof(int64_t));
      CHECK(got == want);

      ampx_test::amp_of(b.cpu).multi_tensor_clamp(cpu_spans(list), 2.5f);
      ampx_test::amp_of(b.gpu).multi_tensor_clamp(gpu_spans(list), 2.5f);
      CHECK(differing_tensors(list) == 0);
    }

    // Finite data: the L2 norm within one rounding of the CPU's (both sum
    // in double, in different orders), the inf norm exact, and the GPU's
    // the same on every run.
    MirroredList list = sweep(b, t, rng, false);
    for (NormType type : {NormType::L2, NormType::Inf}) {
      float want = 0.0f;
      ampx_test::amp_of(b.cpu).multi_tensor_norm(cpu_spans(list), type, &want);
      ampx_test::amp_of(b.gpu).multi_tensor_norm(gpu_spans(list), type, out);
      const float first = gpu_scalar(b, out);
      ampx_test::amp_of(b.gpu).multi_tensor_norm(gpu_spans(list), type, out);
      const float again = gpu_scalar(b, out);
      CHECK(std::memcmp(&first, &again, sizeof first) == 0);
      if (type == NormType::Inf)
        CHECK(first == want);
      else
        CHECK(std::fabs(first - want) <= 0x1p-23f * want);
    }
  }
  b.gpu_memory->deallocate(out, sizeof(float));
}

namespace {

// One optimizer parameter on both backends: the param at an offset, grad at
// another, master and states at a third.
struct MirroredParam {
  std::unique_ptr<Mirrored> param, master, grad, state[3];
};

OptimParam optim_param(const MirroredParam& p, bool gpu, DType pt, DType gt, int64_t* step,
                       int32_t group) {
  auto span_data = [&](const std::unique_ptr<Mirrored>& m) -> void* {
    if (!m) return nullptr;
    return gpu ? m->device() : m->cpu_span().data;
  };
  OptimParam o{};
  o.param = span_data(p.param);
  o.param_dtype = pt;
  o.master = static_cast<float*>(span_data(p.master));
  o.grad = span_data(p.grad);
  o.grad_dtype = gt;
  o.momentum = static_cast<float*>(span_data(p.state[0]));
  o.exp_avg_sq = static_cast<float*>(span_data(p.state[1]));
  o.max_exp_avg_sq = static_cast<float*>(span_data(p.state[2]));
  o.step = step;
  o.count = p.param->count();
  o.group = group;
  return o;
}

// fp32 values of the GPU and the CPU agree to within a few roundings (the
// GPU fuses multiply-adds); an indexing slip would be off by far more.
int far_apart(const Mirrored& m) {
  const std::vector<uint8_t> gpu = m.gpu_bytes();
  const std::vector<uint8_t>& cpu = m.host();
  int far = 0;
  for (size_t i = 0; i + 4 <= cpu.size(); i += 4) {
    float a, b;
    std::memcpy(&a, &gpu[i], 4);
    std::memcpy(&b, &cpu[i], 4);
    far += !(std::fabs(a - b) <= 1e-5f * std::fabs(b) + 1e-6f);
  }
  return far;
}

}  // namespace

TEST_CASE("cuda multi-tensor: SGD and Adam at odd offsets and over many launches match the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  GpuFloats scalars{b, {}};
  std::mt19937 rng(47);
  // 70 parameters (more than one launch holds), every (param, grad) dtype
  // pair, one of two chunks, some at offsets that share a phase with their
  // master (vector path with a head) and some that do not (one-element path).
  struct Layout {
    size_t param, grad, fp32;
  };
  const Layout layouts[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 0}, {3, 3, 3}, {2, 0, 1}};
  const size_t sizes[] = {1, 13, 256, 1029, 40000};
  const int n = 70;

  for (int optimizer = 0; optimizer < 4; ++optimizer) {
    CAPTURE(optimizer);
    const bool adam = optimizer >= 2;
    const int states = adam ? 3 : 1;
    std::vector<MirroredParam> params(n);
    std::vector<DType> ptype(n), gtype(n);
    std::vector<int32_t> group(n);
    for (int i = 0; i < n; ++i) {
      ptype[i] = kFloatTypes[i % 3];
      gtype[i] = kFloatTypes[(i / 3) % 3];
      group[i] = i % 2;
      const Layout l = layouts[i % 5];
      const size_t count = sizes[(i * 7) % 5];
      MirroredParam& p = params[i];
      std::vector<uint8_t> data = random_bytes(ptype[i], count, rng, 1.0f);
      if (ptype[i] != DType::F32) {
        std::vector<uint8_t> master(count * 4);
        for (size_t j = 0; j < count; ++j) {
          uint16_t h;
          std::memcpy(&h, &data[2 * j], 2);
          const float v = ptype[i] == DType::F16 ? ampx::impl::math::half_to_float(h)
                                                 : ampx::impl::math::bf16_to_float(h);
          std::memcpy(&master[4 * j], &v, 4);
        }
        p.master = std::make_unique<Mirrored>(b, DType::F32, master, l.fp32);
      }
      p.param = std::make_unique<Mirrored>(b, ptype[i], data, l.param);
      p.grad = std::make_unique<Mirrored>(b, gtype[i], random_bytes(gtype[i], count, rng, 0.5f), l.grad);
      for (int k = 0; k < states; ++k)
        p.state[k] = std::make_unique<Mirrored>(b, DType::F32, std::vector<uint8_t>(count * 4), l.fp32);
    }
    std::vector<int64_t> cpu_steps(n, 0);
    auto* gpu_steps = static_cast<int64_t*>(b.gpu_memory->allocate(n * sizeof(int64_t)));
    REQUIRE(gpu_steps != nullptr);
    b.gpu->copy_from_host(gpu_steps, cpu_steps.data(), n * sizeof(int64_t));

    std::vector<OptimParam> cpu_list, gpu_list;
    for (int i = 0; i < n; ++i) {
      cpu_list.push_back(optim_param(params[i], false, ptype[i], gtype[i], &cpu_steps[i], group[i]));
      gpu_list.push_back(optim_param(params[i], true, ptype[i], gtype[i], gpu_steps + i, group[i]));
    }
    const float lr[2] = {0.05f, 0.01f};
    const float wd[2] = {0.0f, 0.1f};
    float* gpu_lr = static_cast<float*>(b.gpu_memory->allocate(sizeof lr));
    float* gpu_wd = static_cast<float*>(b.gpu_memory->allocate(sizeof wd));
    REQUIRE(gpu_lr != nullptr);
    REQUIRE(gpu_wd != nullptr);
    b.gpu->copy_from_host(gpu_lr, lr, sizeof lr);
    b.gpu->copy_from_host(gpu_wd, wd, sizeof wd);

    // Three calls; the second is skipped for an inf.
    for (int call = 0; call < 3; ++call) {
      float cpu_found = call == 1 ? 1.0f : 0.0f;
      float* gpu_found = scalars.make(cpu_found);
      const ampx::impl::StepScalars cpu_scalars{&cpu_found, lr, wd};
      const ampx::impl::StepScalars gpu_scalars{gpu_found, gpu_lr, gpu_wd};
      ampx_test::amp_of(b.cpu).increment_steps(cpu_steps.data(), n, &cpu_found);
      ampx_test::amp_of(b.gpu).increment_steps(gpu_steps, n, gpu_found);
      if (adam) {
        const ampx::impl::math::AdamConfig config{0.9f,           0.999f,         1e-8f,
                                                  optimizer == 3, optimizer == 3, optimizer == 2};
        ampx_test::amp_of(b.cpu).adam_step(cpu_list, config, cpu_scalars);
        ampx_test::amp_of(b.gpu).adam_step(gpu_list, config, gpu_scalars);
      } else {
        const ampx::impl::math::SgdConfig config{0.9f, optimizer == 0 ? 0.1f : 0.0f, optimizer == 1,
                                                 optimizer == 1};
        ampx_test::amp_of(b.cpu).sgd_step(cpu_list, config, cpu_scalars);
        ampx_test::amp_of(b.gpu).sgd_step(gpu_list, config, gpu_scalars);
      }
    }

    std::vector<int64_t> got_steps(n);
    b.gpu->copy_to_host(got_steps.data(), gpu_steps, n * sizeof(int64_t));
    CHECK(got_steps == cpu_steps);
    CHECK(cpu_steps[0] == 2);
    int far = 0, not_rounded = 0;
    for (int i = 0; i < n; ++i) {
      const MirroredParam& p = params[i];
      far += far_apart(p.master ? *p.master : *p.param);
      for (int k = 0; k < states; ++k) far += far_apart(*p.state[k]);
      if (!p.master) continue;
      // The 16-bit parameter is exactly its GPU master rounded.
      const std::vector<uint8_t> master = p.master->gpu_bytes();
      const std::vector<uint8_t> data = p.param->gpu_bytes();
      for (int64_t j = 0; j < p.param->count(); ++j) {
        float w;
        std::memcpy(&w, &master[4 * j], 4);
        const uint16_t want = ptype[i] == DType::F16 ? ampx::impl::math::float_to_half(w)
                                                     : ampx::impl::math::float_to_bf16(w);
        uint16_t have;
        std::memcpy(&have, &data[2 * j], 2);
        not_rounded += have != want;
      }
    }
    CHECK(far == 0);
    CHECK(not_rounded == 0);
    b.gpu_memory->deallocate(gpu_wd, sizeof wd);
    b.gpu_memory->deallocate(gpu_lr, sizeof lr);
    b.gpu_memory->deallocate(gpu_steps, n * sizeof(int64_t));
  }
}

namespace {

// The device state of one training iteration: 16-bit gradients unscaled
// into fp32, clipped by total norm, counted, an AdamW step, a scaler update.
struct StepRig {
  static constexpr int kParams = 5;
  static constexpr size_t kSizes[kParams] = {3, 1000, 40000, 129, 70001};

  ampx::impl::Backend& backend;
  ampx::impl::Allocator& memory;
  std::vector<void*> blocks;
  std::vector<size_t> block_bytes;
  std::vector<TensorSpan> grads16, grads32;
  std::vector<OptimParam> params;
  float *found_inf, *scale, *norm, *coef, *lr, *wd;
  int64_t *steps, *counts;
  ampx::impl::math::ScalerState* state;

  StepRig(ampx::impl::Backend& be, ampx::impl::Allocator& mem, uint32_t seed)
      : backend(be), memory(mem) {
    std::mt19937 rng(seed);
    for (int i = 0; i < kParams; ++i) {
      const size_t n = kSizes[i];
      const DType g16 = i % 2 ? DType::BF16 : DType::F16;
      void* g = upload(random_bytes(g16, n, rng, 8.0f));
      grads16.push_back({g, g16, static_cast<int64_t>(n)});
      void* g32 = upload(std::vector<uint8_t>(n * 4));
      grads32.push_back({g32, DType::F32, static_cast<int64_t>(n)});
      OptimParam p{};
      p.param = upload(random_bytes(DType::F32, n, rng, 1.0f));
      p.param_dtype = DType::F32;
      p.grad = g32;
      p.grad_dtype = DType::F32;
      p.momentum = static_cast<float*>(upload(std::vector<uint8_t>(n * 4)));
      p.exp_avg_sq = static_cast<float*>(upload(std::vector<uint8_t>(n * 4)));
      p.count = static_cast<int64_t>(n);
      p.group = 0;
      params.push_back(p);
    }
    steps = static_cast<int64_t*>(upload(std::vector<uint8_t>(kParams * 8)));
    counts = static_cast<int64_t*>(upload(std::vector<uint8_t>(kParams * 16)));
    for (int i = 0; i < kParams; ++i) params[i].step = steps + i;
    found_inf = value(0.0f);
    scale = value(8.0f);
    norm = value(0.0f);
    coef = value(0.0f);
    lr = value(1e-3f);
    wd = value(1e-2f);
    ampx::impl::math::ScalerState s{};
    s.scale = 8.0f;
    s.hysteresis_left = 1;
    std::vector<uint8_t> bytes(sizeof s);
    std::memcpy(bytes.data(), &s, sizeof s);
    state = static_cast<ampx::impl::math::ScalerState*>(upload(bytes));
  }
  StepRig(const StepRig&) = delete;
  StepRig& operator=(const StepRig&) = delete;
  ~StepRig() {
    for (size_t i = 0; i < blocks.size(); ++i) memory.deallocate(blocks[i], block_bytes[i]);
  }

  void* upload(const std::vector<uint8_t>& bytes) {
    void* p = memory.allocate(bytes.size());
    REQUIRE(p != nullptr);
    backend.copy_from_host(p, bytes.data(), bytes.size());
    blocks.push_back(p);
    block_bytes.push_back(bytes.size());
    return p;
  }
  float* value(float v) {
    std::vector<uint8_t> bytes(4);
    std::memcpy(bytes.data(), &v, 4);
    return static_cast<float*>(upload(bytes));
  }

  // One iteration, enqueued only.
  void iterate() {
    backend.fill(found_inf, 4, 0, 1);
    ampx_test::amp_of(backend).multi_tensor_scale(grads16, grads32, scale, true, found_inf);
    ampx_test::amp_of(backend).multi_tensor_norm(grads32, NormType::L2, norm);
    ampx_test::amp_of(backend).clip_coefficient(norm, 1.0f, coef);
    ampx_test::amp_of(backend).multi_tensor_scale(grads32, grads32, coef, false, nullptr);
    ampx_test::amp_of(backend).multi_tensor_count_nonfinite(grads32, counts);
    ampx_test::amp_of(backend).increment_steps(steps, kParams, found_inf);
    const ampx::impl::math::AdamConfig config{0.9f, 0.999f, 1e-8f, false, false, true};
    ampx_test::amp_of(backend).adam_step(params, config,
                                         ampx::impl::StepScalars{found_inf, lr, wd});
    ampx::impl::math::ScalerConfig scaler{2.0, 0.5, 1, 1, 0.0f, 0.0f};
    ampx_test::amp_of(backend).scaler_update(state, {found_inf}, scaler, false, 0.0f);
  }

  // Every byte the iteration writes.
  std::vector<uint8_t> result() {
    std::vector<uint8_t> all;
    auto add = [&](const void* p, size_t bytes) {
      const size_t at = all.size();
      all.resize(at + bytes);
      backend.copy_to_host(all.data() + at, p, bytes);
    };
    for (const TensorSpan& g : grads32) add(g.data, static_cast<size_t>(g.count) * 4);
    for (const OptimParam& p : params) {
      add(p.param, static_cast<size_t>(p.count) * 4);
      add(p.momentum, static_cast<size_t>(p.count) * 4);
      add(p.exp_avg_sq, static_cast<size_t>(p.count) * 4);
    }
    add(steps, kParams * 8);
    add(counts, kParams * 16);
    add(norm, 4);
    add(coef, 4);
    add(state, sizeof(ampx::impl::math::ScalerState));
    return all;
  }
};

}  // namespace

TEST_CASE("cuda multi-tensor: a training iteration captured in a CUDA graph replays exactly") {
  SKIP_UNLESS_CUDA();
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    auto backend = ampx::impl::make_cuda_backend(0, stream);
    auto memory = backend->make_default_allocator();
    StepRig direct(*backend, *memory, 7);
    StepRig graphed(*backend, *memory, 7);
    backend->synchronize();

    const cuda_test::CapturedGraph graph(stream, [&] { graphed.iterate(); });

    for (int i = 0; i < 2; ++i) {
      direct.iterate();
      graph.launch();
    }
    backend->synchronize();
    const std::vector<uint8_t> want = direct.result();
    CHECK(graphed.result() == want);

    // The iterations did something: two steps were taken.
    int64_t steps = 0;
    backend->copy_to_host(&steps, direct.steps, sizeof steps);
    CHECK(steps == 2);
  }
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("cuda multi-tensor: one scaler update combines up to 256 found-inf flags") {
  SKIP_UNLESS_CUDA();
  Backends b;
  GpuFloats scalars{b, {}};
  ampx::impl::math::ScalerState initial{};
  initial.scale = 1024.0f;
  initial.hysteresis_left = 1;
  auto* state = static_cast<ampx::impl::math::ScalerState*>(b.gpu_memory->allocate(sizeof initial));
  REQUIRE(state != nullptr);
  b.gpu->copy_from_host(state, &initial, sizeof initial);
  const ampx::impl::math::ScalerConfig config{2.0, 0.5, 2000, 1, 0.0f, 0.0f};

  std::vector<const float*> flags(256, scalars.make(0.0f));
  flags[255] = scalars.make(1.0f);  // only the last one is set
  ampx_test::amp_of(b.gpu).scaler_update(state, flags, config, false, 0.0f);
  ampx::impl::math::ScalerState after{};
  b.gpu->copy_to_host(&after, state, sizeof after);
  CHECK(after.scale == 512.0f);
  CHECK(after.skipped == 1);

  flags.push_back(flags[0]);
  ampx_status status = AMPX_OK;
  std::string message;
  try {
    ampx_test::amp_of(b.gpu).scaler_update(state, flags, config, false, 0.0f);
  } catch (const ampx::impl::StatusError& e) {
    status = e.status();
    message = e.what();
  }
  CHECK(status == AMPX_ERR_INTERNAL);
  CHECK(ampx_test::contains(message, "257"));
  b.gpu_memory->deallocate(state, sizeof initial);
}

TEST_CASE("cuda multi-tensor: element indices past 2^31") {
  SKIP_UNLESS_CUDA();
  const int64_t n = (int64_t{1} << 31) + 40;  // bf16: 4 GiB
  if (cuda_test::free_device_bytes() < static_cast<size_t>(n) * 2 + (size_t{1} << 30)) {
    MESSAGE("skipped: needs 5 GiB of free device memory");
    return;
  }
  Backends b;
  GpuFloats scalars{b, {}};
  auto* x = static_cast<uint8_t*>(b.gpu_memory->allocate(static_cast<size_t>(n) * 2));
  REQUIRE(x != nullptr);
  b.gpu->fill(x, 2, 0x3f80, n);  // 1.0
  const uint16_t inf = 0x7f80, nan = 0x7fc0;
  const int64_t nan_at = (int64_t{1} << 31) + 3;
  b.gpu->copy_from_host(x + 2 * nan_at, &nan, 2);
  b.gpu->copy_from_host(x + 2 * (n - 1), &inf, 2);
  const std::vector<TensorSpan> list = {{x, DType::BF16, n}};

  auto* counts = static_cast<int64_t*>(b.gpu_memory->allocate(2 * sizeof(int64_t)));
  REQUIRE(counts != nullptr);
  ampx_test::amp_of(b.gpu).multi_tensor_count_nonfinite(list, counts);
  int64_t got[2] = {};
  b.gpu->copy_to_host(got, counts, sizeof got);
  CHECK(got[0] == 1);
  CHECK(got[1] == 1);
  b.gpu_memory->deallocate(counts, 2 * sizeof(int64_t));

  float* norm = scalars.make(0.0f);
  ampx_test::amp_of(b.gpu).multi_tensor_norm(list, NormType::Inf, norm);
  CHECK(std::isnan(gpu_scalar(b, norm)));

  // Clamping writes past 2^31: the inf becomes the bound, the NaN stays.
  ampx_test::amp_of(b.gpu).multi_tensor_clamp(list, 0.5f);
  uint16_t tail[8] = {};
  b.gpu->copy_to_host(tail, x + 2 * (n - 8), sizeof tail);
  for (uint16_t v : tail) CHECK(v == 0x3f00);
  uint16_t kept = 0;
  b.gpu->copy_to_host(&kept, x + 2 * nan_at, 2);
  CHECK(kept == nan);
  b.gpu_memory->deallocate(x, static_cast<size_t>(n) * 2);
}

#endif  // AMPX_WITH_CUDA
