// Optimizers whose update of an element depends on sums over its whole
// tensor: LAMB (You et al. 2019) and Adafactor (Shazeer and Stern 2018).
// On a parameter server a tensor is cut into chunks that may live on
// different servers, so an update runs in phases: each chunk computes
// partial sums of a reduction over its elements (PartialSums), someone adds
// them up over the tensor's chunks in a fixed order and hands the totals
// back, and once every reduction's totals are known each chunk applies its
// part (ApplyTensorUpdate). A chunk that is its whole tensor (or that is
// updated on its own, under SSP/ASP) uses its own partials as the totals
// (ApplyWholeTensorUpdate). Nothing is written before ApplyTensorUpdate, so
// the phases can be computed again and a step given up on costs nothing.
//
// LAMB, with t the 1-based update count and bc1 = 1 - b1^t, bc2 = 1 - b2^t
// (both 1 without bias_correction):
//   m' = b1*m + (1-b1)*g;  v' = b2*v + (1-b2)*g^2
//   u  = (m'/bc1) / (sqrt(v'/bc2) + eps) + wd*w
//   r  = ||w|| / ||u|| over the whole tensor (1 if either is 0), at most
//        max_trust_ratio when that is > 0
//   w -= lr * r * u
// One reduction: [sum w^2, sum u^2].
//
// Adafactor, as Hugging Face's (transformers' Adafactor, which follows the
// paper's Algorithms 4 and 5): beta2_t = 1 - t^decay_rate; a tensor of two
// or more dimensions is factored as a matrix of (product of the leading
// dimensions) rows by (last dimension) columns, with row and column means
// of g^2 + eps1 as its second moment:
//   R'_i = beta2_t*R_i + (1-beta2_t)*mean_j(g_ij^2 + eps1)
//   C'_j = beta2_t*C_j + (1-beta2_t)*mean_i(g_ij^2 + eps1)
//   U_ij = g_ij / sqrt(R'_i / mean(R') * C'_j)
// a vector keeps a full one: v' = beta2_t*v + (1-beta2_t)*(g^2 + eps1),
// U = g / sqrt(v'). Then, over the whole tensor,
//   U /= max(1, RMS(U) / clip_threshold)
//   a  = (relative_step ? min(1e-2, 1/sqrt(t)) (warmup_init:
//        min(1e-6*t, 1/sqrt(t))) : scheduled lr)
//        * (scale_parameter ? max(eps2, RMS(w)) : 1)
//   U *= a;  with beta1 > 0: m = beta1*m + (1-beta1)*U, U = m
//   w += -wd*a*w;  w -= U
// Factored: two reductions, [column sums of g^2 + eps1..., sum R'_i,
// sum w^2] then [sum U^2]; a vector: one, [sum w^2, sum U^2]. A factored
// chunk holds whole rows (CheckTensorPart).
//
// Sums are accumulated in double; elements are computed in float.
#ifndef STRATA_OPTIM_TENSOR_UPDATE_H_
#define STRATA_OPTIM_TENSOR_UPDATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "optim/optimizer.h"

namespace strata {

// Whether `p`'s updates need sums over whole tensors (LAMB, Adafactor).
bool UsesTensorSums(const OptimizerParams& p);

// The part of a tensor one chunk holds, as these optimizers see it.
struct TensorPart {
  uint64_t numel = 0;         // this chunk's elements
  uint64_t tensor_numel = 0;  // the tensor's: sums and means are over it
  uint64_t cols = 0;          // Adafactor, factored: the last dimension; else 0
  uint64_t rows() const { return cols == 0 ? 0 : numel / cols; }
  uint64_t tensor_rows() const { return cols == 0 ? 0 : tensor_numel / cols; }
};

// The part a chunk of `numel` elements of a tensor of `shape` is, or (with
// `alone`) the part that is the chunk on its own, as its own tensor.
TensorPart PartOfTensor(const OptimizerParams& p, uint64_t numel,
                        absl::Span<const int64_t> shape, bool alone);

// OK if a chunk of `numel` elements at `offset` of a tensor of `shape` can
// be updated by `p`: a factored Adafactor chunk holds whole rows. Else
// INVALID_ARGUMENT saying so.
absl::Status CheckTensorPart(const OptimizerParams& p, uint64_t offset,
                             uint64_t numel, absl::Span<const int64_t> shape);

// The lengths of a part's state arrays, in their order: for SGD, Adam and
// AdamW as NumStateSlots says; LAMB: m, v; Adafactor factored: R (rows),
// C (cols), then m with beta1 > 0; a vector: v, then m with beta1 > 0.
std::vector<uint64_t> StateSizes(const OptimizerParams& p,
                                 const TensorPart& part);

// The number of reductions before a part's update (0 for SGD, Adam and
// AdamW).
int NumReductions(const OptimizerParams& p, const TensorPart& part);

// One update of one part: its rule, scheduled rate, 1-based count.
struct TensorStep {
  const OptimizerParams* params = nullptr;
  float lr = 0;
  int64_t t = 1;
  TensorPart part;
};

// The part's partial sums of reduction k (0 <= k < NumReductions), given
// the totals of the reductions before it. `slots` as StateSizes says.
// Reads w, the slots and g; writes nothing.
std::vector<double> PartialSums(const TensorStep& step, int k, const float* w,
                                absl::Span<const std::vector<float>> slots,
                                const float* g,
                                absl::Span<const std::vector<double>> totals);

// Applies the update, given every reduction's totals.
void ApplyTensorUpdate(const TensorStep& step, float* w,
                       absl::Span<std::vector<float>> slots, const float* g,
                       absl::Span<const std::vector<double>> totals);

// The whole update of a part that is its whole tensor (part.numel ==
// part.tensor_numel): each reduction's partials are its totals.
void ApplyWholeTensorUpdate(const TensorStep& step, float* w,
                            absl::Span<std::vector<float>> slots,
                            const float* g);

}  // namespace strata

#endif  // STRATA_OPTIM_TENSOR_UPDATE_H_
