// cpu_layout.cpp -- see cpu_layout.h. One task per (image, 16-channel
// block); inside it, tiles of 16 channels x 16 positions: with AVX-512 the
// tile's 16 rows are loaded (2-byte elements widened to 4), transposed in
// registers (32-bit unpacks, 64-bit unpacks, two rounds of 128-bit lane
// shuffles) and stored as 16 rows of the other layout; the last P % 16
// positions, and CPUs without AVX-512, take a plain loop.
#include "backend/cpu/cpu_layout.h"

#include <algorithm>

#include "core/convert_bulk.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AMPX_LAYOUT_AVX512 1
#endif

namespace ampx::impl {
namespace cpu {
namespace {

constexpr int64_t kBlock = 16;

// Positions [first, end) of one 16-channel block, from `from` to `to`: the
// NCHW side holds the block's 16 channel planes (`positions` elements
// apart), the blocked side position-major rows of 16 channels.
template <class T, bool kToBlocked>
void move_plain(const T* from, T* to, int64_t positions, int64_t first, int64_t end) {
  for (int64_t p = first; p < end; ++p)
    for (int64_t c = 0; c < kBlock; ++c) {
      if (kToBlocked) to[p * kBlock + c] = from[c * positions + p];
      else to[c * positions + p] = from[p * kBlock + c];
    }
}

#ifdef AMPX_LAYOUT_AVX512

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's headers, as convert_bulk.cpp
#endif

#define AMPX_TARGET_AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

// r[i] holds row i of a 16 x 16 tile of 32-bit elements; afterwards r[j]
// holds column j.
AMPX_TARGET_AVX512 inline void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  // Per 128-bit lane L: a[2k] = rows 2k, 2k+1 interleaved (elements 0, 1
  // of the lane), a[2k+1] likewise for elements 2, 3.
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // b[4k + j], lane L: element 4L + j of rows 4k .. 4k + 3.
  for (int k = 0; k < 4; ++k) {
    b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
  // Column 4L + j: lane L of b[j], b[4 + j], b[8 + j], b[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512i p = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44);   // lanes 0, 1 | 0, 1
    const __m512i q = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee);   // lanes 2, 3 | 2, 3
    const __m512i s = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
    const __m512i t = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
    r[j] = _mm512_shuffle_i32x4(p, s, 0x88);       // lane 0 of each
    r[4 + j] = _mm512_shuffle_i32x4(p, s, 0xdd);   // lane 1
    r[8 + j] = _mm512_shuffle_i32x4(q, t, 0x88);   // lane 2
    r[12 + j] = _mm512_shuffle_i32x4(q, t, 0xdd);  // lane 3
  }
}

template <size_t kSize>
AMPX_TARGET_AVX512 inline __m512i load_row(const unsigned char* p) {
  if constexpr (kSize == 4) return _mm512_loadu_si512(p);
  else return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <size_t kSize>
AMPX_TARGET_AVX512 inline void store_row(unsigned char* p, __m512i v) {
  if constexpr (kSize == 4) _mm512_storeu_si512(p, v);
  else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
}

// The whole tiles of one block; returns the positions done.
template <size_t kSize, bool kToBlocked>
AMPX_TARGET_AVX512 int64_t move_avx512(const unsigned char* from, unsigned char* to,
                                       int64_t positions) {
  const int64_t whole = positions / kBlock * kBlock;
  __m512i r[16];
  for (int64_t p = 0; p < whole; p += kBlock) {
    // Row i of the tile: channel i at positions p .. p + 15 (NCHW side), or
    // position p + i's 16 channels (blocked side).
    for (int i = 0; i < 16; ++i)
      r[i] = load_row<kSize>(from + (kToBlocked ? i * positions + p : (p + i) * kBlock) * kSize);
    transpose16(r);
    for (int i = 0; i < 16; ++i)
      store_row<kSize>(to + (kToBlocked ? (p + i) * kBlock : i * positions + p) * kSize, r[i]);
  }
  return whole;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // AMPX_LAYOUT_AVX512

template <class T, bool kToBlocked>
void move_block(const unsigned char* from, unsigned char* to, int64_t positions, bool avx512) {
  int64_t done = 0;
#ifdef AMPX_LAYOUT_AVX512
  if (avx512) done = move_avx512<sizeof(T), kToBlocked>(from, to, positions);
#else
  (void)avx512;
#endif
  move_plain<T, kToBlocked>(reinterpret_cast<const T*>(from), reinterpret_cast<T*>(to), positions,
                            done, positions);
}

template <bool kToBlocked>
void move(ThreadPool& pool, const void* src, void* dst, int64_t images, int64_t channels,
          int64_t positions, size_t elem_size) {
  const bool avx512 = detected_cpu_isa() == CpuIsa::Avx512;
  const int64_t blocks = channels / kBlock, block_elements = kBlock * positions;
  // A few blocks per task: a task of 4 KiB is over before a worker wakes.
  const int64_t grain = (int64_t{1} << 14) / std::max<int64_t>(block_elements, 1) + 1;
  pool.parallel_for(images * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      // The same offset in both layouts: a block's 16 x P elements are
      // contiguous in each.
      const int64_t offset = block * block_elements;
      const auto* from = static_cast<const unsigned char*>(src) + offset * elem_size;
      auto* to = static_cast<unsigned char*>(dst) + offset * elem_size;
      if (elem_size == 4) move_block<uint32_t, kToBlocked>(from, to, positions, avx512);
      else move_block<uint16_t, kToBlocked>(from, to, positions, avx512);
    }
  });
}

}  // namespace

void nchw_to_blocked16(ThreadPool& pool, const void* src, void* dst, int64_t images,
                       int64_t channels, int64_t positions, size_t elem_size) {
  move<true>(pool, src, dst, images, channels, positions, elem_size);
}

void blocked16_to_nchw(ThreadPool& pool, const void* src, void* dst, int64_t images,
                       int64_t channels, int64_t positions, size_t elem_size) {
  move<false>(pool, src, dst, images, channels, positions, elem_size);
}

}  // namespace cpu
}  // namespace ampx::impl
