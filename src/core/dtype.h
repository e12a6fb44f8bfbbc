// dtype.h -- element types inside the library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ampx/ampx.h"

namespace ampx {

enum class DType : int32_t {
  F32 = AMPX_F32,
  F16 = AMPX_F16,
  BF16 = AMPX_BF16,
  I32 = AMPX_I32,
  I64 = AMPX_I64,
};

inline bool is_valid_dtype(int32_t v) { return v >= AMPX_F32 && v <= AMPX_I64; }

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

inline bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

const char* dtype_name(DType t);

}  // namespace ampx
