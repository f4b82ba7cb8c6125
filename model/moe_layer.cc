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

absl::StatusOr<MoeLayer> MoeLayer::Create(const MoeDims& dims,
                                          Communicator* group) {
  STRATA_RETURN_IF_ERROR(ValidateMoeDims(dims));
  MoeLayer layer(dims);
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
  return layer;
}

MoeLayer::Rows MoeLayer::LocalRows(int e) {
  const MoeRouting& r = routing();
  const size_t c = size_t{1} * e * d_.Capacity() * d_.C;
  const size_t h = size_t{1} * e * d_.Capacity() * d_.hidden;
  return {r.load[e], &in_[c], &pre_[h],   &post_[h],
          &y_[c],    &dy_[c], &dpost_[h], &din_[c]};
}

MoeLayer::Rows MoeLayer::OwnedRows(int e) {
  const size_t c = ex_->OwnedOffset(e) * d_.C;
  const size_t h = ex_->OwnedOffset(e) * d_.hidden;
  return {ex_->OwnedRows(e),   o_in_.data() + c, o_pre_.data() + h,
          o_post_.data() + h,  o_y_.data() + c,  o_dy_.data() + c,
          o_dpost_.data() + h, o_din_.data() + c};
}

void MoeLayer::GatherInputs(const float* x, int e) {
  const MoeRouting& r = routing();
  const Rows rows = LocalRows(e);
  for (int s = 0; s < rows.n; ++s) {
    std::memcpy(rows.in + size_t{1} * s * d_.C,
                x + size_t{1} * r.tokens[e][s] * d_.C, sizeof(float) * d_.C);
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
  kernels::MatmulForward(router_.logits(), x, w.router, nullptr, N, C, E);
  STRATA_RETURN_IF_ERROR(
      router_.Route(ex_.has_value() ? &ex_->group() : nullptr));
  return ex_.has_value() ? ex_->ShareLoads(routing().load) : absl::OkStatus();
}

absl::Status MoeLayer::Combine(const MoeWeights& w, const float* x,
                               float* out) {
  const int N = d_.N, C = d_.C, K = d_.top_k;
  const int cap = d_.Capacity();
  const MoeRouting& r = routing();
  if (ex_.has_value()) {
    STRATA_RETURN_IF_ERROR(RunOwnedExperts(w, x));
  } else {
    RunExperts(w, x);
  }
  std::fill(out, out + size_t{1} * N * C, 0.0f);
  for (int t = 0; t < N; ++t) {
    for (int k = 0; k < K; ++k) {
      const size_t a = size_t{1} * t * K + k;
      if (r.slot[a] < 0) continue;
      const float g = r.gate[a];
      const float* y = &y_[(size_t{1} * r.expert[a] * cap + r.slot[a]) * C];
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
  const MoeRouting& r = routing();
  // dL/d(gate) and dL/d(expert output), slot by slot.
  std::vector<float>& dgate = dgate_;
  std::vector<float>& dy = dy_;
  std::fill(dgate.begin(), dgate.end(), 0.0f);
  for (int t = 0; t < N; ++t) {
    const float* dt = dout + size_t{1} * t * C;
    for (int k = 0; k < K; ++k) {
      const size_t a = size_t{1} * t * K + k;
      if (r.slot[a] < 0) continue;
      const size_t row = size_t{1} * r.expert[a] * cap + r.slot[a];
      const float* y = &y_[row * C];
      float* d = &dy[row * C];
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dot += double{dt[c]} * y[c];
        d[c] = r.gate[a] * dt[c];
      }
      dgate[a] = static_cast<float>(dot);
    }
  }
  router_.LogitGradient(dgate.data(), daux, dlogit_.data());
  // The router writes dx; the experts add to it.
  kernels::MatmulBackward(dx, g.router, nullptr, dlogit_.data(), x, w.router, N,
                          C, E);
  STRATA_RETURN_IF_ERROR(BackwardExperts(w, g));
  // Added into dx in expert order, so the sums do not depend on the
  // threads.
  for (int e = 0; e < E; ++e) {
    for (int s = 0; s < r.load[e]; ++s) {
      float* d = dx + size_t{1} * r.tokens[e][s] * C;
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
