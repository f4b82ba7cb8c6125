#include "server/replica_forwarder.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
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
  std::vector<Backup> backups, joining;
  uint64_t primary = 0;
  std::string primary_address;
  for (const v1::ShardSlot& s : view.shard_map().slots()) {
    if (s.shard() != slot_) continue;
    primary = s.member_id();
    primary_address = s.address();
    for (const v1::ShardReplica& r : s.joining()) {
      joining.push_back(Backup{r.member_id(), r.address(), nullptr});
    }
    if (primary != self || self == 0) continue;
    for (const v1::ShardReplica& r : s.backups()) {
      backups.push_back(Backup{r.member_id(), r.address(), nullptr});
    }
  }
  const bool is_primary = primary == self && self != 0;
  const int wanted = static_cast<int>(view.replicas()) - 1;
  absl::MutexLock lock(&mu_);
  for (Backup& b : backups) b.stubs = StubsFor(b.address);
  // A joiner caught up from here stays a target while the view lists it
  // as joining; once listed as a backup it is one of those.
  std::vector<Backup> joined;
  if (is_primary) {
    for (const Backup& j : joined_) {
      if (Contains(joining, j.member_id)) joined.push_back(j);
    }
  }
  // Forwards to a target the view no longer has end now (UNAVAILABLE: the
  // client retries, and the retry goes on without it), not at their
  // deadline: a backup whose host vanished answers nothing.
  for (auto& [member, calls] : in_flight_) {
    if (!Contains(backups, member) && !Contains(joining, member)) {
      for (grpc::ClientContext* ctx : calls) ctx->TryCancel();
    }
  }
  const bool self_joining = self != 0 && Contains(joining, self);
  if (view.replicas() > 1 &&
      (!known_ || is_primary != primary_ || self_joining != self_joining_ ||
       primary != primary_id_ || backups.size() != backups_.size())) {
    if (is_primary) {
      spdlog::info(
          "strata server: slot {} primary, forwarding to {} "
          "backup(s)",
          slot_, backups.size());
    } else if (self_joining) {
      spdlog::info("strata server: slot {} joining, catching up from member {}",
                   slot_, primary);
    } else {
      spdlog::info("strata server: slot {} backup of member {}", slot_,
                   primary);
    }
  }
  self_joining_ = self_joining;
  known_ = view.replicas() > 1;
  self_ = self;
  primary_id_ = primary;
  primary_address_ = primary_address;
  epoch_ = view.epoch();
  generation_ = view.generation();
  primary_ = is_primary;
  backups_ = std::move(backups);
  joining_ = std::move(joining);
  joined_ = std::move(joined);
  missing_ = is_primary && static_cast<int>(backups_.size()) < wanted;
}

bool ReplicaForwarder::Contains(const std::vector<Backup>& list,
                                uint64_t member) {
  return std::any_of(list.begin(), list.end(), [member](const Backup& b) {
    return b.member_id == member;
  });
}

bool ReplicaForwarder::primary() const {
  absl::MutexLock lock(&mu_);
  return primary_;
}

uint64_t ReplicaForwarder::primary_id() const {
  absl::MutexLock lock(&mu_);
  return primary_id_;
}

std::string ReplicaForwarder::primary_address() const {
  absl::MutexLock lock(&mu_);
  return primary_address_;
}

bool ReplicaForwarder::self_joining() const {
  absl::MutexLock lock(&mu_);
  return self_joining_;
}

absl::Status ReplicaForwarder::AddJoiner(uint64_t member) {
  absl::MutexLock lock(&mu_);
  auto it =
      std::find_if(joining_.begin(), joining_.end(),
                   [member](const Backup& b) { return b.member_id == member; });
  if (!primary_ || it == joining_.end()) {
    return absl::UnavailableError(
        absl::StrCat("member ", member, " is not joining slot ", slot_,
                     " in this server's view (epoch ", epoch_, ")"));
  }
  if (!Contains(joined_, member))
    joined_.push_back(Backup{member, it->address, StubsFor(it->address)});
  return absl::OkStatus();
}

std::string ReplicaForwarder::JoiningAddress(uint64_t member) const {
  absl::MutexLock lock(&mu_);
  for (const Backup& b : joining_) {
    if (b.member_id == member) return b.address;
  }
  return "";
}

uint64_t ReplicaForwarder::view_generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void ReplicaForwarder::Track(uint64_t member, grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) ctx->TryCancel();
  in_flight_[member].insert(ctx);
}

void ReplicaForwarder::Untrack(uint64_t member, grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(member);
  if (it == in_flight_.end()) return;
  it->second.erase(ctx);
  if (it->second.empty()) in_flight_.erase(it);
}

void ReplicaForwarder::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (auto& [member, calls] : in_flight_) {
    for (grpc::ClientContext* ctx : calls) ctx->TryCancel();
  }
}

absl::Status ReplicaForwarder::WhilePaused(
    absl::FunctionRef<absl::Status()> fn) {
  absl::MutexLock lock(&hold_);
  return fn();
}

absl::Status ReplicaForwarder::Admit(uint64_t forwarded_by) const {
  absl::MutexLock lock(&mu_);
  if (forwarded_by == 0) {
    if (!known_ || primary_) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "this server is a backup of slot ", slot_, " (its primary is member ",
        primary_id_, " in view epoch ", epoch_, "): retry at the primary"));
  }
  if (known_ && !primary_ && forwarded_by == primary_id_)
    return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "a change forwarded by member ", forwarded_by, ", which is not slot ",
      slot_, "'s primary in this server's view (epoch ", epoch_, ", primary ",
      primary_id_, ")"));
}

bool ReplicaForwarder::missing_backups() const {
  absl::MutexLock lock(&mu_);
  return missing_;
}

bool ReplicaForwarder::forwarding() const {
  absl::MutexLock lock(&mu_);
  return !backups_.empty() || !joined_.empty();
}

uint64_t ReplicaForwarder::forwarded() const {
  absl::MutexLock lock(&mu_);
  return forwarded_;
}

uint64_t ReplicaForwarder::Self() const {
  absl::MutexLock lock(&mu_);
  return self_;
}

std::vector<ReplicaForwarder::Backup> ReplicaForwarder::Backups() const {
  absl::MutexLock lock(&mu_);
  std::vector<Backup> all = backups_;
  all.insert(all.end(), joined_.begin(), joined_.end());
  return all;
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
absl::Status ReplicaForwarder::Each(Call call, bool every,
                                    absl::Duration timeout) {
  const std::vector<Backup> backups = Backups();
  if (backups.empty()) return absl::OkStatus();
  absl::Status first;
  {
    absl::MutexLock lock(&mu_);
    forwarded_ += backups.size();
  }
  for (const Backup& b : backups) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(
        absl::Now() + (timeout == absl::ZeroDuration() ? timeout_ : timeout)));
    Track(b.member_id, &ctx);
    const grpc::Status status = call(*b.stubs, ctx);
    Untrack(b.member_id, &ctx);
    const absl::Status s = FromBackup(b, status);
    if (s.ok()) continue;
    if (!every) return s;
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status ReplicaForwarder::Push(const grpc::ByteBuffer& original) {
  static const std::string kPush = "/strata.v1.ParameterServer/Push";
  // The request as it came, with forwarded_by appended: of a field given
  // twice, protobuf keeps the last.
  v1::PushRequest mark;
  mark.set_forwarded_by(Self());
  std::vector<grpc::Slice> slices;
  if (!original.Dump(&slices).ok()) {
    return absl::InternalError("cannot read the push to forward");
  }
  slices.emplace_back(mark.SerializeAsString());
  const grpc::ByteBuffer request(slices.data(), slices.size());
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

absl::Status ReplicaForwarder::Commit(const v1::CommitRequest& original) {
  v1::CommitRequest req = original;
  req.set_forwarded_by(Self());
  return Each([&req](Stubs& stubs, grpc::ClientContext& ctx) {
    v1::CommitResponse resp;
    return stubs.typed->Commit(&ctx, req, &resp);
  });
}

absl::Status ReplicaForwarder::Reduce(const v1::ReduceRequest& original) {
  v1::ReduceRequest req = original;
  req.set_forwarded_by(Self());
  return Each([&req](Stubs& stubs, grpc::ClientContext& ctx) {
    v1::ReduceResponse resp;
    return stubs.typed->Reduce(&ctx, req, &resp);
  });
}

absl::Status ReplicaForwarder::Snapshot(const v1::SnapshotRequest& req) {
  // Every backup, however long its write takes (the caller's deadline).
  return Each(
      [&req](Stubs& stubs, grpc::ClientContext& ctx) {
        v1::SnapshotResponse resp;
        return stubs.typed->Snapshot(&ctx, req, &resp);
      },
      /*every=*/true, absl::Minutes(5));
}

absl::Status ReplicaForwarder::Register(
    const v1::RegisterChunksRequest& original) {
  v1::RegisterChunksRequest req = original;
  req.set_forwarded_by(Self());
  return Each([&req](Stubs& stubs, grpc::ClientContext& ctx) {
    v1::RegisterChunksResponse resp;
    return stubs.typed->RegisterChunks(&ctx, req, &resp);
  });
}

}  // namespace strata
