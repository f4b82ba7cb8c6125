#include "client/ps_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <queue>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cluster/scheduler_client.h"
#include "common/bf16.h"
#include "common/status.h"
#include "common/wire.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {

// One push or pull, across its attempts.
namespace ps_client_internal {

struct OpState {
  enum Kind { kPush, kPull } kind;
  int chunk = 0;
  int slot = 0;
  int priority = 0;
  uint64_t seq = 0;  // submission order, ties broken first-come first-served
  int attempts = 0;
  const float* grad = nullptr;
  float* dst = nullptr;
  int64_t step = 0;  // push: step; pull: clock
  uint64_t samples = 0;
  uint64_t min_version = 0;
  StepStamp stamp;
  std::string bf16;  // a push's payload converted to bf16, when configured

  mutable absl::Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;
  int64_t min_clock ABSL_GUARDED_BY(mu) = 0;

  void Finish(absl::Status s, uint64_t v, int64_t mc) {
    absl::MutexLock lock(&mu);
    status = std::move(s);
    version = v;
    min_clock = mc;
    finished = true;
  }
};

}  // namespace ps_client_internal

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

using OpPtrAlias = std::shared_ptr<OpState>;

namespace {

using OpPtr = OpPtrAlias;

struct ByPriority {
  bool operator()(const OpPtr& a, const OpPtr& b) const {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->seq > b->seq;
  }
};

size_t ElementBytes(v1::DType d) { return d == v1::DTYPE_BF16 ? 2 : 4; }

}  // namespace

// One attempt of an op on the wire. A gRPC context serves one call, and
// must outlive everything gRPC does with the call; the reactor API allows
// freeing it in OnDone, so each attempt owns its context and buffers and
// deletes itself there, whoever else still holds the op.
class PsClient::Attempt : public grpc::ClientUnaryReactor {
 public:
  Attempt(Impl* client, OpPtrAlias op) : client_(client), op_(std::move(op)) {}
  void OnDone(const grpc::Status& status) override;

  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;

 private:
  Impl* client_;
  OpPtrAlias op_;
};

class PsClient::Impl {
 public:
  Impl(PsClientOptions options, SchedulerClient* scheduler)
      : options_(std::move(options)), scheduler_(scheduler) {
    timer_ = std::thread([this] { TimerLoop(); });
  }

  ~Impl() {
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

  // Called by an attempt as its very last access to this object.
  void AttemptFinished() {
    live_attempts_.fetch_sub(1, std::memory_order_release);
  }

  absl::Status RegisterModel(const ModelSpec& model);
  OpHandle Submit(OpPtr op);
  // The typed stub (control calls) and the generic one (push and pull,
  // whose payloads bypass protobuf's copies) of one server.
  struct Stubs {
    std::unique_ptr<v1::ParameterServer::Stub> typed;
    std::unique_ptr<grpc::GenericStub> generic;
  };
  absl::StatusOr<Stubs*> StubsForSlot(int slot);
  absl::StatusOr<v1::ParameterServer::Stub*> StubForSlot(int slot) {
    STRATA_ASSIGN_OR_RETURN(Stubs * stubs, StubsForSlot(slot));
    return stubs->typed.get();
  }

  PsClientOptions options_;
  SchedulerClient* scheduler_;
  ChunkPlan plan_;
  int num_slots_ = 0;

 public:
  // Called by an attempt when its call ended.
  void OnDone(const OpPtr& op, const grpc::Status& status,
              const grpc::ByteBuffer& response);

 private:
  void Dispatch(int slot);
  void Issue(const OpPtr& op);
  void Complete(const OpPtr& op, absl::Status status,
                const grpc::ByteBuffer* response);
  absl::Status ReadResponse(const OpState& op, const grpc::ByteBuffer& response,
                            uint64_t* version, int64_t* min_clock);
  void RetryLater(const OpPtr& op, absl::Status why);
  void TimerLoop();

  absl::Mutex mu_;
  std::vector<std::priority_queue<OpPtr, std::vector<OpPtr>, ByPriority>>
      queues_ ABSL_GUARDED_BY(mu_);
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // Attempts created and not yet past their last access (AttemptFinished).
  std::atomic<int> live_attempts_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::multimap<absl::Time, OpPtr> retries_ ABSL_GUARDED_BY(mu_);
  std::thread timer_;

  absl::Mutex stub_mu_;
  // address -> stub; a restarted server at a new address gets a new one.
  absl::flat_hash_map<std::string, std::unique_ptr<Stubs>> stubs_
      ABSL_GUARDED_BY(stub_mu_);
};

absl::StatusOr<PsClient::Impl::Stubs*> PsClient::Impl::StubsForSlot(int slot) {
  const v1::View view = scheduler_->view();
  std::string address;
  for (const v1::ShardSlot& s : view.shard_map().slots()) {
    if (s.shard() == slot) address = s.address();
  }
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
    auto channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
    stubs = std::make_unique<Stubs>();
    stubs->typed = v1::ParameterServer::NewStub(channel);
    stubs->generic = std::make_unique<grpc::GenericStub>(channel);
  }
  return stubs.get();
}

OpHandle PsClient::Impl::Submit(OpPtr op) {
  {
    absl::MutexLock lock(&mu_);
    op->seq = next_seq_++;
    outstanding_++;
    queues_[op->slot].push(op);
  }
  Dispatch(op->slot);
  return PsClient::Handle(op);
}

void PsClient::Impl::Dispatch(int slot) {
  std::vector<OpPtr> ready;
  {
    absl::MutexLock lock(&mu_);
    auto& q = queues_[slot];
    while (!q.empty() && in_flight_[slot] < options_.max_in_flight_per_server) {
      ready.push_back(q.top());
      q.pop();
      in_flight_[slot]++;
    }
  }
  for (const OpPtr& op : ready) Issue(op);
}

void PsClient::Impl::Issue(const OpPtr& op) {
  op->attempts++;
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
  const ChunkInfo& chunk = plan_.chunks[op->chunk];
  static const std::string kPush = "/strata.v1.ParameterServer/Push";
  static const std::string kPull = "/strata.v1.ParameterServer/Pull";
  if (op->kind == OpState::kPush) {
    v1::PushRequest header;
    header.set_member_id(scheduler_->member_id());
    header.set_epoch(op->stamp.epoch != 0 ? op->stamp.epoch : view.epoch());
    header.set_first_sample(op->stamp.first_sample);
    header.set_generation(op->stamp.generation.value_or(view.generation()));
    header.set_chunk_id(chunk.id);
    header.set_step(op->step);
    header.set_num_samples(op->samples);
    header.set_dtype(options_.push_dtype);
    // The payload slice points at the caller's buffer (no copy); the
    // caller keeps it alive until the handle is done.
    const void* payload = op->grad;
    size_t bytes = chunk.numel * 4;
    if (options_.push_dtype == v1::DTYPE_BF16) {
      if (op->bf16.empty()) {
        op->bf16.resize(chunk.numel * 2);
        FloatToBf16(op->grad, reinterpret_cast<uint16_t*>(op->bf16.data()),
                    chunk.numel);
      }
      payload = op->bf16.data();
      bytes = op->bf16.size();
    }
    attempt->request = SerializeWithPayload(
        header, v1::PushRequest::kDataFieldNumber, payload, bytes);
    (*stubs)->generic->PrepareUnaryCall(&attempt->ctx, kPush,
                                        grpc::StubOptions(), &attempt->request,
                                        &attempt->response, attempt);
  } else {
    v1::PullRequest req;
    req.set_member_id(scheduler_->member_id());
    req.set_chunk_id(chunk.id);
    req.set_clock(op->step);
    req.set_min_version(op->min_version);
    req.set_epoch(op->stamp.epoch);
    req.set_generation(op->stamp.generation.value_or(view.generation()));
    req.set_dtype(options_.pull_dtype);
    grpc::Slice slice(req.SerializeAsString());
    attempt->request = grpc::ByteBuffer(&slice, 1);
    (*stubs)->generic->PrepareUnaryCall(&attempt->ctx, kPull,
                                        grpc::StubOptions(), &attempt->request,
                                        &attempt->response, attempt);
  }
  attempt->StartCall();
}

void PsClient::Attempt::OnDone(const grpc::Status& status) {
  PsClient::Impl* client = client_;
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
  {
    absl::MutexLock lock(&mu_);
    in_flight_[op->slot]--;
  }
  const bool retry =
      IsRetryable(status) && op->attempts < options_.max_attempts;
  if (retry) RetryLater(op, status);
  Dispatch(op->slot);
  // Last: once the op completes, the destructor may start (it then waits
  // for the calling attempt's AttemptFinished).
  if (!retry) Complete(op, status, &response);
}

void PsClient::Impl::Complete(const OpPtr& op, absl::Status status,
                              const grpc::ByteBuffer* response) {
  uint64_t version = 0;
  int64_t min_clock = 0;
  if (status.ok()) status = ReadResponse(*op, *response, &version, &min_clock);
  // Free the buffers now: the handle may outlive the op by a long time.
  op->bf16.clear();
  op->bf16.shrink_to_fit();
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
  if (message.payload_size() !=
      chunk.numel * ElementBytes(options_.pull_dtype)) {
    return absl::DataLossError(absl::StrCat(
        "pull of chunk ", chunk.id, " returned ", message.payload_size(),
        " bytes for ", chunk.numel, " elements"));
  }
  if (options_.pull_dtype == v1::DTYPE_BF16) {
    std::vector<uint16_t> raw(chunk.numel);
    message.CopyPayload(raw.data());
    Bf16ToFloat(raw.data(), op.dst, chunk.numel);
  } else {
    message.CopyPayload(op.dst);  // the one copy: slices -> caller's buffer
  }
  *version = resp.version();
  *min_clock = resp.min_clock();
  return absl::OkStatus();
}

void PsClient::Impl::RetryLater(const OpPtr& op, absl::Status why) {
  absl::Duration backoff = options_.initial_backoff;
  for (int i = 1; i < op->attempts && backoff < options_.max_backoff; ++i)
    backoff *= 2;
  backoff = std::min(backoff, options_.max_backoff);
  absl::MutexLock lock(&mu_);
  retries_.emplace(absl::Now() + backoff, op);
}

void PsClient::Impl::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time next = retries_.empty()
                                ? absl::Now() + absl::Milliseconds(100)
                                : retries_.begin()->first;
    // Wake early for a stop, or for a retry due sooner than `next`.
    auto wake = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || (!retries_.empty() && retries_.begin()->first < next);
    };
    mu_.AwaitWithDeadline(absl::Condition(&wake), next);
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
    STRATA_ASSIGN_OR_RETURN(plan_,
                            MakeChunkPlan(model.tensors, model.chunk_bytes));
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
    for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
      STRATA_ASSIGN_OR_RETURN(auto* stub, StubForSlot(slot));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      v1::RegisterChunksResponse resp;
      last = FromGrpcStatus(stub->RegisterChunks(&ctx, reqs[slot], &resp));
      if (!IsRetryable(last)) break;
      absl::SleepFor(options_.initial_backoff * (attempt + 1));
    }
    if (!last.ok()) {
      return absl::Status(last.code(),
                          absl::StrCat("registering the model on shard ", slot,
                                       ": ", last.message()));
    }
  }
  return absl::OkStatus();
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
  if (options.max_attempts < 1)
    return absl::InvalidArgumentError("max_attempts must be >= 1");
  return std::unique_ptr<PsClient>(
      new PsClient(std::make_unique<Impl>(std::move(options), scheduler)));
}

absl::Status PsClient::RegisterModel(const ModelSpec& model) {
  return impl_->RegisterModel(model);
}
const ChunkPlan& PsClient::plan() const { return impl_->plan_; }

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

OpHandle PsClient::Push(int chunk, const float* grad, int64_t step,
                        uint64_t samples, int priority, StepStamp stamp) {
  absl::StatusOr<OpPtr> op = NewOp(OpState::kPush, chunk, priority);
  if (!op.ok()) return FailedOp(op.status());
  (*op)->stamp = stamp;
  (*op)->grad = grad;
  (*op)->step = step;
  (*op)->samples = samples;
  return impl_->Submit(*op);
}

OpHandle PsClient::Pull(int chunk, float* dst, int64_t clock,
                        uint64_t min_version, int priority, StepStamp stamp) {
  absl::StatusOr<OpPtr> op = NewOp(OpState::kPull, chunk, priority);
  if (!op.ok()) return FailedOp(op.status());
  (*op)->stamp = stamp;
  (*op)->dst = dst;
  (*op)->step = clock;
  (*op)->min_version = min_version;
  return impl_->Submit(*op);
}

std::vector<OpHandle> PsClient::PerChunk(
    int tensor, absl::FunctionRef<OpHandle(int, uint64_t)> op) {
  const ChunkPlan& plan = impl_->plan_;
  if (absl::Status s = CheckIndex("tensor", tensor, plan.chunks_of.size());
      !s.ok()) {
    return {FailedOp(s)};
  }
  std::vector<OpHandle> ops;
  ops.reserve(plan.chunks_of[tensor].size());
  for (int c : plan.chunks_of[tensor]) {
    ops.push_back(op(c, plan.chunks[c].offset));
  }
  return ops;
}

std::vector<OpHandle> PsClient::PushTensorAsync(int tensor, const float* grad,
                                                int64_t step, uint64_t samples,
                                                int priority, StepStamp stamp) {
  return PerChunk(tensor, [&](int chunk, uint64_t offset) {
    return Push(chunk, grad + offset, step, samples, priority, stamp);
  });
}

std::vector<OpHandle> PsClient::PullTensorAsync(int tensor, float* dst,
                                                int64_t clock,
                                                uint64_t min_version,
                                                int priority, StepStamp stamp) {
  return PerChunk(tensor, [&](int chunk, uint64_t offset) {
    return Pull(chunk, dst + offset, clock, min_version, priority, stamp);
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
