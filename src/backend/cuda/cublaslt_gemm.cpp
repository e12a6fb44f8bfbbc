// cublaslt_gemm.cpp -- Backend::gemm of the CUDA backend (see the header).
#include "backend/cuda/cublaslt_gemm.h"

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "backend/cuda/kernels/ops_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

// cuBLAS's documentation recommends 32 MiB of workspace from Hopper on (4 MiB
// before); one size for every device, small next to a model's tensors.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Problems seen with their plans; a training loop repeats a handful of
// shapes. Past this many (shapes that keep changing) the cache starts over
// rather than growing without bound.
constexpr size_t kMaxPlans = 64;

// Products per cuBLASLt call. The batch count is an int32 there and no
// lower limit is documented, but a kernel that puts the batch in the grid's
// y or z dimension cannot launch more than 65535; a larger batch is split
// here rather than relying on the library to split it.
constexpr int64_t kMaxBatchPerCall = 65535;

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(AMPX_ERR_DEVICE, "gemm: ", call, " failed: ", cublasLtGetStatusName(status), " (",
       cublasLtGetStatusString(status), ")");
}

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  fail(AMPX_ERR_DEVICE, "gemm: ", call, " failed: ", cudaGetErrorString(status));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F8E4M3: return CUDA_R_8F_E4M3;
    case DType::F8E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

int64_t bytes_of(DType t, int64_t elements) {
  return elements * static_cast<int64_t>(dtype_size(t));
}

const void* at(const void* p, DType t, int64_t elements) {
  return static_cast<const char*>(p) + bytes_of(t, elements);
}
void* at(void* p, DType t, int64_t elements) {
  return static_cast<char*>(p) + bytes_of(t, elements);
}

// The largest power of two, up to 256 (cuBLASLt's default assumption),
// dividing the address of every matrix: `first` and, for a batch, first +
// any multiple of the stride.
uint32_t alignment(const void* first, int64_t stride_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(first) | static_cast<uint64_t>(stride_bytes) | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

template <class T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
        "cublasLtMatmulDescSetAttribute");
}

template <class T>
void set(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
  check(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof value),
        "cublasLtMatrixLayoutSetAttribute");
}

template <class T>
void set(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
         const T& value) {
  check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value),
        "cublasLtMatmulPreferenceSetAttribute");
}

// A dense column-major matrix (leading dimension = rows), `batch` of them
// `stride` elements apart.
cublasLtMatrixLayout_t make_layout(DType t, int64_t rows, int64_t cols, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(cublasLtMatrixLayoutCreate(&layout, cuda_type(t), static_cast<uint64_t>(rows),
                                   static_cast<uint64_t>(cols), rows),
        "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return layout;
}

// Destroys a preference however planning ends.
struct PreferenceOwner {
  cublasLtMatmulPreference_t preference = nullptr;
  ~PreferenceOwner() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
  }
};

}  // namespace

// The descriptors and algorithm of one Problem. cuBLASLt's operands, in its
// column-major terms: `first` is our B, `second` our A, `out` our C.
struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool fused_bias = false;  // the BIAS epilogue is set on desc

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  // Descriptors are host objects: a call already enqueued does not need them.
  ~Plan() {
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (second != nullptr) cublasLtMatrixLayoutDestroy(second);
    if (first != nullptr) cublasLtMatrixLayoutDestroy(first);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

bool CublasLtGemm::Problem::operator<(const Problem& o) const {
  return std::tie(batch, m, n, k, a_stride, b_stride, c_stride, a_type, b_type, c_type, trans_a,
                  trans_b, bias, tf32, d_amax, a_align, b_align, c_align) <
         std::tie(o.batch, o.m, o.n, o.k, o.a_stride, o.b_stride, o.c_stride, o.a_type, o.b_type,
                  o.c_type, o.trans_a, o.trans_b, o.bias, o.tf32, o.d_amax, o.a_align, o.b_align,
                  o.c_align);
}

// The workspace is taken now rather than at the first product: that product
// may be enqueued while the stream is being captured into a CUDA graph,
// where an allocation would belong to the graph and not outlive it.
CublasLtGemm::CublasLtGemm(std::unique_ptr<Allocator> memory, const LaunchConfig& launch)
    : memory_(std::move(memory)), launch_(launch) {
  workspace_ = memory_->allocate(kWorkspaceBytes);
  if (workspace_ == nullptr)
    fail(AMPX_ERR_OUT_OF_MEMORY, "no device memory for cuBLASLt's ", kWorkspaceBytes,
         "-byte workspace");
  const cublasStatus_t status = cublasLtCreate(&handle_);
  if (status != CUBLAS_STATUS_SUCCESS) {
    memory_->deallocate(workspace_, kWorkspaceBytes);
    check(status, "cublasLtCreate");
  }
}

// Failures here (the runtime unloading at process exit) leave nothing to
// undo. The workspace goes back to the pool in stream order, after the
// products already queued.
CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  cublasLtDestroy(handle_);
  memory_->deallocate(workspace_, kWorkspaceBytes);
}

const CublasLtGemm::Plan& CublasLtGemm::plan_for(const Problem& p, const Fp8GemmArgs* fp8) {
  const auto cached = plans_.find(p);
  if (cached != plans_.end()) return *cached->second;

  auto plan = std::make_unique<Plan>();
  check(cublasLtMatmulDescCreate(&plan->desc,
                                 p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                 CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  // As stored: B is k x n (n x k when transposed), A is m x k (k x m), C is
  // m x n, all row-major, so column-major each has its dimensions swapped.
  plan->first = make_layout(p.b_type, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.batch,
                            p.b_stride);
  plan->second = make_layout(p.a_type, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.batch,
                             p.a_stride);
  plan->out = make_layout(p.c_type, p.n, p.m, p.batch, p.c_stride);
  if (fp8 != nullptr) set_fp8_pointers(*plan, *fp8);

  PreferenceOwner owner;
  check(cublasLtMatmulPreferenceCreate(&owner.preference), "cublasLtMatmulPreferenceCreate");
  set(owner.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
  set(owner.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.b_align);
  set(owner.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.a_align);
  set(owner.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.c_align);
  set(owner.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.c_align);
  // Split-k partial sums must be combined in a fixed order and in fp32.
  // INPLACE adds them into C as they arrive (an order that changes from run
  // to run, in C's type); OUTPUT_TYPE stages them in C's type, which for a
  // 16-bit C rounds more than once. Algorithms without split-k always pass.
  uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (p.c_type == DType::F32) reductions |= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  set(owner.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  cublasLtMatmulHeuristicResult_t result{};
  const auto ask = [&] {
    int found_count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second, plan->out,
                                       plan->out, owner.preference, 1, &result, &found_count);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) check(status, "cublasLtMatmulAlgoGetHeuristic");
    return status == CUBLAS_STATUS_SUCCESS && found_count > 0 &&
           result.state == CUBLAS_STATUS_SUCCESS;
  };
  bool found = false;
  if (p.bias) {
    set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(p.c_type));
    found = plan->fused_bias = ask();
    if (!found) set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
  }
  if (!found) found = ask();
  if (!found)
    fail(AMPX_ERR_NOT_SUPPORTED, "gemm: cuBLASLt has no algorithm for batch ", p.batch, " m ", p.m,
         " n ", p.n, " k ", p.k, p.trans_a ? " A^T" : "", p.trans_b ? " B^T" : "", " ",
         dtype_name(p.a_type), "x", dtype_name(p.b_type), "->", dtype_name(p.c_type),
         " (alignments A ", p.a_align,
         ", B ", p.b_align, ", C ", p.c_align, " bytes)");
  plan->algo = result.algo;

  if (plans_.size() >= kMaxPlans) plans_.clear();
  return *plans_.emplace(p, std::move(plan)).first->second;
}

void CublasLtGemm::multiply(const GemmArgs& g, int64_t first, int64_t count) {
  const bool batched = count > 1;
  void* c = at(g.c, g.c_type, first * g.c_batch_stride);
  const int64_t c_stride = batched ? g.c_batch_stride : 0;
  if (g.k == 0 || g.alpha == 0.0f) {
    if (g.bias) {  // a single product (check_gemm_args)
      check(launch_bias_epilogue(c, g.c_type, nullptr, g.beta, g.bias, g.m, g.n, launch_),
            "bias kernel launch");
      return;
    }
    check(launch_scale_matrices(c, g.c_type, count, g.m * g.n, c_stride, g.beta, launch_),
          "scale kernel launch");
    return;
  }
  const void* a = at(g.a, g.ab_type, first * g.a_batch_stride);
  const void* b = at(g.b, g.ab_type, first * g.b_batch_stride);

  Problem p{};
  p.batch = count;
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.a_stride = batched ? g.a_batch_stride : 0;
  p.b_stride = batched ? g.b_batch_stride : 0;
  p.c_stride = c_stride;
  p.a_type = p.b_type = g.ab_type, p.c_type = g.c_type;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.bias = g.bias != nullptr;
  p.tf32 = tf32_ && g.ab_type == DType::F32;
  p.a_align = alignment(a, bytes_of(g.ab_type, p.a_stride));
  p.b_align = alignment(b, bytes_of(g.ab_type, p.b_stride));
  p.c_align = alignment(c, bytes_of(g.c_type, p.c_stride));
  const Plan& plan = plan_for(p);
  if (g.bias && !plan.fused_bias) {
    product_then_bias(p, nullptr, g.alpha, g.beta, a, b, c, g.bias);
    return;
  }
  AlignedBias bias(*this, g, plan.fused_bias);
  if (plan.fused_bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.get());
  check(cublasLtMatmul(handle_, plan.desc, &g.alpha, b, plan.first, a, plan.second, &g.beta, c,
                       plan.out, c, plan.out, &plan.algo, workspace_, kWorkspaceBytes,
                       launch_.stream),
        "cublasLtMatmul");
}

// The bias epilogue where cuBLASLt has no algorithm with it: alpha * A B
// goes to fp32 scratch, then a kernel adds beta * C and the bias in fp32
// and rounds C once, as the fused epilogue does.
void CublasLtGemm::product_then_bias(Problem p, const Fp8GemmArgs* fp8, float alpha, float beta,
                                     const void* a, const void* b, void* c, const void* bias) {
  const DType c_type = p.c_type;
  const size_t bytes = static_cast<size_t>(p.m * p.n) * sizeof(float);
  void* product = memory_->allocate(bytes);
  if (product == nullptr)
    fail(AMPX_ERR_OUT_OF_MEMORY, "gemm: no device memory for a ", bytes, "-byte fp32 product");
  struct GiveBack {
    Allocator& memory;
    void* ptr;
    size_t bytes;
    ~GiveBack() { memory.deallocate(ptr, bytes); }  // in stream order, after the kernels
  } give_back{*memory_, product, bytes};

  p.c_type = DType::F32;
  p.bias = false;
  p.c_align = alignment(product, 0);
  const Plan& plan = plan_for(p, fp8);
  if (fp8 != nullptr) set_fp8_pointers(plan, *fp8);
  const float zero = 0.0f;
  check(cublasLtMatmul(handle_, plan.desc, &alpha, b, plan.first, a, plan.second, &zero,
                       product, plan.out, product, plan.out, &plan.algo, workspace_,
                       kWorkspaceBytes, launch_.stream),
        "cublasLtMatmul");
  check(launch_bias_epilogue(c, c_type, static_cast<const float*>(product), beta, bias, p.m, p.n,
                             launch_),
        "bias kernel launch");
}

// The bias as cuBLASLt's epilogue reads it: 16-byte aligned, copied to
// scratch from the stream-ordered pool when it is not.
CublasLtGemm::AlignedBias::AlignedBias(CublasLtGemm& gemm, const GemmArgs& g, bool needed)
    : memory_(*gemm.memory_), ptr_(g.bias) {
  if (!needed || reinterpret_cast<uintptr_t>(g.bias) % 16 == 0) return;
  bytes_ = static_cast<size_t>(bytes_of(g.c_type, g.n));
  copy_ = memory_.allocate(bytes_);
  if (copy_ == nullptr)
    fail(AMPX_ERR_OUT_OF_MEMORY, "gemm: no device memory for a ", bytes_, "-byte bias copy");
  const cudaError_t status =
      cudaMemcpyAsync(copy_, g.bias, bytes_, cudaMemcpyDeviceToDevice, gemm.launch_.stream);
  if (status != cudaSuccess) {
    memory_.deallocate(copy_, bytes_);
    check(status, "cudaMemcpyAsync(bias)");
  }
  ptr_ = copy_;
}

CublasLtGemm::AlignedBias::~AlignedBias() {
  if (copy_ != nullptr) memory_.deallocate(copy_, bytes_);
}

void CublasLtGemm::set_fp8_pointers(const Plan& plan, const Fp8GemmArgs& g) {
  // cuBLASLt's A is our B (see the top).
  set(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.b_scale_inv));
  set(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.a_scale_inv));
  if (is_fp8(g.d_type)) {
    set(plan.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(g.d_scale));
    set(plan.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(g.d_amax));
  }
}

void CublasLtGemm::run_fp8(const Fp8GemmArgs& g) {
  if (g.k == 0) {
    // An empty sum: D is the bias (or zeros), an FP8 D's amax 0.
    if (is_fp8(g.d_type)) {
      check(cudaMemsetAsync(g.d, 0, static_cast<size_t>(g.m * g.n), launch_.stream),
            "cudaMemsetAsync");
      if (g.d_amax != nullptr)
        check(cudaMemsetAsync(g.d_amax, 0, sizeof(float), launch_.stream), "cudaMemsetAsync");
    } else if (g.bias != nullptr) {
      check(launch_bias_epilogue(g.d, g.d_type, nullptr, 0.0f, g.bias, g.m, g.n, launch_),
            "bias kernel launch");
    } else {
      check(launch_scale_matrices(g.d, g.d_type, 1, g.m * g.n, 0, 0.0f, launch_),
            "scale kernel launch");
    }
    return;
  }
  Problem p{};
  p.batch = 1;
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.a_type = g.a_type, p.b_type = g.b_type, p.c_type = g.d_type;
  p.trans_a = g.trans_a, p.trans_b = g.trans_b;
  p.bias = g.bias != nullptr;
  p.d_amax = g.d_amax != nullptr;
  p.a_align = alignment(g.a, 0);
  p.b_align = alignment(g.b, 0);
  p.c_align = alignment(g.d, 0);
  const Plan& plan = plan_for(p, &g);
  if (g.bias != nullptr && !plan.fused_bias) {
    product_then_bias(p, &g, g.alpha, 0.0f, g.a, g.b, g.d, g.bias);
    return;
  }
  set_fp8_pointers(plan, g);
  if (plan.fused_bias) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  const float zero = 0.0f;
  check(cublasLtMatmul(handle_, plan.desc, &g.alpha, g.b, plan.first, g.a, plan.second, &zero, g.d,
                       plan.out, g.d, plan.out, &plan.algo, workspace_, kWorkspaceBytes,
                       launch_.stream),
        "cublasLtMatmul");
}

void CublasLtGemm::run(const GemmArgs& g, bool tf32) {
  tf32_ = tf32;
  const bool independent = g.a_batch_stride >= 0 && g.b_batch_stride >= 0 &&
                           g.c_batch_stride >= g.m * g.n;
  if (g.batch == 1 || !independent) {
    for (int64_t i = 0; i < g.batch; ++i) multiply(g, i, 1);
    return;
  }
  for (int64_t first = 0; first < g.batch; first += kMaxBatchPerCall)
    multiply(g, first, g.batch - first < kMaxBatchPerCall ? g.batch - first : kMaxBatchPerCall);
}

}  // namespace cuda
}  // namespace ampx::impl
