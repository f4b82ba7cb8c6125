// The device code of the fused attention (attention_fused.cu explains the
// algorithm). A header so that tests can also compile it for the CPU
// emulation of testing/cuda/emulation.h, which defines
// STRATA_CUDA_EMULATION; kernels then take their dynamic shared memory
// through STRATA_DYNAMIC_SMEM and use only the CUDA built-ins it emulates.
// Private to kernels/cuda/ and its tests.
#ifndef STRATA_KERNELS_CUDA_ATTENTION_FUSED_KERNELS_CUH_
#define STRATA_KERNELS_CUDA_ATTENTION_FUSED_KERNELS_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

namespace strata::kernels::cuda::flash {

constexpr int kTile = 64;  // query rows and key rows per tile
constexpr int kWarps = 4;  // each owns 16 rows of the block's tile
constexpr int kThreads = 32 * kWarps;
constexpr int kPad = 8;             // bf16 row padding
constexpr int kLdP = kTile + kPad;  // the (64-wide) dS^T tile
constexpr float kLog2e = 1.4426950408889634f;

// Shared-memory layout of a kernel: consecutive arrays, each 128-byte
// aligned.
constexpr int64_t Align(int64_t bytes) { return (bytes + 127) / 128 * 128; }

template <int HS>
struct Dims {
  static constexpr int kLd = HS + kPad;  // bf16 (HS-wide) tiles
  static constexpr int kNT = HS / 8;     // 8-column pieces of a head
  static constexpr int kKT = HS / 16;    // 16-deep steps over a head
  static constexpr int64_t kTileH = Align(int64_t{kTile} * kLd * 2);
  static constexpr int64_t kTileP = Align(int64_t{kTile} * kLdP * 2);
  static constexpr int64_t kRow = Align(int64_t{kTile} * 4);
  // Q; K and V, two of each (the tile in use and the next).
  static constexpr int64_t kForwardBytes = 5 * kTileH;
  // K, V; Q and dO, two of each; dS^T; lse and D, two of each.
  static constexpr int64_t kQueryBuffer = 2 * kTileH + 2 * kRow;
  static constexpr int64_t kBackwardBytes =
      2 * kTileH + 2 * kQueryBuffer + kTileP;
};

// Starts copying rows [row0, row0 + 64) of a (T, HS) slice whose rows are
// `stride` elements apart into a (64, ld) shared tile, zero-filling rows
// >= T; the copies land by the next async::Wait. 16-byte vectors: src,
// stride and HS are multiples of 8 elements.
template <int HS>
__device__ void LoadTile(bf16* dst, int ld, const bf16* src, int64_t stride,
                         int row0, int T) {
  constexpr int kVecs = HS / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    bf16* to = dst + r * ld + c;
    if (row0 + r < T) {
      async::Copy<16>(to, src + (row0 + r) * stride + c);
    } else {
      *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
    }
  }
}

// p[0] += x and p[1] += y, atomically each (p 8-byte aligned): one vector
// atomic on a Hopper or later, two scalar ones before.
__device__ inline void AtomicAdd2(float* p, float x, float y) {
#if !defined(STRATA_CUDA_EMULATION) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
  STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(p) % 8 == 0,
                      "AtomicAdd2: 8-byte access misaligned");
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

// Reductions over the 4 lanes of a quad (the lanes that hold one row of an
// MMA fragment).
__device__ inline float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffff, v, 2));
}

__device__ inline float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffff, v, 1);
  return v + __shfl_xor_sync(0xffffffff, v, 2);
}

// The A fragments of a 16 x HS block of rows (row-major in shared memory,
// leading dimension ld), one per 16 columns.
template <int HS>
__device__ inline void LoadRows(uint32_t (&a)[HS / 16][4], const bf16* s,
                                int ld) {
#pragma unroll
  for (int k = 0; k < HS / 16; ++k) mma::LoadA(a[k], s + 16 * k, ld);
}

// acc (16 x 8N, C fragments) = A B^T: A (16 x HS) in fragments (LoadRows),
// B (8N x HS) rows of `b`, row-major in shared memory with leading
// dimension ld: the scores of 16 rows against 8N rows.
template <int HS, int N>
__device__ inline void RowsTimesRowsT(float (&acc)[N][4],
                                      const uint32_t (&a)[HS / 16][4],
                                      const bf16* b, int ld) {
  static_assert(N % 2 == 0, "B fragments load in pairs");
  mma::Zero(acc);
#pragma unroll
  for (int k = 0; k < HS / 16; ++k) {
#pragma unroll
    for (int n = 0; n < N; n += 2) {
      uint32_t fb0[2], fb1[2];
      mma::LoadB2(fb0, fb1, b + 8 * n * ld + 16 * k, ld);
      mma::Mma(acc[n], a[k], fb0);
      mma::Mma(acc[n + 1], a[k], fb1);
    }
  }
}

// acc (16 x N, C fragments) += A V: A (16 x 16K) in fragments, V (16K x N)
// row-major in shared memory.
template <int K, int N>
__device__ inline void FragsTimesRows(float (&acc)[N / 8][4],
                                      const uint32_t (&a)[K][4], const bf16* v,
                                      int ld) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      uint32_t fb0[2], fb1[2];
      mma::LoadBT2(fb0, fb1, v + 16 * k * ld + 8 * n, ld);
      mma::Mma(acc[n], a[k], fb0);
      mma::Mma(acc[n + 1], a[k], fb1);
    }
  }
}

// acc (16 x HS, C fragments) += P V: P (16 x 64) in C fragments (fp32,
// rounded to bf16 here), V (64 x HS) row-major in shared memory.
template <int HS>
__device__ inline void ProbsTimesRows(float (&acc)[HS / 8][4],
                                      const float (&p)[kTile / 8][4],
                                      const bf16* v, int ld) {
  uint32_t fa[kTile / 16][4];
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    mma::AFromC(fa[k], p[2 * k], p[2 * k + 1]);
  }
  FragsTimesRows<kTile / 16, HS>(acc, fa, v, ld);
}

// Forward. Grid (B*NH, ceil(T/64)); tile y = 0 is the last (the longest
// walk), so the heaviest blocks start first. Up to head size 64, at most 128
// registers a thread, so that 4 blocks fit on an SM. Each warp keeps its 16
// query rows' scores, probabilities and output in registers.
template <int HS>
__global__ void __launch_bounds__(kThreads, HS <= 64 ? 4 : 1)
    FlashForwardKernel(bf16* out, float* lse, const bf16* qkv, int T, int C,
                       int NH, float scale_log2) {
  using D = Dims<HS>;
  constexpr int kLd = D::kLd, kNT = D::kNT;
  STRATA_DYNAMIC_SMEM(smem);
  // Q, then K and V for buffer 0, then for buffer 1.
  unsigned char* tiles = smem;  // (a __shared__ array cannot be captured)
  bf16* sQ = reinterpret_cast<bf16*>(tiles);
  auto sK = [tiles](int buf) {
    return reinterpret_cast<bf16*>(tiles + (1 + 2 * buf) * D::kTileH);
  };
  auto sV = [tiles](int buf) {
    return reinterpret_cast<bf16*>(tiles + (2 + 2 * buf) * D::kTileH);
  };

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int q0 = qt * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int w0 = warp * 16;  // the warp's first row in the tile
  const int64_t stride = int64_t{3} * C;
  const bf16* base = qkv + int64_t{b} * T * stride + h * HS;

  LoadTile<HS>(sQ, kLd, base, stride, q0, T);
  async::Commit();
  LoadTile<HS>(sK(0), kLd, base + C, stride, 0, T);
  LoadTile<HS>(sV(0), kLd, base + 2 * C, stride, 0, T);
  async::Commit();
  async::Wait<1>();  // Q
  __syncthreads();
  uint32_t qa[HS / 16][4];  // the warp's 16 query rows
  LoadRows<HS>(qa, sQ + w0 * kLd, kLd);
  // Rows g and g + 8 of the warp's 16: running max (of scaled scores, base
  // 2), this lane's share of the running sum, and the output.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  float o[kNT][4];
  mma::Zero(o);

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile, buf = kt % 2;
    // The next tile's copies go into the buffers every warp finished
    // reading before the barrier at the end of the previous iteration.
    if (kt < qt) {
      LoadTile<HS>(sK(1 - buf), kLd, base + C, stride, k0 + kTile, T);
      LoadTile<HS>(sV(1 - buf), kLd, base + 2 * C, stride, k0 + kTile, T);
      async::Commit();
      async::Wait<1>();
    } else {
      async::Wait<0>();
    }
    __syncthreads();

    float s[kTile / 8][4];
    RowsTimesRowsT<HS, kTile / 8>(s, qa, sK(buf), kLd);

    // Online softmax. Only the diagonal tile has keys after a query; every
    // row sees key k0 <= its query in its first tile, so m is finite from
    // then on and exp2(-inf - m) is a clean 0.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = q0 + w0 + g + (i >= 2 ? 8 : 0);
        const int key = k0 + 8 * n + 2 * t + i % 2;
        s[n][i] = kt == qt && key > row ? -INFINITY : s[n][i] * scale_log2;
        mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = QuadMax(mx[r]);
      alpha[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n][i] = exp2f(s[n][i] - m[i / 2]);
        l[i / 2] += s[n][i];
      }
    }
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] *= alpha[i / 2];
    }
    ProbsTimesRows<HS>(o, s, sV(buf), kLd);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = QuadSum(l[r]);
    const int qi = q0 + w0 + g + 8 * r;
    if (qi >= T) continue;
    mma::StoreRow(out + (int64_t{b} * T + qi) * C + h * HS + 2 * t, o, r,
                  1.0f / sum);
    if (t == 0) lse[int64_t{bh} * T + qi] = m[r] + log2f(sum);
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
// so it comes first. Up to head size 64, at most 168 registers a thread, so
// that 3 blocks fit on an SM. Each warp owns 16 keys and keeps their S^T, P^T,
// dP^T, dS^T pieces and dK, dV in registers; dQ goes through dS^T in shared
// memory, a warp per 16 queries, and is added to dq_acc (B,T,C) fp32, which
// must be zero on entry.
template <int HS>
__global__ void __launch_bounds__(kThreads, HS <= 64 ? 3 : 1)
    FlashBackwardKernel(bf16* dqkv, float* dq_acc, const bf16* dout,
                        const bf16* qkv, const float* lse, const float* D,
                        int T, int C, int NH, float scale, float scale_log2) {
  using Dm = Dims<HS>;
  constexpr int kLd = Dm::kLd, kNT = Dm::kNT;
  constexpr int kQN = kTile / 8;  // 8-query pieces of a query tile
  STRATA_DYNAMIC_SMEM(smem);
  unsigned char* p = smem;
  auto take = [&p](int64_t bytes) {
    unsigned char* q = p;
    p += bytes;
    return q;
  };
  bf16* sK = reinterpret_cast<bf16*>(take(Dm::kTileH));
  bf16* sV = reinterpret_cast<bf16*>(take(Dm::kTileH));
  // Then per buffer: Q, dO, lse, D.
  unsigned char* buffers = take(2 * Dm::kQueryBuffer);
  auto sQs = [buffers](int buf) {
    return reinterpret_cast<bf16*>(buffers + buf * Dm::kQueryBuffer);
  };
  auto sdOs = [buffers](int buf) {
    return reinterpret_cast<bf16*>(buffers + buf * Dm::kQueryBuffer +
                                   Dm::kTileH);
  };
  auto sLses = [buffers](int buf) {
    return reinterpret_cast<float*>(buffers + buf * Dm::kQueryBuffer +
                                    2 * Dm::kTileH);
  };
  auto sDs = [buffers](int buf) {
    return reinterpret_cast<float*>(buffers + buf * Dm::kQueryBuffer +
                                    2 * Dm::kTileH + Dm::kRow);
  };
  bf16* sdST = reinterpret_cast<bf16*>(take(Dm::kTileP));

  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int kt = blockIdx.y, k0 = kt * kTile;
  const int num_tiles = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int w0 = warp * 16;
  const int64_t stride = int64_t{3} * C;
  const bf16* base = qkv + int64_t{b} * T * stride + h * HS;
  const bf16* dout_base = dout + int64_t{b} * T * C + h * HS;

  // K and V land with the first query tile's group (load_queries commits).
  LoadTile<HS>(sK, kLd, base + C, stride, k0, T);
  LoadTile<HS>(sV, kLd, base + 2 * C, stride, k0, T);
  float dk[kNT][4], dv[kNT][4];
  mma::Zero(dk);
  mma::Zero(dv);

  // Starts copying query tile qt's Q, dO, lse and D into buffer `buf`.
  // lse = +inf makes padded query rows' probabilities exactly 0.
  auto load_queries = [&](int qt, int buf) {
    const int q0 = qt * kTile;
    LoadTile<HS>(sQs(buf), kLd, base, stride, q0, T);
    LoadTile<HS>(sdOs(buf), kLd, dout_base, C, q0, T);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      if (q0 + i < T) {
        async::Copy<4>(sLses(buf) + i, lse + int64_t{bh} * T + q0 + i);
        async::Copy<4>(sDs(buf) + i, D + int64_t{bh} * T + q0 + i);
      } else {
        sLses(buf)[i] = INFINITY;
        sDs(buf)[i] = 0.0f;
      }
    }
    async::Commit();
  };
  load_queries(kt, 0);

  for (int qt = kt; qt < num_tiles; ++qt) {
    const int q0 = qt * kTile, buf = (qt - kt) % 2;
    // The next tile's copies go into the buffers every warp finished
    // reading before the previous iteration's dS^T barrier; this barrier
    // also keeps dS^T from being rewritten while a warp still reads it for
    // the previous tile's dQ.
    if (qt + 1 < num_tiles) {
      load_queries(qt + 1, 1 - buf);
      async::Wait<1>();
    } else {
      async::Wait<0>();
    }
    __syncthreads();
    const bf16* sQ = sQs(buf);
    const bf16* sdO = sdOs(buf);
    const float* sLse = sLses(buf);
    const float* sD = sDs(buf);

    // S^T (16 keys x 64 queries) = K_w Q^T, then P^T, masked where
    // key > query.
    float pt[kQN][4];
    uint32_t rows[HS / 16][4];
    LoadRows<HS>(rows, sK + w0 * kLd, kLd);
    RowsTimesRowsT<HS, kQN>(pt, rows, sQ, kLd);
#pragma unroll
    for (int n = 0; n < kQN; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + w0 + g + (i >= 2 ? 8 : 0);
        const int j = 8 * n + 2 * t + i % 2;  // query in the tile
        pt[n][i] = qt == kt && key > q0 + j
                       ? 0.0f
                       : exp2f(pt[n][i] * scale_log2 - sLse[j]);
      }
    }
    // dP^T (16 x 64) = V_w dO^T; dS^T = P^T * (dP^T - D), times the
    // softmax scale (the scores were scale * q.k), so dQ = dS K and
    // dK = dS^T Q need no further factor.
    float ds[kQN][4];
    LoadRows<HS>(rows, sV + w0 * kLd, kLd);
    RowsTimesRowsT<HS, kQN>(ds, rows, sdO, kLd);
#pragma unroll
    for (int n = 0; n < kQN; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = 8 * n + 2 * t + i % 2;
        ds[n][i] = pt[n][i] * (ds[n][i] - sD[j]) * scale;
      }
    }
    // dV_w += P^T_w dO and dK_w += dS^T_w Q.
    ProbsTimesRows<HS>(dv, pt, sdO, kLd);
    ProbsTimesRows<HS>(dk, ds, sQ, kLd);

    // dQ (16 queries of this warp x HS) = dS K, dS read from every warp's
    // rows of dS^T.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mma::StoreRow(sdST + (w0 + g + 8 * r) * kLdP + 2 * t, ds, r);
    }
    __syncthreads();
    float dq[kNT][4];
    mma::Zero(dq);
    uint32_t dsa[kTile / 16][4];  // dS for the warp's 16 queries
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
      mma::LoadAT(dsa[k], sdST + 16 * k * kLdP + w0, kLdP);
    }
    FragsTimesRows<kTile / 16, HS>(dq, dsa, sK, kLd);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int qi = q0 + w0 + g + 8 * r;
      if (qi >= T) continue;
      float* row = dq_acc + (int64_t{b} * T + qi) * C + h * HS + 2 * t;
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        AtomicAdd2(row + 8 * n, dq[n][2 * r], dq[n][2 * r + 1]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int kj = k0 + w0 + g + 8 * r;
    if (kj >= T) continue;
    bf16* row = dqkv + (int64_t{b} * T + kj) * stride + h * HS + 2 * t;
    mma::StoreRow(row + C, dk, r);
    mma::StoreRow(row + 2 * C, dv, r);
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
