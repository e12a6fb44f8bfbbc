// dnnl_matmul.cpp -- see dnnl_matmul.h. The products are row-major as
// GemmArgs: A [m, k] (stored [k, m] when trans_a), B [k, n] (stored [n, k]
// when trans_b), C [m, n], each matrix of a batch at its batch stride (0: one
// matrix shared by the batch, which oneDNN broadcasts). alpha is oneDNN's
// output scale, beta its sum post-op.
#include "backend/cpu/dnnl_matmul.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <cstring>
#include <memory>

#include "backend/cpu/dnnl_library.h"
#include "core/error.h"

namespace ampx::impl {
namespace cpu {
namespace {

// What a product's cached primitive is made for (PrimitiveCache).
struct ShapeKey {
  int64_t batch, m, n, k, a_batch_stride, b_batch_stride, c_batch_stride;
  bool trans_a, trans_b, bias;
  DType ab_type, c_type;
  float alpha, beta;
};

ShapeKey shape_key(const GemmArgs& g) {
  ShapeKey key;
  std::memset(&key, 0, sizeof key);  // padding too: keys compare bytewise
  key.batch = g.batch;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.a_batch_stride = g.a_batch_stride;
  key.b_batch_stride = g.b_batch_stride;
  key.c_batch_stride = g.c_batch_stride;
  key.trans_a = g.trans_a;
  key.trans_b = g.trans_b;
  key.bias = g.bias != nullptr;
  key.ab_type = g.ab_type;
  key.c_type = g.c_type;
  key.alpha = g.alpha;
  key.beta = g.beta;
  return key;
}

// A made primitive with the memory descriptors its arguments are bound by.
struct Made {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a, b, c, bias;
  void release(const Dnnl& d) {
    if (primitive) d.primitive_destroy(primitive);
  }
};

// Everything made on the way to one primitive, released whatever happens.
struct Making {
  const Dnnl& d;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t post_ops = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  explicit Making(const Dnnl& lib) : d(lib) {}
  ~Making() {
    if (pd) d.pd_destroy(pd);
    if (post_ops) d.post_ops_destroy(post_ops);
    if (attr) d.attr_destroy(attr);
  }
  Making(const Making&) = delete;
  Making& operator=(const Making&) = delete;
};

// A [batch, rows, cols] matrix stored row-major (transposed: [cols, rows])
// at `batch_stride` elements per matrix.
bool describe(const Dnnl& d, dnnl_memory_desc_t* md, int64_t batch, int64_t rows, int64_t cols,
              bool transposed, int64_t batch_stride, DType type) {
  const bool shared = batch > 1 && batch_stride == 0;
  dnnl_dims_t dims = {shared ? 1 : batch, rows, cols};
  dnnl_dims_t strides = {shared ? rows * cols : batch_stride, transposed ? 1 : cols,
                         transposed ? rows : 1};
  if (batch == 1) strides[0] = rows * cols;
  return d.memory_desc(md, 3, dims, dnnl_type(type), strides) == dnnl_success;
}

bool make(const Dnnl& d, const GemmArgs& g, Made* made) {
  if (!describe(d, &made->a, g.batch, g.m, g.k, g.trans_a, g.a_batch_stride, g.ab_type) ||
      !describe(d, &made->b, g.batch, g.k, g.n, g.trans_b, g.b_batch_stride, g.ab_type) ||
      !describe(d, &made->c, g.batch, g.m, g.n, false, g.c_batch_stride, g.c_type) ||
      (g.bias && !describe(d, &made->bias, 1, 1, g.n, false, 0, g.c_type)))
    return false;
  dnnl_matmul_desc_t desc;
  if (d.matmul_desc(&desc, &made->a, &made->b, g.bias ? &made->bias : nullptr, &made->c) !=
      dnnl_success)
    return false;
  Making making(d);
  if (d.attr_create(&making.attr) != dnnl_success) return false;
  if (g.alpha != 1.0f && d.attr_output_scales(making.attr, 1, 0, &g.alpha) != dnnl_success)
    return false;
  if (g.beta != 0.0f) {
    if (d.post_ops_create(&making.post_ops) != dnnl_success ||
        d.post_ops_sum(making.post_ops, g.beta) != dnnl_success ||
        d.attr_post_ops(making.attr, making.post_ops) != dnnl_success)
      return false;
  }
  return d.pd_create(&making.pd, &desc, making.attr, d.engine, nullptr) == dnnl_success &&
         d.primitive_create(&made->primitive, making.pd) == dnnl_success;
}

using Primitives = PrimitiveCache<ShapeKey, Made>;

bool run(const Dnnl& d, Primitives& primitives, int threads, const GemmArgs& g) {
  const std::shared_ptr<const Made> made =
      primitives.find_or_make(shape_key(g), [&](Made* m) { return make(d, g, m); });
  dnnl_stream_t stream = thread_stream(d);
  if (!made || !stream) return false;
  Bound bound(d);
  if (d.memory_create(&bound.memory[0], &made->a, d.engine, const_cast<void*>(g.a)) !=
          dnnl_success ||
      d.memory_create(&bound.memory[1], &made->b, d.engine, const_cast<void*>(g.b)) !=
          dnnl_success ||
      d.memory_create(&bound.memory[2], &made->c, d.engine, g.c) != dnnl_success ||
      (g.bias && d.memory_create(&bound.memory[3], &made->bias, d.engine,
                                 const_cast<void*>(g.bias)) != dnnl_success))
    return false;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, bound.memory[0]},
                             {DNNL_ARG_WEIGHTS, bound.memory[1]},
                             {DNNL_ARG_DST, bound.memory[2]},
                             {DNNL_ARG_BIAS, bound.memory[3]}};
  const OmpThreads omp(d, threads,
                       double(g.batch) * double(g.m) * double(g.n) * double(g.k));
  const dnnl_status_t status = d.execute(made->primitive, stream, g.bias ? 4 : 3, args);
  const dnnl_status_t waited = status == dnnl_success ? d.stream_wait(stream) : status;
  // C may be partly written by now: no falling back to the other path.
  if (waited != dnnl_success)
    fail(AMPX_ERR_INTERNAL, "gemm: oneDNN's matmul failed (dnnl_status ", int{waited}, ")");
  return true;
}

}  // namespace

bool dnnl_gemm(ThreadPool& pool, const GemmArgs& g) {
  if (g.ab_type != DType::BF16 || (g.batch > 1 && g.c_batch_stride == 0) ||
      (g.bias && g.alpha != 1.0f) || g.batch == 0 || g.k == 0 || g.m == 0 || g.n == 0)
    return false;
  const Dnnl* d = dnnl_library();
  if (!d) return false;
  const auto primitives = std::static_pointer_cast<Primitives>(context_plans(
      pool, PlanKind::Matmul, *d,
      [](const Dnnl& lib) -> std::shared_ptr<void> { return std::make_shared<Primitives>(lib); }));
  return run(*d, *primitives, pool.size(), g);
}

}  // namespace cpu
}  // namespace ampx::impl

#else  // built without oneDNN's headers

namespace ampx::impl {
namespace cpu {

bool dnnl_gemm(ThreadPool&, const GemmArgs&) { return false; }

}  // namespace cpu
}  // namespace ampx::impl

#endif
