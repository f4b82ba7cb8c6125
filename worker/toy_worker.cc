#include "worker/toy_worker.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/scheduler_client.h"
#include "cluster/worker_session.h"
#include "common/consistency.h"
#include "common/status.h"
#include "common/work_share.h"

namespace strata {
namespace {

constexpr int kProbeSlots = 64;

absl::StatusOr<v1::OptimizerConfig::Kind> OptimizerKind(
    const std::string& name) {
  if (name == "sgd") return v1::OptimizerConfig::SGD;
  if (name == "adam") return v1::OptimizerConfig::ADAM;
  if (name == "adamw") return v1::OptimizerConfig::ADAMW;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (sgd|adam|adamw)"));
}

ModelSpec ToyModel(const ToyWorkerOptions& o, v1::OptimizerConfig::Kind kind) {
  ModelSpec m;
  m.chunk_bytes = o.chunk_bytes;
  m.tensors.push_back({"w", {o.problem.dim}, "main"});
  m.tensors.push_back({"b", {1}, "main"});
  m.inits.resize(2);  // zeros
  v1::GroupSpec main;
  main.set_name("main");
  main.mutable_optimizer()->set_kind(kind);
  main.mutable_optimizer()->set_lr(o.lr);
  m.groups.push_back(main);
  if (o.probe) {
    m.tensors.push_back({"probe", {kProbeSlots}, "probe"});
    m.inits.emplace_back();
    v1::GroupSpec probe;  // SGD, lr 1: each -1 gradient adds exactly 1
    probe.set_name("probe");
    probe.mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
    probe.mutable_optimizer()->set_lr(1.0f);
    m.groups.push_back(probe);
  }
  return m;
}

}  // namespace

absl::Status RunToyWorker(const ToyWorkerOptions& o) {
  if (o.workers < 1 || o.workers > kProbeSlots)
    return absl::InvalidArgumentError("--workers must be in [1, 64]");
  if (o.steps < 1 || o.batch < o.workers)
    return absl::InvalidArgumentError(
        "need --steps >= 1 and --batch >= --workers");
  if (o.problem.dim < 1)
    return absl::InvalidArgumentError("--dim must be >= 1");
  STRATA_ASSIGN_OR_RETURN(auto kind, OptimizerKind(o.optimizer));

  STRATA_ASSIGN_OR_RETURN(
      WorkerSession session,
      JoinAsWorker(o.scheduler_address, o.workers, absl::Seconds(60)));
  SchedulerClient* scheduler = session.scheduler.get();
  const Consistency mode = session.consistency;
  const int rank = session.rank;
  const int workers = session.workers;

  STRATA_ASSIGN_OR_RETURN(auto ps,
                          PsClient::Create(PsClientOptions(), scheduler));
  STRATA_RETURN_IF_ERROR(ps->RegisterModel(ToyModel(o, kind)));

  const int dim = o.problem.dim;
  std::vector<float> w(dim), gw(dim), probe(kProbeSlots),
      gprobe(kProbeSlots, 0.0f);
  float b = 0.0f, gb = 0.0f;
  gprobe[rank] = -1.0f;  // the probe slot is the rank this worker joined at
  int64_t reads = 0, violations = 0, stale = 0;
  const bool bsp = mode.mode == Consistency::kBsp;
  // The step loop of worker/trainer.cc's Run, on the toy problem: shares
  // follow the view each step is computed in, and a step whose view is
  // overtaken is computed again (cluster/worker_session.h).
  StepView last;            // the view the previous step was computed in
  uint64_t prev_epoch = 0;  // its epoch; 0: unknown (no redo check)
  for (int64_t step = 0;;) {
    const int64_t clock = step == o.steps && !bsp ? -1 : step;
    const uint64_t min_version = bsp ? step : 0;
    const StepStamp pull_stamp{.epoch = prev_epoch};
    std::vector<OpHandle> pulls =
        ps->PullTensorAsync(0, w.data(), clock, min_version, 0, pull_stamp);
    for (const OpHandle& op :
         ps->PullTensorAsync(1, &b, clock, min_version, 0, pull_stamp))
      pulls.push_back(op);
    const size_t model_pulls = pulls.size();
    if (o.probe && step < o.steps) {
      // Stamped as the others, so a redone step-1 aborts it too.
      for (const OpHandle& op :
           ps->PullTensorAsync(2, probe.data(), step, 0, 0, pull_stamp))
        pulls.push_back(op);
    }
    if (absl::Status s = WaitAll(pulls); !s.ok()) {
      if (step > 0 && absl::IsAborted(s) &&
          RedoInNewerView(*scheduler, s, last)) {
        --step;  // step-1 is redone in the new view
        prev_epoch = 0;
        continue;
      }
      return s;
    }
    if (step == o.steps) break;
    uint64_t min_read = UINT64_MAX;
    for (size_t i = 0; i < model_pulls; ++i)
      min_read = std::min(min_read, pulls[i].version());
    if (bsp && min_read > static_cast<uint64_t>(step)) {
      // The job is past this step (we joined late): go on from there.
      step = std::min<int64_t>(static_cast<int64_t>(min_read), o.steps);
      prev_epoch = 0;
      continue;
    }
    if (o.probe) {
      reads++;
      for (int j = 0; j < workers; ++j) {
        // Worker j has pushed at least step - s times if the bound holds.
        if (probe[j] < static_cast<float>(step - mode.staleness)) violations++;
        if (probe[j] < static_cast<float>(step)) stale++;
      }
    }
    STRATA_ASSIGN_OR_RETURN(const StepView sv, CurrentStepView(*scheduler));
    if (o.delay_ms > 0)
      absl::SleepFor(absl::Milliseconds(o.delay_ms * sv.rank));
    if (sv.workers > o.batch) {
      return absl::FailedPreconditionError(
          absl::StrCat(sv.workers, " live workers but --batch ", o.batch,
                       ": every worker needs at least one sample per step"));
    }
    const Share share = ShareOf(step, o.batch, sv.rank, sv.workers);
    const double loss = ToyGradient(o.problem, w.data(), b, share,
                                    o.problem.samples, gw.data(), &gb);
    const StepStamp stamp{.epoch = sv.epoch,
                          .first_sample = static_cast<uint64_t>(share.first)};
    std::vector<OpHandle> pushes =
        ps->PushTensorAsync(0, gw.data(), step, share.count, 0, stamp);
    for (const OpHandle& op :
         ps->PushTensorAsync(1, &gb, step, share.count, 0, stamp))
      pushes.push_back(op);
    if (o.probe) {
      for (const OpHandle& op :
           ps->PushTensorAsync(2, gprobe.data(), step, share.count, 0, stamp))
        pushes.push_back(op);
    }
    if (absl::Status s = WaitAll(pushes); !s.ok()) {
      if (RedoInNewerView(*scheduler, s, sv)) continue;
      return s;
    }
    last = sv;
    prev_epoch = sv.epoch;
    scheduler->SetProgress(step + 1, 0.0);
    if (o.log_every > 0 && (step % o.log_every == 0 || step + 1 == o.steps)) {
      std::printf("worker rank %d step %lld batch_loss %.6g\n", sv.rank,
                  static_cast<long long>(step), loss);
      std::fflush(stdout);
    }
    ++step;
  }
  if (o.probe) {
    std::printf("ssp_reads %lld ssp_violations %lld ssp_stale_reads %lld\n",
                static_cast<long long>(reads),
                static_cast<long long>(violations),
                static_cast<long long>(stale));
  }
  if (last.rank == 0) {
    std::printf("final_loss %.9g\n", ToyLoss(o.problem, w.data(), b));
    if (!o.out.empty()) {
      std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(w.data()), dim * 4);
      f.write(reinterpret_cast<const char*>(&b), 4);
      if (!f) return absl::InternalError(absl::StrCat("cannot write ", o.out));
    }
  }
  std::fflush(stdout);
  return scheduler->Leave();
}

}  // namespace strata
