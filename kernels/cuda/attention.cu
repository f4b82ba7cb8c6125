// Causal self-attention: the public entry points, which pick the fused
// kernels (attention_fused.cu) or the unfused ones here: per batch row,
// cuBLAS strided-batched GEMMs over the heads (scores in fp32) and
// warp-per-row softmax kernels (attention_kernels.cuh).
#include <cmath>

#include "kernels/cuda/attention_fused.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {
namespace {

using namespace unfused;  // NOLINT: this file launches them

absl::Status CheckShape(int B, int T, int C, int NH) {
  return Require(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
                 "Attention: B, T, C, NH > 0 and NH divides C");
}

// The unfused scratch: (B,NH,T,T) fp32 scores, then (B,NH,T,T) bf16.
int64_t ScoresBytes(int B, int T, int NH) {
  const int64_t bytes = int64_t{B} * NH * T * T * 4;
  return (bytes + 255) / 256 * 256;
}

absl::Status UnfusedForward(Context& ctx, bf16* out, bf16* att, float* scores,
                            const bf16* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = int64_t{T} * T;
  for (int b = 0; b < B; ++b) {
    const bf16* q = qkv + int64_t{b} * T * 3 * C;
    // scores[b,h] (T,T) = scale * Q_h K_h^T, heads batched (stride hs).
    STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(
        ctx, false, true, T, T, hs, scale, q, 3 * C, hs, q + C, 3 * C, hs, 0.0f,
        scores + b * NH * tt, CUDA_R_32F, T, tt, NH));
  }
  const int64_t rows = int64_t{B} * NH * T;
  STRATA_LAUNCH(CausalSoftmaxKernel, SoftmaxBlocks(rows), kThreads, 0,
                ctx.stream(), att, scores, rows, T);
  STRATA_CUDA_RETURN_IF_ERROR(LaunchStatus("CausalSoftmaxKernel"));
  for (int b = 0; b < B; ++b) {
    const bf16* v = qkv + int64_t{b} * T * 3 * C + 2 * C;
    // out[b,:,h] (T,hs) = P_h (T,T) V_h (T,hs).
    STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(
        ctx, false, false, T, hs, T, 1.0f, att + b * NH * tt, T, tt, v, 3 * C,
        hs, 0.0f, out + int64_t{b} * T * C, CUDA_R_16BF, C, hs, NH));
  }
  return absl::OkStatus();
}

absl::Status UnfusedBackward(Context& ctx, bf16* dqkv, float* dscores,
                             bf16* dsoft, const bf16* dout, const bf16* qkv,
                             const bf16* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t tt = int64_t{T} * T;
  for (int b = 0; b < B; ++b) {
    const bf16* v = qkv + int64_t{b} * T * 3 * C + 2 * C;
    const bf16* dO = dout + int64_t{b} * T * C;
    bf16* dv = dqkv + int64_t{b} * T * 3 * C + 2 * C;
    // dV_h = P_h^T dO_h.
    STRATA_CUDA_RETURN_IF_ERROR(
        GemmBatched(ctx, true, false, T, hs, T, 1.0f, att + b * NH * tt, T, tt,
                    dO, C, hs, 0.0f, dv, CUDA_R_16BF, 3 * C, hs, NH));
    // dP_h = dO_h V_h^T (fp32).
    STRATA_CUDA_RETURN_IF_ERROR(
        GemmBatched(ctx, false, true, T, T, hs, 1.0f, dO, C, hs, v, 3 * C, hs,
                    0.0f, dscores + b * NH * tt, CUDA_R_32F, T, tt, NH));
  }
  const int64_t rows = int64_t{B} * NH * T;
  STRATA_LAUNCH(SoftmaxBackwardKernel, SoftmaxBlocks(rows), kThreads, 0,
                ctx.stream(), dsoft, dscores, att, rows, T);
  STRATA_CUDA_RETURN_IF_ERROR(LaunchStatus("SoftmaxBackwardKernel"));
  for (int b = 0; b < B; ++b) {
    const bf16* q = qkv + int64_t{b} * T * 3 * C;
    bf16* dq = dqkv + int64_t{b} * T * 3 * C;
    const bf16* ds = dsoft + b * NH * tt;
    // dQ_h = scale dS_h K_h; dK_h = scale dS_h^T Q_h.
    STRATA_CUDA_RETURN_IF_ERROR(GemmBatched(ctx, false, false, T, hs, T, scale,
                                            ds, T, tt, q + C, 3 * C, hs, 0.0f,
                                            dq, CUDA_R_16BF, 3 * C, hs, NH));
    STRATA_CUDA_RETURN_IF_ERROR(
        GemmBatched(ctx, true, false, T, hs, T, scale, ds, T, tt, q, 3 * C, hs,
                    0.0f, dq + C, CUDA_R_16BF, 3 * C, hs, NH));
  }
  return absl::OkStatus();
}

}  // namespace

AttentionKind ChooseAttention(const Context& ctx, int B, int T, int C, int NH) {
  return FusedAttentionSupports(ctx, B, T, C, NH) ? AttentionKind::kFused
                                                  : AttentionKind::kUnfused;
}

int64_t AttentionSavedBytes(AttentionKind kind, int B, int T, int C, int NH) {
  if (kind == AttentionKind::kFused) return int64_t{B} * NH * T * 4;  // lse
  return int64_t{B} * NH * T * T * 2;  // probabilities
}

int64_t AttentionScratchBytes(AttentionKind kind, int B, int T, int C, int NH) {
  if (kind == AttentionKind::kFused) {
    return FusedAttentionScratchBytes(B, T, C, NH);
  }
  return ScoresBytes(B, T, NH) + int64_t{B} * NH * T * T * 2;
}

absl::Status AttentionForward(Context& ctx, AttentionKind kind, bf16* out,
                              void* saved, void* scratch, const bf16* qkv,
                              int B, int T, int C, int NH) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckShape(B, T, C, NH));
  if (kind == AttentionKind::kFused) {
    return FusedAttentionForward(ctx, out, static_cast<float*>(saved), qkv, B,
                                 T, C, NH);
  }
  return UnfusedForward(ctx, out, static_cast<bf16*>(saved),
                        static_cast<float*>(scratch), qkv, B, T, C, NH);
}

absl::Status AttentionBackward(Context& ctx, AttentionKind kind, bf16* dqkv,
                               void* scratch, const bf16* dout, const bf16* qkv,
                               const bf16* out, const void* saved, int B, int T,
                               int C, int NH) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckShape(B, T, C, NH));
  if (kind == AttentionKind::kFused) {
    return FusedAttentionBackward(ctx, dqkv, scratch, dout, qkv, out,
                                  static_cast<const float*>(saved), B, T, C,
                                  NH);
  }
  auto* dsoft = reinterpret_cast<bf16*>(static_cast<unsigned char*>(scratch) +
                                        ScoresBytes(B, T, NH));
  return UnfusedBackward(ctx, dqkv, static_cast<float*>(scratch), dsoft, dout,
                         qkv, static_cast<const bf16*>(saved), B, T, C, NH);
}

}  // namespace strata::kernels::cuda
