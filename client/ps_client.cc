#include "client/ps_client.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "client/ps_client_impl.h"
#include "cluster/scheduler_client.h"
#include "common/status.h"

namespace strata {

using ps_client_internal::OpPtr;
using ps_client_internal::OpState;

absl::Status OpHandle::Wait() const {
  if (!state_) return absl::FailedPreconditionError("empty OpHandle");
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(&state_->finished));
  return state_->status;
}

bool OpHandle::done() const {
  if (!state_) return true;
  absl::MutexLock lock(&state_->mu);
  return state_->finished;
}

uint64_t OpHandle::version() const {
  absl::MutexLock lock(&state_->mu);
  return state_->version;
}

int64_t OpHandle::min_clock() const {
  absl::MutexLock lock(&state_->mu);
  return state_->min_clock;
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    PsClientOptions options, SchedulerClient* scheduler) {
  if (scheduler == nullptr)
    return absl::InvalidArgumentError("PsClient needs a SchedulerClient");
  if (options.max_in_flight_per_server < 1) {
    return absl::InvalidArgumentError("max_in_flight_per_server must be >= 1");
  }
  if (options.batch_max_requests < 1 || options.batch_max_requests > 4096) {
    // 4096: the most a server takes in one batch (ps.proto PushBatch).
    return absl::InvalidArgumentError("batch_max_requests is in [1, 4096]");
  }
  if (options.max_attempts < 1)
    return absl::InvalidArgumentError("max_attempts must be >= 1");
  if (!(options.topk_momentum >= 0 && options.topk_momentum < 1) ||
      (options.topk_momentum > 0 && options.push_compress != v1::DTYPE_TOPK)) {
    return absl::InvalidArgumentError(
        "topk_momentum is in [0, 1), and for TOPK pushes only");
  }
  if (options.push_compress == v1::DTYPE_TOPK &&
      !(options.topk_ratio > 0 && options.topk_ratio <= 1)) {
    return absl::InvalidArgumentError("topk_ratio is in (0, 1]");
  }
  return std::unique_ptr<PsClient>(
      new PsClient(std::make_unique<Impl>(std::move(options), scheduler)));
}

absl::Status PsClient::RegisterModel(const ModelSpec& model) {
  return impl_->RegisterModel(model);
}
absl::Status PsClient::RegisterModelAgain() {
  if (!impl_->model_.has_value()) {
    return absl::FailedPreconditionError(
        "RegisterModelAgain before RegisterModel");
  }
  return impl_->RegisterModel(*impl_->model_);
}
const ChunkPlan& PsClient::plan() const { return impl_->plan_; }

void PsClient::ShareTensors(std::shared_ptr<ShmRegion> region) {
  impl_->ShareTensors(std::move(region));
}

OpHandle PsClient::Handle(std::shared_ptr<OpState> op) {
  return OpHandle(std::move(op));
}

OpHandle PsClient::FailedOp(absl::Status status) {
  auto op = std::make_shared<OpState>();
  op->Finish(std::move(status), 0, 0);
  return OpHandle(std::move(op));
}

namespace {

absl::Status CheckIndex(const char* what, int index, size_t size) {
  if (index < 0 || static_cast<size_t>(index) >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " index ", index, " is not in the registered model (", size,
        "; did RegisterModel succeed?)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WaitAll(const std::vector<OpHandle>& ops) {
  absl::Status first;
  for (const OpHandle& op : ops) first.Update(op.Wait());
  return first;
}

absl::StatusOr<std::shared_ptr<OpState>> PsClient::NewOp(int kind, int chunk,
                                                         int priority) const {
  STRATA_RETURN_IF_ERROR(
      CheckIndex("chunk", chunk, impl_->plan_.chunks.size()));
  auto op = std::make_shared<OpState>();
  op->kind = static_cast<OpState::Kind>(kind);
  op->chunk = chunk;
  op->slot = impl_->plan_.chunks[chunk].shard;
  op->priority = priority;
  return op;
}

absl::StatusOr<OpPtr> PsClient::PushOp(int chunk, const float* grad,
                                       int64_t step, uint64_t samples,
                                       int priority, StepStamp stamp) {
  STRATA_ASSIGN_OR_RETURN(OpPtr op, NewOp(OpState::kPush, chunk, priority));
  if (stamp.deferred) impl_->CountDeferred(step, op->slot);
  op->stamp = stamp;
  op->grad = grad;
  op->step = step;
  op->samples = samples;
  return op;
}

absl::StatusOr<OpPtr> PsClient::PullOp(int chunk, float* dst, int64_t clock,
                                       uint64_t min_version, int priority,
                                       StepStamp stamp) const {
  STRATA_ASSIGN_OR_RETURN(OpPtr op, NewOp(OpState::kPull, chunk, priority));
  op->stamp = stamp;
  op->dst = dst;
  op->step = clock;
  op->min_version = min_version;
  return op;
}

OpHandle PsClient::Push(int chunk, const float* grad, int64_t step,
                        uint64_t samples, int priority, StepStamp stamp) {
  absl::StatusOr<OpPtr> op =
      PushOp(chunk, grad, step, samples, priority, stamp);
  if (!op.ok()) return FailedOp(op.status());
  return impl_->Submit({*std::move(op)})[0];
}

OpHandle PsClient::Pull(int chunk, float* dst, int64_t clock,
                        uint64_t min_version, int priority, StepStamp stamp) {
  absl::StatusOr<OpPtr> op =
      PullOp(chunk, dst, clock, min_version, priority, stamp);
  if (!op.ok()) return FailedOp(op.status());
  return impl_->Submit({*std::move(op)})[0];
}

std::vector<OpHandle> PsClient::PerChunk(
    int tensor, absl::FunctionRef<absl::StatusOr<OpPtr>(int, uint64_t)> op) {
  const ChunkPlan& plan = impl_->plan_;
  if (absl::Status s = CheckIndex("tensor", tensor, plan.chunks_of.size());
      !s.ok()) {
    return {FailedOp(s)};
  }
  std::vector<OpPtr> ops;
  ops.reserve(plan.chunks_of[tensor].size());
  for (int c : plan.chunks_of[tensor]) {
    absl::StatusOr<OpPtr> one = op(c, plan.chunks[c].offset);
    if (!one.ok()) return {FailedOp(one.status())};  // none submitted yet
    if (*one != nullptr) ops.push_back(*std::move(one));
  }
  // Submitted together: the chunks queued for one server may share a
  // call (PsClientOptions::batch_max_bytes).
  return impl_->Submit(std::move(ops));
}

std::vector<OpHandle> PsClient::PushTensorAsync(int tensor, const float* grad,
                                                int64_t step, uint64_t samples,
                                                int priority, StepStamp stamp) {
  return PerChunk(tensor, [&](int chunk, uint64_t offset) {
    if (stamp.share_stride > 1 &&
        chunk % stamp.share_stride != stamp.share_index) {
      return absl::StatusOr<OpPtr>(nullptr);  // another member's share
    }
    return PushOp(chunk, grad + offset, step, samples, priority, stamp);
  });
}

std::vector<OpHandle> PsClient::PullTensorAsync(int tensor, float* dst,
                                                int64_t clock,
                                                uint64_t min_version,
                                                int priority, StepStamp stamp) {
  return PerChunk(tensor, [&](int chunk, uint64_t offset) {
    return PullOp(chunk, dst + offset, clock, min_version, priority, stamp);
  });
}

absl::Status PsClient::PushTensor(int tensor, const float* grad, int64_t step,
                                  uint64_t samples, int priority) {
  return WaitAll(PushTensorAsync(tensor, grad, step, samples, priority));
}

absl::Status PsClient::PullTensor(int tensor, float* dst, int64_t clock,
                                  uint64_t min_version, int priority) {
  return WaitAll(PullTensorAsync(tensor, dst, clock, min_version, priority));
}

void PsClient::ForgetDeferred(int64_t step) { impl_->ForgetDeferred(step); }

void PsClient::ForgetPushErrors() { impl_->ForgetPushErrors(); }

absl::Status PsClient::Commit(int64_t step, float scale) {
  const std::vector<uint32_t> pushes = impl_->TakeDeferred(step);
  std::vector<absl::Status> results(pushes.size());
  std::vector<std::thread> calls;
  for (int slot = 0; slot < static_cast<int>(pushes.size()); ++slot) {
    if (pushes[slot] == 0) continue;
    calls.emplace_back([&, slot] {
      v1::CommitRequest req;
      req.set_member_id(impl_->scheduler_->member_id());
      req.set_step(step);
      req.set_scale(scale);
      req.set_pushes(pushes[slot]);
      absl::Status last;
      for (int attempt = 0; attempt < impl_->options_.max_attempts; ++attempt) {
        auto stub = impl_->StubForSlot(slot);
        if (stub.ok()) {
          grpc::ClientContext ctx;
          ctx.set_deadline(
              absl::ToChronoTime(absl::Now() + impl_->options_.rpc_timeout));
          v1::CommitResponse resp;
          last = FromGrpcStatus((*stub)->Commit(&ctx, req, &resp));
        } else {
          last = stub.status();
        }
        if (!IsRetryable(last)) break;
        absl::SleepFor(impl_->Backoff(attempt + 1));
      }
      results[slot] = last;
    });
  }
  for (std::thread& t : calls) t.join();
  absl::Status first;
  for (const absl::Status& s : results) first.Update(s);
  return first;
}

absl::StatusOr<std::vector<v1::StatsResponse>> PsClient::Stats() {
  std::vector<v1::StatsResponse> out(impl_->num_slots_);
  for (int slot = 0; slot < impl_->num_slots_; ++slot) {
    STRATA_ASSIGN_OR_RETURN(auto* stub, impl_->StubForSlot(slot));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    STRATA_RETURN_IF_ERROR(
        FromGrpcStatus(stub->Stats(&ctx, v1::StatsRequest(), &out[slot])));
  }
  return out;
}

v1::WirePaths PsClient::WirePaths() { return impl_->WirePaths(); }

absl::Status PsClient::SnapshotAll(int64_t step) {
  for (int slot = 0; slot < impl_->num_slots_; ++slot) {
    STRATA_ASSIGN_OR_RETURN(auto* stub, impl_->StubForSlot(slot));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(300)));
    v1::SnapshotRequest req;
    req.set_step(step);
    v1::SnapshotResponse resp;
    STRATA_RETURN_IF_ERROR(FromGrpcStatus(stub->Snapshot(&ctx, req, &resp)));
  }
  return absl::OkStatus();
}

}  // namespace strata
