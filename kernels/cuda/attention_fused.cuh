// The fused (flash-style) attention kernels behind AttentionForward and
// AttentionBackward's kFused kind. Private to kernels/cuda/.
#ifndef STRATA_KERNELS_CUDA_ATTENTION_FUSED_CUH_
#define STRATA_KERNELS_CUDA_ATTENTION_FUSED_CUH_

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {

// True when the fused kernels handle this shape on ctx's device: head size
// 32, 64 or 128, C a multiple of 8 (16-byte row loads), and the shared
// memory their tiles need within the device's opt-in limit per block.
bool FusedAttentionSupports(const Context& ctx, int B, int T, int C, int NH);

// Scratch of FusedAttentionBackward: a (B,T,C) fp32 dQ accumulator and the
// (B,NH,T) fp32 row dots D.
int64_t FusedAttentionScratchBytes(int B, int T, int C, int NH);

// out (B,T,C) from qkv (B,T,3C); lse (B,NH,T) fp32 receives each row's
// log2-sum-exp2 of the scaled scores (log2(e)/sqrt(hs) * q.k).
absl::Status FusedAttentionForward(Context& ctx, bf16* out, float* lse,
                                   const bf16* qkv, int B, int T, int C,
                                   int NH);

// dqkv (B,T,3C) overwritten, from dout, qkv, and the forward's out and lse.
absl::Status FusedAttentionBackward(Context& ctx, bf16* dqkv, void* scratch,
                                    const bf16* dout, const bf16* qkv,
                                    const bf16* out, const float* lse, int B,
                                    int T, int C, int NH);

}  // namespace strata::kernels::cuda

#endif  // STRATA_KERNELS_CUDA_ATTENTION_FUSED_CUH_
