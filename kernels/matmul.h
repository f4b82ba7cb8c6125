// Matrix multiplication: a row-major SGEMM split over the kernel thread pool,
// and the fully connected layer (matmul + bias) forward and backward.
#ifndef STRATA_KERNELS_MATMUL_H_
#define STRATA_KERNELS_MATMUL_H_

namespace strata::kernels {

// C (M,N) = alpha * op(A) @ op(B) + beta * C, all row-major, where op(A) is
// (M,K) (A is (K,M) when trans_a) and op(B) is (K,N) (B is (N,K) when
// trans_b). Splits the larger of M and N across the thread pool, each piece
// one single-threaded OpenBLAS call; runs inline when called from a pool
// thread or when the product is small.
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta,
          float* C, int ldc);

// out = inp @ weight^T + bias (or out += that, when accumulate: used to fuse
// a residual connection).
// out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or null.
void MatmulForward(float* out, const float* inp, const float* weight,
                   const float* bias, int N, int C, int OC,
                   bool accumulate = false);

// Backward of MatmulForward: dinp = dout @ weight (overwritten; skipped when
// null), dweight += dout^T @ inp, dbias += column sums of dout (skipped when
// null).
// dinp is (N,C), dweight is (OC,C), dbias is (OC), dout is (N,OC).
void MatmulBackward(float* dinp, float* dweight, float* dbias,
                    const float* dout, const float* inp, const float* weight,
                    int N, int C, int OC);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_MATMUL_H_
