// attention.h -- the per-element pieces of scaled dot-product attention
// (core/backend_attention.h has the math) that the CPU backend and the CUDA
// kernels share, so both draw the same dropout factors and read masks alike.
#pragma once

#include <cstdint>

#include "math/convert.h"
#include "math/hd.h"
#include "math/random.h"

namespace ampx::impl {
namespace math {

// Element i of an f32 (0), f16 (1) or bf16 (2) array, as a float.
enum AttentionFloat : int { kAttentionF32 = 0, kAttentionF16 = 1, kAttentionBF16 = 2 };

AMPX_HD float attention_load(const void* data, int kind, int64_t i) {
  if (kind == kAttentionF32) return static_cast<const float*>(data)[i];
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return kind == kAttentionF16 ? half_to_float(bits) : bf16_to_float(bits);
}

// The dropout factor of score word n: 0 when dropped, scale when kept; the
// word is the one ampx_dropout gives element n of a tensor (random.h).
AMPX_HD float attention_dropout_factor(PhiloxKey key, uint64_t offset, uint64_t n,
                                       uint32_t threshold, float scale) {
  const Philox4x32 block = dropout_block(key, offset, n / 4);
  return block.v[n % 4] >= threshold ? scale : 0.0f;
}

}  // namespace math
}  // namespace ampx::impl
