// test_cuda_nn_ops.cpp -- the indexing, copy, dropout and loss primitives of
// the ops on the GPU (src/backend/cuda/kernels/gather_scatter.cu, copy_strided.cu,
// dropout.cu, bce_with_logits.cu, mse_loss.cu), checked against the CPU backend on the
// same data. test_ops_more.cpp checks the ops built on them against
// references of its own; this file adds what only a GPU run shows:
// agreement with the CPU element by element, every word width and
// alignment of the gather, every radix-pass count of the scatter's sort
// (indices of 1, 8, 16, 24 and 25 bits), layouts from 0 to AMPX_MAX_DIMS
// dimensions, reproducibility, capture in a CUDA graph, and indices past
// 2^31 and 2^32. Out-of-range indices (negative, >= the row count, INT32_MIN,
// huge I64 values) mixed with valid ones: gather writes zero rows for them
// and scatter skips them, like the CPU; and neither kernel writes outside
// its output -- every output lies between guard bytes that are checked
// after the call. The cases run when the suite targets CUDA (the unit_cuda
// test) and report themselves skipped elsewhere.
//
// Bounds (eps = 2^-24, fp32's unit roundoff):
//  - gather_rows and copy_strided move bytes: bit for bit (a zero row, bit
//    for bit, where the index is out of range).
//  - scatter_add_rows adds each dst element's terms one at a time in fp32,
//    in increasing order of the source row, on both backends: bit for bit.
//    The values span 2^-12 .. 2^12 in magnitude, so any other order (or an
//    atomic add) would change low bits and fail.
//  - dropout: both backends draw the same Philox words (kernels/math/
//    random.h) and multiply in fp32: bit for bit (any NaN equals any NaN).
//  - bce_with_logits = A + L with A = max(x, 0) - x t (IEEE operations,
//    the same bits on both sides: no fused multiply-adds) and L =
//    log1pf(expf(-|x|)), which CUDA and glibc compute differently. CUDA's
//    expf is within 2 ulps and glibc's within 1, so the two e = expf(-|x|)
//    are at most 3 ulps = 6 eps e apart; log1p's slope 1 / (1 + e) and
//    L = log1p(e) >= e / (1 + e) keep that 6 eps L in L; log1pf adds 1 ulp
//    (CUDA) and up to 2 (glibc), another 6 eps L. So |dL| <= 12 eps L, and
//    the final additions round once each side (eps |loss| each). Twice
//    that is allowed: 24 eps L + 4 eps |cpu|, plus 2^-140 for results below
//    the normal range (exp(-|x|) is subnormal for |x| > 87), with L
//    evaluated in double. Non-finite CPU results must be matched exactly
//    (NaN by NaN).
//  - mse_loss and its gradients: a subtraction and products, IEEE on both
//    sides (no fused multiply-adds): bit for bit.
//  - weighted bce_with_logits and its gradients: the bound above, derived
//    the same way for the terms that hold L or sigmoid(-|x|) (their
//    factors, the weights, are the same bits on both sides), plus one ulp
//    of a 16-bit gradient, which may round the other way when the two fp32
//    values straddle a midpoint.
#include "support.h"
#include "unit/backend_caps.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda_test_support.h"
#include "math/convert.h"
#include "math/random.h"

using namespace cuda_test;

namespace {

using ampx::impl::StridedCopy;

const DType kIndexTypes[] = {DType::I32, DType::I64};

Bytes random_bytes(size_t n, std::mt19937& rng) {
  Bytes b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

// N(0, 1) times 2^k, k uniform in [-12, 12]: magnitudes over 24 binades, so
// a sum's low bits depend on the order of its terms.
std::vector<float> mixed_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-12, 12);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(normal(rng), binade(rng));
  return v;
}

// Indices as I32 or I64 bytes.
Bytes index_bytes(DType t, const std::vector<int64_t>& indices) {
  Bytes b(indices.size() * width(t));
  for (size_t i = 0; i < indices.size(); ++i) {
    if (t == DType::I32) {
      const auto v = static_cast<int32_t>(indices[i]);
      std::memcpy(&b[i * 4], &v, 4);
    } else {
      std::memcpy(&b[i * 8], &indices[i], 8);
    }
  }
  return b;
}

std::vector<int64_t> random_indices(size_t n, int64_t rows, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::vector<int64_t> v(n);
  for (int64_t& x : v) x = pick(rng);
  return v;
}

// Device memory holding `bytes` between two guards of kGuard bytes (0xA5
// before, 0x5A after), `offset` bytes past a 256-byte boundary like Gpu.
// bytes() checks that the guards are intact: a kernel that writes past
// either end of its output fails the case.
class Guarded {
 public:
  static constexpr size_t kGuard = 256;  // keeps the alignment of Gpu's offset

  Guarded(Backends& b, const Bytes& bytes, size_t offset = 0)
      : size_(bytes.size()), all_(b, with_guards(bytes), offset) {}

  void* ptr() const { return static_cast<uint8_t*>(all_.ptr()) + kGuard; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr());
  }
  Bytes bytes() const {
    const Bytes all = all_.bytes();
    size_t before = 0, after = 0;
    for (size_t i = 0; i < kGuard; ++i) {
      before += all[i] != 0xA5;
      after += all[kGuard + size_ + i] != 0x5A;
    }
    CHECK_MESSAGE(before == 0, before, " guard bytes before the output were overwritten");
    CHECK_MESSAGE(after == 0, after, " guard bytes after the output were overwritten");
    return Bytes(all.begin() + static_cast<std::ptrdiff_t>(kGuard),
                 all.begin() + static_cast<std::ptrdiff_t>(kGuard + size_));
  }

 private:
  static Bytes with_guards(const Bytes& bytes) {
    Bytes all(kGuard + bytes.size() + kGuard, 0x5A);
    std::fill(all.begin(), all.begin() + kGuard, uint8_t{0xA5});
    std::copy(bytes.begin(), bytes.end(), all.begin() + kGuard);
    return all;
  }

  size_t size_;
  Gpu all_;
};

// Raw device memory for the cases past 2^31 elements, which never exist on
// the host; released with the case.
class Big {
 public:
  Big(Backends& b, size_t bytes) : b_(&b), bytes_(bytes) {
    ptr_ = static_cast<uint8_t*>(b.memory->allocate(bytes));
    REQUIRE(ptr_ != nullptr);
  }
  Big(const Big&) = delete;
  Big& operator=(const Big&) = delete;
  ~Big() { b_->memory->deallocate(ptr_, bytes_); }
  uint8_t* ptr() const { return ptr_; }

 private:
  Backends* b_;
  size_t bytes_;
  uint8_t* ptr_;
};

// Bytes equal, reporting how many differ and where the first does.
void compare_bytes(const std::string& what, const Bytes& got, const Bytes& want) {
  REQUIRE(got.size() == want.size());
  size_t differing = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && differing++ == 0) first = i;
  CHECK_MESSAGE(differing == 0, what, ": ", differing,
                " bytes differ from the CPU's, the first at ", first);
}

}  // namespace

// ---- gather_rows -----------------------------------------------------------

TEST_CASE("cuda nn ops: gather_rows copies the CPU's bytes for every row size and alignment") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(41);
  const int64_t table_rows = 37;
  struct RowCase {
    size_t row_bytes;
    int64_t count;
  };
  // Odd sizes (byte words), 2 and 6 (2-byte words), 4100 (4-byte words in
  // a row of 1025), 16 and 24 (16- and 8-byte words), 80000 (a row cut into
  // two pieces).
  const RowCase row_cases[] = {{1, 1000}, {2, 1000}, {3, 777}, {6, 500},    {7, 300},
                               {16, 1000}, {24, 400}, {4100, 300}, {80000, 20}};
  // (table, out) byte offsets: the widest common word shrinks with them.
  const size_t offsets[][2] = {{0, 0}, {8, 8}, {4, 0}, {2, 6}, {1, 0}};
  for (const RowCase& rc : row_cases)
    for (DType it : kIndexTypes)
      for (const auto& off : offsets) {
        CAPTURE(rc.row_bytes);
        CAPTURE(name(it));
        CAPTURE(off[0]);
        CAPTURE(off[1]);
        const Bytes table = random_bytes(static_cast<size_t>(table_rows) * rc.row_bytes, rng);
        std::vector<int64_t> indices =
            random_indices(static_cast<size_t>(rc.count), table_rows, rng);
        indices[0] = table_rows - 1;  // the last row, to the last byte
        const Bytes idx = index_bytes(it, indices);
        const size_t out_bytes = static_cast<size_t>(rc.count) * rc.row_bytes;
        Bytes want(out_bytes);
        ampx_test::nn_of(b.cpu).gather_rows(table.data(), rc.row_bytes, table_rows, idx.data(), it,
                                            rc.count, want.data());
        const Gpu gtable(b, table, off[0]), gidx(b, idx);
        const Guarded gout(b, Bytes(out_bytes), off[1]);
        ampx_test::nn_of(b.gpu).gather_rows(gtable.ptr(), rc.row_bytes, table_rows, gidx.ptr(), it,
                                            rc.count, gout.ptr());
        compare_bytes("gather_rows", gout.bytes(), want);
      }

  // count 0 writes nothing.
  const Bytes sentinel(64, 0xA5);
  const Gpu gtable(b, random_bytes(64, rng)), gidx(b, index_bytes(DType::I64, {0})),
      gout(b, sentinel);
  ampx_test::nn_of(b.gpu).gather_rows(gtable.ptr(), 16, 4, gidx.ptr(), DType::I64, 0, gout.ptr());
  CHECK(gout.bytes() == sentinel);
}

// ---- scatter_add_rows ------------------------------------------------------

namespace {

// dst (rows x cols, mixed values) += src rows at `indices` on both backends;
// checks the GPU's bits against the CPU's, the CPU's against the in-order
// fp32 chain computed here (indices outside [0, rows) add nothing), and the
// guards around the GPU's dst; returns the GPU's bits.
Bytes check_scatter(Backends& b, std::mt19937& rng, DType src_type, DType index_type,
                    int64_t rows, int64_t cols, const std::vector<int64_t>& indices,
                    const std::string& what) {
  CAPTURE(what);
  CAPTURE(name(src_type));
  CAPTURE(name(index_type));
  const auto count = static_cast<int64_t>(indices.size());
  const Bytes src = encode(src_type, mixed_floats(static_cast<size_t>(count * cols), rng));
  const Bytes idx = index_bytes(index_type, indices);
  const std::vector<float> dst0 = mixed_floats(static_cast<size_t>(rows * cols), rng);
  std::vector<float> want = dst0;
  ampx_test::nn_of(b.cpu).scatter_add_rows(src.data(), src_type, cols, idx.data(), index_type,
                                           count, want.data(), rows);
  // The chain the contract defines; an index is what the index type holds.
  std::vector<float> chain = dst0;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = index_type == DType::I32 ? static_cast<int32_t>(indices[i]) : indices[i];
    if (r < 0 || r >= rows) continue;
    for (int64_t c = 0; c < cols; ++c)
      chain[static_cast<size_t>(r * cols + c)] +=
          get(src, src_type, static_cast<size_t>(static_cast<int64_t>(i) * cols + c));
  }
  Bytes dst_bytes(dst0.size() * 4);
  std::memcpy(dst_bytes.data(), dst0.data(), dst_bytes.size());
  const Gpu gsrc(b, src), gidx(b, idx);
  const Guarded gdst(b, dst_bytes);
  ampx_test::nn_of(b.gpu).scatter_add_rows(gsrc.ptr(), src_type, cols, gidx.ptr(), index_type,
                                           count, gdst.as<float>(), rows);
  Bytes want_bytes(want.size() * 4), chain_bytes(chain.size() * 4);
  std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
  std::memcpy(chain_bytes.data(), chain.data(), chain_bytes.size());
  compare_bytes("scatter_add_rows on the CPU against the fp32 chain " + what, want_bytes,
                chain_bytes);
  const Bytes got = gdst.bytes();
  compare_bytes("scatter_add_rows " + what, got, want_bytes);
  return got;
}

}  // namespace

TEST_CASE("cuda nn ops: scatter_add_rows adds in the CPU's order, bit for bit") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(43);
  for (DType st : kFloatTypes)
    for (DType it : kIndexTypes) {
      // Many duplicates: ~1430 terms per dst element, magnitudes 2^+-12.
      check_scatter(b, rng, st, it, 7, 33, random_indices(10000, 7, rng), "10000 into 7 rows");
      // Every index 0: the sort has no pass to make.
      check_scatter(b, rng, st, it, 1, 3, std::vector<int64_t>(5000, 0), "all into row 0");
      // Indices of 8 bits (one pass), and a permutation (two passes, no
      // duplicates).
      check_scatter(b, rng, st, it, 200, 5, random_indices(4000, 200, rng), "200 rows");
      std::vector<int64_t> permutation(3000);
      std::iota(permutation.begin(), permutation.end(), 0);
      std::shuffle(permutation.begin(), permutation.end(), rng);
      check_scatter(b, rng, st, it, 3000, 1, permutation, "a permutation");
      // A single row of 1100 columns (two walk pieces), and one term.
      check_scatter(b, rng, st, it, 10, 1100, random_indices(300, 10, rng), "1100 columns");
      check_scatter(b, rng, st, it, 5, 8, {3}, "one term");
    }
  // Three passes over 147 sort blocks; four passes (25-bit indices).
  for (DType it : kIndexTypes) {
    std::vector<int64_t> many = random_indices(300000, 70000, rng);
    many[12345] = 69999;
    check_scatter(b, rng, DType::BF16, it, 70000, 2, many, "300000 into 70000 rows");
    const int64_t rows = (int64_t{1} << 24) + 3;
    std::vector<int64_t> wide = random_indices(20000, 64, rng);
    for (size_t i = 0; i < wide.size(); i += 7) wide[i] = rows - 1 - static_cast<int64_t>(i % 5);
    check_scatter(b, rng, DType::F32, it, rows, 1, wide, "25-bit indices");
  }

  // count 0 changes nothing.
  const Bytes dst = encode(DType::F32, {1.0f, 2.0f, 3.0f});
  const Gpu gdst(b, dst), gsrc(b, Bytes(12)), gidx(b, index_bytes(DType::I32, {0}));
  ampx_test::nn_of(b.gpu).scatter_add_rows(gsrc.ptr(), DType::F32, 3, gidx.ptr(), DType::I32, 0,
                                           gdst.as<float>(), 1);
  CHECK(gdst.bytes() == dst);
}

TEST_CASE("cuda nn ops: scatter_add_rows gives the same bits on every run") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(47);
  const int64_t rows = 11, cols = 64, count = 50000;
  const Bytes src = encode(DType::F16, mixed_floats(static_cast<size_t>(count * cols), rng));
  const Bytes idx = index_bytes(DType::I64, random_indices(static_cast<size_t>(count), rows, rng));
  const Gpu gsrc(b, src), gidx(b, idx);
  std::vector<Bytes> runs;
  for (int run = 0; run < 3; ++run) {
    const Gpu gdst(b, Bytes(static_cast<size_t>(rows * cols) * 4));
    ampx_test::nn_of(b.gpu).scatter_add_rows(gsrc.ptr(), DType::F16, cols, gidx.ptr(), DType::I64,
                                             count, gdst.as<float>(), rows);
    runs.push_back(gdst.bytes());
  }
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

// ---- out-of-range indices --------------------------------------------------

namespace {

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// Out-of-range indices that `t` can hold, for a table or dst of `rows` rows:
// negative ones down to the type's minimum, the row count itself and past
// it, and for I64 values past 32 bits whose low 32 bits name a valid row (a
// kernel that truncated an index would gather or add them).
std::vector<int64_t> bad_indices(DType t, int64_t rows) {
  std::vector<int64_t> bad = {-1, -2, -rows, rows, rows + 1, kI32Min, kI32Min + 3, kI32Max,
                              int64_t{1} << 30};
  if (t == DType::I64) {
    const int64_t wide[] = {std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(),
                            int64_t{1} << 31,
                            (int64_t{1} << 32) + 3,
                            -(int64_t{1} << 32) + 5,
                            (int64_t{1} << 40) | 7,
                            -(int64_t{1} << 62)};
    bad.insert(bad.end(), std::begin(wide), std::end(wide));
  }
  bad.erase(std::remove_if(bad.begin(), bad.end(),
                           [&](int64_t v) { return v >= 0 && v < rows; }),
            bad.end());
  return bad;
}

// `count` indices, about a third of them drawn from `bad` and the rest valid
// rows; the first and the last out of range, and when count > 1000 a run
// of 600 out-of-range positions (whole tiles of the sort and the walk).
std::vector<int64_t> mixed_indices(size_t count, int64_t rows, const std::vector<int64_t>& bad,
                                   std::mt19937& rng) {
  std::vector<int64_t> v = random_indices(count, rows, rng);
  std::uniform_int_distribution<size_t> pick(0, bad.size() - 1);
  for (int64_t& x : v)
    if (rng() % 3 == 0) x = bad[pick(rng)];
  v.front() = bad[pick(rng)];
  v.back() = bad[pick(rng)];
  if (count > 1000)
    for (size_t i = 300; i < 900; ++i) v[i] = bad[pick(rng)];
  return v;
}

// The index position i holds, read back as the index type stores it.
int64_t stored_index(DType t, int64_t v) { return t == DType::I32 ? static_cast<int32_t>(v) : v; }

}  // namespace

TEST_CASE("cuda nn ops: gather_rows writes zero rows for out-of-range indices, and only its output") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(71);
  const int64_t table_rows = 29;
  struct RowCase {
    size_t row_bytes;
    int64_t count;
  };
  // Every word width, and a row cut into two pieces.
  const RowCase row_cases[] = {{1, 2000}, {6, 700},    {16, 1500},
                               {24, 400}, {4100, 200}, {80000, 24}};
  const size_t out_offsets[] = {0, 2};
  for (const RowCase& rc : row_cases)
    for (DType it : kIndexTypes)
      for (size_t off : out_offsets) {
        CAPTURE(rc.row_bytes);
        CAPTURE(name(it));
        CAPTURE(off);
        const Bytes table = random_bytes(static_cast<size_t>(table_rows) * rc.row_bytes, rng);
        const std::vector<int64_t> indices = mixed_indices(
            static_cast<size_t>(rc.count), table_rows, bad_indices(it, table_rows), rng);
        const Bytes idx = index_bytes(it, indices);
        const size_t out_bytes = static_cast<size_t>(rc.count) * rc.row_bytes;
        // The contract: the table row, or zero bytes.
        Bytes expected(out_bytes, 0);
        for (size_t i = 0; i < indices.size(); ++i) {
          const int64_t r = stored_index(it, indices[i]);
          if (r >= 0 && r < table_rows)
            std::memcpy(&expected[i * rc.row_bytes], &table[static_cast<size_t>(r) * rc.row_bytes],
                        rc.row_bytes);
        }
        // Outputs start non-zero, so the zero rows are written, not left.
        Bytes want(out_bytes, 0xC3);
        ampx_test::nn_of(b.cpu).gather_rows(table.data(), rc.row_bytes, table_rows, idx.data(), it,
                                            rc.count, want.data());
        compare_bytes("gather_rows on the CPU against the contract", want, expected);
        const Gpu gtable(b, table), gidx(b, idx);
        const Guarded gout(b, Bytes(out_bytes, 0xC3), off);
        ampx_test::nn_of(b.gpu).gather_rows(gtable.ptr(), rc.row_bytes, table_rows, gidx.ptr(), it,
                                            rc.count, gout.ptr());
        compare_bytes("gather_rows with out-of-range indices", gout.bytes(), want);
      }

  // Every index out of range, and a table of no rows: all zero.
  for (DType it : kIndexTypes) {
    CAPTURE(name(it));
    const std::vector<int64_t> bad = bad_indices(it, table_rows);
    const Bytes idx = index_bytes(it, bad);
    const auto count = static_cast<int64_t>(bad.size());
    const Gpu gtable(b, random_bytes(static_cast<size_t>(table_rows) * 16, rng)), gidx(b, idx);
    const Guarded gout(b, Bytes(bad.size() * 16, 0xC3));
    ampx_test::nn_of(b.gpu).gather_rows(gtable.ptr(), 16, table_rows, gidx.ptr(), it, count,
                                        gout.ptr());
    CHECK(gout.bytes() == Bytes(bad.size() * 16, 0));
    const Bytes small = index_bytes(it, {0, 1, -1, 3});
    const Gpu gsmall(b, small);
    const Guarded gzero(b, Bytes(4 * 16, 0xC3));
    ampx_test::nn_of(b.gpu).gather_rows(gtable.ptr(), 16, 0, gsmall.ptr(), it, 4, gzero.ptr());
    CHECK(gzero.bytes() == Bytes(4 * 16, 0));
  }
}

TEST_CASE("cuda nn ops: scatter_add_rows skips out-of-range indices, bit for bit with the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(73);
  for (DType st : kFloatTypes)
    for (DType it : kIndexTypes) {
      const std::vector<int64_t> bad = bad_indices(it, 29);
      check_scatter(b, rng, st, it, 29, 33, mixed_indices(6000, 29, bad, rng), "mixed, 29 rows");
      check_scatter(b, rng, st, it, 29, 1100, mixed_indices(400, 29, bad, rng),
                    "mixed, 1100 columns");
    }
  // The sort's key of an out-of-range index is the row count (2^31 at most
  // for I32): with one row it is 1 (one pass); with 256 rows the valid keys
  // need one pass and the out-of-range key 256 two, which moves the sorted
  // order to the other buffer; 2^24 + 3 rows take four passes; 300000
  // positions span many sort blocks, with out-of-range runs across them.
  for (DType it : kIndexTypes) {
    check_scatter(b, rng, DType::F32, it, 1, 4, mixed_indices(3000, 1, bad_indices(it, 1), rng),
                  "mixed, one row");
    check_scatter(b, rng, DType::F32, it, 256, 3,
                  mixed_indices(5000, 256, bad_indices(it, 256), rng), "mixed, 256 rows");
    const int64_t rows = (int64_t{1} << 24) + 3;
    check_scatter(b, rng, DType::F32, it, rows, 1,
                  mixed_indices(20000, rows, bad_indices(it, rows), rng), "mixed, 25-bit rows");
    check_scatter(b, rng, DType::F16, it, 40, 2,
                  mixed_indices(300000, 40, bad_indices(it, 40), rng), "mixed, 300000 positions");
    // Every index out of range: dst keeps its bits.
    const std::vector<int64_t> bad = bad_indices(it, 256);
    std::vector<int64_t> all_bad(2000);
    for (size_t i = 0; i < all_bad.size(); ++i) all_bad[i] = bad[i % bad.size()];
    check_scatter(b, rng, DType::BF16, it, 256, 3, all_bad, "all out of range");
    // A dst of no rows: nothing is written (the guards check it).
    const Gpu gsrc(b, encode(DType::F32, {1.0f, 2.0f})), gidx(b, index_bytes(it, {0, -1}));
    const Guarded gdst(b, Bytes());
    ampx_test::nn_of(b.gpu).scatter_add_rows(gsrc.ptr(), DType::F32, 1, gidx.ptr(), it, 2,
                                             gdst.as<float>(), 0);
    CHECK(gdst.bytes().empty());
  }
}

TEST_CASE("cuda nn ops: scatter_add_rows with I32 indices into more than 2^31 rows") {
  SKIP_UNLESS_CUDA();
  // dst of 2^31 + 64 rows of one float (8 GiB): every non-negative I32 index
  // is a valid row there, and row 2^31 -- the sort's key for the
  // out-of-range I32 indices -- is one that no I32 index names, so it must
  // stay untouched while row 2^31 - 1 receives its terms.
  const int64_t rows = (int64_t{1} << 31) + 64;
  const auto dst_bytes = static_cast<size_t>(rows) * 4;
  if (free_device_bytes() < dst_bytes + (size_t{1} << 30)) {
    MESSAGE("skipped: needs 9 GiB of free device memory");
    return;
  }
  Backends b;
  std::mt19937 rng(79);
  const int64_t named[] = {0, 5, kI32Max - 1, kI32Max};
  const int64_t bad[] = {-1, kI32Min, -(int64_t{1} << 30)};
  std::vector<int64_t> indices(5000);
  for (int64_t& v : indices) v = rng() % 3 == 0 ? bad[rng() % 3] : named[rng() % 4];
  const auto count = static_cast<int64_t>(indices.size());
  const std::vector<float> values = mixed_floats(indices.size(), rng);
  const Gpu gsrc(b, encode(DType::F32, values)), gidx(b, index_bytes(DType::I32, indices));
  Big dst(b, dst_bytes);
  b.gpu->fill(dst.ptr(), 4, ampx::impl::math::float_bits(1.0f), rows);
  ampx_test::nn_of(b.gpu).scatter_add_rows(gsrc.ptr(), DType::F32, 1, gidx.ptr(), DType::I32, count,
                                           reinterpret_cast<float*>(dst.ptr()), rows);
  // The first 8 rows and the last 128 (2^31 - 64 .. 2^31 + 63).
  auto check_rows = [&](int64_t first, int64_t n) {
    std::vector<float> want(static_cast<size_t>(n), 1.0f);
    for (size_t i = 0; i < indices.size(); ++i)
      if (indices[i] >= first && indices[i] < first + n)
        want[static_cast<size_t>(indices[i] - first)] += values[i];
    std::vector<float> got(static_cast<size_t>(n));
    b.gpu->copy_to_host(got.data(), dst.ptr() + static_cast<size_t>(first) * 4, got.size() * 4);
    size_t wrong = 0;
    for (size_t k = 0; k < got.size(); ++k)
      wrong += std::memcmp(&got[k], &want[k], 4) != 0;
    CHECK_MESSAGE(wrong == 0, "rows from ", first, ": ", wrong, " differ from the fp32 chain");
  };
  check_rows(0, 8);
  check_rows((int64_t{1} << 31) - 64, 128);
}

// ---- copy_strided ----------------------------------------------------------

namespace {

// Elements a side of the copy spans (strides are non-negative here).
int64_t span(const StridedCopy& l, const int64_t* strides) {
  int64_t last = 0;
  for (int32_t k = 0; k < l.ndim; ++k) {
    if (l.sizes[k] == 0) return 0;
    last += (l.sizes[k] - 1) * strides[k];
  }
  return last + 1;
}

void check_copy(Backends& b, std::mt19937& rng, const StridedCopy& l, size_t elem,
                const std::string& what) {
  CAPTURE(what);
  CAPTURE(elem);
  CAPTURE(l.ndim);
  const auto src_elems = static_cast<size_t>(std::max<int64_t>(span(l, l.src_strides), 1));
  const auto dst_elems = static_cast<size_t>(std::max<int64_t>(span(l, l.dst_strides), 1));
  const Bytes src = random_bytes(src_elems * elem, rng);
  Bytes want(dst_elems * elem, 0xA5);  // elements the copy skips keep this
  const Gpu gsrc(b, src), gdst(b, want);
  ampx_test::nn_of(b.cpu).copy_strided(want.data(), src.data(), elem, l);
  ampx_test::nn_of(b.gpu).copy_strided(gdst.ptr(), gsrc.ptr(), elem, l);
  compare_bytes("copy_strided " + what, gdst.bytes(), want);
}

// Row-major strides of `sizes`, the dimension `padded` (if >= 0) holding
// `pad` more elements than it copies (a slice, or one part of a concat).
void contiguous(StridedCopy& l, int64_t* strides, int padded, int64_t pad) {
  int64_t stride = 1;
  for (int32_t k = l.ndim - 1; k >= 0; --k) {
    strides[k] = stride;
    stride *= l.sizes[k] + (k == padded ? pad : 0);
  }
}

}  // namespace

TEST_CASE("cuda nn ops: copy_strided equals the CPU for transposes, slices and 0 to 8 dims") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(53);
  const size_t elems[] = {1, 2, 4, 8};
  for (size_t elem : elems) {
    // One element.
    StridedCopy scalar;
    check_copy(b, rng, scalar, elem, "ndim 0");

    // A matrix transpose, large enough for many blocks, and a batched one.
    StridedCopy t2;
    t2.ndim = 2;
    t2.sizes[0] = 1000, t2.sizes[1] = 777;
    t2.src_strides[0] = 1, t2.src_strides[1] = 1000;
    t2.dst_strides[0] = 777, t2.dst_strides[1] = 1;
    check_copy(b, rng, t2, elem, "transpose 1000 x 777");
    StridedCopy t3;
    t3.ndim = 3;
    t3.sizes[0] = 6, t3.sizes[1] = 33, t3.sizes[2] = 65;
    t3.src_strides[0] = 33 * 65, t3.src_strides[1] = 1, t3.src_strides[2] = 33;
    t3.dst_strides[0] = 33 * 65, t3.dst_strides[1] = 65, t3.dst_strides[2] = 1;
    check_copy(b, rng, t3, elem, "batched transpose");

    // Contiguous (merges to one dimension), a slice into a wider row (a
    // concatenation), and a broadcast source (stride 0).
    StridedCopy flat;
    flat.ndim = 3;
    flat.sizes[0] = 7, flat.sizes[1] = 1, flat.sizes[2] = 9001;
    contiguous(flat, flat.src_strides, -1, 0);
    contiguous(flat, flat.dst_strides, -1, 0);
    check_copy(b, rng, flat, elem, "contiguous");
    StridedCopy slice = flat;
    contiguous(slice, slice.dst_strides, 2, 13);
    check_copy(b, rng, slice, elem, "slice");
    StridedCopy broadcast;
    broadcast.ndim = 2;
    broadcast.sizes[0] = 40, broadcast.sizes[1] = 50;
    broadcast.src_strides[0] = 0, broadcast.src_strides[1] = 1;
    contiguous(broadcast, broadcast.dst_strides, -1, 0);
    check_copy(b, rng, broadcast, elem, "broadcast");

    // Random permutations of 1..8 dimensions, some extents 1, some slices,
    // and an extent 0 in every fourth (nothing is written).
    for (int trial = 0; trial < 32; ++trial) {
      StridedCopy l;
      l.ndim = 1 + trial % AMPX_MAX_DIMS;
      std::uniform_int_distribution<int64_t> extent(1, l.ndim <= 3 ? 40 : 4);
      for (int32_t k = 0; k < l.ndim; ++k) l.sizes[k] = extent(rng);
      std::vector<int> order(static_cast<size_t>(l.ndim));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      // src is contiguous in the permuted order: src dimension order[j] has
      // the j-th row-major stride of the permuted sizes.
      int64_t stride = 1;
      for (int32_t j = l.ndim - 1; j >= 0; --j) {
        const int k = order[static_cast<size_t>(j)];
        l.src_strides[k] = stride;
        stride *= l.sizes[k];
      }
      const int padded = trial % 3 == 0 ? static_cast<int>(rng() % l.ndim) : -1;
      contiguous(l, l.dst_strides, padded, 3);
      if (trial % 4 == 3) l.sizes[rng() % l.ndim] = 0;
      check_copy(b, rng, l, elem, "permutation " + std::to_string(trial));
    }
  }
}

// ---- dropout ---------------------------------------------------------------

TEST_CASE("cuda nn ops: dropout draws the CPU's mask, bit for bit") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(59);
  const int64_t counts[] = {1, 3, 5, 1001, 65539};
  const uint64_t offsets[] = {0, 3, (uint64_t{1} << 32) + 5, (uint64_t{1} << 63) + 11};
  const double ps[] = {0.1, 0.5};
  for (DType t : kFloatTypes)
    for (int64_t count : counts)
      for (uint64_t offset : offsets)
        for (double p : ps) {
          CAPTURE(name(t));
          CAPTURE(count);
          CAPTURE(offset);
          CAPTURE(p);
          const uint64_t seed = (uint64_t{rng()} << 32) | rng();
          const uint32_t threshold = ampx::impl::math::dropout_threshold(p);
          const auto scale = static_cast<float>(1.0 / (1.0 - p));
          std::vector<float> values = mixed_floats(static_cast<size_t>(count), rng);
          const float specials[] = {kNaN, kInf, -kInf, -0.0f};
          for (size_t i = 0; i < values.size() && i < 4; ++i)
            values[values.size() - 1 - i] = specials[i];
          const Bytes x = encode(t, values);
          Bytes want(x.size());
          ampx_test::nn_of(b.cpu).dropout(x.data(), want.data(), t, count, seed, offset, threshold,
                                          scale);
          // Out of place, aligned (the vector path) and one element off.
          for (size_t element_offset : {size_t{0}, size_t{1}}) {
            const Gpu gx(b, x, element_offset * width(t)),
                gy(b, Bytes(x.size(), 0xA5), element_offset * width(t));
            ampx_test::nn_of(b.gpu).dropout(gx.ptr(), gy.ptr(), t, count, seed, offset, threshold,
                                            scale);
            compare_exact("dropout", t, gy.bytes(), want);
            CHECK(gx.bytes() == x);
          }
          // In place, on both backends.
          Bytes in_place = x;
          ampx_test::nn_of(b.cpu).dropout(in_place.data(), in_place.data(), t, count, seed, offset,
                                          threshold, scale);
          compare_exact("dropout in place on the CPU", t, in_place, want);
          const Gpu gx(b, x);
          ampx_test::nn_of(b.gpu).dropout(gx.ptr(), gx.ptr(), t, count, seed, offset, threshold,
                                          scale);
          compare_exact("dropout in place", t, gx.bytes(), want);
        }
}

// ---- bce_with_logits -------------------------------------------------------

TEST_CASE("cuda nn ops: bce_with_logits within the expf/log1pf bound of the CPU") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(61);
  const float specials[] = {0.0f,   -0.0f, kInf,    -kInf, kNaN,  3.0e38f, -3.0e38f, 30.0f,
                            -30.0f, 88.0f, -88.0f, 104.0f, -104.0f, 1e-3f, -1e-3f,  1e-30f};
  const float special_targets[] = {0.0f, 1.0f, 0.5f, 0.0f, 1.0f, 0.25f, 0.75f, 1.0f,
                                   0.0f, 0.3f, 0.7f, 0.0f, 1.0f, 0.5f,  0.5f,  1.0f};
  std::normal_distribution<float> logit(0.0f, 6.0f);
  std::uniform_real_distribution<float> target(0.0f, 1.0f);
  for (DType t : kFloatTypes)
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{20011}}) {
      CAPTURE(name(t));
      CAPTURE(count);
      std::vector<float> xs(static_cast<size_t>(count)), ts(static_cast<size_t>(count));
      for (size_t i = 0; i < xs.size(); ++i) {
        xs[i] = logit(rng);
        ts[i] = i % 5 == 0 ? static_cast<float>(i % 2) : target(rng);
      }
      for (size_t i = 0; i < xs.size() && i < sizeof specials / sizeof specials[0]; ++i) {
        xs[i] = specials[i];
        ts[i] = special_targets[i];
      }
      const Bytes x = encode(t, xs), y = encode(t, ts);
      Bytes want(xs.size() * 4);
      ampx_test::nn_of(b.cpu).bce_with_logits(x.data(), y.data(), t, count,
                                              reinterpret_cast<float*>(want.data()));
      // Aligned (packets), and logits one element off (single elements).
      for (size_t element_offset : {size_t{0}, size_t{1}}) {
        CAPTURE(element_offset);
        const Gpu gx(b, x, element_offset * width(t)), gt(b, y), gl(b, Bytes(want.size()));
        ampx_test::nn_of(b.gpu).bce_with_logits(gx.ptr(), gt.ptr(), t, count, gl.as<float>());
        const Bytes got = gl.bytes();
        size_t wrong = 0;
        std::ostringstream first;
        first.precision(17);
        for (size_t i = 0; i < xs.size(); ++i) {
          const double g = get(got, DType::F32, i), w = get(want, DType::F32, i);
          const double xv = get(x, t, i);
          const double l = std::log1p(std::exp(-std::fabs(xv)));
          const double bound = 24 * kEps * l + 4 * kEps * std::fabs(w) + kTiny;
          const bool ok = std::isfinite(w) ? std::fabs(g - w) <= bound
                                           : (std::isnan(w) ? std::isnan(g) : g == w);
          if (!ok && ++wrong <= 5)
            first << "\n  [" << i << "] x " << xv << ": got " << g << ", want " << w << " (bound "
                  << bound << ")";
        }
        CHECK_MESSAGE(wrong == 0, "bce_with_logits: ", wrong, " outside the bound", first.str());
      }
    }
}

// ---- mse_loss and weighted bce_with_logits, forward and backward ------------

TEST_CASE("cuda nn ops: mse_loss bit for bit, weighted bce_with_logits within its bound") {
  SKIP_UNLESS_CUDA();
  Backends b;
  std::mt19937 rng(83);
  std::normal_distribution<float> logit(0.0f, 6.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (DType t : kFloatTypes)
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{5003}}) {
      CAPTURE(name(t));
      CAPTURE(count);
      const auto n = static_cast<size_t>(count);
      std::vector<float> xs(n), ts(n), dl(n), ws(n), ps(7);
      for (size_t i = 0; i < n; ++i) {
        xs[i] = logit(rng);
        ts[i] = unit(rng);
        dl[i] = 2.0f * unit(rng) - 1.0f;
        ws[i] = 0.25f + 1.75f * unit(rng);
      }
      for (float& p : ps) p = 0.5f + 2.5f * unit(rng);
      const Bytes x = encode(t, xs), y = encode(t, ts), dloss = encode(DType::F32, dl);
      const Bytes w = encode(DType::F32, ws), pw = encode(DType::F32, ps);
      const Gpu gw(b, w), gp(b, pw), gd(b, dloss);
      ampx::impl::BceWeights cpu_weights, gpu_weights;
      cpu_weights.weight = reinterpret_cast<const float*>(w.data());
      cpu_weights.weight_period = count;
      cpu_weights.pos_weight = reinterpret_cast<const float*>(pw.data());
      cpu_weights.pos_weight_period = 7;
      gpu_weights = cpu_weights;
      gpu_weights.weight = gw.f32();
      gpu_weights.pos_weight = gp.f32();
      const size_t grad_bytes = n * width(t);
      for (int64_t stride : {int64_t{0}, int64_t{1}})
        for (size_t element_offset : {size_t{0}, size_t{1}}) {
          CAPTURE(stride);
          CAPTURE(element_offset);
          const Gpu gx(b, x, element_offset * width(t)), gt(b, y);
          // mse_loss: subtractions and products only, the same on both.
          Bytes want(n * 4), d_in(grad_bytes), d_tg(grad_bytes);
          ampx_test::nn_of(b.cpu).mse_loss(x.data(), y.data(), t, count,
                                           reinterpret_cast<float*>(want.data()));
          const Gpu gl(b, Bytes(n * 4));
          ampx_test::nn_of(b.gpu).mse_loss(gx.ptr(), gt.ptr(), t, count, gl.f32());
          compare_exact("mse_loss", DType::F32, gl.bytes(), want);
          ampx_test::nn_of(b.cpu).mse_loss_backward(
              x.data(), y.data(), t, count, reinterpret_cast<const float*>(dloss.data()), stride,
              0.25f, d_in.data(), d_tg.data());
          const Gpu gdi(b, Bytes(grad_bytes)), gdt(b, Bytes(grad_bytes));
          ampx_test::nn_of(b.gpu).mse_loss_backward(gx.ptr(), gt.ptr(), t, count, gd.f32(),
                                                    stride, 0.25f, gdi.ptr(), gdt.ptr());
          compare_exact("mse_loss d input", t, gdi.bytes(), d_in);
          compare_exact("mse_loss d target", t, gdt.bytes(), d_tg);

          // bce_with_logits with weight and pos_weight: as the unweighted
          // bound above, L's difference of 12 eps L scaled by w (1 + (p - 1)
          // t), doubled, plus the roundings of the products and sums.
          ampx_test::nn_of(b.cpu).bce_with_logits(x.data(), y.data(), t, count,
                                                  reinterpret_cast<float*>(want.data()),
                                                  cpu_weights);
          ampx_test::nn_of(b.gpu).bce_with_logits(gx.ptr(), gt.ptr(), t, count, gl.f32(),
                                                  gpu_weights);
          ampx_test::nn_of(b.cpu).bce_with_logits_backward(
              x.data(), y.data(), t, count, cpu_weights,
              reinterpret_cast<const float*>(dloss.data()), stride, 0.25f, d_in.data(),
              d_tg.data());
          ampx_test::nn_of(b.gpu).bce_with_logits_backward(gx.ptr(), gt.ptr(), t, count,
                                                           gpu_weights, gd.f32(), stride, 0.25f,
                                                           gdi.ptr(), gdt.ptr());
          const Bytes got = gl.bytes(), got_dx = gdi.bytes(), got_dt = gdt.bytes();
          Mismatches loss("weighted bce_with_logits"), dx("its d logits"), dt("its d targets");
          for (size_t i = 0; i < n; ++i) {
            const double xv = get(x, t, i), tv = get(y, t, i), wv = ws[i], pv = ps[i % 7];
            const double l = std::log1p(std::exp(-std::fabs(xv)));
            const double tail = std::exp(-std::fabs(xv)) / (1 + std::exp(-std::fabs(xv)));
            const double lw = std::fabs(1 + (pv - 1) * tv);
            const double g = std::fabs(dl[static_cast<size_t>(stride) * i] * 0.25 * wv);
            const double cpu = get(want, DType::F32, i);
            loss.check(i, get(got, DType::F32, i), cpu,
                       28 * kEps * wv * lw * l + 8 * kEps * std::fabs(cpu) + kTiny);
            const double cdx = get(d_in, t, i), cdt = get(d_tg, t, i);
            dx.check(i, get(got_dx, t, i), cdx,
                     24 * kEps * g * lw * tail + 8 * kEps * std::fabs(cdx) + ulp16(t, cdx) + kTiny);
            dt.check(i, get(got_dt, t, i), cdt,
                     28 * kEps * g * std::fabs(pv - 1) * l + 8 * kEps * std::fabs(cdt) +
                         ulp16(t, cdt) + kTiny);
          }
        }
    }
}

// ---- a CUDA graph, refusals, large indices -----------------------------------

TEST_CASE("cuda nn ops: gather, dropout and scatter_add replay from a CUDA graph") {
  SKIP_UNLESS_CUDA();
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    Backends b(stream);
    std::mt19937 rng(67);
    const int64_t rows = 50, cols = 24, count = 3000;
    const size_t row_bytes = static_cast<size_t>(cols) * 2;
    const Gpu table(b, encode(DType::BF16, mixed_floats(static_cast<size_t>(rows * cols), rng)));
    const Gpu idx(b,
                  index_bytes(DType::I64, random_indices(static_cast<size_t>(count), rows, rng)));
    const uint32_t threshold = ampx::impl::math::dropout_threshold(0.25);

    // Two sets of outputs: one computed directly, one by the graph.
    struct Outputs {
      std::unique_ptr<Gpu> gathered, grad;
    };
    auto make_outputs = [&] {
      Outputs o;
      o.gathered = std::make_unique<Gpu>(b, Bytes(static_cast<size_t>(count) * row_bytes));
      o.grad = std::make_unique<Gpu>(b, Bytes(static_cast<size_t>(rows * cols) * 4));
      return o;
    };
    auto step = [&](Outputs& o) {
      ampx::impl::Backend& g = *b.gpu;
      ampx_test::nn_of(g).gather_rows(table.ptr(), row_bytes, rows, idx.ptr(), DType::I64, count,
                                      o.gathered->ptr());
      ampx_test::nn_of(g).dropout(o.gathered->ptr(), o.gathered->ptr(), DType::BF16, count * cols,
                                  99, 7, threshold, 1.0f / 0.75f);
      ampx_test::nn_of(g).scatter_add_rows(o.gathered->ptr(), DType::BF16, cols, idx.ptr(),
                                           DType::I64, count, o.grad->as<float>(), rows);
    };
    Outputs direct = make_outputs(), graphed = make_outputs();
    step(direct);  // loads every kernel first
    b.gpu->synchronize();
    const CapturedGraph graph(stream, [&] { step(graphed); });
    graph.launch();
    b.gpu->synchronize();
    CHECK(graphed.gathered->bytes() == direct.gathered->bytes());
    CHECK(graphed.grad->bytes() == direct.grad->bytes());
    // The gradient accumulates: a second replay adds the same terms again,
    // which the direct path reproduces bit for bit.
    graph.launch();
    step(direct);
    b.gpu->synchronize();
    CHECK(graphed.grad->bytes() == direct.grad->bytes());
  }
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("cuda nn ops: integer data, floating indices and odd element sizes are refused") {
  SKIP_UNLESS_CUDA();
  Backends b;
  const Gpu buf(b, Bytes(256)), idx(b, index_bytes(DType::I32, {0, 1}));
  const int64_t rows = 32;  // of 8 bytes in buf
  ampx::impl::Backend& g = *b.gpu;
  CHECK(status_of([&] {
          ampx_test::nn_of(g).scatter_add_rows(buf.ptr(), DType::I32, 2, idx.ptr(), DType::I32, 2,
                                               buf.as<float>(), rows);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(g).scatter_add_rows(buf.ptr(), DType::F32, 2, idx.ptr(), DType::F32, 2,
                                               buf.as<float>(), rows);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(g).gather_rows(buf.ptr(), 8, rows, idx.ptr(), DType::F16, 2, buf.ptr());
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(g).dropout(buf.ptr(), buf.ptr(), DType::I64, 4, 1, 0, 0, 1.0f);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(g).bce_with_logits(buf.ptr(), buf.ptr(), DType::I32, 4, buf.as<float>());
        }) == AMPX_ERR_DTYPE);
  StridedCopy l;
  l.ndim = 1;
  l.sizes[0] = 4;
  l.src_strides[0] = l.dst_strides[0] = 1;
  CHECK(status_of([&] { ampx_test::nn_of(g).copy_strided(buf.ptr(), buf.ptr(), 3, l); }) ==
        AMPX_ERR_INTERNAL);
}

TEST_CASE("cuda nn ops: copy_strided and dropout past 2^32 and 2^31 elements") {
  SKIP_UNLESS_CUDA();
  // A copy of 2^32 + 1024 one-byte elements (64-bit index path): src rows of
  // 1040 bytes into dst rows of 1024, so the layout does not merge.
  const int64_t rows = (int64_t{1} << 22) + 1, cols = 1024, src_pitch = 1040;
  const auto src_bytes = static_cast<size_t>(rows * src_pitch);
  const auto dst_bytes = static_cast<size_t>(rows * cols);
  if (free_device_bytes() < src_bytes + dst_bytes + (size_t{1} << 30)) {
    MESSAGE("skipped: needs 10 GiB of free device memory");
    return;
  }
  Backends b;
  {
    Big src(b, src_bytes), dst(b, dst_bytes);
    // Byte k of every 8 is k + 1; 1040 is a multiple of 8, so dst byte c of
    // every row must be c % 8 + 1.
    b.gpu->fill(src.ptr(), 8, 0x0807060504030201ull, static_cast<int64_t>(src_bytes / 8));
    b.gpu->fill(dst.ptr(), 1, 0, static_cast<int64_t>(dst_bytes));
    StridedCopy l;
    l.ndim = 2;
    l.sizes[0] = rows, l.sizes[1] = cols;
    l.src_strides[0] = src_pitch, l.src_strides[1] = 1;
    l.dst_strides[0] = cols, l.dst_strides[1] = 1;
    ampx_test::nn_of(b.gpu).copy_strided(dst.ptr(), src.ptr(), 1, l);
    for (int64_t row : {int64_t{0}, rows / 2, rows - 1}) {
      Bytes got(static_cast<size_t>(cols));
      b.gpu->copy_to_host(got.data(), dst.ptr() + row * cols, got.size());
      size_t wrong = 0;
      for (size_t c = 0; c < got.size(); ++c) wrong += got[c] != c % 8 + 1;
      CHECK_MESSAGE(wrong == 0, "copy_strided row ", row, ": ", wrong, " wrong bytes");
    }
  }
  {
    // Dropout of 2^31 + 7 f16 ones in place, offset past 2^32: the tail
    // (its last Philox block partial) against the shared math.
    const int64_t count = (int64_t{1} << 31) + 7;
    Big x(b, static_cast<size_t>(count) * 2);
    b.gpu->fill(x.ptr(), 2, 0x3c00, count);  // 1.0
    const uint64_t seed = 0x0123456789abcdefull, offset = (uint64_t{1} << 32) + 3;
    const uint32_t threshold = ampx::impl::math::dropout_threshold(0.5);
    ampx_test::nn_of(b.gpu).dropout(x.ptr(), x.ptr(), DType::F16, count, seed, offset, threshold,
                                    2.0f);
    const int64_t tail = 61;
    std::vector<uint16_t> got(static_cast<size_t>(tail));
    b.gpu->copy_to_host(got.data(), x.ptr() + 2 * (count - tail), got.size() * 2);
    const ampx::impl::math::PhiloxKey key = ampx::impl::math::dropout_key(seed);
    size_t wrong = 0;
    for (int64_t i = count - tail; i < count; ++i) {
      const ampx::impl::math::Philox4x32 words =
          ampx::impl::math::dropout_block(key, offset, static_cast<uint64_t>(i / 4));
      const uint16_t want = ampx::impl::math::float_to_half(
          ampx::impl::math::dropout_value(1.0f, words.v[i % 4], threshold, 2.0f));
      wrong += got[static_cast<size_t>(i - (count - tail))] != want;
    }
    CHECK_MESSAGE(wrong == 0, "dropout tail: ", wrong, " wrong elements");
  }
}

#endif  // AMPX_WITH_CUDA
