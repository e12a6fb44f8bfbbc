// float_dispatch.h -- the CPU loops' dispatch from a run-time DType to a
// compile-time one, so each loop is instantiated per floating type and
// loads and stores with the exact conversions of kernels/math/convert.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "math/convert.h"

namespace ampx {
namespace cpu {

template <int D>
using FloatOf = std::integral_constant<int, D>;

// Calls fn(FloatOf<AMPX_F32/F16/BF16>{}); a non-floating type is a DTYPE
// error naming the primitive.
template <class Fn>
void visit_float(DType type, const char* primitive, Fn&& fn) {
  switch (type) {
    case DType::F32: fn(FloatOf<AMPX_F32>{}); return;
    case DType::F16: fn(FloatOf<AMPX_F16>{}); return;
    case DType::BF16: fn(FloatOf<AMPX_BF16>{}); return;
    default:
      fail(AMPX_ERR_DTYPE, primitive, ": got ", dtype_name(type), "; it needs f32, f16 or bf16");
  }
}

// Reads position i of an I32 or I64 index vector.
class IndexReader {
 public:
  IndexReader(const void* data, DType type, const char* primitive) : data_(data), type_(type) {
    if (type != DType::I32 && type != DType::I64)
      fail(AMPX_ERR_DTYPE, primitive, ": indices are ", dtype_name(type), "; they need i32 or i64");
  }
  int64_t operator[](int64_t i) const {
    return type_ == DType::I32 ? static_cast<const int32_t*>(data_)[i]
                               : static_cast<const int64_t*>(data_)[i];
  }

 private:
  const void* data_;
  DType type_;
};

// Items per task such that a task holds about `elements` elements when each
// item has `per_item` of them.
inline int64_t items_per_task(int64_t elements, int64_t per_item) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(per_item, 1));
}

}  // namespace cpu
}  // namespace ampx
