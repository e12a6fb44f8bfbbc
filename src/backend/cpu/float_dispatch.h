// float_dispatch.h -- what the CPU loops share besides the dtype dispatch
// (visit_floating, core/dtype.h): index reads and task sizes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cpu {

// Reads position i of an I32 or I64 index vector (the front door,
// backend_nn.cpp, admits no other type).
class IndexReader {
 public:
  IndexReader(const void* data, DType type) : data_(data), type_(type) {}
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
}  // namespace ampx::impl
