// The routing half of a mixture-of-experts layer (model/moe_layer.h), on
// the host, for every backend: from the router's logits to each token's
// choices, gates and slots, Switch's load-balancing statistics and loss,
// and back from the gates' gradients to the logits'. The CPU layer
// (MoeLayer) computes the logits on the CPU; the CUDA model on its device,
// copying the (N,E) logits here and the routing back. Routing is a few
// operations per token and expert against the experts' 4·C·hidden, and
// its ties, token order and capacity then have one definition.
//
// The math is MoeLayer's (see there): p = softmax(logits); top-1 or top-2
// (renormalized before drops); capacity slots taken by first choices in
// token order, then by second ones; aux = α·E·Σ f_i·P_i with f_i over
// first choices. Not thread-safe.
#ifndef STRATA_MODEL_MOE_ROUTER_H_
#define STRATA_MODEL_MOE_ROUTER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collective/communicator.h"

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

// What a forward routed, for its backward and for the logs.
struct MoeRouting {
  std::vector<float> probs;   // (N,E)
  std::vector<int> expert;    // (N,top_k): choice k of token t
  std::vector<float> gate;    // (N,top_k): its weight (before drops)
  std::vector<int> slot;      // (N,top_k): its place in the expert, -1 dropped
  std::vector<int> load;      // (E): assignments kept
  std::vector<float> first;   // (E): f_i (over the group's tokens)
  std::vector<float> mean_p;  // (E): P_i (over the group's tokens)
  int64_t dropped = 0;        // assignments dropped
  double aux_loss = 0;
  // Per expert, the tokens in its slots, in slot order.
  std::vector<std::vector<int>> tokens;
};

class MoeRouter {
 public:
  // REQUIRES: ValidateMoeDims(dims) is OK.
  explicit MoeRouter(const MoeDims& dims);

  // The (N,E) buffer the caller fills with the router's logits before
  // Route (Route turns it into the probabilities, routing().probs).
  float* logits() { return r_.probs.data(); }

  // Softmax, choices, gates and slots; then f_i, P_i and the aux loss over
  // `group`'s tokens (an all-reduce on every rank; null: these N tokens).
  // INVALID_ARGUMENT for logits that are not finite; the group's errors.
  absl::Status Route(Communicator* group);

  // dlogit (N,E) = dL/d(logits) for dgate (N,top_k) = dL/d(gates) (0 for
  // a dropped assignment) and daux = dL/d(aux). REQUIRES: Route succeeded.
  void LogitGradient(const float* dgate, float daux, float* dlogit) const;

  const MoeRouting& routing() const { return r_; }
  // The tokens the last Route's statistics are over (N without a group).
  int64_t group_tokens() const { return n_total_; }

 private:
  // Each token's choices and gates, and the slots they take.
  void Assign();
  // f_i and P_i over the group's tokens, then aux.
  absl::Status ShareStats(Communicator* group);

  MoeDims d_;
  MoeRouting r_;
  int64_t n_total_ = 0;
};

}  // namespace strata

#endif  // STRATA_MODEL_MOE_ROUTER_H_
