// dnnl_conv.cpp -- see dnnl_conv.h. One plan per shape, pass and type: the
// convolution primitive, and for each of its three tensors the plain NCHW /
// [G,] O, C/G, kh, kw layout ampx holds, the layout the primitive chose
// (format "any"), and the reorder between them when they differ. A pass's
// inputs are reordered into the calling thread's scratch, the primitive
// runs there, and its output is reordered back into the tensor.
#include "backend/cpu/dnnl_conv.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_layout.h"
#include "core/error.h"
#include "core/profile.h"

namespace ampx::impl {
namespace cpu {
namespace {

enum class Pass : int64_t { Forward, BackwardData, BackwardWeight };

struct PlanKey {  // all int64_t, so no padding to compare
  Conv2dShape shape;
  int64_t type, pass, bias;
  int64_t threads;  // the OpenMP threads the primitive was made for (OmpThreads)
};

// One tensor operand of the primitive.
struct Operand {
  int arg = 0;  // DNNL_ARG_*
  bool output = false;
  dnnl_memory_desc_t plain{}, own{};
  dnnl_primitive_t reorder = nullptr;  // plain -> own for an input, own -> plain for an output
  // Or, for an image the primitive wants as nChw16c: cpu_layout.h's moves
  // of [images, channels, positions].
  bool blocked16 = false;
  int64_t images = 0, channels = 0, positions = 0;
  bool moved() const { return reorder || blocked16; }
};

// Whether `own` is `plain` (an NCHW image of 16k channels) in nChw16c.
bool is_blocked16(const Dnnl& d, const dnnl_memory_desc_t& plain, const dnnl_memory_desc_t& own) {
  if (plain.ndims != 4 || plain.dims[1] % 16 != 0) return false;
  dnnl_memory_desc_t blocked;
  return d.memory_desc_by_tag(&blocked, 4, plain.dims, plain.data_type, dnnl_aBcd16b) ==
             dnnl_success &&
         d.memory_desc_equal(&blocked, &own);
}

struct Plan {
  dnnl_primitive_t conv = nullptr;
  Operand operands[3];
  int bias_arg = 0;  // 0: none
  dnnl_memory_desc_t bias{};
  void release(const Dnnl& d) {
    for (const Operand& o : operands)
      if (o.reorder) d.primitive_destroy(o.reorder);
    if (conv) d.primitive_destroy(conv);
  }
};

// The primitive descriptors made on the way to a plan, released whatever
// happens.
struct Descriptors {
  const Dnnl& d;
  dnnl_primitive_desc_t forward = nullptr, pass = nullptr;
  explicit Descriptors(const Dnnl& lib) : d(lib) {}
  ~Descriptors() {
    if (pass && pass != forward) d.pd_destroy(pass);
    if (forward) d.pd_destroy(forward);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

struct Layouts {  // each tensor's memory descriptor, plain or "any"
  dnnl_memory_desc_t src, weights, dst, bias;
};

bool describe(const Dnnl& d, const Conv2dShape& s, dnnl_data_type_t type, bool any,
              Layouts* out) {
  const dnnl_dims_t src = {s.batch, s.in_channels, s.in_h, s.in_w};
  const dnnl_dims_t dst = {s.batch, s.out_channels, s.out_h, s.out_w};
  const dnnl_dims_t weights = {s.out_channels, s.in_channels / s.groups, s.kernel_h, s.kernel_w};
  const dnnl_dims_t grouped = {s.groups, s.out_channels / s.groups, s.in_channels / s.groups,
                               s.kernel_h, s.kernel_w};
  const dnnl_dims_t bias = {s.out_channels};
  const dnnl_format_tag_t image = any ? dnnl_format_tag_any : dnnl_nchw;
  const dnnl_format_tag_t filter =
      any ? dnnl_format_tag_any : s.groups == 1 ? dnnl_oihw : dnnl_goihw;
  return d.memory_desc_by_tag(&out->src, 4, src, type, image) == dnnl_success &&
         d.memory_desc_by_tag(&out->dst, 4, dst, type, image) == dnnl_success &&
         d.memory_desc_by_tag(&out->weights, s.groups == 1 ? 4 : 5,
                              s.groups == 1 ? weights : grouped, type, filter) == dnnl_success &&
         d.memory_desc_by_tag(&out->bias, 1, bias, type, dnnl_x) == dnnl_success;
}

bool make_plan(const Dnnl& d, const PlanKey& key, Plan* plan) {
  const Conv2dShape& s = key.shape;
  const dnnl_data_type_t type = dnnl_type(static_cast<DType>(key.type));
  const Pass pass = static_cast<Pass>(key.pass);
  Layouts plain, any;
  if (!describe(d, s, type, false, &plain) || !describe(d, s, type, true, &any)) return false;
  // ampx's output extents are floor divisions, so the right padding equal to
  // the left one gives oneDNN's same extents.
  const dnnl_dims_t strides = {s.stride_h, s.stride_w};
  const dnnl_dims_t dilates = {s.dilation_h - 1, s.dilation_w - 1};
  const dnnl_dims_t padding = {s.pad_h, s.pad_w};
  const bool bias = key.bias != 0;
  Descriptors pds(d);
  dnnl_convolution_desc_t forward;
  if (d.conv_forward_desc(&forward, dnnl_forward_training, dnnl_convolution_direct, &any.src,
                          &any.weights, pass == Pass::Forward && bias ? &plain.bias : nullptr,
                          &any.dst, strides, dilates, padding, padding) != dnnl_success ||
      d.pd_create(&pds.forward, &forward, nullptr, d.engine, nullptr) != dnnl_success)
    return false;
  dnnl_convolution_desc_t backward;
  if (pass == Pass::Forward) {
    pds.pass = pds.forward;
    plan->operands[0] = {DNNL_ARG_SRC, false, plain.src};
    plan->operands[1] = {DNNL_ARG_WEIGHTS, false, plain.weights};
    plan->operands[2] = {DNNL_ARG_DST, true, plain.dst};
    if (bias) plan->bias_arg = DNNL_ARG_BIAS;
  } else if (pass == Pass::BackwardData) {
    if (d.conv_backward_data_desc(&backward, dnnl_convolution_direct, &any.src, &any.weights,
                                  &any.dst, strides, dilates, padding, padding) != dnnl_success)
      return false;
    plan->operands[0] = {DNNL_ARG_DIFF_DST, false, plain.dst};
    plan->operands[1] = {DNNL_ARG_WEIGHTS, false, plain.weights};
    plan->operands[2] = {DNNL_ARG_DIFF_SRC, true, plain.src};
  } else {
    if (d.conv_backward_weights_desc(&backward, dnnl_convolution_direct, &any.src, &any.weights,
                                     bias ? &plain.bias : nullptr, &any.dst, strides, dilates,
                                     padding, padding) != dnnl_success)
      return false;
    plan->operands[0] = {DNNL_ARG_SRC, false, plain.src};
    plan->operands[1] = {DNNL_ARG_DIFF_DST, false, plain.dst};
    plan->operands[2] = {DNNL_ARG_DIFF_WEIGHTS, true, plain.weights};
    if (bias) plan->bias_arg = DNNL_ARG_DIFF_BIAS;
  }
  if (pass != Pass::Forward &&
      d.pd_create(&pds.pass, &backward, nullptr, d.engine, pds.forward) != dnnl_success)
    return false;
  plan->bias = plain.bias;
  if (plan->bias_arg) {
    const dnnl_memory_desc_t* chosen = d.pd_query_md(pds.pass, dnnl_query_exec_arg_md,
                                                     plan->bias_arg);
    if (!chosen || !d.memory_desc_equal(chosen, &plain.bias)) return false;
  }
  for (Operand& o : plan->operands) {
    const dnnl_memory_desc_t* chosen = d.pd_query_md(pds.pass, dnnl_query_exec_arg_md, o.arg);
    if (!chosen) return false;
    o.own = *chosen;
    if (d.memory_desc_equal(&o.own, &o.plain)) continue;
    if (o.arg != DNNL_ARG_WEIGHTS && o.arg != DNNL_ARG_DIFF_WEIGHTS &&
        is_blocked16(d, o.plain, o.own)) {
      o.blocked16 = true;
      o.images = o.plain.dims[0];
      o.channels = o.plain.dims[1];
      o.positions = o.plain.dims[2] * o.plain.dims[3];
      continue;
    }
    dnnl_primitive_desc_t reorder = nullptr;
    const dnnl_memory_desc_t* from = o.output ? &o.own : &o.plain;
    const dnnl_memory_desc_t* to = o.output ? &o.plain : &o.own;
    if (d.reorder_pd_create(&reorder, from, d.engine, to, d.engine, nullptr) != dnnl_success)
      return false;
    const dnnl_status_t made = d.primitive_create(&o.reorder, reorder);
    d.pd_destroy(reorder);
    if (made != dnnl_success) return false;
  }
  return d.primitive_create(&plan->conv, pds.pass) == dnnl_success;
}

using Plans = PrimitiveCache<PlanKey, Plan>;

// The calling thread's scratch for the moved operands, kept between calls
// as a training step repeats the same shapes: one per operand position,
// and one for dy (DIFF_DST) in both backward passes, where the weight pass
// finds what the data pass left (moved_dy).
std::vector<char>& thread_scratch(const Operand& o, int i) {
  thread_local std::vector<char> scratch[4];
  return scratch[o.arg == DNNL_ARG_DIFF_DST ? 3 : i];
}

// The dy the calling thread's last backward-data pass moved into its
// scratch, and the layout it moved it to.
struct MovedDy {
  const void* tensor = nullptr;
  dnnl_memory_desc_t own{};
};
thread_local MovedDy moved_dy;

// One pass. reuse_dy: dy has not changed since the backward-data pass just
// before on this thread, so a move of dy it made into the same layout is
// not repeated.
bool run(ThreadPool& pool, const Conv2dShape& s, Pass pass, DType type, const void* const data[3],
         void* bias, bool reuse_dy = false) {
  if (type != DType::F32 && type != DType::BF16) return false;
  const Dnnl* lib = dnnl_library();
  if (!lib) return false;
  const Dnnl& d = *lib;
  static Plans& plans = *new Plans(d);  // never destroyed, as the library
  const double multiply_adds = double(s.batch) * double(s.out_channels) * double(s.out_h) *
                               double(s.out_w) * double(s.in_channels / s.groups) *
                               double(s.kernel_h) * double(s.kernel_w);
  // Set before the plan is made: a convolution's thread count is fixed then.
  const OmpThreads omp(d, pool.size(), multiply_adds);
  const PlanKey key{s, static_cast<int64_t>(type), static_cast<int64_t>(pass), bias != nullptr,
                    omp.threads()};
  std::shared_ptr<const Plan> plan;
  {
    const ProfileScope timed("oneDNN plan (cache or creation)");
    plan = plans.find_or_make(key, [&](Plan* p) { return make_plan(d, key, p); });
  }
  dnnl_stream_t stream = thread_stream(d);
  if (!plan || !stream) return false;

  const bool dy_ready = reuse_dy && pass == Pass::BackwardWeight &&
                        moved_dy.tensor == data[1] &&
                        d.memory_desc_equal(&moved_dy.own, &plan->operands[1].own);
  if (pass == Pass::BackwardData) moved_dy.tensor = nullptr;
  Bound plain(d), own(d);
  void* own_data[3];
  for (int i = 0; i < 3; ++i) {
    const Operand& o = plan->operands[i];
    void* tensor = const_cast<void*>(data[i]);
    if (d.memory_create(&plain.memory[i], &o.plain, d.engine, tensor) != dnnl_success)
      return false;
    own_data[i] = tensor;
    if (o.moved()) {
      std::vector<char>& scratch = thread_scratch(o, i);
      scratch.resize(std::max(scratch.size(), d.memory_desc_size(&o.own)));
      own_data[i] = scratch.data();
    }
    if (d.memory_create(&own.memory[i], &o.own, d.engine, own_data[i]) != dnnl_success)
      return false;
  }
  if (bias && d.memory_create(&plain.memory[3], &plan->bias, d.engine, bias) != dnnl_success)
    return false;

  dnnl_status_t status = dnnl_success;
  auto reorder = [&](const Operand& o, int i) {
    if (!o.moved() || status != dnnl_success) return;
    if (o.blocked16) {
      const ProfileScope timed("NCHW <-> nChw16c (cpu_layout)");
      const size_t size = dtype_size(type);
      if (o.output)
        blocked16_to_nchw(pool, own_data[i], const_cast<void*>(data[i]), o.images, o.channels,
                          o.positions, size);
      else
        nchw_to_blocked16(pool, data[i], own_data[i], o.images, o.channels, o.positions, size);
      return;
    }
    const ProfileScope timed("oneDNN reorder");
    pool.rest();
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, o.output ? own.memory[i] : plain.memory[i]},
                               {DNNL_ARG_TO, o.output ? plain.memory[i] : own.memory[i]}};
    status = d.execute(o.reorder, stream, 2, args);
  };
  for (int i = 0; i < 3; ++i) {
    const Operand& o = plan->operands[i];
    if (o.output || (dy_ready && o.arg == DNNL_ARG_DIFF_DST)) continue;
    reorder(o, i);
    if (pass == Pass::BackwardData && o.arg == DNNL_ARG_DIFF_DST && o.moved() &&
        status == dnnl_success)
      moved_dy = {data[i], o.own};
  }
  dnnl_exec_arg_t args[4];
  for (int i = 0; i < 3; ++i) args[i] = {plan->operands[i].arg, own.memory[i]};
  args[3] = {plan->bias_arg, plain.memory[3]};
  if (status == dnnl_success) {
    const ProfileScope timed("oneDNN convolution");
    // The pool's workers, polling after the layout moves, would take the
    // cores from oneDNN's OpenMP threads.
    pool.rest();
    status = d.execute(plan->conv, stream, bias ? 4 : 3, args);
  }
  for (int i = 0; i < 3; ++i)
    if (plan->operands[i].output) reorder(plan->operands[i], i);
  if (status == dnnl_success) status = d.stream_wait(stream);
  if (status != dnnl_success)
    fail(AMPX_ERR_INTERNAL, "conv2d: oneDNN's convolution failed (dnnl_status ", int{status},
         ")");
  return true;
}

}  // namespace

bool dnnl_conv2d_forward(ThreadPool& pool, const Conv2dShape& s, const void* x, const void* w,
                         const void* bias, DType type, void* y) {
  const void* data[3] = {x, w, y};
  return run(pool, s, Pass::Forward, type, data, const_cast<void*>(bias));
}

bool dnnl_conv2d_backward_data(ThreadPool& pool, const Conv2dShape& s, const void* dy,
                               const void* w, DType type, void* dx) {
  const void* data[3] = {dy, w, dx};
  return run(pool, s, Pass::BackwardData, type, data, nullptr);
}

bool dnnl_conv2d_backward_weight(ThreadPool& pool, const Conv2dShape& s, const void* dy,
                                 const void* x, DType type, void* dw, void* dbias) {
  const void* data[3] = {x, dy, dw};
  return run(pool, s, Pass::BackwardWeight, type, data, dbias);
}

bool dnnl_conv2d_backward(ThreadPool& pool, const Conv2dShape& s, const void* dy, const void* x,
                          const void* w, DType type, void* dx, void* dw, void* dbias) {
  const void* data_pass[3] = {dy, w, dx};
  const void* weight_pass[3] = {x, dy, dw};
  // Should the weight pass refuse after the data pass wrote dx, the caller
  // falls back to the two passes apart, which compute dx again the same way.
  {
    const ProfileScope timed("data pass");
    if (!run(pool, s, Pass::BackwardData, type, data_pass, nullptr)) return false;
  }
  const ProfileScope timed("weight pass");
  return run(pool, s, Pass::BackwardWeight, type, weight_pass, dbias, true);
}

}  // namespace cpu
}  // namespace ampx::impl

#else  // built without oneDNN's headers

namespace ampx::impl {
namespace cpu {

bool dnnl_conv2d_forward(ThreadPool&, const Conv2dShape&, const void*, const void*, const void*,
                         DType, void*) {
  return false;
}
bool dnnl_conv2d_backward_data(ThreadPool&, const Conv2dShape&, const void*, const void*, DType,
                               void*) {
  return false;
}
bool dnnl_conv2d_backward_weight(ThreadPool&, const Conv2dShape&, const void*, const void*, DType,
                                 void*, void*) {
  return false;
}
bool dnnl_conv2d_backward(ThreadPool&, const Conv2dShape&, const void*, const void*, const void*,
                          DType, void*, void*, void*) {
  return false;
}

}  // namespace cpu
}  // namespace ampx::impl

#endif
