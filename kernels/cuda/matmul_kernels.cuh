// The bias kernels of the fully connected layer (matmul.cu launches them;
// cuBLAS does the GEMMs); a header so the CPU emulation tests can compile
// them too (see attention_fused_kernels.cuh).
#ifndef STRATA_KERNELS_CUDA_MATMUL_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_MATMUL_KERNELS_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::matmul {

constexpr int kThreads = 256;

// out[n, o] += bias[o]; kN consecutive elements per thread (8 where the
// launcher finds Vectorizable(OC, ...), else 1), grid Blocks(N * OC / kN).
template <int kN>
__global__ void AddBiasKernel(bf16* out, const bf16* bias, int64_t N, int OC) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kN;
  if (i >= N * OC) return;
  float x[kN], b[kN];
  LoadBf16<kN>(x, out + i);
  LoadBf16<kN>(b, bias + i % OC);
#pragma unroll
  for (int k = 0; k < kN; ++k) x[k] += b[k];
  StoreBf16<kN>(out + i, x);
}

// dbias[o] += sum over rows of dout[:, o]. Blocks of 32 columns x 8 row
// lanes (reads coalesced along a row); block row y takes rows y*8 + lane,
// strided by the grid's rows, sums them in registers, reduces the 8 lanes
// in shared memory and adds the result with one atomic per column.
constexpr int kBiasRowLanes = 8;
inline dim3 BiasBackwardGrid(int N, int OC) {
  return ColumnReduceGrid(N, OC, kBiasRowLanes);
}
inline dim3 BiasBackwardBlock() { return dim3(32, kBiasRowLanes); }
// Its dynamic shared memory: the lanes' partial sums, rows padded to 33.
constexpr int kBiasBackwardSharedBytes = kBiasRowLanes * 33 * 4;

__global__ void BiasBackwardKernel(float* dbias, const bf16* dout, int N,
                                   int OC) {
  STRATA_DYNAMIC_SMEM(smem);
  auto* part = reinterpret_cast<float(*)[33]>(smem);  // [kBiasRowLanes][33]
  const int o = blockIdx.x * 32 + threadIdx.x;
  float sum = 0;
  if (o < OC) {
    for (int n = blockIdx.y * kBiasRowLanes + threadIdx.y; n < N;
         n += gridDim.y * kBiasRowLanes) {
      sum += __bfloat162float(dout[int64_t{n} * OC + o]);
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (int y = 1; y < kBiasRowLanes; ++y) sum += part[y][threadIdx.x];
    atomicAdd(&dbias[o], sum);
  }
}

}  // namespace strata::kernels::cuda::matmul

#endif  // STRATA_KERNELS_CUDA_MATMUL_KERNELS_CUH_
