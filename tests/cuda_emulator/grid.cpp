// grid.cpp (CUDA emulator) -- runs a kernel's grid on the calling host
// thread: blocks one after another, the threads of a block as fibers, each
// running until it exits or waits at __syncthreads or a warp intrinsic.
//
// What a fiber-per-thread execution checks that a plain loop could not:
// barriers and warp collectives really wait for their peers, so a kernel
// whose threads leave a warp intrinsic's mask short, read a lane outside
// the mask, or wait at __syncthreads for threads stuck elsewhere stops with
// a description instead of giving a plausible result. (Threads waiting at
// two different __syncthreads calls are released together, as a GPU does:
// telling the calls apart by address fails where the compiler duplicates a
// barrier.) Blocks run in ascending and descending order in alternate
// launches; between two barriers the threads of a block run in an order
// that changes from block to block and pass to pass (forward, backward,
// rotated). A result that depends on either order differs from run to
// run, which the tests' bit-for-bit comparisons see.
#include <cuda_runtime.h>

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulator.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define AMPX_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define AMPX_EMU_ASAN 1
#endif
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator switches fibers with x86-64 code"
#endif

// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer in *save and resumes the fiber
// whose stack pointer is `load` (System V x86-64).
extern "C" void ampx_emu_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .globl ampx_emu_switch
  .hidden ampx_emu_switch
  .type ampx_emu_switch, @function
ampx_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ampx_emu_switch, .-ampx_emu_switch
)");

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace ampx_emu {

namespace {

constexpr unsigned int kMaxBlockThreads = 1024;
// Kernel parameters reach 32 KiB (multi_tensor.cuh), and each thread holds a
// copy of them on its stack; AddressSanitizer adds redzones around it.
constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kGuardBytes = size_t{4} << 10;

enum class LaneState { Runnable, AtBarrier, AtWarp, Done, Faulted };

struct ThreadPlace {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

struct Lane {
  ThreadPlace place;
  void* sp = nullptr;
  LaneState state = LaneState::Runnable;
  uint64_t result = 0;  // of the warp collective it waited at
  WarpOp waiting_op = WarpOp::Sync;  // while AtWarp: where
  unsigned int waiting_mask = 0;
};

// The lanes of one warp meeting at a collective: those of `mask`, at the
// same intrinsic with the same mask. Lanes of one warp may wait at several
// at once (disjoint groups of a divergent warp, or some lanes already at a
// __syncwarp while the others finish a shuffle), as on sm_70 and later.
struct Rendezvous {
  unsigned int arrived = 0;
  unsigned int mask = 0;
  WarpOp op = WarpOp::Sync;
  int width = 32;
  uint64_t values[32];
  int args[32];
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Index: return "__shfl_sync";
    case WarpOp::Up: return "__shfl_up_sync";
    case WarpOp::Down: return "__shfl_down_sync";
    case WarpOp::Xor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::MatchAny: return "__match_any_sync";
  }
  return "?";
}

// Fiber stacks, made once per host thread and reused by every block it runs.
// Each has a guard page below it, so an overflow faults instead of
// corrupting its neighbour.
class Stacks {
 public:
  ~Stacks() { release(); }
  char* top(unsigned int i) {
    return static_cast<char*>(base_) + i * (kStackBytes + kGuardBytes) + kGuardBytes + kStackBytes;
  }
  void reserve(unsigned int count) {
    if (count <= count_) return;
    release();
    const size_t bytes = count * (kStackBytes + kGuardBytes);
    base_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      count_ = 0;
      throw DeviceFault("cannot map fiber stacks");
    }
    for (unsigned int i = 0; i < count; ++i)
      mprotect(static_cast<char*>(base_) + i * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    count_ = count;
  }

 private:
  // A lane that faults or finishes never returns from its frames, so ASan's
  // shadow still marks them; left so, it would flag whatever memory the
  // kernel maps here next (another thread's stack or TLS).
  void release() {
    if (base_ == nullptr) return;
    const size_t bytes = count_ * (kStackBytes + kGuardBytes);
#if defined(AMPX_EMU_ASAN)
    __asan_unpoison_memory_region(base_, bytes);
#endif
    munmap(base_, bytes);
    base_ = nullptr;
    count_ = 0;
  }

  void* base_ = nullptr;
  unsigned int count_ = 0;
};

// The block being run on this host thread.
struct Block {
  std::vector<Lane> lanes;
  std::vector<std::vector<Rendezvous>> warps;  // per warp, those waiting
  void* scheduler_sp = nullptr;
  Lane* running = nullptr;
  const std::function<void()>* body = nullptr;
  std::string fault;
  Stacks stacks;
#if defined(AMPX_EMU_ASAN)
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};

thread_local Block* this_block = nullptr;

Block& block() { return *this_block; }

void switch_to_lane(Block& b, Lane& lane, unsigned int index) {
  b.running = &lane;
  threadIdx = lane.place.thread_idx;
  blockIdx = lane.place.block_idx;
  blockDim = lane.place.block_dim;
  gridDim = lane.place.grid_dim;
#if defined(AMPX_EMU_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, b.stacks.top(index) - kStackBytes, kStackBytes);
  ampx_emu_switch(&b.scheduler_sp, lane.sp);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  static_cast<void>(index);
  ampx_emu_switch(&b.scheduler_sp, lane.sp);
#endif
}

void switch_to_scheduler(Block& b, bool exiting) {
  Lane& lane = *b.running;
#if defined(AMPX_EMU_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake_stack, b.scheduler_stack_bottom,
                                 b.scheduler_stack_size);
  ampx_emu_switch(&lane.sp, b.scheduler_sp);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  static_cast<void>(exiting);
  ampx_emu_switch(&lane.sp, b.scheduler_sp);
#endif
}

[[noreturn]] void lane_entry() {
  Block& b = block();
#if defined(AMPX_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_bottom, &b.scheduler_stack_size);
#endif
  (*b.body)();
  b.running->state = LaneState::Done;
  switch_to_scheduler(b, true);
  std::abort();  // a finished lane is never resumed
}

// A fresh frame that ampx_emu_switch "returns" into lane_entry from.
void* initial_frame(char* top) {
  auto* frame = reinterpret_cast<uint64_t*>(top - 80);
  std::memset(frame, 0, 80);
  uint32_t mxcsr = 0;
  uint16_t control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(control));
  std::memcpy(reinterpret_cast<char*>(frame), &control, sizeof control);
  std::memcpy(reinterpret_cast<char*>(frame) + 8, &mxcsr, sizeof mxcsr);
  frame[8] = reinterpret_cast<uint64_t>(&lane_entry);
  return frame;
}

[[noreturn]] void lane_fault(Block& b, const std::string& message) {
  b.fault = message;
  b.running->state = LaneState::Faulted;
  switch_to_scheduler(b, false);
  std::abort();  // a faulted block is abandoned, never resumed
}

std::string where(const Lane& lane) {
  std::ostringstream s;
  const ThreadPlace& p = lane.place;
  s << "thread (" << p.thread_idx.x << "," << p.thread_idx.y << "," << p.thread_idx.z
    << ") of block (" << p.block_idx.x << "," << p.block_idx.y << "," << p.block_idx.z << ")";
  return s.str();
}

std::string deadlock_report(const Block& b) {
  std::ostringstream s;
  size_t at_barrier = 0, done = 0;
  for (const Lane& lane : b.lanes) {
    at_barrier += lane.state == LaneState::AtBarrier;
    done += lane.state == LaneState::Done;
  }
  s << "kernel deadlock: " << at_barrier << " thread(s) at __syncthreads, " << done
    << " exited";
  std::ostringstream waits;
  bool crossed = false;  // a lane a collective waits for waits at another one
  for (size_t w = 0; w < b.warps.size(); ++w) {
    for (const Rendezvous& r : b.warps[w]) {
      waits << "; warp " << w << " waits at " << op_name(r.op) << " (mask 0x" << std::hex
            << r.mask << ", arrived 0x" << r.arrived << std::dec << ") for lanes that are";
      for (unsigned int l = 0; l < 32; ++l) {
        if (!(r.mask & (1u << l)) || (r.arrived & (1u << l))) continue;
        const size_t t = w * 32 + l;
        waits << " " << l;
        if (t >= b.lanes.size()) {
          waits << ":absent";
          continue;
        }
        const Lane& lane = b.lanes[t];
        switch (lane.state) {
          case LaneState::Done: waits << ":exited"; break;
          case LaneState::AtBarrier: waits << ":at-syncthreads"; break;
          case LaneState::AtWarp:
            crossed = true;
            waits << ":at-" << op_name(lane.waiting_op) << "(0x" << std::hex << lane.waiting_mask
                  << std::dec << ")";
            break;
          default: waits << ":elsewhere"; break;
        }
      }
    }
  }
  if (crossed) s << " -- lanes of one warp wait at different warp intrinsics";
  s << waits.str();
  if (!b.lanes.empty()) s << " (block (" << b.lanes[0].place.block_idx.x << ","
                          << b.lanes[0].place.block_idx.y << "," << b.lanes[0].place.block_idx.z
                          << "))";
  return s.str();
}

// Which lane runs k-th in pass `pass` of a block: forward or backward by
// block, rotated by pass, so that no fixed order is ever relied on.
unsigned int lane_order(unsigned int k, unsigned int n, unsigned int pass, uint64_t block_serial) {
  const unsigned int start = static_cast<unsigned int>((block_serial * 7 + pass * 13) % n);
  const unsigned int i = (start + k) % n;
  return (block_serial + pass) % 2 == 0 ? i : n - 1 - i;
}

void run_block(Block& b, const dim3& grid, const dim3& dims, const uint3& block_idx,
               uint64_t block_serial) {
  const unsigned int n = dims.x * dims.y * dims.z;
  b.lanes.assign(n, Lane{});
  b.warps.assign((n + 31) / 32, std::vector<Rendezvous>{});
  for (unsigned int t = 0; t < n; ++t) {
    Lane& lane = b.lanes[t];
    lane.place.thread_idx = uint3{t % dims.x, (t / dims.x) % dims.y, t / (dims.x * dims.y)};
    lane.place.block_idx = block_idx;
    lane.place.block_dim = dims;
    lane.place.grid_dim = grid;
#if defined(AMPX_EMU_ASAN)
    // The stack's last user may have left poisoned frames behind (an
    // abandoned block, lane_entry's own frame).
    __asan_unpoison_memory_region(b.stacks.top(t) - kStackBytes, kStackBytes);
#endif
    lane.sp = initial_frame(b.stacks.top(t));
  }
  for (unsigned int pass = 0;; ++pass) {
    bool ran = false;
    for (unsigned int k = 0; k < n; ++k) {
      const unsigned int t = lane_order(k, n, pass, block_serial);
      Lane& lane = b.lanes[t];
      if (lane.state != LaneState::Runnable) continue;
      switch_to_lane(b, lane, t);
      ran = true;
      if (lane.state == LaneState::Faulted) throw DeviceFault(b.fault + " (" + where(lane) + ")");
    }
    unsigned int done = 0, at_barrier = 0, waiting_in_warp = 0;
    for (const Lane& lane : b.lanes) {
      done += lane.state == LaneState::Done;
      at_barrier += lane.state == LaneState::AtBarrier;
      waiting_in_warp += lane.state == LaneState::AtWarp;
    }
    if (done == n) return;
    if (waiting_in_warp == 0 && at_barrier > 0 && at_barrier == n - done) {
      for (Lane& lane : b.lanes)
        if (lane.state == LaneState::AtBarrier) lane.state = LaneState::Runnable;
      continue;
    }
    if (!ran) throw DeviceFault(deadlock_report(b));
  }
}

}  // namespace

void block_barrier() {
  Block& b = block();
  b.running->state = LaneState::AtBarrier;
  switch_to_scheduler(b, false);
}

uint64_t warp_collective(WarpOp op, unsigned int mask, uint64_t value, int arg, int width) {
  Block& b = block();
  Lane& me = *b.running;
  const size_t t = static_cast<size_t>(&me - b.lanes.data());
  const unsigned int lane = static_cast<unsigned int>(t % 32);
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    lane_fault(b, std::string(op_name(op)) + " with width " + std::to_string(width));
  if (!(mask & (1u << lane))) lane_fault(b, std::string(op_name(op)) + " by a lane outside its mask");
  std::vector<Rendezvous>& waiting = b.warps[t / 32];
  size_t index = 0;
  while (index < waiting.size() &&
         (waiting[index].op != op || waiting[index].mask != mask || waiting[index].width != width))
    ++index;
  if (index == waiting.size()) {
    waiting.emplace_back();
    waiting.back().mask = mask;
    waiting.back().op = op;
    waiting.back().width = width;
  }
  Rendezvous& r = waiting[index];
  r.values[lane] = value;
  r.args[lane] = arg;
  r.arrived |= 1u << lane;
  if (r.arrived != r.mask) {
    me.state = LaneState::AtWarp;
    me.waiting_op = op;
    me.waiting_mask = mask;
    switch_to_scheduler(b, false);
    return me.result;
  }

  // The last lane to arrive computes everyone's result.
  const size_t warp_base = t - lane;
  for (unsigned int l = 0; l < 32; ++l) {
    if (!(r.mask & (1u << l))) continue;
    const unsigned int segment = l & ~static_cast<unsigned int>(r.width - 1);
    const int a = r.op == WarpOp::Index ? r.args[l] : r.args[l] & 31;  // PTX reads 5 bits
    uint64_t result = 0;
    long source = -1;  // the lane whose value l receives, when it is another's
    switch (r.op) {
      case WarpOp::Sync: break;
      case WarpOp::Index: source = segment + ((a % r.width) + r.width) % r.width; break;
      case WarpOp::Up: source = static_cast<long>(l) - a >= static_cast<long>(segment) ? static_cast<long>(l) - a : l; break;
      case WarpOp::Down: source = l + a < segment + r.width ? l + a : l; break;
      case WarpOp::Xor: {
        const unsigned int other = l ^ static_cast<unsigned int>(a);
        source = other < segment + r.width && other < 32 ? other : l;
        break;
      }
      case WarpOp::Ballot:
        for (unsigned int m = 0; m < 32; ++m)
          if ((r.mask & (1u << m)) && r.values[m] != 0) result |= uint64_t{1} << m;
        break;
      case WarpOp::MatchAny:
        for (unsigned int m = 0; m < 32; ++m)
          if ((r.mask & (1u << m)) && r.values[m] == r.values[l]) result |= uint64_t{1} << m;
        break;
    }
    if (source >= 0) {
      if (!(r.mask & (1u << source))) {
        lane_fault(b, std::string(op_name(r.op)) + ": lane " + std::to_string(l) +
                          " reads lane " + std::to_string(source) + ", which is not in the mask");
      }
      result = r.values[source];
    }
    Lane& peer = b.lanes[warp_base + l];
    peer.result = result;
    if (&peer != &me) peer.state = LaneState::Runnable;
  }
  waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(index));
  return me.result;
}

void run_grid(const dim3& grid, const dim3& dims, const std::function<void()>& body) {
  thread_local Block host_thread_block;
  Block& b = host_thread_block;
  const unsigned int n = dims.x * dims.y * dims.z;
  b.stacks.reserve(n);
  b.body = &body;
  b.fault.clear();
  this_block = &b;
  try {
    // Blocks run first to last in one launch and last to first in the next,
    // so a kernel relying on an order of blocks gives different results.
    thread_local uint64_t launches = 0;
    const bool backward = launches++ % 2 == 1;
    const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
    for (uint64_t serial = 0; serial < blocks; ++serial) {
      const uint64_t i = backward ? blocks - 1 - serial : serial;
      const uint3 block_idx{static_cast<unsigned int>(i % grid.x),
                            static_cast<unsigned int>(i / grid.x % grid.y),
                            static_cast<unsigned int>(i / (uint64_t{grid.x} * grid.y))};
      run_block(b, grid, dims, block_idx, serial);
    }
  } catch (...) {
    this_block = nullptr;
    throw;
  }
  this_block = nullptr;
}

cudaError_t launch_grid(const cudaLaunchConfig_t& config, std::function<void()> thread_body) {
  const dim3 g = config.gridDim, d = config.blockDim;
  const uint64_t threads = uint64_t{d.x} * d.y * d.z;
  const bool valid = g.x >= 1 && g.y >= 1 && g.z >= 1 && g.x <= 0x7fffffffu && g.y <= 65535 &&
                     g.z <= 65535 && d.x >= 1 && d.y >= 1 && d.z >= 1 && d.x <= 1024 &&
                     d.y <= 1024 && d.z <= 64 && threads <= kMaxBlockThreads;
  if (!valid) return record_error(cudaErrorInvalidConfiguration);
  // Kernels of ampx use static shared memory only.
  if (config.dynamicSmemBytes != 0) return record_error(cudaErrorInvalidValue);
  return enqueue(config.stream,
                 [g, d, body = std::move(thread_body)] { run_grid(g, d, body); });
}

}  // namespace ampx_emu
