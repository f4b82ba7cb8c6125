// A CPU emulation of the CUDA execution model, so that kernels' logic
// (indexing, masking, reductions, the placement of barriers) is tested on
// machines without a GPU. Test-only; include it before the kernels' header.
//
// Every CUDA thread is a fiber (ucontext) on the calling OS thread; blocks
// run one after another, and within a block the scheduler runs one warp at
// a time for as long as it can: a warp runs until all its lanes wait at the
// block barrier or have exited, lanes in order, each until it waits at a
// warp barrier. Warps take turns in a pseudo-random order that changes at
// every block barrier (fixed seed: runs are reproducible). So a warp runs
// far ahead of the others, and a missing __syncthreads between one warp's
// writes and another's reads (or reads and later writes) of shared memory
// gives a wrong result deterministically, as does a missing __syncwarp
// between lanes. Emulated:
//   - threadIdx, blockIdx, blockDim, gridDim;
//   - __syncthreads and __syncwarp; a thread that returns no longer counts
//     at either, as on the hardware; a barrier that can never complete
//     (divergent barriers) aborts with a message;
//   - __shfl_xor_sync for float, through a per-warp exchange buffer;
//   - PTX's mma.sync.m16n8k16 for bf16 with fp32 accumulation
//     (MmaM16N8K16, which kernels/cuda/mma.cuh calls): every lane puts its
//     operand fragments in a per-warp buffer, and after a warp barrier
//     computes its own share of the product from the others'; and its
//     ldmatrix (LdMatrix), each lane reading the rows the others address;
//   - cp.async (AsyncCopy, AsyncCommit, AsyncWait): a copy lands only at
//     the wait that covers its group;
//   - atomicAdd on float; rsqrtf;
//   - dynamic shared memory (STRATA_DYNAMIC_SMEM), filled with 0xff bytes
//     (NaN as float and as bf16) so that a read before a write shows;
//     static __shared__ arrays are refused at compile time;
// Not emulated: timing, memory coalescing, bank conflicts, register and
// shared-memory limits, the exact rounding inside real tensor cores.
#ifndef STRATA_TESTING_CUDA_EMULATION_H_
#define STRATA_TESTING_CUDA_EMULATION_H_

#define STRATA_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace strata::emu {

// Runs `kernel` once per thread of a grid of blocks of `block` threads
// (their product a multiple of 32, at most 1024), with `smem_bytes` of
// dynamic shared memory per block. Blocks run in order, x fastest.
void RunGrid(dim3 grid, dim3 block, size_t smem_bytes,
             const std::function<void()>& kernel);

// The running thread's index within its block, x fastest (warp w holds
// indices [32w, 32w + 32)).
inline unsigned LinearThread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// What a launch on a GPU would refuse: more than 48 KiB of dynamic shared
// memory unless the kernel opted in to as much (cudaFuncSetAttribute, which
// the virtual GPU records through SetMaxDynamicSharedMemory), more than
// 1024 threads a block, a grid's y or z above 65535. Aborts with a message.
// STRATA_LAUNCH calls it.
void CheckLaunch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes);
void SetMaxDynamicSharedMemory(const void* kernel, int bytes);

// Where a launch on `stream` runs. The emulation alone runs it at once; the
// virtual GPU (testing/cuda/virtual_streams.h) installs a queue that runs
// it in its stream's order when something waits for that stream, as a GPU
// would run it some time after the launch returned. STRATA_LAUNCH calls
// Launch.
using LaunchQueue = void (*)(cudaStream_t stream, std::function<void()> work);
void SetLaunchQueue(LaunchQueue queue);
void Launch(cudaStream_t stream, std::function<void()> work);

// The running block's dynamic shared memory.
unsigned char* SharedMemory();
// The block and warp barriers; the running warp's 32-float exchange buffer.
void SyncThreads();
void SyncWarp();
float* WarpExchange();

// d += A B for the running warp's m16n8k16 fragments (kernels/cuda/mma.cuh
// gives the layout); every lane of the warp calls it.
void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
// PTX's ldmatrix.m8n8.x`count` (.trans with `trans`) for the running warp:
// `row` is this lane's row address (kernels/cuda/mma.cuh, LdMatrixX4).
void LdMatrix(uint32_t* r, int count, const void* row, bool trans);
// PTX's cp.async for the running thread (kernels/cuda/async_copy.cuh):
// AsyncCopy reads `bytes` (at most 16) at src now and writes them to dst
// only when an AsyncWait lets its group land (or the thread exits), so a
// read of the tile before the wait, or by another thread before a barrier
// that follows the wait, sees the old contents. AsyncCommit closes the
// group; AsyncWait(n) lands every committed group but the n most recent.
void AsyncCopy(void* dst, const void* src, int bytes);
void AsyncCommit();
void AsyncWait(int pending);

}  // namespace strata::emu

#define __launch_bounds__(...)
// A static __shared__ array would be a per-thread local here: kernels that
// run on the emulator take shared memory through STRATA_DYNAMIC_SMEM.
#undef __shared__
#define __shared__ static_shared_memory_is_not_emulated

// Checks a condition the hardware would enforce (alignment, say): aborts
// with a message on the emulator; nothing on a GPU (kernels/cuda/launch.cuh).
#define STRATA_DEVICE_CHECK(cond, what)                               \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "CUDA emulation: %s (%s)\n", what, #cond); \
      std::abort();                                                   \
    }                                                                 \
  } while (0)

#define STRATA_DYNAMIC_SMEM(name) \
  unsigned char* name = ::strata::emu::SharedMemory()

inline void __syncthreads() { strata::emu::SyncThreads(); }

inline void __syncwarp(unsigned = 0xffffffffu) { strata::emu::SyncWarp(); }

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  const unsigned lane = strata::emu::LinearThread() % 32;
  float* x = strata::emu::WarpExchange();
  x[lane] = v;
  __syncwarp();
  const float got = x[lane ^ static_cast<unsigned>(lane_mask)];
  __syncwarp();  // nobody overwrites x before every lane has read
  return got;
}

// cuda_runtime.h offers this overload for kernels only to nvcc.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr,
                                 int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr,
                                value);
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

inline float atomicAdd(float* p, float v) {
  const float old = *p;  // one fiber runs at a time
  *p = old + v;
  return old;
}

#endif  // STRATA_TESTING_CUDA_EMULATION_H_
