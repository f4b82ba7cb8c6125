#include "server/replica_catch_up.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "strata/v1/ps.grpc.pb.h"

namespace strata {
namespace {

// How long a whole transfer may take, and the wait between a joiner's
// tries while its primary cannot take it yet.
constexpr absl::Duration kTransferTimeout = absl::Minutes(30);
constexpr absl::Duration kRetryWait = absl::Milliseconds(200);

std::unique_ptr<v1::ParameterServer::Stub> Dial(const Security& security,
                                                const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return v1::ParameterServer::NewStub(
      security.Dial(address, Role::kServer, args));
}

bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsCancelled(s);
}

}  // namespace

ReplicaCatchUp::ReplicaCatchUp(Shard* shard, ReplicaForwarder* replicas,
                               std::shared_ptr<const Security> security)
    : shard_(shard), replicas_(replicas), security_(std::move(security)) {}

ReplicaCatchUp::~ReplicaCatchUp() { Stop(); }

absl::StatusOr<v1::CatchUpResponse> ReplicaCatchUp::Serve(
    const v1::CatchUpRequest& req) {
  const uint64_t self = replicas_->self();
  // Sent to the address the view gives, not the one the request names.
  const std::string address = replicas_->JoiningAddress(req.member_id());
  if (!replicas_->primary() || address.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "member ", req.member_id(), " is not joining a slot member ", self,
        " is the primary of, in its view: retry"));
  }
  v1::CatchUpResponse resp;
  const absl::Time start = absl::Now();
  STRATA_RETURN_IF_ERROR(replicas_->WhilePaused(
      [&]() { return SendState(req.member_id(), address, self, &resp); }));
  resp.set_paused_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  spdlog::info(
      "strata server: caught member {} up: {} chunks, {} bytes, changes "
      "paused {:.3f} s",
      req.member_id(), resp.chunks(), resp.bytes(), resp.paused_seconds());
  return resp;
}

absl::Status ReplicaCatchUp::SendState(uint64_t member,
                                       const std::string& address,
                                       uint64_t self,
                                       v1::CatchUpResponse* resp) {
  auto stub = Dial(*security_, address);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
  // Ends when the view drops the joiner, or this server stops: the pause
  // does not outlast the joiner.
  replicas_->Track(member, &ctx);
  v1::InstallStateResponse installed;
  std::unique_ptr<grpc::ClientWriter<v1::ShardStatePart>> writer =
      stub->InstallState(&ctx, &installed);
  uint64_t chunks = 0, bytes = 0;
  absl::Status sent = shard_->ExportState(
      self,
      [&](v1::ShardStatePart& part) {
        if (part.has_chunk()) ++chunks;
        if (writer->Write(part)) return absl::OkStatus();
        return absl::UnavailableError(
            absl::StrCat("joining member ", member, " at ", address,
                         " stopped taking the state"));
      },
      &bytes);
  if (sent.ok()) {
    writer->WritesDone();
  } else {
    ctx.TryCancel();  // the joiner must not wait for parts that never come
  }
  // The joiner's own answer says more than a broken stream.
  const absl::Status answer = FromGrpcStatus(writer->Finish());
  replicas_->Untrack(member, &ctx);
  STRATA_RETURN_IF_ERROR(sent);
  STRATA_RETURN_IF_ERROR(answer);
  resp->set_chunks(chunks);
  resp->set_bytes(bytes);
  // Every change from now on goes to it too.
  return replicas_->AddJoiner(member);
}

absl::StatusOr<uint64_t> ReplicaCatchUp::Install(PartReader read) {
  v1::ShardStatePart part;
  if (!read(&part) || !part.has_header()) {
    return absl::InvalidArgumentError("a shard's state begins with its header");
  }
  const v1::ShardStateHeader header = std::move(*part.mutable_header());
  if (!replicas_->self_joining()) {
    return absl::FailedPreconditionError(
        "this server is not joining a slot in its view");
  }
  if (header.from_member() != replicas_->primary_id()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state from member ", header.from_member(),
        ", which is not this slot's primary in this server's view (member ",
        replicas_->primary_id(), ")"));
  }
  if (header.generation() < replicas_->view_generation()) {
    return absl::UnavailableError(absl::StrCat(
        "the primary's state is of rollback generation ", header.generation(),
        ", older than this server's view's (", replicas_->view_generation(),
        "): retry once it rolled back"));
  }
  // No forward of an earlier attempt may apply while the state is replaced.
  absl::StatusOr<uint64_t> installed;
  replicas_
      ->WhilePaused([&]() {
        installed = shard_->InstallState(
            header, [&](v1::ShardStatePart* next) -> absl::StatusOr<bool> {
              if (!read(next)) return false;
              if (next->has_header()) {
                return absl::InvalidArgumentError(
                    "a second header in one state");
              }
              return true;
            });
        return installed.status();
      })
      .IgnoreError();
  if (installed.ok()) {
    absl::MutexLock lock(&mu_);
    installed_ = true;
  }
  return installed;
}

bool ReplicaCatchUp::installed() {
  absl::MutexLock lock(&mu_);
  return installed_;
}

void ReplicaCatchUp::OnView(const Joiner& joiner) {
  if (!replicas_->self_joining()) return;
  if (replicas_->primary_id() == 0) {
    joiner.fail(absl::UnavailableError(
        "this server's slot lost its primary before this server caught up "
        "from it: it holds nothing to serve; start it again"));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (running_ || stopping_ || caught_up_) return;
  running_ = true;
  if (thread_.joinable()) thread_.join();  // a finished one
  thread_ = std::thread([this, joiner] { Run(joiner); });
}

void ReplicaCatchUp::Stop() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (call_ != nullptr) call_->TryCancel();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

bool ReplicaCatchUp::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void ReplicaCatchUp::Run(Joiner joiner) {
  absl::Status result = absl::CancelledError("stopping");
  uint64_t primary = 0;
  while (!Stopping()) {
    primary = replicas_->primary_id();
    if (primary == 0 || !replicas_->self_joining()) break;  // OnView decides
    v1::CatchUpRequest req;
    req.set_member_id(replicas_->self());
    req.set_address(joiner.address);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      call_ = &ctx;  // Stop cancels it
    }
    v1::CatchUpResponse resp;
    result = FromGrpcStatus(Dial(*security_, replicas_->primary_address())
                                ->CatchUp(&ctx, req, &resp));
    {
      absl::MutexLock lock(&mu_);
      call_ = nullptr;
    }
    if (result.ok()) {
      spdlog::info(
          "strata server: installed the state of member {}: {} chunks, {} "
          "bytes (its changes paused {:.3f} s)",
          primary, resp.chunks(), resp.bytes(), resp.paused_seconds());
      break;
    }
    if (!Retryable(result)) break;
    spdlog::info("strata server: catching up from member {}: {}; retrying",
                 primary, result.ToString());
    absl::SleepFor(kRetryWait);
  }
  // Told to the scheduler, which may be down a while.
  while (result.ok() && !Stopping()) {
    result = joiner.caught_up(primary);
    if (result.ok() || !Retryable(result)) break;
    absl::SleepFor(kRetryWait);
  }
  absl::MutexLock lock(&mu_);
  running_ = false;
  if (result.ok()) {
    caught_up_ = true;
  } else if (!stopping_ && !absl::IsCancelled(result)) {
    joiner.fail(result);
  }
}

}  // namespace strata
