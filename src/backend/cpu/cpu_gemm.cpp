// cpu_gemm.cpp -- GEMM on the CPU (Backend::gemm; the contract is GemmArgs
// in backend.h).
//
// BF16 products go to oneDNN when the CPU multiplies bf16 natively
// (dnnl_matmul.h); what it does not take is computed here.
//
// Every product here is an fp32 one. F16/BF16 inputs are converted to fp32 with
// convert_bulk tile by tile into scratch buffers, so the extra memory stays
// bounded (kScratchFloats) whatever the shapes; a low-precision C is
// accumulated in an fp32 tile, alpha, beta and the bias included, and rounded
// once at the end. The fp32 multiply is CBLAS's sgemm when one could be loaded
// (cblas_loader.h: OpenBLAS by default), otherwise the cache-blocked kernel
// below.
//
// Threads: at no moment do more than pool.size() threads compute.
//  - A batch of small products (kSmallProduct) is shared out over the pool,
//    each product whole on one thread: splitting a small product costs more
//    in synchronisation than it gains. OpenBLAS is held to one thread then.
//  - Otherwise the products run one after the other, each on every thread:
//    the pool converts tiles, and the multiply is split either by the
//    built-in kernel over the pool or by OpenBLAS over its own threads while
//    the pool's workers sleep. OpenBLAS's thread count is process-wide, so
//    it is set to the pool's size for the length of one gemm call and then
//    restored: a host that uses the same OpenBLAS keeps its own setting, and
//    a context created with num_threads = 1 really stays on one core. (Two
//    contexts multiplying on two threads at once race on that setting: a
//    call may run with, or leave behind, the other context's count.) A
//    CBLAS other than OpenBLAS threads itself by its own settings.
#include "backend/cpu/cpu_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/cblas_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dnnl_matmul.h"
#include "core/convert_bulk.h"
#include "core/error.h"

namespace ampx::impl {
namespace cpu {
namespace {

// fp32 elements of scratch per thread for converted tiles: 16 MiB, so a
// 1024^3 product in bf16 converts in one piece and huge ones stay bounded.
constexpr int64_t kScratchFloats = int64_t{1} << 22;

// Multiply-adds per product up to which a batch is spread over the pool one
// product per thread (OpenBLAS itself stops splitting below about 64^3).
constexpr double kSmallProduct = 128.0 * 128.0 * 128.0;

// Multiply-adds below which work stays on the calling thread: waking the
// pool's workers costs microseconds.
constexpr double kParallelWork = 64.0 * 64.0 * 64.0;

// Elements per part when the pool converts a tile.
constexpr int64_t kConvertGrain = int64_t{1} << 15;

// One fp32 product on one matrix: C = alpha * op(A) * op(B) + beta * C,
// row-major with leading dimensions; beta == 0 ignores C's old contents.
struct Sgemm {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* a = nullptr;
  int64_t lda = 1;
  const float* b = nullptr;
  int64_t ldb = 1;
  float* c = nullptr;
  int64_t ldc = 1;
};

// Runs one Sgemm on the pool's threads, or on the calling thread alone when
// pool is nullptr.
using SgemmFn = void (*)(ThreadPool* pool, const Sgemm& s);

const void* at(const void* p, DType type, int64_t elements) {
  return static_cast<const char*>(p) + elements * static_cast<int64_t>(dtype_size(type));
}
void* at(void* p, DType type, int64_t elements) {
  return static_cast<char*>(p) + elements * static_cast<int64_t>(dtype_size(type));
}

// A leading dimension as BLAS requires it: at least 1, even for 0 columns.
int64_t ld(int64_t columns) { return std::max<int64_t>(columns, 1); }

// Converts a rows x cols block between row-major matrices of leading
// dimensions dst_ld and src_ld.
void convert_block(ThreadPool* pool, void* dst, DType dst_type, int64_t dst_ld, const void* src,
                   DType src_type, int64_t src_ld, int64_t rows, int64_t cols) {
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      convert_bulk(at(dst, dst_type, r * dst_ld), dst_type, at(src, src_type, r * src_ld),
                   src_type, cols);
  };
  if (pool == nullptr) {
    run(0, rows);
    return;
  }
  pool->parallel_for(rows, std::max<int64_t>(1, kConvertGrain / ld(cols)), run);
}

// The bias epilogue (GemmArgs) on a rows x cols block of fp32 C, leading
// dimension ldc, whose first column is column j0 of C; `bias` is the whole
// bias already in fp32.
void add_bias(ThreadPool* pool, const float* bias, float* c, int64_t ldc, int64_t rows,
              int64_t cols, int64_t j0) {
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = c + r * ldc;
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[j0 + j];
    }
  };
  if (pool == nullptr) {
    run(0, rows);
    return;
  }
  pool->parallel_for(rows, std::max<int64_t>(1, kConvertGrain / ld(cols)), run);
}

// Tile sizes for the conversions: the whole product when its fp32 copies
// fit in kScratchFloats, otherwise the largest dimension halved until they
// do. Square-ish tiles convert the fewest elements per multiply-add.
struct Tiles {
  int64_t m, n, k;
  bool c_scratch;
  int64_t floats() const { return m * k + k * n + (c_scratch ? m * n : 0); }
};

Tiles plan_tiles(const GemmArgs& g) {
  Tiles t{g.m, g.n, g.k, g.c_type != DType::F32};
  while (t.floats() > kScratchFloats) {
    int64_t& largest = t.m >= t.n && t.m >= t.k ? t.m : t.n >= t.k ? t.n : t.k;
    largest = (largest + 1) / 2;
  }
  return t;
}

// A thread's scratch, grown on demand and reused across a batch.
class Scratch {
 public:
  float* get(int64_t floats) {
    if (floats > size_) {
      data_.reset(new float[static_cast<size_t>(floats)]);
      size_ = floats;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[]> data_;
  int64_t size_ = 0;
};

// Product `index` of the batch.
void multiply_one(ThreadPool* pool, const GemmArgs& g, const Tiles& tiles, int64_t index,
                  SgemmFn fn, Scratch& scratch) {
  std::vector<float> bias;
  if (g.bias) {
    bias.resize(static_cast<size_t>(g.n));
    convert_bulk(bias.data(), DType::F32, g.bias, g.c_type, g.n);
  }
  const int64_t lda = g.trans_a ? g.m : g.k;  // as stored
  const int64_t ldb = g.trans_b ? g.k : g.n;
  const void* a = at(g.a, g.ab_type, index * g.a_batch_stride);
  const void* b = at(g.b, g.ab_type, index * g.b_batch_stride);
  void* c = at(g.c, g.c_type, index * g.c_batch_stride);

  Sgemm s;
  s.trans_a = g.trans_a;
  s.trans_b = g.trans_b;
  s.alpha = g.alpha;
  if (g.ab_type == DType::F32) {
    s.m = g.m, s.n = g.n, s.k = g.k, s.beta = g.beta;
    s.a = static_cast<const float*>(a), s.lda = ld(lda);
    s.b = static_cast<const float*>(b), s.ldb = ld(ldb);
    s.c = static_cast<float*>(c), s.ldc = g.n;
    fn(pool, s);
    if (g.bias) add_bias(pool, bias.data(), s.c, g.n, g.m, g.n, 0);
    return;
  }

  float* a_tile = scratch.get(tiles.floats());
  float* b_tile = a_tile + tiles.m * tiles.k;
  float* c_tile = b_tile + tiles.k * tiles.n;
  for (int64_t i0 = 0; i0 < g.m; i0 += tiles.m) {
    s.m = std::min(tiles.m, g.m - i0);
    for (int64_t j0 = 0; j0 < g.n; j0 += tiles.n) {
      s.n = std::min(tiles.n, g.n - j0);
      void* c_block = at(c, g.c_type, i0 * g.n + j0);
      if (tiles.c_scratch) {
        s.c = c_tile, s.ldc = s.n;
        if (g.beta != 0.0f)
          convert_block(pool, c_tile, DType::F32, s.n, c_block, g.c_type, g.n, s.m, s.n);
      } else {
        s.c = static_cast<float*>(c_block), s.ldc = g.n;
      }
      s.beta = g.beta;
      // At least one pass, so that k == 0 still applies beta.
      int64_t k0 = 0;
      do {
        s.k = std::min(tiles.k, g.k - k0);
        // The tiles keep A's and B's stored orientation; sgemm transposes.
        if (g.trans_a) {
          convert_block(pool, a_tile, DType::F32, s.m, at(a, g.ab_type, k0 * lda + i0), g.ab_type,
                        lda, s.k, s.m);
          s.lda = ld(s.m);
        } else {
          convert_block(pool, a_tile, DType::F32, s.k, at(a, g.ab_type, i0 * lda + k0), g.ab_type,
                        lda, s.m, s.k);
          s.lda = ld(s.k);
        }
        if (g.trans_b) {
          convert_block(pool, b_tile, DType::F32, s.k, at(b, g.ab_type, j0 * ldb + k0), g.ab_type,
                        ldb, s.n, s.k);
          s.ldb = ld(s.k);
        } else {
          convert_block(pool, b_tile, DType::F32, s.n, at(b, g.ab_type, k0 * ldb + j0), g.ab_type,
                        ldb, s.k, s.n);
          s.ldb = ld(s.n);
        }
        s.a = a_tile, s.b = b_tile;
        fn(pool, s);
        s.beta = 1.0f;
        k0 += s.k;
      } while (k0 < g.k);
      if (g.bias) add_bias(pool, bias.data(), s.c, s.ldc, s.m, s.n, j0);
      if (tiles.c_scratch)
        convert_block(pool, c_block, g.c_type, g.n, c_tile, DType::F32, s.n, s.m, s.n);
    }
  }
}

// Whether the batch is shared out one product per thread (see the top).
// Products whose C blocks overlap keep their order instead.
bool spread_batch(const ThreadPool& pool, const GemmArgs& g) {
  return pool.size() > 1 && g.batch > 1 &&
         static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) <=
             kSmallProduct &&
         std::llabs(g.c_batch_stride) >= g.m * g.n;
}

void run_gemm(ThreadPool& pool, const GemmArgs& g, bool spread, SgemmFn fn) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  const Tiles tiles = plan_tiles(g);
  if (!spread) {
    Scratch scratch;
    for (int64_t i = 0; i < g.batch; ++i) multiply_one(&pool, g, tiles, i, fn, scratch);
    return;
  }
  const double work = static_cast<double>(g.m) * static_cast<double>(g.n) *
                      static_cast<double>(std::max<int64_t>(g.k, 1));
  const auto grain = static_cast<int64_t>(std::max(1.0, kParallelWork / work));
  pool.parallel_for(g.batch, grain, [&](int64_t first, int64_t last) {
    Scratch scratch;
    for (int64_t i = first; i < last; ++i) multiply_one(nullptr, g, tiles, i, fn, scratch);
  });
}

// ---- CBLAS ------------------------------------------------------------------

int blas_int(int64_t v) {
  if (v > INT_MAX)
    fail(AMPX_ERR_NOT_SUPPORTED, "gemm: dimension ", v, " is beyond CBLAS's int (", INT_MAX, ")");
  return static_cast<int>(v);
}

void blas_sgemm(ThreadPool*, const Sgemm& s) {
  constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  loaded_cblas()->sgemm(kRowMajor, s.trans_a ? kTrans : kNoTrans, s.trans_b ? kTrans : kNoTrans,
                        blas_int(s.m), blas_int(s.n), blas_int(s.k), s.alpha, s.a,
                        blas_int(s.lda), s.b, blas_int(s.ldb), s.beta, s.c, blas_int(s.ldc));
}

// Sets OpenBLAS's process-wide thread count for one gemm call (see the top);
// does nothing for another CBLAS.
class OpenBlasThreads {
 public:
  OpenBlasThreads(const Cblas& blas, int threads)
      : blas_(blas), saved_(blas.get_num_threads ? blas.get_num_threads() : 0) {
    if (blas_.set_num_threads && threads != saved_) blas_.set_num_threads(threads);
  }
  ~OpenBlasThreads() {
    if (blas_.set_num_threads && blas_.get_num_threads() != saved_) blas_.set_num_threads(saved_);
  }
  OpenBlasThreads(const OpenBlasThreads&) = delete;
  OpenBlasThreads& operator=(const OpenBlasThreads&) = delete;

 private:
  const Cblas& blas_;
  int saved_;
};

// ---- the built-in fp32 kernel ---------------------------------------------
// Goto's blocking: C is cut into kMc x kNc tiles, shared among the pool's
// threads. For each kKc-deep slice of k, a tile's blocks of op(A) and op(B)
// are packed into panels of Mr rows and Nr columns -- transposing while
// packing, so all four transpose cases read memory the same way afterwards
// -- and a micro-kernel keeps Mr x Nr sums of C in registers: its inner
// loop multiplies one element of A by Nr consecutive elements of B, which
// the compiler turns into vector multiply-adds. The packed A block (96 KiB)
// stays in L2 and each B panel (16 KiB at most) in L1 while in use.

constexpr int64_t kKc = 256;
constexpr int64_t kMc = 96;   // a multiple of every Mr below
constexpr int64_t kNc = 256;  // a multiple of every Nr below

// The packed A block times the packed B block, both `depth` deep, stored
// into the rows x cols block of C at c: C = alpha * AB + beta * C, where
// beta == 0 ignores C.
using BlockKernel = void (*)(int64_t rows, int64_t cols, int64_t depth, const float* a_packed,
                             const float* b_packed, float alpha, float beta, float* c, int64_t ldc);

// Eight floats: one AVX register, or two SSE ones in the baseline build.
// The sums are vectors of this type because GCC, having unrolled the loops
// over a plain float array of sums, keeps that array on the stack and runs
// about ten times slower.
typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLanes = 8;

template <int Mr, int Nr>
__attribute__((always_inline)) inline void block_kernel(int64_t rows, int64_t cols, int64_t depth,
                                                        const float* a_packed,
                                                        const float* b_packed, float alpha,
                                                        float beta, float* c, int64_t ldc) {
  constexpr int kVectors = Nr / kLanes;
  for (int64_t j = 0; j < cols; j += Nr) {
    const float* b_panel = b_packed + j * depth;
    for (int64_t i = 0; i < rows; i += Mr) {
      const float* a_panel = a_packed + i * depth;
      Lanes sums[Mr][kVectors] = {};
      for (int64_t p = 0; p < depth; ++p) {
        Lanes b[kVectors];
        std::memcpy(b, b_panel + p * Nr, sizeof b);
        for (int r = 0; r < Mr; ++r)
          for (int v = 0; v < kVectors; ++v) sums[r][v] += a_panel[p * Mr + r] * b[v];
      }
      const int64_t live_rows = std::min<int64_t>(Mr, rows - i);
      const int64_t live_cols = std::min<int64_t>(Nr, cols - j);
      for (int64_t r = 0; r < live_rows; ++r) {
        float sum[Nr];
        std::memcpy(sum, sums[r], sizeof sum);
        float* out = c + (i + r) * ldc + j;
        for (int64_t x = 0; x < live_cols; ++x)
          out[x] = beta == 0.0f ? alpha * sum[x] : alpha * sum[x] + beta * out[x];
      }
    }
  }
}

// The baseline build's 16 vector registers hold 6 x 8 sums (12 SSE
// registers); AVX2 holds 6 x 16 in 12 of its 16 wider ones.
void block_kernel_baseline(int64_t rows, int64_t cols, int64_t depth, const float* a_packed,
                           const float* b_packed, float alpha, float beta, float* c, int64_t ldc) {
  block_kernel<6, 8>(rows, cols, depth, a_packed, b_packed, alpha, beta, c, ldc);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPX_GEMM_AVX2 1
__attribute__((target("avx2,fma"))) void block_kernel_avx2(int64_t rows, int64_t cols,
                                                           int64_t depth, const float* a_packed,
                                                           const float* b_packed, float alpha,
                                                           float beta, float* c, int64_t ldc) {
  block_kernel<6, 16>(rows, cols, depth, a_packed, b_packed, alpha, beta, c, ldc);
}
#endif

struct KernelChoice {
  BlockKernel fn;
  int64_t mr, nr;
};

// Follows detected_cpu_isa(), so AMPX_CPU_ISA=scalar selects the baseline.
KernelChoice choose_kernel() {
#if AMPX_GEMM_AVX2
  if (detected_cpu_isa() != CpuIsa::Scalar) return {block_kernel_avx2, 6, 16};
#endif
  return {block_kernel_baseline, 6, 8};
}

// op(A)[i0 + i][p0 + p] for i < rows, p < depth, as panels of mr rows: a
// panel holds, for each p in turn, its mr elements of column p. Rows past
// `rows` are zeros.
void pack_a(const Sgemm& s, int64_t i0, int64_t rows, int64_t p0, int64_t depth, int64_t mr,
            float* out) {
  for (int64_t q = 0; q < rows; q += mr) {
    const int64_t live = std::min(mr, rows - q);
    for (int64_t p = 0; p < depth; ++p, out += mr) {
      for (int64_t r = 0; r < live; ++r)
        out[r] = s.trans_a ? s.a[(p0 + p) * s.lda + i0 + q + r] : s.a[(i0 + q + r) * s.lda + p0 + p];
      std::fill(out + live, out + mr, 0.0f);
    }
  }
}

// op(B)[p0 + p][j0 + j] for p < depth, j < cols, as panels of nr columns: a
// panel holds, for each p in turn, its nr elements of row p. Columns past
// `cols` are zeros.
void pack_b(const Sgemm& s, int64_t p0, int64_t depth, int64_t j0, int64_t cols, int64_t nr,
            float* out) {
  for (int64_t q = 0; q < cols; q += nr) {
    const int64_t live = std::min(nr, cols - q);
    for (int64_t p = 0; p < depth; ++p, out += nr) {
      for (int64_t x = 0; x < live; ++x)
        out[x] = s.trans_b ? s.b[(j0 + q + x) * s.ldb + p0 + p] : s.b[(p0 + p) * s.ldb + j0 + q + x];
      std::fill(out + live, out + nr, 0.0f);
    }
  }
}

// C = beta * C, beta == 0 writing zeros: the whole product when alpha or k
// is 0, where BLAS reads neither A nor B either.
void scale_c(ThreadPool* pool, const Sgemm& s) {
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = s.c + r * s.ldc;
      if (s.beta == 0.0f)
        std::fill(row, row + s.n, 0.0f);
      else
        for (int64_t j = 0; j < s.n; ++j) row[j] *= s.beta;
    }
  };
  if (pool == nullptr)
    run(0, s.m);
  else
    pool->parallel_for(s.m, std::max<int64_t>(1, kConvertGrain / ld(s.n)), run);
}

void builtin_sgemm(ThreadPool* pool, const Sgemm& s) {
  if (s.alpha == 0.0f || s.k == 0) {
    scale_c(pool, s);
    return;
  }
  const KernelChoice kernel = choose_kernel();
  const int64_t col_tiles = (s.n + kNc - 1) / kNc;
  const int64_t tiles = (s.m + kMc - 1) / kMc * col_tiles;
  auto run = [&](int64_t first, int64_t last) {
    std::unique_ptr<float[]> a_packed(new float[kMc * kKc]);
    std::unique_ptr<float[]> b_packed(new float[kKc * kNc]);
    for (int64_t t = first; t < last; ++t) {
      const int64_t i0 = t / col_tiles * kMc, j0 = t % col_tiles * kNc;
      const int64_t rows = std::min(kMc, s.m - i0), cols = std::min(kNc, s.n - j0);
      for (int64_t p0 = 0; p0 < s.k; p0 += kKc) {
        const int64_t depth = std::min(kKc, s.k - p0);
        pack_a(s, i0, rows, p0, depth, kernel.mr, a_packed.get());
        pack_b(s, p0, depth, j0, cols, kernel.nr, b_packed.get());
        kernel.fn(rows, cols, depth, a_packed.get(), b_packed.get(), s.alpha,
                  p0 == 0 ? s.beta : 1.0f, s.c + i0 * s.ldc + j0, s.ldc);
      }
    }
  };
  const double work =
      static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  if (pool == nullptr || work < kParallelWork)
    run(0, tiles);
  else
    pool->parallel_for(tiles, 1, run);
}

}  // namespace

void gemm_fallback(ThreadPool& pool, const GemmArgs& args) {
  check_gemm_args(args);  // called directly by the tests, past the front door
  run_gemm(pool, args, spread_batch(pool, args), builtin_sgemm);
}

void gemm(ThreadPool& pool, const GemmArgs& args) {
  if (dnnl_gemm(pool, args)) return;
  const Cblas* blas = loaded_cblas();
  if (!blas) {
    run_gemm(pool, args, spread_batch(pool, args), builtin_sgemm);
    return;
  }
  const bool spread = spread_batch(pool, args);
  const OpenBlasThreads threads(*blas, spread ? 1 : pool.size());
  run_gemm(pool, args, spread, blas_sgemm);
}

}  // namespace cpu
}  // namespace ampx::impl
