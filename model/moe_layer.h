// A mixture-of-experts feed-forward layer on the CPU (fp32): a router,
// top-1 (Switch) or top-2 (GShard) gating with a capacity per expert, E
// expert GELU MLPs of `hidden` features, and the combine; forward and
// backward, with Switch's load-balancing loss. It is the MoE layer's math,
// written once; the CPU GPT's MoE blocks run it (block::MoeForward through
// CpuBlockOps::Moe).
//
// For N tokens x (N,C):
//   p = softmax(x · Wrᵀ)                       (N,E), Wr (E,C), no bias
//   top-1: e1 = argmax p,  g1 = p[e1]          (Switch: not renormalized)
//   top-2: e1, e2 the two largest (the lower index first among equals),
//          g_k = p[e_k] / (p[e1] + p[e2])     (GShard: renormalized)
//   capacity = ceil(capacity_factor · top_k · N / E) tokens an expert, in
//   [1, N]; slots are taken first by every token's first choice in token
//   order, then by second choices. An assignment past its expert's
//   capacity is dropped: it adds nothing to the output (the token goes on
//   through the block's residual), and top-2 weights are renormalized
//   before drops, so a token whose second choice was dropped keeps g1 < 1.
//   With drops, a token's output depends on the other tokens of the batch,
//   later positions included (their first choices come before its second).
//   out[t] = Σ_k g_k · Expert_{e_k}(x[t]) over its kept assignments, with
//   Expert_e(x) = W2_e · GELU(W1_e · x + b1_e) + b2_e.
//   aux = α · E · Σ_i f_i · P_i, f_i the fraction of tokens whose *first*
//   choice is i (before drops; no gradient, as in Switch), P_i the mean of
//   p[:, i] over the tokens.
// The backward takes dL/d(out) and dL/d(aux) and adds the gradients of
// the router's and every expert's weights, and dL/dx.
#ifndef STRATA_MODEL_MOE_LAYER_H_
#define STRATA_MODEL_MOE_LAYER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

struct MoeDims {
  int N = 0;       // tokens
  int C = 0;       // width
  int hidden = 0;  // each expert's MLP features (GptConfig::ExpertHidden)
  int experts = 0;
  int top_k = 1;  // 1 or 2
  float capacity_factor = 1.25f;
  float aux_alpha = 0.01f;
  // Slots per expert.
  int Capacity() const;
};

// INVALID_ARGUMENT unless N, C, hidden > 0, experts >= top_k, top_k is 1
// or 2, capacity_factor > 0 and aux_alpha >= 0 (both finite).
absl::Status ValidateMoeDims(const MoeDims& d);

// The layer's weights, row-major: the router (E,C); expert e's fc_w[e]
// (hidden,C), fc_b[e] (hidden), proj_w[e] (C,hidden), proj_b[e] (C): each
// expert's are tensors of their own, E pointers each.
template <typename F>
struct MoeTensors {
  F* router = nullptr;
  std::vector<F*> fc_w, fc_b, proj_w, proj_b;
};
using MoeWeights = MoeTensors<const float>;
// Their gradients, laid out the same; the backward adds to them.
using MoeGrads = MoeTensors<float>;

// What a forward routed, for its backward and for the logs.
struct MoeRouting {
  std::vector<float> probs;   // (N,E)
  std::vector<int> expert;    // (N,top_k): choice k of token t
  std::vector<float> gate;    // (N,top_k): its weight (before drops)
  std::vector<int> slot;      // (N,top_k): its place in the expert, -1 dropped
  std::vector<int> load;      // (E): assignments kept
  std::vector<float> first;   // (E): f_i
  std::vector<float> mean_p;  // (E): P_i
  int64_t dropped = 0;        // assignments dropped
  double aux_loss = 0;
  // Per expert, the tokens in its slots, in slot order.
  std::vector<std::vector<int>> tokens;
};

class MoeLayer {
 public:
  static absl::StatusOr<MoeLayer> Create(const MoeDims& dims);

  const MoeDims& dims() const { return d_; }

  // out (N,C) = the layer of x (N,C); keeps what the backward needs.
  // INVALID_ARGUMENT for router logits that are not finite, or for w
  // without one pointer of each kind per expert.
  absl::Status Forward(const MoeWeights& w, const float* x, float* out);
  // Forward in two halves: Route runs the router and routes (routing()
  // says then which experts the tokens reached; the experts' weights are
  // not read), Combine runs the experts that have tokens and combines
  // their outputs into out. Combine REQUIRES: Route succeeded for x.
  absl::Status Route(const MoeWeights& w, const float* x);
  void Combine(const MoeWeights& w, const float* x, float* out);
  // From the last Forward's x: adds to g, and writes dx (N,C) = dL/dx for
  // dL/d(out) = dout (N,C) and dL/d(aux) = daux.
  void Backward(const MoeWeights& w, const float* x, const float* dout,
                float daux, const MoeGrads& g, float* dx);

  const MoeRouting& routing() const { return r_; }

 private:
  explicit MoeLayer(const MoeDims& d) : d_(d) {}
  void Assign();
  void RunExperts(const MoeWeights& w, const float* x);
  void RunExpert(const MoeWeights& w, const float* x, int e);
  void BackwardExpert(const MoeWeights& w, const MoeGrads& g, int e);

  MoeDims d_;
  MoeRouting r_;
  // Per expert, in slot order (capacity rows each): its tokens' inputs
  // (cap,C), fc's output before and after GELU (cap,hidden), its output
  // (cap,C); for the backward, dL/d(output), dL/d(GELU output) and
  // dL/d(input) of each slot. Sized once: steps allocate nothing.
  std::vector<float> in_, pre_, post_, y_, dy_, dpost_, din_;
  std::vector<float> dgate_;   // (N,top_k)
  std::vector<float> dlogit_;  // (N,E)
};

}  // namespace strata

#endif  // STRATA_MODEL_MOE_LAYER_H_
