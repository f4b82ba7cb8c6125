#include "model/cpu_block_ops.h"

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "model_parallel/tensor_parallel.h"

namespace strata {

namespace k = ::strata::kernels;

absl::Status CpuBlockOps::LayerNorm(float* out, float* mean, float* rstd,
                                    const float* in, const float* w,
                                    const float* b) {
  k::LayerNormForward(out, mean, rstd, in, w, b, d.N(), d.C);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::Linear(float* out, const float* in, const float* w,
                                 const float* b, int in_f, int out_f) {
  if (tp != nullptr) {
    ColumnParallelForward(out, in, w, b, d.N(), in_f, out_f);
  } else {
    k::MatmulForward(out, in, w, b, d.N(), in_f, out_f);
  }
  return absl::OkStatus();
}

absl::Status CpuBlockOps::LinearGelu(float* pre, float* post, const float* in,
                                     const float* w, const float* b, int in_f,
                                     int out_f) {
  STRATA_RETURN_IF_ERROR(Linear(pre, in, w, b, in_f, out_f));
  k::GeluForward(post, pre, int64_t{d.N()} * out_f);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::LinearResidual(float* out, const float* residual,
                                         const float* in, const float* w,
                                         const float* b, int in_f, int out_f) {
  const int64_t n = int64_t{d.N()} * out_f;
  if (tp != nullptr) {
    STRATA_RETURN_IF_ERROR(
        RowParallelForward(*tp, partial, in, w, b, d.N(), in_f, out_f));
    for (int64_t i = 0; i < n; ++i) out[i] = residual[i] + partial[i];
    return absl::OkStatus();
  }
  std::copy(residual, residual + n, out);
  k::MatmulForward(out, in, w, b, d.N(), in_f, out_f, /*accumulate=*/true);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::Attention(float* out, float* att, const float* qkv) {
  k::AttentionForward(out, att, qkv, d.B, d.T, d.head_cols, d.heads);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::LinearBackward(float* din, float* dw, float* db,
                                         const float* dout, const float* in,
                                         const float* w, int in_f, int out_f) {
  if (tp != nullptr) {
    return ColumnParallelBackward(*tp, din, dw, db, dout, in, w, d.N(), in_f,
                                  out_f);
  }
  k::MatmulBackward(din, dw, db, dout, in, w, d.N(), in_f, out_f);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::LinearResidualBackward(float* din, float* dw,
                                                 float* db, const float* dout,
                                                 const float* in,
                                                 const float* w, int in_f,
                                                 int out_f) {
  if (tp != nullptr) {
    RowParallelBackward(din, dw, db, dout, in, w, d.N(), in_f, out_f);
  } else {
    k::MatmulBackward(din, dw, db, dout, in, w, d.N(), in_f, out_f);
  }
  return absl::OkStatus();
}

absl::Status CpuBlockOps::GeluBackward(float* din, const float* pre,
                                       const float* dout, int64_t n) {
  k::GeluBackward(din, pre, dout, n);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::LayerNormBackward(float* din, float* dw, float* db,
                                            const float* dout, const float* in,
                                            const float* w, const float* mean,
                                            const float* rstd) {
  k::LayerNormBackward(din, dw, db, dout, in, w, mean, rstd, d.N(), d.C);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::AttentionBackward(float* dqkv, const float* dout,
                                            const float* qkv, const float* att,
                                            const float* out) {
  k::AttentionBackward(dqkv, datt, dout, qkv, att, d.B, d.T, d.head_cols,
                       d.heads);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::GradsReady(int slot) {
  if (on_grads_ready) on_grads_ready(slot);
  return absl::OkStatus();
}

absl::Status CpuBlockOps::Moe(float* out, const float* residual,
                              const float* in) {
  STRATA_RETURN_IF_ERROR(moe->Route(moe_w, in));
  if (on_routed) STRATA_RETURN_IF_ERROR(on_routed(moe->routing()));
  STRATA_RETURN_IF_ERROR(moe->Combine(moe_w, in, out));
  const int64_t n = int64_t{d.N()} * d.C;
  for (int64_t i = 0; i < n; ++i) out[i] += residual[i];
  return absl::OkStatus();
}

absl::Status CpuBlockOps::MoeBackward(float* din, const float* dout,
                                      const float* in) {
  STRATA_RETURN_IF_ERROR(moe->Backward(moe_w, in, dout, moe_daux, moe_g, din));
  if (on_moe_grads_ready) on_moe_grads_ready();
  return absl::OkStatus();
}

}  // namespace strata
