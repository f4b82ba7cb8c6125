// A mixture-of-experts feed-forward layer on the CPU (fp32): a router,
// top-1 (Switch) or top-2 (GShard) gating with a capacity per expert, E
// expert GELU MLPs of `hidden` features, and the combine; forward and
// backward, with Switch's load-balancing loss. The CPU GPT's MoE blocks
// run it (block::MoeForward through CpuBlockOps::Moe). Its routing (the
// softmax, choices, capacity, the aux loss and their gradients) is
// MoeRouter's (model/moe_router.h), which the CUDA model shares.
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
//
// Expert parallelism (`--ep`, model/gpt_expert_parallel.h): a layer
// created over a group of P ranks is one rank's share. Each rank routes
// its own tokens (capacity counts its own, as it does per worker), and
// runs only the experts it owns (model/moe_exchange.h) over every rank's
// tokens routed to them: the rows go to the owner and back by all-to-all
// in Combine and Backward. f_i and P_i, and so aux, are over the whole
// group's tokens (an all-reduce in Route), and the aux gradient each rank
// adds is its tokens' share of that one loss: α·E·f_i / N_group a token.
// Only the owned experts' gradients are written. Every call that
// communicates must be made on every rank, in the same order.
#ifndef STRATA_MODEL_MOE_LAYER_H_
#define STRATA_MODEL_MOE_LAYER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/communicator.h"
#include "model/moe_exchange.h"
#include "model/moe_router.h"

namespace strata {

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

class MoeLayer {
 public:
  // INVALID_ARGUMENT for bad dims (ValidateMoeDims), or for a group that
  // does not divide the experts. `group` (null: every expert here) must
  // outlive the layer.
  static absl::StatusOr<MoeLayer> Create(const MoeDims& dims,
                                         Communicator* group = nullptr);

  const MoeDims& dims() const { return d_; }

  // out (N,C) = the layer of x (N,C); keeps what the backward needs.
  // INVALID_ARGUMENT for router logits that are not finite, or for w
  // without one pointer of each kind per expert (in a group, the experts
  // this rank does not own may be null); a group's errors.
  absl::Status Forward(const MoeWeights& w, const float* x, float* out);
  // Forward in two halves: Route runs the router and routes (routing()
  // says then which experts the tokens reached; the experts' weights are
  // not read), Combine runs the experts that have tokens and combines
  // their outputs into out. Combine REQUIRES: Route succeeded for x.
  absl::Status Route(const MoeWeights& w, const float* x);
  absl::Status Combine(const MoeWeights& w, const float* x, float* out);
  // From the last Forward's x: adds to g, and writes dx (N,C) = dL/dx for
  // dL/d(out) = dout (N,C) and dL/d(aux) = daux. Errors: the group's.
  absl::Status Backward(const MoeWeights& w, const float* x, const float* dout,
                        float daux, const MoeGrads& g, float* dx);

  const MoeRouting& routing() const { return router_.routing(); }

 private:
  // One expert's rows and what its MLP keeps of them: in (n,C), pre and
  // post (n,hidden), y (n,C); for the backward dy (n,C), dpost (n,hidden)
  // and din (n,C).
  struct Rows {
    int n = 0;
    float *in, *pre, *post, *y, *dy, *dpost, *din;
  };
  explicit MoeLayer(const MoeDims& d) : d_(d), router_(d) {}
  // Expert e's slots in the local buffers; its rows in the owned ones.
  Rows LocalRows(int e);
  Rows OwnedRows(int e);
  // Copies expert e's tokens' rows of x into its slots of in_.
  void GatherInputs(const float* x, int e);
  void RunExperts(const MoeWeights& w, const float* x);
  absl::Status RunOwnedExperts(const MoeWeights& w, const float* x);
  void RunExpert(const MoeWeights& w, int e, const Rows& rows);
  absl::Status BackwardExperts(const MoeWeights& w, const MoeGrads& g);
  void BackwardExpert(const MoeWeights& w, const MoeGrads& g, int e,
                      const Rows& rows);

  MoeDims d_;
  MoeRouter router_;
  // With a group: the rows to and from the experts' owners.
  std::optional<ExpertExchange> ex_;
  // Owned experts' rows over the group, laid out as Rows (ExpertExchange's
  // owned layout).
  std::vector<float> o_in_, o_pre_, o_post_, o_y_, o_dy_, o_dpost_, o_din_;
  // Per expert, in slot order (capacity rows each), this rank's tokens
  // routed to it (in a group, whoever owns it): its tokens' inputs
  // (cap,C), fc's output before and after GELU (cap,hidden), its output
  // (cap,C); for the backward, dL/d(output), dL/d(GELU output) and
  // dL/d(input) of each slot. Sized once: steps allocate nothing.
  std::vector<float> in_, pre_, post_, y_, dy_, dpost_, din_;
  std::vector<float> dgate_;   // (N,top_k)
  std::vector<float> dlogit_;  // (N,E)
};

}  // namespace strata

#endif  // STRATA_MODEL_MOE_LAYER_H_
