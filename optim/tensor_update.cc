#include "optim/tensor_update.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

// optim/CMakeLists.txt builds this file with -fno-math-errno and
// -ffp-contract=off, as optimizer.cc.

namespace strata {
namespace {

bool Factored(const OptimizerParams& p, absl::Span<const int64_t> shape) {
  return p.kind == OptimizerParams::kAdafactor && shape.size() >= 2;
}

// LAMB's per-update constants.
struct LambScalars {
  float b1, c1, b2, c2, inv_bc1, inv_bc2, eps, wd;
};

LambScalars MakeLamb(const OptimizerParams& p, int64_t t) {
  double bc1 = 1, bc2 = 1;
  if (p.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(t));
    bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(t));
  }
  return {p.beta1,
          1.0f - p.beta1,
          p.beta2,
          1.0f - p.beta2,
          static_cast<float>(1.0 / bc1),
          static_cast<float>(1.0 / bc2),
          p.eps,
          p.weight_decay};
}

// LAMB's direction u for element i, with m' and v' out.
inline float LambDirection(const LambScalars& s, float w, float m, float v,
                           float g, float* m_out, float* v_out) {
  const float mi = s.b1 * m + s.c1 * g;
  const float vi = s.b2 * v + s.c2 * (g * g);
  *m_out = mi;
  *v_out = vi;
  return (mi * s.inv_bc1) / (std::sqrt(vi * s.inv_bc2) + s.eps) + s.wd * w;
}

std::vector<double> LambPartials(const TensorStep& st, const float* w,
                                 absl::Span<const std::vector<float>> slots,
                                 const float* g) {
  const LambScalars s = MakeLamb(*st.params, st.t);
  const float* m = slots[0].data();
  const float* v = slots[1].data();
  double w2 = 0, u2 = 0;
  for (uint64_t i = 0; i < st.part.numel; ++i) {
    float mi, vi;
    const double u = LambDirection(s, w[i], m[i], v[i], g[i], &mi, &vi);
    w2 += static_cast<double>(w[i]) * w[i];
    u2 += u * u;
  }
  return {w2, u2};
}

void LambApply(const TensorStep& st, float* w,
               absl::Span<std::vector<float>> slots, const float* g,
               const std::vector<double>& totals) {
  const OptimizerParams& p = *st.params;
  const LambScalars s = MakeLamb(p, st.t);
  const double wn = std::sqrt(totals[0]), un = std::sqrt(totals[1]);
  double trust = wn > 0 && un > 0 ? wn / un : 1.0;
  if (p.max_trust_ratio > 0) trust = std::min<double>(trust, p.max_trust_ratio);
  const float step = static_cast<float>(st.lr * trust);
  float* m = slots[0].data();
  float* v = slots[1].data();
  for (uint64_t i = 0; i < st.part.numel; ++i) {
    const float u = LambDirection(s, w[i], m[i], v[i], g[i], &m[i], &v[i]);
    w[i] -= step * u;
  }
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

// R'_i of row i (of `cols` gradients at g).
inline float NewRow(const AdafactorScalars& s, float r, const float* g,
                    uint64_t cols) {
  double sum = 0;
  for (uint64_t j = 0; j < cols; ++j) sum += g[j] * g[j] + s.eps1;
  return s.beta2t * r + s.c2 * static_cast<float>(sum / cols);
}

// Factored reduction 0: [column sums of g^2 + eps1..., sum R', sum w^2].
std::vector<double> FactoredPartials0(
    const TensorStep& st, const float* w,
    absl::Span<const std::vector<float>> slots, const float* g) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const uint64_t rows = st.part.rows(), cols = st.part.cols;
  std::vector<double> out(cols + 2, 0.0);
  double r_sum = 0, w2 = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * cols;
    const float* wi = w + i * cols;
    for (uint64_t j = 0; j < cols; ++j) {
      out[j] += gi[j] * gi[j] + s.eps1;
      w2 += static_cast<double>(wi[j]) * wi[j];
    }
    r_sum += NewRow(s, slots[0][i], gi, cols);
  }
  out[cols] = r_sum;
  out[cols + 1] = w2;
  return out;
}

// C' from reduction 0's totals.
std::vector<float> NewColumns(const TensorStep& st,
                              absl::Span<const std::vector<float>> slots,
                              const std::vector<double>& totals0) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const uint64_t cols = st.part.cols;
  const double rows = static_cast<double>(st.part.tensor_rows());
  std::vector<float> c(cols);
  for (uint64_t j = 0; j < cols; ++j) {
    c[j] =
        s.beta2t * slots[1][j] + s.c2 * static_cast<float>(totals0[j] / rows);
  }
  return c;
}

// Calls out(i, U_i) for every element of a factored part.
template <typename Out>
void FactoredUpdate(const TensorStep& st,
                    absl::Span<const std::vector<float>> slots, const float* g,
                    const std::vector<double>& totals0, Out out) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const uint64_t rows = st.part.rows(), cols = st.part.cols;
  const std::vector<float> c = NewColumns(st, slots, totals0);
  std::vector<float> c_factor(cols);
  for (uint64_t j = 0; j < cols; ++j) c_factor[j] = 1.0f / std::sqrt(c[j]);
  const float mean_r = static_cast<float>(
      totals0[cols] / static_cast<double>(st.part.tensor_rows()));
  for (uint64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * cols;
    const float r = NewRow(s, slots[0][i], gi, cols);
    const float r_factor = 1.0f / std::sqrt(r / mean_r);
    for (uint64_t j = 0; j < cols; ++j) {
      out(i * cols + j, gi[j] * (r_factor * c_factor[j]));
    }
  }
}

// Calls out(i, U_i) for every element of an unfactored part.
template <typename Out>
void VectorUpdate(const TensorStep& st,
                  absl::Span<const std::vector<float>> slots, const float* g,
                  Out out) {
  const AdafactorScalars s = MakeAdafactor(*st.params, st.t);
  const float* v = slots[0].data();
  for (uint64_t i = 0; i < st.part.numel; ++i) {
    const float vi = s.beta2t * v[i] + s.c2 * (g[i] * g[i] + s.eps1);
    out(i, g[i] / std::sqrt(vi));
  }
}

double SumSquares(const float* a, uint64_t n) {
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * a[i];
  return sum;
}

std::vector<double> AdafactorPartials(
    const TensorStep& st, int k, const float* w,
    absl::Span<const std::vector<float>> slots, const float* g,
    absl::Span<const std::vector<double>> totals) {
  double u2 = 0;
  auto add = [&u2](uint64_t, float u) { u2 += static_cast<double>(u) * u; };
  if (st.part.cols == 0) {
    VectorUpdate(st, slots, g, add);
    return {SumSquares(w, st.part.numel), u2};
  }
  if (k == 0) return FactoredPartials0(st, w, slots, g);
  FactoredUpdate(st, slots, g, totals[0], add);
  return {u2};
}

void AdafactorApply(const TensorStep& st, float* w,
                    absl::Span<std::vector<float>> slots, const float* g,
                    absl::Span<const std::vector<double>> totals) {
  const OptimizerParams& p = *st.params;
  const bool factored = st.part.cols > 0;
  const double n = static_cast<double>(st.part.tensor_numel);
  const double w2 = factored ? totals[0][st.part.cols + 1] : totals[0][0];
  const double u2 = factored ? totals[1][0] : totals[0][1];
  const double rms_u = std::sqrt(u2 / n);
  const float inv_denom =
      static_cast<float>(1.0 / std::max(1.0, rms_u / p.clip_threshold));
  const double t = static_cast<double>(st.t);
  double rho = p.relative_step
                   ? std::min(p.warmup_init ? 1e-6 * t : 1e-2, 1 / std::sqrt(t))
                   : st.lr;
  if (p.scale_parameter) rho *= std::max<double>(p.eps2, std::sqrt(w2 / n));
  const float alpha = static_cast<float>(rho);
  const float decay = -p.weight_decay * alpha;
  float* m = p.beta1 > 0 ? slots[factored ? 2 : 1].data() : nullptr;
  const float b1 = p.beta1, c1 = 1.0f - p.beta1;
  auto apply = [&](uint64_t i, float u) {
    u = (u * inv_denom) * alpha;
    if (m != nullptr) u = m[i] = b1 * m[i] + c1 * u;
    if (decay != 0) w[i] += decay * w[i];
    w[i] -= u;
  };
  if (!factored) {
    // v' is written after every U is taken from the old v.
    VectorUpdate(st, slots, g, apply);
    const AdafactorScalars s = MakeAdafactor(p, st.t);
    float* v = slots[0].data();
    for (uint64_t i = 0; i < st.part.numel; ++i) {
      v[i] = s.beta2t * v[i] + s.c2 * (g[i] * g[i] + s.eps1);
    }
    return;
  }
  FactoredUpdate(st, slots, g, totals[0], apply);
  const AdafactorScalars s = MakeAdafactor(p, st.t);
  std::vector<float> c = NewColumns(st, slots, totals[0]);
  for (uint64_t i = 0; i < st.part.rows(); ++i) {
    slots[0][i] = NewRow(s, slots[0][i], g + i * st.part.cols, st.part.cols);
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
