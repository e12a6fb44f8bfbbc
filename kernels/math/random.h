// random.h -- counter-based random numbers (Philox4x32-10, Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and the dropout
// mask built on them, shared by the CPU backend and the CUDA kernels.
//
// A counter-based generator has no sequential state: the numbers of element
// i are a pure function of (key, counter), so any thread on any device can
// produce exactly the mask every other backend produces for that element,
// and a backward pass can regenerate the forward's mask instead of storing
// it.
#pragma once

#include <cstdint>

#include "math/hd.h"

namespace ampx::impl {
namespace math {

struct Philox4x32 {
  uint32_t v[4];
};

struct PhiloxKey {
  uint32_t v[2];
};

// The constants of Random123's philox4x32 (a multiplier pair and a Weyl
// sequence for the key schedule, chosen there for avalanche).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

AMPX_HD Philox4x32 philox_round(Philox4x32 c, PhiloxKey k) {
  // A 64-bit product gives both halves; nvcc lowers it to mul.wide.u32.
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}

// Philox4x32 with 10 rounds, the key bumped before every round but the
// first (Random123's philox4x32_R).
AMPX_HD Philox4x32 philox4x32_10(Philox4x32 counter, PhiloxKey key) {
  counter = philox_round(counter, key);
  for (int r = 1; r < 10; ++r) {
    key.v[0] += kPhiloxW0;
    key.v[1] += kPhiloxW1;
    counter = philox_round(counter, key);
  }
  return counter;
}

// ---- dropout -----------------------------------------------------------------
//
// The stream of one dropout call is keyed by the context's seed and
// numbered by the call's offset (the context's count of random calls), in
// the counter's upper half; the lower half counts blocks of four elements.
// So calls never share numbers, whatever their sizes, and element i's word
// does not depend on how the elements are split among threads.

AMPX_HD PhiloxKey dropout_key(uint64_t seed) {
  return {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// The four words of elements 4 * block .. 4 * block + 3.
AMPX_HD Philox4x32 dropout_block(PhiloxKey key, uint64_t offset, uint64_t block) {
  const Philox4x32 counter = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}};
  return philox4x32_10(counter, key);
}

// A uniform 32-bit word is dropped below the threshold floor(p * 2^32):
// an integer comparison, so every backend decides alike, and the keep rate
// is 1 - p within 2^-32.
inline uint32_t dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

// x times the mask's value (scale or 0): multiplied rather than selected,
// as torch does, so a dropped NaN or inf still poisons the output and the
// loss scaler sees the overflow.
AMPX_HD float dropout_value(float x, uint32_t word, uint32_t threshold, float scale) {
  return x * (word >= threshold ? scale : 0.0f);
}

}  // namespace math
}  // namespace ampx::impl
