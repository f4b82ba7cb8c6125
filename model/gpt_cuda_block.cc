// GptCuda's backend of the transformer block (model/transformer_block.h):
// bf16 activations and weights, fp32 gradients and LayerNorm statistics,
// kernels/cuda_ops.h. Biases ride in the epilogues: the projections run
// their GEMM without bias and add it with the residual
// (BiasResidualForward), the MLP's first GEMM adds it with the GELU
// (BiasGeluForward). Each op is timed under its class's name when
// profiling (GptCuda::Op).
#include "kernels/cuda_ops.h"
#include "model/gpt_cuda.h"
#include "model/gpt_cuda_device.h"
#include "model/gpt_layout.h"
#include "model/transformer_block.h"

namespace strata {

namespace kc = ::strata::kernels::cuda;
using kc::bf16;

struct GptCuda::BlockOps {
  GptCuda& m;
  Device& dev;
  int layer;
  block::BlockDims d;
  gpt_cuda::BlockActs& a;
  bool recompute = false;  // MoeForward's `recompute`

  const block::BlockDims& dims() const { return d; }
  bf16* w(int slot) const { return dev.W(dev.Block(layer, slot)); }
  float* g(int slot) const { return dev.G(dev.Block(layer, slot)); }
  block::BlockTensors<bf16, float, void> acts() const {
    return {
        a.ln1.as<bf16>(),       a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(),
        a.qkv.as<bf16>(),       a.att.as<void>(),       a.atty.as<bf16>(),
        a.res2.as<bf16>(),      a.ln2.as<bf16>(),       a.ln2_mean.as<float>(),
        a.ln2_rstd.as<float>(), a.fch.as<bf16>(),       a.fch_gelu.as<bf16>()};
  }
  kc::Context& ctx() const { return *dev.ctx; }

  absl::Status LayerNorm(bf16* out, float* mean, float* rstd, const bf16* in,
                         const bf16* w, const bf16* b) {
    return m.Op("fwd.layernorm", [&] {
      return kc::LayerNormForward(ctx(), out, mean, rstd, in, w, b, d.N(), d.C);
    });
  }
  absl::Status Linear(bf16* out, const bf16* in, const bf16* w, const bf16* b,
                      int in_f, int out_f) {
    return m.Op("fwd.matmul", [&] {
      return kc::MatmulForward(ctx(), out, in, w, b, d.N(), in_f, out_f);
    });
  }
  absl::Status LinearGelu(bf16* pre, bf16* post, const bf16* in, const bf16* w,
                          const bf16* b, int in_f, int out_f) {
    STRATA_RETURN_IF_ERROR(Linear(pre, in, w, nullptr, in_f, out_f));
    return m.Op("fwd.bias_gelu", [&] {
      return kc::BiasGeluForward(ctx(), post, pre, b, d.N(), out_f);
    });
  }
  absl::Status LinearResidual(bf16* out, const bf16* residual, const bf16* in,
                              const bf16* w, const bf16* b, int in_f,
                              int out_f) {
    bf16* branch = dev.branch.as<bf16>();
    STRATA_RETURN_IF_ERROR(Linear(branch, in, w, nullptr, in_f, out_f));
    return m.Op("fwd.bias_residual", [&] {
      return kc::BiasResidualForward(ctx(), out, residual, branch, b, d.N(),
                                     out_f);
    });
  }
  absl::Status Attention(bf16* out, void* att, const bf16* qkv) {
    return m.Op("fwd.attention", [&] {
      return kc::AttentionForward(ctx(), dev.attention, out, att,
                                  dev.att_scratch.as<void>(), qkv, d.B, d.T,
                                  d.head_cols, d.heads);
    });
  }
  absl::Status LinearBackward(bf16* din, float* dw, float* db, const bf16* dout,
                              const bf16* in, const bf16* w, int in_f,
                              int out_f) {
    return m.Op("bwd.matmul", [&] {
      return kc::MatmulBackward(ctx(), din, dw, db, dout, in, w, d.N(), in_f,
                                out_f);
    });
  }
  absl::Status LinearResidualBackward(bf16* din, float* dw, float* db,
                                      const bf16* dout, const bf16* in,
                                      const bf16* w, int in_f, int out_f) {
    return LinearBackward(din, dw, db, dout, in, w, in_f, out_f);
  }
  absl::Status GeluBackward(bf16* din, const bf16* pre, const bf16* dout,
                            int64_t n) {
    return m.Op("bwd.gelu",
                [&] { return kc::GeluBackward(ctx(), din, pre, dout, n); });
  }
  absl::Status LayerNormBackward(bf16* din, float* dw, float* db,
                                 const bf16* dout, const bf16* in,
                                 const bf16* w, const float* mean,
                                 const float* rstd) {
    return m.Op("bwd.layernorm", [&] {
      return kc::LayerNormBackward(ctx(), din, dw, db, dout, in, w, mean, rstd,
                                   d.N(), d.C);
    });
  }
  absl::Status AttentionBackward(bf16* dqkv, const bf16* dout, const bf16* qkv,
                                 const void* att, const bf16* out) {
    return m.Op("bwd.attention", [&] {
      return kc::AttentionBackward(ctx(), dev.attention, dqkv,
                                   dev.att_scratch.as<void>(), dout, qkv, out,
                                   att, d.B, d.T, d.head_cols, d.heads);
    });
  }
  absl::Status GradsReady(int slot) {
    STRATA_RETURN_IF_ERROR(m.GradReady(dev.Block(layer, slot)));
    return m.GradReady(dev.Block(layer, slot + 1));
  }
  // An MoE block's layer (gpt_cuda_moe.cc).
  absl::Status Moe(bf16* out, const bf16* residual, const bf16* in) {
    return m.MoeForward(layer, out, residual, in, recompute);
  }
  absl::Status MoeBackward(bf16* din, const bf16* dout, const bf16* in) {
    return m.MoeBackward(layer, din, dout, in);
  }
};

GptCuda::BlockOps GptCuda::LayerOps(int l, int B, int T) {
  const GptConfig& c = config();
  return BlockOps{*this,
                  *dev_,
                  l,
                  {B, T, c.width, c.heads, c.width, 4 * c.width},
                  dev_->blocks[c.recompute ? 0 : l]};
}

absl::Status GptCuda::BlockForward(int l, int B, int T, bool recompute) {
  BlockOps ops = LayerOps(l, B, T);
  const int64_t NC = int64_t{B} * T * config().width;
  bf16* x = dev_->x.as<bf16>();
  if (!config().IsMoeLayer(l)) {
    return block::Forward(ops, x + l * NC, x + (l + 1) * NC);
  }
  ops.recompute = recompute;
  return block::MoeForward(ops, x + l * NC, x + (l + 1) * NC);
}

absl::Status GptCuda::BlockBackward(int l, int B, int T) {
  BlockOps ops = LayerOps(l, B, T);
  const int64_t NC = int64_t{B} * T * config().width;
  block::BlockGrads<bf16> g;
  g.dres = dev_->dres.as<bf16>();
  g.dln = dev_->dln.as<bf16>();
  g.dfch = dev_->dfch.as<bf16>();
  g.dqkv = dev_->dqkv.as<bf16>();
  g.datty = dev_->dln.as<bf16>();
  const bf16* x = dev_->x.as<bf16>() + l * NC;
  return config().IsMoeLayer(l) ? block::MoeBackward(ops, x, g)
                                : block::Backward(ops, x, g);
}

}  // namespace strata
