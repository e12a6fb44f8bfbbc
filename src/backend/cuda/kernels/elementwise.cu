// elementwise.cu -- the element-wise primitives of the ops, any floating
// type, computed in fp32 and rounded once when stored:
//
//   unary           y[i]  = Act::forward(x[i])          (math/activations.h)
//   unary_backward  dx[i] = Act::backward(x[i], dy[i])
//   binary          out[i] = a[i] op b[i % b_count]      (op: + - * /, ==)
//   affine          y[i]  = x[i] * scale + shift
//   add_into        dst[i] = dst[i] + src[i]             (types may differ)
//   scale_matrices  c[b * stride + e] = beta == 0 ? 0 : c[b * stride + e] * beta
//   bias_epilogue   c[i][j] = p[i][j] + beta * c[i][j] + bias[j], rounded once
//
// Memory traffic: every array is read once and the output written once
// (a broadcast b is re-read per row, from cache); scale_matrices reads C
// only when beta != 0. Threads move 16-byte packets of each array where the
// arrays share an alignment phase (stretch.cuh), single elements elsewhere.
//
// The arithmetic is the CPU backend's operation for operation (no fused
// multiply-adds on either side), so relu, binary, affine, add_into and
// scale_matrices give the CPU's bits; the other activations differ from it
// only as CUDA's erfcf/expf/tanhf differ from the host's. Outputs may alias
// inputs element for element (in place): each thread reads an element
// before writing it, and no other thread touches it.
#include <cuda_runtime.h>

#include "math/activations.h"
#include "math/binary.h"
#include "math/convert.h"
#include "multi_tensor.cuh"
#include "ops_launch.cuh"
#include "stretch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

// 16 bytes of the narrowest array per packet.
template <int Bytes>
constexpr int kPacket = kVector<16, Bytes>;

template <int D, class Act, bool Backward>
__global__ void __launch_bounds__(kBlockThreads)
    activation_kernel(const Elem<D>* x, const Elem<D>* dy, Elem<D>* out, int64_t count,
                      int64_t length) {
  const Stretch s = block_stretch(count, length);
  const int head = vector_head(s.begin, x, dy, out);
  for_each_packet<kPacket<sizeof(Elem<D>)>>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto xs = load_pack<W>(x + j);
    Pack<Elem<D>, W> ys;
    if constexpr (Backward) {
      const auto gs = load_pack<W>(dy + j);
#pragma unroll
      for (int k = 0; k < W; ++k)
        ys.v[k] = math::store_float<D>(
            Act::backward(math::load_float<D>(xs.v[k]), math::load_float<D>(gs.v[k])));
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k)
        ys.v[k] = math::store_float<D>(Act::forward(math::load_float<D>(xs.v[k])));
    }
    store_pack(out + j, ys);
  });
}

// Broadcast: b is one row, repeated. Its index advances with the element
// and wraps, so the 64-bit modulo is paid once per packet, not per element.
template <int D, BinaryOp Op, bool Broadcast>
__global__ void __launch_bounds__(kBlockThreads)
    binary_kernel(const Elem<D>* a, const Elem<D>* b, Elem<D>* out, int64_t count,
                  int64_t b_count, int64_t length) {
  const Stretch s = block_stretch(count, length);
  const int head = Broadcast ? vector_head(s.begin, a, out) : vector_head(s.begin, a, b, out);
  for_each_packet<kPacket<sizeof(Elem<D>)>>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto as = load_pack<W>(a + j);
    Pack<Elem<D>, W> r;
    if constexpr (Broadcast) {
      int64_t jb = j % b_count;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        r.v[k] = math::store_float<D>(
            math::binary_value<Op>(math::load_float<D>(as.v[k]), math::load_float<D>(b[jb])));
        if (++jb == b_count) jb = 0;
      }
    } else {
      const auto bs = load_pack<W>(b + j);
#pragma unroll
      for (int k = 0; k < W; ++k)
        r.v[k] = math::store_float<D>(
            math::binary_value<Op>(math::load_float<D>(as.v[k]), math::load_float<D>(bs.v[k])));
    }
    store_pack(out + j, r);
  });
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    affine_kernel(const Elem<D>* x, Elem<D>* y, int64_t count, int64_t length, float scale,
                  float shift) {
  const Stretch s = block_stretch(count, length);
  const int head = vector_head(s.begin, x, y);
  for_each_packet<kPacket<sizeof(Elem<D>)>>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto xs = load_pack<W>(x + j);
    Pack<Elem<D>, W> ys;
#pragma unroll
    for (int k = 0; k < W; ++k)
      ys.v[k] = math::store_float<D>(math::load_float<D>(xs.v[k]) * scale + shift);
    store_pack(y + j, ys);
  });
}

template <int D, int S>
__global__ void __launch_bounds__(kBlockThreads)
    add_into_kernel(Elem<D>* dst, const Elem<S>* src, int64_t count, int64_t length) {
  constexpr int kNarrowest = sizeof(Elem<D>) < sizeof(Elem<S>) ? sizeof(Elem<D>) : sizeof(Elem<S>);
  const Stretch s = block_stretch(count, length);
  const int head = vector_head(s.begin, dst, src);
  for_each_packet<kPacket<kNarrowest>>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    auto ds = load_pack<W>(dst + j);
    const auto ss = load_pack<W>(src + j);
#pragma unroll
    for (int k = 0; k < W; ++k)
      ds.v[k] = math::store_float<D>(math::load_float<D>(ds.v[k]) + math::load_float<S>(ss.v[k]));
    store_pack(dst + j, ds);
  });
}

// A rarely taken path (GEMM with k or alpha 0), so one element per thread
// and a division per element keep it simple.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    scale_matrices_kernel(Elem<D>* c, int64_t batch, int64_t elements, int64_t stride, float beta) {
  const int64_t total = batch * elements;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t b = i / elements;
    Elem<D>& v = c[b * stride + (i - b * elements)];
    v = math::store_float<D>(beta == 0.0f ? 0.0f : math::load_float<D>(v) * beta);
  }
}

// GEMM's bias epilogue where cuBLASLt has none (a rarely taken path, so one
// element per thread): in fp32 as the fused epilogue, then one rounding.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    bias_epilogue_kernel(Elem<D>* c, const float* product, float beta, const Elem<D>* bias,
                         int64_t m, int64_t n) {
  const int64_t total = m * n;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    float v = product != nullptr ? product[i] : 0.0f;
    if (beta != 0.0f) v += beta * math::load_float<D>(c[i]);
    c[i] = math::store_float<D>(v + math::load_float<D>(bias[i % n]));
  }
}

template <class Fn>
cudaError_t with_activation(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Relu: return fn(math::Relu{});
    case UnaryOp::Gelu: return fn(math::Gelu{});
    case UnaryOp::GeluTanh: return fn(math::GeluTanh{});
    case UnaryOp::Silu: return fn(math::Silu{});
    case UnaryOp::Sigmoid: return fn(math::Sigmoid{});
    case UnaryOp::Tanh: return fn(math::Tanh{});
    case UnaryOp::Exp: return fn(math::Exp{});
    case UnaryOp::Log: return fn(math::Log{});
    case UnaryOp::Sqrt: return fn(math::Sqrt{});
    case UnaryOp::Rsqrt: return fn(math::Rsqrt{});
    case UnaryOp::GeluDerivative: return fn(math::GeluDerivative{});
    case UnaryOp::GeluTanhDerivative: return fn(math::GeluTanhDerivative{});
  }
  return cudaErrorInvalidValue;
}

template <bool Backward>
cudaError_t launch_activation(UnaryOp op, const void* x, const void* dy, void* out, DType type,
                              int64_t count, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_activation(op, [&](auto act) {
      return enqueue(activation_kernel<D, decltype(act), Backward>, st.blocks, launch,
                     static_cast<const Elem<D>*>(x), static_cast<const Elem<D>*>(dy),
                     static_cast<Elem<D>*>(out), count, st.length);
    });
  });
}

template <int D, BinaryOp Op>
cudaError_t launch_binary_op(const void* a, const void* b, void* out, int64_t count,
                             int64_t b_count, const LaunchConfig& launch) {
  const Stretches st = plan_stretches(count, launch);
  const auto kernel = b_count == count ? binary_kernel<D, Op, false> : binary_kernel<D, Op, true>;
  return enqueue(kernel, st.blocks, launch, static_cast<const Elem<D>*>(a),
                 static_cast<const Elem<D>*>(b), static_cast<Elem<D>*>(out), count, b_count,
                 st.length);
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, const void* x, void* y, DType type, int64_t count,
                         const LaunchConfig& launch) {
  return launch_activation<false>(op, x, nullptr, y, type, count, launch);
}

cudaError_t launch_unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                                  int64_t count, const LaunchConfig& launch) {
  return launch_activation<true>(op, x, dy, dx, type, count, launch);
}

cudaError_t launch_binary(BinaryOp op, const void* a, const void* b, void* out, DType type,
                          int64_t count, int64_t b_count, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    switch (op) {
      case BinaryOp::Add:
        return launch_binary_op<D, BinaryOp::Add>(a, b, out, count, b_count, launch);
      case BinaryOp::Sub:
        return launch_binary_op<D, BinaryOp::Sub>(a, b, out, count, b_count, launch);
      case BinaryOp::Mul:
        return launch_binary_op<D, BinaryOp::Mul>(a, b, out, count, b_count, launch);
      case BinaryOp::Div:
        return launch_binary_op<D, BinaryOp::Div>(a, b, out, count, b_count, launch);
      case BinaryOp::Equal:
        return launch_binary_op<D, BinaryOp::Equal>(a, b, out, count, b_count, launch);
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t launch_affine(const void* x, void* y, DType type, int64_t count, float scale,
                          float shift, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(affine_kernel<D>, st.blocks, launch, static_cast<const Elem<D>*>(x),
                   static_cast<Elem<D>*>(y), count, st.length, scale, shift);
  });
}

cudaError_t launch_add_into(void* dst, DType dst_type, const void* src, DType src_type,
                            int64_t count, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(dst_type, [&](auto dst_tag) {
    constexpr int D = decltype(dst_tag)::value;
    return visit_floating(src_type, [&](auto src_tag) {
      constexpr int S = decltype(src_tag)::value;
      return enqueue(add_into_kernel<D, S>, st.blocks, launch, static_cast<Elem<D>*>(dst),
                     static_cast<const Elem<S>*>(src), count, st.length);
    });
  });
}

cudaError_t launch_scale_matrices(void* c, DType type, int64_t batch, int64_t elements,
                                  int64_t stride, float beta, const LaunchConfig& launch) {
  if (batch <= 0 || elements <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(scale_matrices_kernel<D>, grid_blocks(batch * elements, launch), launch,
                   static_cast<Elem<D>*>(c), batch, elements, stride, beta);
  });
}

cudaError_t launch_bias_epilogue(void* c, DType type, const float* product, float beta,
                                 const void* bias, int64_t m, int64_t n,
                                 const LaunchConfig& launch) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(bias_epilogue_kernel<D>, grid_blocks(m * n, launch), launch,
                   static_cast<Elem<D>*>(c), product, beta, static_cast<const Elem<D>*>(bias), m,
                   n);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
