// gather_scatter.cu -- the row primitives of embeddings:
//
//   gather_rows       out row i = table row indices[i]          (raw bytes)
//                     when 0 <= indices[i] < table_rows, else a row of
//                     zero bytes
//   scatter_add_rows  dst row indices[i] += src row i, in fp32, every dst
//                     row receiving its additions in increasing order of i;
//                     an index outside [0, dst_rows) adds nothing
//
// Indices are not validated before these run (the op checks them on the
// device and reports a bad one later), so both kernels bound every index
// themselves and never read or write outside table / dst, whatever the
// indices hold. An index is compared as the unsigned 64-bit value of its
// sign extension, so one unsigned comparison against the row count rejects
// negative indices (huge as unsigned) and those >= the row count alike.
//
// gather_rows copies each row as words of the widest size (16, 8, 4, 2 or 1
// bytes) that divides row_bytes and both base addresses, so every row of
// both arrays starts aligned to it. A group of threads (a power of two up to
// the block, matched to the row's word count) copies a piece of a row; long
// rows are cut into pieces of up to kGatherWordsPerThread words per thread
// so that one row still spreads over many blocks. All threads of a group
// work on the same row, so the bound check of its index (copy, or write
// zero words) never diverges inside a group. Memory traffic: each gathered
// row is read once (a row gathered twice is read twice, the second time
// often from L2) and each output row written once; each index is read once
// per thread group.
//
// scatter_add_rows must give the CPU's bits: element (r, c) of dst is the
// fp32 chain ((dst + a_i1) + a_i2) + ... over the positions i1 < i2 < ...
// with indices[i] == r. Floating atomics would add in whatever order the
// hardware picks, so instead the positions are grouped by row first:
//
//  1. sort: a stable least-significant-digit radix sort (8-bit digits) of
//     the pairs (key(indices[i]), i) -- stability keeps the positions of
//     each row in increasing order. Each pass is a histogram per block of a
//     contiguous range (kernel 1), an exclusive scan over [digit][block]
//     (kernel 2, one block), and a stable scatter (kernel 3) that ranks each
//     256-element tile with __match_any_sync and per-warp digit counts. The
//     largest key is found on the device while the keys are written, and
//     the passes above its highest digit return at once, so an embedding of
//     50k rows costs two passes; the host cannot read the indices, so it
//     enqueues the passes the largest possible key could need (below).
//
//     Keys. Let limit = min(dst_rows, 2^31) for I32 indices and dst_rows
//     for I64 (dst_rows < 0 counts as 0). An index v with 0 <= v < limit
//     -- exactly the valid ones: an I32 index is below 2^31 anyway -- has
//     key v; every other index (negative, >= dst_rows, INT32_MIN, INT64_MAX
//     ...) has the one sentinel key `limit`. So
//       - every key is <= limit < 2^63, and valid keys are < limit: the
//         out-of-range positions sort after all valid ones, in one run,
//         and never share a key with a valid row (even when limit = 2^31
//         is itself a valid row number of a dst with more rows);
//       - the sort needs at most digits(limit) passes: at most 4 for I32
//         (limit <= 2^31, 32 bits) and 8 for I64 (limit < 2^63), and only
//         as many as dst_rows needs however bad the indices are. The host
//         enqueues digits(limit) passes (0 when limit is 0); the device
//         runs digits(largest key) <= that many, the rest return at once.
//     Mapping a negative index to its sign-extended 64-bit value instead
//     would give I32 keys of 64 bits, which 4 passes would not sort.
//  2. walk: in each 256-position tile of the sorted order, the positions
//     where a new row starts are compacted in shared memory -- except the
//     start of the sentinel run (key == limit), which no walker takes, so
//     out-of-range positions read no src and write no dst -- and one thread
//     per (row start, column) adds that row's src rows into dst in order,
//     holding the running fp32 value in a register. Every (row, column) has
//     exactly one walker, so nothing is written twice; long rows (many
//     columns) are cut into pieces of kWalkPieceCols so the walkers of one
//     row start spread over many blocks. A row's chain is sequential by
//     the contract, so the walk takes as long as the most repeated index.
//
// The sort is written here rather than taken from CUB: CUB's dispatch
// checks its launches with cudaPeekAtLastError, which also returns a
// failure the host program left in the thread's last-error slot (e.g. the
// cudaErrorNotReady of a cudaStreamQuery), and that would fail this launch
// (see enqueue in fill_convert.cuh).
//
// Memory traffic of the scatter: the first kernel reads the indices and
// writes 16 bytes (key, position) per position; each active pass reads the
// keys twice and the positions once and writes both (40 bytes per
// position); the walk reads each src row with a valid index once and
// each touched dst row once, and writes it once.
//
// Scratch layout (scatter_add_rows_scratch_bytes), every part 256-byte
// aligned: keys[2][count] (uint64), positions[2][count] (int64), the
// [blocks][256] digit counts/offsets of the sort (int64), and the largest
// key (one word). Contents on entry do not matter: the largest key is
// zeroed with cudaMemsetAsync, everything else is written before it is read.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "math/convert.h"
#include "multi_tensor.cuh"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

constexpr int kWarps = kBlockThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Calls fn(Index{}) with the index element type (int32_t or int64_t).
template <class Fn>
cudaError_t with_index_type(DType index_type, Fn&& fn) {
  switch (index_type) {
    case DType::I32: return fn(int32_t{});
    case DType::I64: return fn(int64_t{});
    default: return cudaErrorInvalidValue;
  }
}

__device__ __forceinline__ unsigned lanes_below(int lane) { return (1u << lane) - 1u; }

// ---- gather ------------------------------------------------------------------

// A thread copies up to 16 words of a piece: enough to amortise the index
// read, while a long row still yields a piece per block of many blocks.
constexpr int64_t kGatherWordsPerThread = 16;

// Groups of 2^shift threads; a group copies one piece of `piece` words
// (2^shift * kGatherWordsPerThread, or the whole row when shorter) per step,
// or writes zero words there when the row's index is outside
// [0, table_rows) (table_rows >= 0).
template <class Word, class Index>
__global__ void __launch_bounds__(kBlockThreads)
    gather_rows_kernel(const Word* table, int64_t words, uint64_t table_rows,
                       const Index* indices, int64_t count, Word* out, int shift, int64_t piece,
                       int64_t pieces) {
  const int64_t group_threads = int64_t{1} << shift;
  const int64_t lane = threadIdx.x & (group_threads - 1);
  const int64_t groups_per_block = kBlockThreads >> shift;
  const int64_t units = count * pieces;
  const int64_t step = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t u = blockIdx.x * groups_per_block + (threadIdx.x >> shift); u < units; u += step) {
    // Most rows are one piece: no division then.
    const int64_t r = pieces == 1 ? u : u / pieces;
    const int64_t begin = (u - r * pieces) * piece;
    const int64_t end = begin + piece < words ? begin + piece : words;
    Word* to = out + r * words;
    // Negative indices are huge as unsigned: one comparison bounds both ends.
    const auto index = static_cast<uint64_t>(static_cast<int64_t>(indices[r]));
    if (index < table_rows) {
      const Word* from = table + static_cast<int64_t>(index) * words;
      for (int64_t w = begin + lane; w < end; w += group_threads) to[w] = from[w];
    } else {
      for (int64_t w = begin + lane; w < end; w += group_threads) to[w] = Word{};
    }
  }
}

template <class Word>
cudaError_t enqueue_gather(const void* table, size_t row_bytes, uint64_t table_rows,
                           const void* indices, DType index_type, int64_t count, void* out,
                           const LaunchConfig& launch) {
  const auto words = static_cast<int64_t>(row_bytes / sizeof(Word));
  int shift = 0;
  while ((int64_t{1} << shift) < words && (1 << shift) < kBlockThreads) ++shift;
  const int64_t group_threads = int64_t{1} << shift;
  const int64_t piece_cap = group_threads * kGatherWordsPerThread;
  const int64_t piece = words < piece_cap ? words : piece_cap;
  const int64_t pieces = (words + piece - 1) / piece;
  const int64_t units = count * pieces;
  return with_index_type(index_type, [&](auto index) {
    using Index = decltype(index);
    return enqueue(gather_rows_kernel<Word, Index>,
                   grid_blocks(units * group_threads, launch), launch,
                   static_cast<const Word*>(table), words, table_rows,
                   static_cast<const Index*>(indices), count, static_cast<Word*>(out), shift,
                   piece, pieces);
  });
}

// ---- scatter: the radix sort -----------------------------------------------

constexpr int kRadixBits = 8;
constexpr int kBuckets = 1 << kRadixBits;
static_assert(kBuckets == kBlockThreads, "one thread per digit in the scan and offset updates");

// At least 8 tiles of 256 positions per sort block, at most 512 blocks: the
// scan (one block) walks the [block][digit] table serially per digit, so
// fewer, longer ranges keep it short, while 512 blocks still fill an H200.
constexpr int64_t kSortMinLength = 8 * kBlockThreads;
constexpr int kSortMaxBlocks = 512;

struct SortPlan {
  int64_t length;  // positions per block (the last block may have fewer)
  int64_t blocks;
};

SortPlan plan_sort(int64_t count, const LaunchConfig& launch) {
  const int64_t cap = launch.max_blocks < kSortMaxBlocks ? launch.max_blocks : kSortMaxBlocks;
  int64_t length = (count + cap - 1) / cap;
  if (length < kSortMinLength) length = kSortMinLength;
  return {length, (count + length - 1) / length};
}

constexpr size_t kScratchAlign = 256;

size_t aligned(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

struct ScatterScratch {
  uint64_t* keys[2];
  int64_t* positions[2];
  int64_t* offsets;               // [blocks][kBuckets]
  unsigned long long* max_index;  // the largest index
};

// The parts of the scratch, in the order and sizes of scratch_bytes below.
// The base is aligned up first (the allocation is 256-byte aligned already;
// the slack makes the layout independent of that).
ScatterScratch carve(void* scratch, int64_t count, const SortPlan& plan) {
  auto at = (reinterpret_cast<uintptr_t>(scratch) + kScratchAlign - 1) / kScratchAlign *
            kScratchAlign;
  auto take = [&](size_t bytes) {
    void* p = reinterpret_cast<void*>(at);
    at += aligned(bytes);
    return p;
  };
  const size_t n = static_cast<size_t>(count);
  ScatterScratch s;
  s.keys[0] = static_cast<uint64_t*>(take(n * sizeof(uint64_t)));
  s.keys[1] = static_cast<uint64_t*>(take(n * sizeof(uint64_t)));
  s.positions[0] = static_cast<int64_t*>(take(n * sizeof(int64_t)));
  s.positions[1] = static_cast<int64_t*>(take(n * sizeof(int64_t)));
  s.offsets = static_cast<int64_t*>(
      take(static_cast<size_t>(plan.blocks) * kBuckets * sizeof(int64_t)));
  s.max_index = static_cast<unsigned long long*>(take(sizeof(unsigned long long)));
  return s;
}

size_t scratch_bytes(int64_t count, const SortPlan& plan) {
  const size_t n = static_cast<size_t>(count);
  return kScratchAlign + 2 * aligned(n * sizeof(uint64_t)) + 2 * aligned(n * sizeof(int64_t)) +
         aligned(static_cast<size_t>(plan.blocks) * kBuckets * sizeof(int64_t)) +
         aligned(sizeof(unsigned long long));
}

// Passes that sort keys up to max_index (the largest key): one per
// significant digit (none when every key is 0, which is sorted already).
__device__ __forceinline__ int radix_passes(const unsigned long long* max_index) {
  const unsigned long long m = *max_index;
  if (m == 0) return 0;
  const int bits = 64 - __clzll(static_cast<long long>(m));
  return (bits + kRadixBits - 1) / kRadixBits;
}

// keys[i] = the key of indices[i] (the index when below limit, else limit:
// see the top of the file), positions[i] = i, *max_index = the largest key
// (zeroed before; an unsigned max is independent of the order of the
// atomics).
template <class Index>
__global__ void __launch_bounds__(kBlockThreads)
    sort_init_kernel(const Index* indices, int64_t count, uint64_t limit, uint64_t* keys,
                     int64_t* positions, unsigned long long* max_index) {
  unsigned long long largest = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += step) {
    // Negative indices are huge as unsigned, so they get the sentinel too.
    const auto index = static_cast<uint64_t>(static_cast<int64_t>(indices[i]));
    const uint64_t key = index < limit ? index : limit;
    keys[i] = key;
    positions[i] = i;
    if (key > largest) largest = key;
  }
  largest = block_reduce(largest, [](unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
  });
  if (threadIdx.x == 0) atomicMax(max_index, largest);
}

// counts[block][digit] of this block's range. The counters are 32-bit: a
// range holds at most count / 512 + 2048 positions, far below 2^32 for any
// count whose scratch fits in a device.
__global__ void __launch_bounds__(kBlockThreads)
    radix_histogram_kernel(const uint64_t* keys, int64_t count, int64_t length, int pass,
                           const unsigned long long* max_index, int64_t* counts) {
  if (pass >= radix_passes(max_index)) return;
  __shared__ unsigned int histogram[kBuckets];
  histogram[threadIdx.x] = 0;
  __syncthreads();
  const int shift = pass * kRadixBits;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * length;
  const int64_t end = begin + length < count ? begin + length : count;
  for (int64_t j = begin + threadIdx.x; j < end; j += kBlockThreads)
    atomicAdd(&histogram[(keys[j] >> shift) & (kBuckets - 1)], 1u);
  __syncthreads();
  counts[static_cast<int64_t>(blockIdx.x) * kBuckets + threadIdx.x] = histogram[threadIdx.x];
}

// Exclusive sum over the block's threads, in thread order.
__device__ __forceinline__ int64_t block_exclusive_sum(int64_t v) {
  __shared__ int64_t warp_sums[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const int64_t other = __shfl_up_sync(kFullMask, inclusive, o);
    if (lane >= o) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  return before + inclusive - v;
}

// One block: turns counts[b][d] into the output offset of block b's first
// position with digit d -- all positions of smaller digits, then those of
// digit d in blocks before b (which is what makes the pass stable).
// Thread d walks column d, so each step's loads are coalesced.
__global__ void __launch_bounds__(kBlockThreads)
    radix_scan_kernel(int64_t* counts, int64_t blocks, int pass,
                      const unsigned long long* max_index) {
  if (pass >= radix_passes(max_index)) return;
  const int d = threadIdx.x;
  int64_t total = 0;
  for (int64_t b = 0; b < blocks; ++b) total += counts[b * kBuckets + d];
  int64_t run = block_exclusive_sum(total);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c = counts[b * kBuckets + d];
    counts[b * kBuckets + d] = run;
    run += c;
  }
}

// Moves this block's range to its place by digit, in tiles of 256
// consecutive positions (thread t holds the tile's t-th): a position's rank
// is the running offset of its digit, plus the positions with that digit in
// lower warps of the tile, plus those in lower lanes of its own warp
// (__match_any_sync), so equal digits keep their order.
__global__ void __launch_bounds__(kBlockThreads)
    radix_scatter_kernel(const uint64_t* keys_in, const int64_t* positions_in,
                         uint64_t* keys_out, int64_t* positions_out, int64_t count,
                         int64_t length, int pass, const unsigned long long* max_index,
                         const int64_t* offsets) {
  if (pass >= radix_passes(max_index)) return;
  __shared__ int64_t run[kBuckets];
  __shared__ unsigned int warp_counts[kWarps][kBuckets];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  run[threadIdx.x] = offsets[static_cast<int64_t>(blockIdx.x) * kBuckets + threadIdx.x];
  const int shift = pass * kRadixBits;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * length;
  const int64_t end = begin + length < count ? begin + length : count;
  // Every thread runs every tile (the syncs and __match_any_sync need the
  // whole block); those past the end hold no position.
  for (int64_t tile = begin; tile < end; tile += kBlockThreads) {
    const int64_t j = tile + threadIdx.x;
    const bool valid = j < end;
    uint64_t key = 0;
    int64_t position = 0;
    unsigned int digit = 0xffffffffu;  // matches only other empty lanes
    if (valid) {
      key = keys_in[j];
      position = positions_in[j];
      digit = static_cast<unsigned int>(key >> shift) & (kBuckets - 1);
    }
    for (int d = lane; d < kBuckets; d += 32) warp_counts[warp][d] = 0;
    __syncwarp();
    const unsigned peers = __match_any_sync(kFullMask, digit);
    // The highest lane of each digit group records the group's size.
    if (valid && (peers >> lane) == 1u) warp_counts[warp][digit] = __popc(peers);
    __syncthreads();  // also orders the first tile after run's initialisation
    if (valid) {
      int64_t at = run[digit] + __popc(peers & lanes_below(lane));
      for (int w = 0; w < warp; ++w) at += warp_counts[w][digit];
      keys_out[at] = key;
      positions_out[at] = position;
    }
    __syncthreads();
    int64_t tile_count = 0;
    for (int w = 0; w < kWarps; ++w) tile_count += warp_counts[w][threadIdx.x];
    run[threadIdx.x] += tile_count;
    __syncthreads();  // the next tile clears warp_counts and reads run
  }
}

// ---- scatter: the ordered walk ---------------------------------------------

// Columns per piece of a walk: a row start's pieces go to different blocks,
// so a few rows of many columns still spread over the device.
constexpr int64_t kWalkPieceCols = 4 * kBlockThreads;

// Units are (tile of 256 sorted positions, piece of columns). The sorted
// order is in buffer passes % 2 (each pass moves it to the other buffer).
// Keys >= limit (the sentinel of the out-of-range indices, which sorts
// last) start no walk; every other key is a row of dst.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    scatter_walk_kernel(const Elem<D>* src, int64_t cols, ScatterScratch scratch, int64_t count,
                        int64_t pieces, uint64_t limit, float* dst) {
  // Selected, not indexed: indexing a parameter array with a run-time value
  // would copy it to local memory.
  const bool odd = radix_passes(scratch.max_index) % 2 != 0;
  const uint64_t* keys = odd ? scratch.keys[1] : scratch.keys[0];
  const int64_t* positions = odd ? scratch.positions[1] : scratch.positions[0];
  __shared__ int64_t starts[kBlockThreads];
  __shared__ int warp_starts[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = (count + kBlockThreads - 1) / kBlockThreads;
  const int64_t units = tiles * pieces;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t tile = pieces == 1 ? u : u / pieces;
    const int64_t col_begin = (u - tile * pieces) * kWalkPieceCols;
    const int64_t piece_cols =
        cols - col_begin < kWalkPieceCols ? cols - col_begin : kWalkPieceCols;
    // The tile's row starts, compacted in order; the sentinel run's start
    // is left out (nothing of it is added anywhere).
    const int64_t j = tile * kBlockThreads + threadIdx.x;
    const bool start = j < count && keys[j] < limit && (j == 0 || keys[j] != keys[j - 1]);
    const unsigned ballot = __ballot_sync(kFullMask, start);
    if (lane == 0) warp_starts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += warp_starts[w];
      total += warp_starts[w];
    }
    if (start) starts[before + __popc(ballot & lanes_below(lane))] = j;
    __syncthreads();
    // Consecutive threads take consecutive columns of one row start, so the
    // src and dst accesses of a step are coalesced and the key and position
    // reads are broadcasts.
    const int64_t walkers = total * piece_cols;
    for (int64_t t = threadIdx.x; t < walkers; t += kBlockThreads) {
      const int64_t s = t / piece_cols;
      const int64_t c = col_begin + (t - s * piece_cols);
      const int64_t first = starts[s];
      const uint64_t row = keys[first];
      float* out = dst + static_cast<int64_t>(row) * cols + c;
      float sum = *out;
      // The walk stops at the next key: a valid row's run never reaches
      // into the sentinel run, which differs from every valid key.
      for (int64_t p = first; p < count && keys[p] == row; ++p)
        sum += math::load_float<D>(src[positions[p] * cols + c]);
      *out = sum;
    }
    __syncthreads();  // the next unit rewrites starts and warp_starts
  }
}

}  // namespace

cudaError_t launch_gather_rows(const void* table, size_t row_bytes, int64_t table_rows,
                               const void* indices, DType index_type, int64_t count, void* out,
                               const LaunchConfig& launch) {
  if (count <= 0 || row_bytes == 0) return cudaSuccess;
  // No rows (or a negative count of them): every index is out of range and
  // every output row zero; the table is never read.
  const uint64_t rows = table_rows > 0 ? static_cast<uint64_t>(table_rows) : 0;
  // The widest word dividing the row size and both bases.
  const uintptr_t bits =
      static_cast<uintptr_t>(row_bytes) | reinterpret_cast<uintptr_t>(table) |
      reinterpret_cast<uintptr_t>(out);
  auto copy = [&](auto word) {
    return enqueue_gather<decltype(word)>(table, row_bytes, rows, indices, index_type, count,
                                          out, launch);
  };
  if (bits % 16 == 0) return copy(uint4{});
  if (bits % 8 == 0) return copy(uint2{});
  if (bits % 4 == 0) return copy(uint32_t{});
  if (bits % 2 == 0) return copy(uint16_t{});
  return copy(uint8_t{});
}

size_t scatter_add_rows_scratch_bytes(int64_t count, DType /*index_type*/,
                                      const LaunchConfig& launch) {
  if (count <= 0) return 0;
  return scratch_bytes(count, plan_sort(count, launch));
}

cudaError_t launch_scatter_add_rows(const void* src, DType src_type, int64_t cols,
                                    const void* indices, DType index_type, int64_t count,
                                    float* dst, int64_t dst_rows, void* scratch,
                                    const LaunchConfig& launch) {
  if (count <= 0 || cols <= 0) return cudaSuccess;
  if (src_type != DType::F32 && src_type != DType::F16 && src_type != DType::BF16)
    return cudaErrorInvalidValue;
  // The sentinel key of the out-of-range indices, one past the largest valid
  // key (see the top of the file): min(dst_rows, 2^31) for I32, dst_rows for
  // I64. Every key is <= limit, so digits(limit) passes sort them all: at
  // most 4 for I32 (limit <= 2^31) and 8 for I64 (limit < 2^63).
  const uint64_t rows = dst_rows > 0 ? static_cast<uint64_t>(dst_rows) : 0;
  uint64_t limit = 0;
  if (index_type == DType::I32) {
    constexpr uint64_t kI32Rows = uint64_t{1} << 31;  // every I32 index is below
    limit = rows < kI32Rows ? rows : kI32Rows;
  } else if (index_type == DType::I64) {
    limit = rows;
  } else {
    return cudaErrorInvalidValue;
  }
  if (limit == 0) return cudaSuccess;  // no row of dst: every index adds nothing
  int limit_bits = 0;
  while (limit_bits < 64 && (limit >> limit_bits) != 0) ++limit_bits;
  const int max_passes = (limit_bits + kRadixBits - 1) / kRadixBits;
  const SortPlan plan = plan_sort(count, launch);
  const ScatterScratch s = carve(scratch, count, plan);

  cudaError_t status =
      cudaMemsetAsync(s.max_index, 0, sizeof(unsigned long long), launch.stream);
  if (status != cudaSuccess) return status;
  status = with_index_type(index_type, [&](auto index) {
    using Index = decltype(index);
    return enqueue(sort_init_kernel<Index>, grid_blocks(count, launch), launch,
                   static_cast<const Index*>(indices), count, limit, s.keys[0], s.positions[0],
                   s.max_index);
  });
  if (status != cudaSuccess) return status;
  const auto blocks = static_cast<unsigned int>(plan.blocks);
  for (int pass = 0; pass < max_passes; ++pass) {
    const int in = pass % 2, out = 1 - in;
    status = enqueue(radix_histogram_kernel, blocks, launch,
                     static_cast<const uint64_t*>(s.keys[in]), count, plan.length, pass,
                     static_cast<const unsigned long long*>(s.max_index), s.offsets);
    if (status != cudaSuccess) return status;
    status = enqueue(radix_scan_kernel, 1, launch, s.offsets, plan.blocks, pass,
                     static_cast<const unsigned long long*>(s.max_index));
    if (status != cudaSuccess) return status;
    status = enqueue(radix_scatter_kernel, blocks, launch,
                     static_cast<const uint64_t*>(s.keys[in]),
                     static_cast<const int64_t*>(s.positions[in]), s.keys[out], s.positions[out],
                     count, plan.length, pass, static_cast<const unsigned long long*>(s.max_index),
                     static_cast<const int64_t*>(s.offsets));
    if (status != cudaSuccess) return status;
  }

  const int64_t tiles = (count + kBlockThreads - 1) / kBlockThreads;
  const int64_t pieces = (cols + kWalkPieceCols - 1) / kWalkPieceCols;
  const int64_t units = tiles * pieces;
  const unsigned int walk_blocks = static_cast<unsigned int>(
      units < launch.max_blocks ? units : launch.max_blocks);
  return visit_floating(src_type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(scatter_walk_kernel<D>, walk_blocks, launch, static_cast<const Elem<D>*>(src),
                   cols, s, count, pieces, limit, dst);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
