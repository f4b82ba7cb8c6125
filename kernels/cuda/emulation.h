// A CPU emulation of the parts of the CUDA execution model that the fused
// attention kernels use, so that their logic (tiling, indexing, masking,
// the online softmax, the order of barriers) is tested on machines without
// a GPU. Test-only; include it before the kernels' header.
//
// Every CUDA thread of a block is a std::thread; blocks run one after
// another. Emulated:
//   - threadIdx, blockIdx, blockDim, gridDim (thread-local);
//   - __syncthreads (a barrier of the block, after which some warps are
//     held back: see Jitter) and __syncwarp (of the warp);
//     a thread that returns drops out of both, as exited threads do;
//   - __shfl_xor_sync for float, through a per-warp exchange buffer;
//   - atomicAdd on float (std::atomic_ref);
//   - dynamic shared memory (STRATA_DYNAMIC_SMEM), filled with 0xff bytes
//     (NaN as float and as bf16) so that a read before a write shows;
//   - nvcuda::wmma 16x16x16 fragments for bf16 and float: every lane holds
//     the whole tile, mma_sync computes it in fp32, and store_matrix_sync
//     writes only the lane's share (element e by lane e % 32), so a lane
//     that reads another lane's stored elements without __syncwarp may see
//     stale data, as on the hardware.
// Not emulated: timing, memory coalescing, bank conflicts, register limits,
// the exact bf16 rounding points inside real tensor cores (fp32 here).
#ifndef STRATA_KERNELS_CUDA_EMULATION_H_
#define STRATA_KERNELS_CUDA_EMULATION_H_

#define STRATA_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace strata::emu {

// The shared state of the block a thread runs in.
struct Block {
  Block(int threads, size_t smem_bytes);
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> exchange;  // 32 per warp, for shuffles
  std::vector<unsigned char> smem;
};

// The calling thread's block (set by RunGrid).
Block& CurrentBlock();

// Runs `kernel` once per thread of a grid of blocks of `block` threads
// (their product a multiple of 32), with `smem_bytes` of dynamic shared
// memory per block. Blocks run in order, x fastest.
void RunGrid(dim3 grid, dim3 block, size_t smem_bytes,
             const std::function<void()>& kernel);

// After the block's n-th barrier, one warp in four (a pseudo-random choice
// per block, warp and n, the same for all its lanes) sleeps for 1 to 3 ms,
// long enough for the other warps to run well into the next phase on two
// cores. __syncthreads calls it, so that some warps run ahead of others as
// they do on a GPU, and a missing barrier between one phase's reads and the
// next phase's writes of the same shared memory shows up as a wrong result
// (removing the first barrier of cross-entropy's block reduction fails its
// test in about 6 runs of 10, against 1 in 20 without this).
void Jitter();

// The calling thread's index within its block, x fastest (warp w holds
// indices [32w, 32w + 32)).
inline unsigned LinearThread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

}  // namespace strata::emu

#define __launch_bounds__(...)
// A static __shared__ array would be a per-thread local here: kernels that
// run on the emulator take shared memory through STRATA_DYNAMIC_SMEM.
#undef __shared__
#define __shared__ static_shared_memory_is_not_emulated

#define STRATA_DYNAMIC_SMEM(name) \
  unsigned char* name = ::strata::emu::CurrentBlock().smem.data()

inline void __syncthreads() {
  strata::emu::CurrentBlock().all.arrive_and_wait();
  strata::emu::Jitter();
}

inline void __syncwarp(unsigned = 0xffffffffu) {
  strata::emu::CurrentBlock()
      .warps[strata::emu::LinearThread() / 32]
      ->arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  strata::emu::Block& b = strata::emu::CurrentBlock();
  const unsigned t = strata::emu::LinearThread(), warp = t / 32, lane = t % 32;
  float* x = b.exchange.data() + 32 * warp;
  x[lane] = v;
  __syncwarp();
  const float got = x[lane ^ static_cast<unsigned>(lane_mask)];
  __syncwarp();  // nobody overwrites x before every lane has read
  return got;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
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

inline float ToFloat(float x) { return x; }
inline float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// matrix_a / matrix_b: the layout is part of the type.
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p,
                      unsigned ld) {
  static_assert(!std::is_void_v<Layout>, "operands carry a layout");
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.v[16 * r + c] = ToFloat(
          std::is_same_v<Layout, row_major> ? p[r * ld + c] : p[c * ld + r]);
    }
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f,
                             const float* p, unsigned ld, layout_t layout) {
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.v[16 * r + c] = layout == mem_row_major ? p[r * ld + c] : p[c * ld + r];
    }
  }
}

inline void store_matrix_sync(float* p,
                              const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t layout) {
  for (unsigned e = strata::emu::LinearThread() % 32; e < 256; e += 32) {
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
