#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/parallel.h"
#include "common/status.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"

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

absl::StatusOr<MoeLayer> MoeLayer::Create(const MoeDims& dims) {
  STRATA_RETURN_IF_ERROR(ValidateMoeDims(dims));
  MoeLayer layer(dims);
  const size_t rows = size_t{1} * dims.experts * dims.Capacity();
  const size_t N = dims.N, E = dims.experts, K = dims.top_k;
  for (auto* v : {&layer.in_, &layer.y_, &layer.dy_, &layer.din_}) {
    v->resize(rows * dims.C);
  }
  for (auto* v : {&layer.pre_, &layer.post_, &layer.dpost_}) {
    v->resize(rows * dims.hidden);
  }
  layer.dgate_.resize(N * K);
  layer.dlogit_.resize(N * E);
  layer.r_.probs.resize(N * E);
  layer.r_.tokens.resize(E);
  for (std::vector<int>& t : layer.r_.tokens) t.reserve(dims.Capacity());
  return layer;
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

void MoeLayer::Assign() {
  const int N = d_.N, E = d_.experts, K = d_.top_k, cap = d_.Capacity();
  MoeRouting& r = r_;
  r.expert.assign(size_t{1} * N * K, -1);
  r.gate.assign(size_t{1} * N * K, 0.0f);
  r.slot.assign(size_t{1} * N * K, -1);
  r.load.assign(E, 0);
  r.first.assign(E, 0.0f);
  r.mean_p.assign(E, 0.0f);
  for (std::vector<int>& t : r.tokens) t.clear();
  r.dropped = 0;
  std::vector<double> mean(E, 0.0);
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
    r.first[e[0]] += 1.0f / N;
    for (int i = 0; i < E; ++i) mean[i] += p[i];
  }
  double aux = 0;
  for (int i = 0; i < E; ++i) {
    r.mean_p[i] = static_cast<float>(mean[i] / N);
    aux += double{r.first[i]} * r.mean_p[i];
  }
  r.aux_loss = double{d_.aux_alpha} * E * aux;
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

// One expert a chunk, its GEMMs on that thread alone (they run inline in
// ParallelFor): an expert's GEMMs are small, and splitting each of them
// over the pool cost more in waits than it gained (the layer ran at 0.5x
// the dense MLP at C128, 512 tokens).
void MoeLayer::RunExperts(const MoeWeights& w, const float* x) {
  ParallelFor(d_.experts, 1, [&](int, int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) RunExpert(w, x, static_cast<int>(e));
  });
}

void MoeLayer::RunExpert(const MoeWeights& w, const float* x, int e) {
  const int C = d_.C, H = d_.hidden, cap = d_.Capacity();
  const int n = r_.load[e];
  if (n == 0) return;
  float* in = &in_[size_t{1} * e * cap * C];
  float* pre = &pre_[size_t{1} * e * cap * H];
  float* post = &post_[size_t{1} * e * cap * H];
  float* y = &y_[size_t{1} * e * cap * C];
  for (int s = 0; s < n; ++s) {
    std::memcpy(in + size_t{1} * s * C, x + size_t{1} * r_.tokens[e][s] * C,
                sizeof(float) * C);
  }
  kernels::MatmulForward(pre, in, w.fc_w[e], w.fc_b[e], n, C, H);
  kernels::GeluForward(post, pre, int64_t{n} * H);
  kernels::MatmulForward(y, post, w.proj_w[e], w.proj_b[e], n, H, C);
}

absl::Status MoeLayer::Forward(const MoeWeights& w, const float* x,
                               float* out) {
  STRATA_RETURN_IF_ERROR(Route(w, x));
  Combine(w, x, out);
  return absl::OkStatus();
}

absl::Status MoeLayer::Route(const MoeWeights& w, const float* x) {
  const int N = d_.N, C = d_.C, E = d_.experts;
  for (const auto* v : {&w.fc_w, &w.fc_b, &w.proj_w, &w.proj_b}) {
    if (static_cast<int>(v->size()) != E) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoE layer: ", v->size(), " experts' tensors for ", E, " experts"));
    }
  }
  kernels::MatmulForward(r_.probs.data(), x, w.router, nullptr, N, C, E);
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
  return absl::OkStatus();
}

void MoeLayer::Combine(const MoeWeights& w, const float* x, float* out) {
  const int N = d_.N, C = d_.C, K = d_.top_k;
  const int cap = d_.Capacity();
  RunExperts(w, x);
  std::fill(out, out + size_t{1} * N * C, 0.0f);
  for (int t = 0; t < N; ++t) {
    for (int k = 0; k < K; ++k) {
      const size_t a = size_t{1} * t * K + k;
      if (r_.slot[a] < 0) continue;
      const float g = r_.gate[a];
      const float* y = &y_[(size_t{1} * r_.expert[a] * cap + r_.slot[a]) * C];
      float* o = out + size_t{1} * t * C;
      for (int c = 0; c < C; ++c) o[c] += g * y[c];
    }
  }
}

void MoeLayer::Backward(const MoeWeights& w, const float* x, const float* dout,
                        float daux, const MoeGrads& g, float* dx) {
  const int N = d_.N, C = d_.C, E = d_.experts, K = d_.top_k;
  const int cap = d_.Capacity();
  // dL/d(gate) and dL/d(expert output), slot by slot.
  std::vector<float>& dgate = dgate_;
  std::vector<float>& dy = dy_;
  std::fill(dgate.begin(), dgate.end(), 0.0f);
  for (int t = 0; t < N; ++t) {
    const float* dt = dout + size_t{1} * t * C;
    for (int k = 0; k < K; ++k) {
      const size_t a = size_t{1} * t * K + k;
      if (r_.slot[a] < 0) continue;
      const size_t row = size_t{1} * r_.expert[a] * cap + r_.slot[a];
      const float* y = &y_[row * C];
      float* d = &dy[row * C];
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dot += double{dt[c]} * y[c];
        d[c] = r_.gate[a] * dt[c];
      }
      dgate[a] = static_cast<float>(dot);
    }
  }
  // dL/dp: through the gates, then the auxiliary loss (f is constant).
  std::vector<float>& dlogit = dlogit_;
  std::fill(dlogit.begin(), dlogit.end(), 0.0f);
  for (int t = 0; t < N; ++t) {
    const float* p = &r_.probs[size_t{1} * t * E];
    const int* e = &r_.expert[size_t{1} * t * K];
    const float* dg = &dgate[size_t{1} * t * K];
    float* dp = &dlogit[size_t{1} * t * E];
    if (K == 1) {
      dp[e[0]] += dg[0];
    } else {
      const double p1 = p[e[0]], p2 = p[e[1]], s2 = (p1 + p2) * (p1 + p2);
      dp[e[0]] += static_cast<float>(p2 * (dg[0] - dg[1]) / s2);
      dp[e[1]] += static_cast<float>(p1 * (dg[1] - dg[0]) / s2);
    }
    double dot = 0;
    for (int i = 0; i < E; ++i) {
      dp[i] += daux * d_.aux_alpha * E * r_.first[i] / N;
      dot += double{p[i]} * dp[i];
    }
    // Softmax: dlogit = p (dp - p·dp), in place.
    for (int i = 0; i < E; ++i) {
      dp[i] = static_cast<float>(p[i] * (dp[i] - dot));
    }
  }
  // The router writes dx; the experts add to it.
  kernels::MatmulBackward(dx, g.router, nullptr, dlogit.data(), x, w.router, N,
                          C, E);
  // Each expert on one thread (as in the forward), into its own rows of
  // din_; then added into dx in expert order, so the sums do not depend on
  // the threads.
  ParallelFor(E, 1, [&](int, int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      BackwardExpert(w, g, static_cast<int>(e));
    }
  });
  for (int e = 0; e < E; ++e) {
    for (int s = 0; s < r_.load[e]; ++s) {
      float* d = dx + size_t{1} * r_.tokens[e][s] * C;
      const float* src = &din_[(size_t{1} * e * cap + s) * C];
      for (int c = 0; c < C; ++c) d[c] += src[c];
    }
  }
}

void MoeLayer::BackwardExpert(const MoeWeights& w, const MoeGrads& g, int e) {
  const int C = d_.C, H = d_.hidden, cap = d_.Capacity();
  const int n = r_.load[e];
  if (n == 0) return;
  const size_t rc = size_t{1} * e * cap * C, rh = size_t{1} * e * cap * H;
  float* dpost = &dpost_[rh];
  kernels::MatmulBackward(dpost, g.proj_w[e], g.proj_b[e], &dy_[rc], &post_[rh],
                          w.proj_w[e], n, H, C);
  kernels::GeluBackward(dpost, &pre_[rh], dpost, int64_t{n} * H);
  kernels::MatmulBackward(&din_[rc], g.fc_w[e], g.fc_b[e], dpost, &in_[rc],
                          w.fc_w[e], n, C, H);
}

}  // namespace strata
