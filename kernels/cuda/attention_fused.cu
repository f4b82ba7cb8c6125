// Fused causal attention in the style of FlashAttention-2 (Dao, 2023): the
// T x T scores never leave the chip. bf16 tensor-core products in registers
// (mma.sync m16n8k16 through kernels/cuda/mma.cuh, fp32 accumulation),
// online softmax in fp32.
//
// Forward: one block of 4 warps per (64 query rows, batch row, head); each
// warp owns 16 query rows and walks the key tiles (K, V staged in shared
// memory, the next tile copied in with cp.async while the block computes
// on the current one) up to the diagonal, keeping its rows' scores, running max
// m and sum l and the fp32 output in registers: the probabilities go from the
// score fragments straight into the P V product. It saves
// lse = m + log2(l) per row (base 2, scaled scores) for backward.
//
// Backward: one block per (64 keys, batch row, head); each warp owns 16 key
// rows and walks the query tiles from the diagonal down (Q, dO, lse and D
// of the next tile copied in while it computes), recomputing
// P^T = exp2(S^T - lse) from K Q^T, accumulating dV += P^T dO and
// dK += dS^T Q in registers; dS^T goes through shared memory so that each
// warp computes dQ = dS K for 16 queries, added into an fp32 buffer with
// atomics. dS = P * (dP - D) with D = rowsum(dO * O) computed first.
//
// Shared tiles are padded by 8 bf16 per row, so that the fragment loads
// (each lane a 4-byte word of row g, column 2t) fall in distinct banks.
#include <cmath>

#include "kernels/cuda/attention_fused.cuh"
#include "kernels/cuda/attention_fused_kernels.cuh"

namespace strata::kernels::cuda {
namespace {

using namespace flash;  // NOLINT: this file launches them

template <int HS>
absl::Status LaunchForward(Context& ctx, bf16* out, float* lse, const bf16* qkv,
                           int B, int T, int C, int NH) {
  constexpr int64_t kBytes = Dims<HS>::kForwardBytes;
  STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashForwardKernel<HS>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kBytes)),
      "FlashForwardKernel shared memory"));
  // All of the SM's unified L1/shared memory as shared: else the driver may
  // pick a split that fits fewer blocks than registers allow.
  STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashForwardKernel<HS>,
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared),
      "FlashForwardKernel shared-memory carveout"));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(HS));
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  STRATA_LAUNCH(FlashForwardKernel<HS>, grid, kThreads, kBytes, ctx.stream(),
                out, lse, qkv, T, C, NH, scale_log2);
  return LaunchStatus("FlashForwardKernel");
}

template <int HS>
absl::Status LaunchBackward(Context& ctx, bf16* dqkv, float* dq_acc,
                            const bf16* dout, const bf16* qkv, const float* lse,
                            const float* D, int B, int T, int C, int NH) {
  constexpr int64_t kBytes = Dims<HS>::kBackwardBytes;
  STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashBackwardKernel<HS>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kBytes)),
      "FlashBackwardKernel shared memory"));
  // All of the SM's unified L1/shared memory as shared: else the driver may
  // pick a split that fits fewer blocks than registers allow.
  STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaFuncSetAttribute(FlashBackwardKernel<HS>,
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared),
      "FlashBackwardKernel shared-memory carveout"));
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const dim3 grid(B * NH, (T + kTile - 1) / kTile);
  STRATA_LAUNCH(FlashBackwardKernel<HS>, grid, kThreads, kBytes, ctx.stream(),
                dqkv, dq_acc, dout, qkv, lse, D, T, C, NH, scale,
                scale * kLog2e);
  return LaunchStatus("FlashBackwardKernel");
}

}  // namespace

bool FusedAttentionSupports(const Context& ctx, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0) return false;
  const int hs = C / NH;
  if (!(hs == 32 || hs == 64 || hs == 128) || C % 8 != 0 ||
      int64_t{B} * NH > 0x7fffffff ||
      (int64_t{T} + kTile - 1) / kTile > 65535) {
    return false;
  }
  // Backward needs the most: 41 KiB for head size 32, 65 KiB for 64 and
  // 115 KiB for 128 (an A100's or a Hopper's limit is above; a consumer
  // GPU's 99 KiB takes the unfused kernels for 128).
  const int64_t need = hs == 32   ? Dims<32>::kBackwardBytes
                       : hs == 64 ? Dims<64>::kBackwardBytes
                                  : Dims<128>::kBackwardBytes;
  return need <= ctx.max_shared_bytes();
}

int64_t FusedAttentionScratchBytes(int B, int T, int C, int NH) {
  // dq_acc (B,T,C) fp32, then D (B,NH,T) fp32.
  return Align(int64_t{B} * T * C * 4) + int64_t{B} * NH * T * 4;
}

absl::Status FusedAttentionForward(Context& ctx, bf16* out, float* lse,
                                   const bf16* qkv, int B, int T, int C,
                                   int NH) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(FusedAttentionSupports(ctx, B, T, C, NH),
              "fused attention: head size 32, 64 or 128, C % 8 == 0, and the "
              "device's shared memory per block"));
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(reinterpret_cast<uintptr_t>(qkv) % 16 == 0,
              "fused attention: qkv must be 16-byte aligned"));
  switch (C / NH) {
    case 32:
      return LaunchForward<32>(ctx, out, lse, qkv, B, T, C, NH);
    case 64:
      return LaunchForward<64>(ctx, out, lse, qkv, B, T, C, NH);
    default:
      return LaunchForward<128>(ctx, out, lse, qkv, B, T, C, NH);
  }
}

absl::Status FusedAttentionBackward(Context& ctx, bf16* dqkv, void* scratch,
                                    const bf16* dout, const bf16* qkv,
                                    const bf16* out, const float* lse, int B,
                                    int T, int C, int NH) {
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(FusedAttentionSupports(ctx, B, T, C, NH),
              "fused attention: head size 32, 64 or 128, C % 8 == 0, and the "
              "device's shared memory per block"));
  STRATA_CUDA_RETURN_IF_ERROR(
      Require(reinterpret_cast<uintptr_t>(qkv) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(dout) % 16 == 0,
              "fused attention: qkv and dout must be 16-byte aligned"));
  const int64_t N = int64_t{B} * T;
  auto* dq_acc = static_cast<float*>(scratch);
  auto* D = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) +
                                     Align(N * C * 4));
  STRATA_CUDA_RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(dq_acc, 0, N * C * 4, ctx.stream()), "clear dq_acc"));
  const int hs = C / NH;
  const int64_t rows = N * NH;
  STRATA_LAUNCH(RowDotKernel, Blocks(rows, kWarps), kThreads, 0, ctx.stream(),
                D, dout, out, rows, T, NH, hs);
  STRATA_CUDA_RETURN_IF_ERROR(LaunchStatus("RowDotKernel"));
  switch (hs) {
    case 32:
      STRATA_CUDA_RETURN_IF_ERROR(LaunchBackward<32>(ctx, dqkv, dq_acc, dout,
                                                     qkv, lse, D, B, T, C, NH));
      break;
    case 64:
      STRATA_CUDA_RETURN_IF_ERROR(LaunchBackward<64>(ctx, dqkv, dq_acc, dout,
                                                     qkv, lse, D, B, T, C, NH));
      break;
    default:
      STRATA_CUDA_RETURN_IF_ERROR(LaunchBackward<128>(
          ctx, dqkv, dq_acc, dout, qkv, lse, D, B, T, C, NH));
  }
  constexpr int kStoreThreads = 256;
  STRATA_LAUNCH(StoreDqKernel, Blocks(N * C, kStoreThreads), kStoreThreads, 0,
                ctx.stream(), dqkv, dq_acc, N, C);
  return LaunchStatus("StoreDqKernel");
}

}  // namespace strata::kernels::cuda
