// cudnn.cpp (CUDA emulator) -- a stand-in for the part of cuDNN 9's
// convolution API that ampx's CUDA backend calls (backend/cuda/
// cudnn_conv.cpp), so that its convolution runs without a GPU. The backend
// looks its functions up through ampx_emulated_cudnn_symbol() instead of
// dlopen when built for the emulator.
//
// What it computes: NCHW cross-correlation with padding, stride, dilation
// and groups (forward, backward data, backward filter), the bias added to
// every position (cudnnAddTensor) and its gradient (the sum over images
// and positions, cudnnConvolutionBackwardBias), each as
//   out = alpha * result + beta * out   (out not read when beta is 0)
// with the result summed in double in a fixed order from f32, f16 or bf16
// elements, and rounded once, as ampx's conversions round (a GPU sums
// in fp32 over tiles; double keeps the stand-in's error far below that). It stands for
// cuDNN's semantics, not its algorithms: every algorithm number computes
// the same way.
//
// What it checks, so that tests catch what a GPU would punish or cuDNN
// refuse (CUDNN_STATUS_BAD_PARAM, 2000):
//  - handles and descriptors that are null, destroyed or never set;
//  - descriptors that do not chain: y's extents are not what x, the filter
//    and the convolution give, channels not divisible by the groups,
//    differing data types, a compute type other than fp32;
//  - the math type: FMA or tensor-op math for f32 data (tensor-op math is
//    TF32: the operands rounded to 10 mantissa bits first, ties to even),
//    tensor-op math for f16 and bf16;
//  - an algorithm cuDNN does not have (CUDNN_STATUS_NOT_SUPPORTED, 3000);
//  - a workspace smaller than the algorithm's size, and every tensor, the
//    filter and the workspace inside one live emulated device allocation
//    when the work runs (again at each replay of a captured graph: a freed
//    allocation is then a device fault), while alpha and beta are host
//    memory.
//
// Thread safety: as cuDNN, each handle and descriptor is used by one thread
// at a time; the registry of live objects is behind a mutex.
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulator.h"
#include "math/convert.h"

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1001, kBadParam = 2000, kNotSupported = 3000,
              kAllocFailed = 4001, kExecutionFailed = 5000;
constexpr int kFloat = 0, kHalf = 2, kBfloat16 = 9;
constexpr int kNchw = 0;
constexpr int kCrossCorrelation = 1;
constexpr int kTensorOpMath = 1, kFmaMath = 3;
constexpr int kAlgorithms = 8;  // algorithm numbers 0..7 exist
constexpr size_t kVersion = 92600;

struct AlgoPerf {
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

struct Handle {
  cudaStream_t stream = nullptr;
};
struct Tensor {
  bool set = false;
  int type = kFloat;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t count() const { return n * c * h * w; }
};
struct Filter {
  bool set = false;
  int type = kFloat;
  int64_t k = 0, c = 0, h = 0, w = 0;
  int64_t count() const { return k * c * h * w; }
};
struct Conv {
  bool set = false;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int math = 0;  // CUDNN_DEFAULT_MATH until set
};

enum class Kind { Handle, Tensor, Filter, Conv };

std::mutex live_mutex;
std::unordered_map<const void*, Kind> live;

void add_live(const void* object, Kind kind) {
  std::lock_guard<std::mutex> lock(live_mutex);
  live[object] = kind;
}
bool is_live(const void* object, Kind kind) {
  std::lock_guard<std::mutex> lock(live_mutex);
  const auto found = live.find(object);
  return found != live.end() && found->second == kind;
}
bool remove_live(const void* object, Kind kind) {
  std::lock_guard<std::mutex> lock(live_mutex);
  const auto found = live.find(object);
  if (found == live.end() || found->second != kind) return false;
  live.erase(found);
  return true;
}

template <class T>
int create(void** out, Kind kind) {
  if (!out) return kBadParam;
  T* object = new (std::nothrow) T();
  if (!object) return kAllocFailed;
  add_live(object, kind);
  *out = object;
  return kSuccess;
}

template <class T>
int destroy(void* object, Kind kind) {
  if (!object) return kSuccess;
  if (!remove_live(object, kind)) return kBadParam;
  delete static_cast<T*>(object);
  return kSuccess;
}

bool known_type(int type) { return type == kFloat || type == kHalf || type == kBfloat16; }
size_t element_bytes(int type) { return type == kFloat ? 4 : 2; }

float load(const void* base, int type, int64_t i) {
  switch (type) {
    case kHalf: return ampx::impl::math::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case kBfloat16: return ampx::impl::math::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

void store(void* base, int type, int64_t i, float value) {
  switch (type) {
    case kHalf: static_cast<uint16_t*>(base)[i] = ampx::impl::math::float_to_half(value); break;
    case kBfloat16: static_cast<uint16_t*>(base)[i] = ampx::impl::math::float_to_bf16(value); break;
    default: static_cast<float*>(base)[i] = value; break;
  }
}

// One convolution problem, its descriptors checked to chain.
struct Problem {
  Tensor x, y;
  Filter w;
  Conv conv;
  int64_t in_per_group() const { return x.c / conv.groups; }
  int64_t out_per_group() const { return y.c / conv.groups; }
  // Element i of an operand of the products, rounded to TF32 under
  // tensor-op math on f32 data.
  float operand(const void* base, int64_t i) const {
    const float v = load(base, x.type, i);
    return x.type == kFloat && conv.math == kTensorOpMath ? ampx_emu::to_tf32(v) : v;
  }
};

int64_t output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

int make_problem(void* handle, void* x, void* w, void* conv, void* y, Problem* p) {
  if (!is_live(handle, Kind::Handle)) return kNotInitialized;
  if (!is_live(x, Kind::Tensor) || !is_live(y, Kind::Tensor) || !is_live(w, Kind::Filter) ||
      !is_live(conv, Kind::Conv))
    return kBadParam;
  p->x = *static_cast<Tensor*>(x);
  p->y = *static_cast<Tensor*>(y);
  p->w = *static_cast<Filter*>(w);
  p->conv = *static_cast<Conv*>(conv);
  if (!p->x.set || !p->y.set || !p->w.set || !p->conv.set) return kBadParam;
  if (p->x.type != p->y.type || p->x.type != p->w.type) return kBadParam;
  if (p->conv.math != kTensorOpMath && !(p->x.type == kFloat && p->conv.math == kFmaMath))
    return kBadParam;
  const Conv& c = p->conv;
  if (p->x.c % c.groups != 0 || p->w.k % c.groups != 0 || p->w.c * c.groups != p->x.c ||
      p->w.k != p->y.c || p->x.n != p->y.n)
    return kBadParam;
  if (output_extent(p->x.h, p->w.h, c.stride_h, c.pad_h, c.dilation_h) != p->y.h ||
      output_extent(p->x.w, p->w.w, c.stride_w, c.pad_w, c.dilation_w) != p->y.w)
    return kBadParam;
  return kSuccess;
}

// The workspace each algorithm asks for: none for 0, a few bytes per output
// channel for the others, so that ampx's workspace path is exercised.
size_t workspace_bytes(const Problem& p, int algo) {
  return algo == 0 ? 0 : static_cast<size_t>(64 * (algo + p.y.c));
}

int check_algo_and_workspace(const Problem& p, int algo, const void* workspace, size_t bytes) {
  if (algo < 0 || algo >= kAlgorithms) return kNotSupported;
  if (bytes < workspace_bytes(p, algo)) return kBadParam;
  if (bytes > 0 && !workspace) return kBadParam;
  return kSuccess;
}

bool host_scalar(const void* scalar) {
  return scalar && !ampx_emu::is_device_memory(scalar, sizeof(float));
}

// Runs `compute` in `handle`'s stream, checking that every region lies in
// device memory when it runs.
struct Region {
  const void* ptr;
  size_t bytes;
};

int run(void* handle, std::vector<Region> regions, std::function<void()> compute) {
  const cudaStream_t stream = static_cast<Handle*>(handle)->stream;
  try {
    auto work = [regions = std::move(regions), compute = std::move(compute)]() {
      for (const Region& r : regions)
        if (r.bytes > 0 && !ampx_emu::is_device_memory(r.ptr, r.bytes))
          throw ampx_emu::DeviceFault(
              "cuDNN emulator: an operand is not (or no longer) in device memory");
      compute();
    };
    if (ampx_emu::enqueue(stream, std::function<void()>(work)) != cudaSuccess)
      return kExecutionFailed;
  } catch (const std::bad_alloc&) {
    return kAllocFailed;
  }
  return kSuccess;
}

// The input position of tap i of output p, or -1 outside the image.
int64_t tap(int64_t p, int64_t i, int64_t stride, int64_t pad, int64_t dilation, int64_t in) {
  const int64_t at = p * stride - pad + i * dilation;
  return at >= 0 && at < in ? at : -1;
}

void blend(void* out, int type, int64_t index, float alpha, float beta, double value) {
  const double previous = beta == 0.0f ? 0.0 : static_cast<double>(beta) * load(out, type, index);
  store(out, type, index, static_cast<float>(alpha * value + previous));
}

// ---- the API -------------------------------------------------------------------

size_t get_version() { return kVersion; }

const char* get_error_string(int status) {
  switch (status) {
    case kSuccess: return "CUDNN_STATUS_SUCCESS";
    case kNotInitialized: return "CUDNN_STATUS_NOT_INITIALIZED";
    case kBadParam: return "CUDNN_STATUS_BAD_PARAM";
    case kNotSupported: return "CUDNN_STATUS_NOT_SUPPORTED";
    case kAllocFailed: return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case kExecutionFailed: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

int handle_create(void** out) { return create<Handle>(out, Kind::Handle); }
int handle_destroy(void* h) { return h ? destroy<Handle>(h, Kind::Handle) : kBadParam; }
int set_stream(void* h, cudaStream_t stream) {
  if (!is_live(h, Kind::Handle)) return kNotInitialized;
  static_cast<Handle*>(h)->stream = stream;
  return kSuccess;
}

int tensor_create(void** out) { return create<Tensor>(out, Kind::Tensor); }
int tensor_destroy(void* t) { return destroy<Tensor>(t, Kind::Tensor); }
int tensor_set(void* t, int format, int type, int n, int c, int h, int w) {
  if (!is_live(t, Kind::Tensor) || format != kNchw || !known_type(type) || n <= 0 || c <= 0 ||
      h <= 0 || w <= 0)
    return kBadParam;
  *static_cast<Tensor*>(t) = Tensor{true, type, n, c, h, w};
  return kSuccess;
}

int filter_create(void** out) { return create<Filter>(out, Kind::Filter); }
int filter_destroy(void* f) { return destroy<Filter>(f, Kind::Filter); }
int filter_set(void* f, int type, int format, int k, int c, int h, int w) {
  if (!is_live(f, Kind::Filter) || format != kNchw || !known_type(type) || k <= 0 || c <= 0 ||
      h <= 0 || w <= 0)
    return kBadParam;
  *static_cast<Filter*>(f) = Filter{true, type, k, c, h, w};
  return kSuccess;
}

int conv_create(void** out) { return create<Conv>(out, Kind::Conv); }
int conv_destroy(void* c) { return destroy<Conv>(c, Kind::Conv); }
int conv_set(void* c, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w, int mode,
             int compute) {
  if (!is_live(c, Kind::Conv) || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 ||
      dil_w <= 0 || mode != kCrossCorrelation || compute != kFloat)
    return kBadParam;
  Conv& conv = *static_cast<Conv*>(c);
  conv.set = true;
  conv.pad_h = pad_h, conv.pad_w = pad_w, conv.stride_h = u, conv.stride_w = v;
  conv.dilation_h = dil_h, conv.dilation_w = dil_w;
  return kSuccess;
}
int conv_groups(void* c, int groups) {
  if (!is_live(c, Kind::Conv) || groups <= 0) return kBadParam;
  static_cast<Conv*>(c)->groups = groups;
  return kSuccess;
}
int conv_math(void* c, int math) {
  if (!is_live(c, Kind::Conv) || math < 0 || math > kFmaMath) return kBadParam;
  static_cast<Conv*>(c)->math = math;
  return kSuccess;
}

// The heuristics: algorithm 1 (with a workspace) first, then 0.
int algorithms(const Problem& p, int requested, int* returned, void* results) {
  if (requested <= 0 || !returned || !results) return kBadParam;
  AlgoPerf* perf = static_cast<AlgoPerf*>(results);
  const int order[] = {1, 0};
  int count = 0;
  for (int algo : order) {
    if (count == requested) break;
    perf[count] = AlgoPerf{algo, kSuccess, -1.0f, workspace_bytes(p, algo), 1, p.conv.math, {}};
    ++count;
  }
  *returned = count;
  return kSuccess;
}

int workspace_size(const Problem& p, int algo, size_t* bytes) {
  if (!bytes) return kBadParam;
  if (algo < 0 || algo >= kAlgorithms) return kNotSupported;
  *bytes = workspace_bytes(p, algo);
  return kSuccess;
}

int forward_algorithms(void* h, void* x, void* w, void* c, void* y, int requested, int* returned,
                       void* results) {
  Problem p;
  if (int status = make_problem(h, x, w, c, y, &p)) return status;
  return algorithms(p, requested, returned, results);
}
int forward_workspace(void* h, void* x, void* w, void* c, void* y, int algo, size_t* bytes) {
  Problem p;
  if (int status = make_problem(h, x, w, c, y, &p)) return status;
  return workspace_size(p, algo, bytes);
}
int backward_data_algorithms(void* h, void* w, void* dy, void* c, void* dx, int requested,
                             int* returned, void* results) {
  Problem p;
  if (int status = make_problem(h, dx, w, c, dy, &p)) return status;
  return algorithms(p, requested, returned, results);
}
int backward_data_workspace(void* h, void* w, void* dy, void* c, void* dx, int algo,
                            size_t* bytes) {
  Problem p;
  if (int status = make_problem(h, dx, w, c, dy, &p)) return status;
  return workspace_size(p, algo, bytes);
}
int backward_filter_algorithms(void* h, void* x, void* dy, void* c, void* dw, int requested,
                               int* returned, void* results) {
  Problem p;
  if (int status = make_problem(h, x, dw, c, dy, &p)) return status;
  return algorithms(p, requested, returned, results);
}
int backward_filter_workspace(void* h, void* x, void* dy, void* c, void* dw, int algo,
                              size_t* bytes) {
  Problem p;
  if (int status = make_problem(h, x, dw, c, dy, &p)) return status;
  return workspace_size(p, algo, bytes);
}

std::vector<Region> regions_of(const Problem& p, const void* x, const void* w, const void* y,
                               const void* workspace, size_t workspace_size) {
  const size_t e = element_bytes(p.x.type);
  return {{x, p.x.count() * e}, {w, p.w.count() * e}, {y, p.y.count() * e},
          {workspace, workspace_size}};
}

int forward(void* h, const void* alpha, void* xd, const void* x, void* wd, const void* w, void* cd,
            int algo, void* workspace, size_t bytes, const void* beta, void* yd, void* y) {
  Problem p;
  if (int status = make_problem(h, xd, wd, cd, yd, &p)) return status;
  if (int status = check_algo_and_workspace(p, algo, workspace, bytes)) return status;
  if (!host_scalar(alpha) || !host_scalar(beta) || !x || !w || !y) return kBadParam;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  return run(h, regions_of(p, x, w, y, workspace, bytes), [p, a, b, x, w, y]() {
    const Conv& c = p.conv;
    const int t = p.x.type;
    for (int64_t n = 0; n < p.y.n; ++n)
      for (int64_t o = 0; o < p.y.c; ++o) {
        const int64_t g = o / p.out_per_group();
        for (int64_t oh = 0; oh < p.y.h; ++oh)
          for (int64_t ow = 0; ow < p.y.w; ++ow) {
            double sum = 0.0;
            for (int64_t ci = 0; ci < p.w.c; ++ci)
              for (int64_t i = 0; i < p.w.h; ++i) {
                const int64_t r = tap(oh, i, c.stride_h, c.pad_h, c.dilation_h, p.x.h);
                if (r < 0) continue;
                for (int64_t j = 0; j < p.w.w; ++j) {
                  const int64_t q = tap(ow, j, c.stride_w, c.pad_w, c.dilation_w, p.x.w);
                  if (q < 0) continue;
                  const int64_t xi = ((n * p.x.c + g * p.in_per_group() + ci) * p.x.h + r) * p.x.w + q;
                  const int64_t wi = ((o * p.w.c + ci) * p.w.h + i) * p.w.w + j;
                  sum += static_cast<double>(p.operand(w, wi)) * p.operand(x, xi);
                }
              }
            blend(y, t, ((n * p.y.c + o) * p.y.h + oh) * p.y.w + ow, a, b, sum);
          }
      }
  });
}

int backward_data(void* h, const void* alpha, void* wd, const void* w, void* dyd, const void* dy,
                  void* cd, int algo, void* workspace, size_t bytes, const void* beta, void* dxd,
                  void* dx) {
  Problem p;
  if (int status = make_problem(h, dxd, wd, cd, dyd, &p)) return status;
  if (int status = check_algo_and_workspace(p, algo, workspace, bytes)) return status;
  if (!host_scalar(alpha) || !host_scalar(beta) || !dx || !w || !dy) return kBadParam;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  return run(h, regions_of(p, dx, w, dy, workspace, bytes), [p, a, b, w, dy, dx]() {
    const Conv& c = p.conv;
    const int t = p.x.type;
    for (int64_t n = 0; n < p.x.n; ++n)
      for (int64_t ch = 0; ch < p.x.c; ++ch) {
        const int64_t g = ch / p.in_per_group(), ci = ch % p.in_per_group();
        for (int64_t r = 0; r < p.x.h; ++r)
          for (int64_t q = 0; q < p.x.w; ++q) {
            double sum = 0.0;
            for (int64_t o = g * p.out_per_group(); o < (g + 1) * p.out_per_group(); ++o)
              for (int64_t i = 0; i < p.w.h; ++i) {
                const int64_t rows = r + c.pad_h - i * c.dilation_h;
                if (rows < 0 || rows % c.stride_h != 0 || rows / c.stride_h >= p.y.h) continue;
                for (int64_t j = 0; j < p.w.w; ++j) {
                  const int64_t cols = q + c.pad_w - j * c.dilation_w;
                  if (cols < 0 || cols % c.stride_w != 0 || cols / c.stride_w >= p.y.w) continue;
                  const int64_t yi =
                      ((n * p.y.c + o) * p.y.h + rows / c.stride_h) * p.y.w + cols / c.stride_w;
                  sum += static_cast<double>(p.operand(w, ((o * p.w.c + ci) * p.w.h + i) * p.w.w + j)) *
                         p.operand(dy, yi);
                }
              }
            blend(dx, t, ((n * p.x.c + ch) * p.x.h + r) * p.x.w + q, a, b, sum);
          }
      }
  });
}

int backward_filter(void* h, const void* alpha, void* xd, const void* x, void* dyd, const void* dy,
                    void* cd, int algo, void* workspace, size_t bytes, const void* beta, void* dwd,
                    void* dw) {
  Problem p;
  if (int status = make_problem(h, xd, dwd, cd, dyd, &p)) return status;
  if (int status = check_algo_and_workspace(p, algo, workspace, bytes)) return status;
  if (!host_scalar(alpha) || !host_scalar(beta) || !x || !dw || !dy) return kBadParam;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  return run(h, regions_of(p, x, dw, dy, workspace, bytes), [p, a, b, x, dy, dw]() {
    const Conv& c = p.conv;
    const int t = p.x.type;
    for (int64_t o = 0; o < p.w.k; ++o) {
      const int64_t g = o / p.out_per_group();
      for (int64_t ci = 0; ci < p.w.c; ++ci)
        for (int64_t i = 0; i < p.w.h; ++i)
          for (int64_t j = 0; j < p.w.w; ++j) {
            double sum = 0.0;
            for (int64_t n = 0; n < p.y.n; ++n)
              for (int64_t oh = 0; oh < p.y.h; ++oh) {
                const int64_t r = tap(oh, i, c.stride_h, c.pad_h, c.dilation_h, p.x.h);
                if (r < 0) continue;
                for (int64_t ow = 0; ow < p.y.w; ++ow) {
                  const int64_t q = tap(ow, j, c.stride_w, c.pad_w, c.dilation_w, p.x.w);
                  if (q < 0) continue;
                  const int64_t xi = ((n * p.x.c + g * p.in_per_group() + ci) * p.x.h + r) * p.x.w + q;
                  sum += static_cast<double>(p.operand(dy, ((n * p.y.c + o) * p.y.h + oh) * p.y.w + ow)) *
                         p.operand(x, xi);
                }
              }
            blend(dw, t, ((o * p.w.c + ci) * p.w.h + i) * p.w.w + j, a, b, sum);
          }
    }
  });
}

// C = alpha * A + beta * C with A [1, C, 1, 1] broadcast over C's images and positions.
int add_tensor(void* h, const void* alpha, void* ad, const void* A, const void* beta, void* cd,
               void* C) {
  if (!is_live(h, Kind::Handle)) return kNotInitialized;
  if (!is_live(ad, Kind::Tensor) || !is_live(cd, Kind::Tensor)) return kBadParam;
  const Tensor at = *static_cast<Tensor*>(ad), ct = *static_cast<Tensor*>(cd);
  if (!at.set || !ct.set || at.type != ct.type || at.n != 1 || at.c != ct.c || at.h != 1 ||
      at.w != 1 || !host_scalar(alpha) || !host_scalar(beta) || !A || !C)
    return kBadParam;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const size_t e = element_bytes(ct.type);
  return run(h, {{A, at.count() * e}, {C, ct.count() * e}}, [at, ct, a, b, A, C]() {
    const int64_t plane = ct.h * ct.w;
    for (int64_t i = 0; i < ct.count(); ++i)
      blend(C, ct.type, i, 1.0f, b, a * load(A, at.type, i / plane % ct.c));
  });
}

// db = alpha * sum over images and positions of dy + beta * db, db [1, C, 1, 1].
int backward_bias(void* h, const void* alpha, void* dyd, const void* dy, const void* beta,
                  void* dbd, void* db) {
  if (!is_live(h, Kind::Handle)) return kNotInitialized;
  if (!is_live(dyd, Kind::Tensor) || !is_live(dbd, Kind::Tensor)) return kBadParam;
  const Tensor yt = *static_cast<Tensor*>(dyd), bt = *static_cast<Tensor*>(dbd);
  if (!yt.set || !bt.set || yt.type != bt.type || bt.n != 1 || bt.c != yt.c || bt.h != 1 ||
      bt.w != 1 || !host_scalar(alpha) || !host_scalar(beta) || !dy || !db)
    return kBadParam;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const size_t e = element_bytes(yt.type);
  return run(h, {{dy, yt.count() * e}, {db, bt.count() * e}}, [yt, bt, a, b, dy, db]() {
    const int64_t plane = yt.h * yt.w;
    for (int64_t c = 0; c < yt.c; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < yt.n; ++n)
        for (int64_t i = 0; i < plane; ++i) sum += load(dy, yt.type, (n * yt.c + c) * plane + i);
      blend(db, bt.type, c, a, b, sum);
    }
  });
}

}  // namespace

extern "C" void* ampx_emulated_cudnn_symbol(const char* name) {
  static const std::unordered_map<std::string, void*> symbols = {
      {"cudnnGetVersion", reinterpret_cast<void*>(&get_version)},
      {"cudnnGetErrorString", reinterpret_cast<void*>(&get_error_string)},
      {"cudnnCreate", reinterpret_cast<void*>(&handle_create)},
      {"cudnnDestroy", reinterpret_cast<void*>(&handle_destroy)},
      {"cudnnSetStream", reinterpret_cast<void*>(&set_stream)},
      {"cudnnCreateTensorDescriptor", reinterpret_cast<void*>(&tensor_create)},
      {"cudnnSetTensor4dDescriptor", reinterpret_cast<void*>(&tensor_set)},
      {"cudnnDestroyTensorDescriptor", reinterpret_cast<void*>(&tensor_destroy)},
      {"cudnnCreateFilterDescriptor", reinterpret_cast<void*>(&filter_create)},
      {"cudnnSetFilter4dDescriptor", reinterpret_cast<void*>(&filter_set)},
      {"cudnnDestroyFilterDescriptor", reinterpret_cast<void*>(&filter_destroy)},
      {"cudnnCreateConvolutionDescriptor", reinterpret_cast<void*>(&conv_create)},
      {"cudnnSetConvolution2dDescriptor", reinterpret_cast<void*>(&conv_set)},
      {"cudnnSetConvolutionGroupCount", reinterpret_cast<void*>(&conv_groups)},
      {"cudnnSetConvolutionMathType", reinterpret_cast<void*>(&conv_math)},
      {"cudnnDestroyConvolutionDescriptor", reinterpret_cast<void*>(&conv_destroy)},
      {"cudnnGetConvolutionForwardAlgorithm_v7", reinterpret_cast<void*>(&forward_algorithms)},
      {"cudnnGetConvolutionForwardWorkspaceSize", reinterpret_cast<void*>(&forward_workspace)},
      {"cudnnConvolutionForward", reinterpret_cast<void*>(&forward)},
      {"cudnnGetConvolutionBackwardDataAlgorithm_v7",
       reinterpret_cast<void*>(&backward_data_algorithms)},
      {"cudnnGetConvolutionBackwardDataWorkspaceSize",
       reinterpret_cast<void*>(&backward_data_workspace)},
      {"cudnnConvolutionBackwardData", reinterpret_cast<void*>(&backward_data)},
      {"cudnnGetConvolutionBackwardFilterAlgorithm_v7",
       reinterpret_cast<void*>(&backward_filter_algorithms)},
      {"cudnnGetConvolutionBackwardFilterWorkspaceSize",
       reinterpret_cast<void*>(&backward_filter_workspace)},
      {"cudnnConvolutionBackwardFilter", reinterpret_cast<void*>(&backward_filter)},
      {"cudnnAddTensor", reinterpret_cast<void*>(&add_tensor)},
      {"cudnnConvolutionBackwardBias", reinterpret_cast<void*>(&backward_bias)},
  };
  const auto found = symbols.find(name ? name : "");
  return found == symbols.end() ? nullptr : found->second;
}
