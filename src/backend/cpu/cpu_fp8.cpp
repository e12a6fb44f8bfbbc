// cpu_fp8.cpp -- the CPU backend's FP8 capabilities (see cpu_fp8.h).
#include "backend/cpu/cpu_fp8.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "math/convert.h"
#include "math/fp8.h"
#include "math/fp8_scaling.h"

namespace ampx::impl {
namespace {

// Below this many elements a loop runs on the calling thread only.
constexpr int64_t kGrain = 1 << 15;

const char* offset(const void* p, DType t, int64_t elements) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_size(t));
}

// The largest |x| bits of x[0, count) (backend_fp8.h's amax order).
uint32_t amax_bits(const void* x, DType type, int64_t count) {
  uint32_t amax = 0;
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    for (int64_t i = 0; i < count; ++i) {
      math::storage_t<D> v;
      std::memcpy(&v, offset(x, type, i), sizeof v);
      amax = std::max(amax, math::float_bits(math::load_float<D>(v)) & 0x7fffffffu);
    }
  });
  return amax;
}

// *amax = max(*amax, bits) in the amax order.
void fold_amax(float* amax, uint32_t bits) {
  uint32_t old;
  std::memcpy(&old, amax, sizeof old);
  if (bits > old) std::memcpy(amax, &bits, sizeof bits);
}

// dst (cols x rows) = src (rows x cols) transposed, in cache-sized blocks.
void transpose_bytes(ThreadPool& pool, uint8_t* dst, const uint8_t* src, int64_t rows,
                     int64_t cols) {
  constexpr int64_t kBlock = 64;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  pool.parallel_for(row_blocks, std::max<int64_t>(1, kGrain / (kBlock * std::max<int64_t>(cols, 1))),
                    [&](int64_t b, int64_t e) {
                      for (int64_t rb = b; rb < e; ++rb) {
                        const int64_t r0 = rb * kBlock, r1 = std::min(rows, r0 + kBlock);
                        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
                          const int64_t c1 = std::min(cols, c0 + kBlock);
                          for (int64_t r = r0; r < r1; ++r)
                            for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
                        }
                      }
                    });
}

}  // namespace

void CpuFp8::run_quantize(const Fp8QuantizeArgs& q) {
  const int64_t count = q.rows * q.cols;
  std::mutex amax_mutex;
  uint32_t amax = 0;
  const auto merge = [&](uint32_t bits) {
    std::lock_guard<std::mutex> lock(amax_mutex);
    amax = std::max(amax, bits);
  };
  std::vector<uint8_t> staging;
  uint8_t* y = static_cast<uint8_t*>(q.y);
  if (y == nullptr && q.y_t != nullptr) {
    staging.resize(static_cast<size_t>(count));
    y = staging.data();
  }
  pool_.parallel_for(count, kGrain, [&](int64_t b, int64_t e) {
    const void* x = offset(q.x, q.x_type, b);
    merge(y != nullptr ? quantize_fp8_bulk(y + b, q.y_type, x, q.x_type, e - b, q.scale, q.saturate)
                       : amax_bits(x, q.x_type, e - b));
  });
  if (q.y_t != nullptr) transpose_bytes(pool_, static_cast<uint8_t*>(q.y_t), y, q.rows, q.cols);
  if (q.amax != nullptr) fold_amax(q.amax, amax);
}

void CpuFp8::run_finish_step(const Fp8Slots& s, const Fp8ScaleRule& rule) {
  const int32_t position = *s.position;
  for (int64_t i = 0; i < s.count; ++i) {
    float* history = s.history + i * s.history_len;
    if (rule.delayed && s.amax[i] == 0.0f) {
      // Not rolled (TE's rule): the ring turns under the shared position,
      // so it is rotated by one to keep every entry in its place from the
      // oldest on; the scale stays.
      std::rotate(history, history + s.history_len - 1, history + s.history_len);
      continue;
    }
    history[position] = s.amax[i];
    if (rule.delayed) {
      uint32_t a = math::float_bits(s.amax[i]);
      if (!rule.most_recent) {
        a = math::history_amax_bits(s.amax[i]);
        for (int32_t j = 0; j < s.history_len; ++j)
          a = std::max(a, math::history_amax_bits(history[j]));
      }
      s.scale[i] = math::delayed_scale(math::bits_float(a), s.scale[i], s.fp8_max[i], rule.margin);
      s.scale_inv[i] = 1.0f / s.scale[i];
    }
    s.amax[i] = 0.0f;
  }
  *s.position = (position + 1) % s.history_len;
}

void CpuFp8::run_scale_from_amax(const Fp8Slots& s, int64_t slot, const float* amax,
                                 const Fp8ScaleRule& rule) {
  const float a = *amax;
  s.scale[slot] = math::current_scale(a, s.fp8_max[slot], rule.power_of_two);
  s.scale_inv[slot] = 1.0f / s.scale[slot];
  s.amax[slot] = math::amax_combine(s.amax[slot], a);
}

void CpuFp8::run_count_fp8_range(const void* x, DType x_type, int64_t count, const float* scale,
                                 DType y_type, int64_t* counts) {
  std::mutex mutex;
  const bool e4m3 = y_type == DType::F8E4M3;
  const uint32_t max_code = e4m3 ? math::Fp8E4M3::kMaxCode : math::Fp8E5M2::kMaxCode;
  pool_.parallel_for(count, kGrain, [&](int64_t b, int64_t e) {
    int64_t nonzero = 0, flushed = 0, beyond = 0;
    visit_floating(x_type, [&](auto tag) {
      constexpr int D = decltype(tag)::value;
      for (int64_t i = b; i < e; ++i) {
        math::storage_t<D> v;
        std::memcpy(&v, offset(x, x_type, i), sizeof v);
        const float value = math::load_float<D>(v);
        const uint32_t magnitude = math::float_bits(value) & 0x7fffffffu;
        if (magnitude == 0 || magnitude >= 0x7f800000u) continue;
        ++nonzero;
        const float scaled = scale != nullptr ? value * *scale : value;
        const uint32_t scaled_magnitude = math::float_bits(scaled) & 0x7fffffffu;
        const uint32_t code = e4m3 ? math::fp8_round_magnitude<math::Fp8E4M3>(scaled_magnitude)
                                   : math::fp8_round_magnitude<math::Fp8E5M2>(scaled_magnitude);
        if (code == 0) ++flushed;
        if (code > max_code) ++beyond;
      }
    });
    std::lock_guard<std::mutex> lock(mutex);
    counts[0] += nonzero;
    counts[1] += flushed;
    counts[2] += beyond;
  });
}

void CpuFp8Gemm::run_gemm(const Fp8GemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  // A is stored m x k (k x m when transposed), B k x n (n x k): decoding
  // keeps the layout, the fp32 GEMM applies the transposes.
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  convert_bulk(a.data(), DType::F32, g.a, g.a_type, m * k);
  convert_bulk(b.data(), DType::F32, g.b, g.b_type, k * n);
  const float a_scale = g.a_scale_inv != nullptr ? *g.a_scale_inv : 1.0f;
  const float b_scale = g.b_scale_inv != nullptr ? *g.b_scale_inv : 1.0f;
  std::vector<float> bias;
  if (g.bias != nullptr) {
    bias.resize(static_cast<size_t>(n));
    convert_bulk(bias.data(), DType::F32, g.bias, g.d_type, n);
  }
  std::vector<float> staging;
  float* result = static_cast<float*>(g.d);
  if (g.d_type != DType::F32) {
    staging.resize(static_cast<size_t>(m * n));
    result = staging.data();
  }
  GemmArgs f;
  f.m = m, f.n = n, f.k = k;
  f.a = a.data(), f.trans_a = g.trans_a;
  f.b = b.data(), f.trans_b = g.trans_b;
  f.ab_type = DType::F32, f.c = result, f.c_type = DType::F32;
  f.alpha = g.alpha * a_scale * b_scale;
  f.bias = g.bias != nullptr ? bias.data() : nullptr;
  cpu::gemm(pool_, f);
  if (g.d_type == DType::F32) return;
  if (!is_fp8(g.d_type)) {
    convert_bulk(g.d, g.d_type, result, DType::F32, m * n);
    return;
  }
  const uint32_t amax =
      quantize_fp8_bulk(g.d, g.d_type, result, DType::F32, m * n, g.d_scale, true);
  if (g.d_amax != nullptr) std::memcpy(g.d_amax, &amax, sizeof amax);
}

}  // namespace ampx::impl
