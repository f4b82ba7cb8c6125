// Warp-level bf16 tensor-core products in registers: PTX's
// mma.sync.m16n8k16 (fp32 accumulation) and the loads of its operand
// fragments from shared memory. Kernels that keep their tiles in registers
// (the fused attention) build on these; on the CPU emulation of
// kernels/cuda/emulation.h the product is emulated with the same fragment
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

// The two consecutive bf16 at p (4-byte aligned) as one register.
__device__ inline uint32_t Pair(const bf16* p) {
  STRATA_DEVICE_CHECK(reinterpret_cast<uintptr_t>(p) % 4 == 0,
                      "mma::Pair: 4-byte access misaligned");
  return *reinterpret_cast<const uint32_t*>(p);
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

// A (16 x 16) from row-major shared memory: A[m][k] = s[m * ld + k]
// (s and ld even, so every pair is 4-byte aligned).
__device__ inline void LoadA(uint32_t (&a)[4], const bf16* s, int ld) {
  const int g = Lane() / 4, t = Lane() % 4;
  a[0] = Pair(s + g * ld + 2 * t);
  a[1] = Pair(s + (g + 8) * ld + 2 * t);
  a[2] = Pair(s + g * ld + 2 * t + 8);
  a[3] = Pair(s + (g + 8) * ld + 2 * t + 8);
}

// A (16 x 16) stored transposed: A[m][k] = s[k * ld + m].
__device__ inline void LoadAT(uint32_t (&a)[4], const bf16* s, int ld) {
  const int g = Lane() / 4, t = Lane() % 4;
  const bf16* r0 = s + 2 * t * ld;  // k = 2t
  const bf16* r8 = r0 + 8 * ld;     // k = 2t + 8
  a[0] = Pack(r0[g], r0[ld + g]);
  a[1] = Pack(r0[g + 8], r0[ld + g + 8]);
  a[2] = Pack(r8[g], r8[ld + g]);
  a[3] = Pack(r8[g + 8], r8[ld + g + 8]);
}

// B (16 x 8) stored column by column: B[k][n] = s[n * ld + k] (a K or Q
// tile for a product with its transpose).
__device__ inline void LoadB(uint32_t (&b)[2], const bf16* s, int ld) {
  const int g = Lane() / 4, t = Lane() % 4;
  b[0] = Pair(s + g * ld + 2 * t);
  b[1] = Pair(s + g * ld + 2 * t + 8);
}

// B (16 x 8) row-major: B[k][n] = s[k * ld + n].
__device__ inline void LoadBT(uint32_t (&b)[2], const bf16* s, int ld) {
  const int g = Lane() / 4, t = Lane() % 4;
  const bf16* r0 = s + 2 * t * ld;
  const bf16* r8 = r0 + 8 * ld;
  b[0] = Pack(r0[g], r0[ld + g]);
  b[1] = Pack(r8[g], r8[ld + g]);
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

}  // namespace strata::kernels::cuda::mma

#endif  // STRATA_KERNELS_CUDA_MMA_CUH_
