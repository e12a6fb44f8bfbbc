// cublaslt.cpp (CUDA emulator) -- cuBLASLt's matrix multiply on the CPU, for
// ampx's CUDA backend (backend/cuda/cublaslt_gemm.cpp) to run without a GPU.
//
// What it computes, as cuBLASLt does (column-major, strided batches):
//   D = alpha * op(A) op(B) + beta * C  (+ bias[row] with the BIAS epilogue)
// with A and B f32, f16 or bf16 (the same type), C and D of that type or
// f32, compute type 32F (or 32F_FAST_TF32 for f32 A and B: their elements
// rounded to TF32's 10 mantissa bits first, ties to even, the emulator's
// model of the tensor cores' conversion) and fp32 alpha and beta read from
// the host. Each dot product is summed in fp32 in k order, the epilogue is
// applied in fp32, and D is rounded once (ties to even, with ampx's own
// conversions).
// When beta is 0, C is not read. C and D may be the same matrix.
//
// FP8 (cuBLASLt's FP8 matmul, as on Ada and Hopper): A and B E4M3 or E5M2
// (not both E5M2), compute type 32F, cuBLASLt's TN layout only (A
// transposed, B not) with m, n and k multiples of 16, C and D of one type
// (f32, f16, bf16, E4M3 or E5M2). The device scalars behind the A/B/C/D
// scale pointers (1 where unset) are read when the multiply runs:
//   D = scale_d * (alpha * scale_a * scale_b * op(A) op(B) + beta * scale_c * C (+ bias)),
// an FP8 D rounded saturating by the emulator's cuda_fp8.h conversion,
// and the AMAX_D pointer (FP8 D only) set to max |D| before scale_d.
// Scale and amax pointers on a product that is not FP8 are refused
// (CUBLAS_STATUS_INVALID_VALUE).
//
// What it checks, so that tests catch what a GPU would punish:
//  - the arguments the library validates (null or destroyed objects,
//    dimensions that do not chain, differing batch counts, ld < rows, a
//    BIAS epilogue without a bias) give CUBLAS_STATUS_INVALID_VALUE, and a
//    handle that is null or destroyed CUBLAS_STATUS_NOT_INITIALIZED, as in
//    cuBLASLt;
//  - every matrix read or written, the bias and the workspace lie whole in
//    one live emulated device allocation (a host pointer would fault on a
//    GPU), and alpha and beta do not (the pointer mode is host);
//  - each pointer has the alignment the algorithm was chosen for: the
//    MIN_ALIGNMENT_*_BYTES promised to cublasLtMatmulAlgoGetHeuristic, kept
//    in the algorithm, and the bias is 16-byte aligned;
//  - when a recorded multiply is replayed from a CUDA graph, its memory is
//    checked again, and an allocation freed since gives the illegal-address
//    error a kernel would leave.
// Problems outside the list above have no algorithm
// (CUBLAS_STATUS_NOT_SUPPORTED), as do some that cuBLASLt does run: see
// the BIAS rule at has_algorithm().
//
// Thread safety: each object is used by one thread at a time, as in
// cuBLASLt; the only state shared between threads is the registry of live
// objects, behind a mutex.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_fp8.h>

#include "emulator.h"
#include "math/convert.h"
#include "math/fp8.h"

struct cublasLtContext {
  // A handle carries no state here: there is no device context to hold.
};

struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  bool bias_type_set = false;  // else the bias has D's type
  cudaDataType_t bias_type = CUDA_R_32F;
  // FP8: device scalars (scales) and the device float the amax goes to.
  const void* scale[4] = {nullptr, nullptr, nullptr, nullptr};  // A, B, C, D
  void* amax_d = nullptr;
};

struct cublasLtMatrixLayoutOpaque {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
};

struct cublasLtMatmulPreferenceOpaque {
  uint64_t max_workspace_bytes = 0;
  uint32_t reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  // A, B, C, D. 256 is cuBLASLt's default: without a promise, an algorithm
  // may assume the alignment cudaMalloc gives.
  uint32_t min_alignment[4] = {256, 256, 256, 256};
};

namespace {

// ---- live objects ------------------------------------------------------------

enum class ObjectKind { kHandle, kMatmulDesc, kLayout, kPreference };

ObjectKind kind_of(const cublasLtContext*) { return ObjectKind::kHandle; }
ObjectKind kind_of(const cublasLtMatmulDescOpaque*) { return ObjectKind::kMatmulDesc; }
ObjectKind kind_of(const cublasLtMatrixLayoutOpaque*) { return ObjectKind::kLayout; }
ObjectKind kind_of(const cublasLtMatmulPreferenceOpaque*) { return ObjectKind::kPreference; }

// Every object created and not yet destroyed, so that a destroyed or
// made-up one is refused instead of read: a GPU test run would crash or
// silently use freed memory there. Addresses are reused after a destroy, so
// this catches most misuse, not all.
class LiveObjects {
 public:
  void add(const void* object, ObjectKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    objects_[object] = kind;
  }
  bool remove(const void* object, ObjectKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = objects_.find(object);
    if (found == objects_.end() || found->second != kind) return false;
    objects_.erase(found);
    return true;
  }
  bool contains(const void* object, ObjectKind kind) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = objects_.find(object);
    return found != objects_.end() && found->second == kind;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, ObjectKind> objects_;
};

// Never destroyed: objects held by static ampx objects are destroyed at
// process exit, possibly after this file's statics.
LiveObjects& live_objects() {
  static LiveObjects* const objects = new LiveObjects;
  return *objects;
}

template <class Object>
bool is_live(const Object* object) {
  return object != nullptr && live_objects().contains(object, kind_of(object));
}

template <class Object>
cublasStatus_t publish(Object** out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  try {
    auto object = std::make_unique<Object>();
    live_objects().add(object.get(), kind_of(object.get()));
    *out = object.release();
    return CUBLAS_STATUS_SUCCESS;
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
}

// cuBLASLt's descriptor destroy functions accept NULL, as free() does.
template <class Object>
cublasStatus_t retire(Object* object) {
  if (object == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!live_objects().remove(object, kind_of(object))) return CUBLAS_STATUS_INVALID_VALUE;
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

// An attribute's value, which cuBLASLt takes only at its exact size.
template <class T>
bool read_attribute(const void* buf, size_t size, T* value) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(value, buf, sizeof(T));
  return true;
}

// ---- element types -----------------------------------------------------------

bool is_fp8_type(int32_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

bool is_known_type(int32_t type) {
  return type == CUDA_R_32F || type == CUDA_R_64F || type == CUDA_R_16F || type == CUDA_R_16BF ||
         is_fp8_type(type);
}

// The types a multiply can read and write (f64 is a valid layout type that
// has no algorithm).
bool is_multiply_type(cudaDataType_t type) {
  return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
}

int64_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return 1;
    default: return 2;
  }
}

float load_element(const void* base, int64_t index, cudaDataType_t type) {
  switch (type) {
    case CUDA_R_16F:
      return ampx::impl::math::half_to_float(static_cast<const uint16_t*>(base)[index]);
    case CUDA_R_16BF:
      return ampx::impl::math::bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case CUDA_R_8F_E4M3:
      return ampx::impl::math::e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
    case CUDA_R_8F_E5M2:
      return ampx::impl::math::e5m2_to_float(static_cast<const uint8_t*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

void store_element(void* base, int64_t index, cudaDataType_t type, float value) {
  switch (type) {
    case CUDA_R_16F:
      static_cast<uint16_t*>(base)[index] = ampx::impl::math::float_to_half(value);
      break;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(base)[index] = ampx::impl::math::float_to_bf16(value);
      break;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      static_cast<uint8_t*>(base)[index] = __nv_cvt_float_to_fp8(
          value, __NV_SATFINITE, type == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
      break;
    default: static_cast<float*>(base)[index] = value; break;
  }
}

bool is_power_of_two(uint32_t value) { return value != 0 && (value & (value - 1)) == 0; }

// ---- problems ----------------------------------------------------------------

// A layout as it was when the call was made: the caller may change or
// destroy the descriptor before a graph replays the multiply.
struct Matrix {
  cudaDataType_t type;
  int64_t rows, cols, ld;
  int32_t batch;
  int64_t stride;  // elements between the matrices of a batch

  // The elements the batch spans, [first, last), relative to the pointer
  // (first < 0 for a negative stride); false when that, in bytes, does not
  // fit int64.
  bool span(int64_t* first, int64_t* last) const {
    *first = *last = 0;
    if (empty()) return true;
    int64_t one_matrix = 0, last_offset = 0, bytes = 0;
    if (__builtin_mul_overflow(ld, cols - 1, &one_matrix) ||
        __builtin_add_overflow(one_matrix, rows, &one_matrix) ||
        __builtin_mul_overflow(stride, static_cast<int64_t>(batch) - 1, &last_offset) ||
        __builtin_add_overflow(std::max<int64_t>(0, last_offset), one_matrix, last))
      return false;
    *first = std::min<int64_t>(0, last_offset);
    return !__builtin_sub_overflow(*last, *first, &bytes) &&
           !__builtin_mul_overflow(bytes, element_bytes(type), &bytes);
  }
  bool empty() const { return rows == 0 || cols == 0; }
  bool same_storage(const Matrix& o) const {
    return type == o.type && rows == o.rows && cols == o.cols && ld == o.ld && batch == o.batch &&
           (batch == 1 || stride == o.stride);
  }
};

// Everything a multiply depends on but its pointers and scalars.
struct Problem {
  int64_t m, n, k;  // op(A) is m x k, op(B) k x n, C and D m x n
  bool trans_a, trans_b;
  Matrix a, b, c, d;
  cublasComputeType_t compute_type;
  cublasLtEpilogue_t epilogue;
  cudaDataType_t bias_type;
  bool fp8;          // FP8 A and B
  bool scaled;       // a scale or amax pointer is set
  bool amax;         // the AMAX_D pointer is set
};

cublasStatus_t read_matrix(cublasLtMatrixLayout_t layout, Matrix* matrix) {
  if (!is_live(layout)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasLtMatrixLayoutOpaque& l = *layout;
  constexpr uint64_t kMaxDimension = static_cast<uint64_t>(INT64_MAX);
  if (l.rows > kMaxDimension || l.cols > kMaxDimension || l.batch_count < 1 || l.ld < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  *matrix = Matrix{l.type, static_cast<int64_t>(l.rows), static_cast<int64_t>(l.cols), l.ld,
                   l.batch_count, l.batch_stride};
  if (matrix->ld < matrix->rows) return CUBLAS_STATUS_INVALID_VALUE;
  int64_t first = 0, last = 0;
  return matrix->span(&first, &last) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// The problem the descriptors describe, if they are consistent.
cublasStatus_t read_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_layout,
                            cublasLtMatrixLayout_t b_layout, cublasLtMatrixLayout_t c_layout,
                            cublasLtMatrixLayout_t d_layout, Problem* p) {
  if (!is_live(desc)) return CUBLAS_STATUS_INVALID_VALUE;
  const std::pair<cublasLtMatrixLayout_t, Matrix*> operands[] = {
      {a_layout, &p->a}, {b_layout, &p->b}, {c_layout, &p->c}, {d_layout, &p->d}};
  for (const auto& [layout, matrix] : operands) {
    const cublasStatus_t status = read_matrix(layout, matrix);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  p->trans_a = desc->trans_a == CUBLAS_OP_T;
  p->trans_b = desc->trans_b == CUBLAS_OP_T;
  p->m = p->d.rows;
  p->n = p->d.cols;
  p->k = p->trans_a ? p->a.rows : p->a.cols;
  const int64_t a_rows = p->trans_a ? p->a.cols : p->a.rows;
  const int64_t b_rows = p->trans_b ? p->b.cols : p->b.rows;
  const int64_t b_cols = p->trans_b ? p->b.rows : p->b.cols;
  if (a_rows != p->m || b_rows != p->k || b_cols != p->n || p->c.rows != p->m ||
      p->c.cols != p->n)
    return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t batch = p->d.batch;
  if (p->a.batch != batch || p->b.batch != batch || p->c.batch != batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  // alpha and beta are read as floats below: the only scale type the
  // supported compute types take.
  if (desc->scale_type != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  p->compute_type = desc->compute_type;
  p->epilogue = desc->epilogue;
  p->bias_type = desc->bias_type_set ? desc->bias_type : p->d.type;
  p->fp8 = is_fp8_type(p->a.type) || is_fp8_type(p->b.type);
  p->amax = desc->amax_d != nullptr;
  p->scaled = p->amax;
  for (const void* scale : desc->scale) p->scaled = p->scaled || scale != nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

// Whether the emulator has an algorithm for `p`: compute type 32F, or
// 32F_FAST_TF32 for f32 inputs, f32/f16/bf16 inputs of one type, C and D of
// that type or f32, and the DEFAULT or BIAS epilogue with a bias of D's
// type or f32.
//
// The BIAS epilogue also needs D's row count to be a multiple of 8. cuBLASLt
// has no such rule; the emulator invents it so that ampx's path for a
// problem with no fused-bias algorithm (a separate bias kernel) runs in the
// tests, as it does on GPUs whose heuristics turn some shapes down.
bool has_fp8_algorithm(const Problem& p) {
  if (p.compute_type != CUBLAS_COMPUTE_32F) return false;
  if (!is_fp8_type(p.a.type) || !is_fp8_type(p.b.type)) return false;
  if (p.a.type == CUDA_R_8F_E5M2 && p.b.type == CUDA_R_8F_E5M2) return false;
  if (!p.trans_a || p.trans_b) return false;
  if (p.m % 16 != 0 || p.n % 16 != 0 || p.k % 16 != 0) return false;
  const bool fp8_d = is_fp8_type(p.d.type);
  if (p.c.type != p.d.type || (!fp8_d && !is_multiply_type(p.d.type))) return false;
  if (p.amax && !fp8_d) return false;
  if (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return true;
  if (p.epilogue != CUBLASLT_EPILOGUE_BIAS || fp8_d || p.bias_type != p.d.type) return false;
  return p.m % 8 == 0;
}

bool has_algorithm(const Problem& p) {
  if (p.fp8) return has_fp8_algorithm(p);
  if (p.scaled) return false;
  if (p.compute_type != CUBLAS_COMPUTE_32F &&
      !(p.compute_type == CUBLAS_COMPUTE_32F_FAST_TF32 && p.a.type == CUDA_R_32F))
    return false;
  if (!is_multiply_type(p.a.type) || p.b.type != p.a.type) return false;
  if (p.c.type != p.d.type || (p.d.type != p.a.type && p.d.type != CUDA_R_32F)) return false;
  if (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT) return true;
  if (p.epilogue != CUBLASLT_EPILOGUE_BIAS) return false;
  if (p.bias_type != p.d.type && p.bias_type != CUDA_R_32F) return false;
  return p.m % 8 == 0;
}

// ---- algorithms --------------------------------------------------------------

// What the emulator keeps in cublasLtMatmulAlgo_t::data: a tag, the kernel
// the algorithm stands for (its types and epilogue: a GPU kernel is
// compiled for those), and the alignments it was chosen for.
constexpr uint64_t kAlgoTag = 0x616d70782d4c7431;  // "ampx-Lt1"
enum AlgoWord { kTagWord = 0, kKernelWord = 1, kAlignAbWord = 2, kAlignCdWord = 3 };

uint64_t kernel_of(const Problem& p) {
  const auto byte = [](int32_t value) { return static_cast<uint64_t>(value) & 0xffu; };
  const bool bias = p.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  return byte(p.a.type) | byte(p.d.type) << 8 | byte(p.epilogue) << 16 |
         (bias ? byte(p.bias_type) : 0) << 24 | static_cast<uint64_t>(p.compute_type) << 32 |
         byte(p.b.type) << 40 | static_cast<uint64_t>(p.amax) << 48;
}

cublasLtMatmulAlgo_t make_algo(const Problem& p, const uint32_t (&alignment)[4]) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[kTagWord] = kAlgoTag;
  algo.data[kKernelWord] = kernel_of(p);
  algo.data[kAlignAbWord] = alignment[0] | static_cast<uint64_t>(alignment[1]) << 32;
  algo.data[kAlignCdWord] = alignment[2] | static_cast<uint64_t>(alignment[3]) << 32;
  return algo;
}

// ---- the multiply ------------------------------------------------------------

const void* element_at(const void* base, int64_t index, cudaDataType_t type) {
  return static_cast<const char*>(base) + index * element_bytes(type);
}
void* element_at(void* base, int64_t index, cudaDataType_t type) {
  return static_cast<char*>(base) + index * element_bytes(type);
}

// Whether `matrix` at `ptr` lies whole in one live device allocation.
bool in_device_memory(const void* ptr, const Matrix& matrix) {
  int64_t first = 0, last = 0;
  if (!matrix.span(&first, &last)) return false;
  if (first == last) return true;
  const int64_t size = element_bytes(matrix.type);
  const uintptr_t start = reinterpret_cast<uintptr_t>(ptr) + static_cast<uintptr_t>(first * size);
  return ampx_emu::is_device_memory(reinterpret_cast<const void*>(start),
                                    static_cast<size_t>((last - first) * size));
}

// Whether every matrix of the batch starts at a multiple of `alignment`.
bool is_aligned(const void* ptr, const Matrix& matrix, uint32_t alignment) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr);
  if (matrix.batch > 1) {
    const int64_t stride_bytes = matrix.stride * element_bytes(matrix.type);
    bits |= static_cast<uint64_t>(stride_bytes < 0 ? -stride_bytes : stride_bytes);
  }
  return bits % alignment == 0;
}

// One cublasLtMatmul call, copied whole: it may run at a graph's replay,
// after the descriptors and the scalars it came from are gone.
struct Multiply {
  Problem p;
  const void* a;
  const void* b;
  const void* c;  // nullptr when beta is 0: C is not read
  void* d;
  const void* bias;  // nullptr without the BIAS epilogue
  float alpha, beta;
  const void* scale[4];  // FP8: device floats, or nullptr for 1
  void* amax_d;          // FP8 D: device float, or nullptr

  bool memory_is_live() const {
    for (const void* s : scale)
      if (s != nullptr && !ampx_emu::is_device_memory(s, sizeof(float))) return false;
    return in_device_memory(a, p.a) && in_device_memory(b, p.b) &&
           (c == nullptr || in_device_memory(c, p.c)) && in_device_memory(d, p.d) &&
           (bias == nullptr ||
            in_device_memory(bias, Matrix{p.bias_type, p.m, 1, p.m, 1, 0})) &&
           (amax_d == nullptr || ampx_emu::is_device_memory(amax_d, sizeof(float)));
  }

  float scale_of(int which) const {
    float value = 1.0f;
    if (scale[which] != nullptr) std::memcpy(&value, scale[which], sizeof value);
    return value;
  }

  void operator()() const {
    // Memory freed since the call (a graph replayed later) would make a
    // kernel fault: report it as the runtime reports such a fault.
    if (!memory_is_live()) {
      ampx_emu::record_error(cudaErrorIllegalAddress);
      return;
    }
    try {
      run();
    } catch (const std::exception&) {
      // Out of host memory for the staging below: the emulator's failure,
      // reported as a kernel's would be.
      ampx_emu::record_error(cudaErrorLaunchFailure);
    }
  }

  // op(A) and op(B) are first converted to fp32 with k contiguous (rows of
  // op(A), columns of op(B)), which makes each dot product one pass.
  void run() const {
    const int64_t m = p.m, n = p.n, k = p.k;
    const float factor = alpha * scale_of(0) * scale_of(1);
    const float c_factor = beta * scale_of(2);
    const float d_scale = scale_of(3);
    uint32_t amax_bits = 0;
    std::vector<float> op_a(static_cast<size_t>(m * k));
    std::vector<float> op_b(static_cast<size_t>(n * k));
    std::vector<float> column(static_cast<size_t>(m));
    for (int32_t item = 0; item < p.d.batch; ++item) {
      if (k > 0) {
        const void* a_item = element_at(a, item * p.a.stride, p.a.type);
        const void* b_item = element_at(b, item * p.b.stride, p.b.type);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t l = 0; l < k; ++l)
            op_a[i * k + l] =
                load_element(a_item, p.trans_a ? l + i * p.a.ld : i + l * p.a.ld, p.a.type);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t l = 0; l < k; ++l)
            op_b[j * k + l] =
                load_element(b_item, p.trans_b ? j + l * p.b.ld : l + j * p.b.ld, p.b.type);
        if (p.compute_type == CUBLAS_COMPUTE_32F_FAST_TF32) {
          for (float& x : op_a) x = ampx_emu::to_tf32(x);
          for (float& x : op_b) x = ampx_emu::to_tf32(x);
        }
      }
      const void* c_item = c != nullptr ? element_at(c, item * p.c.stride, p.c.type) : nullptr;
      void* d_item = element_at(d, item * p.d.stride, p.d.type);
      for (int64_t j = 0; j < n; ++j) {
        dot_column(op_a.data(), op_b.data() + j * k, column.data());
        for (int64_t i = 0; i < m; ++i) {
          // Each element of C is read before the same element of D is
          // written: C and D may be one matrix.
          float value = factor * column[i];
          if (c_item != nullptr)
            value += c_factor * load_element(c_item, i + j * p.c.ld, p.c.type);
          if (bias != nullptr) value += load_element(bias, i, p.bias_type);
          if (is_fp8_type(p.d.type)) {
            amax_bits = std::max(amax_bits, ampx::impl::math::float_bits(value) & 0x7fffffffu);
            value *= d_scale;
          }
          store_element(d_item, i + j * p.d.ld, p.d.type, value);
        }
      }
    }
    if (amax_d != nullptr) std::memcpy(amax_d, &amax_bits, sizeof amax_bits);
  }

  // column[i] = op(A) row i . b_column, each summed in k order. Four rows at
  // a time only so that independent sums overlap; the order within each is
  // unchanged.
  void dot_column(const float* rows, const float* b_column, float* column) const {
    const int64_t m = p.m, k = p.k;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const float* r0 = rows + i * k;
      const float* r1 = r0 + k;
      const float* r2 = r1 + k;
      const float* r3 = r2 + k;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
      for (int64_t l = 0; l < k; ++l) {
        const float x = b_column[l];
        s0 += r0[l] * x;
        s1 += r1[l] * x;
        s2 += r2[l] * x;
        s3 += r3[l] * x;
      }
      column[i] = s0, column[i + 1] = s1, column[i + 2] = s2, column[i + 3] = s3;
    }
    for (; i < m; ++i) {
      const float* row = rows + i * k;
      float sum = 0.0f;
      for (int64_t l = 0; l < k; ++l) sum += row[l] * b_column[l];
      column[i] = sum;
    }
  }
};

// Checks one operand of a call: present, in device memory, aligned.
bool operand_ok(const void* ptr, const Matrix& matrix, uint32_t promised_alignment) {
  if (matrix.empty()) return true;
  if (ptr == nullptr || !in_device_memory(ptr, matrix)) return false;
  const uint32_t natural = static_cast<uint32_t>(element_bytes(matrix.type));
  return is_aligned(ptr, matrix, std::max(promised_alignment, natural));
}

// Scalars are read on the host (the pointer mode is host): a device pointer
// here would be dereferenced on the host by the real library too.
bool read_scalar(const void* ptr, float* value) {
  if (ptr == nullptr || ampx_emu::is_device_memory(ptr, sizeof(float))) return false;
  std::memcpy(value, ptr, sizeof(float));
  return true;
}

}  // namespace

// ---- the API -----------------------------------------------------------------

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) { return publish(lightHandle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return retire(lightHandle) == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_SUCCESS
                                                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!is_known_type(scaleType)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t status = publish(matmulDesc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  (*matmulDesc)->compute_type = computeType;
  (*matmulDesc)->scale_type = scaleType;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return retire(matmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  if (!is_live(matmulDesc)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulDescOpaque& desc = *matmulDesc;
  int32_t value = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!read_attribute(buf, sizeInBytes, &value) ||
          (value != CUBLAS_COMPUTE_32F && value != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_INVALID_VALUE;
      desc.compute_type = static_cast<cublasComputeType_t>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if (!read_attribute(buf, sizeInBytes, &value) || !is_known_type(value))
        return CUBLAS_STATUS_INVALID_VALUE;
      desc.scale_type = static_cast<cudaDataType_t>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!read_attribute(buf, sizeInBytes, &value) ||
          (value != CUBLAS_OP_N && value != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc.trans_a : desc.trans_b) =
          static_cast<cublasOperation_t>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t epilogue = 0;
      if (!read_attribute(buf, sizeInBytes, &epilogue)) return CUBLAS_STATUS_INVALID_VALUE;
      switch (epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT:
        case CUBLASLT_EPILOGUE_RELU:
        case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_RELU_BIAS:
        case CUBLASLT_EPILOGUE_GELU:
        case CUBLASLT_EPILOGUE_GELU_BIAS:
          desc.epilogue = static_cast<cublasLtEpilogue_t>(epilogue);
          return CUBLAS_STATUS_SUCCESS;
      }
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attribute(buf, sizeInBytes, &desc.bias) ? CUBLAS_STATUS_SUCCESS
                                                          : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      return read_attribute(buf, sizeInBytes, &desc.scale[attr - CUBLASLT_MATMUL_DESC_A_SCALE_POINTER])
                 ? CUBLAS_STATUS_SUCCESS
                 : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
      return read_attribute(buf, sizeInBytes, &desc.amax_d) ? CUBLAS_STATUS_SUCCESS
                                                            : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      if (!read_attribute(buf, sizeInBytes, &value) || !is_known_type(value))
        return CUBLAS_STATUS_INVALID_VALUE;
      desc.bias_type = static_cast<cudaDataType_t>(value);
      desc.bias_type_set = true;
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!is_known_type(type)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t status = publish(matLayout);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  cublasLtMatrixLayoutOpaque& layout = **matLayout;
  layout.type = type;
  layout.rows = rows;
  layout.cols = cols;
  layout.ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return retire(matLayout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  if (!is_live(matLayout)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatrixLayoutOpaque& layout = *matLayout;
  bool read = false;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t type = 0;
      if (!read_attribute(buf, sizeInBytes, &type) || !is_known_type(static_cast<int32_t>(type)))
        return CUBLAS_STATUS_INVALID_VALUE;
      layout.type = static_cast<cudaDataType_t>(type);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS: read = read_attribute(buf, sizeInBytes, &layout.rows); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: read = read_attribute(buf, sizeInBytes, &layout.cols); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: read = read_attribute(buf, sizeInBytes, &layout.ld); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      read = read_attribute(buf, sizeInBytes, &layout.batch_count);
      break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      read = read_attribute(buf, sizeInBytes, &layout.batch_stride);
      break;
  }
  return read ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return publish(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return retire(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  if (!is_live(pref)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulPreferenceOpaque& preference = *pref;
  uint32_t value = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(buf, sizeInBytes, &preference.max_workspace_bytes)
                 ? CUBLAS_STATUS_SUCCESS
                 : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      if (!read_attribute(buf, sizeInBytes, &value) ||
          (value & ~static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK)) != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
      preference.reduction_scheme_mask = value;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (!read_attribute(buf, sizeInBytes, &value) || !is_power_of_two(value))
        return CUBLAS_STATUS_INVALID_VALUE;
      preference.min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = value;
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// The emulator's one algorithm needs no workspace and never splits k, so
// every workspace limit and reduction-scheme mask admits it.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  if (!is_live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!is_live(preference) || requestedAlgoCount < 1 || heuristicResultsArray == nullptr ||
      returnAlgoCount == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  Problem problem{};
  const cublasStatus_t status = read_problem(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &problem);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!has_algorithm(problem)) return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulHeuristicResult_t& result = heuristicResultsArray[0];
  result = cublasLtMatmulHeuristicResult_t{};
  result.algo = make_algo(problem, preference->min_alignment);
  result.workspaceSize = 0;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (!is_live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Multiply call{};
  Problem& p = call.p;
  cublasStatus_t status = read_problem(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!read_scalar(alpha, &call.alpha) || !read_scalar(beta, &call.beta))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!has_algorithm(p)) return CUBLAS_STATUS_NOT_SUPPORTED;

  // Without an algorithm the library chooses one for these very pointers,
  // so only the element alignment is required.
  uint32_t alignment[4] = {1, 1, 1, 1};
  if (algo != nullptr) {
    if (algo->data[kTagWord] != kAlgoTag || algo->data[kKernelWord] != kernel_of(p))
      return CUBLAS_STATUS_INVALID_VALUE;
    alignment[0] = static_cast<uint32_t>(algo->data[kAlignAbWord]);
    alignment[1] = static_cast<uint32_t>(algo->data[kAlignAbWord] >> 32);
    alignment[2] = static_cast<uint32_t>(algo->data[kAlignCdWord]);
    alignment[3] = static_cast<uint32_t>(algo->data[kAlignCdWord] >> 32);
  }

  // In place (C == D) needs one layout for both, as in cuBLASLt.
  if (C == D && !p.c.same_storage(p.d)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool reads_c = call.beta != 0.0f;
  // Empty matrices (A and B when k is 0) are not read and may be NULL.
  if (!operand_ok(A, p.a, alignment[0]) || !operand_ok(B, p.b, alignment[1]) ||
      (reads_c && !operand_ok(C, p.c, alignment[2])) || !operand_ok(D, p.d, alignment[3]))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (p.epilogue == CUBLASLT_EPILOGUE_BIAS && p.m > 0) {
    const void* bias = computeDesc->bias;
    const Matrix bias_vector{p.bias_type, p.m, 1, p.m, 1, 0};
    if (!operand_ok(bias, bias_vector, 16)) return CUBLAS_STATUS_INVALID_VALUE;
    call.bias = bias;
  }
  if (workspace != nullptr && workspaceSizeInBytes > 0 &&
      !ampx_emu::is_device_memory(workspace, workspaceSizeInBytes))
    return CUBLAS_STATUS_INVALID_VALUE;

  // Scales and the amax are device memory, read or written by the kernel.
  for (int i = 0; i < 4; ++i) {
    call.scale[i] = computeDesc->scale[i];
    if (call.scale[i] != nullptr && !ampx_emu::is_device_memory(call.scale[i], sizeof(float)))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  call.amax_d = computeDesc->amax_d;
  if (call.amax_d != nullptr && !ampx_emu::is_device_memory(call.amax_d, sizeof(float)))
    return CUBLAS_STATUS_INVALID_VALUE;
  call.a = A;
  call.b = B;
  call.c = reads_c ? C : nullptr;
  call.d = D;
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  try {
    if (ampx_emu::enqueue(stream, std::function<void()>(call)) != cudaSuccess)
      return CUBLAS_STATUS_EXECUTION_FAILED;
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
