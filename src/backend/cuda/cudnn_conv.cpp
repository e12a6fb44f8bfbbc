// cudnn_conv.cpp -- convolution through cuDNN (cudnn_conv.h). The few
// declarations of cuDNN 9's C API that ampx calls are made here rather than
// taken from cudnn.h, which the build may not have: handles and descriptors
// are opaque pointers, enums are ints.
#include "backend/cuda/cudnn_conv.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/optional_library.h"

#ifdef AMPX_CUDNN_EMULATED
// The CUDA emulator's stand-in for cuDNN (tests/cuda_emulator/cudnn.cpp).
extern "C" void* ampx_emulated_cudnn_symbol(const char* name);
#endif

namespace ampx::impl {
namespace cuda {

struct CudnnLibrary {
  std::string path;
  size_t version = 0;
  size_t (*get_version)();
  const char* (*get_error_string)(int);
  int (*create)(void**);
  int (*destroy)(void*);
  int (*set_stream)(void*, cudaStream_t);
  int (*create_tensor)(void**);
  int (*set_tensor_4d)(void*, int, int, int, int, int, int);
  int (*destroy_tensor)(void*);
  int (*create_filter)(void**);
  int (*set_filter_4d)(void*, int, int, int, int, int, int);
  int (*destroy_filter)(void*);
  int (*create_conv)(void**);
  int (*set_conv_2d)(void*, int, int, int, int, int, int, int, int);
  int (*set_group_count)(void*, int);
  int (*set_math_type)(void*, int);
  int (*destroy_conv)(void*);
  int (*forward_algorithms)(void*, void*, void*, void*, void*, int, int*, void*);
  int (*forward_workspace)(void*, void*, void*, void*, void*, int, size_t*);
  int (*forward)(void*, const void*, void*, const void*, void*, const void*, void*, int, void*,
                 size_t, const void*, void*, void*);
  int (*backward_data_algorithms)(void*, void*, void*, void*, void*, int, int*, void*);
  int (*backward_data_workspace)(void*, void*, void*, void*, void*, int, size_t*);
  int (*backward_data)(void*, const void*, void*, const void*, void*, const void*, void*, int,
                       void*, size_t, const void*, void*, void*);
  int (*backward_filter_algorithms)(void*, void*, void*, void*, void*, int, int*, void*);
  int (*backward_filter_workspace)(void*, void*, void*, void*, void*, int, size_t*);
  int (*backward_filter)(void*, const void*, void*, const void*, void*, const void*, void*, int,
                         void*, size_t, const void*, void*, void*);
  int (*add_tensor)(void*, const void*, void*, const void*, const void*, void*, void*);
  int (*backward_bias)(void*, const void*, void*, const void*, const void*, void*, void*);
};

namespace {

// cuDNN's enums and structs, as cudnn_graph.h and cudnn_cnn.h (9.x) define them.
constexpr int kSuccess = 0;
constexpr int kNotSupportedFirst = 3000, kNotSupportedLast = 3999;  // CUDNN_STATUS_NOT_SUPPORTED*
constexpr int kFloat = 0, kHalf = 2, kBfloat16 = 9;                 // cudnnDataType_t
constexpr int kNchw = 0;                                            // cudnnTensorFormat_t
constexpr int kCrossCorrelation = 1;                                // cudnnConvolutionMode_t
constexpr int kTensorOpMath = 1, kFmaMath = 3;                      // cudnnMathType_t
constexpr size_t kFirstVersion = 90000;                             // cudnnGetVersion of 9.0.0

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout.
struct AlgoPerf {
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};
constexpr int kMostAlgorithms = 8;  // CUDNN_CONVOLUTION_FWD_ALGO_COUNT, the largest of the three

// Algorithms needing more workspace than this are passed over.
constexpr size_t kWorkspaceLimit = size_t{256} << 20;

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string* why) {
#ifdef AMPX_CUDNN_EMULATED
  (void)handle;
  fn = reinterpret_cast<Fn>(ampx_emulated_cudnn_symbol(name));
#else
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
#endif
  if (fn) return true;
  *why = cat("the cuDNN library has no ", name, " (ampx needs cuDNN 9)");
  return false;
}

std::unique_ptr<CudnnLibrary> open_cudnn(std::string* why) {
  auto lib = std::make_unique<CudnnLibrary>();
  void* handle = nullptr;
#ifdef AMPX_CUDNN_EMULATED
  lib->path = "the CUDA emulator's cuDNN";
#else
  // By the loader rule of optional libraries (core/optional_library.h).
  LibrarySearch search("cuDNN", "AMPX_CUDNN_LIBRARY", {"libcudnn.so.9"});
  handle = search.open();
  if (!handle) {
    *why = search.error();
    return nullptr;
  }
  lib->path = search.path();
#endif
  const bool complete =
      resolve(handle, "cudnnGetVersion", lib->get_version, why) &&
      resolve(handle, "cudnnGetErrorString", lib->get_error_string, why) &&
      resolve(handle, "cudnnCreate", lib->create, why) &&
      resolve(handle, "cudnnDestroy", lib->destroy, why) &&
      resolve(handle, "cudnnSetStream", lib->set_stream, why) &&
      resolve(handle, "cudnnCreateTensorDescriptor", lib->create_tensor, why) &&
      resolve(handle, "cudnnSetTensor4dDescriptor", lib->set_tensor_4d, why) &&
      resolve(handle, "cudnnDestroyTensorDescriptor", lib->destroy_tensor, why) &&
      resolve(handle, "cudnnCreateFilterDescriptor", lib->create_filter, why) &&
      resolve(handle, "cudnnSetFilter4dDescriptor", lib->set_filter_4d, why) &&
      resolve(handle, "cudnnDestroyFilterDescriptor", lib->destroy_filter, why) &&
      resolve(handle, "cudnnCreateConvolutionDescriptor", lib->create_conv, why) &&
      resolve(handle, "cudnnSetConvolution2dDescriptor", lib->set_conv_2d, why) &&
      resolve(handle, "cudnnSetConvolutionGroupCount", lib->set_group_count, why) &&
      resolve(handle, "cudnnSetConvolutionMathType", lib->set_math_type, why) &&
      resolve(handle, "cudnnDestroyConvolutionDescriptor", lib->destroy_conv, why) &&
      resolve(handle, "cudnnGetConvolutionForwardAlgorithm_v7", lib->forward_algorithms, why) &&
      resolve(handle, "cudnnGetConvolutionForwardWorkspaceSize", lib->forward_workspace, why) &&
      resolve(handle, "cudnnConvolutionForward", lib->forward, why) &&
      resolve(handle, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
              lib->backward_data_algorithms, why) &&
      resolve(handle, "cudnnGetConvolutionBackwardDataWorkspaceSize",
              lib->backward_data_workspace, why) &&
      resolve(handle, "cudnnConvolutionBackwardData", lib->backward_data, why) &&
      resolve(handle, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
              lib->backward_filter_algorithms, why) &&
      resolve(handle, "cudnnGetConvolutionBackwardFilterWorkspaceSize",
              lib->backward_filter_workspace, why) &&
      resolve(handle, "cudnnConvolutionBackwardFilter", lib->backward_filter, why) &&
      resolve(handle, "cudnnAddTensor", lib->add_tensor, why) &&
      resolve(handle, "cudnnConvolutionBackwardBias", lib->backward_bias, why);
  if (complete) {
    lib->version = lib->get_version();
    if (lib->version >= kFirstVersion) return lib;
    *why = cat(lib->path, " is cuDNN version ", lib->version, "; ampx needs cuDNN 9");
  }
#ifndef AMPX_CUDNN_EMULATED
  dlclose(handle);
#endif
  return nullptr;
}

void check(const CudnnLibrary& cudnn, int status, const char* what) {
  if (status == kSuccess) return;
  const char* text = cudnn.get_error_string(status);
  fail(status >= kNotSupportedFirst && status <= kNotSupportedLast ? AMPX_ERR_NOT_SUPPORTED
                                                                    : AMPX_ERR_DEVICE,
       what, " failed: ", text ? text : "unknown cuDNN error", " (status ", status, ")");
}

int cudnn_type(DType type) {
  switch (type) {
    case DType::F16:
      return kHalf;
    case DType::BF16:
      return kBfloat16;
    default:
      return kFloat;
  }
}

int narrow(int64_t value, const char* what) {
  if (value > INT_MAX)
    fail(AMPX_ERR_NOT_SUPPORTED, "conv2d: ", what, " ", value, " is beyond cuDNN's int range");
  return static_cast<int>(value);
}

}  // namespace

const CudnnLibrary* load_cudnn(std::string* why) {
  static std::mutex mutex;
  static const CudnnLibrary* loaded = nullptr;
  static std::string reason;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded && reason.empty()) {
    loaded = open_cudnn(&reason).release();  // kept for the process, like the library itself
  }
  if (!loaded && why) *why = reason;
  return loaded;
}

// The descriptors of one shape and type, and the algorithm of each pass.
struct CudnnConvolution::Plan {
  const CudnnLibrary& cudnn;
  void* x = nullptr;  // tensor [N, Cin, H, W]
  void* y = nullptr;  // tensor [N, Cout, OH, OW]
  void* bias = nullptr;  // tensor [1, Cout, 1, 1]
  void* w = nullptr;  // filter [Cout, Cin / groups, kh, kw]
  void* conv = nullptr;
  int forward_algo = 0, data_algo = 0, filter_algo = 0;
  size_t forward_bytes = 0, data_bytes = 0, filter_bytes = 0;

  explicit Plan(const CudnnLibrary& library) : cudnn(library) {}
  ~Plan() {
    if (x) cudnn.destroy_tensor(x);
    if (y) cudnn.destroy_tensor(y);
    if (bias) cudnn.destroy_tensor(bias);
    if (w) cudnn.destroy_filter(w);
    if (conv) cudnn.destroy_conv(conv);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
};

bool CudnnConvolution::Key::operator<(const Key& o) const {
  const Conv2dShape& a = shape;
  const Conv2dShape& b = o.shape;
  return std::tie(a.batch, a.in_channels, a.in_h, a.in_w, a.out_channels, a.out_h, a.out_w,
                  a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dilation_h,
                  a.dilation_w, a.groups, type, tf32) <
         std::tie(b.batch, b.in_channels, b.in_h, b.in_w, b.out_channels, b.out_h, b.out_w,
                  b.kernel_h, b.kernel_w, b.stride_h, b.stride_w, b.pad_h, b.pad_w, b.dilation_h,
                  b.dilation_w, b.groups, o.type, o.tf32);
}

CudnnConvolution::CudnnConvolution(const CudnnLibrary& library, int32_t device,
                                   std::unique_ptr<Allocator> memory, const LaunchConfig& launch)
    : cudnn_(library), device_(device), memory_(std::move(memory)), launch_(launch) {}

// Plans go before the handle, with the device current; a failure leaves
// nothing to undo.
CudnnConvolution::~CudnnConvolution() {
  if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
  plans_.clear();
  if (handle_) cudnn_.destroy(handle_);
}

void* CudnnConvolution::handle() {
  if (!handle_) {
    void* made = nullptr;
    check(cudnn_, cudnn_.create(&made), "cudnnCreate");
    const int status = cudnn_.set_stream(made, launch_.stream);
    if (status != kSuccess) cudnn_.destroy(made);
    check(cudnn_, status, "cudnnSetStream");
    handle_ = made;
  }
  return handle_;
}

namespace {

// The first algorithm cuDNN's heuristics rank that works for the problem
// with a workspace within kWorkspaceLimit.
template <class List, class Size>
void choose(const CudnnLibrary& cudnn, const char* pass, const List& list, const Size& size,
            int* algo, size_t* bytes) {
  AlgoPerf perf[kMostAlgorithms] = {};
  int returned = 0;
  check(cudnn, list(kMostAlgorithms, &returned, perf), pass);
  for (int i = 0; i < returned && i < kMostAlgorithms; ++i) {
    if (perf[i].status != kSuccess) continue;
    size_t needed = 0;
    if (size(perf[i].algo, &needed) != kSuccess || needed > kWorkspaceLimit) continue;
    *algo = perf[i].algo;
    *bytes = needed;
    return;
  }
  fail(AMPX_ERR_NOT_SUPPORTED, "conv2d: cuDNN has no algorithm for this ", pass,
       " within a workspace of ", kWorkspaceLimit, " bytes");
}

}  // namespace

const CudnnConvolution::Plan& CudnnConvolution::plan_for(const Conv2dShape& s, DType type) {
  const cudaError_t current = cudaSetDevice(device_);
  if (current != cudaSuccess) {
    cudaGetLastError();
    fail(AMPX_ERR_DEVICE, "cudaSetDevice failed: ", cudaGetErrorString(current));
  }
  const Key key{s, type, type == DType::F32 && tf32()};
  const auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;
  void* h = handle();
  auto plan = std::make_unique<Plan>(cudnn_);
  const int t = cudnn_type(type);
  const int n = narrow(s.batch, "batch"), cin = narrow(s.in_channels, "in_channels"),
            cout = narrow(s.out_channels, "out_channels");
  check(cudnn_, cudnn_.create_tensor(&plan->x), "cudnnCreateTensorDescriptor");
  check(cudnn_,
        cudnn_.set_tensor_4d(plan->x, kNchw, t, n, cin, narrow(s.in_h, "height"),
                             narrow(s.in_w, "width")),
        "cudnnSetTensor4dDescriptor (x)");
  check(cudnn_, cudnn_.create_tensor(&plan->y), "cudnnCreateTensorDescriptor");
  check(cudnn_,
        cudnn_.set_tensor_4d(plan->y, kNchw, t, n, cout, narrow(s.out_h, "output height"),
                             narrow(s.out_w, "output width")),
        "cudnnSetTensor4dDescriptor (y)");
  check(cudnn_, cudnn_.create_tensor(&plan->bias), "cudnnCreateTensorDescriptor");
  check(cudnn_, cudnn_.set_tensor_4d(plan->bias, kNchw, t, 1, cout, 1, 1),
        "cudnnSetTensor4dDescriptor (bias)");
  check(cudnn_, cudnn_.create_filter(&plan->w), "cudnnCreateFilterDescriptor");
  check(cudnn_,
        cudnn_.set_filter_4d(plan->w, t, kNchw, cout, narrow(s.in_channels / s.groups, "channels"),
                             narrow(s.kernel_h, "kernel height"), narrow(s.kernel_w, "kernel width")),
        "cudnnSetFilter4dDescriptor");
  check(cudnn_, cudnn_.create_conv(&plan->conv), "cudnnCreateConvolutionDescriptor");
  check(cudnn_,
        cudnn_.set_conv_2d(plan->conv, narrow(s.pad_h, "padding"), narrow(s.pad_w, "padding"),
                           narrow(s.stride_h, "stride"), narrow(s.stride_w, "stride"),
                           narrow(s.dilation_h, "dilation"), narrow(s.dilation_w, "dilation"),
                           kCrossCorrelation, kFloat),
        "cudnnSetConvolution2dDescriptor");
  check(cudnn_, cudnn_.set_group_count(plan->conv, narrow(s.groups, "groups")),
        "cudnnSetConvolutionGroupCount");
  check(cudnn_,
        cudnn_.set_math_type(plan->conv, type == DType::F32 && !key.tf32 ? kFmaMath : kTensorOpMath),
        "cudnnSetConvolutionMathType");
  Plan& p = *plan;
  choose(
      cudnn_, "forward convolution",
      [&](int count, int* returned, AlgoPerf* perf) {
        return cudnn_.forward_algorithms(h, p.x, p.w, p.conv, p.y, count, returned, perf);
      },
      [&](int algo, size_t* bytes) {
        return cudnn_.forward_workspace(h, p.x, p.w, p.conv, p.y, algo, bytes);
      },
      &p.forward_algo, &p.forward_bytes);
  choose(
      cudnn_, "backward-data convolution",
      [&](int count, int* returned, AlgoPerf* perf) {
        return cudnn_.backward_data_algorithms(h, p.w, p.y, p.conv, p.x, count, returned, perf);
      },
      [&](int algo, size_t* bytes) {
        return cudnn_.backward_data_workspace(h, p.w, p.y, p.conv, p.x, algo, bytes);
      },
      &p.data_algo, &p.data_bytes);
  choose(
      cudnn_, "backward-filter convolution",
      [&](int count, int* returned, AlgoPerf* perf) {
        return cudnn_.backward_filter_algorithms(h, p.x, p.y, p.conv, p.w, count, returned, perf);
      },
      [&](int algo, size_t* bytes) {
        return cudnn_.backward_filter_workspace(h, p.x, p.y, p.conv, p.w, algo, bytes);
      },
      &p.filter_algo, &p.filter_bytes);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CudnnConvolution::run_conv2d_forward(const Conv2dShape& shape, const void* x, const void* w,
                                          const void* bias, DType type, void* y) {
  const Plan& p = plan_for(shape, type);
  const float one = 1.0f, zero = 0.0f;
  const ScratchBuffer workspace(*memory_, p.forward_bytes, "conv2d");
  check(cudnn_,
        cudnn_.forward(handle_, &one, p.x, x, p.w, w, p.conv, p.forward_algo, workspace.get(),
                       workspace.bytes(), &zero, p.y, y),
        "cudnnConvolutionForward");
  if (bias)
    check(cudnn_, cudnn_.add_tensor(handle_, &one, p.bias, bias, &one, p.y, y),
          "cudnnAddTensor (bias)");
}

void CudnnConvolution::run_conv2d_backward_data(const Conv2dShape& shape, const void* dy,
                                                const void* w, DType type, void* dx) {
  const Plan& p = plan_for(shape, type);
  const float one = 1.0f, zero = 0.0f;
  const ScratchBuffer workspace(*memory_, p.data_bytes, "conv2d backward data");
  check(cudnn_,
        cudnn_.backward_data(handle_, &one, p.w, w, p.y, dy, p.conv, p.data_algo, workspace.get(),
                             workspace.bytes(), &zero, p.x, dx),
        "cudnnConvolutionBackwardData");
}

void CudnnConvolution::run_conv2d_backward_weight(const Conv2dShape& shape, const void* dy,
                                                  const void* x, DType type, void* dw,
                                                  void* dbias) {
  const Plan& p = plan_for(shape, type);
  const float one = 1.0f, zero = 0.0f;
  {
    const ScratchBuffer workspace(*memory_, p.filter_bytes, "conv2d backward filter");
    check(cudnn_,
          cudnn_.backward_filter(handle_, &one, p.x, x, p.y, dy, p.conv, p.filter_algo,
                                 workspace.get(), workspace.bytes(), &zero, p.w, dw),
          "cudnnConvolutionBackwardFilter");
  }
  if (dbias)
    check(cudnn_, cudnn_.backward_bias(handle_, &one, p.y, dy, &zero, p.bias, dbias),
          "cudnnConvolutionBackwardBias");
}

}  // namespace cuda
}  // namespace ampx::impl
