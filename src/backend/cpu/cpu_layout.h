// cpu_layout.h -- NCHW images to oneDNN's channel-blocked layout nChw16c
// ("aBcd16b") and back, for the convolutions' operands (dnnl_conv.cpp).
//
// For images of C channels (a multiple of 16) and P = H * W positions:
//   blocked[n][c / 16][p][c % 16] = nchw[n][c][p]
// Each 16-channel block of an image is a 16 x P transpose, done 16 x 16
// elements at a time in AVX-512 registers where the CPU has them. Elements
// are 2 or 4 bytes and only moved, never converted. Memory traffic: one
// read and one write of the image -- what oneDNN 2.6's reorder does, which
// ran at a quarter of memcpy's speed on these shapes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/thread_pool.h"

namespace ampx::impl {
namespace cpu {

// images * channels * positions elements of elem_size (2 or 4) bytes from
// src to dst, which must not overlap; channels % 16 == 0.
void nchw_to_blocked16(ThreadPool& pool, const void* src, void* dst, int64_t images,
                       int64_t channels, int64_t positions, size_t elem_size);
void blocked16_to_nchw(ThreadPool& pool, const void* src, void* dst, int64_t images,
                       int64_t channels, int64_t positions, size_t elem_size);

}  // namespace cpu
}  // namespace ampx::impl
