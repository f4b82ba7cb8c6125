// How kernels declare dynamic shared memory and how launchers launch them,
// in a form that also compiles for the CPU emulation of
// testing/cuda/emulation.h (which, included first, defines
// STRATA_CUDA_EMULATION). For every file with CUDA kernels.
#ifndef STRATA_KERNELS_CUDA_LAUNCH_CUH_
#define STRATA_KERNELS_CUDA_LAUNCH_CUH_

// Declares `name` as the kernel's dynamic shared memory (unsigned char[],
// 128-byte aligned). Kernels use this rather than `extern __shared__` so
// the CPU emulation (testing/cuda/emulation.h, which defines it first) can
// run them.
// STRATA_DEVICE_CHECK(cond, what): a requirement the hardware enforces with
// a fault (alignment of a vector access, say); checked on the CPU
// emulation, free on a GPU.
#ifndef STRATA_CUDA_EMULATION
#define STRATA_DEVICE_CHECK(cond, what) \
  do {                                  \
  } while (0)
#endif

#ifndef STRATA_CUDA_EMULATION
#define STRATA_DYNAMIC_SMEM(name) \
  extern __shared__ __align__(128) unsigned char name[]
#endif

// Launches `kernel` over `grid` blocks of `block` threads with `smem` bytes
// of dynamic shared memory on `stream`, with the arguments that follow:
// kernel<<<grid, block, smem, stream>>>(...) on a GPU; on the CPU
// emulation, a run of the whole grid before returning.
#ifndef STRATA_CUDA_EMULATION
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#else
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...)         \
  (::strata::emu::CheckLaunch(reinterpret_cast<const void*>(&kernel), \
                              dim3(grid), dim3(block), (smem)),       \
   ::strata::emu::RunGrid(dim3(grid), dim3(block), (smem),            \
                          [&] { kernel(__VA_ARGS__); }))
#endif

#endif  // STRATA_KERNELS_CUDA_LAUNCH_CUH_
