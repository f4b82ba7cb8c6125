// Optimizer updates on fp32 arrays: SGD (heavy-ball momentum), Adam and
// AdamW, a learning-rate schedule, and a finiteness check for gradients.
// LAMB and Adafactor, which need sums over whole tensors, are in
// optim/tensor_update.h.
// The parameter server applies these per chunk; a worker may
// apply them locally. Their cost is memory bandwidth: the loops vectorize and
// are compiled for AVX-512, AVX2 and baseline x86-64, picked at load time.
//
// Every element-wise kernel gives bit-identical results on every CPU and for
// every split into blocks or threads (no FMA contraction, no reassociation).
#ifndef STRATA_OPTIM_OPTIMIZER_H_
#define STRATA_OPTIM_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "optim/adam_step.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// One optimizer group's settings, with defaults filled in. Mirrors
// strata.v1.OptimizerConfig.
struct OptimizerParams {
  enum Kind { kSgd, kAdam, kAdamW, kLamb, kAdafactor };
  Kind kind = kAdamW;
  float lr = 1e-3f;          // peak learning rate
  float momentum = 0;        // SGD only; 0 = plain SGD
  float beta1 = 0.9f;        // Adam/AdamW/LAMB; Adafactor: 0 = no m
  float beta2 = 0.999f;      // Adam/AdamW/LAMB
  float eps = 1e-8f;         // Adam/AdamW; LAMB 1e-6; Adafactor eps1 1e-30
  float weight_decay = 0;    // SGD, Adam: L2 on the gradient; AdamW,
                             // LAMB, Adafactor: decoupled
  int64_t warmup_steps = 0;  // see ScheduledLr
  int64_t total_steps = 0;   // 0: no decay after warm-up
  float min_lr_ratio = 0;    // final lr = lr * min_lr_ratio
  // Adam, AdamW, LAMB: updates with t > this leave v (and its bias
  // correction) as update `freeze_variance_after` left it (0: never).
  int64_t freeze_variance_after = 0;
  // LAMB (optim/tensor_update.h).
  bool bias_correction = true;
  float max_trust_ratio = 0;  // 0: none
  // Adafactor (optim/tensor_update.h).
  float eps2 = 1e-3f;
  float clip_threshold = 1.0f;
  float decay_rate = -0.8f;
  bool relative_step = true;
  bool scale_parameter = true;
  bool warmup_init = false;
};

// Validates `config` and fills in defaults (beta1, beta2, eps of 0 mean
// 0.9, 0.999, 1e-8; LAMB's eps 1e-6; Adafactor's as ps.proto says).
// INVALID_ARGUMENT for an unknown kind, a negative or non-finite lr or
// weight_decay, momentum outside [0, 1), betas outside (0, 1) (Adafactor's
// beta1 in [0, 1)), a negative or non-finite eps, negative step counts,
// total_steps in (0, warmup_steps], min_lr_ratio outside [0, 1], a
// negative max_trust_ratio, Adafactor's eps2 or clip_threshold not > 0,
// decay_rate not < 0, or lr > 0 with relative_step. SGD ignores the Adam
// fields and Adam/AdamW ignore momentum.
absl::StatusOr<OptimizerParams> OptimizerParamsFromProto(
    const v1::OptimizerConfig& config);

// OK if `params` is usable: the checks of OptimizerParamsFromProto after
// defaults (so a zero beta or eps is INVALID_ARGUMENT here).
absl::Status ValidateOptimizerParams(const OptimizerParams& params);

// The number of optimizer-state arrays (each as long as the weights) that
// ApplyUpdate reads and writes: SGD 1 with momentum, else 0; Adam/AdamW 2
// (slot 0: first moment m, slot 1: second moment v). REQUIRES: not LAMB or
// Adafactor, whose state depends on the tensor's shape
// (optim/tensor_update.h StateSizes).
int NumStateSlots(const OptimizerParams& params);

// The learning rate for the update with 0-based index `step` (the number of
// updates applied before it):
//   step < warmup_steps: lr * (step + 1) / warmup_steps, a linear ramp from
//     0 whose first update gets lr / warmup_steps and whose last gets lr;
//   then, if total_steps > 0: cosine decay from lr at step == warmup_steps
//     to lr * min_lr_ratio at step == total_steps,
//       lr_min + (lr - lr_min) * (1 + cos(pi * progress)) / 2,
//     and lr * min_lr_ratio after that;
//   else lr.
// REQUIRES: step >= 0 and `params` valid (from OptimizerParamsFromProto).
float ScheduledLr(const OptimizerParams& params, int64_t step);

// Applies one update to n elements:
//   SGD:   g' = g + wd*w;  m = momentum*m + g' (if momentum > 0, else m = g');
//          w -= lr*m
//   Adam:  g' = g + wd*w;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
//          w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   AdamW: as Adam with g' = g, then w -= lr*wd*w (decoupled, on the old w).
// `lr` is already scheduled (ScheduledLr); `t` is the 1-based count of this
// update for these elements (bias correction; ignored by SGD). `m` and `v`
// are the state slots (NumStateSlots); unused ones may be null.
// REQUIRES: t >= 1 for Adam/AdamW; the arrays do not overlap; not LAMB or
// Adafactor (optim/tensor_update.h).
// Thread-safe for disjoint arrays.
void ApplyUpdate(const OptimizerParams& params, float lr, int64_t t, float* w,
                 float* m, float* v, const float* g, size_t n);

// As ApplyUpdate, with the gradient formed as the update goes:
// `form(begin, end, out)` writes the gradient of elements [begin, end) to
// out[0, end - begin), a block of a few thousand elements at a time, in
// order, on the caller's thread, just before the update reads them from
// there. A gradient formed from other arrays (a server's clipped mean of a
// step's pushes) then costs one read of those arrays and no pass over
// memory of its own. Results are those of forming all of g first and
// calling ApplyUpdate.
void ApplyUpdateFormed(
    const OptimizerParams& params, float lr, int64_t t, float* w, float* m,
    float* v, size_t n,
    absl::FunctionRef<void(size_t begin, size_t end, float* out)> form);

// The constants ApplyUpdate uses for an Adam or AdamW update with
// scheduled rate `lr` and 1-based count `t` (for device kernels that apply
// the same step). REQUIRES: params.kind is kAdam or kAdamW; t >= 1.
AdamStep MakeAdamStep(const OptimizerParams& params, float lr, int64_t t);

// True iff none of the n values is NaN or infinite. Vectorized.
bool AllFinite(const float* g, size_t n);

// True iff every |g[i]| <= limit (so none is NaN). Vectorized.
// REQUIRES: limit is not NaN.
bool AllWithin(const float* g, size_t n, float limit);

// The largest gradient magnitude a server applies. Adam's second moment
// holds a running mean of g^2: with |g| <= 1e19 it stays below 1e38, under
// fp32's largest value (3.4e38), so the optimizer state cannot overflow to
// Inf. A finite gradient beyond it is refused like a NaN.
inline constexpr float kMaxGradientMagnitude = 1e19f;

// As ApplyUpdate, but splits the arrays into cache-sized blocks run on the
// process's thread pool (common/parallel.h; NumThreads() threads, the caller
// included). Results are bit-identical to ApplyUpdate. Small arrays run on
// the caller alone.
void ApplyUpdateParallel(const OptimizerParams& params, float lr, int64_t t,
                         float* w, float* m, float* v, const float* g,
                         size_t n);

}  // namespace strata

#endif  // STRATA_OPTIM_OPTIMIZER_H_
