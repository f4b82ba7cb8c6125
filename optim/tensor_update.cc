#include "optim/tensor_update.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/target_clones.h"

// optim/CMakeLists.txt builds this file with -fno-math-errno and
// -ffp-contract=off, as optimizer.cc.

namespace strata {
namespace {

// Sums f(i) for i in [0, n) in double, in 8 lanes (i % 8) added up in a
// fixed order at the end: the loop vectorizes without reassociating, so
// every clone (AVX-512, AVX2, baseline) gives the same sum.
template <typename F>
inline double LaneSum(uint64_t n, F f) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += f(i + l);
  }
  for (int l = 0; i < n; ++i, ++l) lane[l] += f(i);
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

bool Factored(const OptimizerParams& p, absl::Span<const int64_t> shape) {
  return p.kind == OptimizerParams::kAdafactor && shape.size() >= 2;
}

// LAMB's per-update constants.
struct LambScalars {
  float b1, c1, b2, c2, inv_bc1, inv_bc2, eps, wd;
};

// With freeze_variance_after (1-bit LAMB's frozen variance) and t past it,
// v' = 1 * v + 0 * g^2 is exactly v and bc2 stays at that update's.
LambScalars MakeLamb(const OptimizerParams& p, int64_t t) {
  const bool frozen =
      p.freeze_variance_after > 0 && t > p.freeze_variance_after;
  const int64_t t_v = frozen ? p.freeze_variance_after : t;
  double bc1 = 1, bc2 = 1;
  if (p.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(t));
    bc2 =
        1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(t_v));
  }
  return {p.beta1,
          1.0f - p.beta1,
          frozen ? 1.0f : p.beta2,
          frozen ? 0.0f : 1.0f - p.beta2,
          static_cast<float>(1.0 / bc1),
          static_cast<float>(1.0 / bc2),
          p.eps,
          p.weight_decay};
}

inline float LambM(const LambScalars& s, float m, float g) {
  return s.b1 * m + s.c1 * g;
}
inline float LambV(const LambScalars& s, float v, float g) {
  return s.b2 * v + s.c2 * (g * g);
}
// LAMB's direction u from m', v' and w.
inline float LambU(const LambScalars& s, float m, float v, float w) {
  return (m * s.inv_bc1) / (std::sqrt(v * s.inv_bc2) + s.eps) + s.wd * w;
}

STRATA_CLONES void LambSums(const LambScalars& s, const float* __restrict w,
                            const float* __restrict m,
                            const float* __restrict v,
                            const float* __restrict g, uint64_t n, double* w2,
                            double* u2) {
  *w2 =
      LaneSum(n, [&](uint64_t i) { return static_cast<double>(w[i]) * w[i]; });
  *u2 = LaneSum(n, [&](uint64_t i) {
    const double u = LambU(s, LambM(s, m[i], g[i]), LambV(s, v[i], g[i]), w[i]);
    return u * u;
  });
}

STRATA_CLONES void LambKernel(const LambScalars& s, float step,
                              float* __restrict w, float* __restrict m,
                              float* __restrict v, const float* __restrict g,
                              uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const float mi = LambM(s, m[i], g[i]);
    const float vi = LambV(s, v[i], g[i]);
    const float u = LambU(s, mi, vi, w[i]);
    m[i] = mi;
    v[i] = vi;
    w[i] -= step * u;
  }
}

std::vector<double> LambPartials(const TensorStep& st, const float* w,
                                 absl::Span<const std::vector<float>> slots,
                                 const float* g) {
  std::vector<double> out(2);
  LambSums(MakeLamb(*st.params, st.t), w, slots[0].data(), slots[1].data(), g,
           st.part.numel, &out[0], &out[1]);
  return out;
}

void LambApply(const TensorStep& st, float* w,
               absl::Span<std::vector<float>> slots, const float* g,
               const std::vector<double>& totals) {
  const OptimizerParams& p = *st.params;
  const double wn = std::sqrt(totals[0]), un = std::sqrt(totals[1]);
  double trust = wn > 0 && un > 0 ? wn / un : 1.0;
  if (p.max_trust_ratio > 0) trust = std::min<double>(trust, p.max_trust_ratio);
  LambKernel(MakeLamb(p, st.t), static_cast<float>(st.lr * trust), w,
             slots[0].data(), slots[1].data(), g, st.part.numel);
}

// Adafactor's per-update constants.
struct AdafactorScalars {
  float beta2t, c2, eps1;
};

AdafactorScalars MakeAdafactor(const OptimizerParams& p, int64_t t) {
  const double beta2t =
      1.0 - std::pow(static_cast<double>(t), static_cast<double>(p.decay_rate));
  return {static_cast<float>(beta2t), static_cast<float>(1.0 - beta2t), p.eps};
}

// R'_i of a row of `cols` gradients at g.
inline float NewRow(const AdafactorScalars& s, float r, const float* g,
                    uint64_t cols) {
  const double sum = LaneSum(cols, [&](uint64_t j) {
    return static_cast<double>(g[j] * g[j] + s.eps1);
  });
  return s.beta2t * r + s.c2 * static_cast<float>(sum / cols);
}

// Factored reduction 0 over `rows` rows: column sums of g^2 + eps1 into
// cols (added to), and the sums of R' and of w^2.
STRATA_CLONES void FactoredSums0(const AdafactorScalars& s,
                                 const float* __restrict w,
                                 const float* __restrict r,
                                 const float* __restrict g, uint64_t rows,
                                 uint64_t cols, double* __restrict col_sums,
                                 double* r_sum, double* w2) {
  double rs = 0, ws = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * cols;
    const float* wi = w + i * cols;
    for (uint64_t j = 0; j < cols; ++j) {
      col_sums[j] += static_cast<double>(gi[j] * gi[j] + s.eps1);
    }
    rs += NewRow(s, r[i], gi, cols);
    ws += LaneSum(
        cols, [&](uint64_t j) { return static_cast<double>(wi[j]) * wi[j]; });
  }
  *r_sum = rs;
  *w2 = ws;
}

// Factored reduction 1: the sum of U^2, U_ij = g_ij * rf_i * cf_j.
STRATA_CLONES double FactoredSums1(const AdafactorScalars& s,
                                   const float* __restrict r,
                                   const float* __restrict g,
                                   const float* __restrict c_factor,
                                   float mean_r, uint64_t rows, uint64_t cols) {
  double u2 = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * cols;
    const float rf = 1.0f / std::sqrt(NewRow(s, r[i], gi, cols) / mean_r);
    u2 += LaneSum(cols, [&](uint64_t j) {
      const double u = gi[j] * (rf * c_factor[j]);
      return u * u;
    });
  }
  return u2;
}

// The last step of every element: U scaled, through m, decayed, applied.
struct AdafactorApplyScalars {
  float inv_denom, alpha, decay, b1, c1;
};

inline float Finish(const AdafactorApplyScalars& a, float u, float* m,
                    float* w) {
  u = (u * a.inv_denom) * a.alpha;
  if (m != nullptr) u = *m = a.b1 * *m + a.c1 * u;
  if (a.decay != 0) *w += a.decay * *w;
  return *w -= u;
}

// Applies a factored part's rows (R not yet updated: rf from R').
STRATA_CLONES void FactoredApplyRows(
    const AdafactorScalars& s, const AdafactorApplyScalars& a,
    float* __restrict w, float* __restrict m, const float* __restrict r,
    const float* __restrict g, const float* __restrict c_factor, float mean_r,
    uint64_t rows, uint64_t cols) {
  for (uint64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * cols;
    float* wi = w + i * cols;
    float* mi = m == nullptr ? nullptr : m + i * cols;
    const float rf = 1.0f / std::sqrt(NewRow(s, r[i], gi, cols) / mean_r);
    if (mi == nullptr) {
      for (uint64_t j = 0; j < cols; ++j) {
        Finish(a, gi[j] * (rf * c_factor[j]), nullptr, &wi[j]);
      }
    } else {
      for (uint64_t j = 0; j < cols; ++j) {
        Finish(a, gi[j] * (rf * c_factor[j]), &mi[j], &wi[j]);
      }
    }
  }
}

// A vector's U_i = g_i / sqrt(v'_i).
inline float VectorU(const AdafactorScalars& s, float v, float g) {
  return g / std::sqrt(s.beta2t * v + s.c2 * (g * g + s.eps1));
}

STRATA_CLONES void VectorSums(const AdafactorScalars& s,
                              const float* __restrict w,
                              const float* __restrict v,
                              const float* __restrict g, uint64_t n, double* w2,
                              double* u2) {
  *w2 =
      LaneSum(n, [&](uint64_t i) { return static_cast<double>(w[i]) * w[i]; });
  *u2 = LaneSum(n, [&](uint64_t i) {
    const double u = VectorU(s, v[i], g[i]);
    return u * u;
  });
}

STRATA_CLONES void VectorApply(const AdafactorScalars& s,
                               const AdafactorApplyScalars& a,
                               float* __restrict w, float* __restrict m,
                               float* __restrict v, const float* __restrict g,
                               uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const float u = VectorU(s, v[i], g[i]);
    Finish(a, u, m == nullptr ? nullptr : &m[i], &w[i]);
    v[i] = s.beta2t * v[i] + s.c2 * (g[i] * g[i] + s.eps1);
  }
}

// C' from reduction 0's totals, and 1/sqrt(C').
std::vector<float> NewColumns(const TensorStep& st,
                              absl::Span<const std::vector<float>> slots,
                              const std::vector<double>& totals0,
                              std::vector<float>* c_factor) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const uint64_t cols = st.part.cols;
  const double rows = static_cast<double>(st.part.tensor_rows());
  std::vector<float> c(cols);
  c_factor->resize(cols);
  for (uint64_t j = 0; j < cols; ++j) {
    c[j] =
        s.beta2t * slots[1][j] + s.c2 * static_cast<float>(totals0[j] / rows);
    (*c_factor)[j] = 1.0f / std::sqrt(c[j]);
  }
  return c;
}

float MeanR(const TensorStep& st, const std::vector<double>& totals0) {
  return static_cast<float>(totals0[st.part.cols] /
                            static_cast<double>(st.part.tensor_rows()));
}

std::vector<double> AdafactorPartials(
    const TensorStep& st, int k, const float* w,
    absl::Span<const std::vector<float>> slots, const float* g,
    absl::Span<const std::vector<double>> totals) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const uint64_t rows = st.part.rows(), cols = st.part.cols;
  if (cols == 0) {
    std::vector<double> out(2);
    VectorSums(s, w, slots[0].data(), g, st.part.numel, &out[0], &out[1]);
    return out;
  }
  if (k == 0) {
    std::vector<double> out(cols + 2, 0.0);
    FactoredSums0(s, w, slots[0].data(), g, rows, cols, out.data(), &out[cols],
                  &out[cols + 1]);
    return out;
  }
  std::vector<float> c_factor;
  NewColumns(st, slots, totals[0], &c_factor);
  return {FactoredSums1(s, slots[0].data(), g, c_factor.data(),
                        MeanR(st, totals[0]), rows, cols)};
}

void AdafactorApply(const TensorStep& st, float* w,
                    absl::Span<std::vector<float>> slots, const float* g,
                    absl::Span<const std::vector<double>> totals) {
  const OptimizerParams& p = *st.params;
  const AdafactorScalars s = MakeAdafactor(p, st.t);
  const bool factored = st.part.cols > 0;
  const double n = static_cast<double>(st.part.tensor_numel);
  const double w2 = factored ? totals[0][st.part.cols + 1] : totals[0][0];
  const double u2 = factored ? totals[1][0] : totals[0][1];
  const double rms_u = std::sqrt(u2 / n);
  const double t = static_cast<double>(st.t);
  double rho = p.relative_step
                   ? std::min(p.warmup_init ? 1e-6 * t : 1e-2, 1 / std::sqrt(t))
                   : st.lr;
  if (p.scale_parameter) rho *= std::max<double>(p.eps2, std::sqrt(w2 / n));
  AdafactorApplyScalars a;
  a.inv_denom =
      static_cast<float>(1.0 / std::max(1.0, rms_u / p.clip_threshold));
  a.alpha = static_cast<float>(rho);
  a.decay = -p.weight_decay * a.alpha;
  a.b1 = p.beta1;
  a.c1 = 1.0f - p.beta1;
  float* m = p.beta1 > 0 ? slots[factored ? 2 : 1].data() : nullptr;
  if (!factored) {
    VectorApply(s, a, w, m, slots[0].data(), g, st.part.numel);
    return;
  }
  const uint64_t rows = st.part.rows(), cols = st.part.cols;
  std::vector<float> c_factor;
  std::vector<float> c = NewColumns(st, slots, totals[0], &c_factor);
  const float mean_r = MeanR(st, totals[0]);
  FactoredApplyRows(s, a, w, m, slots[0].data(), g, c_factor.data(), mean_r,
                    rows, cols);
  for (uint64_t i = 0; i < rows; ++i) {
    slots[0][i] = NewRow(s, slots[0][i], g + i * cols, cols);
  }
  slots[1] = std::move(c);
}

}  // namespace

bool UsesTensorSums(const OptimizerParams& p) {
  return p.kind == OptimizerParams::kLamb ||
         p.kind == OptimizerParams::kAdafactor;
}

TensorPart PartOfTensor(const OptimizerParams& p, uint64_t numel,
                        absl::Span<const int64_t> shape, bool alone) {
  TensorPart part;
  part.numel = numel;
  uint64_t total = 1;
  for (int64_t d : shape) total *= static_cast<uint64_t>(d);
  part.tensor_numel = alone ? numel : total;
  if (Factored(p, shape)) part.cols = static_cast<uint64_t>(shape.back());
  return part;
}

absl::Status CheckTensorPart(const OptimizerParams& p, uint64_t offset,
                             uint64_t numel, absl::Span<const int64_t> shape) {
  if (!Factored(p, shape)) return absl::OkStatus();
  const uint64_t cols = static_cast<uint64_t>(shape.back());
  if (offset % cols == 0 && numel % cols == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Adafactor factors a tensor of shape [", absl::StrJoin(shape, ","),
      "] by rows of ", cols, " elements, so each chunk must hold whole rows: ",
      "this one holds elements [", offset, ", ", offset + numel,
      ") (a client cuts such tensors at rows: common/chunk_plan.h)"));
}

std::vector<uint64_t> StateSizes(const OptimizerParams& p,
                                 const TensorPart& part) {
  switch (p.kind) {
    case OptimizerParams::kSgd:
    case OptimizerParams::kAdam:
    case OptimizerParams::kAdamW:
      return std::vector<uint64_t>(NumStateSlots(p), part.numel);
    case OptimizerParams::kLamb:
      return {part.numel, part.numel};
    case OptimizerParams::kAdafactor: {
      std::vector<uint64_t> sizes;
      if (part.cols > 0) {
        sizes = {part.rows(), part.cols};
      } else {
        sizes = {part.numel};
      }
      if (p.beta1 > 0) sizes.push_back(part.numel);
      return sizes;
    }
  }
  STRATA_CHECK(false && "unknown optimizer kind");
  return {};
}

int NumReductions(const OptimizerParams& p, const TensorPart& part) {
  switch (p.kind) {
    case OptimizerParams::kLamb:
      return 1;
    case OptimizerParams::kAdafactor:
      return part.cols > 0 ? 2 : 1;
    default:
      return 0;
  }
}

std::vector<double> PartialSums(const TensorStep& step, int k, const float* w,
                                absl::Span<const std::vector<float>> slots,
                                const float* g,
                                absl::Span<const std::vector<double>> totals) {
  STRATA_CHECK(k >= 0 && k < NumReductions(*step.params, step.part));
  STRATA_CHECK(totals.size() >= static_cast<size_t>(k));
  if (step.params->kind == OptimizerParams::kLamb) {
    return LambPartials(step, w, slots, g);
  }
  return AdafactorPartials(step, k, w, slots, g, totals);
}

void ApplyTensorUpdate(const TensorStep& step, float* w,
                       absl::Span<std::vector<float>> slots, const float* g,
                       absl::Span<const std::vector<double>> totals) {
  STRATA_CHECK(totals.size() ==
               static_cast<size_t>(NumReductions(*step.params, step.part)));
  if (step.params->kind == OptimizerParams::kLamb) {
    LambApply(step, w, slots, g, totals[0]);
  } else {
    AdafactorApply(step, w, slots, g, totals);
  }
}

void ApplyWholeTensorUpdate(const TensorStep& step, float* w,
                            absl::Span<std::vector<float>> slots,
                            const float* g) {
  STRATA_CHECK(step.part.numel == step.part.tensor_numel);
  const int n = NumReductions(*step.params, step.part);
  std::vector<std::vector<double>> totals;
  for (int k = 0; k < n; ++k) {
    totals.push_back(PartialSums(step, k, w, slots, g, totals));
  }
  ApplyTensorUpdate(step, w, slots, g, totals);
}

}  // namespace strata
