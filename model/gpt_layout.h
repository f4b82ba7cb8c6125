// The order of a GPT's parameters, shared by every implementation (the CPU
// Gpt and GptCuda): params() lists wte, wpe, then each block's parameters
// in the Slot order below (an MoE block's as below it), then the final
// layernorm. The servers' chunks,
// the grad-ready order and snapshots all follow it.
#ifndef STRATA_MODEL_GPT_LAYOUT_H_
#define STRATA_MODEL_GPT_LAYOUT_H_

#include <cstdint>

namespace strata::gpt_layout {

// Parameters of one block, in forward order.
enum Slot {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kAttnProjW,
  kAttnProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFcProjW,
  kFcProjB,
  kSlotsPerLayer
};
// An MoE block (GptConfig::IsMoeLayer) has slots kLn1W..kLn2B, then its
// router (E,C) in slot kMoeRouter, then each expert's fc.weight, fc.bias,
// proj.weight and proj.bias (kParamsPerExpert, in the dense MLP's order).
inline constexpr int kMoeRouter = kFcW;
inline constexpr int kParamsPerExpert = 4;
inline constexpr int ParamsInLayer(bool moe, int experts) {
  return moe ? kMoeRouter + 1 + kParamsPerExpert * experts : kSlotsPerLayer;
}
inline constexpr int kWte = 0;
inline constexpr int kWpe = 1;
inline constexpr int kFirstBlockParam = 2;

// The CPU LM head computes logits for at most this many floats of positions
// at a time, so (B*T, vocab) logits are never held at once.
inline constexpr int64_t kHeadChunkFloats = int64_t{1} << 24;

// GptCuda keeps the embedding / LM-head matrix on the device with its rows
// padded to a multiple of this (50257 -> 50304, as llm.c), so every GEMM
// dimension and leading dimension of the head is a multiple of 128 and
// cuBLAS runs its Hopper kernels (an odd vocabulary made it fall back to
// 1-element-aligned Turing kernels: 40% of a 124M step on an H100). The
// padded rows are zero, their logits are masked out of the softmax, and
// their gradients are zero; the servers and the host keep (vocab, C).
inline constexpr int kVocabAlign = 128;
inline constexpr int PaddedVocab(int vocab) {
  return (vocab + kVocabAlign - 1) / kVocabAlign * kVocabAlign;
}

}  // namespace strata::gpt_layout

#endif  // STRATA_MODEL_GPT_LAYOUT_H_
