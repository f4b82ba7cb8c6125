#include "testing/cuda/emulation.h"

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/check.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace strata::emu {
namespace {

// Large enough for the kernels' locals (an emulated WMMA fragment is 1 KiB).
constexpr size_t kStackBytes = size_t{128} << 10;

// A saved execution context and the switch between two. On x86-64 a few
// instructions (callee-saved registers and the stack pointer): swapcontext
// also saves the signal mask with a system call, which made it 60% of the
// emulation's time. Elsewhere, under AddressSanitizer (which follows
// swapcontext but not a hand-made switch) and with control-flow protection
// (a shadow stack would refuse the switch's return), ucontext.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__CET__)
struct Context {
  void* sp = nullptr;
};

extern "C" void strata_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl strata_emu_switch
  .type strata_emu_switch, @function
strata_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size strata_emu_switch, .-strata_emu_switch
)");

void Switch(Context& from, Context& to) { strata_emu_switch(&from.sp, to.sp); }

// A stack whose first switch-in "returns" into entry, as if called (the
// stack pointer is 8 mod 16 at its first instruction). entry never returns.
void InitContext(Context& c, char* stack, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top);
  *--slot = nullptr;                              // entry's return address
  *--slot = reinterpret_cast<void*>(entry);       // where the switch returns
  for (int i = 0; i < 6; ++i) *--slot = nullptr;  // rbp rbx r12-r15
  c.sp = slot;
}
#else
struct Context {
  ucontext_t uc{};  // AddressSanitizer reads uc_stack on every switch
};

void Switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

// Not inlined: getcontext returns twice, which must not clobber the
// caller's loop variables.
[[gnu::noinline]] void InitContext(Context& c, char* stack, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = kStackBytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

// A copy issued with AsyncCopy that has not landed: its bytes (read at
// issue), where they go, and its group (the thread's commit count then).
struct PendingCopy {
  void* dst;
  unsigned char bytes[16];
  int size;
  int group;
};

struct Fiber {
  enum State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };
  Context ctx;
  uint3 idx;
  State state = kReady;
  std::vector<PendingCopy> copies;  // in issue order
  int committed = 0;                // groups committed
};

// Lands the running fiber's copies of groups < `group`.
void LandCopies(Fiber& f, int group) {
  auto keep = f.copies.begin();
  for (PendingCopy& c : f.copies) {
    if (c.group < group) {
      std::memcpy(c.dst, c.bytes, c.size);
    } else {
      *keep++ = c;
    }
  }
  f.copies.erase(keep, f.copies.end());
}

// The state of the block being run (one per OS thread that emulates).
struct Block {
  Context scheduler;
  std::vector<Fiber> fibers;
  int live = 0;                // fibers not done
  std::vector<int> warp_live;  // per warp
  int at_block_barrier = 0;    // fibers waiting there
  std::vector<int> at_warp_barrier;
  std::vector<float> exchange;              // 32 floats per warp
  std::vector<uint32_t> fragments;          // 6 words per lane (MMA)
  std::vector<const void*> rows;            // a row address per lane
  std::vector<unsigned char> smem_storage;  // smem_bytes + 128
  unsigned char* smem = nullptr;            // 128-byte aligned, as declared
  const std::function<void()>* kernel = nullptr;
  Fiber* running = nullptr;
};

thread_local Block* current = nullptr;
// Fiber stacks, kept between blocks and grids.
thread_local std::vector<std::unique_ptr<char[]>> stacks;

int WarpOf(const Fiber& f) {
  return static_cast<int>(
      (f.idx.x + blockDim.x * (f.idx.y + blockDim.y * f.idx.z)) / 32);
}

// Releases the block barrier when every live fiber waits at it, and each
// warp barrier when every live lane of the warp waits at it.
void ReleaseBarriers(Block& b) {
  if (b.at_block_barrier > 0 && b.at_block_barrier == b.live) {
    for (Fiber& f : b.fibers) {
      if (f.state == Fiber::kAtBlockBarrier) f.state = Fiber::kReady;
    }
    b.at_block_barrier = 0;
  }
  for (size_t w = 0; w < b.warp_live.size(); ++w) {
    if (b.at_warp_barrier[w] > 0 && b.at_warp_barrier[w] == b.warp_live[w]) {
      for (size_t l = 0; l < 32; ++l) {
        Fiber& f = b.fibers[32 * w + l];
        if (f.state == Fiber::kAtWarpBarrier) f.state = Fiber::kReady;
      }
      b.at_warp_barrier[w] = 0;
    }
  }
}

// Parks the running fiber in `state` and returns to the scheduler; returns
// when the scheduler resumes it.
void Park(Fiber::State state) {
  Block& b = *current;
  Fiber& f = *b.running;
  f.state = state;
  if (state == Fiber::kAtBlockBarrier) ++b.at_block_barrier;
  if (state == Fiber::kAtWarpBarrier) ++b.at_warp_barrier[WarpOf(f)];
  ReleaseBarriers(b);
  Switch(f.ctx, b.scheduler);
}

void FiberMain() {
  Block& b = *current;
  (*b.kernel)();
  Fiber& f = *b.running;
  LandCopies(f, INT32_MAX);  // copies never waited for land at exit
  f.state = Fiber::kDone;
  --b.live;
  --b.warp_live[WarpOf(f)];
  ReleaseBarriers(b);
  Switch(f.ctx, b.scheduler);  // never resumed
}

// Runs fiber i until it parks or finishes.
void Resume(Block& b, int i) {
  Fiber& f = b.fibers[i];
  b.running = &f;
  threadIdx = f.idx;
  Switch(b.scheduler, f.ctx);
  b.running = nullptr;
}

void RunBlock(Block& b, std::minstd_rand& rng) {
  const int warps = static_cast<int>(b.warp_live.size());
  std::vector<int> order(warps);
  std::iota(order.begin(), order.end(), 0);
  while (b.live > 0) {
    std::shuffle(order.begin(), order.end(), rng);
    // Lanes run in increasing or decreasing order, chosen per phase, so a
    // lane that reads what a lower lane wrote without __syncwarp is caught
    // as well as one that reads a higher lane's.
    const bool down = rng() % 2 == 1;
    bool progressed = false;
    for (int w : order) {
      // The warp runs until none of its lanes can.
      for (bool again = true; again;) {
        again = false;
        for (int i = 0; i < 32; ++i) {
          const int l = down ? 31 - i : i;
          if (b.fibers[32 * w + l].state == Fiber::kReady) {
            Resume(b, 32 * w + l);
            again = progressed = true;
          }
        }
      }
    }
    if (!progressed) {
      std::fprintf(stderr,
                   "CUDA emulation: block (%u,%u,%u) deadlocked: %d of %d "
                   "threads wait at __syncthreads, the rest at __syncwarp "
                   "(a barrier not every thread reaches)\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, b.at_block_barrier,
                   b.live);
      std::abort();
    }
  }
}

}  // namespace

void RunGrid(dim3 grid, dim3 block, size_t smem_bytes,
             const std::function<void()>& kernel) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  STRATA_CHECK(threads > 0 && threads % 32 == 0 && threads <= 1024);
  STRATA_CHECK(current == nullptr);  // kernels do not launch kernels
  while (stacks.size() < static_cast<size_t>(threads)) {
    stacks.push_back(std::make_unique<char[]>(kStackBytes));
  }
  std::minstd_rand rng(12345);
  blockDim = block;
  gridDim = grid;
  // Blocks in a seeded random order: one that reads another block's output
  // of the same launch gets stale data, as it may on a GPU.
  const uint64_t num_blocks = uint64_t{grid.x} * grid.y * grid.z;
  std::vector<uint64_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), uint64_t{0});
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const uint64_t linear : blocks) {
    const unsigned x = static_cast<unsigned>(linear % grid.x);
    const unsigned y = static_cast<unsigned>(linear / grid.x % grid.y);
    const unsigned z = static_cast<unsigned>(linear / grid.x / grid.y);
    blockIdx = uint3{x, y, z};
    Block b;
    b.kernel = &kernel;
    b.fibers.resize(threads);
    b.live = threads;
    b.warp_live.assign(threads / 32, 32);
    b.at_warp_barrier.assign(threads / 32, 0);
    b.exchange.assign(threads, 0.0f);
    b.fragments.assign(6 * threads, 0);
    b.rows.assign(threads, nullptr);
    b.smem_storage.assign(smem_bytes + 128, 0xff);
    b.smem = b.smem_storage.data() +
             (128 - reinterpret_cast<uintptr_t>(b.smem_storage.data()) % 128);
    for (int t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      const unsigned u = static_cast<unsigned>(t);
      f.idx =
          uint3{u % block.x, u / block.x % block.y, u / (block.x * block.y)};
      InitContext(f.ctx, stacks[t].get(), FiberMain);
    }
    current = &b;
    RunBlock(b, rng);
    current = nullptr;
  }
}

namespace {

std::atomic<LaunchQueue> launch_queue{nullptr};

}  // namespace

void SetLaunchQueue(LaunchQueue queue) { launch_queue.store(queue); }

void Launch(cudaStream_t stream, std::function<void()> work) {
  if (LaunchQueue queue = launch_queue.load()) {
    queue(stream, std::move(work));
  } else {
    work();
  }
}

namespace {

absl::Mutex opt_in_mu;
std::map<const void*, int>& OptIns() {
  static auto* m = new std::map<const void*, int>;
  return *m;
}

}  // namespace

void SetMaxDynamicSharedMemory(const void* kernel, int bytes) {
  absl::MutexLock lock(&opt_in_mu);
  OptIns()[kernel] = bytes;
}

void CheckLaunch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes) {
  size_t limit = 48 << 10;
  {
    absl::MutexLock lock(&opt_in_mu);
    if (auto it = OptIns().find(kernel); it != OptIns().end()) {
      limit = std::max(limit, static_cast<size_t>(it->second));
    }
  }
  const char* problem = nullptr;
  if (smem_bytes > limit) {
    problem = "more dynamic shared memory than the kernel opted in to";
  } else if (uint64_t{block.x} * block.y * block.z > 1024) {
    problem = "more than 1024 threads a block";
  } else if (grid.y > 65535 || grid.z > 65535) {
    problem = "a grid's y or z above 65535";
  }
  if (problem != nullptr) {
    std::fprintf(stderr,
                 "CUDA emulation: a launch a GPU would refuse: %s (grid "
                 "%u,%u,%u, block %u,%u,%u, %zu bytes of shared memory, "
                 "%zu allowed)\n",
                 problem, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                 smem_bytes, limit);
    std::abort();
  }
}

unsigned char* SharedMemory() {
  STRATA_CHECK(current != nullptr);
  return current->smem;
}

void SyncThreads() { Park(Fiber::kAtBlockBarrier); }

void SyncWarp() { Park(Fiber::kAtWarpBarrier); }

float* WarpExchange() {
  STRATA_CHECK(current != nullptr);
  return current->exchange.data() + 32 * (LinearThread() / 32);
}

void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4],
                 const uint32_t (&b)[2]) {
  STRATA_CHECK(current != nullptr);
  const unsigned lane = LinearThread() % 32;
  uint32_t* warp = current->fragments.data() + 6 * 32 * (LinearThread() / 32);
  uint32_t* mine = warp + 6 * lane;
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  SyncWarp();
  // Element (row, k) of A and (k, col) of B, from the lanes that hold them.
  auto half = [](uint32_t word, int hi) {
    const uint16_t bits = static_cast<uint16_t>(hi ? word >> 16 : word);
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  };
  auto a_at = [&](int row, int k) {
    const uint32_t* f = warp + 6 * (4 * (row % 8) + (k % 8) / 2);
    return half(f[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
  };
  auto b_at = [&](int k, int col) {
    const uint32_t* f = warp + 6 * (4 * col + (k % 8) / 2);
    return half(f[4 + (k >= 8 ? 1 : 0)], k % 2);
  };
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    d[i] = sum;
  }
  SyncWarp();  // nobody overwrites the buffer before every lane has read
}

void LdMatrix(uint32_t* r, int count, const void* row, bool trans) {
  STRATA_CHECK(current != nullptr);
  const unsigned lane = LinearThread() % 32;
  const void** warp = current->rows.data() + 32 * (LinearThread() / 32);
  warp[lane] = row;
  SyncWarp();
  // Element (r, c) of matrix j: column c of the row lane 8j + r gives.
  auto at = [&](int j, int r, int c) {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const char*>(warp[8 * j + r]) + 2 * c, 2);
    return uint32_t{bits};
  };
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int j = 0; j < count; ++j) {
    r[j] = trans ? at(j, 2 * t, g) | at(j, 2 * t + 1, g) << 16
                 : at(j, g, 2 * t) | at(j, g, 2 * t + 1) << 16;
  }
  SyncWarp();  // nobody overwrites the addresses before every lane has read
}

void AsyncCopy(void* dst, const void* src, int bytes) {
  STRATA_CHECK(current != nullptr && bytes > 0 && bytes <= 16);
  Fiber& f = *current->running;
  PendingCopy c{dst, {}, bytes, f.committed};
  std::memcpy(c.bytes, src, bytes);
  f.copies.push_back(c);
}

void AsyncCommit() {
  STRATA_CHECK(current != nullptr);
  ++current->running->committed;
}

void AsyncWait(int pending) {
  STRATA_CHECK(current != nullptr);
  Fiber& f = *current->running;
  LandCopies(f, f.committed - pending);
}

}  // namespace strata::emu
