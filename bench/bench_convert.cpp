// bench_convert.cpp -- the bulk conversions' vector path (AVX2/AVX-512 on
// x86-64, NEON on AArch64) against the scalar one, side by side in one run:
// f32 <-> f16, f32 <-> bf16, and FP8 quantization with a scale. Under an
// emulator (qemu) only the ratio means anything, not the times.
//   bench_convert [elements]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/convert_bulk.h"

using ampx::impl::CpuIsa;
using ampx::impl::DType;

namespace {

// Seconds per call of `run`, the best of 5 rounds.
template <class Run>
double seconds(Run&& run) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = t < best ? t : best;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 20;
  const CpuIsa best = ampx::impl::detected_cpu_isa();
  std::vector<float> f32(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f32[i] = static_cast<float>((i * 7919) % 20011) * 0.37f - 3700.0f;
  std::vector<uint16_t> half(static_cast<size_t>(n)), bf16(static_cast<size_t>(n));
  std::vector<uint8_t> fp8(static_cast<size_t>(n));
  std::vector<float> back(static_cast<size_t>(n));
  ampx::impl::convert_bulk(half.data(), DType::F16, f32.data(), DType::F32, n);
  ampx::impl::convert_bulk(bf16.data(), DType::BF16, f32.data(), DType::F32, n);
  const float scale = 0.01f;

  struct Case {
    const char* name;
    void (*run)(CpuIsa, void*, const void*, int64_t, const float*);
    void* dst;
    const void* src;
  };
  const Case cases[] = {
      {"f32 -> f16",
       [](CpuIsa isa, void* d, const void* s, int64_t k, const float*) {
         ampx::impl::convert_bulk_with(isa, d, DType::F16, s, DType::F32, k);
       },
       half.data(), f32.data()},
      {"f16 -> f32",
       [](CpuIsa isa, void* d, const void* s, int64_t k, const float*) {
         ampx::impl::convert_bulk_with(isa, d, DType::F32, s, DType::F16, k);
       },
       back.data(), half.data()},
      {"f32 -> bf16",
       [](CpuIsa isa, void* d, const void* s, int64_t k, const float*) {
         ampx::impl::convert_bulk_with(isa, d, DType::BF16, s, DType::F32, k);
       },
       bf16.data(), f32.data()},
      {"bf16 -> f32",
       [](CpuIsa isa, void* d, const void* s, int64_t k, const float*) {
         ampx::impl::convert_bulk_with(isa, d, DType::F32, s, DType::BF16, k);
       },
       back.data(), bf16.data()},
      {"f32 -> e4m3 (scaled)",
       [](CpuIsa isa, void* d, const void* s, int64_t k, const float* sc) {
         ampx::impl::quantize_fp8_bulk_with(isa, d, DType::F8E4M3, s, DType::F32, k, sc, true);
       },
       fp8.data(), f32.data()},
  };
  std::printf("%lld elements, vector path: %s\n", static_cast<long long>(n),
              ampx::impl::cpu_isa_name(best));
  std::printf("%-22s %12s %12s %8s\n", "conversion", "scalar ms", "vector ms", "ratio");
  for (const Case& c : cases) {
    const double scalar = seconds([&] { c.run(CpuIsa::Scalar, c.dst, c.src, n, &scale); });
    const double vector = seconds([&] { c.run(best, c.dst, c.src, n, &scale); });
    std::printf("%-22s %12.3f %12.3f %7.1fx\n", c.name, scalar * 1e3, vector * 1e3, scalar / vector);
  }
  return 0;
}
