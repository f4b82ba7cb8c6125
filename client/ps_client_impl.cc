#include "client/ps_client_impl.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cluster/scheduler_client.h"
#include "common/bf16.h"
#include "common/status.h"
#include "common/wire.h"

namespace strata {

using ps_client_internal::AlignRows;
using ps_client_internal::OpPtr;
using ps_client_internal::OpState;
using ps_client_internal::SummedTensors;

PsClient::Impl::Impl(PsClientOptions options, SchedulerClient* scheduler)
    : options_(std::move(options)), scheduler_(scheduler) {
  timer_ = std::thread([this] { TimerLoop(); });
}

PsClient::Impl::~Impl() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Impl* i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i->mu_) {
          return i->outstanding_ == 0;
        },
        this));
    stopping_ = true;
  }
  timer_.join();
  // Every op is complete, but the callbacks that completed them may still
  // be returning through this object: wait until each has made its last
  // access. Polled, not signalled, because a signal would itself touch
  // this object after the count reached zero.
  while (live_attempts_.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

absl::StatusOr<PsClient::Impl::Stubs*> PsClient::Impl::StubsForSlot(int slot) {
  const std::string address = scheduler_->ShardAddress(slot);
  if (address.empty()) {
    return absl::UnavailableError(
        absl::StrCat("shard slot ", slot, " has no live server"));
  }
  absl::MutexLock lock(&stub_mu_);
  auto& stubs = stubs_[address];
  if (!stubs) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    auto channel = options_.security->Dial(address, Role::kServer, args);
    stubs = std::make_unique<Stubs>();
    stubs->typed = v1::ParameterServer::NewStub(channel);
    stubs->generic = std::make_unique<grpc::GenericStub>(channel);
  }
  return stubs.get();
}

std::vector<OpHandle> PsClient::Impl::Submit(std::vector<OpPtr> ops) {
  std::vector<int> slots;
  {
    absl::MutexLock lock(&mu_);
    for (const OpPtr& op : ops) {
      op->seq = next_seq_++;
      outstanding_++;
      queues_[op->slot].push(op);
      if (std::find(slots.begin(), slots.end(), op->slot) == slots.end())
        slots.push_back(op->slot);
    }
  }
  for (int slot : slots) Dispatch(slot);
  std::vector<OpHandle> handles;
  handles.reserve(ops.size());
  for (OpPtr& op : ops) handles.push_back(PsClient::Handle(std::move(op)));
  return handles;
}

void PsClient::Impl::Dispatch(int slot) {
  std::vector<std::vector<OpPtr>> calls;
  // Read before the queue's lock; should the session end meanwhile, a
  // batched op's payload goes in the message (at most a call's 4 MiB).
  const bool region = RegionAttached(slot);
  {
    absl::MutexLock lock(&mu_);
    auto& q = queues_[slot];
    while (!q.empty() && in_flight_[slot] < options_.max_in_flight_per_server) {
      std::vector<OpPtr> call = {q.top()};
      q.pop();
      if (Batchable(*call[0], region)) {
        // The queue spread over the calls free now: each takes its share
        // of the ops at the queue's head that may go with the first, up
        // to a default chunk's bytes.
        const size_t free =
            options_.max_in_flight_per_server - in_flight_[slot];
        const size_t share = std::min<size_t>((q.size() + 1 + free - 1) / free,
                                              options_.batch_max_requests);
        uint64_t bytes = PayloadBytes(*call[0]);
        while (call.size() < share && !q.empty() &&
               q.top()->kind == call[0]->kind && Batchable(*q.top(), region) &&
               bytes + PayloadBytes(*q.top()) <= kDefaultChunkBytes) {
          bytes += PayloadBytes(*q.top());
          call.push_back(q.top());
          q.pop();
        }
      }
      in_flight_[slot]++;
      calls.push_back(std::move(call));
    }
  }
  for (std::vector<OpPtr>& call : calls) {
    if (call.size() == 1) {
      Issue(call[0]);
    } else {
      IssueBatch(std::move(call));
    }
  }
}

void PsClient::Impl::BeginAttempt(OpState& op) {
  op.batched = false;
  op.attempts++;
  op.answered = op.shm_lost = false;
  op.bulk_payload = false;  // set again by TakeBulk for this attempt
  op.bulk_into = nullptr;
}

void PsClient::Impl::Issue(const OpPtr& op) {
  BeginAttempt(*op);
  auto stubs = StubsForSlot(op->slot);
  if (!stubs.ok()) {
    OnDone(op, ToGrpcStatus(stubs.status()), grpc::ByteBuffer());
    return;
  }
  live_attempts_.fetch_add(1, std::memory_order_relaxed);
  auto* attempt = new Attempt(this, op);  // deletes itself in OnDone
  attempt->ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  const v1::View view = scheduler_->view();
  static const std::string kPush = "/strata.v1.ParameterServer/Push";
  static const std::string kPull = "/strata.v1.ParameterServer/Pull";
  const bool push = op->kind == OpState::kPush;
  attempt->request =
      push ? PushMessage(op, *stubs, view) : PullMessage(op, *stubs, view);
  (*stubs)->generic->PrepareUnaryCall(&attempt->ctx, push ? kPush : kPull,
                                      grpc::StubOptions(), &attempt->request,
                                      &attempt->response, attempt);
  attempt->StartCall();
}

v1::PushRequest PsClient::Impl::PushHeader(const OpState& op,
                                           const v1::View& view) const {
  v1::PushRequest header;
  header.set_member_id(scheduler_->member_id());
  header.set_epoch(op.stamp.epoch != 0 ? op.stamp.epoch : view.epoch());
  header.set_first_sample(op.stamp.first_sample);
  header.set_generation(op.stamp.generation.value_or(view.generation()));
  header.set_chunk_id(plan_.chunks[op.chunk].id);
  header.set_step(op.step);
  header.set_num_samples(op.samples);
  header.set_deferred(op.stamp.deferred);
  header.set_whole_step(op.stamp.whole_step);
  header.set_zero(op.stamp.zero);
  header.set_async_lr_scale(op.stamp.async_lr_scale);
  // So a late read of an attempt given up on cannot replace its retry.
  header.set_push_seq(op.seq + 1);
  header.set_attempt(static_cast<uint32_t>(op.attempts));
  return header;
}

grpc::ByteBuffer PsClient::Impl::PushMessage(const OpPtr& op, Stubs* stubs,
                                             const v1::View& view) {
  const ChunkInfo& chunk = plan_.chunks[op->chunk];
  if (op->stamp.zero) {
    grpc::Slice slice(PushHeader(*op, view).SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }
  if (Compressed(*op)) {
    v1::PushRequest header = PushHeader(*op, view);
    return CompressedPush(op, stubs, header);
  }
  // fp32 through shared memory when so configured, unless an earlier
  // attempt already sent (and carried the error of) bf16 bytes.
  v1::DType dtype = options_.push_dtype;
  v1::ShmRef place;
  const bool in_shm = TakePayloadPlace(
      op, stubs, options_.push_fp32_through_shm && !op->encoded, op->grad,
      &dtype, &place);
  const size_t bytes = chunk.numel * ElementBytes(dtype);
  v1::PushRequest header = PushHeader(*op, view);
  header.set_dtype(dtype);
  if (in_shm) {
    // One copy (or conversion) into the shared slot, or none from the
    // tensor region; the server copies it out. The message carries only
    // the payload's place.
    char* slot = op->shm_slot.data;
    if (op->tensors) {
      // In place, where the caller's gradient is.
    } else if (dtype == v1::DTYPE_BF16 && !op->bf16.empty()) {
      std::memcpy(slot, op->bf16.data(), bytes);  // a retry: as sent before
    } else if (dtype == v1::DTYPE_BF16) {
      EncodeBf16(*op, reinterpret_cast<uint16_t*>(slot));
    } else {
      std::memcpy(slot, op->grad, bytes);
    }
    *header.mutable_shm() = place;
    grpc::Slice slice(header.SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }
  // The payload slice points at the caller's buffer (no copy); the caller
  // keeps it alive until the handle is done.
  const void* payload = op->grad;
  if (dtype == v1::DTYPE_BF16) {
    if (op->bf16.empty()) {
      op->bf16.resize(bytes);
      EncodeBf16(*op, reinterpret_cast<uint16_t*>(op->bf16.data()));
    }
    payload = op->bf16.data();
  }
  if (v1::BulkRef ref;
      TakeBulk(op, stubs, const_cast<void*>(payload), bytes, &ref)) {
    *header.mutable_bulk() = ref;
    grpc::Slice slice(header.SerializeAsString());
    return grpc::ByteBuffer(&slice, 1);
  }
  return SerializeWithPayload(header, v1::PushRequest::kDataFieldNumber,
                              payload, bytes);
}

grpc::ByteBuffer PsClient::Impl::PullMessage(const OpPtr& op, Stubs* stubs,
                                             const v1::View& view) {
  v1::PullRequest req;
  req.set_member_id(scheduler_->member_id());
  req.set_chunk_id(plan_.chunks[op->chunk].id);
  req.set_clock(op->step);
  req.set_min_version(op->min_version);
  req.set_epoch(op->stamp.epoch);
  req.set_generation(op->stamp.generation.value_or(view.generation()));
  v1::DType dtype = options_.pull_dtype;
  v1::ShmRef place;
  if (Compressed(*op)) {
    dtype = options_.pull_compress;
    CompressedPullFields(*op, &req);
  } else if (TakePayloadPlace(op, stubs, options_.pull_fp32_through_shm,
                              op->dst, &dtype, &place)) {
    *req.mutable_shm() = place;
  } else if (v1::BulkRef ref; TakeBulkPull(op, stubs, dtype, &ref)) {
    *req.mutable_bulk() = ref;
  }
  req.set_dtype(dtype);
  op->pull_dtype = dtype;  // ReadResponse reads this attempt's answer
  grpc::Slice slice(req.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

void PsClient::Attempt::OnDone(const grpc::Status& status) {
  PsClient::Impl* client = client_;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  op_->answered = trailers.count(kHandledKey) > 0;
  op_->shm_lost = trailers.count(kShmLostKey) > 0;
  client->OnDone(op_, status, response);
  delete this;  // the call's context and buffers, while the client lives
  // The last touch of the client: its destructor waits for this count to
  // reach zero before it tears down channels and its mutex, so no callback
  // thread is still inside them (they would be freed under it: a gRPC
  // reference-count assertion at exit, about one run in 40 under load).
  client->AttemptFinished();
}

void PsClient::Impl::OnDone(const OpPtr& op, const grpc::Status& grpc_status,
                            const grpc::ByteBuffer& response) {
  absl::Status status = FromGrpcStatus(grpc_status);
  const bool retry = EndAttempt(op, &status);
  {
    absl::MutexLock lock(&mu_);
    in_flight_[op->slot]--;
  }
  Dispatch(op->slot);
  // Last: once the op completes, the destructor may start (it then waits
  // for the calling attempt's AttemptFinished).
  if (!retry) Complete(op, status, &response);
}

bool PsClient::Impl::EndAttempt(const OpPtr& op, absl::Status* status) {
  *status = EndBulkAttempt(op, std::move(*status));
  if (op->shm_lost) {
    // The server no longer holds our region: retried, in a message or
    // through the region attached meanwhile.
    *status = absl::UnavailableError(status->message());
  }
  if (absl::IsCancelled(*status)) {
    // A server that stops cancels the calls it has not answered within
    // its shutdown grace (ParameterServer::Shutdown); this client cancels
    // none of its own. Retried as for a server that is gone: a replica may
    // serve the slot now (a repeated push applies once).
    *status = absl::UnavailableError(status->message());
  }
  if (!IsRetryable(*status) || op->attempts >= options_.max_attempts)
    return false;
  if (op->kind == OpState::kPush && op->encoded && op->bf16.empty() &&
      op->shm != nullptr) {
    // The carried error moved on with this attempt's payload: the retry
    // sends the same bytes.
    op->bf16.assign(op->shm_slot.data,
                    plan_.chunks[op->chunk].numel * sizeof(uint16_t));
  }
  EndShmAttempt(op, *status);
  RetryLater(op, *status);
  return true;
}

void PsClient::Impl::Complete(const OpPtr& op, absl::Status status,
                              const grpc::ByteBuffer* response) {
  // (An answered attempt in the tensor region ends after ReadResponse.)
  if (op->tensors && !op->answered) EndTensorAttempt(op);
  if (AwaitsDetach(op)) {
    // The caller may reuse the op's bytes once it completes: not while a
    // server may still write or read them.
    absl::MutexLock lock(&mu_);
    parked_.push_back({op, std::move(status), *response});
    // The first time: the timer thread detaches at once. Later, its own
    // retries of the detach are spaced (detach_retry_).
    if (!op->parked) attach_wanted_ = true;
    op->parked = true;
    return;
  }
  uint64_t version = 0;
  int64_t min_clock = 0;
  if (status.ok()) status = ReadResponse(*op, *response, &version, &min_clock);
  EndShmAttempt(op, status);  // after ReadResponse read the pulled weights
  // Free the buffers now: the handle may outlive the op by a long time.
  op->bf16.clear();
  op->bf16.shrink_to_fit();
  op->sealed.clear();
  op->sealed.shrink_to_fit();
  op->Finish(std::move(status), version, min_clock);
  absl::MutexLock lock(&mu_);
  outstanding_--;
}

absl::Status PsClient::Impl::ReadResponse(const OpState& op,
                                          const grpc::ByteBuffer& response,
                                          uint64_t* version,
                                          int64_t* min_clock) {
  PayloadMessage message;
  if (op.kind == OpState::kPush) {
    v1::PushResponse resp;
    STRATA_RETURN_IF_ERROR(message.Parse(response, /*field=*/0, &resp));
    *version = resp.version();
    return absl::OkStatus();
  }
  v1::PullResponse resp;
  STRATA_RETURN_IF_ERROR(
      message.Parse(response, v1::PullResponse::kDataFieldNumber, &resp));
  const ChunkInfo& chunk = plan_.chunks[op.chunk];
  const v1::DType dtype = op.pull_dtype;
  if (dtype == v1::DTYPE_ONEBIT || dtype == v1::DTYPE_TOPK) {
    *version = resp.version();
    *min_clock = resp.min_clock();
    return ReadCompressedPull(op, resp, message);
  }
  const size_t want = chunk.numel * ElementBytes(dtype);
  if (op.tensors || op.bulk_payload) {
    // The server wrote the weights in place, or sent them on the bulk
    // plane (EndBulkAttempt waited for them: fp32 in op.dst, bf16 in
    // op.bf16).
    if (message.has_payload()) {
      return absl::DataLossError(absl::StrCat(
          "pull of chunk ", chunk.id, " returned its weights in the message, ",
          op.tensors ? "not in shared memory" : "not on the bulk plane"));
    }
    if (op.bulk_payload && dtype == v1::DTYPE_BF16) {
      Bf16ToFloat(reinterpret_cast<const uint16_t*>(op.bf16.data()), op.dst,
                  chunk.numel);
    }
    *version = resp.version();
    *min_clock = resp.min_clock();
    return absl::OkStatus();
  }
  const char* shm = op.shm ? op.shm_slot.data : nullptr;
  if (shm == nullptr && message.payload_size() != want) {
    return absl::DataLossError(absl::StrCat(
        "pull of chunk ", chunk.id, " returned ", message.payload_size(),
        " bytes for ", chunk.numel, " elements"));
  }
  if (shm != nullptr && message.has_payload()) {
    return absl::DataLossError(absl::StrCat(
        "pull of chunk ", chunk.id,
        " returned its weights in the message, not in shared memory"));
  }
  if (dtype == v1::DTYPE_BF16) {
    std::vector<uint16_t> raw;
    if (shm == nullptr) {
      raw.resize(chunk.numel);
      message.CopyPayload(raw.data());
    }
    Bf16ToFloat(shm ? reinterpret_cast<const uint16_t*>(shm) : raw.data(),
                op.dst, chunk.numel);
  } else if (shm != nullptr) {
    std::memcpy(op.dst, shm, want);  // the one copy: slot -> caller's buffer
  } else {
    message.CopyPayload(op.dst);  // the one copy: slices -> caller's buffer
  }
  *version = resp.version();
  *min_clock = resp.min_clock();
  return absl::OkStatus();
}

absl::Duration PsClient::Impl::Backoff(int attempts) const {
  absl::Duration backoff = options_.initial_backoff;
  for (int i = 1; i < attempts && backoff < options_.max_backoff; ++i)
    backoff *= 2;
  return std::min(backoff, options_.max_backoff);
}

void PsClient::Impl::RetryLater(const OpPtr& op, absl::Status why) {
  const absl::Duration backoff = Backoff(op->attempts);
  absl::MutexLock lock(&mu_);
  retries_.emplace(absl::Now() + backoff, op);
}

void PsClient::Impl::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time next = std::min(
        detach_retry_, retries_.empty() ? absl::Now() + absl::Milliseconds(100)
                                        : retries_.begin()->first);
    // Wake early for a stop, or for a retry due sooner than `next`.
    auto wake = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || attach_wanted_ ||
             (!retries_.empty() && retries_.begin()->first < next);
    };
    mu_.AwaitWithDeadline(absl::Condition(&wake), next);
    if ((attach_wanted_ || absl::Now() >= detach_retry_) && !stopping_) {
      attach_wanted_ = false;
      detach_retry_ = absl::InfiniteFuture();
      mu_.Unlock();
      AttachShm();
      mu_.Lock();
    }
    while (!retries_.empty() && retries_.begin()->first <= absl::Now()) {
      OpPtr op = retries_.begin()->second;
      retries_.erase(retries_.begin());
      queues_[op->slot].push(op);
      mu_.Unlock();
      Dispatch(op->slot);
      mu_.Lock();
    }
  }
}

absl::Status PsClient::Impl::RegisterModel(const ModelSpec& model) {
  STRATA_ASSIGN_OR_RETURN(v1::View view,
                          scheduler_->WaitForView(
                              [](const v1::View& v) {
                                if (v.shard_map().slots_size() == 0)
                                  return false;
                                for (const auto& s : v.shard_map().slots()) {
                                  if (s.address().empty()) return false;
                                }
                                return true;
                              },
                              options_.servers_timeout));
  if (plan_.chunks.empty()) {
    // Once: registering again (after a rollback, for a restarted server
    // that lacks the chunks) declares the same plan.
    std::vector<TensorSpec> tensors = model.tensors;
    AlignRows(model.groups, tensors);
    STRATA_ASSIGN_OR_RETURN(
        plan_, MakeChunkPlan(std::move(tensors), model.chunk_bytes));
    summed_tensors_ = SummedTensors(model.groups, plan_);
    model_ = model;
    num_slots_ = view.shard_map().slots_size();
    PlaceChunks(plan_, num_slots_);
    absl::MutexLock lock(&mu_);
    queues_.resize(num_slots_);
    in_flight_.assign(num_slots_, 0);
  }
  std::vector<v1::RegisterChunksRequest> reqs(num_slots_);
  for (auto& r : reqs) {
    r.set_member_id(scheduler_->member_id());
    for (const auto& g : model.groups) *r.add_groups() = g;
  }
  for (const ChunkInfo& c : plan_.chunks) {
    const TensorSpec& t = plan_.tensors[c.tensor];
    v1::ChunkSpec* s = reqs[c.shard].add_chunks();
    s->set_chunk_id(c.id);
    s->set_tensor(t.name);
    s->set_index(c.index);
    s->set_offset(c.offset);
    s->set_numel(c.numel);
    s->set_group(t.group);
    if (c.tensor < static_cast<int>(model.inits.size()))
      *s->mutable_init() = model.inits[c.tensor];
    for (int64_t d : t.shape) s->add_tensor_shape(d);
  }
  for (int slot = 0; slot < num_slots_; ++slot) {
    absl::Status last;
    // Retried for as long as the servers may take to come up: a slot
    // whose job wants replicas answers UNAVAILABLE until they joined.
    const absl::Time give_up = absl::Now() + options_.servers_timeout;
    for (int attempt = 0;
         attempt < options_.max_attempts || absl::Now() < give_up; ++attempt) {
      STRATA_ASSIGN_OR_RETURN(auto* stub, StubForSlot(slot));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      v1::RegisterChunksResponse resp;
      last = FromGrpcStatus(stub->RegisterChunks(&ctx, reqs[slot], &resp));
      if (!IsRetryable(last)) break;
      absl::SleepFor(std::min(options_.initial_backoff * (attempt + 1),
                              options_.max_backoff));
    }
    if (!last.ok()) {
      return absl::Status(last.code(),
                          absl::StrCat("registering the model on shard ", slot,
                                       ": ", last.message()));
    }
  }
  AttachShm();
  return CheckWire();
}

void PsClient::Impl::EncodeBf16(OpState& op, uint16_t* out) {
  const int64_t n = static_cast<int64_t>(plan_.chunks[op.chunk].numel);
  if (options_.push_error_feedback) {
    push_errors_.Encode(op.chunk, op.grad, out, n);
    op.encoded = true;
  } else {
    FloatToBf16(op.grad, out, static_cast<size_t>(n));
  }
}

void PsClient::Impl::CountDeferred(int64_t step, int slot) {
  absl::MutexLock lock(&deferred_mu_);
  std::vector<uint32_t>& counts = deferred_[step];
  counts.resize(num_slots_);
  counts[slot]++;
}

std::vector<uint32_t> PsClient::Impl::TakeDeferred(int64_t step) {
  absl::MutexLock lock(&deferred_mu_);
  std::vector<uint32_t> counts(num_slots_);
  if (auto it = deferred_.find(step); it != deferred_.end())
    counts = std::move(it->second);
  deferred_.erase(deferred_.begin(), deferred_.upper_bound(step));
  return counts;
}

void PsClient::Impl::ForgetDeferred(int64_t step) {
  absl::MutexLock lock(&deferred_mu_);
  deferred_.erase(deferred_.lower_bound(step), deferred_.end());
}

}  // namespace strata
