// Warp-level bf16 tensor-core products in registers: PTX's
// mma.sync.m16n8k16 (fp32 accumulation) and the loads of its operand
// fragments from shared memory (ldmatrix). Kernels that keep their tiles in
// registers (the fused attention) build on these; on the CPU emulation of
// testing/cuda/emulation.h both are emulated with the same fragment
// layout, so a kernel that misplaces an element fails there too.
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// lane = threadIdx.x % 32, g = lane / 4, t = lane % 4; a uint32_t holds two
// bf16, the lower column (A) or row (B) index in its low half:
//   A (16 x 16): a[0] = A[g][2t..2t+1],   a[1] = A[g+8][2t..2t+1],
//                a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9];
//   B (16 x 8):  b[0] = B[2t..2t+1][g],   b[1] = B[2t+8..2t+9][g];
//   C (16 x 8):  c[0] = C[g][2t], c[1] = C[g][2t+1],
//                c[2] = C[g+8][2t], c[3] = C[g+8][2t+1].
// Two C fragments side by side (columns 0..7 and 8..15) are, packed to
// bf16, the A fragment of the 16 x 16 product: AFromC.
// Private to kernels/cuda/ and its tests.
#ifndef STRATA_KERNELS_CUDA_MMA_CUH_
#define STRATA_KERNELS_CUDA_MMA_CUH_

#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda::mma {

__device__ inline int Lane() { return static_cast<int>(threadIdx.x % 32); }

// Two bf16 in one register: lo in the low half.
__device__ inline uint32_t Pack(bf16 lo, bf16 hi) {
  const bf16 h[2] = {lo, hi};
  uint32_t u;
  std::memcpy(&u, h, 4);
  return u;
}

__device__ inline uint32_t Pack(float lo, float hi) {
  return Pack(__float2bfloat16(lo), __float2bfloat16(hi));
}

// d += A B for one warp (every lane calls it, with its fragments).
__device__ inline void Mma(float (&d)[4], const uint32_t (&a)[4],
                           const uint32_t (&b)[2]) {
#ifdef STRATA_CUDA_EMULATION
  ::strata::emu::MmaM16N8K16(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// PTX's ldmatrix: `count` (2 or 4) 8 x 8 bf16 matrices from shared
// memory, lane 8j + r giving the address of row r of matrix j (16-byte
// aligned); register j of lane l receives row l / 4, columns 2(l % 4) and
// 2(l % 4) + 1 of matrix j, or with kTrans the transpose's: rows 2(l % 4)
// and 2(l % 4) + 1 of column l / 4.
template <bool kTrans>
__device__ inline void LdMatrixX4(uint32_t (&r)[4], const bf16* row) {
  STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(row) % 16 == 0,
                      "ldmatrix: row address not 16-byte aligned");
#ifdef STRATA_CUDA_EMULATION
  ::strata::emu::LdMatrix(r, 4, row, kTrans);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
        "[%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  } else {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  }
#endif
}

// The row this lane addresses for an ldmatrix.x4 of the 16 x 16 block at s
// (row-major, leading dimension ld, a multiple of 8), matrices in the order
// (rows 0-7, cols 0-7), then either (rows 8-15, cols 0-7) (kRowsFirst) or
// (rows 0-7, cols 8-15), then the remaining two likewise.
template <bool kRowsFirst>
__device__ inline const bf16* X4Row(const bf16* s, int ld) {
  const int j = Lane() / 8, r = Lane() % 8;
  const int row = kRowsFirst ? (j % 2) * 8 + r : (j / 2) * 8 + r;
  const int col = kRowsFirst ? (j / 2) * 8 : (j % 2) * 8;
  return s + row * ld + col;
}

// A (16 x 16) from row-major shared memory: A[m][k] = s[m * ld + k].
__device__ inline void LoadA(uint32_t (&a)[4], const bf16* s, int ld) {
  LdMatrixX4<false>(a, X4Row<true>(s, ld));
}

// A (16 x 16) stored transposed: A[m][k] = s[k * ld + m].
__device__ inline void LoadAT(uint32_t (&a)[4], const bf16* s, int ld) {
  LdMatrixX4<true>(a, X4Row<false>(s, ld));
}

// Two B fragments (16 x 8 each: columns 0-7 into b0, 8-15 into b1) stored
// column by column: B[k][n] = s[n * ld + k] (a K or Q tile for a product
// with its transpose).
__device__ inline void LoadB2(uint32_t (&b0)[2], uint32_t (&b1)[2],
                              const bf16* s, int ld) {
  uint32_t r[4];
  LdMatrixX4<false>(r, X4Row<false>(s, ld));
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// Two B fragments (columns 0-7 into b0, 8-15 into b1), row-major:
// B[k][n] = s[k * ld + n].
__device__ inline void LoadBT2(uint32_t (&b0)[2], uint32_t (&b1)[2],
                               const bf16* s, int ld) {
  uint32_t r[4];
  LdMatrixX4<true>(r, X4Row<true>(s, ld));
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// The A fragment (16 x 16, bf16) of two fp32 C fragments: columns 0..7
// from c0, 8..15 from c1.
__device__ inline void AFromC(uint32_t (&a)[4], const float (&c0)[4],
                              const float (&c1)[4]) {
  a[0] = Pack(c0[0], c0[1]);
  a[1] = Pack(c0[2], c0[3]);
  a[2] = Pack(c1[0], c1[1]);
  a[3] = Pack(c1[2], c1[3]);
}

// Sets N C fragments to zero.
template <int N>
__device__ inline void Zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[n][i] = 0.0f;
  }
}

// Writes this lane's share of row g (r = 0) or g + 8 (r = 1) of N C
// fragments side by side, times `scale`, as bf16 pairs: row points at the
// row's column 2t (4-byte aligned), fragment n's pair goes to row + 8n.
template <int N>
__device__ inline void StoreRow(bf16* row, const float (&c)[N][4], int r,
                                float scale = 1.0f) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(row + 8 * n) % 4 == 0,
                        "mma::StoreRow: 4-byte access misaligned");
    *reinterpret_cast<uint32_t*>(row + 8 * n) =
        Pack(c[n][2 * r] * scale, c[n][2 * r + 1] * scale);
  }
}

}  // namespace strata::kernels::cuda::mma

#endif  // STRATA_KERNELS_CUDA_MMA_CUH_
