#include "optim/optimizer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/parallel.h"
#include "common/target_clones.h"

// optim/CMakeLists.txt builds this file with -fno-math-errno (so sqrt
// vectorizes) and -ffp-contract=off (so every STRATA_CLONES clone rounds
// alike).

namespace strata {
namespace {

// Elements per block of ApplyUpdateParallel: 64 KiB per array, so the four
// arrays of an Adam block (256 KiB) stay within a core's L2.
constexpr size_t kBlockElems = size_t{16} << 10;

absl::Status Invalid(absl::string_view field, double value,
                     absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer config: ", field, " = ", value, " must be ", want));
}

// The per-update scalars of every optimizer, computed once per call so the
// element loops hold only loads, multiplies, adds, a sqrt and a divide.
struct UpdateScalars {
  float lr = 0;
  float l2 = 0;        // weight decay added to the gradient (SGD, Adam)
  float decay = 1;     // AdamW: w *= 1 - lr * wd before the step
  float momentum = 0;  // SGD
  float b1 = 0, one_minus_b1 = 0, b2 = 0, one_minus_b2 = 0;
  float step_size = 0;     // lr / (1 - b1^t)
  float inv_sqrt_bc2 = 0;  // 1 / sqrt(1 - b2^t)
  float eps = 0;
};

UpdateScalars MakeScalars(const OptimizerParams& p, float lr, int64_t t) {
  UpdateScalars s;
  s.lr = lr;
  s.momentum = p.momentum;
  s.l2 = p.kind == OptimizerParams::kAdamW ? 0.0f : p.weight_decay;
  if (p.kind == OptimizerParams::kSgd) return s;
  STRATA_CHECK(t >= 1);
  const double t_d = static_cast<double>(t);
  const bool frozen =
      p.freeze_variance_after > 0 && t > p.freeze_variance_after;
  const double t_v =
      frozen ? static_cast<double>(p.freeze_variance_after) : t_d;
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t_d);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t_v);
  s.b1 = p.beta1;
  s.one_minus_b1 = 1.0f - p.beta1;
  // Frozen: v = 1 * v + 0 * g'^2, exactly v.
  s.b2 = frozen ? 1.0f : p.beta2;
  s.one_minus_b2 = frozen ? 0.0f : 1.0f - p.beta2;
  s.step_size = static_cast<float>(lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = p.eps;
  if (p.kind == OptimizerParams::kAdamW) {
    s.decay = static_cast<float>(1.0 - double{lr} * p.weight_decay);
  }
  return s;
}

STRATA_CLONES void SgdKernel(const UpdateScalars& s, float* __restrict w,
                             const float* __restrict g, size_t n) {
  const float lr = s.lr, l2 = s.l2;
  for (size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + l2 * w[i]);
}

STRATA_CLONES void SgdMomentumKernel(const UpdateScalars& s,
                                     float* __restrict w, float* __restrict m,
                                     const float* __restrict g, size_t n) {
  const float lr = s.lr, l2 = s.l2, mu = s.momentum;
  for (size_t i = 0; i < n; ++i) {
    const float mi = mu * m[i] + (g[i] + l2 * w[i]);
    m[i] = mi;
    w[i] -= lr * mi;
  }
}

// Adam and AdamW in one loop: Adam has l2 = wd and decay = 1, AdamW has
// l2 = 0 and decay = 1 - lr*wd (both multiplications are then exact no-ops).
STRATA_CLONES void AdamKernel(const UpdateScalars& s, float* __restrict w,
                              float* __restrict m, float* __restrict v,
                              const float* __restrict g, size_t n) {
  const float l2 = s.l2, decay = s.decay, b1 = s.b1, c1 = s.one_minus_b1;
  const float b2 = s.b2, c2 = s.one_minus_b2, step = s.step_size;
  const float inv_sqrt_bc2 = s.inv_sqrt_bc2, eps = s.eps;
  for (size_t i = 0; i < n; ++i) {
    const float wi = w[i];
    const float gi = g[i] + l2 * wi;
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi * decay - (step * mi) / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// Non-negative floats order as their bit patterns, and NaN's patterns lie
// above every finite one's: all |g[i]| <= the limit whose pattern is
// `limit_bits` iff the largest |g[i]| pattern is at most it.
STRATA_CLONES bool AllWithinBlock(const float* __restrict g, size_t n,
                                  uint32_t limit_bits) {
  uint32_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(g[i]) & 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return max_bits <= limit_bits;
}

// Runs the update of `p` on n elements (arrays already offset to them).
void RunBlock(const OptimizerParams& p, const UpdateScalars& s, float* w,
              float* m, float* v, const float* g, size_t n) {
  if (n == 0) return;  // empty arrays may come as null
  switch (p.kind) {
    case OptimizerParams::kSgd:
      if (p.momentum > 0) {
        STRATA_CHECK(m != nullptr);
        SgdMomentumKernel(s, w, m, g, n);
      } else {
        SgdKernel(s, w, g, n);
      }
      return;
    case OptimizerParams::kAdam:
    case OptimizerParams::kAdamW:
      STRATA_CHECK(m != nullptr && v != nullptr);
      AdamKernel(s, w, m, v, g, n);
      return;
    case OptimizerParams::kLamb:
    case OptimizerParams::kAdafactor:
      break;  // optim/tensor_update.h
  }
  STRATA_CHECK(false && "unknown optimizer kind");
}

// Runs the update of `p` on elements [begin, end).
void RunRange(const OptimizerParams& p, const UpdateScalars& s, float* w,
              float* m, float* v, const float* g, size_t begin, size_t end) {
  if (end == begin) return;
  RunBlock(p, s, w + begin, m == nullptr ? nullptr : m + begin,
           v == nullptr ? nullptr : v + begin, g + begin, end - begin);
}

}  // namespace

AdamStep MakeAdamStep(const OptimizerParams& p, float lr, int64_t t) {
  STRATA_CHECK(p.kind == OptimizerParams::kAdam ||
               p.kind == OptimizerParams::kAdamW);
  const UpdateScalars s = MakeScalars(p, lr, t);
  return AdamStep{.b1 = s.b1,
                  .one_minus_b1 = s.one_minus_b1,
                  .b2 = s.b2,
                  .one_minus_b2 = s.one_minus_b2,
                  .step_size = s.step_size,
                  .inv_sqrt_bc2 = s.inv_sqrt_bc2,
                  .eps = s.eps,
                  .l2 = s.l2,
                  .decay = s.decay};
}

absl::StatusOr<OptimizerParams> OptimizerParamsFromProto(
    const v1::OptimizerConfig& c) {
  OptimizerParams p;
  switch (c.kind()) {
    case v1::OptimizerConfig::SGD:
      p.kind = OptimizerParams::kSgd;
      break;
    case v1::OptimizerConfig::ADAM:
      p.kind = OptimizerParams::kAdam;
      break;
    case v1::OptimizerConfig::ADAMW:
      p.kind = OptimizerParams::kAdamW;
      break;
    case v1::OptimizerConfig::LAMB:
      p.kind = OptimizerParams::kLamb;
      break;
    case v1::OptimizerConfig::ADAFACTOR:
      p.kind = OptimizerParams::kAdafactor;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer config: unknown kind ", static_cast<int>(c.kind())));
  }
  p.lr = c.lr();
  p.momentum = c.momentum();
  p.beta1 = c.beta1() == 0 ? 0.9f : c.beta1();
  p.beta2 = c.beta2() == 0 ? 0.999f : c.beta2();
  p.eps = c.eps() == 0 ? 1e-8f : c.eps();
  p.weight_decay = c.weight_decay();
  p.warmup_steps = c.warmup_steps();
  p.total_steps = c.total_steps();
  p.min_lr_ratio = c.min_lr_ratio();
  p.freeze_variance_after = c.freeze_variance_after();
  p.bias_correction = !c.has_bias_correction() || c.bias_correction();
  p.max_trust_ratio = c.max_trust_ratio();
  if (p.kind == OptimizerParams::kLamb && c.eps() == 0) p.eps = 1e-6f;
  if (p.kind == OptimizerParams::kAdafactor) {
    p.beta1 = c.beta1();  // 0: no first moment
    p.eps = c.eps() == 0 ? 1e-30f : c.eps();
    p.eps2 = c.eps2() == 0 ? 1e-3f : c.eps2();
    p.clip_threshold = c.clip_threshold() == 0 ? 1.0f : c.clip_threshold();
    p.decay_rate = c.decay_rate() == 0 ? -0.8f : c.decay_rate();
    p.relative_step = !c.has_relative_step() || c.relative_step();
    p.scale_parameter = !c.has_scale_parameter() || c.scale_parameter();
    p.warmup_init = c.warmup_init();
  }
  if (absl::Status s = ValidateOptimizerParams(p); !s.ok()) return s;
  return p;
}

absl::Status ValidateOptimizerParams(const OptimizerParams& p) {
  // Comparisons are written so that NaN fails them.
  if (!(p.lr >= 0) || !std::isfinite(p.lr)) return Invalid("lr", p.lr, ">= 0");
  if (!(p.weight_decay >= 0) || !std::isfinite(p.weight_decay)) {
    return Invalid("weight_decay", p.weight_decay, ">= 0");
  }
  if (!(p.momentum >= 0 && p.momentum < 1)) {
    return Invalid("momentum", p.momentum, "in [0, 1)");
  }
  if (p.kind == OptimizerParams::kAdafactor) {
    if (!(p.beta1 >= 0 && p.beta1 < 1)) {
      return Invalid("beta1", p.beta1, "in [0, 1) (0: no first moment)");
    }
    if (!(p.eps2 > 0) || !std::isfinite(p.eps2)) {
      return Invalid("eps2", p.eps2, "> 0");
    }
    if (!(p.clip_threshold > 0) || !std::isfinite(p.clip_threshold)) {
      return Invalid("clip_threshold", p.clip_threshold, "> 0");
    }
    if (!(p.decay_rate < 0) || !std::isfinite(p.decay_rate)) {
      return Invalid("decay_rate", p.decay_rate, "< 0");
    }
    if (p.relative_step && p.lr > 0) {
      return Invalid("lr", p.lr,
                     "0 with relative_step (the step size is then "
                     "min(1e-2, 1/sqrt(t))); set relative_step false to use "
                     "lr");
    }
  } else if (!(p.beta1 > 0 && p.beta1 < 1)) {
    return Invalid("beta1", p.beta1, "in (0, 1) (0 means 0.9)");
  }
  if (!(p.max_trust_ratio >= 0) || !std::isfinite(p.max_trust_ratio)) {
    return Invalid("max_trust_ratio", p.max_trust_ratio, ">= 0 (0: none)");
  }
  if (!(p.beta2 > 0 && p.beta2 < 1)) {
    return Invalid("beta2", p.beta2, "in (0, 1) (0 means 0.999)");
  }
  if (!(p.eps > 0) || !std::isfinite(p.eps)) {
    return Invalid("eps", p.eps, "> 0");
  }
  if (p.warmup_steps < 0) {
    return Invalid("warmup_steps", p.warmup_steps, ">= 0");
  }
  if (p.total_steps < 0) return Invalid("total_steps", p.total_steps, ">= 0");
  if (p.freeze_variance_after < 0) {
    return Invalid("freeze_variance_after", p.freeze_variance_after, ">= 0");
  }
  if (p.total_steps > 0 && p.total_steps <= p.warmup_steps) {
    return Invalid("total_steps", p.total_steps,
                   "0 or greater than warmup_steps");
  }
  if (!(p.min_lr_ratio >= 0 && p.min_lr_ratio <= 1)) {
    return Invalid("min_lr_ratio", p.min_lr_ratio, "in [0, 1]");
  }
  return absl::OkStatus();
}

int NumStateSlots(const OptimizerParams& params) {
  switch (params.kind) {
    case OptimizerParams::kSgd:
      return params.momentum > 0 ? 1 : 0;
    case OptimizerParams::kAdam:
    case OptimizerParams::kAdamW:
      return 2;
    case OptimizerParams::kLamb:
    case OptimizerParams::kAdafactor:
      break;
  }
  STRATA_CHECK(false && "NumStateSlots of a whole-tensor optimizer");
  return 0;
}

float ScheduledLr(const OptimizerParams& p, int64_t step) {
  STRATA_CHECK(step >= 0);
  const double lr = p.lr;
  if (step < p.warmup_steps) {
    return static_cast<float>(lr * static_cast<double>(step + 1) /
                              static_cast<double>(p.warmup_steps));
  }
  if (p.total_steps <= 0) return p.lr;
  const double lr_min = lr * p.min_lr_ratio;
  if (step >= p.total_steps) return static_cast<float>(lr_min);
  const double progress = static_cast<double>(step - p.warmup_steps) /
                          static_cast<double>(p.total_steps - p.warmup_steps);
  return static_cast<float>(lr_min +
                            (lr - lr_min) * 0.5 *
                                (1.0 + std::cos(std::numbers::pi * progress)));
}

void ApplyUpdate(const OptimizerParams& params, float lr, int64_t t, float* w,
                 float* m, float* v, const float* g, size_t n) {
  RunRange(params, MakeScalars(params, lr, t), w, m, v, g, 0, n);
}

void ApplyUpdateFormed(
    const OptimizerParams& params, float lr, int64_t t, float* w, float* m,
    float* v, size_t n,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form) {
  const UpdateScalars s = MakeScalars(params, lr, t);
  // A block of the gradient: 64 KiB, in cache from `form` to the update.
  thread_local std::vector<float> block(kBlockElems);
  for (size_t begin = 0; begin < n; begin += kBlockElems) {
    const size_t end = std::min(n, begin + kBlockElems);
    form(begin, end, block.data());
    RunBlock(params, s, w + begin, m == nullptr ? nullptr : m + begin,
             v == nullptr ? nullptr : v + begin, block.data(), end - begin);
  }
}

bool AllWithin(const float* g, size_t n, float limit) {
  const uint32_t limit_bits = std::bit_cast<uint32_t>(std::fabs(limit));
  // Blocks let a bad value end the scan early without slowing the loop.
  for (size_t begin = 0; begin < n; begin += kBlockElems) {
    if (!AllWithinBlock(g + begin, std::min(kBlockElems, n - begin),
                        limit_bits)) {
      return false;
    }
  }
  return true;
}

bool AllFinite(const float* g, size_t n) {
  return AllWithin(g, n, std::numeric_limits<float>::max());
}

void ApplyUpdateParallel(const OptimizerParams& params, float lr, int64_t t,
                         float* w, float* m, float* v, const float* g,
                         size_t n) {
  const UpdateScalars s = MakeScalars(params, lr, t);
  const int64_t num_blocks =
      static_cast<int64_t>((n + kBlockElems - 1) / kBlockElems);
  ParallelFor(num_blocks, 1, [&](int, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const size_t begin = static_cast<size_t>(b) * kBlockElems;
      RunRange(params, s, w, m, v, g, begin, std::min(n, begin + kBlockElems));
    }
  });
}

}  // namespace strata
