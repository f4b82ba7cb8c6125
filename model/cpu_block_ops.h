// The CPU backend of the transformer block (model/transformer_block.h):
// fp32 kernels/, one layer at a time. Alone, the residual adds are fused
// into the projections (MatmulForward's accumulate); over a tensor-parallel
// group (`tp`), the linears are Megatron's column- and row-parallel ones
// (model_parallel/tensor_parallel.h), with the group's all-reduces.
#ifndef STRATA_MODEL_CPU_BLOCK_OPS_H_
#define STRATA_MODEL_CPU_BLOCK_OPS_H_

#include <array>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "collective/communicator.h"
#include "model/gpt_layout.h"
#include "model/moe_layer.h"
#include "model/transformer_block.h"

namespace strata {

// One layer's block on the CPU. Fill the fields, then run block::Forward or
// block::Backward over it; every pointer must stay valid meanwhile.
struct CpuBlockOps {
  block::BlockDims d;
  // The layer's parameters and gradients, by gpt_layout::Slot.
  std::array<const float*, gpt_layout::kSlotsPerLayer> weights{};
  std::array<float*, gpt_layout::kSlotsPerLayer> grads{};
  block::BlockTensors<float, float, float> saved;
  float* datt = nullptr;  // attention backward's scratch, as `saved.att`
  // The stage's tensor-parallel group, or null for a whole block; with
  // it, `partial` is (N,C) scratch for the row-parallel sums.
  Communicator* tp = nullptr;
  float* partial = nullptr;
  // Told when a slot's weight and bias gradients are final (may be unset).
  std::function<void(int slot)> on_grads_ready;
  // An MoE block (block::MoeForward): its layer and tensors, and what is
  // told once the router's and every expert's gradients are final (the
  // MLP slots' weights and grads are then unused).
  MoeLayer* moe = nullptr;
  MoeWeights moe_w;
  MoeGrads moe_g;
  float moe_daux = 1.0f;  // dL/d(aux): the layer's weight in the loss
  std::function<void()> on_moe_grads_ready;
  // Called by Moe between routing and the experts (may be unset): an
  // error stops the forward. The experts the routing reached have their
  // weights read after it returns, and only those.
  std::function<absl::Status(const MoeRouting&)> on_routed;

  const block::BlockDims& dims() const { return d; }
  const float* w(int slot) const { return weights[slot]; }
  float* g(int slot) const { return grads[slot]; }
  block::BlockTensors<float, float, float> acts() const { return saved; }

  absl::Status LayerNorm(float* out, float* mean, float* rstd, const float* in,
                         const float* w, const float* b);
  absl::Status Linear(float* out, const float* in, const float* w,
                      const float* b, int in_f, int out_f);
  absl::Status LinearGelu(float* pre, float* post, const float* in,
                          const float* w, const float* b, int in_f, int out_f);
  absl::Status LinearResidual(float* out, const float* residual,
                              const float* in, const float* w, const float* b,
                              int in_f, int out_f);
  absl::Status Attention(float* out, float* att, const float* qkv);
  absl::Status LinearBackward(float* din, float* dw, float* db,
                              const float* dout, const float* in,
                              const float* w, int in_f, int out_f);
  absl::Status LinearResidualBackward(float* din, float* dw, float* db,
                                      const float* dout, const float* in,
                                      const float* w, int in_f, int out_f);
  absl::Status GeluBackward(float* din, const float* pre, const float* dout,
                            int64_t n);
  absl::Status LayerNormBackward(float* din, float* dw, float* db,
                                 const float* dout, const float* in,
                                 const float* w, const float* mean,
                                 const float* rstd);
  absl::Status AttentionBackward(float* dqkv, const float* dout,
                                 const float* qkv, const float* att,
                                 const float* out);
  absl::Status GradsReady(int slot);
  // out = residual + MoE(in); din = dL/din for dL/d(out) = dout, the
  // load-balancing loss's gradient included (dL/d(aux) = 1: the training
  // objective is the mean cross-entropy plus each layer's aux loss).
  absl::Status Moe(float* out, const float* residual, const float* in);
  absl::Status MoeBackward(float* din, const float* dout, const float* in);
};

}  // namespace strata

#endif  // STRATA_MODEL_CPU_BLOCK_OPS_H_
