// float_tiles.h -- fp32 views of short runs of any floating type, so that
// the CPU's element-wise loops compute on plain float arrays, which the
// compiler vectorises.
//
// math::load_float and math::store_float convert one element at a time with
// branches (subnormals, NaN, overflow) that keep loops scalar; fp16 loops
// spent most of their time there. A run of F16 or BF16 is instead converted
// whole by convert_bulk (F16C or AVX-512 where the CPU has them), which is
// bit-identical to those functions for every input and unaffected by the
// FTZ/DAZ modes; F32 runs are used in place. The float math between the two
// conversions is unchanged, so results are the same bits as the per-element
// loops'.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/convert_bulk.h"
#include "core/dtype.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cpu {

// Elements per run: the buffers stay in L1 beside the data streamed through.
constexpr int64_t kTile = 1024;

// Calls fn(first, n) for consecutive runs of at most kTile elements covering
// [begin, end).
template <class Fn>
void for_each_tile(int64_t begin, int64_t end, Fn&& fn) {
  for (int64_t first = begin; first < end; first += kTile) fn(first, std::min(kTile, end - first));
}

// Reads runs of type D as floats.
template <int D>
class TileReader {
 public:
  // The n <= kTile elements at p as floats, valid until the next call.
  const float* operator()(const math::storage_t<D>* p, int64_t n) {
    if constexpr (D == AMPX_F32) {
      return p;
    } else {
      convert_bulk(buffer_, DType::F32, p, static_cast<DType>(D), n);
      return buffer_;
    }
  }

 private:
  float buffer_[D == AMPX_F32 ? 1 : kTile];
};

// Writes runs of type D from floats: fill the array start(p) returns, then
// finish(p, n) stores it (nothing left to do for F32, written in place).
template <int D>
class TileWriter {
 public:
  float* start(math::storage_t<D>* p) {
    if constexpr (D == AMPX_F32) {
      return p;
    } else {
      (void)p;
      return buffer_;
    }
  }
  void finish(math::storage_t<D>* p, int64_t n) {
    if constexpr (D != AMPX_F32) convert_bulk(p, static_cast<DType>(D), buffer_, DType::F32, n);
    else (void)p, (void)n;
  }

 private:
  float buffer_[D == AMPX_F32 ? 1 : kTile];
};

}  // namespace cpu
}  // namespace ampx::impl
