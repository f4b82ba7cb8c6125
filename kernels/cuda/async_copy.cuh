// Copies from global to shared memory that run while the thread goes on
// (PTX's cp.async, sm_80 and later): a kernel issues the copies of its next
// tile, commits them as a group, computes on the current tile, and waits
// for the group before a __syncthreads makes the tile visible to the block.
// On the CPU emulation of testing/cuda/emulation.h a copy lands only at the
// Wait that covers its group, so a missing wait or barrier shows there too.
// Private to kernels/cuda/ and its tests.
#ifndef STRATA_KERNELS_CUDA_ASYNC_COPY_CUH_
#define STRATA_KERNELS_CUDA_ASYNC_COPY_CUH_

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::async {

// kBytes (16 or 4) from src (global) to dst (shared), both kBytes-aligned.
// 16-byte copies bypass L1 (.cg), as the tiles they fill are read once.
template <int kBytes>
__device__ inline void Copy(void* dst, const void* src) {
  static_assert(kBytes == 16 || kBytes == 4, "16 or 4 bytes");
  STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(dst) % kBytes == 0 &&
                          reinterpret_cast<uintptr_t>(src) % kBytes == 0,
                      "async::Copy misaligned");
#ifdef STRATA_CUDA_EMULATION
  ::strata::emu::AsyncCopy(dst, src, kBytes);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr),
                 "l"(src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(addr),
                 "l"(src));
  }
#endif
}

// Closes the group of this thread's copies issued since the last Commit.
__device__ inline void Commit() {
#ifdef STRATA_CUDA_EMULATION
  ::strata::emu::AsyncCommit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kPending of this thread's committed groups are still
// in flight (0: all of them).
template <int kPending>
__device__ inline void Wait() {
#ifdef STRATA_CUDA_EMULATION
  ::strata::emu::AsyncWait(kPending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

}  // namespace strata::kernels::cuda::async

#endif  // STRATA_KERNELS_CUDA_ASYNC_COPY_CUH_
