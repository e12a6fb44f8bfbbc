// mma.cpp -- the tensor cores' warp-wide matrix product, mma.sync.aligned.
// m16n8k16.row.col.f32.{f16,bf16}, for kernels run by the emulator: every
// lane of the warp deposits its fragments, then each computes its four
// results of C += A B from the operands they spell out under the PTX ISA's
// fragment layout (written out here again, independently of src/backend/cuda/kernels/mma.cuh,
// so that a kernel that misplaces a fragment gets wrong numbers, as on a GPU).
// Products of two 16-bit values are exact in fp32; each result's sixteen
// products are summed in fp32 in k order and added to c, where the device
// sums in an order of its own: results agree to fp32 rounding.
#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

#include "emulator.h"

namespace ampx_emu {
namespace {

constexpr int kMaxWarps = 1024 / 32;

struct Fragments {
  uint32_t a[4];
  uint32_t b[2];
};

float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else if (exponent != 0) {
    bits = sign | static_cast<uint32_t>(exponent + 112) << 23 | mantissa << 13;
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: 2^-24 * mantissa, exact in fp32
    float f = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t half_of(uint32_t reg, int which) { return static_cast<uint16_t>(reg >> (16 * which)); }

}  // namespace

void mma_16x8x16(bool bf16, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  // Shared by the block's threads (one host thread runs a block at a time).
  static thread_local Fragments deposited[kMaxWarps][32];
  const unsigned int thread =
      threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned int warp = thread / 32, lane = thread % 32;
  Fragments& mine = deposited[warp][lane];
  for (int i = 0; i < 4; ++i) mine.a[i] = a[i];
  mine.b[0] = b0, mine.b[1] = b1;
  warp_collective(WarpOp::Sync, 0xffffffffu, 0, 0, 32);
  const Fragments* lanes = deposited[warp];
  auto value = [bf16](uint16_t bits) { return bf16 ? from_bf16(bits) : from_f16(bits); };
  // A(r, k): lane 4 (r % 8) + (k % 8) / 2, register (r >= 8) + 2 (k >= 8), half k % 2.
  auto a_at = [&](int r, int k) {
    const Fragments& f = lanes[4 * (r % 8) + (k % 8) / 2];
    return value(half_of(f.a[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2));
  };
  // B(k, n): lane 4 n + (k % 8) / 2, register (k >= 8), half k % 2.
  auto b_at = [&](int k, int n) {
    const Fragments& f = lanes[4 * n + (k % 8) / 2];
    return value(half_of(f.b[k >= 8 ? 1 : 0], k % 2));
  };
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  float result[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), column = 2 * t + i % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, column);
    result[i] = c[i] + sum;
  }
  // Nobody deposits the next product's fragments before every lane has read.
  warp_collective(WarpOp::Sync, 0xffffffffu, 0, 0, 32);
  for (int i = 0; i < 4; ++i) c[i] = result[i];
}

}  // namespace ampx_emu
