// dtype.h -- element types inside the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ampx/ampx.h"

namespace ampx::impl {

enum class DType : int32_t {
  F32 = AMPX_F32,
  F16 = AMPX_F16,
  BF16 = AMPX_BF16,
  I32 = AMPX_I32,
  I64 = AMPX_I64,
  F8E4M3 = AMPX_F8E4M3,
  F8E5M2 = AMPX_F8E5M2,
};

inline bool is_valid_dtype(int32_t v) { return v >= AMPX_F32 && v <= AMPX_F8E5M2; }

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F8E4M3: return 1;
    case DType::F8E5M2: return 1;
  }
  return 0;
}

// The types ops compute in. FP8 is a storage type of its own (is_fp8):
// only casts, the FP8 capability (backend_fp8.h) and storage take it, so
// every check for a floating input refuses it.
inline bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

inline bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

const char* dtype_name(DType t);

// The compile-time form of a floating dtype, so that an element loop is
// instantiated once per type and loads and stores with the exact
// conversions of kernels/math/convert.h.
template <int D>
using DtypeTag = std::integral_constant<int, D>;

// AMPX_ERR_INTERNAL: a non-floating dtype reached code whose front door
// admits only floating ones.
[[noreturn]] void fail_not_floating(DType t);

// Calls fn(DtypeTag<AMPX_F32>{}), fn(DtypeTag<AMPX_F16>{}) or
// fn(DtypeTag<AMPX_BF16>{}) for the floating type t and returns its result:
// the one dtype dispatch of the CPU loops and the CUDA launchers.
template <class Fn>
decltype(auto) visit_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(DtypeTag<AMPX_F32>{});
    case DType::F16:
      return fn(DtypeTag<AMPX_F16>{});
    case DType::BF16:
      return fn(DtypeTag<AMPX_BF16>{});
    case DType::I32:
    case DType::I64:
    case DType::F8E4M3:
    case DType::F8E5M2:
      break;
  }
  fail_not_floating(t);
}

}  // namespace ampx::impl
