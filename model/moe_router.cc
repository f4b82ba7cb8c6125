#include "model/moe_router.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

int MoeDims::Capacity() const {
  const double slots =
      std::ceil(double{capacity_factor} * top_k * N / std::max(experts, 1));
  // An expert gets at most one assignment a token (top-2's are distinct).
  return static_cast<int>(std::clamp(slots, 1.0, static_cast<double>(N)));
}

absl::Status ValidateMoeDims(const MoeDims& d) {
  if (d.N <= 0 || d.C <= 0 || d.hidden <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE layer: tokens, width and hidden must be > 0, not ",
                     d.N, ", ", d.C, ", ", d.hidden));
  }
  if (d.top_k != 1 && d.top_k != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE layer: top_k is 1 or 2, not ", d.top_k));
  }
  if (d.experts < d.top_k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoE layer: ", d.experts, " experts cannot take top-", d.top_k));
  }
  if (!(d.capacity_factor > 0) || !std::isfinite(d.capacity_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoE layer: the capacity factor must be > 0, not ", d.capacity_factor));
  }
  if (!(d.aux_alpha >= 0) || !std::isfinite(d.aux_alpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoE layer: the auxiliary loss weight must be >= 0, not ",
                     d.aux_alpha));
  }
  return absl::OkStatus();
}

MoeRouter::MoeRouter(const MoeDims& dims) : d_(dims), n_total_(dims.N) {
  r_.probs.resize(size_t{1} * dims.N * dims.experts);
  r_.tokens.resize(dims.experts);
  for (std::vector<int>& t : r_.tokens) t.reserve(dims.Capacity());
}

namespace {

// The index of the largest p[0, n) other than `skip` (the lower first
// among equals).
int ArgMax(const float* p, int n, int skip) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (i != skip && (best < 0 || p[i] > p[best])) best = i;
  }
  return best;
}

}  // namespace

void MoeRouter::Assign() {
  const int N = d_.N, E = d_.experts, K = d_.top_k, cap = d_.Capacity();
  MoeRouting& r = r_;
  r.expert.assign(size_t{1} * N * K, -1);
  r.gate.assign(size_t{1} * N * K, 0.0f);
  r.slot.assign(size_t{1} * N * K, -1);
  r.load.assign(E, 0);
  for (std::vector<int>& t : r.tokens) t.clear();
  r.dropped = 0;
  for (int t = 0; t < N; ++t) {
    const float* p = &r.probs[size_t{1} * t * E];
    int* e = &r.expert[size_t{1} * t * K];
    float* g = &r.gate[size_t{1} * t * K];
    e[0] = ArgMax(p, E, -1);
    if (K == 1) {
      g[0] = p[e[0]];
    } else {
      e[1] = ArgMax(p, E, e[0]);
      const float sum = p[e[0]] + p[e[1]];
      g[0] = p[e[0]] / sum;
      g[1] = p[e[1]] / sum;
    }
  }
  // Every first choice, in token order, before any second one.
  for (int k = 0; k < K; ++k) {
    for (int t = 0; t < N; ++t) {
      const size_t a = size_t{1} * t * K + k;
      const int e = r.expert[a];
      if (r.load[e] < cap) {
        r.slot[a] = r.load[e]++;
        r.tokens[e].push_back(t);
      } else {
        ++r.dropped;
      }
    }
  }
}

absl::Status MoeRouter::ShareStats(Communicator* group) {
  const int N = d_.N, E = d_.experts, K = d_.top_k;
  // Per expert: first choices, then summed probabilities; then tokens.
  std::vector<double> sums(2 * E + 1, 0.0);
  for (int t = 0; t < N; ++t) {
    sums[r_.expert[size_t{1} * t * K]] += 1;
    const float* p = &r_.probs[size_t{1} * t * E];
    for (int i = 0; i < E; ++i) sums[E + i] += p[i];
  }
  sums[2 * E] = N;
  if (group != nullptr) {
    // Counts are exact in fp32 (up to 2^24 tokens a worker); the
    // probability sums lose digits past 1e-7.
    std::vector<float> shared(sums.begin(), sums.end());
    STRATA_RETURN_IF_ERROR(
        group->AllReduce(absl::MakeSpan(shared), ReduceOp::kSum));
    sums.assign(shared.begin(), shared.end());
  }
  n_total_ = static_cast<int64_t>(std::llround(sums[2 * E]));
  r_.first.resize(E);
  r_.mean_p.resize(E);
  double aux = 0;
  for (int i = 0; i < E; ++i) {
    r_.first[i] = static_cast<float>(sums[i] / n_total_);
    r_.mean_p[i] = static_cast<float>(sums[E + i] / n_total_);
    aux += double{r_.first[i]} * r_.mean_p[i];
  }
  r_.aux_loss = double{d_.aux_alpha} * E * aux;
  return absl::OkStatus();
}

absl::Status MoeRouter::Route(Communicator* group) {
  const int N = d_.N, E = d_.experts;
  for (int t = 0; t < N; ++t) {
    float* p = &r_.probs[size_t{1} * t * E];
    const float top = *std::max_element(p, p + E);
    double sum = 0;
    for (int i = 0; i < E; ++i) sum += p[i] = std::exp(p[i] - top);
    // A NaN anywhere in the row, or an infinite logit, makes the sum NaN.
    if (!std::isfinite(top) || !std::isfinite(sum)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoE layer: token ", t, "'s router logits are not finite"));
    }
    for (int i = 0; i < E; ++i) p[i] = static_cast<float>(p[i] / sum);
  }
  Assign();
  return ShareStats(group);
}

// dL/dp through the gates, then the auxiliary loss (f is constant), then
// the softmax.
void MoeRouter::LogitGradient(const float* dgate, float daux,
                              float* dlogit) const {
  const int N = d_.N, E = d_.experts, K = d_.top_k;
  std::fill(dlogit, dlogit + size_t{1} * N * E, 0.0f);
  for (int t = 0; t < N; ++t) {
    const float* p = &r_.probs[size_t{1} * t * E];
    const int* e = &r_.expert[size_t{1} * t * K];
    const float* dg = dgate + size_t{1} * t * K;
    float* dp = dlogit + size_t{1} * t * E;
    if (K == 1) {
      dp[e[0]] += dg[0];
    } else {
      const double p1 = p[e[0]], p2 = p[e[1]], s2 = (p1 + p2) * (p1 + p2);
      dp[e[0]] += static_cast<float>(p2 * (dg[0] - dg[1]) / s2);
      dp[e[1]] += static_cast<float>(p1 * (dg[1] - dg[0]) / s2);
    }
    double dot = 0;
    for (int i = 0; i < E; ++i) {
      dp[i] += daux * d_.aux_alpha * E * r_.first[i] / n_total_;
      dot += double{p[i]} * dp[i];
    }
    // Softmax: dlogit = p (dp - p·dp), in place.
    for (int i = 0; i < E; ++i) {
      dp[i] = static_cast<float>(p[i] * (dp[i] - dot));
    }
  }
}

}  // namespace strata
