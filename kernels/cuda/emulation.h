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
//   - atomicAdd on float; rsqrtf;
//   - dynamic shared memory (STRATA_DYNAMIC_SMEM), filled with 0xff bytes
//     (NaN as float and as bf16) so that a read before a write shows;
//     static __shared__ arrays are refused at compile time;
//   - nvcuda::wmma 16x16x16 fragments for bf16 and float: every lane holds
//     the whole tile, mma_sync computes it in fp32, and store_matrix_sync
//     writes only the lane's share (element e by lane 31 - e % 32, so
//     that lanes which run first see the others' elements unwritten).
// Not emulated: timing, memory coalescing, bank conflicts, register and
// shared-memory limits, the exact rounding inside real tensor cores.
#ifndef STRATA_KERNELS_CUDA_EMULATION_H_
#define STRATA_KERNELS_CUDA_EMULATION_H_

#define STRATA_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>

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

// The running block's dynamic shared memory.
unsigned char* SharedMemory();
// The block and warp barriers; the running warp's 32-float exchange buffer.
void SyncThreads();
void SyncWarp();
float* WarpExchange();

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

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// Element (r, c) of the 16 x 16 tile at v[16 * r + c], in every lane.
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 only");
  float v[256];
};

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float x) {
  for (float& e : f.v) e = x;
}

// WMMA's requirements, which the hardware enforces with a fault or wrong
// data: a 256-bit aligned pointer, and a leading dimension that is a
// multiple of 16 bytes.
template <typename T>
void CheckFragmentAccess(const T* p, unsigned ld) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ld * sizeof(T)) % 16 != 0) {
    std::fprintf(stderr,
                 "CUDA emulation: WMMA access at %p with leading dimension %u "
                 "(%zu-byte elements): needs 32-byte alignment and a multiple "
                 "of 16 bytes\n",
                 static_cast<const void*>(p), ld, sizeof(T));
    std::abort();
  }
}

inline float ToFloat(float x) { return x; }
inline float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// matrix_a / matrix_b: the layout is part of the type.
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p,
                      unsigned ld) {
  static_assert(!std::is_void_v<Layout>, "operands carry a layout");
  CheckFragmentAccess(p, ld);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.v[16 * r + c] = ToFloat(
          std::is_same_v<Layout, row_major> ? p[r * ld + c] : p[c * ld + r]);
    }
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f,
                             const float* p, unsigned ld, layout_t layout) {
  CheckFragmentAccess(p, ld);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.v[16 * r + c] = layout == mem_row_major ? p[r * ld + c] : p[c * ld + r];
    }
  }
}

inline void store_matrix_sync(float* p,
                              const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t layout) {
  CheckFragmentAccess(p, ld);
  // Lane l writes the elements e with e % 32 == 31 - l: lanes run in
  // order here, so a lane that reads its row of the tile before a
  // __syncwarp finds elements of lanes that have not stored yet.
  const unsigned lane = strata::emu::LinearThread() % 32;
  for (unsigned e = 31 - lane; e < 256; e += 32) {
    const unsigned r = e / 16, c = e % 16;
    (layout == mem_row_major ? p[r * ld + c] : p[c * ld + r]) = f.v[e];
  }
}

template <typename TA, typename LA, typename TB, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float sum = c.v[16 * r + col];
      for (int k = 0; k < 16; ++k) sum += a.v[16 * r + k] * b.v[16 * k + col];
      out[16 * r + col] = sum;
    }
  }
  for (int i = 0; i < 256; ++i) d.v[i] = out[i];
}

}  // namespace nvcuda::wmma

#endif  // STRATA_KERNELS_CUDA_EMULATION_H_
