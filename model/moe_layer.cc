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

absl::StatusOr<MoeLayer> MoeLayer::Create(const MoeDims& dims,
                                          Communicator* group) {
  STRATA_RETURN_IF_ERROR(ValidateMoeDims(dims));
  MoeLayer layer(dims);
  layer.n_total_ = dims.N;
  if (group != nullptr) {
    STRATA_ASSIGN_OR_RETURN(
        layer.ex_, ExpertExchange::Create(group, dims.experts, dims.C));
  }
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

absl::Status MoeLayer::ShareStats() {
  const int N = d_.N, E = d_.experts, K = d_.top_k;
  // Per expert: first choices, then summed probabilities; then tokens.
  std::vector<double> sums(2 * E + 1, 0.0);
  for (int t = 0; t < N; ++t) {
    sums[r_.expert[size_t{1} * t * K]] += 1;
    const float* p = &r_.probs[size_t{1} * t * E];
    for (int i = 0; i < E; ++i) sums[E + i] += p[i];
  }
  sums[2 * E] = N;
  if (ex_.has_value()) {
    // Counts are exact in fp32 (up to 2^24 tokens a worker); the
    // probability sums lose digits past 1e-7.
    std::vector<float> shared(sums.begin(), sums.end());
    STRATA_RETURN_IF_ERROR(
        ex_->group().AllReduce(absl::MakeSpan(shared), ReduceOp::kSum));
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

MoeLayer::Rows MoeLayer::LocalRows(int e) {
  const size_t c = size_t{1} * e * d_.Capacity() * d_.C;
  const size_t h = size_t{1} * e * d_.Capacity() * d_.hidden;
  return {r_.load[e], &in_[c], &pre_[h],   &post_[h],
          &y_[c],     &dy_[c], &dpost_[h], &din_[c]};
}

MoeLayer::Rows MoeLayer::OwnedRows(int e) {
  const size_t c = ex_->OwnedOffset(e) * d_.C;
  const size_t h = ex_->OwnedOffset(e) * d_.hidden;
  return {ex_->OwnedRows(e),   o_in_.data() + c, o_pre_.data() + h,
          o_post_.data() + h,  o_y_.data() + c,  o_dy_.data() + c,
          o_dpost_.data() + h, o_din_.data() + c};
}

void MoeLayer::GatherInputs(const float* x, int e) {
  const Rows rows = LocalRows(e);
  for (int s = 0; s < rows.n; ++s) {
    std::memcpy(rows.in + size_t{1} * s * d_.C,
                x + size_t{1} * r_.tokens[e][s] * d_.C, sizeof(float) * d_.C);
  }
}

// One expert a chunk, its GEMMs on that thread alone (they run inline in
// ParallelFor): an expert's GEMMs are small, and splitting each of them
// over the pool cost more in waits than it gained (the layer ran at 0.5x
// the dense MLP at C128, 512 tokens).
void MoeLayer::RunExperts(const MoeWeights& w, const float* x) {
  ParallelFor(d_.experts, 1, [&](int, int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      GatherInputs(x, static_cast<int>(e));
      RunExpert(w, static_cast<int>(e), LocalRows(static_cast<int>(e)));
    }
  });
}

// Every expert's inputs to its owner, the owned experts over them, and
// their outputs back into this rank's slots.
absl::Status MoeLayer::RunOwnedExperts(const MoeWeights& w, const float* x) {
  for (int e = 0; e < d_.experts; ++e) GatherInputs(x, e);
  STRATA_RETURN_IF_ERROR(ex_->Dispatch(in_.data(), d_.Capacity(), &o_in_));
  // Sized for the backward too: OwnedRows points into all of them.
  const size_t rows = ex_->OwnedTotal();
  for (auto* v : {&o_y_, &o_dy_, &o_din_}) v->resize(rows * d_.C);
  for (auto* v : {&o_pre_, &o_post_, &o_dpost_}) v->resize(rows * d_.hidden);
  const int first = ex_->first_owned();
  ParallelFor(ex_->owned(), 1, [&](int, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int e = first + static_cast<int>(k);
      RunExpert(w, e, OwnedRows(e));
    }
  });
  return ex_->Return(o_y_.data(), d_.Capacity(), y_.data());
}

void MoeLayer::RunExpert(const MoeWeights& w, int e, const Rows& r) {
  const int C = d_.C, H = d_.hidden;
  if (r.n == 0) return;
  kernels::MatmulForward(r.pre, r.in, w.fc_w[e], w.fc_b[e], r.n, C, H);
  kernels::GeluForward(r.post, r.pre, int64_t{r.n} * H);
  kernels::MatmulForward(r.y, r.post, w.proj_w[e], w.proj_b[e], r.n, H, C);
}

absl::Status MoeLayer::Forward(const MoeWeights& w, const float* x,
                               float* out) {
  STRATA_RETURN_IF_ERROR(Route(w, x));
  return Combine(w, x, out);
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
  STRATA_RETURN_IF_ERROR(ShareStats());
  return ex_.has_value() ? ex_->ShareLoads(r_.load) : absl::OkStatus();
}

absl::Status MoeLayer::Combine(const MoeWeights& w, const float* x,
                               float* out) {
  const int N = d_.N, C = d_.C, K = d_.top_k;
  const int cap = d_.Capacity();
  if (ex_.has_value()) {
    STRATA_RETURN_IF_ERROR(RunOwnedExperts(w, x));
  } else {
    RunExperts(w, x);
  }
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
  return absl::OkStatus();
}

absl::Status MoeLayer::Backward(const MoeWeights& w, const float* x,
                                const float* dout, float daux,
                                const MoeGrads& g, float* dx) {
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
      dp[i] += daux * d_.aux_alpha * E * r_.first[i] / n_total_;
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
  STRATA_RETURN_IF_ERROR(BackwardExperts(w, g));
  // Added into dx in expert order, so the sums do not depend on the
  // threads.
  for (int e = 0; e < E; ++e) {
    for (int s = 0; s < r_.load[e]; ++s) {
      float* d = dx + size_t{1} * r_.tokens[e][s] * C;
      const float* src = &din_[(size_t{1} * e * cap + s) * C];
      for (int c = 0; c < C; ++c) d[c] += src[c];
    }
  }
  return absl::OkStatus();
}

// Each expert on one thread (as in the forward), into its own rows of
// din_; in a group, the owned experts over the rows every rank sends.
absl::Status MoeLayer::BackwardExperts(const MoeWeights& w, const MoeGrads& g) {
  if (!ex_.has_value()) {
    ParallelFor(d_.experts, 1, [&](int, int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        BackwardExpert(w, g, static_cast<int>(e),
                       LocalRows(static_cast<int>(e)));
      }
    });
    return absl::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(ex_->Dispatch(dy_.data(), d_.Capacity(), &o_dy_));
  const int first = ex_->first_owned();
  ParallelFor(ex_->owned(), 1, [&](int, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int e = first + static_cast<int>(k);
      BackwardExpert(w, g, e, OwnedRows(e));
    }
  });
  return ex_->Return(o_din_.data(), d_.Capacity(), din_.data());
}

void MoeLayer::BackwardExpert(const MoeWeights& w, const MoeGrads& g, int e,
                              const Rows& r) {
  const int C = d_.C, H = d_.hidden;
  if (r.n == 0) return;
  kernels::MatmulBackward(r.dpost, g.proj_w[e], g.proj_b[e], r.dy, r.post,
                          w.proj_w[e], r.n, H, C);
  kernels::GeluBackward(r.dpost, r.pre, r.dpost, int64_t{r.n} * H);
  kernels::MatmulBackward(r.din, g.fc_w[e], g.fc_b[e], r.dpost, r.in, w.fc_w[e],
                          r.n, C, H);
}

}  // namespace strata
