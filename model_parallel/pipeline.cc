#include "model_parallel/pipeline.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace strata {

std::vector<PipeStep> OneFOneB(int stage, int stages, int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  std::vector<PipeStep> steps;
  int next_forward = 0, next_backward = 0;
  for (int i = 0; i < warmup; ++i) {
    steps.push_back({PipeStep::kForward, next_forward++});
  }
  while (next_forward < micro_batches) {
    steps.push_back({PipeStep::kForward, next_forward++});
    steps.push_back({PipeStep::kBackward, next_backward++});
  }
  while (next_backward < micro_batches) {
    steps.push_back({PipeStep::kBackward, next_backward++});
  }
  return steps;
}

namespace {

// Tags: a micro-batch's activation and its gradient travel on their own.
uint32_t ActivationTag(int micro_batch) { return 2 * uint32_t(micro_batch); }
uint32_t GradientTag(int micro_batch) { return 2 * uint32_t(micro_batch) + 1; }

// Sends in flight and the buffers they read, kept until the end of the step.
struct Outbox {
  std::deque<std::vector<float>> buffers;
  std::vector<std::shared_ptr<Work>> works;

  void Send(Communicator& comm, std::vector<float> data, int peer,
            uint32_t tag) {
    buffers.push_back(std::move(data));
    works.push_back(comm.SendAsync(buffers.back(), peer, tag));
  }
  absl::Status WaitAll() {
    absl::Status first;
    for (auto& w : works) first.Update(w->Wait());
    return first;
  }
};

absl::Status CheckSize(const std::vector<float>& v, size_t want,
                       const char* what, int micro_batch) {
  if (v.size() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline stage returned a ", what, " of ", v.size(),
                   " elements for micro-batch ", micro_batch, ", want ", want));
}

}  // namespace

absl::Status RunPipelineStep(Communicator& comm, int micro_batches,
                             size_t boundary_elems,
                             const StageFunctions& stage) {
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro_batches must be >= 1, got ", micro_batches));
  }
  const int s = comm.rank(), last = comm.size() - 1;
  Outbox outbox;
  absl::Status status;
  for (const PipeStep& step : OneFOneB(s, comm.size(), micro_batches)) {
    const int mb = step.micro_batch;
    if (step.kind == PipeStep::kForward) {
      std::vector<float> input;
      if (s > 0) {
        input.resize(boundary_elems);
        status = comm.Recv(absl::MakeSpan(input), s - 1, ActivationTag(mb));
        if (!status.ok()) break;
      }
      absl::StatusOr<std::vector<float>> output =
          stage.forward(mb, std::move(input));
      if (!output.ok()) {
        status = output.status();
        break;
      }
      if (s < last) {
        status = CheckSize(*output, boundary_elems, "forward output", mb);
        if (!status.ok()) break;
        outbox.Send(comm, *std::move(output), s + 1, ActivationTag(mb));
      }
    } else {
      std::vector<float> grad_output;
      if (s < last) {
        grad_output.resize(boundary_elems);
        status = comm.Recv(absl::MakeSpan(grad_output), s + 1, GradientTag(mb));
        if (!status.ok()) break;
      }
      absl::StatusOr<std::vector<float>> grad_input =
          stage.backward(mb, std::move(grad_output));
      if (!grad_input.ok()) {
        status = grad_input.status();
        break;
      }
      if (s > 0) {
        status = CheckSize(*grad_input, boundary_elems, "input gradient", mb);
        if (!status.ok()) break;
        outbox.Send(comm, *std::move(grad_input), s - 1, GradientTag(mb));
      }
    }
  }
  // A stage that stops early fails its communicator, so the peers' sends
  // and recvs end too (the sends' buffers stay alive until they do).
  if (!status.ok()) comm.Abort();
  absl::Status sent = outbox.WaitAll();
  return status.ok() ? sent : status;
}

}  // namespace strata
