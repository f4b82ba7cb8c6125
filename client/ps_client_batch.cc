// PsClient's batches (PsClientOptions::batch_max_bytes): which ops may
// share a call, one PushBatch or PullBatch call for several of them, and
// each op's answer read out of the batch's. Dispatch (ps_client_impl.cc)
// forms the batches; each op's attempt ends there too (EndAttempt).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client_impl.h"
#include "cluster/scheduler_client.h"
#include "common/chunk_plan.h"
#include "common/status.h"
#include "common/wire.h"

namespace strata {

using ps_client_internal::OpPtr;
using ps_client_internal::OpState;

bool PsClient::Impl::RegionAttached(int slot) {
  if (!options_.shared_memory || tensors_ == nullptr) return false;
  absl::StatusOr<Stubs*> stubs = StubsForSlot(slot);
  if (!stubs.ok()) return false;
  absl::MutexLock lock(&stub_mu_);
  const auto& session = (*stubs)->tensors;
  return session->id != 0 && !session->refused;
}

bool PsClient::Impl::Batchable(const OpState& op, bool region_attached) const {
  if (options_.batch_max_bytes == 0 || Compressed(op) ||
      no_batches_.load(std::memory_order_relaxed)) {
    return false;
  }
  if (op.kind == OpState::kPush && op.stamp.zero) return true;
  const uint64_t bytes = plan_.chunks[op.chunk].numel * sizeof(float);
  // A payload that goes in place in the tensor region (its server holds
  // the region, and it is fp32 there, as TakePayloadPlace decides) adds
  // nothing to the batch's message, whatever its size up to a default
  // chunk's; the call's bound on payload bytes (Dispatch) keeps its work
  // on the server to one large op's.
  const bool push = op.kind == OpState::kPush;
  const v1::DType in_shm =
      push
          ? DtypeInShm(op, options_.push_dtype,
                       options_.push_fp32_through_shm && !op.encoded)
          : DtypeInShm(op, options_.pull_dtype, options_.pull_fp32_through_shm);
  if (region_attached && in_shm != v1::DTYPE_BF16 &&
      bytes <= kDefaultChunkBytes &&
      InRegion(push ? static_cast<const void*>(op.grad) : op.dst, bytes)) {
    return true;
  }
  // Payloads that could go on the bulk plane keep their own call.
  uint64_t limit = options_.batch_max_bytes;
  if (options_.wire != WireKind::kGrpc)
    limit = std::min(limit, options_.bulk_min_bytes);
  return bytes < limit;
}

uint64_t PsClient::Impl::PayloadBytes(const OpState& op) const {
  if (op.kind == OpState::kPush && op.stamp.zero) return 0;
  return plan_.chunks[op.chunk].numel * sizeof(float);
}

void PsClient::Impl::IssueBatch(std::vector<OpPtr> ops) {
  for (const OpPtr& op : ops) {
    BeginAttempt(*op);
    op->batched = true;
  }
  auto stubs = StubsForSlot(ops[0]->slot);
  if (!stubs.ok()) {
    OnBatchDone(ops, ToGrpcStatus(stubs.status()), grpc::ByteBuffer(),
                /*answered=*/false);
    return;
  }
  const v1::View view = scheduler_->view();
  const bool push = ops[0]->kind == OpState::kPush;
  v1::BatchRequest batch;
  for (const OpPtr& op : ops) {
    const grpc::ByteBuffer one =
        push ? PushMessage(op, *stubs, view) : PullMessage(op, *stubs, view);
    std::vector<grpc::Slice> slices;
    (void)one.Dump(&slices);  // a buffer this process made: cannot fail
    std::string* bytes = batch.add_requests();
    for (const grpc::Slice& slice : slices)
      bytes->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  live_attempts_.fetch_add(1, std::memory_order_relaxed);
  auto* attempt = new BatchAttempt(this, std::move(ops));  // as Attempt
  attempt->ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  grpc::Slice slice(batch.SerializeAsString());
  attempt->request = grpc::ByteBuffer(&slice, 1);
  static const std::string kPush = "/strata.v1.ParameterServer/PushBatch";
  static const std::string kPull = "/strata.v1.ParameterServer/PullBatch";
  (*stubs)->generic->PrepareUnaryCall(&attempt->ctx, push ? kPush : kPull,
                                      grpc::StubOptions(), &attempt->request,
                                      &attempt->response, attempt);
  attempt->StartCall();
}

void PsClient::BatchAttempt::OnDone(const grpc::Status& status) {
  PsClient::Impl* client = client_;
  const bool answered = ctx.GetServerTrailingMetadata().count(kHandledKey) > 0;
  client->OnBatchDone(ops_, status, response, answered);
  delete this;
  client->AttemptFinished();  // the last touch of the client, as Attempt's
}

void PsClient::Impl::OnBatchDone(const std::vector<OpPtr>& ops,
                                 const grpc::Status& grpc_status,
                                 const grpc::ByteBuffer& response,
                                 bool answered) {
  absl::Status call = FromGrpcStatus(grpc_status);
  if (absl::IsUnimplemented(call)) {
    // A server from before batches: its gRPC refused the method, so no
    // handler touched the ops' bytes. They go again, each in its own call.
    no_batches_.store(true, std::memory_order_relaxed);
    answered = true;
    call = absl::UnavailableError("the server takes no batches");
  }
  std::vector<absl::Status> statuses(ops.size(), call);
  std::vector<grpc::ByteBuffer> answers(ops.size());
  v1::BatchResponse batch;
  PayloadMessage message;
  if (grpc_status.ok()) {
    absl::Status parsed = message.Parse(response, /*field=*/0, &batch);
    if (parsed.ok() && batch.answers_size() != static_cast<int>(ops.size())) {
      parsed = absl::DataLossError(
          absl::StrCat("a batch of ", ops.size(), " requests got ",
                       batch.answers_size(), " answers"));
    }
    statuses.assign(ops.size(), parsed);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    OpState& op = *ops[i];
    op.answered = answered;
    op.shm_lost = false;
    if (!grpc_status.ok() || !statuses[i].ok()) continue;
    const v1::BatchAnswer& a = batch.answers(static_cast<int>(i));
    statuses[i] =
        absl::Status(static_cast<absl::StatusCode>(a.code()), a.message());
    op.shm_lost = a.shm_lost();
    grpc::Slice slice(a.response());
    answers[i] = grpc::ByteBuffer(&slice, 1);
  }
  std::vector<bool> retry(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    retry[i] = EndAttempt(ops[i], &statuses[i]);
  {
    absl::MutexLock lock(&mu_);
    in_flight_[ops[0]->slot]--;
  }
  Dispatch(ops[0]->slot);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!retry[i]) Complete(ops[i], statuses[i], &answers[i]);
  }
}

}  // namespace strata
