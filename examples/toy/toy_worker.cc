#include "examples/toy/toy_worker.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "cluster/step_session.h"
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

// The SSP probe's check of one read: worker j has pushed at least
// step - s times if the bound holds.
struct ProbeCounts {
  int64_t reads = 0, violations = 0, stale = 0;
  void Check(const std::vector<float>& probe, int workers, int64_t step,
             int staleness) {
    reads++;
    for (int j = 0; j < workers; ++j) {
      if (probe[j] < static_cast<float>(step - staleness)) violations++;
      if (probe[j] < static_cast<float>(step)) stale++;
    }
  }
};

absl::Status CheckToyOptions(const ToyWorkerOptions& o) {
  if (o.workers < 1 || o.workers > kProbeSlots)
    return absl::InvalidArgumentError("--workers must be in [1, 64]");
  if (o.steps < 1 || o.batch < o.workers)
    return absl::InvalidArgumentError(
        "need --steps >= 1 and --batch >= --workers");
  if (o.problem.dim < 1)
    return absl::InvalidArgumentError("--dim must be >= 1");
  return absl::OkStatus();
}

absl::Status WriteWeights(const std::string& path, const std::vector<float>& w,
                          float b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(w.data()),
          static_cast<std::streamsize>(w.size() * 4));
  f.write(reinterpret_cast<const char*>(&b), 4);
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

// The step protocol (pull, lease, push, redo, rollback) is StepSession's
// (cluster/step_session.h); this is the toy problem's compute around it.
absl::Status RunToyWorker(const ToyWorkerOptions& o) {
  STRATA_RETURN_IF_ERROR(CheckToyOptions(o));
  STRATA_ASSIGN_OR_RETURN(auto kind, OptimizerKind(o.optimizer));
  StepSessionOptions so;
  so.scheduler.scheduler_address = o.scheduler_address;
  so.scheduler.security = o.security;
  so.ps.security = o.security;
  so.ps.shared_memory = o.shared_memory;
  so.ps.wire = o.wire;
  so.ps.bulk_insecure = o.bulk_insecure;
  so.ps.bulk_min_bytes = o.bulk_min_bytes;
  so.min_workers = o.workers;
  so.lease_ahead = absl::Seconds(o.lease_ahead_s);
  so.model = ToyModel(o, kind);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StepSession> session,
                          StepSession::Create(std::move(so)));
  // SSP/ASP: the job ends when the ledger has seen every sample applied,
  // which may take this worker past --steps clocks (it took over the units
  // of a worker that died).
  STRATA_RETURN_IF_ERROR(
      session->SetJob({o.steps, o.batch, o.problem.samples, o.problem.seed}));
  const Consistency mode = session->consistency();
  const int dim = o.problem.dim;
  std::vector<float> w(dim), gw(dim), probe(kProbeSlots),
      gprobe(kProbeSlots, 0.0f);
  float b = 0.0f, gb = 0.0f;
  // The probe slot is the rank this worker joined at.
  gprobe[session->join_rank()] = -1.0f;
  ProbeCounts counts;
  std::vector<float*> buffers = {w.data(), &b};
  if (o.probe) buffers.push_back(probe.data());
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(std::optional<StepWork> work,
                            session->Begin(buffers));
    if (!work) break;
    const int64_t step = session->step();
    // The bound holds while every worker runs; past --steps clocks a
    // worker finishing the job's last samples reads the final counts of
    // workers that already left.
    if (o.probe && step < o.steps)
      counts.Check(probe, work->view.workers, step, mode.staleness);
    if (o.delay_ms > 0)
      absl::SleepFor(absl::Milliseconds(o.delay_ms * work->view.rank));
    const double loss =
        UnitsGradient(o.problem, w.data(), b, work->units, gw.data(), &gb);
    if (o.sample_cost_us > 0) {
      absl::SleepFor(absl::Microseconds(o.sample_cost_us * o.throttle *
                                        static_cast<double>(work->samples)));
    }
    absl::Status pushed = session->Push(0, gw.data());
    if (pushed.ok()) pushed = session->Push(1, &gb);
    if (pushed.ok() && o.probe) pushed = session->Push(2, gprobe.data());
    if (!pushed.ok()) {
      session->Abandon();  // the pushes sent read gw
      return pushed;
    }
    STRATA_ASSIGN_OR_RETURN(const bool applied, session->End());
    if (applied && o.log_every > 0 &&
        (step % o.log_every == 0 || step + 1 == o.steps)) {
      std::printf("worker rank %d step %lld batch_loss %.6g\n", work->view.rank,
                  static_cast<long long>(step), loss);
      std::fflush(stdout);
    }
  }
  if (o.probe) {
    std::printf("ssp_reads %lld ssp_violations %lld ssp_stale_reads %lld\n",
                static_cast<long long>(counts.reads),
                static_cast<long long>(counts.violations),
                static_cast<long long>(counts.stale));
  }
  if (session->last_view().rank == 0) {
    std::printf("final_loss %.9g\n", ToyLoss(o.problem, w.data(), b));
    if (!o.out.empty()) STRATA_RETURN_IF_ERROR(WriteWeights(o.out, w, b));
  }
  std::fflush(stdout);
  return session->Leave();
}

}  // namespace strata
