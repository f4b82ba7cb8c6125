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
  if (!replicas_->primary() || !replicas_->IsJoining(req.member_id())) {
    return absl::UnavailableError(absl::StrCat(
        "member ", req.member_id(), " is not joining a slot member ", self,
        " is the primary of, in its view: retry"));
  }
  v1::CatchUpResponse resp;
  const absl::Time start = absl::Now();
  STRATA_RETURN_IF_ERROR(
      replicas_->WhilePaused([&]() { return SendState(req, self, &resp); }));
  resp.set_paused_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  spdlog::info(
      "strata server: caught member {} up: {} chunks, {} bytes, changes "
      "paused {:.3f} s",
      req.member_id(), resp.chunks(), resp.bytes(), resp.paused_seconds());
  return resp;
}

absl::Status ReplicaCatchUp::SendState(const v1::CatchUpRequest& req,
                                       uint64_t self,
                                       v1::CatchUpResponse* resp) {
  auto stub = Dial(*security_, req.address());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
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
            absl::StrCat("joining member ", req.member_id(), " at ",
                         req.address(), " stopped taking the state"));
      },
      &bytes);
  if (sent.ok()) writer->WritesDone();
  // The joiner's own answer says more than a broken stream.
  const absl::Status answer = FromGrpcStatus(writer->Finish());
  STRATA_RETURN_IF_ERROR(answer);
  STRATA_RETURN_IF_ERROR(sent);
  resp->set_chunks(chunks);
  resp->set_bytes(bytes);
  // Every change from now on goes to it too.
  return replicas_->AddJoiner(req.member_id(), req.address());
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
  return shard_->InstallState(
      header, [&](v1::ChunkState* chunk) -> absl::StatusOr<bool> {
        if (!read(&part)) return false;
        if (!part.has_chunk()) {
          return absl::InvalidArgumentError("a second header in one state");
        }
        *chunk = std::move(*part.mutable_chunk());
        return true;
      });
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
    v1::CatchUpResponse resp;
    result = FromGrpcStatus(Dial(*security_, replicas_->primary_address())
                                ->CatchUp(&ctx, req, &resp));
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
