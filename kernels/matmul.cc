#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "common/parallel.h"

namespace strata::kernels {
namespace {

// Below this many multiply-adds one thread does the whole product.
constexpr int64_t kSerialGemmFlops = int64_t{1} << 18;
// Pieces of a split dimension are multiples of this (the GEMM micro-tiles).
constexpr int kGemmAlign = 32;
// Pieces span at least this many units: every piece packs the whole other
// operand, so smaller pieces repeat that work.
constexpr int kGemmMinUnits = 4;

// GEMMs are split over ParallelFor's pool; OpenBLAS runs each piece on one
// thread, or its own threads and the pool's would fight for the cores.
void HoldBlasToOneThread() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

void SerialGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                const float* A, int lda, const float* B, int ldb, float beta,
                float* C, int ldc) {
  HoldBlasToOneThread();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta,
          float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t flops = int64_t{M} * N * K;
  if (flops < kSerialGemmFlops || NumThreads() == 1 || InParallelRegion()) {
    SerialGemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split rows of C (pieces of A) or columns of C (pieces of B), whichever
  // dimension is larger; in units of kGemmAlign so micro-tiles stay full.
  const bool split_m = M >= N;
  const int dim = split_m ? M : N;
  const int units = (dim + kGemmAlign - 1) / kGemmAlign;
  ParallelFor(units, kGemmMinUnits, [&](int, int64_t u0, int64_t u1) {
    const int begin = static_cast<int>(u0) * kGemmAlign;
    const int end = std::min(dim, static_cast<int>(u1) * kGemmAlign);
    if (split_m) {
      const float* a = trans_a ? A + begin : A + int64_t{begin} * lda;
      SerialGemm(trans_a, trans_b, end - begin, N, K, alpha, a, lda, B, ldb,
                 beta, C + int64_t{begin} * ldc, ldc);
    } else {
      const float* b = trans_b ? B + int64_t{begin} * ldb : B + begin;
      SerialGemm(trans_a, trans_b, M, end - begin, K, alpha, A, lda, b, ldb,
                 beta, C + begin, ldc);
    }
  });
}

void MatmulForward(float* out, const float* inp, const float* weight,
                   const float* bias, int N, int C, int OC, bool accumulate) {
  // Put the bias (and the accumulated value) in out, then GEMM with beta 1.
  if (bias != nullptr) {
    ParallelFor(N, 16, [&](int, int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        float* row = out + n * OC;
        if (accumulate) {
          for (int o = 0; o < OC; ++o) row[o] += bias[o];
        } else {
          std::copy(bias, bias + OC, row);
        }
      }
    });
  }
  const float beta = (bias != nullptr || accumulate) ? 1.0f : 0.0f;
  Gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void MatmulBackward(float* dinp, float* dweight, float* dbias,
                    const float* dout, const float* inp, const float* weight,
                    int N, int C, int OC) {
  if (dinp != nullptr) {
    Gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  }
  Gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) {
    // Each chunk owns a range of columns and sums them over all rows.
    ParallelFor(OC, 64, [&](int, int64_t o0, int64_t o1) {
      for (int n = 0; n < N; ++n) {
        const float* row = dout + int64_t{n} * OC;
        for (int64_t o = o0; o < o1; ++o) dbias[o] += row[o];
      }
    });
  }
}

}  // namespace strata::kernels
