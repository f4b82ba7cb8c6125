// The transformer block, written once: a pre-LN block (LayerNorm, causal
// self-attention, residual add; LayerNorm, 4x GELU MLP, residual add), its
// forward and its backward, as a sequence of ops a backend provides. Every
// GPT in Strata runs these two functions:
//  - the CPU model (model/gpt.cc: Gpt::BlockOps, fp32 kernels/),
//  - the CUDA model (model/gpt_cuda.cc: GptCuda::BlockOps, bf16
//    activations, kernels/cuda),
//  - a tensor-parallel pipeline stage (model/gpt_stage.cc:
//    GptStage::BlockOps, Megatron's column- and row-parallel linears).
// So a new block type (a mixture-of-experts MLP, say) is written once here,
// and each backend adds only the ops it needs.
//
// A backend `Ops` provides, with its own element types (float, bf16):
//   const BlockDims& dims();
//   W w(int slot);  G g(int slot);  // the layer's parameter and gradient
//                                   // of gpt_layout::Slot `slot`
//   BlockTensors<Act, Stat, Att> acts();  // the layer's saved activations
//   Status LayerNorm(out, mean, rstd, in, w, b);            // (N,C)
//   Status Linear(out, in, w, b, in_f, out_f);   // out = in·wᵀ + b
//   Status LinearGelu(pre, post, in, w, b, in_f, out_f);  // post = GELU(pre)
//   Status LinearResidual(out, residual, in, w, b, in_f, out_f);
//                                          // out = residual + in·wᵀ + b
//   Status Attention(out, att, qkv);         // causal, saving `att`
//   Status LinearBackward(din, dw, db, dout, in, w, in_f, out_f);
//   Status LinearResidualBackward(din, dw, db, dout, in, w, in_f, out_f);
//   Status GeluBackward(din, pre, dout, n);
//   Status LayerNormBackward(din, dw, db, dout, in, w, mean, rstd);
//                                           // din += (adds to the residual)
//   Status AttentionBackward(dqkv, dout, qkv, att, out);
//   Status GradsReady(int slot);  // slot's weight and bias gradients are final
// dw and db are added to. Under tensor parallelism (dims().head_cols <
// width) Linear and LinearGelu are column-parallel and LinearResidual is
// row-parallel: LinearResidual sums the ranks' partial products and
// LinearBackward sums the ranks' input gradients; the others stay local.
#ifndef STRATA_MODEL_TRANSFORMER_BLOCK_H_
#define STRATA_MODEL_TRANSFORMER_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/status.h"
#include "model/gpt_layout.h"

namespace strata::block {

// A block's shapes as one rank computes them: `B` sequences of `T` tokens
// of width `C`; its attention heads and their `head_cols` columns of the
// attention output (3 * head_cols of QKV); its `hidden` MLP features. One
// rank holding the whole block has heads = config heads, head_cols = C,
// hidden = 4C.
struct BlockDims {
  int B = 0, T = 0, C = 0;
  int heads = 0, head_cols = 0, hidden = 0;
  int N() const { return B * T; }
};

// What a block's forward saves for its backward, by pointer into the
// backend's buffers. Act: the activations' type; Stat: LayerNorm's means
// and reciprocal deviations; Att: what attention saves.
template <typename Act, typename Stat, typename Att>
struct BlockTensors {
  Act* ln1 = nullptr;  // (N,C)
  Stat* ln1_mean = nullptr;
  Stat* ln1_rstd = nullptr;  // (N)
  Act* qkv = nullptr;        // (N,3*head_cols)
  Att* att = nullptr;        // the backend's attention state
  Act* atty = nullptr;       // (N,head_cols) attention output
  Act* res2 = nullptr;       // (N,C) input + attention branch
  Act* ln2 = nullptr;        // (N,C)
  Stat* ln2_mean = nullptr;
  Stat* ln2_rstd = nullptr;                 // (N)
  Act *fch = nullptr, *fch_gelu = nullptr;  // (N,hidden)
};

// The backward pass's scratch: each (N,C) but dqkv (N,3*head_cols), dfch
// (N,hidden) and datty (N,head_cols), which may be dln (it is read before
// dln is written again).
template <typename Act>
struct BlockGrads {
  Act* dres = nullptr;  // in: dL/d(block output); out: dL/d(block input)
  Act* dln = nullptr;
  Act* dfch = nullptr;
  Act* dqkv = nullptr;
  Act* datty = nullptr;
};

// The attention half of a block and the second LayerNorm: a.res2 = x +
// attention(LN1(x)), a.ln2 = LN2(a.res2). x is (N,C).
template <typename Ops, typename Act>
absl::Status AttentionHalfForward(Ops& ops, const Act* x) {
  using namespace gpt_layout;  // NOLINT: the slot names
  const BlockDims& d = ops.dims();
  const int C = d.C, Cl = d.head_cols;
  const auto a = ops.acts();
  STRATA_RETURN_IF_ERROR(ops.LayerNorm(a.ln1, a.ln1_mean, a.ln1_rstd, x,
                                       ops.w(kLn1W), ops.w(kLn1B)));
  STRATA_RETURN_IF_ERROR(
      ops.Linear(a.qkv, a.ln1, ops.w(kQkvW), ops.w(kQkvB), C, 3 * Cl));
  STRATA_RETURN_IF_ERROR(ops.Attention(a.atty, a.att, a.qkv));
  STRATA_RETURN_IF_ERROR(ops.LinearResidual(
      a.res2, x, a.atty, ops.w(kAttnProjW), ops.w(kAttnProjB), Cl, C));
  return ops.LayerNorm(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, ops.w(kLn2W),
                       ops.w(kLn2B));
}

// y = block(x): x and y are (N,C). Errors: the backend's.
template <typename Ops, typename Act>
absl::Status Forward(Ops& ops, const Act* x, Act* y) {
  using namespace gpt_layout;  // NOLINT: the slot names
  const BlockDims& d = ops.dims();
  const int C = d.C, H = d.hidden;
  const auto a = ops.acts();
  STRATA_RETURN_IF_ERROR(AttentionHalfForward(ops, x));
  STRATA_RETURN_IF_ERROR(
      ops.LinearGelu(a.fch, a.fch_gelu, a.ln2, ops.w(kFcW), ops.w(kFcB), C, H));
  return ops.LinearResidual(y, a.res2, a.fch_gelu, ops.w(kFcProjW),
                            ops.w(kFcProjB), H, C);
}

// An MoE block (model/moe_layer.h): y = res2 + MoE(LN2(res2)), for a
// backend that provides
//   Status Moe(out, residual, in);          // out = residual + MoE(in)
//   Status MoeBackward(din, dout, in);      // din = dL/din; adds the
//                                           // router's and experts' grads
template <typename Ops, typename Act>
absl::Status MoeForward(Ops& ops, const Act* x, Act* y) {
  const auto a = ops.acts();
  STRATA_RETURN_IF_ERROR(AttentionHalfForward(ops, x));
  return ops.Moe(y, a.res2, a.ln2);
}

// The backward of AttentionHalfForward, from g.dln = dL/d(ln2) and g.dres
// = dL/d(res2) through the residual: adds the half's gradients and turns
// g.dres into dL/dx.
template <typename Ops, typename Act>
absl::Status AttentionHalfBackward(Ops& ops, const Act* x,
                                   const BlockGrads<Act>& g) {
  using namespace gpt_layout;  // NOLINT: the slot names
  const BlockDims& d = ops.dims();
  const int C = d.C, Cl = d.head_cols;
  const auto a = ops.acts();
  STRATA_RETURN_IF_ERROR(
      ops.LayerNormBackward(g.dres, ops.g(kLn2W), ops.g(kLn2B), g.dln, a.res2,
                            ops.w(kLn2W), a.ln2_mean, a.ln2_rstd));
  STRATA_RETURN_IF_ERROR(ops.GradsReady(kLn2W));
  // Attention branch; dres is now dL/dres2.
  STRATA_RETURN_IF_ERROR(
      ops.LinearResidualBackward(g.datty, ops.g(kAttnProjW), ops.g(kAttnProjB),
                                 g.dres, a.atty, ops.w(kAttnProjW), Cl, C));
  STRATA_RETURN_IF_ERROR(ops.GradsReady(kAttnProjW));
  STRATA_RETURN_IF_ERROR(
      ops.AttentionBackward(g.dqkv, g.datty, a.qkv, a.att, a.atty));
  STRATA_RETURN_IF_ERROR(ops.LinearBackward(g.dln, ops.g(kQkvW), ops.g(kQkvB),
                                            g.dqkv, a.ln1, ops.w(kQkvW), C,
                                            3 * Cl));
  STRATA_RETURN_IF_ERROR(ops.GradsReady(kQkvW));
  STRATA_RETURN_IF_ERROR(
      ops.LayerNormBackward(g.dres, ops.g(kLn1W), ops.g(kLn1B), g.dln, x,
                            ops.w(kLn1W), a.ln1_mean, a.ln1_rstd));
  return ops.GradsReady(kLn1W);
}

// The block's backward from the activations Forward(x) saved: adds into
// the layer's gradients (reporting each weight and bias pair final as soon
// as it is) and turns g.dres from dL/d(output) into dL/d(x).
template <typename Ops, typename Act>
absl::Status Backward(Ops& ops, const Act* x, const BlockGrads<Act>& g) {
  using namespace gpt_layout;  // NOLINT: the slot names
  const BlockDims& d = ops.dims();
  const int C = d.C, H = d.hidden;
  const auto a = ops.acts();
  // MLP branch.
  STRATA_RETURN_IF_ERROR(
      ops.LinearResidualBackward(g.dfch, ops.g(kFcProjW), ops.g(kFcProjB),
                                 g.dres, a.fch_gelu, ops.w(kFcProjW), H, C));
  STRATA_RETURN_IF_ERROR(ops.GradsReady(kFcProjW));
  STRATA_RETURN_IF_ERROR(
      ops.GeluBackward(g.dfch, a.fch, g.dfch, int64_t{d.N()} * H));
  STRATA_RETURN_IF_ERROR(ops.LinearBackward(g.dln, ops.g(kFcW), ops.g(kFcB),
                                            g.dfch, a.ln2, ops.w(kFcW), C, H));
  STRATA_RETURN_IF_ERROR(ops.GradsReady(kFcW));
  return AttentionHalfBackward(ops, x, g);
}

// MoeForward's backward: the MoE layer's (adding its gradients and
// reporting them ready itself), then the attention half's.
template <typename Ops, typename Act>
absl::Status MoeBackward(Ops& ops, const Act* x, const BlockGrads<Act>& g) {
  const auto a = ops.acts();
  STRATA_RETURN_IF_ERROR(ops.MoeBackward(g.dln, g.dres, a.ln2));
  return AttentionHalfBackward(ops, x, g);
}

}  // namespace strata::block

#endif  // STRATA_MODEL_TRANSFORMER_BLOCK_H_
