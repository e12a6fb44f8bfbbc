// test_convert.cpp -- element conversions (kernels/math/convert.h) and their
// bulk, vectorised use on the CPU (src/core/convert_bulk.h).
//
// The references here share no code with convert.h: a 16-bit float is
// decoded from its fields with std::ldexp, and the correctly rounded 16-bit
// float of a value is found by searching the sorted table of all finite
// values in double precision and breaking ties to even by hand. Integers are
// rounded with integer arithmetic. Every vectorised path is then required to
// match the scalar one bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/convert_bulk.h"
#include "core/error.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace {

using ampx::impl::CpuIsa;
using ampx::impl::DType;

constexpr DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};
// Every code path of this architecture, in the order support implies.
#if defined(__aarch64__)
constexpr CpuIsa kAllIsas[] = {CpuIsa::Scalar, CpuIsa::Neon};
#else
constexpr CpuIsa kAllIsas[] = {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512};
#endif

std::string hex(uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 15]);
    v >>= 4;
  } while (v);
  return "0x" + s;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// doctest would print a const char* as a pointer.
std::string name(CpuIsa isa) { return ampx::impl::cpu_isa_name(isa); }

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : kAllIsas)
    if (ampx::impl::cpu_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// ---- the independent reference for 16-bit floats ---------------------------

// A binary format with 1 sign bit, `exp_bits` exponent bits and `man_bits`
// stored mantissa bits (IEEE layout).
struct Format {
  const char* name;
  int exp_bits;
  int man_bits;
  std::vector<double> finite;  // all non-negative finite values, by bit pattern, then 2^(emax+1)

  Format(const char* n, int e, int m) : name(n), exp_bits(e), man_bits(m) {
    const uint32_t inf = infinity_bits();
    for (uint32_t b = 0; b < inf; ++b) finite.push_back(decode(b));
    // The value the next pattern would have with an unbounded exponent: IEEE
    // rounds to infinity exactly when that is the nearest (or tied-even) one.
    finite.push_back(std::ldexp(1.0, bias() + 1));
  }

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t infinity_bits() const { return ((1u << exp_bits) - 1u) << man_bits; }
  uint32_t quiet_bit() const { return 1u << (man_bits - 1); }

  double decode(uint32_t bits) const {
    const uint32_t e = (bits >> man_bits) & ((1u << exp_bits) - 1u);
    const uint32_t m = bits & ((1u << man_bits) - 1u);
    double magnitude;
    if (e == (1u << exp_bits) - 1u)
      magnitude = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else if (e == 0)
      magnitude = std::ldexp(static_cast<double>(m), 1 - bias() - man_bits);
    else
      magnitude = std::ldexp(static_cast<double>(m + (1u << man_bits)), static_cast<int>(e) - bias() - man_bits);
    return (bits & sign_bit()) ? -magnitude : magnitude;
  }

  // Round to nearest, ties to even; `v` must not be NaN.
  uint16_t round(double v) const {
    const uint32_t sign = std::signbit(v) ? sign_bit() : 0u;
    const double a = std::fabs(v);
    if (a >= finite.back()) return static_cast<uint16_t>(sign | infinity_bits());
    const size_t k = static_cast<size_t>(std::lower_bound(finite.begin(), finite.end(), a) - finite.begin());
    uint32_t r;
    if (finite[k] == a) {
      r = static_cast<uint32_t>(k);
    } else {
      const size_t lo = k - 1;
      // Exact: neighbours have few significant bits and lie in one binade.
      const double mid = (finite[lo] + finite[k]) / 2;
      if (a < mid) r = static_cast<uint32_t>(lo);
      else if (a > mid) r = static_cast<uint32_t>(k);
      else r = static_cast<uint32_t>(lo % 2 == 0 ? lo : k);  // even mantissa = even pattern
    }
    return static_cast<uint16_t>(sign | r);
  }
};

const Format& half_format() {
  static const Format f("f16", 5, 10);
  return f;
}
const Format& bf16_format() {
  static const Format f("bf16", 8, 7);
  return f;
}

// What a float becomes: rounded, or for NaN the documented quiet NaN that
// keeps the sign and the top payload bits (the F16C behaviour).
uint16_t reference_narrow(const Format& fmt, float f) {
  if (std::isnan(f)) {
    const uint32_t u = bits_of(f);
    const uint32_t sign = (u >> 31) ? fmt.sign_bit() : 0u;
    const uint32_t payload = (u & 0x7fffffu) >> (23 - fmt.man_bits);
    return static_cast<uint16_t>(sign | fmt.infinity_bits() | fmt.quiet_bit() | payload);
  }
  return fmt.round(static_cast<double>(f));
}

// The integer `v` rounded to `p` significant bits, ties to even, with integer
// arithmetic only (so no intermediate rounding can hide a double rounding).
double round_integer(int64_t v, int p) {
  const bool negative = v < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int length = 0;
  while (length < 64 && (magnitude >> length) != 0) ++length;
  double r;
  if (length <= p) {
    r = static_cast<double>(magnitude);
  } else {
    const int s = length - p;
    uint64_t q = magnitude >> s;
    const uint64_t rest = magnitude & ((uint64_t{1} << s) - 1);
    const uint64_t half = uint64_t{1} << (s - 1);
    if (rest > half || (rest == half && (q & 1))) ++q;
    r = std::ldexp(static_cast<double>(q), s);
  }
  return negative ? -r : r;
}

// ---- helpers around convert_bulk ------------------------------------------

template <class T>
std::vector<unsigned char> as_bytes(const std::vector<T>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <class T>
std::vector<T> from_bytes(const std::vector<unsigned char>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

template <class Out, class In>
std::vector<Out> convert(CpuIsa isa, DType dst, const std::vector<In>& in, DType src) {
  REQUIRE(ampx::impl::dtype_size(src) == sizeof(In));
  REQUIRE(ampx::impl::dtype_size(dst) == sizeof(Out));
  std::vector<Out> out(in.size());
  ampx::impl::convert_bulk_with(isa, out.data(), dst, in.data(), src,
                                static_cast<int64_t>(in.size()));
  return out;
}

std::vector<uint16_t> all_16bit_patterns() {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  return all;
}

// One million floats from a fixed seed: uniform bit patterns (every exponent,
// subnormals, infinities and NaNs), the exponents where f16 rounds, the
// subnormal floats, and exact ties of both formats.
const std::vector<float>& random_floats() {
  static const std::vector<float> values = [] {
    std::mt19937_64 rng(0x5eed2024u);
    std::vector<float> v(1000000);
    for (float& f : v) {
      const uint64_t r = rng();
      uint32_t bits = static_cast<uint32_t>(r);
      const uint32_t sign = bits & 0x80000000u;
      const uint32_t mantissa = bits & 0x7fffffu;
      const uint32_t f16_exponent = 98u + static_cast<uint32_t>((r >> 40) % 48u);  // 2^-29 .. 2^18
      switch ((r >> 32) % 6u) {
        case 0: case 1: break;
        case 2: bits = sign | (f16_exponent << 23) | mantissa; break;
        case 3: bits = sign | mantissa; break;  // float subnormals and zeros
        case 4: bits = sign | (f16_exponent << 23) | (mantissa & ~0x1fffu) | 0x1000u; break;  // f16 tie
        case 5: bits = (bits & ~0xffffu) | 0x8000u; break;  // bf16 tie
      }
      f = float_of(bits);
    }
    return v;
  }();
  return values;
}

// Floats on every boundary the rounding has, with the result each format must
// give, written out by hand.
struct Boundary {
  float value;
  uint16_t f16;
  uint16_t bf16;
};

std::vector<Boundary> boundary_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  const float tiny = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  return {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {1.0f, 0x3c00, 0x3f80},
      {-2.0f, 0xc000, 0xc000},
      // f16 ties: 1 + 2^-11 goes down to the even 1.0, 1 + 3*2^-11 up to the even 1 + 2^-9.
      {1.0f + std::ldexp(1.0f, -11), 0x3c00, 0x3f80},
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02, 0x3f80},
      {-(1.0f + 3 * std::ldexp(1.0f, -11)), 0xbc02, 0xbf80},
      {std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f), 0x3c01, 0x3f80},
      // bf16 ties: 1 + 2^-8 down to 1.0, 1 + 3*2^-8 up to 1 + 2^-6.
      {1.0f + std::ldexp(1.0f, -8), 0x3c04, 0x3f80},
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3c0c, 0x3f82},
      {std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f), 0x3c04, 0x3f81},
      // f16 largest finite, and around the overflow threshold 65520.
      {65504.0f, 0x7bff, 0x4780},
      {std::nextafter(65520.0f, 0.0f), 0x7bff, 0x4780},
      {65520.0f, 0x7c00, 0x4780},
      {std::nextafter(65520.0f, inf), 0x7c00, 0x4780},
      {-65520.0f, 0xfc00, 0xc780},
      {65536.0f, 0x7c00, 0x4780},
      // bf16 largest finite (0x7f7f) and its overflow threshold (2 - 2^-8) * 2^127.
      {float_of(0x7f7f0000u), 0x7c00, 0x7f7f},
      {float_of(0x7f7f7fffu), 0x7c00, 0x7f7f},
      {float_of(0x7f7f8000u), 0x7c00, 0x7f80},
      {float_of(0xff7f8000u), 0xfc00, 0xff80},
      {std::numeric_limits<float>::max(), 0x7c00, 0x7f80},
      // f16 subnormals: the smallest, half of it (a tie with zero), just
      // above and below that half, subnormal ties, and the largest subnormal
      // tied with the smallest normal.
      {tiny, 0x0001, 0x3380},
      {-tiny, 0x8001, 0xb380},
      {tiny / 2, 0x0000, 0x3300},
      {-tiny / 2, 0x8000, 0xb300},
      {std::nextafter(tiny / 2, 1.0f), 0x0001, 0x3300},
      {std::nextafter(tiny / 2, 0.0f), 0x0000, 0x3300},
      {1.5f * tiny, 0x0002, 0x33c0},
      {2.5f * tiny, 0x0002, 0x3420},
      {1023.5f * tiny, 0x0400, 0x3880},
      {std::ldexp(1.0f, -14), 0x0400, 0x3880},
      // Float subnormals: zero in f16; bf16 keeps its own subnormals.
      {float_of(0x00000001u), 0x0000, 0x0000},
      {float_of(0x00008000u), 0x0000, 0x0000},
      {float_of(0x00018000u), 0x0000, 0x0002},
      {float_of(0x00010000u), 0x0000, 0x0001},
      {float_of(0x807fffffu), 0x8000, 0x8080},
      {inf, 0x7c00, 0x7f80},
      {-inf, 0xfc00, 0xff80},
  };
}

// Runs `fn` and returns the ampx status it threw, or AMPX_OK.
template <class Fn>
ampx_status status_of(Fn&& fn) {
  try {
    fn();
  } catch (const ampx::impl::StatusError& e) {
    return e.status();
  }
  return AMPX_OK;
}

}  // namespace

TEST_CASE("convert: the references agree with known values") {
  const Format& h = half_format();
  const Format& b = bf16_format();
  CHECK(h.decode(0x3c00) == 1.0);
  CHECK(h.decode(0x7bff) == 65504.0);
  CHECK(h.decode(0x0400) == std::ldexp(1.0, -14));
  CHECK(h.decode(0x0001) == std::ldexp(1.0, -24));
  CHECK(h.decode(0xc000) == -2.0);
  CHECK(std::isinf(h.decode(0x7c00)));
  CHECK(std::isnan(h.decode(0x7c01)));
  CHECK(b.decode(0x3f80) == 1.0);
  CHECK(b.decode(0x7f7f) == std::ldexp(255.0, 120));
  CHECK(b.decode(0x0001) == std::ldexp(1.0, -133));
  CHECK(h.finite.size() == 0x7c01);
  CHECK(b.finite.size() == 0x7f81);
  CHECK(std::is_sorted(h.finite.begin(), h.finite.end()));
  CHECK(std::is_sorted(b.finite.begin(), b.finite.end()));
  CHECK(round_integer(16777217, 24) == 16777216.0);
  CHECK(round_integer(16777219, 24) == 16777220.0);
  CHECK(round_integer(-257, 8) == -256.0);
  CHECK(round_integer(INT64_MIN, 24) == -std::ldexp(1.0, 63));
  for (const Boundary& c : boundary_floats()) {
    INFO("value ", c.value);
    CHECK(h.round(c.value) == c.f16);
    CHECK(b.round(c.value) == c.bf16);
  }
}

TEST_CASE("convert: every f16 and bf16 bit pattern widens exactly and narrows back unchanged") {
  const std::vector<uint16_t> all = all_16bit_patterns();
  for (CpuIsa isa : supported_isas()) {
    for (const Format* fmt : {&half_format(), &bf16_format()}) {
      const DType type = fmt == &half_format() ? DType::F16 : DType::BF16;
      INFO(name(isa), " ", fmt->name);
      const std::vector<float> wide = convert<float>(isa, DType::F32, all, type);
      const std::vector<uint16_t> back = convert<uint16_t>(isa, type, wide, DType::F32);
      int64_t wrong_value = 0, wrong_nan = 0, wrong_round_trip = 0;
      for (uint32_t i = 0; i < 65536; ++i) {
        const double expected = fmt->decode(i);
        const float got = wide[i];
        const bool sign = (i & fmt->sign_bit()) != 0;
        if (std::isnan(expected)) {
          wrong_nan += !std::isnan(got) || std::signbit(got) != sign;
          // A signalling NaN comes back quietened, its payload otherwise kept.
          wrong_round_trip += back[i] != (i | fmt->quiet_bit());
        } else {
          wrong_value += static_cast<double>(got) != expected || std::signbit(got) != sign;
          wrong_round_trip += back[i] != i;
        }
      }
      CHECK(wrong_value == 0);
      CHECK(wrong_nan == 0);
      CHECK(wrong_round_trip == 0);
    }
  }
}

TEST_CASE("convert: f32 to f16 and bf16 rounds to nearest even on every boundary") {
  std::vector<float> values;
  for (const Boundary& c : boundary_floats()) values.push_back(c.value);
  // NaNs: quiet and signalling, both signs, payload bits above and below the
  // ones the 16-bit formats keep.
  const std::vector<uint32_t> nans = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                      0x7fa5a5a5u, 0xffffffffu, 0x7f802000u, 0x7f810000u};
  for (uint32_t n : nans) values.push_back(float_of(n));
  for (CpuIsa isa : supported_isas()) {
    INFO(name(isa));
    const std::vector<uint16_t> h = convert<uint16_t>(isa, DType::F16, values, DType::F32);
    const std::vector<uint16_t> b = convert<uint16_t>(isa, DType::BF16, values, DType::F32);
    const std::vector<Boundary> cases = boundary_floats();
    for (size_t i = 0; i < cases.size(); ++i) {
      INFO("value ", cases[i].value, " (float bits ", hex(bits_of(cases[i].value)), ")");
      CHECK(h[i] == cases[i].f16);
      CHECK(b[i] == cases[i].bf16);
    }
    for (size_t i = cases.size(); i < values.size(); ++i) {
      INFO("NaN bits ", hex(bits_of(values[i])));
      CHECK(h[i] == reference_narrow(half_format(), values[i]));
      CHECK(b[i] == reference_narrow(bf16_format(), values[i]));
    }
  }
  // Spot checks of the documented NaN rule itself.
  CHECK(reference_narrow(half_format(), float_of(0x7f800001u)) == 0x7e00);
  CHECK(reference_narrow(half_format(), float_of(0xff802000u)) == 0xfe01);
  CHECK(reference_narrow(half_format(), float_of(0x7fa02000u)) == 0x7f01);
  CHECK(reference_narrow(bf16_format(), float_of(0x7f810000u)) == 0x7fc1);
}

TEST_CASE("convert: one million random floats round like the reference") {
  const std::vector<float>& values = random_floats();
  std::vector<uint16_t> want_h(values.size()), want_b(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    want_h[i] = reference_narrow(half_format(), values[i]);
    want_b[i] = reference_narrow(bf16_format(), values[i]);
  }
  for (CpuIsa isa : supported_isas()) {
    INFO(name(isa));
    const std::vector<uint16_t> h = convert<uint16_t>(isa, DType::F16, values, DType::F32);
    const std::vector<uint16_t> b = convert<uint16_t>(isa, DType::BF16, values, DType::F32);
    int64_t wrong_h = 0, wrong_b = 0;
    size_t first_h = values.size(), first_b = values.size();
    for (size_t i = 0; i < values.size(); ++i) {
      if (h[i] != want_h[i] && wrong_h++ == 0) first_h = i;
      if (b[i] != want_b[i] && wrong_b++ == 0) first_b = i;
    }
    INFO("first f16 miss at ", first_h, ", first bf16 miss at ", first_b);
    CHECK(wrong_h == 0);
    CHECK(wrong_b == 0);
  }
}

TEST_CASE("convert: doubles round once to f16 and bf16") {
  const Format& h = half_format();
  const Format& b = bf16_format();
  const auto f16 = [](double d) {
    return static_cast<uint16_t>(ampx::impl::element_bits_from_double(DType::F16, d));
  };
  const auto bf16 = [](double d) {
    return static_cast<uint16_t>(ampx::impl::element_bits_from_double(DType::BF16, d));
  };

  // Just above a tie, by less than a float can hold: rounding to float first
  // would land on the tie and then go to even, the wrong way.
  CHECK(f16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3c01);
  CHECK(f16(1.0 + 3 * std::ldexp(1.0, -11) - std::ldexp(1.0, -40)) == 0x3c01);
  CHECK(f16(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)) == 0x0001);
  CHECK(f16(-(std::ldexp(1.0, -25) + std::ldexp(1.0, -60))) == 0x8001);
  CHECK(f16(65520.0 - std::ldexp(1.0, -30)) == 0x7bff);
  CHECK(bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3f81);
  CHECK(bf16(1.0 + 3 * std::ldexp(1.0, -8) - std::ldexp(1.0, -40)) == 0x3f81);
  CHECK(bf16(std::ldexp(1.0, -134) + std::ldexp(1.0, -170)) == 0x0001);
  CHECK(bf16(std::ldexp(1.0, -134)) == 0x0000);
  CHECK(bf16(std::ldexp(1.0, -300)) == 0x0000);
  CHECK(bf16(-std::ldexp(1.0, -300)) == 0x8000);
  CHECK(bf16(std::ldexp(255.5, 120) - std::ldexp(1.0, 80)) == 0x7f7f);  // just below overflow
  CHECK(bf16(std::ldexp(255.5, 120)) == 0x7f80);
  CHECK(bf16(1e300) == 0x7f80);
  CHECK(f16(-1e300) == 0xfc00);
  CHECK(f16(std::numeric_limits<double>::infinity()) == 0x7c00);
  CHECK(std::isnan(h.decode(f16(std::nan("")))));
  CHECK(std::isnan(b.decode(bf16(-std::nan("")))));
  CHECK(std::signbit(b.decode(bf16(-std::nan("")))));

  // Random doubles next to the ties of each format, and anywhere in range.
  std::mt19937_64 rng(77);
  int64_t wrong_h = 0, wrong_b = 0, double_rounding_cases = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t r = rng();
    const Format& fmt = (r & 1) ? h : b;
    const uint32_t k = static_cast<uint32_t>((r >> 1) % (fmt.finite.size() - 1));
    double d;
    if ((r >> 40) & 1) {
      const double mid = (fmt.finite[k] + fmt.finite[k + 1]) / 2;
      const double nudge = std::ldexp(static_cast<double>((r >> 41) % 7) - 3.0, -30) * std::max(mid, 1e-300);
      d = mid + nudge * std::ldexp(1.0, -static_cast<int>((r >> 44) % 20));
    } else {
      d = fmt.finite[k] + (fmt.finite[k + 1] - fmt.finite[k]) * std::ldexp(static_cast<double>(r >> 12), -52);
    }
    if ((r >> 63) & 1) d = -d;
    if (&fmt == &h) {
      wrong_h += f16(d) != h.round(d);
      double_rounding_cases += h.round(static_cast<float>(d)) != h.round(d);
    } else {
      wrong_b += bf16(d) != b.round(d);
      double_rounding_cases += b.round(static_cast<float>(d)) != b.round(d);
    }
  }
  CHECK(wrong_h == 0);
  CHECK(wrong_b == 0);
  // Proof that the sample can tell single from double rounding.
  CHECK(double_rounding_cases > 1000);
}

TEST_CASE("convert: doubles to f32, i32 and i64") {
  const auto bits = [](DType t, double d) { return ampx::impl::element_bits_from_double(t, d); };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(bits(DType::F32, 1.0) == 0x3f800000u);
  CHECK(bits(DType::F32, 1.0 + std::ldexp(1.0, -24)) == 0x3f800000u);
  CHECK(bits(DType::F32, 1.0 + 3 * std::ldexp(1.0, -24)) == 0x3f800002u);
  CHECK(bits(DType::F32, -1e39) == 0xff800000u);
  CHECK(bits(DType::F32, std::ldexp(1.0, -150)) == 0x00000000u);
  CHECK(bits(DType::F32, std::ldexp(1.5, -150)) == 0x00000001u);
  CHECK(bits(DType::F32, -0.0) == 0x80000000u);
  CHECK(bits(DType::I32, 2.9) == 2u);
  CHECK(bits(DType::I32, -2.9) == 0xfffffffeu);  // the high 32 bits stay zero
  CHECK(bits(DType::I32, 2147483647.5) == 0x7fffffffu);
  CHECK(bits(DType::I32, 1e10) == 0x7fffffffu);
  CHECK(bits(DType::I32, -2147483648.9) == 0x80000000u);
  CHECK(bits(DType::I32, -inf) == 0x80000000u);
  CHECK(bits(DType::I32, nan) == 0u);
  CHECK(bits(DType::I64, -1.5) == 0xffffffffffffffffu);
  CHECK(bits(DType::I64, std::ldexp(1.0, 63)) == 0x7fffffffffffffffu);
  CHECK(bits(DType::I64, -std::ldexp(1.0, 63)) == 0x8000000000000000u);
  CHECK(bits(DType::I64, 1e30) == 0x7fffffffffffffffu);
  CHECK(bits(DType::I64, inf) == 0x7fffffffffffffffu);
  CHECK(bits(DType::I64, -nan) == 0u);
  CHECK(bits(DType::I64, 9007199254740993.0) == 9007199254740992u);
  CHECK(bits(DType::F16, 0.0) == 0u);
  CHECK(bits(DType::F16, 1.0) == 0x3c00u);  // the high bits stay zero
}

TEST_CASE("convert: floating to integer truncates, saturates and maps NaN to 0") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> f = {2.9f,  -2.9f, 0.5f,  -0.0f, 2147483520.0f, 2147483648.0f,
                                -2147483648.0f, -3e9f, 3e9f, inf, -inf, nan, -nan,
                                9223371487098961920.0f, 9223372036854775808.0f, -1e19f};
  const std::vector<int32_t> want32 = {2, -2, 0, 0, 2147483520, INT32_MAX, INT32_MIN, INT32_MIN,
                                       INT32_MAX, INT32_MAX, INT32_MIN, 0, 0, INT32_MAX, INT32_MAX,
                                       INT32_MIN};
  const std::vector<int64_t> want64 = {2, -2, 0, 0, 2147483520, 2147483648LL, -2147483648LL,
                                       -3000000000LL, 3000000000LL, INT64_MAX, INT64_MIN, 0, 0,
                                       9223371487098961920LL, INT64_MAX, INT64_MIN};
  // f16 and bf16 inputs: -1.5, 0.99951171875 (f16) / 0.99609375 (bf16),
  // 65504 / 2^63 (bf16), -inf, NaN, the smallest subnormal.
  const std::vector<uint16_t> h = {0xbe00, 0x3bff, 0x7bff, 0xfc00, 0x7e00, 0x0001};
  const std::vector<uint16_t> b = {0xbfc0, 0x3f7f, 0x5f00, 0xff80, 0x7fc0, 0x0001};
  const std::vector<int32_t> want_h32 = {-1, 0, 65504, INT32_MIN, 0, 0};
  const std::vector<int64_t> want_h64 = {-1, 0, 65504, INT64_MIN, 0, 0};
  const std::vector<int32_t> want_b32 = {-1, 0, INT32_MAX, INT32_MIN, 0, 0};
  const std::vector<int64_t> want_b64 = {-1, 0, INT64_MAX, INT64_MIN, 0, 0};
  for (CpuIsa isa : supported_isas()) {
    INFO(name(isa));
    CHECK(convert<int32_t>(isa, DType::I32, f, DType::F32) == want32);
    CHECK(convert<int64_t>(isa, DType::I64, f, DType::F32) == want64);
    CHECK(convert<int32_t>(isa, DType::I32, h, DType::F16) == want_h32);
    CHECK(convert<int64_t>(isa, DType::I64, h, DType::F16) == want_h64);
    CHECK(convert<int32_t>(isa, DType::I32, b, DType::BF16) == want_b32);
    CHECK(convert<int64_t>(isa, DType::I64, b, DType::BF16) == want_b64);
  }
}

TEST_CASE("convert: integers between themselves and to floating types") {
  const std::vector<int64_t> wide = {0, -5, 7, INT32_MAX, INT32_MIN, int64_t{1} << 40,
                                     -(int64_t{1} << 40), INT64_MAX, INT64_MIN, 2147483648LL,
                                     -2147483649LL};
  const std::vector<int32_t> narrow_want = {0, -5, 7, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                                            INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN};
  const std::vector<int32_t> narrow = {0, -1, INT32_MAX, INT32_MIN, 123456789};
  const std::vector<int64_t> widened_want = {0, -1, INT32_MAX, INT32_MIN, 123456789};

  // Hand-made ties and near-ties for each target precision, then random
  // integers of every length; the expected value is rounded with integer
  // arithmetic only.
  std::vector<int64_t> samples = {
      16777217, 16777219, -16777217, 257, 259, 2049, 2051, 65504, 65519, 65520, 65535, -65520,
      INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
      (int64_t{1} << 60) + (int64_t{1} << 36),       // f32 tie -> even (down)
      (int64_t{1} << 60) + (int64_t{1} << 36) + 1,   // just above it: up, though a double can't hold the +1
      (int64_t{1} << 62) + (int64_t{1} << 54) + 1,   // the same for bf16
      -((int64_t{1} << 62) + (int64_t{1} << 54) + 1)};
  std::mt19937_64 rng(4242);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t r = rng();
    const uint64_t magnitude = r >> (rng() % 64);
    int64_t v = static_cast<int64_t>(magnitude >> 1);
    if (i % 3 == 0 && magnitude > 1024) {
      // Put an exact or nudged tie below an 8- or 24-bit head.
      int length = 0;
      while ((static_cast<uint64_t>(v) >> length) != 0) ++length;
      const int p = (i % 2) ? 8 : 24;
      if (length > p + 1) {
        const int s = length - p;
        v = (v >> s << s) | (int64_t{1} << (s - 1));
        v += static_cast<int64_t>(rng() % 3) - 1;
      }
    }
    samples.push_back((r & 1) ? -v : v);
  }
  std::vector<int32_t> samples32;
  for (int64_t s : samples) samples32.push_back(static_cast<int32_t>(s));

  for (CpuIsa isa : supported_isas()) {
    INFO(name(isa));
    CHECK(convert<int32_t>(isa, DType::I32, wide, DType::I64) == narrow_want);
    CHECK(convert<int64_t>(isa, DType::I64, narrow, DType::I32) == widened_want);

    const auto check_samples = [&](const auto& in, DType src) {
      const std::vector<float> f = convert<float>(isa, DType::F32, in, src);
      const std::vector<uint16_t> h = convert<uint16_t>(isa, DType::F16, in, src);
      const std::vector<uint16_t> b = convert<uint16_t>(isa, DType::BF16, in, src);
      int64_t wrong_f = 0, wrong_h = 0, wrong_b = 0;
      int64_t first_f = -1, first_b = -1;
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t v = static_cast<int64_t>(in[i]);
        if (static_cast<double>(f[i]) != round_integer(v, 24) && wrong_f++ == 0) first_f = v;
        wrong_h += h[i] != half_format().round(round_integer(v, 11));
        if (b[i] != bf16_format().round(round_integer(v, 8)) && wrong_b++ == 0) first_b = v;
      }
      INFO("source ", ampx::impl::dtype_size(src) * 8, "-bit; first f32 miss ", first_f,
           ", first bf16 miss ", first_b);
      CHECK(wrong_f == 0);
      CHECK(wrong_h == 0);
      CHECK(wrong_b == 0);
    };
    check_samples(samples, DType::I64);
    check_samples(samples32, DType::I32);
  }
}

TEST_CASE("convert: all 25 type pairs carry values every type can hold") {
  // Each value is exact in every type, so any pair must reproduce it; a
  // mixed-up dispatch or element size would not.
  const std::vector<double> values = {0, 1, -2, 3, 100, -128, 255, 2048, -4096, 7};
  const auto write = [&](DType t) {
    std::vector<unsigned char> bytes(values.size() * ampx::impl::dtype_size(t));
    for (size_t i = 0; i < values.size(); ++i) {
      const uint64_t e = ampx::impl::element_bits_from_double(t, values[i]);
      std::memcpy(bytes.data() + i * ampx::impl::dtype_size(t), &e, ampx::impl::dtype_size(t));
    }
    return bytes;
  };
  const auto read = [&](DType t, const std::vector<unsigned char>& bytes) {
    std::vector<double> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const unsigned char* p = bytes.data() + i * ampx::impl::dtype_size(t);
      if (t == DType::F32) { float v; std::memcpy(&v, p, 4); out[i] = v; }
      if (t == DType::I32) { int32_t v; std::memcpy(&v, p, 4); out[i] = v; }
      if (t == DType::I64) { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<double>(v); }
      if (t == DType::F16 || t == DType::BF16) {
        uint16_t v;
        std::memcpy(&v, p, 2);
        out[i] = (t == DType::F16 ? half_format() : bf16_format()).decode(v);
      }
    }
    return out;
  };
  for (CpuIsa isa : supported_isas()) {
    for (DType src : kAllTypes) {
      for (DType dst : kAllTypes) {
        INFO(name(isa), " from type ", static_cast<int>(src), " to type ",
             static_cast<int>(dst));
        const std::vector<unsigned char> in = write(src);
        std::vector<unsigned char> out(values.size() * ampx::impl::dtype_size(dst), 0xee);
        ampx::impl::convert_bulk_with(isa, out.data(), dst, in.data(), src,
                                      static_cast<int64_t>(values.size()));
        CHECK(read(dst, out) == values);
      }
    }
  }
  // Equal types copy bits, NaN payloads included.
  const std::vector<uint32_t> nan_bits = {0x7f800001u, 0xffc12345u};
  std::vector<uint32_t> copy(2);
  ampx::impl::convert_bulk(copy.data(), DType::F32, nan_bits.data(), DType::F32, 2);
  CHECK(copy == nan_bits);
}

TEST_CASE("convert: every supported ISA matches the scalar path bit for bit") {
  // Inputs for each source type: every pattern of the 16-bit types, the
  // random and boundary floats, and random integers.
  std::vector<float> floats = random_floats();
  for (const Boundary& c : boundary_floats()) floats.push_back(c.value);
  std::vector<int64_t> i64(100000);
  std::mt19937_64 rng(99);
  for (int64_t& v : i64) v = static_cast<int64_t>(rng()) >> (rng() % 64);
  std::vector<int32_t> i32(i64.begin(), i64.end());
  const std::vector<uint16_t> patterns = all_16bit_patterns();
  const auto source_bytes = [&](DType t) {
    switch (t) {
      case DType::F32: return as_bytes(floats);
      case DType::I32: return as_bytes(i32);
      case DType::I64: return as_bytes(i64);
      default: return as_bytes(patterns);
    }
  };

  const std::vector<CpuIsa> isas = supported_isas();
  MESSAGE("vector paths checked on this CPU: ", isas.size() - 1, " (best: ",
          name(isas.back()), ")");
  const unsigned char guard = 0xa5;
  for (DType src : kAllTypes) {
    const std::vector<unsigned char> in = source_bytes(src);
    const int64_t n_all = static_cast<int64_t>(in.size() / ampx::impl::dtype_size(src));
    for (DType dst : kAllTypes) {
      const size_t ss = ampx::impl::dtype_size(src), ds = ampx::impl::dtype_size(dst);
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{15}, int64_t{16},
                        int64_t{17}, int64_t{31}, int64_t{33}, int64_t{1000}, n_all}) {
        // (source, destination) byte offsets: aligned, odd, and mixed.
        for (const auto& off : {std::pair<int, int>{0, 0}, {1, 3}, {3, 1}, {2, 2}}) {
          // The source window slides too, so the tails see varied data.
          const int64_t start = n == n_all ? 0 : (n * 37) % (n_all - n);
          std::vector<unsigned char> src_buf(static_cast<size_t>(n) * ss + 8);
          std::memcpy(src_buf.data() + off.first, in.data() + start * ss, static_cast<size_t>(n) * ss);
          std::vector<unsigned char> want;
          for (CpuIsa isa : isas) {
            std::vector<unsigned char> out(static_cast<size_t>(n) * ds + 16, guard);
            ampx::impl::convert_bulk_with(isa, out.data() + off.second, dst,
                                          src_buf.data() + off.first, src, n);
            if (isa == CpuIsa::Scalar) {
              want = out;
              continue;
            }
            size_t at = 0;
            while (at < out.size() && out[at] == want[at]) ++at;
            CHECK_MESSAGE(at == out.size(), name(isa), " differs from scalar converting type ",
                          static_cast<int>(src), " to ", static_cast<int>(dst), ", n=", n,
                          ", offsets ", off.first, "/", off.second, ", first at byte ", at);
          }
          // Nothing written outside [offset, offset + n * size).
          const size_t end = static_cast<size_t>(off.second) + static_cast<size_t>(n) * ds;
          bool guards_intact = true;
          for (size_t i = 0; i < static_cast<size_t>(off.second); ++i) guards_intact &= want[i] == guard;
          for (size_t i = end; i < want.size(); ++i) guards_intact &= want[i] == guard;
          CHECK(guards_intact);
        }
      }
    }
  }
}

#if defined(__x86_64__)
TEST_CASE("convert: flush-to-zero and denormals-are-zero modes change nothing") {
  // Applications often set FTZ/DAZ for speed; VCVTPS2PH/VCVTPH2PS must still
  // keep subnormals as the scalar integer code does.
  std::vector<float> floats;
  for (const Boundary& c : boundary_floats()) floats.push_back(c.value);
  for (uint32_t i = 0; i < 65536; ++i) floats.push_back(float_of(0x33000000u + i * 97u));
  const std::vector<uint16_t> patterns = all_16bit_patterns();
  const std::vector<uint16_t> want_h = convert<uint16_t>(CpuIsa::Scalar, DType::F16, floats, DType::F32);
  const std::vector<uint16_t> want_b = convert<uint16_t>(CpuIsa::Scalar, DType::BF16, floats, DType::F32);
  const std::vector<float> want_w = convert<float>(CpuIsa::Scalar, DType::F32, patterns, DType::F16);

  struct CsrGuard {
    unsigned saved = _mm_getcsr();
    ~CsrGuard() { _mm_setcsr(saved); }
  } guard;
  _mm_setcsr(guard.saved | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
  for (CpuIsa isa : supported_isas()) {
    INFO(name(isa));
    const std::vector<uint16_t> h = convert<uint16_t>(isa, DType::F16, floats, DType::F32);
    const std::vector<uint16_t> b = convert<uint16_t>(isa, DType::BF16, floats, DType::F32);
    const std::vector<float> w = convert<float>(isa, DType::F32, patterns, DType::F16);
    CHECK(h == want_h);
    CHECK(b == want_b);
    CHECK(std::memcmp(w.data(), want_w.data(), w.size() * sizeof(float)) == 0);
  }
}
#endif

TEST_CASE("convert: AMPX_CPU_ISA lowers the instruction set and never raises it") {
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx512, nullptr) == CpuIsa::Avx512);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx512, "avx2") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx512, "scalar") == CpuIsa::Scalar);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx512, "AVX2") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx2, "avx512") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Scalar, "avx2") == CpuIsa::Scalar);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx2, "sse9") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx2, "") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx2, "avx2x") == CpuIsa::Avx2);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Neon, "scalar") == CpuIsa::Scalar);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Neon, "NEON") == CpuIsa::Neon);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Neon, "avx2") == CpuIsa::Neon);
  CHECK(ampx::impl::resolve_cpu_isa(CpuIsa::Avx512, "neon") == CpuIsa::Avx512);
  CHECK(std::string(ampx::impl::cpu_isa_name(CpuIsa::Neon)) == "neon");

  CHECK(ampx::impl::cpu_isa_supported(CpuIsa::Scalar));
  CHECK(std::string(ampx::impl::cpu_isa_name(CpuIsa::Avx512)) == "avx512");
  CHECK(std::string(ampx::impl::cpu_isa_name(CpuIsa::Scalar)) == "scalar");
  // The detected choice is the best supported one, filtered by this process's
  // environment; support is downward closed.
  const std::vector<CpuIsa> isas = supported_isas();
  for (size_t i = 0; i < isas.size(); ++i) CHECK(isas[i] == kAllIsas[i]);
  CHECK(ampx::impl::detected_cpu_isa() ==
        ampx::impl::resolve_cpu_isa(isas.back(), std::getenv("AMPX_CPU_ISA")));
  CHECK(ampx::impl::cpu_isa_supported(ampx::impl::detected_cpu_isa()));
}

TEST_CASE("convert: bad arguments are reported") {
  float f[2] = {1, 2};
  uint16_t h[2] = {0, 0};
  const DType bogus = static_cast<DType>(9);
  CHECK(status_of([&] { ampx::impl::convert_bulk(h, bogus, f, DType::F32, 2); }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] { ampx::impl::convert_bulk(h, DType::F16, f, bogus, 2); }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] { ampx::impl::convert_bulk(h, DType::F16, f, DType::F32, -1); }) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] { ampx::impl::convert_bulk(nullptr, DType::F16, f, DType::F32, 2); }) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] { ampx::impl::convert_bulk(h, DType::F16, nullptr, DType::F32, 2); }) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] { ampx::impl::convert_bulk(nullptr, DType::F16, nullptr, DType::F32, 0); }) ==
        AMPX_OK);
  CHECK(status_of([&] { ampx::impl::element_bits_from_double(bogus, 1.0); }) == AMPX_ERR_DTYPE);
  for (CpuIsa isa : kAllIsas) {
    if (ampx::impl::cpu_isa_supported(isa)) continue;
    CHECK(status_of([&] { ampx::impl::convert_bulk_with(isa, h, DType::F16, f, DType::F32, 2); }) ==
          AMPX_ERR_NOT_SUPPORTED);
  }
  CHECK(h[0] == 0);  // nothing was written by a failed call
}
