#include "server/replica_forwarder.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace strata {

ReplicaForwarder::ReplicaForwarder(int slot,
                                   std::shared_ptr<const Security> security,
                                   absl::Duration timeout)
    : slot_(slot), security_(std::move(security)), timeout_(timeout) {}

void ReplicaForwarder::UpdateView(const v1::View& view, uint64_t self) {
  std::vector<Backup> backups;
  uint64_t primary = 0;
  for (const v1::ShardSlot& s : view.shard_map().slots()) {
    if (s.shard() != slot_) continue;
    primary = s.member_id();
    if (primary != self || self == 0) continue;
    for (const v1::ShardReplica& r : s.backups()) {
      backups.push_back(Backup{r.member_id(), r.address(), nullptr});
    }
  }
  const bool is_primary = primary == self && self != 0;
  const int wanted = static_cast<int>(view.replicas()) - 1;
  absl::MutexLock lock(&mu_);
  for (Backup& b : backups) b.stubs = StubsFor(b.address);
  if (view.replicas() > 1 && (!known_ || is_primary != primary_ ||
                              backups.size() != backups_.size())) {
    if (is_primary) {
      spdlog::info(
          "strata server: slot {} primary, forwarding to {} "
          "backup(s)",
          slot_, backups.size());
    } else {
      spdlog::info("strata server: slot {} backup of member {}", slot_,
                   primary);
    }
  }
  known_ = view.replicas() > 1;
  primary_ = is_primary;
  backups_ = std::move(backups);
  missing_ = is_primary && static_cast<int>(backups_.size()) < wanted;
}

bool ReplicaForwarder::missing_backups() const {
  absl::MutexLock lock(&mu_);
  return missing_;
}

bool ReplicaForwarder::forwarding() const {
  absl::MutexLock lock(&mu_);
  return !backups_.empty();
}

uint64_t ReplicaForwarder::forwarded() const {
  absl::MutexLock lock(&mu_);
  return forwarded_;
}

std::vector<ReplicaForwarder::Backup> ReplicaForwarder::Backups() const {
  absl::MutexLock lock(&mu_);
  return backups_;
}

std::shared_ptr<ReplicaForwarder::Stubs> ReplicaForwarder::StubsFor(
    const std::string& address) {
  std::shared_ptr<Stubs>& stubs = stubs_[address];
  if (stubs == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    auto channel = security_->Dial(address, Role::kServer, args);
    stubs = std::make_shared<Stubs>();
    stubs->typed = v1::ParameterServer::NewStub(channel);
    stubs->generic = std::make_unique<grpc::GenericStub>(channel);
  }
  return stubs;
}

absl::Status ReplicaForwarder::FromBackup(const Backup& b,
                                          const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const absl::Status status = FromGrpcStatus(s);
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
      absl::IsCancelled(status)) {
    return absl::UnavailableError(absl::StrCat(
        "backup replica ", b.member_id, " at ", b.address,
        " did not take the update (", status.message(),
        "); retry: the scheduler drops a dead backup within its lease"));
  }
  return status;
}

template <typename Call>
absl::Status ReplicaForwarder::Each(Call call) {
  const std::vector<Backup> backups = Backups();
  if (backups.empty()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    forwarded_ += backups.size();
  }
  for (const Backup& b : backups) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    STRATA_RETURN_IF_ERROR(FromBackup(b, call(*b.stubs, ctx)));
  }
  return absl::OkStatus();
}

absl::Status ReplicaForwarder::Push(const grpc::ByteBuffer& request) {
  static const std::string kPush = "/strata.v1.ParameterServer/Push";
  return Each([&request](Stubs& stubs, grpc::ClientContext& ctx) {
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    stubs.generic->UnaryCall(&ctx, kPush, grpc::StubOptions(), &request,
                             &response, [&](grpc::Status s) {
                               status = std::move(s);
                               done.Notify();
                             });
    done.WaitForNotification();
    return status;
  });
}

absl::Status ReplicaForwarder::Commit(const v1::CommitRequest& req) {
  return Each([&req](Stubs& stubs, grpc::ClientContext& ctx) {
    v1::CommitResponse resp;
    return stubs.typed->Commit(&ctx, req, &resp);
  });
}

absl::Status ReplicaForwarder::Register(const v1::RegisterChunksRequest& req) {
  return Each([&req](Stubs& stubs, grpc::ClientContext& ctx) {
    v1::RegisterChunksResponse resp;
    return stubs.typed->RegisterChunks(&ctx, req, &resp);
  });
}

}  // namespace strata
