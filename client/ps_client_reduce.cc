// PsClient::ReduceStep: a BSP step's sums over whole tensors (LAMB,
// Adafactor), driven phase by phase across the servers (ps.proto Reduce).
// Each phase asks every server for its chunks' partials in parallel, adds
// them up per tensor in chunk order (so every worker sends the same
// totals), and sends the totals with the next phase's request.
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client_impl.h"
#include "cluster/scheduler_client.h"
#include "common/status.h"

namespace strata {
namespace ps_client_internal {
namespace {

bool SumsOverTensors(const v1::GroupSpec& g) {
  return g.optimizer().kind() == v1::OptimizerConfig::LAMB ||
         g.optimizer().kind() == v1::OptimizerConfig::ADAFACTOR;
}

const v1::GroupSpec* FindGroup(const std::vector<v1::GroupSpec>& groups,
                               const std::string& name) {
  for (const v1::GroupSpec& g : groups) {
    if (g.name() == name) return &g;
  }
  return nullptr;
}

}  // namespace

void AlignRows(const std::vector<v1::GroupSpec>& groups,
               std::vector<TensorSpec>& tensors) {
  for (TensorSpec& t : tensors) {
    const v1::GroupSpec* g = FindGroup(groups, t.group);
    if (g != nullptr &&
        g->optimizer().kind() == v1::OptimizerConfig::ADAFACTOR &&
        t.shape.size() >= 2 && t.shape.back() > 0) {
      t.row_elems = static_cast<uint64_t>(t.shape.back());
    }
  }
}

std::vector<int> SummedTensors(const std::vector<v1::GroupSpec>& groups,
                               const ChunkPlan& plan) {
  std::vector<int> out;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const v1::GroupSpec* g = FindGroup(groups, plan.tensors[t].group);
    if (g != nullptr && SumsOverTensors(*g) && plan.chunks_of[t].size() > 1) {
      out.push_back(static_cast<int>(t));
    }
  }
  return out;
}

}  // namespace ps_client_internal

namespace {

// More phases than any optimizer has (the servers refuse beyond 8).
constexpr int kMaxPhases = 8;

}  // namespace

absl::Status PsClient::ReduceStep(int64_t step, StepStamp stamp) {
  return impl_->ReduceStep(step, stamp);
}

bool PsClient::needs_reduce() const { return !impl_->summed_tensors_.empty(); }

absl::Status PsClient::Impl::ReduceStep(int64_t step, const StepStamp& stamp) {
  if (summed_tensors_.empty()) return absl::OkStatus();
  const v1::View view = scheduler_->view();
  // The tensors still to apply, and each chunk's partials of this phase.
  std::vector<int> open = summed_tensors_;
  std::vector<std::vector<double>> partials(plan_.chunks.size());
  std::vector<bool> applied(plan_.chunks.size(), false);
  for (int phase = 0; phase <= kMaxPhases && !open.empty(); ++phase) {
    std::map<int, v1::ReduceRequest> by_slot;
    for (int t : open) {
      // The tensor's totals of the phase before, added in chunk order.
      std::vector<double> totals;
      for (int c : plan_.chunks_of[t]) {
        const std::vector<double>& p = partials[c];
        if (totals.empty()) totals.assign(p.size(), 0.0);
        if (p.size() != totals.size()) {
          return absl::InternalError(
              absl::StrCat("tensor '", plan_.tensors[t].name,
                           "': its chunks gave ", totals.size(), " and ",
                           p.size(), " partial sums in phase ", phase - 1));
        }
        for (size_t i = 0; i < p.size(); ++i) totals[i] += p[i];
      }
      for (int c : plan_.chunks_of[t]) {
        v1::ReduceRequest& req = by_slot[plan_.chunks[c].shard];
        v1::ReduceChunk* rc = req.add_chunks();
        rc->set_chunk_id(plan_.chunks[c].id);
        if (phase > 0) *rc->mutable_totals() = {totals.begin(), totals.end()};
      }
    }
    std::vector<std::pair<int, v1::ReduceRequest*>> calls;
    for (auto& [slot, req] : by_slot) {
      req.set_member_id(scheduler_->member_id());
      req.set_epoch(stamp.epoch != 0 ? stamp.epoch : view.epoch());
      req.set_generation(stamp.generation.value_or(view.generation()));
      req.set_step(step);
      req.set_phase(phase);
      calls.emplace_back(slot, &req);
    }
    std::vector<absl::StatusOr<v1::ReduceResponse>> answers(
        calls.size(), absl::UnknownError("not sent"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < calls.size(); ++i) {
      threads.emplace_back([this, &calls, &answers, i] {
        answers[i] = CallReduce(calls[i].first, *calls[i].second);
      });
    }
    for (std::thread& t : threads) t.join();
    absl::flat_hash_map<uint64_t, int> index_of;
    for (int t : open) {
      for (int c : plan_.chunks_of[t]) index_of[plan_.chunks[c].id] = c;
    }
    for (const absl::StatusOr<v1::ReduceResponse>& a : answers) {
      STRATA_RETURN_IF_ERROR(a.status());
      for (const v1::ReducePartials& p : a->chunks()) {
        auto it = index_of.find(p.chunk_id());
        if (it == index_of.end()) continue;
        partials[it->second].assign(p.partials().begin(), p.partials().end());
        applied[it->second] = p.applied();
      }
    }
    std::erase_if(open, [&](int t) {
      for (int c : plan_.chunks_of[t]) {
        if (!applied[c]) return false;
      }
      return true;
    });
  }
  if (!open.empty()) {
    return absl::InternalError(
        absl::StrCat("step ", step, " of tensor '", plan_.tensors[open[0]].name,
                     "' did not apply after ", kMaxPhases, " phases of sums"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ReduceResponse> PsClient::Impl::CallReduce(
    int slot, const v1::ReduceRequest& req) {
  absl::Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) absl::SleepFor(Backoff(attempt));
    absl::StatusOr<v1::ParameterServer::Stub*> stub = StubForSlot(slot);
    if (!stub.ok()) {
      last = stub.status();
    } else {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
      v1::ReduceResponse resp;
      last = FromGrpcStatus((*stub)->Reduce(&ctx, req, &resp));
      if (last.ok()) return resp;
    }
    if (!IsRetryable(last)) break;
  }
  return last;
}

}  // namespace strata
