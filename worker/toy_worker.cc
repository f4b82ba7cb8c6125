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
#include "strata/v1/ledger.pb.h"

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

// The sample-weighted mean gradient over `units` (ToyGradient's over each
// run); returns the mean loss.
double UnitsGradient(const ToyProblem& p, const float* w, float b,
                     const std::vector<v1::WorkUnit>& units, float* gw,
                     float* gb) {
  std::vector<double> acc(p.dim, 0.0);
  double acc_b = 0, loss = 0;
  int64_t total = 0;
  std::vector<float> part(p.dim);
  for (const v1::WorkUnit& u : units) {
    float part_b = 0;
    loss += u.count() * ToyGradient(p, w, b, Share{u.first(), u.count()},
                                    p.samples, part.data(), &part_b);
    for (int j = 0; j < p.dim; ++j) acc[j] += u.count() * double{part[j]};
    acc_b += u.count() * double{part_b};
    total += u.count();
  }
  for (int j = 0; j < p.dim; ++j) gw[j] = static_cast<float>(acc[j] / total);
  *gb = static_cast<float>(acc_b / total);
  return loss / total;
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
      JoinAsWorker(
          SchedulerClientOptions{.scheduler_address = o.scheduler_address,
                                 .security = o.security},
          o.workers, absl::Seconds(60)));
  SchedulerClient* scheduler = session.scheduler.get();
  const Consistency mode = session.consistency;
  const int rank = session.rank;
  const int workers = session.workers;

  PsClientOptions po;
  po.security = o.security;
  STRATA_ASSIGN_OR_RETURN(auto ps, PsClient::Create(po, scheduler));
  const ModelSpec model = ToyModel(o, kind);
  // The generation the model's state is in, read before the first pulls.
  uint64_t generation = scheduler->view().generation();
  STRATA_RETURN_IF_ERROR(ps->RegisterModel(model));

  const int dim = o.problem.dim;
  std::vector<float> w(dim), gw(dim), probe(kProbeSlots),
      gprobe(kProbeSlots, 0.0f);
  float b = 0.0f, gb = 0.0f;
  gprobe[rank] = -1.0f;  // the probe slot is the rank this worker joined at
  int64_t reads = 0, violations = 0, stale = 0;
  const bool bsp = mode.mode == Consistency::kBsp;
  const v1::LedgerJob job = LedgerJobFor(ps->plan(), o.steps, o.batch,
                                         o.problem.samples, o.problem.seed);
  // SSP/ASP: the job ends when the ledger has seen every sample applied,
  // which may take this worker past --steps clocks (it took over the units
  // of a worker that died).
  bool finished = false;
  double speed = 0;  // samples/s computing, smoothed
  // The step loop of worker/trainer.cc's Run, on the toy problem: each
  // step's samples are leased from the scheduler's data ledger, and a step
  // whose view is overtaken is computed again (cluster/worker_session.h).
  StepView last;            // the view the previous step was computed in
  uint64_t prev_epoch = 0;  // its stamp epoch; 0: unknown (no redo check)
  for (int64_t step = 0;;) {
    if (std::optional<int64_t> back = AdoptRollback(*scheduler, &generation)) {
      step = *back;
      prev_epoch = 0;
      // A restarted server that held no snapshot lacks the chunks.
      STRATA_RETURN_IF_ERROR(ps->RegisterModel(model));
      continue;
    }
    const bool last_pull = bsp ? step == o.steps : finished;
    const int64_t clock = last_pull && !bsp ? -1 : step;
    const uint64_t min_version = bsp ? step : 0;
    const StepStamp pull_stamp{.epoch = prev_epoch, .generation = generation};
    std::vector<OpHandle> pulls =
        ps->PullTensorAsync(0, w.data(), clock, min_version, 0, pull_stamp);
    for (const OpHandle& op :
         ps->PullTensorAsync(1, &b, clock, min_version, 0, pull_stamp))
      pulls.push_back(op);
    const size_t model_pulls = pulls.size();
    if (o.probe && !last_pull) {
      // Stamped as the others, so a redone step-1 aborts it too.
      for (const OpHandle& op :
           ps->PullTensorAsync(2, probe.data(), step, 0, 0, pull_stamp))
        pulls.push_back(op);
    }
    if (absl::Status s = WaitAll(pulls); !s.ok()) {
      // Without a previous step to redo, ABORTED means the job rolled back.
      if (absl::IsAborted(s) && prev_epoch == 0 &&
          AwaitRollback(*scheduler, generation)) {
        continue;
      }
      if (step > 0 && absl::IsAborted(s) &&
          RedoInNewerView(*scheduler, s, last)) {
        --step;  // step-1 is redone in the new view (or the job rolled back)
        prev_epoch = 0;
        continue;
      }
      return s;
    }
    if (last_pull) break;
    uint64_t min_read = UINT64_MAX;
    for (size_t i = 0; i < model_pulls; ++i)
      min_read = std::min(min_read, pulls[i].version());
    if (bsp && min_read > static_cast<uint64_t>(step)) {
      // The job is past this step (we joined late): go on from there.
      step = std::min<int64_t>(static_cast<int64_t>(min_read), o.steps);
      prev_epoch = 0;
      continue;
    }
    // The bound holds while every worker runs; past --steps clocks a
    // worker finishing the job's last samples reads the final counts of
    // workers that already left.
    if (o.probe && step < o.steps) {
      reads++;
      for (int j = 0; j < workers; ++j) {
        // Worker j has pushed at least step - s times if the bound holds.
        if (probe[j] < static_cast<float>(step - mode.staleness)) violations++;
        if (probe[j] < static_cast<float>(step)) stale++;
      }
    }
    absl::StatusOr<StepWork> work = LeaseStepWork(*scheduler, step, job);
    if (absl::IsOutOfRange(work.status())) {
      // BSP: the job applied this step without us (we were fenced or
      // joined late): go on from the next one. SSP/ASP: every sample is
      // applied: read the final weights.
      if (bsp) ++step;
      finished = !bsp;
      prev_epoch = 0;
      continue;
    }
    if (!work.ok()) return work.status();
    const StepView& sv = work->view;
    if (sv.generation != generation) continue;  // adopt the rollback first
    if (o.delay_ms > 0)
      absl::SleepFor(absl::Milliseconds(o.delay_ms * sv.rank));
    const absl::Time t0 = absl::Now();
    const double loss =
        UnitsGradient(o.problem, w.data(), b, work->units, gw.data(), &gb);
    if (o.sample_cost_us > 0) {
      absl::SleepFor(absl::Microseconds(o.sample_cost_us * o.throttle *
                                        static_cast<double>(work->samples)));
    }
    const double rate =
        work->samples / std::max(absl::ToDoubleSeconds(absl::Now() - t0), 1e-9);
    speed = speed == 0 ? rate : 0.7 * speed + 0.3 * rate;
    const uint64_t samples = static_cast<uint64_t>(work->samples);
    const StepStamp stamp{
        .epoch = work->stamp_epoch,
        .first_sample = static_cast<uint64_t>(work->units[0].first()),
        .generation = generation};
    std::vector<OpHandle> pushes =
        ps->PushTensorAsync(0, gw.data(), step, samples, 0, stamp);
    for (const OpHandle& op :
         ps->PushTensorAsync(1, &gb, step, samples, 0, stamp))
      pushes.push_back(op);
    if (o.probe) {
      for (const OpHandle& op :
           ps->PushTensorAsync(2, gprobe.data(), step, samples, 0, stamp))
        pushes.push_back(op);
    }
    if (absl::Status s = WaitAll(pushes); !s.ok()) {
      if (RedoInNewerView(*scheduler, s, sv)) continue;
      return s;
    }
    last = sv;
    prev_epoch = work->stamp_epoch;
    scheduler->SetProgress(step + 1, speed);
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
