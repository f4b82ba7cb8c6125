// The device code of the fused attention (attention_fused.cu explains the
// algorithm). A header so that tests can also compile it for the CPU
// emulation of kernels/cuda/emulation.h, which defines
// STRATA_CUDA_EMULATION; kernels then take their dynamic shared memory
// through STRATA_DYNAMIC_SMEM and use only the CUDA built-ins it emulates.
// Private to kernels/cuda/ and its tests.
#ifndef STRATA_KERNELS_CUDA_ATTENTION_FUSED_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_ATTENTION_FUSED_KERNELS_CUH_

#ifndef STRATA_CUDA_EMULATION
#include <mma.h>
#endif

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::flash {

namespace wmma = ::nvcuda::wmma;

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kWarps = 4;  // each owns 16 rows of the block's tile
constexpr int kThreads = 32 * kWarps;
constexpr int kPadH = 8;             // bf16 row padding
constexpr int kPadF = 4;             // fp32 row padding
constexpr int kLdP = kTile + kPadH;  // bf16 (64-wide) probability tiles
constexpr int kLdS = kTile + kPadF;  // fp32 (64-wide) score tiles
constexpr float kLog2e = 1.4426950408889634f;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAT =
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shared-memory layout of a kernel: consecutive arrays, each 128-byte
// aligned.
constexpr int64_t Align(int64_t bytes) { return (bytes + 127) / 128 * 128; }

template <int HS>
struct Dims {
  static constexpr int kLdH = HS + kPadH;  // bf16 (HS-wide) tiles
  static constexpr int kLdO = HS + kPadF;  // fp32 (HS-wide) accumulators
  static constexpr int64_t kTileH = Align(int64_t{kTile} * kLdH * 2);
  static constexpr int64_t kTileO = Align(int64_t{kTile} * kLdO * 4);
  static constexpr int64_t kTileP = Align(int64_t{kTile} * kLdP * 2);
  static constexpr int64_t kTileS = Align(int64_t{kTile} * kLdS * 4);
  static constexpr int64_t kRow = Align(int64_t{kTile} * 4);
  // Q, K, V; S (fp32), P (bf16); O (fp32).
  static constexpr int64_t kForwardBytes =
      3 * kTileH + kTileS + kTileP + kTileO;
  // K, V, Q, dO; dK, dV (fp32); P^T, dS^T (bf16); S^T/dP^T (fp32); lse, D.
  static constexpr int64_t kBackwardBytes =
      4 * kTileH + 2 * kTileO + 2 * kTileP + kTileS + 2 * kRow;
};

// Copies rows [row0, row0 + 64) of a (T, HS) slice whose rows are `stride`
// elements apart into a (64, ld) shared tile, zero-filling rows >= T.
// 16-byte vectors: src, stride and HS are multiples of 8 elements.
template <int HS>
__device__ void LoadTile(bf16* dst, int ld, const bf16* src, int64_t stride,
                         int row0, int T) {
  constexpr int kVecs = HS / 8;  // uint4 per row
  for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    const bf16* from = src + (row0 + r) * stride + c;
    bf16* to = dst + r * ld + c;
    STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(from) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(to) % 16 == 0,
                        "LoadTile: 16-byte vector access misaligned");
    if (row0 + r < T) v = *reinterpret_cast<const uint4*>(from);
    *reinterpret_cast<uint4*>(to) = v;
  }
}

template <typename T>
__device__ void Zero(T* p, int n) {
  for (int i = threadIdx.x; i < n; i += kThreads) p[i] = T(0);
}

// One warp's C (16 x 16N, fp32, row-major, ldc) = A (16 x 16K) B (16K x 16N)
// from shared memory, plus C's previous contents when `accumulate`. A is
// row-major with leading dimension lda, or, with kAT, stored transposed
// (A^T row-major: A column-major). B likewise with ldb and kBT.
template <int K, int N, bool kAT, bool kBT>
__device__ void WarpMma(float* c, int ldc, bool accumulate, const bf16* a,
                        int lda, const bf16* b, int ldb) {
  for (int n = 0; n < N; ++n) {
    FragC acc;
    if (accumulate) {
      wmma::load_matrix_sync(acc, c + n * 16, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(acc, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      std::conditional_t<kAT, FragAT, FragA> fa;
      std::conditional_t<kBT, FragBT, FragB> fb;
      wmma::load_matrix_sync(fa, kAT ? a + k * 16 * lda : a + k * 16, lda);
      wmma::load_matrix_sync(
          fb, kBT ? b + n * 16 * ldb + k * 16 : b + k * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

// Forward. Grid (B*NH, ceil(T/64)); tile y = 0 is the last (the longest
// walk), so the heaviest blocks start first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(bf16* out, float* lse, const bf16* qkv, int T, int C,
                       int NH, float scale_log2) {
  using D = Dims<HS>;
  constexpr int kLdH = D::kLdH, kLdO = D::kLdO;
  STRATA_DYNAMIC_SMEM(smem);
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = reinterpret_cast<bf16*>(smem + D::kTileH);
  bf16* sV = reinterpret_cast<bf16*>(smem + 2 * D::kTileH);
  float* sS = reinterpret_cast<float*>(smem + 3 * D::kTileH);
  bf16* sP = reinterpret_cast<bf16*>(smem + 3 * D::kTileH + D::kTileS);
  float* sO =
      reinterpret_cast<float*>(smem + 3 * D::kTileH + D::kTileS + D::kTileP);

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int q0 = qt * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int w0 = warp * 16;  // the warp's first row in the tile
  const int64_t stride = int64_t{3} * C;
  const bf16* base = qkv + int64_t{b} * T * stride + h * HS;

  LoadTile<HS>(sQ, kLdH, base, stride, q0, T);
  Zero(sO, kTile * kLdO);
  float m[16], l[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's K and V are no longer read
    LoadTile<HS>(sK, kLdH, base + C, stride, k0, T);
    LoadTile<HS>(sV, kLdH, base + 2 * C, stride, k0, T);
    __syncthreads();

    // S (16 x 64) = Q_w K^T.
    WarpMma<HS / 16, kTile / 16, false, true>(sS + w0 * kLdS, kLdS, false,
                                              sQ + w0 * kLdH, kLdH, sK, kLdH);
    __syncwarp();

    // Online softmax, a row at a time, each lane two columns. Every row of
    // this tile sees key k0 <= its query, so m is finite after the first
    // tile and exp2(-inf - m) is a clean 0.
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int row = w0 + r, qi = q0 + row;
      const float s0 =
          k0 + lane <= qi ? sS[row * kLdS + lane] * scale_log2 : -INFINITY;
      const float s1 = k0 + lane + 32 <= qi
                           ? sS[row * kLdS + lane + 32] * scale_log2
                           : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(fmaxf(s0, s1)));
      const float p0 = exp2f(s0 - m_new), p1 = exp2f(s1 - m_new);
      const float alpha = exp2f(m[r] - m_new);
      l[r] = l[r] * alpha + WarpSum(p0 + p1);
      m[r] = m_new;
      sP[row * kLdP + lane] = __float2bfloat16(p0);
      sP[row * kLdP + lane + 32] = __float2bfloat16(p1);
      for (int d = lane; d < HS; d += 32) sO[row * kLdO + d] *= alpha;
    }
    __syncwarp();

    // O_w += P_w V.
    WarpMma<kTile / 16, HS / 16, false, false>(sO + w0 * kLdO, kLdO, true,
                                               sP + w0 * kLdP, kLdP, sV, kLdH);
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int row = w0 + r, qi = q0 + row;
    if (qi >= T) continue;  // uniform across the warp
    const float inv = 1.0f / l[r];
    bf16* o = out + (int64_t{b} * T + qi) * C + h * HS;
    for (int d = lane; d < HS; d += 32) {
      o[d] = __float2bfloat16(sO[row * kLdO + d] * inv);
    }
    if (lane == 0) lse[int64_t{bh} * T + qi] = m[r] + log2f(l[r]);
  }
}

// D[bh, t] = sum_d dout[b, t, h*HS + d] * out[b, t, h*HS + d]; a warp per
// (b, t, h), rows ordered as (b, t, h) so a warp's reads are contiguous.
__global__ void RowDotKernel(float* D, const bf16* dout, const bf16* out,
                             int64_t rows, int T, int NH, int HS) {
  const int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const bf16* a = dout + row * HS;  // (b, t, h) rows are HS apart
  const bf16* o = out + row * HS;
  float sum = 0;
  for (int d = lane; d < HS; d += 32) {
    sum += __bfloat162float(a[d]) * __bfloat162float(o[d]);
  }
  sum = WarpSum(sum);
  if (lane == 0) {
    const int64_t bt = row / NH;
    const int h = static_cast<int>(row % NH);
    const int64_t b = bt / T, t = bt % T;
    D[(b * NH + h) * T + t] = sum;
  }
}

// Backward. Grid (B*NH, ceil(T/64)); key tile y = 0 walks every query tile,
// so it comes first. dq_acc (B,T,C) fp32 must be zero on entry.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKernel(bf16* dqkv, float* dq_acc, const bf16* dout,
                        const bf16* qkv, const float* lse, const float* D,
                        int T, int C, int NH, float scale, float scale_log2) {
  using Dm = Dims<HS>;
  constexpr int kLdH = Dm::kLdH, kLdO = Dm::kLdO;
  STRATA_DYNAMIC_SMEM(smem);
  unsigned char* p = smem;
  auto take = [&p](int64_t bytes) {
    unsigned char* q = p;
    p += bytes;
    return q;
  };
  bf16* sK = reinterpret_cast<bf16*>(take(Dm::kTileH));
  bf16* sV = reinterpret_cast<bf16*>(take(Dm::kTileH));
  bf16* sQ = reinterpret_cast<bf16*>(take(Dm::kTileH));
  bf16* sdO = reinterpret_cast<bf16*>(take(Dm::kTileH));
  float* sdK = reinterpret_cast<float*>(take(Dm::kTileO));
  float* sdV = reinterpret_cast<float*>(take(Dm::kTileO));
  bf16* sPT = reinterpret_cast<bf16*>(take(Dm::kTileP));
  bf16* sdST = reinterpret_cast<bf16*>(take(Dm::kTileP));
  float* sF = reinterpret_cast<float*>(take(Dm::kTileS));
  float* sLse = reinterpret_cast<float*>(take(Dm::kRow));
  float* sD = reinterpret_cast<float*>(take(Dm::kRow));

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int kt = blockIdx.y, k0 = kt * kTile;
  const int num_tiles = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int w0 = warp * 16;
  const int64_t stride = int64_t{3} * C;
  const bf16* base = qkv + int64_t{b} * T * stride + h * HS;
  const bf16* dout_base = dout + int64_t{b} * T * C + h * HS;

  LoadTile<HS>(sK, kLdH, base + C, stride, k0, T);
  LoadTile<HS>(sV, kLdH, base + 2 * C, stride, k0, T);
  Zero(sdK, kTile * kLdO);
  Zero(sdV, kTile * kLdO);

  for (int qt = kt; qt < num_tiles; ++qt) {
    const int q0 = qt * kTile;
    // The previous tile's Q, dO, lse and D are last read before its dQ
    // barrier, which already orders them before these writes; this barrier
    // keeps that true if the phases after it change.
    __syncthreads();
    LoadTile<HS>(sQ, kLdH, base, stride, q0, T);
    LoadTile<HS>(sdO, kLdH, dout_base, C, q0, T);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool valid = q0 + i < T;
      // lse = +inf makes padded query rows' probabilities exactly 0.
      sLse[i] = valid ? lse[int64_t{bh} * T + q0 + i] : INFINITY;
      sD[i] = valid ? D[int64_t{bh} * T + q0 + i] : 0.0f;
    }
    __syncthreads();

    // S^T (16 keys x 64 queries) = K_w Q^T.
    WarpMma<HS / 16, kTile / 16, false, true>(sF + w0 * kLdS, kLdS, false,
                                              sK + w0 * kLdH, kLdH, sQ, kLdH);
    __syncwarp();

    // P^T, masked where key > query; kept in fp32 registers for dS.
    float pt[16][2];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int row = w0 + r, kj = k0 + row;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = lane + 32 * half;
        const float v = kj <= q0 + j
                            ? exp2f(sF[row * kLdS + j] * scale_log2 - sLse[j])
                            : 0.0f;
        pt[r][half] = v;
        sPT[row * kLdP + j] = __float2bfloat16(v);
      }
    }
    __syncwarp();

    // dV_w += P^T_w dO, and dP^T (16 x 64) = V_w dO^T into sF.
    WarpMma<kTile / 16, HS / 16, false, false>(
        sdV + w0 * kLdO, kLdO, true, sPT + w0 * kLdP, kLdP, sdO, kLdH);
    WarpMma<HS / 16, kTile / 16, false, true>(sF + w0 * kLdS, kLdS, false,
                                              sV + w0 * kLdH, kLdH, sdO, kLdH);
    __syncwarp();

    // dS^T = P^T * (dP^T - D), times the softmax scale (the scores were
    // scale * q.k), so dQ = dS K and dK = dS^T Q need no further factor.
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int row = w0 + r;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = lane + 32 * half;
        const float ds = pt[r][half] * (sF[row * kLdS + j] - sD[j]) * scale;
        sdST[row * kLdP + j] = __float2bfloat16(ds);
      }
    }
    __syncwarp();

    // dK_w += dS^T_w Q.
    WarpMma<kTile / 16, HS / 16, false, false>(
        sdK + w0 * kLdO, kLdO, true, sdST + w0 * kLdP, kLdP, sQ, kLdH);
    __syncthreads();  // dQ reads every warp's rows of dS^T

    // dQ (queries w0..w0+15) += dS K = (dS^T)^T K, a 16 x 16 piece at a
    // time through this warp's own rows of sF, added to dq_acc.
    float* piece = sF + w0 * kLdS;
    for (int n = 0; n < HS / 16; ++n) {
      // (dS^T stored row-major is dS stored column-major.)
      WarpMma<kTile / 16, 1, true, false>(piece, kLdS, false, sdST + w0, kLdP,
                                          sK + n * 16, kLdH);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, c = e % 16, qi = q0 + w0 + r;
        if (qi < T) {
          atomicAdd(dq_acc + (int64_t{b} * T + qi) * C + h * HS + n * 16 + c,
                    piece[r * kLdS + c]);
        }
      }
      __syncwarp();
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < kTile * HS; i += kThreads) {
    const int r = i / HS, d = i % HS, kj = k0 + r;
    if (kj >= T) continue;
    bf16* row = dqkv + (int64_t{b} * T + kj) * stride + h * HS + d;
    row[C] = __float2bfloat16(sdK[r * kLdO + d]);
    row[2 * C] = __float2bfloat16(sdV[r * kLdO + d]);
  }
}

// dqkv[n, c] = dq_acc[n, c] for the Q third of each row.
__global__ void StoreDqKernel(bf16* dqkv, const float* dq_acc, int64_t N,
                              int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  dqkv[(i / C) * 3 * C + i % C] = __float2bfloat16(dq_acc[i]);
}

}  // namespace strata::kernels::cuda::flash

#endif  // STRATA_KERNELS_CUDA_ATTENTION_FUSED_KERNELS_CUH_
