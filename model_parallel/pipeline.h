// Pipeline parallelism: a model's layers split into stages, one per rank,
// micro-batches run in the 1F1B order (PipeDream-Flush, as Megatron-LM
// runs it): each stage runs a few forwards to fill the pipeline (warm-up),
// then alternates one forward and one backward (steady state), then drains
// the remaining backwards (cool-down). At most `stages - stage` micro-
// batches' activations are alive on a stage at once, against all of them
// for GPipe's all-forwards-then-all-backwards.
//
// The schedule is a pure function (OneFOneB); RunPipelineStep executes it on
// one rank of a Communicator whose rank r is stage r, moving activations
// forward and their gradients back with send/recv. What a stage computes
// comes in as callbacks, so the same executor runs the GPT blocks and the
// tests' small models.
#ifndef STRATA_MODEL_PARALLEL_PIPELINE_H_
#define STRATA_MODEL_PARALLEL_PIPELINE_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/communicator.h"

namespace strata {

struct PipeStep {
  enum Kind { kForward, kBackward };
  Kind kind;
  int micro_batch;
  bool operator==(const PipeStep& o) const {
    return kind == o.kind && micro_batch == o.micro_batch;
  }
};

// The 1F1B order of `stage` (0-based) of `stages` for `micro_batches`:
// min(stages - stage - 1, micro_batches) warm-up forwards, then pairs of
// (forward of the next, backward of the oldest), then the remaining
// backwards. Every micro-batch appears once as a forward and once as a
// backward, backwards in micro-batch order. REQUIRES: 0 <= stage < stages,
// micro_batches >= 1.
std::vector<PipeStep> OneFOneB(int stage, int stages, int micro_batches);

// What one stage computes, for one micro-batch at a time.
struct StageFunctions {
  // Forward of `micro_batch`: `input` is the previous stage's output (empty
  // on stage 0, which reads its own data); returns this stage's output,
  // which the next stage receives (the last stage's output is not sent: it
  // may return anything, e.g. an empty vector after recording the loss).
  std::function<absl::StatusOr<std::vector<float>>(int micro_batch,
                                                   std::vector<float> input)>
      forward;
  // Backward of `micro_batch`: `grad_output` is d(loss)/d(output) from the
  // next stage (empty on the last stage, which starts from its loss);
  // accumulates this stage's parameter gradients and returns
  // d(loss)/d(input) for the previous stage (ignored on stage 0).
  std::function<absl::StatusOr<std::vector<float>>(
      int micro_batch, std::vector<float> grad_output)>
      backward;
};

// Runs one step (`micro_batches` forwards and backwards) of stage
// comm.rank() of comm.size(), in OneFOneB's order. Stage s receives
// `boundary_elems` floats per micro-batch from stage s-1 (its input) and
// from stage s+1 (the gradient of its output); every stage must return
// outputs and input gradients of exactly that size. Sends are waited at the
// end of the step, so no stage blocks on a peer that is itself waiting to
// send. Errors: a callback's error, or the communicator's (a peer that died
// or timed out), after which the step must be abandoned on every stage.
absl::Status RunPipelineStep(Communicator& comm, int micro_batches,
                             size_t boundary_elems,
                             const StageFunctions& stage);

}  // namespace strata

#endif  // STRATA_MODEL_PARALLEL_PIPELINE_H_
