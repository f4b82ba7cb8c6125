// The per-update constants of an Adam or AdamW step, as ApplyUpdate
// (optim/optimizer.h) uses them, for kernels on other devices that apply
// the same formula:
//   g' = g + l2*w;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
//   w = w*decay - step_size*m / (sqrt(v)*inv_sqrt_bc2 + eps)
// Adam has l2 = weight decay and decay = 1; AdamW has l2 = 0 and
// decay = 1 - lr*wd. No dependencies, so device code can include it.
#ifndef STRATA_OPTIM_ADAM_STEP_H_
#define STRATA_OPTIM_ADAM_STEP_H_

namespace strata {

struct AdamStep {
  float b1 = 0.9f, one_minus_b1 = 0.1f;
  float b2 = 0.999f, one_minus_b2 = 0.001f;
  float step_size = 0;     // lr / (1 - b1^t)
  float inv_sqrt_bc2 = 1;  // 1 / sqrt(1 - b2^t)
  float eps = 1e-8f;
  float l2 = 0;     // Adam: weight decay folded into the gradient
  float decay = 1;  // AdamW: 1 - lr*wd, applied to the old weight
};

}  // namespace strata

#endif  // STRATA_OPTIM_ADAM_STEP_H_
