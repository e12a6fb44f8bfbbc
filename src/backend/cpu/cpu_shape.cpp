// cpu_shape.cpp -- data movement of the shape and indexing ops on the CPU:
// strided copies (transpose, concatenation, slicing), row gathers
// (embedding) and deterministic row scatter-adds (embedding backward).
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "core/error.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Elements per task of pure data movement: cheap elements, so large tasks.
constexpr int64_t kGrain = int64_t{1} << 15;

// An element as an opaque value: copying it copies its bytes, whatever type
// it holds.
template <size_t Size>
struct Element {
  unsigned char bytes[Size];
};

// The copy as runs along the last dimension: one run per index of the
// leading dimensions, each a memcpy when both sides are contiguous there.
template <size_t Size>
void copy_runs(ThreadPool& pool, void* dst, const void* src, const StridedCopy& l) {
  using T = Element<Size>;
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  const int32_t last = l.ndim - 1;
  const int64_t run = l.sizes[last];
  const int64_t ds = l.dst_strides[last], ss = l.src_strides[last];
  int64_t runs = 1;
  for (int32_t k = 0; k < last; ++k) runs *= l.sizes[k];
  pool.parallel_for(runs, items_per_task(kGrain, run), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t rest = r, d_off = 0, s_off = 0;
      for (int32_t k = last - 1; k >= 0; --k) {
        const int64_t i = rest % l.sizes[k];
        rest /= l.sizes[k];
        d_off += i * l.dst_strides[k];
        s_off += i * l.src_strides[k];
      }
      if (ds == 1 && ss == 1) {
        std::memcpy(d + d_off, s + s_off, static_cast<size_t>(run) * Size);
      } else if (ds == 1 && ss == 0) {  // a broadcast: one element over the run
        std::fill(d + d_off, d + d_off + run, s[s_off]);
      } else {
        for (int64_t j = 0; j < run; ++j) d[d_off + j * ds] = s[s_off + j * ss];
      }
    }
  });
}

// The same copy with adjacent dimensions that both sides step through as
// one merged (and extents of 1 dropped), so that runs are as long as the
// layouts allow: a gradient broadcast over an image's H and W (a global
// average pool's backward) becomes one fill per channel instead of one
// per row. ndim 0 when every extent is 1.
StridedCopy coalesced(const StridedCopy& l) {
  StridedCopy c;
  for (int32_t k = 0; k < l.ndim; ++k) {
    if (l.sizes[k] == 1) continue;
    const int32_t j = c.ndim - 1;
    if (j >= 0 && c.dst_strides[j] == l.dst_strides[k] * l.sizes[k] &&
        c.src_strides[j] == l.src_strides[k] * l.sizes[k]) {
      c.sizes[j] *= l.sizes[k];
      c.dst_strides[j] = l.dst_strides[k];
      c.src_strides[j] = l.src_strides[k];
      continue;
    }
    c.sizes[c.ndim] = l.sizes[k];
    c.dst_strides[c.ndim] = l.dst_strides[k];
    c.src_strides[c.ndim] = l.src_strides[k];
    ++c.ndim;
  }
  return c;
}

}  // namespace

void copy_strided(ThreadPool& pool, void* dst, const void* src, size_t elem_size,
                  const StridedCopy& full) {
  for (int32_t k = 0; k < full.ndim; ++k)
    if (full.sizes[k] == 0) return;
  const StridedCopy layout = coalesced(full);
  if (layout.ndim == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  switch (elem_size) {
    case 1: return copy_runs<1>(pool, dst, src, layout);
    case 2: return copy_runs<2>(pool, dst, src, layout);
    case 4: return copy_runs<4>(pool, dst, src, layout);
    case 8: return copy_runs<8>(pool, dst, src, layout);
    default:
      fail(AMPX_ERR_INTERNAL, "copy_strided: element size ", elem_size, " is not 1, 2, 4 or 8");
  }
}

// One pass on the calling thread: a check is a compare per index, far
// cheaper than the op that follows.
void check_indices(const void* indices, DType type, int64_t count, const IndexCheck& check,
                   float* valid, int64_t* record) {
  const IndexReader index(indices, type);
  int64_t counted = 0;
  int64_t bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = index[i];
    if (check.has_ignore && v == check.ignore_index) continue;
    ++counted;
    if (bad < 0 && (v < 0 || v >= check.limit)) bad = i;
  }
  if (valid) *valid = static_cast<float>(counted);
  if (bad >= 0 && record[kRecordPosition] == -1) {
    record[kRecordPosition] = bad;
    record[kRecordValue] = index[bad];
    record[kRecordLimit] = check.limit;
    record[kRecordOp] = check.op;
    record[kRecordCall] = check.call;
  }
}

void gather_rows(ThreadPool& pool, const void* table, size_t row_bytes, int64_t table_rows,
                 const void* indices, DType index_type, int64_t count, void* out) {
  const IndexReader index(indices, index_type);
  const auto* from = static_cast<const char*>(table);
  auto* to = static_cast<char*>(out);
  const auto row = static_cast<int64_t>(row_bytes);
  pool.parallel_for(count, items_per_task(kGrain * 4, row), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = index[i];
      if (r >= 0 && r < table_rows)
        std::memcpy(to + i * row, from + r * row, row_bytes);
      else
        std::memset(to + i * row, 0, row_bytes);
    }
  });
}

void scatter_add_rows(ThreadPool& pool, const void* src, DType src_type, int64_t cols,
                      const void* indices, DType index_type, int64_t count, float* dst,
                      int64_t dst_rows) {
  const IndexReader index(indices, index_type);
  visit_floating(src_type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const math::storage_t<D>*>(src);
    // Split by columns, never by i: two tasks never add into one element,
    // and each element gets its additions in the order of i.
    pool.parallel_for(cols, items_per_task(kGrain, count), [&](int64_t begin, int64_t end) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t r = index[i];
        if (r < 0 || r >= dst_rows) continue;
        float* to = dst + r * cols;
        const math::storage_t<D>* from = in + i * cols;
        for (int64_t j = begin; j < end; ++j) to[j] += math::load_float<D>(from[j]);
      }
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
