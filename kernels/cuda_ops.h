// CUDA twins of the CPU kernels (kernels/*.h): bf16 activations and weights,
// fp32 accumulation, fp32 weight gradients, cuBLAS for GEMMs.
//
// Every launcher checks its shape preconditions (INVALID_ARGUMENT), enqueues
// work on the context's stream and returns the launch error as a Status
// (INTERNAL); it does not synchronize. Pointers are device memory. Shapes
// and semantics match the CPU function of the same name unless noted.
#ifndef STRATA_KERNELS_CUDA_OPS_H_
#define STRATA_KERNELS_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "optim/adam_step.h"

namespace strata::kernels::cuda {

using bf16 = __nv_bfloat16;

// The number of CUDA devices, 0 when there is no driver or no device.
int DeviceCount();

// OK, or INTERNAL naming `what` with the CUDA (cuBLAS) error. CudaStatus
// also clears a non-sticky error so that a later launch check does not
// report it against another kernel.
absl::Status CudaStatus(cudaError_t err, const char* what);
absl::Status CublasStatus(cublasStatus_t err, const char* what);

// A stream and a cuBLAS handle bound to it. Not thread-safe.
class Context {
 public:
  // Creates a stream and handle on the current device. UNAVAILABLE without
  // a device, INTERNAL on other CUDA/cuBLAS errors.
  static absl::StatusOr<std::unique_ptr<Context>> Create();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  // The most dynamic shared memory a block may opt into on this device.
  int max_shared_bytes() const { return max_shared_bytes_; }
  cublasHandle_t cublas() const { return cublas_; }
  // Waits for the stream; returns its first error.
  absl::Status Synchronize();

 private:
  Context() = default;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  int max_shared_bytes_ = 48 << 10;
};

// out is (B,T,C) bf16; tokens (B,T) int32 (each in [0,V), unchecked on the
// device); wte (V,C), wpe (>=T,C) bf16.
absl::Status EncoderForward(Context& ctx, bf16* out, const int32_t* tokens,
                            const bf16* wte, const bf16* wpe, int B, int T,
                            int C);
// dwte (V,C), dwpe (>=T,C) fp32 accumulated (atomics: not bitwise
// reproducible); dout (B,T,C) bf16.
absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe,
                             const bf16* dout, const int32_t* tokens, int B,
                             int T, int C);

// out, inp (N,C) bf16; weight, bias (C) bf16; mean, rstd (N) fp32.
absl::Status LayerNormForward(Context& ctx, bf16* out, float* mean, float* rstd,
                              const bf16* inp, const bf16* weight,
                              const bf16* bias, int N, int C);
// dinp (N,C) bf16 accumulated; dweight, dbias (C) fp32 accumulated.
absl::Status LayerNormBackward(Context& ctx, bf16* dinp, float* dweight,
                               float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, const float* mean,
                               const float* rstd, int N, int C);

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC, or null); all bf16.
absl::Status MatmulForward(Context& ctx, bf16* out, const bf16* inp,
                           const bf16* weight, const bf16* bias, int N, int C,
                           int OC);
// dinp (N,C) bf16 overwritten (skipped when null); dweight (OC,C) and dbias
// (OC, skipped when null) fp32 accumulated; dout (N,OC) bf16.
absl::Status MatmulBackward(Context& ctx, bf16* dinp, float* dweight,
                            float* dbias, const bf16* dout, const bf16* inp,
                            const bf16* weight, int N, int C, int OC);

// Causal self-attention, as kernels::AttentionForward/Backward, in one of
// two implementations:
//   kFused: flash-attention style (attention_fused.cu): tensor-core tiles,
//     the T x T scores never leave shared memory, and forward saves only a
//     log-sum-exp per row. Head sizes 32, 64 and 128.
//   kUnfused: cuBLAS batched GEMMs and softmax kernels through (B,NH,T,T)
//     buffers. Any shape; the reference for kFused.
enum class AttentionKind { kFused, kUnfused };

// kFused when it supports the shape on ctx's device, else kUnfused.
AttentionKind ChooseAttention(const Context& ctx, int B, int T, int C, int NH);

// Bytes of `saved` (what forward keeps for backward; one per layer) and of
// `scratch` (shared by all calls) for a shape and kind.
int64_t AttentionSavedBytes(AttentionKind kind, int B, int T, int C, int NH);
int64_t AttentionScratchBytes(AttentionKind kind, int B, int T, int C, int NH);

// out (B,T,C) from qkv (B,T,3C), both bf16; fills `saved`. For kUnfused,
// `saved` holds the (B,NH,T,T) bf16 probabilities. INVALID_ARGUMENT for a
// shape the kind does not support.
absl::Status AttentionForward(Context& ctx, AttentionKind kind, bf16* out,
                              void* saved, void* scratch, const bf16* qkv,
                              int B, int T, int C, int NH);
// dqkv (B,T,3C) bf16 overwritten, from dout (B,T,C) and the forward's qkv,
// out and saved.
absl::Status AttentionBackward(Context& ctx, AttentionKind kind, bf16* dqkv,
                               void* scratch, const bf16* dout, const bf16* qkv,
                               const bf16* out, const void* saved, int B, int T,
                               int C, int NH);

// out = gelu(inp), n elements bf16 (may alias).
absl::Status GeluForward(Context& ctx, bf16* out, const bf16* inp, int64_t n);
// dinp = gelu'(inp) * dout, bf16 (dinp may alias dout).
absl::Status GeluBackward(Context& ctx, bf16* dinp, const bf16* inp,
                          const bf16* dout, int64_t n);

// pre (N,OC) += bias (OC), then out (N,OC) = gelu(pre): MatmulForward's
// bias and GeluForward in one pass, for a GEMM run without its bias. pre
// ends as MatmulForward with the bias would have left it.
absl::Status BiasGeluForward(Context& ctx, bf16* out, bf16* pre,
                             const bf16* bias, int N, int OC);

// out = a + b; da += dout, db += dout. bf16, n elements.
absl::Status ResidualForward(Context& ctx, bf16* out, const bf16* a,
                             const bf16* b, int64_t n);
// out (N,OC) = a + (b + bias (OC)): a projection's bias (b from a GEMM run
// without it, rounded to bf16 as MatmulForward rounds) and the residual add
// in one pass.
absl::Status BiasResidualForward(Context& ctx, bf16* out, const bf16* a,
                                 const bf16* b, const bf16* bias, int N,
                                 int OC);
absl::Status ResidualBackward(Context& ctx, bf16* da, bf16* db,
                              const bf16* dout, int64_t n);

// Fused softmax cross-entropy: logits (N,ld) fp32 in, of which the first V
// columns are the vocabulary and the rest padding (ignored); dlogits (N,ld)
// bf16 out = (softmax - onehot) * dloss, 0 in the padding; losses (N) fp32
// out. Targets in [0,V). INVALID_ARGUMENT unless N, V > 0 and ld >= V.
absl::Status SoftmaxCrossEntropyFused(Context& ctx, bf16* dlogits,
                                      float* losses, const float* logits,
                                      const int32_t* targets, float dloss,
                                      int N, int V, int ld);

// One Adam/AdamW step on n fp32 elements with the constants of
// strata::MakeAdamStep (the same formula as strata::ApplyUpdate, up to FMA
// contraction): w, m, v updated in place from the gradient g; when w_bf16 is
// not null it receives bf16(new w). For a worker that keeps its optimizer on
// the device (GptCuda's resident training).
absl::Status AdamUpdate(Context& ctx, float* w, bf16* w_bf16, float* m,
                        float* v, const float* g, int64_t n,
                        const AdamStep& step);

// AdamUpdateSpans' kind for a span it leaves unchanged (padding between
// parameters).
inline constexpr uint8_t kAdamSpanUntouched = 255;

// AdamUpdate over the n elements of a buffer of many parameters in one
// launch: span i covers elements [starts[i], starts[i+1]) (starts[0] = 0,
// starts[spans] = n, non-decreasing) and takes step0 when kinds[i] is 0,
// step1 when 1, and is left unchanged when kAdamSpanUntouched. starts (spans +
// 1) and kinds (spans) are in device memory.
absl::Status AdamUpdateSpans(Context& ctx, float* w, bf16* w_bf16, float* m,
                             float* v, const float* g, const int64_t* starts,
                             const uint8_t* kinds, int spans, int64_t n,
                             const AdamStep& step0, const AdamStep& step1);

// The mixture-of-experts layer (model/moe_router.h routes on the host):
// R rows packed expert by expert, src (R) int32 each row's token; row,
// gate (N,K) token t's k-th choice's row (-1: dropped) and weight. K is 1
// or 2.
// logits (N,E) fp32 = inp (N,C) @ router (E,C)^T.
absl::Status MoeRouterLogits(Context& ctx, float* logits, const bf16* inp,
                             const bf16* router, int N, int C, int E);
// out (R,C) = inp[src[r]] (R may be 0).
absl::Status MoeGatherRows(Context& ctx, bf16* out, const bf16* inp,
                           const int32_t* src, int R, int C);
// out (N,C) = residual + sum_k gate[t,k] * y[row[t,k]], in fp32.
absl::Status MoeCombine(Context& ctx, bf16* out, const bf16* residual,
                        const bf16* y, const int32_t* row, const float* gate,
                        int N, int K, int C);
// For dout (N,C): dy[row[t,k]] = gate[t,k] * dout[t] (overwritten; rows
// no choice names are left as they are) and dgate (N,K) fp32 = dout[t] .
// y[row[t,k]] (0 when dropped).
absl::Status MoeCombineBackward(Context& ctx, bf16* dy, float* dgate,
                                const bf16* dout, const bf16* y,
                                const int32_t* row, const float* gate, int N,
                                int K, int C);
// dx (N,C) += sum_k din[row[t,k]].
absl::Status MoeAddRows(Context& ctx, bf16* dx, const bf16* din,
                        const int32_t* row, int N, int K, int C);

}  // namespace strata::kernels::cuda

#endif  // STRATA_KERNELS_CUDA_OPS_H_
