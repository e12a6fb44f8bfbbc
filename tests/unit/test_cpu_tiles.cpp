// test_cpu_tiles.cpp -- the CPU backend's element-wise loops, which convert
// 16-bit data in runs (float_tiles.h) rather than element by element, give
// exactly the bits of the per-element definition: y = store_float(f(
// load_float(x))) with kernels/math/convert.h's scalar conversions. Every
// 16-bit pattern is an input (subnormals, infinities, NaN payloads), run
// lengths straddle the tile size and the thread split, and the FTZ/DAZ modes
// that hosts set for speed change nothing the definition does not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "math/activations.h"
#include "math/amp.h"
#include "math/convert.h"
#include "support.h"
#include "unit/backend_caps.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace {

using ampx::impl::BinaryOp;
using ampx::impl::DType;
using ampx::impl::UnaryOp;
using Bytes = std::vector<uint8_t>;

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

std::unique_ptr<ampx::impl::Backend> cpu_backend(int threads) {
  ampx::impl::BackendOptions options;
  options.device_type = AMPX_DEVICE_CPU;
  options.num_threads = threads;
  return ampx::impl::create_backend(options);
}

size_t width(DType t) { return ampx::impl::dtype_size(t); }

float load(DType t, const Bytes& b, size_t i) {
  uint32_t bits = 0;
  std::memcpy(&bits, &b[i * width(t)], width(t));
  switch (t) {
    case DType::F16:
      return ampx::impl::math::half_to_float(static_cast<uint16_t>(bits));
    case DType::BF16:
      return ampx::impl::math::bf16_to_float(static_cast<uint16_t>(bits));
    default:
      return ampx::impl::math::bits_float(bits);
  }
}

void store(DType t, Bytes& b, size_t i, float v) {
  uint32_t bits = 0;
  switch (t) {
    case DType::F16:
      bits = ampx::impl::math::float_to_half(v);
      break;
    case DType::BF16:
      bits = ampx::impl::math::float_to_bf16(v);
      break;
    default:
      bits = ampx::impl::math::float_bits(v);
      break;
  }
  std::memcpy(&b[i * width(t)], &bits, width(t));
}

// Whether out has want's bits, element by element, a NaN matching any NaN:
// where both operands of an addition or product are NaN, which payload
// survives depends on the order the compiler gives the operands, in the
// reference as in the library. Names the first difference.
bool same_values(DType t, const Bytes& out, const Bytes& want) {
  for (size_t i = 0; i < out.size() / width(t); ++i) {
    const float a = load(t, out, i), b = load(t, want, i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::memcmp(&out[i * width(t)], &want[i * width(t)], width(t)) != 0) {
      MESSAGE("element " << i << ": got " << a << ", want " << b);
      return false;
    }
  }
  return true;
}

// n elements of type t: for 16-bit types every pattern in turn (a shuffled
// order when `seed` is not 0), for f32 patterns spread over every exponent
// with the special values among them.
Bytes patterns(DType t, size_t n, uint32_t seed) {
  Bytes b(n * width(t));
  std::mt19937 rng(seed);
  if (width(t) == 2) {
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    if (seed != 0) std::shuffle(all.begin(), all.end(), rng);
    for (size_t i = 0; i < n; ++i) std::memcpy(&b[2 * i], &all[i % all.size()], 2);
  } else {
    const uint32_t specials[] = {0u,          0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x33000000u, 0x477ff000u};
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = i < 10 ? specials[i] : static_cast<uint32_t>(rng());
      std::memcpy(&b[4 * i], &bits, 4);
    }
  }
  return b;
}

float act_forward(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::Relu:
      return ampx::impl::math::Relu::forward(x);
    case UnaryOp::Gelu:
      return ampx::impl::math::Gelu::forward(x);
    case UnaryOp::GeluTanh:
      return ampx::impl::math::GeluTanh::forward(x);
    case UnaryOp::Silu:
      return ampx::impl::math::Silu::forward(x);
    case UnaryOp::Sigmoid:
      return ampx::impl::math::Sigmoid::forward(x);
    case UnaryOp::Tanh:
      return ampx::impl::math::Tanh::forward(x);
    case UnaryOp::Exp:
      return ampx::impl::math::Exp::forward(x);
    case UnaryOp::Log:
      return ampx::impl::math::Log::forward(x);
    case UnaryOp::Sqrt:
      return ampx::impl::math::Sqrt::forward(x);
    case UnaryOp::Rsqrt:
      return ampx::impl::math::Rsqrt::forward(x);
    case UnaryOp::GeluDerivative:
      return ampx::impl::math::GeluDerivative::forward(x);
    case UnaryOp::GeluTanhDerivative:
      return ampx::impl::math::GeluTanhDerivative::forward(x);
  }
  return x;
}

float act_backward(UnaryOp op, float x, float dy) {
  switch (op) {
    case UnaryOp::Relu:
      return ampx::impl::math::Relu::backward(x, dy);
    case UnaryOp::Gelu:
      return ampx::impl::math::Gelu::backward(x, dy);
    case UnaryOp::GeluTanh:
      return ampx::impl::math::GeluTanh::backward(x, dy);
    case UnaryOp::Silu:
      return ampx::impl::math::Silu::backward(x, dy);
    case UnaryOp::Sigmoid:
      return ampx::impl::math::Sigmoid::backward(x, dy);
    case UnaryOp::Tanh:
      return ampx::impl::math::Tanh::backward(x, dy);
    case UnaryOp::Exp:
      return ampx::impl::math::Exp::backward(x, dy);
    case UnaryOp::Log:
      return ampx::impl::math::Log::backward(x, dy);
    case UnaryOp::Sqrt:
      return ampx::impl::math::Sqrt::backward(x, dy);
    case UnaryOp::Rsqrt:
      return ampx::impl::math::Rsqrt::backward(x, dy);
    case UnaryOp::GeluDerivative:
      return ampx::impl::math::GeluDerivative::backward(x, dy);
    case UnaryOp::GeluTanhDerivative:
      return ampx::impl::math::GeluTanhDerivative::backward(x, dy);
  }
  return dy;
}

const UnaryOp kUnaryOps[] = {UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Silu,
                             UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Exp, UnaryOp::Log,
                             UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::GeluDerivative,
                             UnaryOp::GeluTanhDerivative};

// 65536 + 1000: every 16-bit pattern, past two threads' split of the range
// and not a multiple of the tile.
constexpr size_t kCount = 66536;

void check_unary(ampx::impl::Backend& backend) {
  for (DType t : kFloatTypes) {
    const Bytes x = patterns(t, kCount, 0);
    const Bytes dy = patterns(t, kCount, 7);
    for (UnaryOp op : kUnaryOps) {
      CAPTURE(std::string(ampx::impl::dtype_name(t)));
      CAPTURE(static_cast<int>(op));
      Bytes want_y(x.size()), want_dx(x.size());
      for (size_t i = 0; i < kCount; ++i) {
        store(t, want_y, i, act_forward(op, load(t, x, i)));
        store(t, want_dx, i, act_backward(op, load(t, x, i), load(t, dy, i)));
      }
      Bytes y(x.size()), dx(x.size());
      ampx_test::nn_of(backend).unary(op, x.data(), y.data(), t, kCount);
      ampx_test::nn_of(backend).unary_backward(op, x.data(), dy.data(), dx.data(), t, kCount);
      CHECK(same_values(t, y, want_y));
      CHECK(same_values(t, dx, want_dx));
      Bytes in_place = x;
      ampx_test::nn_of(backend).unary(op, in_place.data(), in_place.data(), t, kCount);
      CHECK(same_values(t, in_place, want_y));
    }
  }
}

}  // namespace

TEST_CASE("cpu tiles: activations and their derivatives equal the per-element definition") {
  check_unary(*cpu_backend(2));
}

TEST_CASE("cpu tiles: binary ops, broadcast rows wider than a tile, affine") {
  auto backend = cpu_backend(2);
  for (DType t : kFloatTypes) {
    CAPTURE(std::string(ampx::impl::dtype_name(t)));
    const Bytes a = patterns(t, kCount, 0);
    // b_count 1 (a scalar), 4, 8317 (rows straddling tiles) and kCount (no
    // broadcast); each divides kCount = 66536 = 8 * 8317.
    for (size_t b_count : {size_t{1}, size_t{4}, size_t{8317}, kCount}) {
      CAPTURE(b_count);
      const Bytes b = patterns(t, b_count, 3);
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul}) {
        Bytes want(a.size());
        for (size_t i = 0; i < kCount; ++i) {
          const float u = load(t, a, i), v = load(t, b, i % b_count);
          store(t, want, i, op == BinaryOp::Add ? u + v : op == BinaryOp::Sub ? u - v : u * v);
        }
        Bytes out(a.size());
        ampx_test::nn_of(backend).binary(op, a.data(), b.data(), out.data(), t,
                                         static_cast<int64_t>(kCount),
                                         static_cast<int64_t>(b_count));
        CHECK(same_values(t, out, want));
      }
    }
    Bytes want(a.size());
    for (size_t i = 0; i < kCount; ++i) store(t, want, i, load(t, a, i) * 0.375f + -1.5f);
    Bytes out(a.size());
    ampx_test::nn_of(backend).affine(a.data(), out.data(), t, static_cast<int64_t>(kCount), 0.375f,
                                     -1.5f);
    CHECK(same_values(t, out, want));
  }
}

TEST_CASE("cpu tiles: add_into between every pair of floating types") {
  auto backend = cpu_backend(2);
  for (DType dst_type : kFloatTypes) {
    for (DType src_type : kFloatTypes) {
      CAPTURE(std::string(ampx::impl::dtype_name(dst_type)));
      CAPTURE(std::string(ampx::impl::dtype_name(src_type)));
      Bytes dst = patterns(dst_type, kCount, 5);
      const Bytes src = patterns(src_type, kCount, 9);
      Bytes want = dst;
      for (size_t i = 0; i < kCount; ++i)
        store(dst_type, want, i, load(dst_type, dst, i) + load(src_type, src, i));
      ampx_test::nn_of(backend).add_into(dst.data(), dst_type, src.data(), src_type,
                                         static_cast<int64_t>(kCount));
      CHECK(same_values(dst_type, dst, want));
    }
  }
}

TEST_CASE("cpu tiles: row and whole sums accumulate each element's exact value in order") {
  auto backend = cpu_backend(2);
  const size_t rows = 7, cols = 2500;
  for (DType t : kFloatTypes) {
    for (DType out_type : kFloatTypes) {
      CAPTURE(std::string(ampx::impl::dtype_name(t)));
      CAPTURE(std::string(ampx::impl::dtype_name(out_type)));
      // Finite values only: the sums' order of NaN and inf is not the point.
      std::mt19937 rng(11);
      std::normal_distribution<float> normal(0.0f, 100.0f);
      Bytes x(rows * cols * width(t));
      for (size_t i = 0; i < rows * cols; ++i) store(t, x, i, normal(rng));
      Bytes want(cols * width(out_type));
      double total = 0.0;
      for (size_t c = 0; c < cols; ++c) {
        double acc = 0.0;
        for (size_t r = 0; r < rows; ++r) acc += load(t, x, r * cols + c);
        store(out_type, want, c, static_cast<float>(acc));
      }
      // sum_all adds fixed blocks of 2^15 elements, then the blocks; inside
      // a block element j goes to partial sum j % 8, and the eight partial
      // sums are added in order. All 17500 elements are one block here.
      double lanes[8] = {};
      for (size_t i = 0; i < rows * cols; ++i) lanes[i % 8] += load(t, x, i);
      for (double lane : lanes) total += lane;
      Bytes out(want.size());
      ampx_test::nn_of(backend).sum_rows(x.data(), t, rows, cols, out.data(), out_type);
      CHECK(same_values(out_type, out, want));
      float sum = 0.0f;
      ampx_test::nn_of(backend).sum_all(x.data(), t, static_cast<int64_t>(rows * cols), &sum);
      CHECK(sum == static_cast<float>(total));
    }
  }
}

TEST_CASE("cpu tiles: unscaling and the non-finite check see every pattern") {
  auto backend = cpu_backend(2);
  for (DType in_type : kFloatTypes) {
    for (DType out_type : kFloatTypes) {
      CAPTURE(std::string(ampx::impl::dtype_name(in_type)));
      CAPTURE(std::string(ampx::impl::dtype_name(out_type)));
      Bytes in = patterns(in_type, kCount, 0);
      const float factor = 1024.0f;
      const float m = ampx::impl::math::reciprocal_scale(factor);
      Bytes want(kCount * width(out_type));
      bool want_found = false;
      for (size_t i = 0; i < kCount; ++i) {
        const float v = load(in_type, in, i) * m;
        want_found |= !ampx::impl::math::is_finite(v);
        store(out_type, want, i, v);
      }
      REQUIRE(want_found);
      Bytes out(want.size());
      float found_inf = 0.0f;
      ampx_test::amp_of(backend).multi_tensor_scale(
          {{in.data(), in_type, static_cast<int64_t>(kCount)}},
          {{out.data(), out_type, static_cast<int64_t>(kCount)}}, &factor, true, &found_inf);
      CHECK(same_values(out_type, out, want));
      CHECK(found_inf == 1.0f);

      // Only finite values (below 1e15, so no square overflows): nothing
      // found, and the norm within roundings of the exact one.
      std::vector<float> finite;
      for (size_t i = 0; i < kCount; ++i) {
        const float v = load(in_type, in, i);
        if (std::isfinite(v) && std::fabs(v) < 1e15f) finite.push_back(v);
      }
      Bytes clean(finite.size() * width(in_type));
      double squares = 0.0;
      for (size_t i = 0; i < finite.size(); ++i) {
        store(in_type, clean, i, finite[i]);
        squares += static_cast<double>(finite[i]) * finite[i];
      }
      found_inf = 0.0f;
      ampx_test::amp_of(backend).multi_tensor_scale(
          {{clean.data(), in_type, static_cast<int64_t>(finite.size())}}, {}, &factor, true,
          &found_inf);
      CHECK(found_inf == 0.0f);
      float norm = 0.0f;
      ampx_test::amp_of(backend).multi_tensor_norm(
          {{clean.data(), in_type, static_cast<int64_t>(finite.size())}}, ampx::impl::NormType::L2,
          &norm);
      // Chunks summed in double, then together: the order differs from the
      // reference's by far less than the final rounding to float.
      const float want_norm = static_cast<float>(std::sqrt(squares));
      CHECK(std::fabs(norm - want_norm) <= std::ldexp(want_norm, -22));
    }
  }
}

#if defined(__x86_64__)
TEST_CASE("cpu tiles: FTZ and DAZ change no conversion, only what the float math itself does") {
  // One thread, so the whole loop runs under this thread's MXCSR, which the
  // reference is computed under too.
  struct CsrGuard {
    unsigned saved = _mm_getcsr();
    ~CsrGuard() { _mm_setcsr(saved); }
  } guard;
  _mm_setcsr(guard.saved | 0x8040u);
  check_unary(*cpu_backend(1));
}
#endif
