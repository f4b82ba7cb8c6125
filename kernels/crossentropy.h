// Softmax cross-entropy over logits, fused with the softmax.
#ifndef STRATA_KERNELS_CROSSENTROPY_H_
#define STRATA_KERNELS_CROSSENTROPY_H_

#include <cstdint>

namespace strata::kernels {

// losses[n] = -log softmax(logits[n,:])[targets[n]].
// losses is (N), logits is (N,V), targets is (N).
// REQUIRES: every target in [0, V).
void CrossEntropyForward(float* losses, const float* logits,
                         const int32_t* targets, int N, int V);

// Forward and backward in one pass over each row: losses as above, and
// logits is overwritten with dL/dlogits = (softmax(logits) - onehot(target))
// * dloss, the gradient of dloss * sum(losses). Returns sum(losses) (in
// double, then rounded).
// logits is (N,V) in and out, targets is (N), losses is (N) or null.
float SoftmaxCrossEntropyFused(float* logits, const int32_t* targets,
                               float dloss, float* losses, int N, int V);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CROSSENTROPY_H_
