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
// kernel<<<grid, block, smem, stream>>>(...) on a GPU. On the CPU
// emulation the arguments are taken now and the grid runs through
// strata::emu::Launch: at once on the emulation alone, in stream order on
// the virtual GPU.
#ifndef STRATA_CUDA_EMULATION
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#else
#include <tuple>
#define STRATA_LAUNCH(kernel, grid, block, smem, stream, ...)                 \
  (::strata::emu::CheckLaunch(reinterpret_cast<const void*>(kernel),          \
                              dim3(grid), dim3(block), (smem)),               \
   ::strata::emu::Launch(                                                     \
       (stream),                                                              \
       [strata_kernel = (kernel), strata_grid = dim3(grid),                   \
        strata_block = dim3(block), strata_smem = static_cast<size_t>(smem),  \
        strata_args = std::make_tuple(__VA_ARGS__)] {                         \
         ::strata::emu::RunGrid(strata_grid, strata_block, strata_smem, [&] { \
           std::apply(strata_kernel, strata_args);                            \
         });                                                                  \
       }))
#endif

#endif  // STRATA_KERNELS_CUDA_LAUNCH_CUH_
