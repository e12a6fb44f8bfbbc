// emulator_test.cpp -- the CUDA emulator's own tests. Other tests trust the
// emulator to behave like a GPU, so here it is checked against references
// computed independently on the host, from CUDA's documented semantics:
//   1. warp collectives: __shfl_sync (negative and over-range sources,
//      widths 8/16/32), __shfl_up/down_sync at segment edges, __shfl_xor_sync
//      on int, float, double and int64; the tensor cores' mma.sync m16n8k16
//      (f16 and bf16) from its fragment layout; __ballot_sync,
//      __match_any_sync; a partial mask;
//   2. block barriers (tree reductions over 1-D/2-D/3-D blocks of up to 1024
//      threads, thread and block indices), atomics from many blocks;
//   3. faults (deadlocks, lanes at different intrinsics) abort the process
//      with a description: each runs in a fork()ed child;
//   4. launch configuration errors and the last error;
//   5. streams (order, asynchrony, staging of pageable copies), 0xff-filled
//      new memory;
//   6. graph capture, its refusals, graph-owned pool memory;
//   7. pointer attributes;
//   8. cuBLASLt: f32 and f16 products against a double reference, the BIAS
//      heuristic rule, a host operand refused;
//   9. the cuDNN stand-in: a convolution against a double reference, and its
//      refusals (short workspace, TF32 math for f32, a freed operand at a
//      graph replay).
// Kernels are plain C++ functions written as CUDA kernels, as ampx's are.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "math/convert.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- helpers -------------------------------------------------------------------

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { REQUIRE(cudaStreamCreate(&handle) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(handle); }
  operator cudaStream_t() const { return handle; }
};

// A device array initialised from the host; it converts to T* for kernels.
template <class T>
struct DeviceArray {
  T* data = nullptr;
  size_t count;
  explicit DeviceArray(const std::vector<T>& init) : count(init.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&data), count * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(data, init.data(), count * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  explicit DeviceArray(size_t n, T fill = T{}) : DeviceArray(std::vector<T>(n, fill)) {}
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  operator T*() const { return data; }
  std::vector<T> read() const {
    std::vector<T> host(count);
    REQUIRE(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    return host;
  }
};

cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, cudaStream_t stream) {
  return cudaLaunchConfig_t{grid, block, 0, stream, nullptr, 0};
}

template <class... Params, class... Args>
void launch(dim3 grid, dim3 block, cudaStream_t stream, void (*kernel)(Params...),
            Args&&... args) {
  const cudaLaunchConfig_t config = launch_config(grid, block, stream);
  REQUIRE(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...) == cudaSuccess);
}

// ---- 1. warp collectives -----------------------------------------------------

enum class Shuffle { Index, Up, Down, Xor };
// The source operand is base + per_lane * lane (it may differ by lane).
struct ShuffleCase {
  Shuffle kind;
  int width, base, per_lane;
};
constexpr ShuffleCase kShuffleCases[] = {
    {Shuffle::Index, 32, 31, -1}, {Shuffle::Index, 32, -5, 3},  // negative, over-range
    {Shuffle::Index, 8, -3, 5},   {Shuffle::Index, 16, 20, -3},
    {Shuffle::Up, 32, 1, 0},      {Shuffle::Up, 32, 5, 0},
    {Shuffle::Up, 8, 3, 0},       {Shuffle::Up, 16, 16, 0},  // delta == width: all own
    {Shuffle::Down, 32, 1, 0},    {Shuffle::Down, 32, 7, 0},
    {Shuffle::Down, 8, 2, 0},     {Shuffle::Down, 16, 5, 0},
    {Shuffle::Xor, 32, 16, 0},    {Shuffle::Xor, 32, 1, 0},
    {Shuffle::Xor, 8, 3, 0},      {Shuffle::Xor, 8, 8, 0},  // into the neighbour segment
    {Shuffle::Xor, 16, 31, 0},
};
constexpr int kShuffleCaseCount = sizeof(kShuffleCases) / sizeof(kShuffleCases[0]);

// The lane whose value `lane` receives, per the CUDA programming guide:
// __shfl_sync reads lane srcLane mod width of its own segment (the hardware
// keeps srcLane's low bits); up/down give the caller its own value when the
// source is outside its segment; xor may read an earlier segment, not a
// later one.
int expected_source_lane(const ShuffleCase& c, int lane) {
  const int arg = c.base + c.per_lane * lane;
  switch (c.kind) {
    case Shuffle::Index: return lane / c.width * c.width + (arg & (c.width - 1));
    case Shuffle::Up: return lane % c.width >= arg ? lane - arg : lane;
    case Shuffle::Down: return lane % c.width + arg < c.width ? lane + arg : lane;
    case Shuffle::Xor: return (lane ^ arg) / c.width <= lane / c.width ? lane ^ arg : lane;
  }
  return -1;
}

template <class T>
__global__ void shuffle_kernel(const T* in, T* out, int threads) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % warpSize;
  for (int i = 0; i < kShuffleCaseCount; ++i) {
    const ShuffleCase c = kShuffleCases[i];
    const int arg = c.base + c.per_lane * lane;
    T result{};
    switch (c.kind) {
      case Shuffle::Index: result = __shfl_sync(kFullMask, in[gid], arg, c.width); break;
      case Shuffle::Up: result = __shfl_up_sync(kFullMask, in[gid], arg, c.width); break;
      case Shuffle::Down: result = __shfl_down_sync(kFullMask, in[gid], arg, c.width); break;
      case Shuffle::Xor: result = __shfl_xor_sync(kFullMask, in[gid], arg, c.width); break;
    }
    out[i * threads + gid] = result;
  }
}

// Values that a 32-bit path or a float conversion would change.
template <class T>
T thread_value(int gid) {
  if constexpr (std::is_same<T, int>::value) return gid * 1000003 - 50000000;
  if constexpr (std::is_same<T, float>::value) return gid * 0.5f - 17.25f;
  if constexpr (std::is_same<T, double>::value) return gid + 1.0 / 3.0;
  if constexpr (std::is_same<T, int64_t>::value)
    return int64_t{gid} * 0x100000001LL - 0x7000000000000000LL;
}

TEST_CASE_TEMPLATE("shuffles follow CUDA's source-lane rules", T, int, float, double, int64_t) {
  constexpr int kThreads = 128;  // two blocks of two warps
  std::vector<T> values(kThreads);
  for (int i = 0; i < kThreads; ++i) values[i] = thread_value<T>(i);
  DeviceArray<T> in(values), out(kShuffleCaseCount * kThreads);
  Stream stream;
  launch(2, 64, stream, shuffle_kernel<T>, in, out, kThreads);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<T> got = out.read();
  for (int i = 0; i < kShuffleCaseCount; ++i) {
    for (int gid = 0; gid < kThreads; ++gid) {
      const int source = gid / 32 * 32 + expected_source_lane(kShuffleCases[i], gid % 32);
      INFO("case " << i << ", thread " << gid);
      CHECK(got[i * kThreads + gid] == values[source]);
    }
  }
}

// The tensor cores' mma.sync m16n8k16 (ampx_emu::mma_16x8x16): each warp
// gathers its fragments from row-major A [16 x 16], B [16 x 8] and C
// [16 x 8] by the PTX ISA's layout (lane 4g + t: A rows g and g + 8, columns
// 2t, 2t+1 and 2t+8, 2t+9; B rows 2t, 2t+1 and 2t+8, 2t+9 of column g; C
// rows g and g + 8, columns 2t, 2t+1), multiplies, and writes D back by the
// C layout. Two warps, each its own product.
__global__ void mma_kernel(bool bf16, const uint16_t* a, const uint16_t* b, const float* c,
                           float* d) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  a += warp * 256, b += warp * 128, c += warp * 128, d += warp * 128;
  auto pair = [](uint16_t low, uint16_t high) { return uint32_t{low} | uint32_t{high} << 16; };
  const uint32_t af[4] = {pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                          pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                          pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                          pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t b0 = pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
  const uint32_t b1 = pair(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  ampx_emu::mma_16x8x16(bf16, acc, af, b0, b1);
  d[g * 8 + 2 * t] = acc[0], d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2], d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

TEST_CASE("mma.sync m16n8k16: D = A B + C from the PTX fragment layout, f16 and bf16") {
  for (bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "f16"));
    // Multiples of 1/8 in [-2, 2] and subnormal-free: exact in both types,
    // and every sum of products exact in fp32.
    std::vector<double> av(512), bv(256), cv(256);
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<double>(static_cast<int>((i * 37) % 33) - 16) / 8;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<double>(static_cast<int>((i * 11) % 29) - 14) / 8;
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = static_cast<double>(static_cast<int>(i % 7) - 3);
    auto bits = [bf16](double x) {
      if (bf16) {
        const float f = static_cast<float>(x);
        uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        return static_cast<uint16_t>(u >> 16);  // exact: x has few significant bits
      }
      const _Float16 h = static_cast<_Float16>(x);
      uint16_t u;
      std::memcpy(&u, &h, sizeof u);
      return u;
    };
    std::vector<uint16_t> ah, bh;
    for (double x : av) ah.push_back(bits(x));
    for (double x : bv) bh.push_back(bits(x));
    std::vector<float> cf(cv.begin(), cv.end());
    DeviceArray<uint16_t> a(ah), b(bh);
    DeviceArray<float> c(cf), d(256);
    Stream stream;
    launch(1, 64, stream, mma_kernel, bf16, a.data, b.data, c.data, d.data);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    const std::vector<float> got = d.read();
    for (int w = 0; w < 2; ++w)
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n) {
          double want = cv[w * 128 + r * 8 + n];
          for (int k = 0; k < 16; ++k) want += av[w * 256 + r * 16 + k] * bv[w * 128 + k * 8 + n];
          INFO("warp " << w << " row " << r << " column " << n);
          CHECK(got[w * 128 + r * 8 + n] == want);
        }
  }
}

// Per thread: a ballot of a 0/1/2 predicate, match_any on int keys, and
// on int64 keys that differ only above bit 32.
__global__ void vote_kernel(unsigned* out) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % warpSize;
  out[gid * 3 + 0] = __ballot_sync(kFullMask, (lane * lane + gid / 32) % 3);
  out[gid * 3 + 1] = __match_any_sync(kFullMask, lane * 7 % 5);
  out[gid * 3 + 2] = __match_any_sync(kFullMask, int64_t{lane % 3} << 40 | 5);
}

TEST_CASE("ballot and match_any") {
  DeviceArray<unsigned> out(128 * 3);
  Stream stream;
  launch(2, 64, stream, vote_kernel, out);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const auto got = out.read();
  for (int gid = 0; gid < 128; ++gid) {
    unsigned expected[3] = {0, 0, 0};
    const int lane = gid % 32;
    for (int other = 0; other < 32; ++other) {
      expected[0] |= unsigned{(other * other + gid / 32) % 3 != 0} << other;
      expected[1] |= unsigned{other * 7 % 5 == lane * 7 % 5} << other;
      expected[2] |= unsigned{other % 3 == lane % 3} << other;
    }
    INFO("thread " << gid);
    for (int i = 0; i < 3; ++i) CHECK(got[gid * 3 + i] == expected[i]);
  }
}

// Lanes 16-31 of each warp leave at once; lanes 0-15 use the mask 0xffff.
__global__ void half_warp_kernel(int* out) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % warpSize;
  if (lane >= 16) return;
  const int value = 100 + gid;
  out[gid * 5 + 0] = __shfl_xor_sync(0xffffu, value, 5);
  out[gid * 5 + 1] = __shfl_down_sync(0xffffu, value, 4, 16);
  out[gid * 5 + 2] = __shfl_sync(0xffffu, value, 15 - lane);
  out[gid * 5 + 3] = static_cast<int>(__ballot_sync(0xffffu, lane % 3 == 0));
  out[gid * 5 + 4] = static_cast<int>(__match_any_sync(0xffffu, lane / 4));
  __syncwarp(0xffffu);
}

TEST_CASE("a partial mask: half the warp takes part, the other half exits") {
  DeviceArray<int> out(64 * 5, -7);
  Stream stream;
  launch(1, 64, stream, half_warp_kernel, out);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const auto got = out.read();
  for (int gid = 0; gid < 64; ++gid) {
    const int lane = gid % 32, first = 100 + gid - lane;  // lane 0's value
    const int expected[5] = {first + (lane ^ 5), first + (lane + 4 < 16 ? lane + 4 : lane),
                             first + 15 - lane, 0x9249 /* lanes 0, 3, ..., 15 */,
                             0xf << (lane / 4 * 4)};
    INFO("thread " << gid);
    for (int i = 0; i < 5; ++i) CHECK(got[gid * 5 + i] == (lane >= 16 ? -7 : expected[i]));
  }
}

// ---- 2. block barriers and atomics -------------------------------------------

constexpr int kPlaceFields = 13;  // threadIdx, blockIdx, blockDim, gridDim, warp partner

// A tree reduction in shared memory (the block's size a power of two, at
// least 32). Each thread also records where it stands, and the linear index
// of lane ^ 16 of its warp: warps are cut from the linear thread index.
__global__ void block_sum_kernel(const int* in, long long* block_sums, unsigned* places) {
  __shared__ long long partial[1024];
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned gid = block * threads + t;
  const unsigned place[kPlaceFields] = {
      threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
      blockDim.x,  blockDim.y,  blockDim.z,  gridDim.x,  gridDim.y,  gridDim.z,
      __shfl_xor_sync(kFullMask, t, 16)};
  for (int i = 0; i < kPlaceFields; ++i) places[gid * kPlaceFields + i] = place[i];
  partial[t] = in[gid];
  __syncthreads();
  for (unsigned stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) block_sums[block] = partial[0];
}

TEST_CASE("block reductions and thread places over 1-D, 2-D and 3-D shapes") {
  const std::pair<dim3, dim3> shapes[] = {
      {dim3(5), dim3(256)},          {dim3(2, 1, 2), dim3(1024)},    {dim3(3, 2, 2), dim3(8, 4, 2)},
      {dim3(1, 2), dim3(16, 8, 8)},  {dim3(2, 3), dim3(32, 32)},
  };
  Stream stream;
  for (const auto& [grid, block] : shapes) {
    const unsigned threads = block.x * block.y * block.z, blocks = grid.x * grid.y * grid.z;
    const unsigned total = threads * blocks;
    INFO("grid " << grid.x << "x" << grid.y << "x" << grid.z << ", block " << block.x << "x"
                 << block.y << "x" << block.z);
    std::vector<int> values(total);
    for (unsigned i = 0; i < total; ++i) values[i] = static_cast<int>(i * 2654435761u % 2001) - 1000;
    DeviceArray<int> in(values);
    DeviceArray<long long> sums(blocks);
    DeviceArray<unsigned> places(size_t{total} * kPlaceFields);
    launch(grid, block, stream, block_sum_kernel, in, sums, places);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    const auto got_sums = sums.read();
    for (unsigned b = 0; b < blocks; ++b) {
      long long expected = 0;
      for (unsigned t = 0; t < threads; ++t) expected += values[b * threads + t];
      CHECK(got_sums[b] == expected);
    }
    const auto got_places = places.read();
    bool places_right = true;  // one CHECK, not one per thread
    for (unsigned gid = 0; gid < total; ++gid) {
      const unsigned b = gid / threads, t = gid % threads;
      // x varies fastest, then y, then z (CUDA's linear order).
      const unsigned expected[kPlaceFields] = {
          t % block.x, t / block.x % block.y, t / (block.x * block.y),
          b % grid.x,  b / grid.x % grid.y,   b / (grid.x * grid.y),
          block.x,     block.y,               block.z,
          grid.x,      grid.y,                grid.z,
          t ^ 16};
      for (int i = 0; i < kPlaceFields; ++i)
        places_right &= got_places[size_t{gid} * kPlaceFields + i] == expected[i];
    }
    CHECK(places_right);
  }
}

int atomic_probe(unsigned gid) { return static_cast<int>(gid * 2654435761u % 1000003) - 500000; }

__global__ void atomics_kernel(int* int_sum, unsigned long long* wide_sum, float* float_sum,
                               int* minimum, int* maximum) {
  const unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(int_sum, static_cast<int>(gid % 7) + 1);
  atomicAdd(wide_sum, static_cast<unsigned long long>(gid) << 32 | 1);  // carries past 32 bits
  atomicAdd(float_sum, 0.25f * static_cast<float>(gid % 4));  // every partial sum is exact
  atomicMin(minimum, atomic_probe(gid));
  atomicMax(maximum, atomic_probe(gid));
}

TEST_CASE("atomics from many blocks on two concurrent streams give exact totals") {
  constexpr unsigned kBlocks = 48, kThreads = 256;
  DeviceArray<int> int_sum(1, 0), minimum(1, INT_MAX),
      maximum(1, INT_MIN);
  DeviceArray<unsigned long long> wide_sum(1, 0);
  DeviceArray<float> float_sum(1, 0.0f);
  {
    Stream first, second;
    for (cudaStream_t stream : {first.handle, second.handle})
      launch(kBlocks, kThreads, stream, atomics_kernel, int_sum, wide_sum, float_sum, minimum,
             maximum);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  long long expected_int = 0;
  unsigned long long expected_wide = 0;
  double expected_float = 0;
  int expected_min = INT_MAX, expected_max = INT_MIN;
  for (unsigned gid = 0; gid < kBlocks * kThreads; ++gid) {  // each thread ran twice
    expected_int += 2 * (gid % 7 + 1);
    expected_wide += 2 * (static_cast<unsigned long long>(gid) << 32 | 1);
    expected_float += 2 * 0.25 * (gid % 4);
    expected_min = std::min(expected_min, atomic_probe(gid));
    expected_max = std::max(expected_max, atomic_probe(gid));
  }
  CHECK(int_sum.read()[0] == expected_int);
  CHECK(wide_sum.read()[0] == expected_wide);
  CHECK(float_sum.read()[0] == static_cast<float>(expected_float));
  CHECK(minimum.read()[0] == expected_min);
  CHECK(maximum.read()[0] == expected_max);
}

// The emulator's barrier rule (grid.cpp): __syncthreads waits for every
// thread of the block that has not exited. Threads that exit early do not
// hold the barrier, and what they wrote is visible after it.
__global__ void early_exit_barrier_kernel(int salt, int* out) {
  __shared__ int slots[128];
  const int t = threadIdx.x;
  if (t >= 32) {
    slots[t] = t + salt;
    return;
  }
  __syncthreads();
  int sum = 0;
  for (int i = 32; i < 128; ++i) sum += slots[i];
  out[t] = sum;
}

TEST_CASE("a barrier reached only by threads whose peers exited completes") {
  DeviceArray<int> out(32);
  Stream stream;
  // Two salts: shared memory outlives a grid here, so a single run could
  // read an earlier run's values and pass.
  for (int salt : {1000, 2000}) {
    launch(1, 128, stream, early_exit_barrier_kernel, salt, out);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    for (int v : out.read()) CHECK(v == (32 + 127) * 96 / 2 + 96 * salt);
  }
}

// ---- 3. faults abort the process with a description --------------------------

struct ChildOutcome {
  bool exited_cleanly = false;
  int signal = 0;
  std::string stderr_text;
};

// Runs `body` in a forked child with its stderr captured: a device fault
// aborts the whole process. Every test destroys its streams, so no worker
// thread (the child would lack it) holds an emulator lock at the fork.
ChildOutcome run_in_child(void (*body)()) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], STDERR_FILENO);
    // doctest's crash handlers would report the abort as a crash of this test.
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) signal(sig, SIG_DFL);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // a core of 1024 fiber stacks is slow
    alarm(30);                         // a hang fails instead of stalling the run
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  ChildOutcome outcome;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    outcome.stderr_text.append(buffer, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  outcome.exited_cleanly = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  outcome.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return outcome;
}

// The child's part: a grid on a stream of its own. It returns only when the
// kernel did not fault.
template <class... Params, class... Args>
void launch_and_synchronize(unsigned blocks, unsigned threads, void (*kernel)(Params...),
                            Args... args) {
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const cudaLaunchConfig_t config = launch_config(blocks, threads, stream);
  cudaLaunchKernelEx(&config, kernel, args...);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

__global__ void half_warp_exits_before_full_shuffle() {
  if (threadIdx.x >= 16) return;
  __shfl_sync(kFullMask, 1, 0);
}

// Thread 0 passes one barrier more than the rest of its warp, which waits
// for it at a shuffle; warp 1 has exited.
__global__ void uneven_barrier_counts() {
  __syncthreads();
  if (threadIdx.x >= 32) return;
  if (threadIdx.x == 0) __syncthreads();
  __shfl_sync(kFullMask, 1, 0);
}

__global__ void lanes_at_different_intrinsics() {
  if (threadIdx.x % 2 == 0) {
    __shfl_xor_sync(kFullMask, 1, 1);
  } else {
    __ballot_sync(kFullMask, 1);
  }
}

__global__ void shuffle_reads_outside_its_mask() {
  if (threadIdx.x >= 16) return;
  __shfl_sync(0xffffu, 1, static_cast<int>(threadIdx.x) + 16);
}

TEST_CASE("faults abort the process with a description") {
  struct Fault {
    void (*child)();
    std::vector<std::string> words;
  };
  const Fault faults[] = {
      {[] { launch_and_synchronize(1, 32, half_warp_exits_before_full_shuffle); },
       {"kernel deadlock", "waits at __shfl_sync", "16:exited"}},
      {[] { launch_and_synchronize(1, 64, uneven_barrier_counts); },
       {"kernel deadlock", "1 thread(s) at __syncthreads", "0:at-syncthreads"}},
      {[] { launch_and_synchronize(1, 32, lanes_at_different_intrinsics); },
       {"different warp intrinsics"}},
      {[] { launch_and_synchronize(1, 32, shuffle_reads_outside_its_mask); },
       {"not in the mask"}},
  };
  for (const Fault& fault : faults) {
    const ChildOutcome outcome = run_in_child(fault.child);
    INFO("child stderr: " << outcome.stderr_text);
    CHECK(outcome.signal == SIGABRT);
    CHECK(outcome.stderr_text.find("ampx CUDA emulator: device fault:") != std::string::npos);
    for (const std::string& word : fault.words)
      CHECK_MESSAGE(outcome.stderr_text.find(word) != std::string::npos, word);
  }
}

// Legal on GPUs with independent thread scheduling (sm_70+): the guide asks
// only that the lanes named in a mask execute the same intrinsic with the
// same mask. Four blocks, because the emulator runs lanes in an order that
// changes by block, and some orders interleave the two groups.
__global__ void halves_with_their_own_masks(int* out) {
  const int lane = threadIdx.x % warpSize;
  if (lane < 16) {
    out[blockIdx.x * 32 + lane] = __shfl_xor_sync(0x0000ffffu, lane, 1);
  } else {
    out[blockIdx.x * 32 + lane] = __shfl_xor_sync(0xffff0000u, lane, 1);
  }
}

__global__ void half_shuffles_then_warp_syncs(int* out) {
  const int lane = threadIdx.x % warpSize;
  int value = lane;
  if (lane < 16) value = __shfl_xor_sync(0x0000ffffu, value, 1);
  __syncwarp();
  out[blockIdx.x * 32 + lane] = value ^ (lane < 16 ? 0 : 1);  // lane ^ 1 for all
}

// Legal since sm_70: the lanes a mask names meet there, whatever the
// warp's other lanes are doing.
TEST_CASE("divergent lanes may run collectives with disjoint masks") {
  for (void (*kernel)(int*) : {halves_with_their_own_masks, half_shuffles_then_warp_syncs}) {
    static void (*running)(int*);
    running = kernel;  // a capture-less lambda below must reach it
    const ChildOutcome outcome = run_in_child([] {
      int* out = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&out), 128 * sizeof(int));
      launch_and_synchronize(4, 32, running, out);
      std::vector<int> got(128);
      cudaMemcpy(got.data(), out, sizeof(int) * 128, cudaMemcpyDeviceToHost);
      for (int gid = 0; gid < 128; ++gid)
        if (got[gid] != ((gid % 32) ^ 1)) _exit(1);
    });
    INFO("child stderr: " << outcome.stderr_text);
    CHECK(outcome.exited_cleanly);
  }
}

// ---- 4. launch configuration errors -------------------------------------------

__global__ void count_threads(int* counter) { atomicAdd(counter, 1); }

TEST_CASE("invalid launch configurations are refused and recorded as the last error") {
  const std::pair<dim3, dim3> invalid[] = {
      {dim3(1), dim3(0)}, {dim3(1), dim3(1025)}, {dim3(0), dim3(32)}, {dim3(1), dim3(32, 32, 2)}};
  DeviceArray<int> counter(1, 0);
  Stream stream;
  cudaGetLastError();
  for (const auto& [grid, block] : invalid) {
    INFO("grid.x " << grid.x << ", block " << block.x << "x" << block.y << "x" << block.z);
    const cudaLaunchConfig_t config = launch_config(grid, block, stream);
    CHECK(cudaLaunchKernelEx(&config, count_threads, counter) == cudaErrorInvalidConfiguration);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);  // returned once, then cleared
  }
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(counter.read()[0] == 0);  // nothing ran
}

// ---- 5. streams and memory ------------------------------------------------------

void CUDART_CB hold_until_released(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!released->load() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

__global__ void append_digit(int* value, int digit) { *value = *value * 10 + digit; }

TEST_CASE("a stream runs its work in order while the host goes on") {
  constexpr size_t kCount = 1000;
  DeviceArray<int> value(1, 0), staged(kCount);
  int* pinned_result = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned_result), sizeof(int)) == cudaSuccess);
  *pinned_result = -1;
  Stream stream;
  std::atomic<bool> released{false};
  REQUIRE(cudaLaunchHostFunc(stream, hold_until_released, &released) == cudaSuccess);
  for (int digit : {1, 2, 3}) launch(1, 1, stream, append_digit, value, digit);
  // A pageable source is staged at the call: overwriting it at once must
  // not change what arrives, although the copy runs later.
  std::vector<int> pageable(kCount, 7);
  REQUIRE(cudaMemcpyAsync(staged, pageable.data(), kCount * sizeof(int), cudaMemcpyHostToDevice,
                          stream) == cudaSuccess);
  std::fill(pageable.begin(), pageable.end(), 9);
  REQUIRE(cudaMemcpyAsync(pinned_result, value, sizeof(int), cudaMemcpyDeviceToHost, stream) ==
          cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
  CHECK(*pinned_result == -1);  // held: nothing after the host function has run
  released = true;
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaGetLastError();  // the query may have recorded cudaErrorNotReady
  CHECK(cudaStreamQuery(stream) == cudaSuccess);
  CHECK(*pinned_result == 123);
  const auto arrived = staged.read();
  CHECK(std::count(arrived.begin(), arrived.end(), 7) == static_cast<long>(kCount));
  cudaFreeHost(pinned_result);
}

cudaMemPool_t make_pool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = cudaMemLocation{cudaMemLocationTypeDevice, 0};
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  return pool;
}

TEST_CASE("copies and memsets stay inside the allocation as asked for") {
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 100) == cudaSuccess);  // 256 bytes underneath
  std::vector<unsigned char> host(101, 7);
  Stream stream;
  CHECK(cudaMemcpyAsync(device, host.data(), 100, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  CHECK(cudaMemcpyAsync(device, host.data(), 101, cudaMemcpyHostToDevice, stream) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemcpyAsync(host.data(), static_cast<char*>(device) + 1, 100,
                        cudaMemcpyDeviceToHost, stream) == cudaErrorInvalidValue);
  CHECK(cudaMemsetAsync(static_cast<char*>(device) + 50, 0, 51, stream) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaFree(device) == cudaSuccess);
}

TEST_CASE("new device memory reads 0xff bytes") {
  constexpr size_t kBytes = 1000;
  Stream stream;
  cudaMemPool_t pool = make_pool();
  void* plain = nullptr;
  void* pooled = nullptr;
  REQUIRE(cudaMalloc(&plain, kBytes) == cudaSuccess);
  REQUIRE(cudaMallocFromPoolAsync(&pooled, kBytes, pool, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  for (void* p : {plain, pooled}) {
    std::vector<unsigned char> bytes(kBytes);
    REQUIRE(cudaMemcpy(bytes.data(), p, kBytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(std::count(bytes.begin(), bytes.end(), 0xff) == static_cast<long>(kBytes));
  }
  REQUIRE(cudaFreeAsync(pooled, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaMemPoolDestroy(pool);
  cudaFree(plain);
}

// ---- 6. graph capture -----------------------------------------------------------

__global__ void increment(int* counter) { *counter += 1; }
__global__ void accumulate(int* total, const int* addend) { *total += *addend; }
__global__ void fill_from_counter(int* data, int count, const int* counter) {
  for (int i = 0; i < count; ++i) data[i] = 3 * i + *counter;
}

TEST_CASE("a captured graph replays its launches, memsets and copies") {
  DeviceArray<int> counter(1, 0), total(1, 0),
      counter_copy(1, 0);
  Stream stream;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE(cudaMemsetAsync(total, 0, sizeof(int), stream) == cudaSuccess);
  launch(1, 1, stream, increment, counter);
  launch(1, 1, stream, accumulate, total, counter);
  REQUIRE(cudaMemcpyAsync(counter_copy, counter, sizeof(int), cudaMemcpyDeviceToDevice, stream) ==
          cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(counter.read()[0] == 0);  // captured work is recorded, not run
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph) == cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(counter.read()[0] == 3);
  CHECK(total.read()[0] == 3);  // 1 + 2 + 3 = 6 had the memset not been replayed
  CHECK(counter_copy.read()[0] == 3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("calls a graph cannot hold fail and invalidate the capture") {
  static DeviceArray<int>* device;  // reached by the capture-less lambdas below
  DeviceArray<int> device_array(std::vector<int>{1, 2});
  device = &device_array;
  const std::pair<const char*, cudaError_t (*)(cudaStream_t)> refusals[] = {
      {"cudaStreamSynchronize", [](cudaStream_t s) { return cudaStreamSynchronize(s); }},
      {"cudaStreamQuery", [](cudaStream_t s) { return cudaStreamQuery(s); }},
      {"cudaMalloc", [](cudaStream_t) { void* p = nullptr; return cudaMalloc(&p, 64); }},
      {"cudaMemcpy", [](cudaStream_t) {
         return cudaMemcpy(*device, *device + 1, sizeof(int), cudaMemcpyDeviceToDevice); }},
      {"cudaMemcpyAsync to pageable memory", [](cudaStream_t s) {
         static int pageable = 0;
         return cudaMemcpyAsync(&pageable, *device, sizeof(int), cudaMemcpyDeviceToHost, s); }},
  };
  Stream stream;
  for (const auto& [name, call] : refusals) {
    INFO(name);
    cudaGetLastError();
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(call(stream) == cudaErrorStreamCaptureUnsupported);
    cudaStreamCaptureStatus status{};
    CHECK(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
  }
  cudaGetLastError();
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);  // the capture is over
}

TEST_CASE("a graph may free only memory it allocated, and nothing is freed twice") {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  Stream stream;
  void* older = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&older, 256, pool, stream) == cudaSuccess);

  // Freed at every replay, it would be freed again and again.
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaFreeAsync(older, stream) == cudaErrorInvalidValue);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  CHECK(cudaFreeAsync(older, stream) == cudaSuccess);
  CHECK(cudaFreeAsync(older, stream) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, older) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeUnregistered);
  CHECK(cudaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("pool memory taken during a capture lives as long as the graph") {
  constexpr int kCount = 1 << 18;  // 1 MiB of ints
  DeviceArray<int> counter(1, 0), result(kCount);
  cudaMemPool_t pool = make_pool();
  Stream stream;
  size_t free_before = 0, free_now = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);

  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  int* scratch = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&scratch), kCount * sizeof(int), pool,
                                  stream) == cudaSuccess);
  launch(1, 1, stream, increment, counter);
  launch(1, 1, stream, fill_from_counter, scratch, kCount, counter);
  REQUIRE(cudaMemcpyAsync(result, scratch, kCount * sizeof(int), cudaMemcpyDeviceToDevice,
                          stream) == cudaSuccess);
  REQUIRE(cudaFreeAsync(scratch, stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_now, &total) == cudaSuccess);
  CHECK(free_before - free_now == kCount * sizeof(int));  // reserved for the graph

  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph) == cudaSuccess);
  for (int replay = 1; replay <= 3; ++replay) {
    INFO("replay " << replay);
    REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, scratch) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeDevice);
    const auto got = result.read();
    bool right = true;
    for (int i = 0; i < kCount; ++i) right &= got[i] == 3 * i + replay;
    CHECK(right);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  REQUIRE(cudaMemGetInfo(&free_now, &total) == cudaSuccess);
  CHECK(free_now == free_before);  // released with the graph
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, scratch) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeUnregistered);
  cudaMemPoolDestroy(pool);
}

// ---- 7. pointer attributes ------------------------------------------------------

TEST_CASE("cudaPointerGetAttributes tells device, pinned and plain host memory apart") {
  DeviceArray<char> device(1024);
  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, 1024) == cudaSuccess);
  std::vector<char> plain(1024);
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, device.data) == cudaSuccess);
  CHECK((a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == device.data &&
         a.hostPointer == nullptr));
  REQUIRE(cudaPointerGetAttributes(&a, device.data + 100) == cudaSuccess);  // interior
  CHECK((a.type == cudaMemoryTypeDevice && a.devicePointer == device.data + 100));
  REQUIRE(cudaPointerGetAttributes(&a, pinned) == cudaSuccess);
  CHECK((a.type == cudaMemoryTypeHost && a.hostPointer == pinned));
  REQUIRE(cudaPointerGetAttributes(&a, plain.data()) == cudaSuccess);
  CHECK((a.type == cudaMemoryTypeUnregistered && a.devicePointer == nullptr));
  cudaFreeHost(pinned);
}

// ---- 8. cuBLASLt ---------------------------------------------------------------

// The descriptors of one column-major multiply D = alpha op(A) B + beta C
// (+ bias), B k x n with ld k, C and D m x n with ld m.
struct Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;

  Gemm(cudaDataType_t in_type, cudaDataType_t out_type, int m, int n, int k, bool trans_a,
       int lda, const void* bias) {
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const int32_t op = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const uint32_t epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                           sizeof epilogue) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&a, in_type, trans_a ? k : m, trans_a ? m : k, lda) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, in_type, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&c, out_type, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, out_type, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS);
  }
  ~Gemm() {
    cublasLtMatmulPreferenceDestroy(preference);
    for (auto layout : {a, b, c, d}) cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  cublasStatus_t heuristic(cublasLtMatmulHeuristicResult_t* result, int* count) const {
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, preference, 1, result, count);
  }
  cublasStatus_t run(float alpha, const void* a_data, const void* b_data, float beta,
                     const void* c_data, void* d_data, cudaStream_t stream) const {
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t found = heuristic(&result, &count);
    if (found != CUBLAS_STATUS_SUCCESS) return found;
    return cublasLtMatmul(handle, desc, &alpha, a_data, a, b_data, b, &beta, c_data, c, d_data, d,
                          &result.algo, nullptr, 0, stream);
  }
};

// The error bound of one element computed as cuBLASLt computes it: products
// exact or rounded once, a k-term fp32 sum (k - 1 roundings, each at most
// 2^-24 of a partial sum, itself at most the sum of magnitudes), alpha,
// beta C and the bias with a rounding each, then a last rounding to the
// output type (`output_unit_roundoff`: 2^-24 for f32, 2^-11 for f16 in its
// normal range). To first order: (k + 3) 2^-24 magnitude +
// output_unit_roundoff |reference|, magnitude = |alpha| sum |a b| +
// |beta c| + |bias|.
double error_bound(int k, double magnitude, double reference, double output_unit_roundoff) {
  return (k + 3) * std::ldexp(magnitude, -24) + output_unit_roundoff * std::fabs(reference);
}

TEST_CASE("cuBLASLt f32 product with a transposed, padded A and beta C") {
  constexpr int m = 6, n = 5, k = 7, lda = k + 1;  // A stored k x m, read transposed
  constexpr float alpha = 1.5f, beta = 0.5f;
  std::vector<float> a(lda * m), b(k * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(std::sin(0.7 * i) * 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(std::cos(1.3 * i) - 0.25);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 0.1f * i - 1.0f;
  DeviceArray<float> a_dev(a), b_dev(b), c_dev(c), d_dev(m * n);
  Stream stream;
  Gemm gemm(CUDA_R_32F, CUDA_R_32F, m, n, k, true, lda, nullptr);
  REQUIRE(gemm.run(alpha, a_dev, b_dev, beta, c_dev, d_dev, stream) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const auto d = d_dev.read();
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0, magnitude = 0;
      for (int l = 0; l < k; ++l) {
        sum += double{a[l + i * lda]} * b[l + j * k];
        magnitude += std::fabs(double{a[l + i * lda]} * b[l + j * k]);
      }
      const double reference = alpha * sum + beta * double{c[i + j * m]};
      magnitude = alpha * magnitude + std::fabs(beta * double{c[i + j * m]});
      INFO("D(" << i << "," << j << ")");
      CHECK(std::fabs(d[i + j * m] - reference) <= error_bound(k, magnitude, reference, 0x1p-24));
    }
  }
  // A host pointer would fault on a GPU; the emulator refuses it up front.
  CHECK(gemm.run(alpha, a.data(), b_dev, beta, c_dev, d_dev, stream) ==
        CUBLAS_STATUS_INVALID_VALUE);
}

TEST_CASE("cuBLASLt f16 product with the BIAS epilogue") {
  constexpr int m = 16, n = 4, k = 32;
  using ampx::impl::math::float_to_half;
  using ampx::impl::math::half_to_float;
  std::vector<uint16_t> a(m * k), b(k * n), bias(m);
  // Values exact in f16, whose products are exact in fp32.
  for (int i = 0; i < m * k; ++i) a[i] = float_to_half((i * 7 % 11 - 5) / 8.0f);
  for (int i = 0; i < k * n; ++i) b[i] = float_to_half((i * 5 % 13 - 6) / 4.0f);
  for (int i = 0; i < m; ++i) bias[i] = float_to_half((i % 5 - 2) * 0.375f);
  DeviceArray<uint16_t> a_dev(a), b_dev(b), bias_dev(bias), d_dev(m * n);
  Stream stream;
  Gemm gemm(CUDA_R_16F, CUDA_R_16F, m, n, k, false, m, bias_dev.data);
  // beta = 0: C is not read (D's buffer, with D's layout, stands in).
  REQUIRE(gemm.run(1.0f, a_dev, b_dev, 0.0f, d_dev, d_dev, stream) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const auto d = d_dev.read();
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double reference = half_to_float(bias[i]), magnitude = std::fabs(reference);
      for (int l = 0; l < k; ++l) {
        const double product = double{half_to_float(a[i + l * m])} * half_to_float(b[l + j * k]);
        reference += product;
        magnitude += std::fabs(product);
      }
      INFO("D(" << i << "," << j << ") reference " << reference);
      const double got = half_to_float(d[i + j * m]);
      CHECK(std::fabs(got - reference) <= error_bound(k, magnitude, reference, 0x1p-11));
    }
  }
}

TEST_CASE("cuBLASLt has no BIAS algorithm when D's rows are not a multiple of 8") {
  DeviceArray<uint16_t> bias(32);
  for (int m : {16, 12, 7}) {
    Gemm gemm(CUDA_R_16F, CUDA_R_16F, m, 4, 32, false, m, bias.data);
    cublasLtMatmulHeuristicResult_t result{};
    int count = -1;
    INFO("m " << m);
    CHECK(gemm.heuristic(&result, &count) ==
          (m % 8 == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED));
    CHECK(count == (m % 8 == 0 ? 1 : 0));
  }
}

}  // namespace

// ---- 9. the cuDNN stand-in ------------------------------------------------------
// Its refusals are what keep the backend's cuDNN calls honest in CI, so each
// is shown to fire: a workspace smaller than the algorithm's, an operand
// freed before a captured call replays; and f32 data with tensor-op math
// multiplies in TF32.


extern "C" void* ampx_emulated_cudnn_symbol(const char* name);

namespace {

constexpr int kCudnnSuccess = 0, kCudnnBadParam = 2000;
constexpr int kCudnnFloat = 0, kCudnnNchw = 0, kCudnnCrossCorrelation = 1;
constexpr int kCudnnTensorOpMath = 1, kCudnnFmaMath = 3;

template <class Fn>
Fn cudnn_function(const char* name) {
  void* symbol = ampx_emulated_cudnn_symbol(name);
  REQUIRE_MESSAGE(symbol != nullptr, name);
  return reinterpret_cast<Fn>(symbol);
}

// x [1, 2, 5, 4] * w [3, 2, 3, 3], padding 1, stride 2: y [1, 3, 3, 2], in f32.
struct CudnnConv {
  static constexpr int n = 1, c = 2, h = 5, w = 4, k = 3, r = 3, pad = 1, stride = 2;
  static constexpr int oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - r) / stride + 1;

  using Create = int (*)(void**);
  using SetTensor = int (*)(void*, int, int, int, int, int, int);
  using SetFilter = int (*)(void*, int, int, int, int, int, int);
  using SetConv = int (*)(void*, int, int, int, int, int, int, int, int);
  using SetMath = int (*)(void*, int);
  using Workspace = int (*)(void*, void*, void*, void*, void*, int, size_t*);
  using Forward = int (*)(void*, const void*, void*, const void*, void*, const void*, void*, int,
                          void*, size_t, const void*, void*, void*);

  void* handle = nullptr;
  void* x_desc = nullptr;
  void* y_desc = nullptr;
  void* w_desc = nullptr;
  void* conv = nullptr;
  Forward forward = cudnn_function<Forward>("cudnnConvolutionForward");

  explicit CudnnConv(int math) {
    REQUIRE(cudnn_function<Create>("cudnnCreate")(&handle) == kCudnnSuccess);
    REQUIRE(cudnn_function<Create>("cudnnCreateTensorDescriptor")(&x_desc) == kCudnnSuccess);
    REQUIRE(cudnn_function<Create>("cudnnCreateTensorDescriptor")(&y_desc) == kCudnnSuccess);
    REQUIRE(cudnn_function<Create>("cudnnCreateFilterDescriptor")(&w_desc) == kCudnnSuccess);
    REQUIRE(cudnn_function<Create>("cudnnCreateConvolutionDescriptor")(&conv) == kCudnnSuccess);
    const auto set_tensor = cudnn_function<SetTensor>("cudnnSetTensor4dDescriptor");
    REQUIRE(set_tensor(x_desc, kCudnnNchw, kCudnnFloat, n, c, h, w) == kCudnnSuccess);
    REQUIRE(set_tensor(y_desc, kCudnnNchw, kCudnnFloat, n, k, oh, ow) == kCudnnSuccess);
    REQUIRE(cudnn_function<SetFilter>("cudnnSetFilter4dDescriptor")(w_desc, kCudnnFloat,
                                                                    kCudnnNchw, k, c, r, r) ==
            kCudnnSuccess);
    REQUIRE(cudnn_function<SetConv>("cudnnSetConvolution2dDescriptor")(
                conv, pad, pad, stride, stride, 1, 1, kCudnnCrossCorrelation, kCudnnFloat) ==
            kCudnnSuccess);
    REQUIRE(cudnn_function<SetMath>("cudnnSetConvolutionMathType")(conv, math) == kCudnnSuccess);
  }
  ~CudnnConv() {
    using Destroy = int (*)(void*);
    cudnn_function<Destroy>("cudnnDestroyConvolutionDescriptor")(conv);
    cudnn_function<Destroy>("cudnnDestroyFilterDescriptor")(w_desc);
    cudnn_function<Destroy>("cudnnDestroyTensorDescriptor")(y_desc);
    cudnn_function<Destroy>("cudnnDestroyTensorDescriptor")(x_desc);
    cudnn_function<Destroy>("cudnnDestroy")(handle);
  }
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  int workspace_size(int algo, size_t* bytes) const {
    return cudnn_function<Workspace>("cudnnGetConvolutionForwardWorkspaceSize")(
        handle, x_desc, w_desc, conv, y_desc, algo, bytes);
  }
  int run(int algo, const float* x, const float* wt, float* y, void* workspace,
          size_t bytes) const {
    const float one = 1.0f, zero = 0.0f;
    return forward(handle, &one, x_desc, x, w_desc, wt, conv, algo, workspace, bytes, &zero,
                   y_desc, y);
  }

  static std::vector<float> input() {
    std::vector<float> v(n * c * h * w);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.9 * i));
    return v;
  }
  static std::vector<float> filter() {
    std::vector<float> v(k * c * r * r);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::cos(1.7 * i) * 0.5);
    return v;
  }
  // Cross-correlation in double, from the definition.
  static std::vector<double> reference() {
    const std::vector<float> x = input(), wt = filter();
    std::vector<double> y(n * k * oh * ow, 0.0);
    for (int o = 0; o < k; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j)
          for (int ch = 0; ch < c; ++ch)
            for (int a = 0; a < r; ++a)
              for (int b = 0; b < r; ++b) {
                const int row = i * stride - pad + a, col = j * stride - pad + b;
                if (row < 0 || row >= h || col < 0 || col >= w) continue;
                y[(o * oh + i) * ow + j] +=
                    double{x[(ch * h + row) * w + col]} * wt[((o * c + ch) * r + a) * r + b];
              }
    return y;
  }
};

TEST_CASE("cuDNN stand-in: a convolution with its full workspace, and one short of it") {
  const CudnnConv conv(kCudnnFmaMath);
  DeviceArray<float> x(CudnnConv::input()), wt(CudnnConv::filter()),
      y(CudnnConv::n * CudnnConv::k * CudnnConv::oh * CudnnConv::ow, -7.0f);
  constexpr int algo = 1;  // the stand-in's algorithm with a workspace
  size_t bytes = 0;
  REQUIRE(conv.workspace_size(algo, &bytes) == kCudnnSuccess);
  REQUIRE(bytes > 0);
  DeviceArray<unsigned char> workspace(bytes);
  Stream stream;
  REQUIRE(cudnn_function<int (*)(void*, cudaStream_t)>("cudnnSetStream")(conv.handle, stream) ==
          kCudnnSuccess);

  CHECK(conv.run(algo, x, wt, y, workspace, bytes - 1) == kCudnnBadParam);
  CHECK(conv.run(algo, x, wt, y, nullptr, bytes) == kCudnnBadParam);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  for (float v : y.read()) CHECK(v == -7.0f);  // a refused call writes nothing

  REQUIRE(conv.run(algo, x, wt, y, workspace, bytes) == kCudnnSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> got = y.read();
  const std::vector<double> want = CudnnConv::reference();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
}

// TF32 as NVIDIA defines it: 8 exponent bits, 10 mantissa bits (ties to
// even here, the emulator's rounding).
float tf32_of(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

TEST_CASE("cuDNN stand-in: f32 data with tensor-op math multiplies in TF32") {
  const CudnnConv conv(kCudnnTensorOpMath);
  const std::vector<float> x_host = CudnnConv::input(), w_host = CudnnConv::filter();
  DeviceArray<float> x(x_host), wt(w_host),
      y(CudnnConv::n * CudnnConv::k * CudnnConv::oh * CudnnConv::ow);
  size_t bytes = 0;
  REQUIRE(conv.workspace_size(0, &bytes) == kCudnnSuccess);
  Stream stream;
  REQUIRE(cudnn_function<int (*)(void*, cudaStream_t)>("cudnnSetStream")(conv.handle, stream) ==
          kCudnnSuccess);
  REQUIRE(conv.run(0, x, wt, y, nullptr, 0) == kCudnnSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> got = y.read();
  const std::vector<double> exact = CudnnConv::reference();
  // The same cross-correlation of the operands rounded to TF32.
  std::vector<double> want(exact.size(), 0.0);
  constexpr int c = CudnnConv::c, h = CudnnConv::h, w = CudnnConv::w, r = CudnnConv::r;
  for (int o = 0; o < CudnnConv::k; ++o)
    for (int i = 0; i < CudnnConv::oh; ++i)
      for (int j = 0; j < CudnnConv::ow; ++j)
        for (int ch = 0; ch < c; ++ch)
          for (int a = 0; a < r; ++a)
            for (int b = 0; b < r; ++b) {
              const int row = i * CudnnConv::stride - CudnnConv::pad + a;
              const int col = j * CudnnConv::stride - CudnnConv::pad + b;
              if (row < 0 || row >= h || col < 0 || col >= w) continue;
              want[(o * CudnnConv::oh + i) * CudnnConv::ow + j] +=
                  double{tf32_of(x_host[(ch * h + row) * w + col])} *
                  tf32_of(w_host[((o * c + ch) * r + a) * r + b]);
            }
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    differ += std::fabs(got[i] - exact[i]) > 1e-5 * std::fabs(exact[i]);
  }
  CHECK(differ > 0);  // not the exact fp32 result
}

TEST_CASE("cuDNN stand-in: a captured convolution whose input was freed faults at replay") {
  const ChildOutcome outcome = run_in_child([] {
    const CudnnConv conv(kCudnnFmaMath);
    Stream stream;
    cudnn_function<int (*)(void*, cudaStream_t)>("cudnnSetStream")(conv.handle, stream);
    float* x = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&x), sizeof(float) * 40) != cudaSuccess) return;
    DeviceArray<float> wt(CudnnConv::filter()), y(18);
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (conv.run(0, x, wt, y, nullptr, 0) != kCudnnSuccess) return;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    cudaGraphInstantiate(&exec, graph);
    cudaFree(x);
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
  });
  INFO("child stderr: " << outcome.stderr_text);
  CHECK(outcome.signal == SIGABRT);
  CHECK(outcome.stderr_text.find("not (or no longer) in device memory") != std::string::npos);
}

}  // namespace
