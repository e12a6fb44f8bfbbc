// test_cpu_layout.cpp -- the CPU convolutions' layout moves (cpu_layout.h):
// NCHW to nChw16c puts element (n, c, p) at ((n * C/16 + c/16) * P + p) *
// 16 + c%16, for 2- and 4-byte elements, position counts with and without
// a partial tile of 16, on one thread and on several; the way back restores
// every bit.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_layout.h"

using ampx::impl::ThreadPool;

namespace {

template <class T>
void check_moves(ThreadPool& pool, int64_t images, int64_t channels, int64_t positions) {
  const int64_t count = images * channels * positions;
  std::mt19937_64 rng(static_cast<uint64_t>(images * 1000 + channels * 10 + positions));
  std::vector<T> nchw(static_cast<size_t>(count)), blocked(nchw.size()), back(nchw.size());
  for (T& v : nchw) v = static_cast<T>(rng());
  ampx::impl::cpu::nchw_to_blocked16(pool, nchw.data(), blocked.data(), images, channels,
                                     positions, sizeof(T));
  int64_t wrong = 0;
  for (int64_t n = 0; n < images; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < positions; ++p) {
        const int64_t at = ((n * (channels / 16) + c / 16) * positions + p) * 16 + c % 16;
        wrong += blocked[static_cast<size_t>(at)] !=
                 nchw[static_cast<size_t>((n * channels + c) * positions + p)];
      }
  CHECK(wrong == 0);
  ampx::impl::cpu::blocked16_to_nchw(pool, blocked.data(), back.data(), images, channels,
                                     positions, sizeof(T));
  CHECK(std::memcmp(back.data(), nchw.data(), nchw.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("cpu layout: NCHW <-> nChw16c moves every element to its place and back") {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t positions : {1, 15, 16, 63, 64, 1024}) {
      CAPTURE(threads);
      CAPTURE(positions);
      check_moves<uint32_t>(pool, 3, 32, positions);
      check_moves<uint16_t>(pool, 3, 32, positions);
      check_moves<uint16_t>(pool, 1, 16, positions);
    }
  }
}
